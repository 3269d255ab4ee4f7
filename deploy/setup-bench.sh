#!/usr/bin/env bash
# Installs what the benchmarks need, skipping what is already there: llama-cpp-python (the
# llama.cpp baseline; pip builds it from source, a few minutes on 2 cores, with the same
# compiler and -march=native defaults as on any fresh machine), numpy and gguf (roofline).
# Safe to run every time. Used by `make bench` and `make bench-engine`.
set -eu
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}

if ! "$PY" -c "import numpy, gguf" 2>/dev/null; then
    echo "setup-bench: installing numpy and gguf"
    "$PY" -m pip install -q --disable-pip-version-check numpy gguf
fi

if ! "$PY" -c "import llama_cpp" 2>/dev/null; then
    echo "setup-bench: building llama-cpp-python from source (pip; several minutes)"
    # Same as a plain `pip install llama-cpp-python`: CPU backend, native instruction set.
    "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir llama-cpp-python
fi

"$PY" -c "import llama_cpp; print('setup-bench: llama-cpp-python', llama_cpp.__version__)"
