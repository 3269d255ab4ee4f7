#!/usr/bin/env bash
# A portable build (NATIVE=0) picks the same SIMD kernels at run time as a -march=native
# one, so on the same CPU its logits must be the same bytes: builds NATIVE=0 into
# build/portable (gemmad-cli only) and compares md5 of `gemmad-cli logits --all` with the
# native build's for two prompts. Usage: tests/native0-parity.sh [NATIVE_BUILD_DIR] [MODEL]
set -u -o pipefail
cd "$(dirname "$0")/.."
NATIVE_B=${1:-build}
MODEL=${2:-models/gemma-3-270m-q4_k_m.gguf}
PORT_B=build/portable
if [ ! -f "$MODEL" ]; then
    echo "SKIP native0-parity: model $MODEL not present"
    exit 0
fi
make --no-print-directory NATIVE=0 WERROR=1 BUILD=$PORT_B $PORT_B/gemmad-cli ||
    { echo "FAIL native0-parity: the NATIVE=0 build failed"; exit 1; }
[ -x "$NATIVE_B/gemmad-cli" ] || { echo "FAIL native0-parity: no $NATIVE_B/gemmad-cli"; exit 1; }
fail=0
for p in "The quick brown fox jumps over the lazy dog. In the beginning was the word" \
         "Write a haiku about the sea, then explain why the number 17 is prime."; do
    a=$("$NATIVE_B/gemmad-cli" logits -m "$MODEL" -p "$p" --all -t 2 2>/dev/null | md5sum)
    b=$("$PORT_B/gemmad-cli" logits -m "$MODEL" -p "$p" --all -t 2 2>/dev/null | md5sum)
    if [ -z "${a%% *}" ] || [ "$a" != "$b" ]; then
        echo "FAIL native0-parity: logits differ for \"$p\": native ${a%% *}, NATIVE=0 ${b%% *}"
        fail=1
    fi
done
[ $fail = 0 ] || exit 1
echo "ok   native0-parity (NATIVE=0 logits == native logits, 2 prompts)"
