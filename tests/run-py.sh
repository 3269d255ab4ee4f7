#!/usr/bin/env bash
# Runs the Python integration and parity tests (pytest). They start the real build/gemmad
# on free loopback ports. pytest's exit code 5 (no tests collected) counts as a failure.
set -u
cd "$(dirname "$0")/.."
python3 -m pytest -q -ra tests/integration "$@"
rc=$?
[ $rc -eq 5 ] && echo "pytest collected no tests" && exit 1
exit $rc
