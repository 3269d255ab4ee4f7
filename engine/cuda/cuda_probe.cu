/* cuda_probe — see cuda_probe.h. */
#include "engine/cuda/cuda_probe.h"

#include <cuda_runtime.h>
#include <stdio.h>

__global__ void cf_probe_kernel(int *x) {
    if (x) *x = 1;
}

extern "C" int cf_probe(char *why, size_t whylen) {
    char tmp[8];
    if (!why || !whylen) {
        why = tmp;
        whylen = sizeof tmp;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, whylen, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    if (n < 1) {
        snprintf(why, whylen, "no CUDA device found");
        return 0;
    }
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        snprintf(why, whylen, "device 0: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    cudaFuncAttributes attr;
    e = cudaFuncGetAttributes(&attr, cf_probe_kernel);
    if (e != cudaSuccess) {
        snprintf(why, whylen,
                 "%s (sm_%d%d) cannot run this build's kernels: %s; rebuild with "
                 "CUDA_ARCH=%d%d",
                 prop.name, prop.major, prop.minor, cudaGetErrorString(e), prop.major, prop.minor);
        cudaGetLastError();
        return 0;
    }
    snprintf(why, whylen, "%s, sm_%d%d, %zu MiB", prop.name, prop.major, prop.minor,
             (size_t)(prop.totalGlobalMem >> 20));
    return 1;
}
