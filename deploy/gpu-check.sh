#!/usr/bin/env bash
# gpu-check — the one script for a session that has an NVIDIA GPU: builds
# gemmad with CUDA=1 for the GPU's architecture, runs the CUDA tests (kernels against the CPU
# references, CUDA vs CPU logits, batched == solo), and benchmarks prefill and decode
# (1 and 64 concurrent sequences) on the CUDA backend against the CPU path. Everything it
# measures goes to $OUT (default build/gpu-check): summary.txt, build.txt, test_cuda.txt
# (test_cuda, then test_cuda_host),
# bench.jsonl, nvidia-smi.txt — at most 8 files, as the device tool returns.
#
#   bash deploy/gpu-check.sh --prepare     on a machine WITH network, before the GPU call:
#                                          downloads the build dependencies as .deb files
#                                          into build/gpu-deps and writes the synthetic
#                                          models into build/synthetic
#   bash deploy/gpu-check.sh [MODEL]       on the GPU machine (MODEL defaults to the bundled
#                                          models/gemma-3-270m-q4_k_m.gguf, else the largest
#                                          synthetic model)
#
# The device machine is bare and offline, and a call carries at most 64 MiB: carry
# build/gpu-deps and build/synthetic (the bundled 253 MB model does not fit; without it the
# bundled-model tests SKIP and the benchmark runs on a synthetic model, marked as such).
# Its system root is never written: the .deb files are unpacked under build/gpu-deps/root
# and found through CPATH / LIBRARY_PATH / LD_LIBRARY_PATH.
set -u -o pipefail
cd "$(dirname "$0")/.."

DEPS_DIR=build/gpu-deps
SYNTH_DIR=build/synthetic
DEBS="libmicrohttpd12 libmicrohttpd-dev libjansson4 libjansson-dev libuv1 libuv1-dev"

if [ "${1:-}" = "--prepare" ]; then
    mkdir -p "$DEPS_DIR"
    (cd "$DEPS_DIR" && apt-get download $DEBS) || { echo "gpu-check: apt-get download failed"; exit 1; }
    python3 tests/fixtures/synthetic/gen_synthetic.py --out "$SYNTH_DIR" || exit 1
    # Within the 64 MiB a device call carries: the f32 variants check the forward pass
    # tightly against the CPU (no activation quantization on either side), the q4_k ones
    # (Q4_K and Q8_0 tensors) the quantized paths; the rest is left here.
    rm -f "$SYNTH_DIR"/*-q8_0.gguf "$SYNTH_DIR"/gemma3-f32.gguf
    du -sh "$DEPS_DIR" "$SYNTH_DIR"
    echo "gpu-check: prepared; carry $DEPS_DIR and $SYNTH_DIR in the device call"
    exit 0
fi

OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
say() { echo "gpu-check: $*" | tee -a "$OUT/summary.txt"; }
JOBS=$(nproc 2>/dev/null || echo 4)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"

# ---- the machine ----------------------------------------------------------------------------
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || say "nvidia-smi failed (no driver?)"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
CUDA_ARCH=${CUDA_ARCH:-${cap:-90}}
say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1); CUDA_ARCH=$CUDA_ARCH; nvcc: $(nvcc --version 2>/dev/null | tail -1)"

# ---- dependencies: use the system's headers, else the carried .deb files --------------------
have_header() { echo "#include <$1>" | gcc -E -x c - >/dev/null 2>&1; }
missing=""
for h in microhttpd.h jansson.h uv.h; do have_header "$h" || missing="$missing $h"; done
if [ -n "$missing" ]; then
    if ls "$DEPS_DIR"/*.deb >/dev/null 2>&1; then
        root="$PWD/$DEPS_DIR/root"
        mkdir -p "$root"
        for f in "$DEPS_DIR"/*.deb; do dpkg -x "$f" "$root"; done
        inc="$root/usr/include"
        lib="$root/usr/lib/x86_64-linux-gnu"
        export CPATH="$inc:$inc/x86_64-linux-gnu${CPATH:+:$CPATH}"
        export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
        export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        say "headers missing ($missing ); using the carried packages in $DEPS_DIR"
    else
        say "headers missing ($missing ) and no $DEPS_DIR/*.deb: run deploy/gpu-check.sh --prepare where there is network and carry $DEPS_DIR"
    fi
fi

# ---- build ----------------------------------------------------------------------------------
B=${GPU_CHECK_BUILD:-build/cuda}
t0=$(date +%s)
mk() { make -j"$JOBS" CUDA=1 CUDA_HOME="$CUDA_HOME" CUDA_ARCH="$CUDA_ARCH" WERROR=1 BUILD=$B "$@"; }
if ! mk all tests >"$OUT/build.txt" 2>&1; then
    # A carried libmicrohttpd may need libraries this image lacks (gnutls): link without
    # resolving them and drop unused libraries, enough for the tests and benchmarks.
    say "full link failed; retrying with -Wl,--as-needed,--allow-shlib-undefined"
    if ! mk LDFLAGS="-Wl,--as-needed -Wl,--allow-shlib-undefined" all tests \
            >>"$OUT/build.txt" 2>&1; then
        say "build FAILED (see build.txt); last lines:"
        tail -25 "$OUT/build.txt" | tee -a "$OUT/summary.txt"
        exit 1
    fi
fi
[ -x $B/cuda-bench ] || { say "cuda-bench build FAILED (make CUDA=1 builds $B/cuda-bench)"; exit 1; }
say "built in $(( $(date +%s) - t0 )) s"

# ---- tests ----------------------------------------------------------------------------------
MODEL=${1:-${MODEL:-models/gemma-3-270m-q4_k_m.gguf}}
BENCH_MODEL=$MODEL
if [ ! -r "$MODEL" ]; then
    BENCH_MODEL=$(ls -S "$SYNTH_DIR"/*.gguf 2>/dev/null | head -1)
    say "model $MODEL not here: bundled-model tests will SKIP; benchmark on ${BENCH_MODEL:-nothing} (synthetic, not comparable)"
fi
GEMMAD_TEST_MODEL=$MODEL GEMMAD_TEST_SYNTH_DIR=$SYNTH_DIR T_TIMEOUT=300 \
    timeout 900 $B/tests/test_cuda >"$OUT/test_cuda.txt" 2>&1
say "test_cuda: exit $? — $(tail -1 "$OUT/test_cuda.txt")"
grep -E "^(FAIL|SKIP)|^    " "$OUT/test_cuda.txt" | head -40 | tee -a "$OUT/summary.txt"
# the host code against the CPU forward with emulated kernels (runs anywhere; appended)
GEMMAD_TEST_MODEL=$MODEL GEMMAD_TEST_SYNTH_DIR=$SYNTH_DIR T_TIMEOUT=300 \
    timeout 600 $B/tests/test_cuda_host >>"$OUT/test_cuda.txt" 2>&1
say "test_cuda_host: exit $? — $(tail -1 "$OUT/test_cuda.txt")"

# ---- benchmarks -----------------------------------------------------------------------------
if [ -n "$BENCH_MODEL" ] && [ -r "$BENCH_MODEL" ]; then
    : >"$OUT/bench.jsonl"
    bench() {
        if timeout 300 $B/cuda-bench -m "$BENCH_MODEL" "$@" >>"$OUT/bench.jsonl" 2>>"$OUT/summary.txt"
        then say "bench $*: $(tail -1 "$OUT/bench.jsonl")"
        else say "bench $* FAILED"
        fi
    }
    # GPU_CHECK_QUICK=1: small sizes, for a dry run of this script
    if [ "${GPU_CHECK_QUICK:-0}" = 1 ]; then P=64 G=8 S=4 SP=16; else P=512 G=64 S=64 SP=128; fi
    bench --device cuda --prompt $P --gen $G --seqs $S --seq-prompt $SP
    bench --device cuda --prompt $P --gen $G --seqs $S --seq-prompt $SP --nondeterministic
    bench --device cpu --prompt $P --gen $(( G / 2 )) --seqs $S --seq-prompt $SP
    # the single-sequence path through gemmad-cli (the engine API the server uses)
    for dev in cuda cpu; do
        r=$(timeout 300 $B/gemmad-cli bench -m "$BENCH_MODEL" --device $dev --prompt-tokens $P \
            --gen $G 2>>"$OUT/summary.txt") && echo "{\"cli\": \"$dev\", \"result\": $r}" >>"$OUT/bench.jsonl"
        say "gemmad-cli bench --device $dev: ${r:-FAILED}"
    done
fi
say "done"
