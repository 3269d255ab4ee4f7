#!/usr/bin/env bash
# gpu-check — the one script for a machine with an NVIDIA GPU. It needs only the CUDA
# toolkit, gcc and make: everything it builds links the engine alone (make CUDA=1
# gpu-check-bins: no libmicrohttpd, jansson or libuv), and the models it runs are written on
# the spot by gen-gguf with the bundled model's exact shapes and tensor types (the 253 MB
# file itself never has to travel; when models/gemma-3-270m-q4_k_m.gguf is there, its
# layout is copied --from it and it is used by the bundled-model tests too).
#
# One global deadline (GPU_CHECK_DEADLINE, default 540 s from start): every step gets a
# timeout that ends before it, and results are written to $OUT (default build/gpu-check) as
# each step finishes, so a run cut short still returns what was done:
#   summary.txt      one line per step (read this first)
#   env.txt          nvidia-smi, nvcc, gcc
#   build.txt        the build log
#   tests.txt        test_cuda, test_cuda_head, test_cuda_mmvq and test_cuda_fwd (per-test
#                    timeout), then test_cuda_host
#   memcheck.txt     compute-sanitizer --tool memcheck on a short subset of them
#   bench.jsonl      cuda-bench results, one JSON object per line ("tag": "mmvq" on the run
#                    with GEMMAD_CUDA_MMVQ=1)
#   kernels_*.csv    per-kernel GPU time of a short benchmark under nsys (when installed)
#
#   bash deploy/gpu-check.sh              the check (exits 3 at once, with the reason, when
#                                         there is no usable GPU)
#   bash deploy/gpu-check.sh --dry-run    the steps that need no GPU (tool check, build,
#                                         model generation, host tests): for a machine
#                                         without one
set -u -o pipefail
cd "$(dirname "$0")/.."

DRY=0
case "${1:-}" in
--dry-run) DRY=1 ;;
"") ;;
*) echo "usage: bash deploy/gpu-check.sh [--dry-run]" >&2; exit 2 ;;
esac

T0=$(date +%s)
DEADLINE=${GPU_CHECK_DEADLINE:-540}
OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
say() { echo "gpu-check [$(( $(date +%s) - T0 ))s]: $*" | tee -a "$OUT/summary.txt"; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }

# run WANT_S LOG CMD...: CMD with a timeout of WANT_S seconds, cut to what is left before
# the deadline (minus a margin for the summary); appends its output to LOG; returns its
# status (124 on timeout, 125 when no time was left to start it).
run() {
    local want=$1 log=$2
    shift 2
    local l=$(( $(left) - 10 ))
    if [ "$l" -lt 5 ]; then
        say "no time left for: $*"
        return 125
    fi
    [ "$want" -gt "$l" ] && want=$l
    echo "+ [timeout ${want}s] $*" >>"$log"
    timeout -k 5 "$want" "$@" >>"$log" 2>&1
}

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
JOBS=$(nproc 2>/dev/null || echo 4)

# ---- tools and the GPU ---------------------------------------------------------------------
missing=""
for t in make gcc nvcc; do command -v "$t" >/dev/null 2>&1 || missing="$missing $t"; done
if [ -n "$missing" ]; then
    say "missing tools:$missing (needs the CUDA toolkit under CUDA_HOME=$CUDA_HOME, gcc, make)"
    exit 1
fi
{
    echo "== nvidia-smi"; nvidia-smi 2>&1
    echo "== nvcc"; nvcc --version 2>&1
    echo "== gcc"; gcc --version 2>&1 | head -1
} >"$OUT/env.txt"
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader \
      2>/dev/null | head -1)
if [ -z "$gpu" ]; then
    why=$(nvidia-smi -L 2>&1 | head -1)
    command -v nvidia-smi >/dev/null 2>&1 || why="not installed"
    if [ "$DRY" = 0 ]; then
        say "no usable NVIDIA GPU here (nvidia-smi: ${why:-not found}); nothing to check." \
            "bash deploy/gpu-check.sh --dry-run runs the steps that need no GPU"
        exit 3
    fi
    say "dry run: no GPU (nvidia-smi: ${why:-not found}); GPU steps are skipped"
    cap=""
else
    cap=$(echo "$gpu" | awk -F', ' '{print $4}' | tr -d ' .')
    say "GPU: $gpu"
fi
CUDA_ARCH=${CUDA_ARCH:-${cap:-90}}
say "nvcc: $(nvcc --version | tail -1); CUDA_ARCH=$CUDA_ARCH; deadline ${DEADLINE}s"

# ---- build (engine only) ------------------------------------------------------------------
B=${GPU_CHECK_BUILD:-build/gpu-check-build}
E=$B/engine-only
: >"$OUT/build.txt"
t=$(date +%s)
if ! run 240 "$OUT/build.txt" make -j"$JOBS" CUDA=1 CUDA_HOME="$CUDA_HOME" \
        CUDA_ARCH="$CUDA_ARCH" BUILD="$B" gpu-check-bins; then
    say "build FAILED (build.txt); last lines:"
    tail -20 "$OUT/build.txt" | tee -a "$OUT/summary.txt"
    exit 1
fi
say "built in $(( $(date +%s) - t ))s"

# ---- models ---------------------------------------------------------------------------------
REAL=models/gemma-3-270m-q4_k_m.gguf
G=$B/gen
mkdir -p "$G"
from=()
[ -r "$REAL" ] && from=(--from "$REAL")
: >"$OUT/gen.txt"
if run 60 "$OUT/gen.txt" "$B/gen-gguf" -o "$G/bench.gguf" ${from[@]+"${from[@]}"} &&
    run 60 "$OUT/gen.txt" "$B/gen-gguf" -o "$G/parity-f32.gguf" --f32 --layers 6 --vocab 8192 &&
    run 60 "$OUT/gen.txt" "$B/gen-gguf" -o "$G/parity-q.gguf" --layers 6 --vocab 8192; then
    say "models: $G/bench.gguf (real shape, random weights${from:+, layout from $REAL})," \
        "parity-f32.gguf and parity-q.gguf (6 layers: 5 local + 1 global, 8192 tokens)"
else
    say "gen-gguf FAILED (gen.txt): $(tail -1 "$OUT/gen.txt")"
    exit 1
fi
TEST_MODEL=$REAL
[ -r "$REAL" ] || TEST_MODEL=$G/parity-q.gguf
export GEMMAD_TEST_MODEL=$TEST_MODEL GEMMAD_TEST_GEN_F32=$G/parity-f32.gguf
export GEMMAD_TEST_SYNTH_DIR=${GEMMAD_TEST_SYNTH_DIR:-build/synthetic}

tally() { tail -1 "$1" 2>/dev/null; }

# ---- CUDA unit tests ------------------------------------------------------------------------
: >"$OUT/tests.txt"
if [ "$DRY" = 0 ]; then
    for t in test_cuda test_cuda_head test_cuda_topk test_cuda_qkv test_cuda_mmvq test_cuda_fwd; do
        T_TIMEOUT=45 run 150 "$OUT/tests.txt" "$E/tests/$t"
        rc=$?
        say "$t: exit $rc — $(tally "$OUT/tests.txt")"
    done
    # the opt-in q/k/v + KV store launch through the whole forward pass (CUDA vs CPU, graphs)
    for c in test_e2e_bundled_vs_cpu test_e2e_graph_decode; do
        GEMMAD_CUDA_FUSE_KV=1 T_TIMEOUT=45 run 60 "$OUT/tests.txt" "$E/tests/test_cuda_fwd" "$c"
        say "test_cuda_fwd $c with GEMMAD_CUDA_FUSE_KV=1: exit $? — $(tally "$OUT/tests.txt")"
    done
    grep -E "^(FAIL|SKIP)|^    " "$OUT/tests.txt" | head -30 | tee -a "$OUT/summary.txt"

    # ---- memcheck on the kernel tests that are quick (no model) -----------------------------
    : >"$OUT/memcheck.txt"
    if command -v compute-sanitizer >/dev/null 2>&1; then
        for bt in test_cuda:test_dequant_vs_ref test_cuda:test_norm_rope_act \
                  test_cuda:test_attention_vs_ref test_cuda_head:test_head_batch_invariant \
                  test_cuda_head:test_argmax_rows test_cuda_topk:test_topk_narrow_row \
                  test_cuda_qkv:test_qkv_same_bits test_cuda_mmvq:test_mmvq_set_same_bits \
                  test_cuda_fwd:test_e2e_step_validation \
                  test_cuda_fwd:test_e2e_graph_decode; do
            # 30 s each at most: the benchmark after it is worth more than a slow memcheck
            T_NOFORK=1 T_TIMEOUT=30 run 30 "$OUT/memcheck.txt" compute-sanitizer \
                --tool memcheck --error-exitcode 99 "$E/tests/${bt%%:*}" "${bt#*:}"
            say "memcheck ${bt#*:}: exit $?"
        done
    else
        say "compute-sanitizer not in $CUDA_HOME/bin: memcheck skipped"
    fi
else
    say "dry run: test_cuda and memcheck skipped"
fi

# ---- benchmark ------------------------------------------------------------------------------
: >"$OUT/bench.jsonl"
# bench WANT_S ARGS...: one cuda-bench run. With BENCH_TAG set (e.g. BENCH_TAG=mmvq
# GEMMAD_CUDA_MMVQ=1 bench …) its JSON line starts with "tag" and its summary line names it.
bench() {
    local log=$OUT/bench.err tag=${BENCH_TAG:+[$BENCH_TAG] }
    if run "$1" "$log" "$E/cuda-bench" -m "$G/bench.gguf" "${@:2}"; then
        # cuda-bench's JSON line went to the log with the command line; move it over
        if [ -n "${BENCH_TAG:-}" ]; then
            grep '^{' "$log" | tail -1 | sed "s/^{/{\"tag\": \"$BENCH_TAG\", /" >>"$OUT/bench.jsonl"
        else
            grep '^{' "$log" | tail -1 >>"$OUT/bench.jsonl"
        fi
        say "bench $tag${*:2}: $(tail -1 "$OUT/bench.jsonl")"
    else
        say "bench $tag${*:2}: FAILED or timed out (bench.err: $(tail -1 "$log"))"
    fi
}
if [ "$DRY" = 0 ]; then
    # single stream and 64 streams, batch-invariant kernels, then cuBLAS for prefill
    bench 120 --device cuda --prompt 512 --gen 64 --seqs 64 --seq-prompt 128 --repeat 5
    # the same decode (1 and 64 sequences) with the int8 MMVQ matmuls for steps of <= 8 rows
    # (GEMMAD_CUDA_MMVQ=1: decode of 1 sequence; 64 rows keep the f32 kernel), for the
    # comparison; a short prefill only
    BENCH_TAG=mmvq GEMMAD_CUDA_MMVQ=1 \
        bench 90 --device cuda --prompt 64 --gen 64 --seqs 64 --seq-prompt 128 --repeat 3
    bench 90 --device cuda --prompt 512 --gen 64 --seqs 64 --seq-prompt 128 --repeat 3 \
        --nondeterministic
    # decode copying every logit row back (as before greedy ids), for the comparison
    bench 60 --device cuda --prompt 64 --gen 16 --seqs 64 --seq-prompt 128 --repeat 2 \
        --full-logits
    # the CPU path on the same machine, on the same model (shorter: it is much slower)
    bench 90 --device cpu --prompt 128 --gen 16 --seqs 16 --seq-prompt 32 --repeat 1
else
    bench 60 --device cpu --prompt 16 --gen 4 --seqs 2 --seq-prompt 8 --repeat 1
fi

# ---- host emulation of the CUDA backend (runs anywhere; last: lowest value here) -----------
GEMMAD_TEST_QUICK=1 T_TIMEOUT=90 run 240 "$OUT/tests.txt" "$E/tests/test_cuda_host"
say "test_cuda_host: exit $? — $(tally "$OUT/tests.txt")"
# ---- per-kernel times from Nsight Systems, when it is installed and time is left ----------
NSYS=$(command -v nsys || ls "$CUDA_HOME"/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ "$DRY" = 0 ] && [ -n "$NSYS" ] && [ "$(left)" -gt 70 ]; then
    rep=$B/nsys-decode
    if run 45 "$OUT/nsys.txt" "$NSYS" profile -t cuda --force-overwrite true -o "$rep" \
            "$E/cuda-bench" -m "$G/bench.gguf" --prompt 512 --gen 64 --seqs 8 --seq-prompt 64 \
            --repeat 1 &&
        run 20 "$OUT/nsys.txt" "$NSYS" stats --report cuda_gpu_kern_sum --format csv \
            --output "$OUT/kernels" "$rep.nsys-rep"; then
        say "nsys: per-kernel GPU time in $(ls "$OUT"/kernels*.csv 2>/dev/null | head -1)"
    else
        say "nsys: failed or timed out (nsys.txt)"
    fi
fi
say "done in $(( $(date +%s) - T0 ))s"
