/*
 * cuda_check — error checking shared by the CUDA backend's C host code and its .cu launchers.
 *
 * CUDA_CHECK(stmt) evaluates a CUDA runtime call; on failure it logs the statement, file and
 * line with the runtime's message, remembers that text (cf_last_error) and yields -1, so
 * callers write `if (CUDA_CHECK(cudaMalloc(&p, n))) goto fail_x;`. It never exits.
 * CUBLAS_CHECK does the same for cuBLAS status codes.
 *
 * Threads: the remembered text is per thread, so concurrent contexts do not mix messages.
 */
#ifndef GEMMAD_CUDA_CHECK_H
#define GEMMAD_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when e == cudaSuccess, else logs "stmt failed at file:line: message" and returns -1. */
int cf_check_cuda(cudaError_t e, const char *stmt, const char *file, int line);
int cf_check_cublas(cublasStatus_t s, const char *stmt, const char *file, int line);
/* Records and logs a failure that is not a CUDA status (bad argument, unsupported type);
 * returns -1. */
int cf_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last failure text of this thread ("" when none). */
const char *cf_last_error(void);

#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(stmt) cf_check_cuda((stmt), #stmt, __FILE__, __LINE__)
#define CUBLAS_CHECK(stmt) cf_check_cublas((stmt), #stmt, __FILE__, __LINE__)
/* After a kernel launch: catches bad launch configurations at once. */
#define CUDA_CHECK_LAUNCH() cf_check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

#endif
