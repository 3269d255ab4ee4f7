#!/usr/bin/env bash
# Runs every unit-test binary in DIR, prints their lines, and closes with the summed
# "N passed, N failed, N skipped". With --threaded, only tests that start threads (named in
# THREADED below) run, for the ThreadSanitizer build.
set -u
dir=${1:?usage: run-unit.sh DIR [--threaded]}
mode=${2:-}
# test_server runs the whole server (loop, scheduler, compute pool) in-process; test_sched(_flow)
# and test_forward cover the scheduler thread and the forward pass's pool directly (with
# GEMMAD_TEST_QUICK=1, as make test-tsan sets, they run their short cases).
THREADED="test_pool test_quant test_kern test_panel test_kpanel test_server test_sched test_sched_flow test_forward"
pass=0; fail=0; skip=0; failed_bins=()
for bin in "$dir"/test_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    if [ "$mode" = "--threaded" ] && [[ " $THREADED " != *" $name "* ]]; then continue; fi
    out=$("$bin" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed' 
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
    if [ -z "$line" ]; then
        echo "FAIL $name (exit $rc, no summary line)"; fail=$((fail + 1)); failed_bins+=("$name"); continue
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -nE 's/.* ([0-9]+) skipped.*/\1/p'); s=${s:-0}
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then fail=$((fail + 1)); echo "FAIL $name (exit $rc)"; fi
    [ "$rc" -ne 0 ] && failed_bins+=("$name")
done
[ ${#failed_bins[@]} -gt 0 ] && echo "failing binaries: ${failed_bins[*]}"
echo "unit: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
