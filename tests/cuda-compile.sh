#!/usr/bin/env bash
# Compiles the CUDA backend (make CUDA=1) when nvcc is present, so that a compile break is
# caught on every machine of this kind, GPU or not. Without nvcc it says SKIP.
set -u
cd "$(dirname "$0")/.."
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [ ! -x "$nvcc" ] && ! command -v nvcc >/dev/null; then
    echo "SKIP cuda-compile: nvcc not found"
    exit 0
fi
ls engine/cuda/*.cu >/dev/null 2>&1 || { echo "SKIP cuda-compile: no CUDA sources yet"; exit 0; }
make --no-print-directory CUDA=1 WERROR=1 BUILD=build/cuda all tests || { echo "FAIL cuda-compile"; exit 1; }
echo "ok   cuda-compile (make CUDA=1)"
# The CUDA build's tests run too: test_cuda_host everywhere (the backend's host code against
# the CPU, on an emulated runtime), test_cuda, test_cuda_head, test_cuda_mmvq and test_cuda_fwd
# (they SKIP without a device).
fail=0
for t in test_cuda_host test_cuda test_cuda_head test_cuda_topk test_cuda_qkv test_cuda_mmvq \
         test_cuda_fwd; do
    GEMMAD_TEST_QUICK=1 T_TIMEOUT=600 build/cuda/tests/$t || { echo "FAIL $t (CUDA build)"; fail=1; }
done
exit $fail
