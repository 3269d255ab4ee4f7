/*
 * cuda_probe — can this process run this build's kernels? Checks for a driver, a device,
 * and a kernel image for device 0's architecture (a build for CUDA_ARCH=90 cannot run on
 * sm_80). Any thread; it initialises the CUDA runtime as a side effect.
 */
#ifndef GEMMAD_CUDA_PROBE_H
#define GEMMAD_CUDA_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when usable (why: "NVIDIA H200, sm_90, 143 GiB"), else 0 (why: the reason). */
int cf_probe(char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif
