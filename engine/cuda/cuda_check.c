/* cuda_check — see cuda_check.h. */
#include "engine/cuda/cuda_check.h"

#include <stdarg.h>
#include <stdio.h>

#include "base/log.h"

static __thread char cf_err_text[512];

int cf_check_cuda(cudaError_t e, const char *stmt, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    snprintf(cf_err_text, sizeof cf_err_text, "%s failed at %s:%d: %s (%s)", stmt, file, line,
             cudaGetErrorString(e), cudaGetErrorName(e));
    LOG_E("cuda", 0, "%s", cf_err_text);
    return -1;
}

static const char *cf_cublas_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
        return "CUBLAS_STATUS_(other)";
    }
}

int cf_check_cublas(cublasStatus_t s, const char *stmt, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    snprintf(cf_err_text, sizeof cf_err_text, "%s failed at %s:%d: %s (%d)", stmt, file, line,
             cf_cublas_name(s), (int)s);
    LOG_E("cuda", 0, "%s", cf_err_text);
    return -1;
}

int cf_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cf_err_text, sizeof cf_err_text, fmt, ap);
    va_end(ap);
    LOG_E("cuda", 0, "%s", cf_err_text);
    return -1;
}

const char *cf_last_error(void) {
    return cf_err_text;
}
