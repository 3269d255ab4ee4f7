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

# The source distribution is kept (and unpacked) under ~/.cache/gemmad: pip builds the Python
# binding from it, and tests/bench/bench_server.py builds llama.cpp's llama-server from the
# llama.cpp sources it bundles (vendor/llama.cpp).
CACHE=${GEMMAD_CACHE:-$HOME/.cache/gemmad}
LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
sdist="$CACHE/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
if [ ! -f "$sdist" ]; then
    echo "setup-bench: downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION source distribution"
    mkdir -p "$CACHE"
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
        -d "$CACHE" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
fi
if [ ! -d "$CACHE/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" ]; then
    mkdir -p "$CACHE/src"
    tar -xzf "$sdist" -C "$CACHE/src"
fi

if ! "$PY" -c "import llama_cpp" 2>/dev/null; then
    echo "setup-bench: building llama-cpp-python from source (pip; several minutes)"
    # Same as a plain `pip install llama-cpp-python`: CPU backend, native instruction set.
    "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir "$sdist"
fi

"$PY" -c "import llama_cpp; print('setup-bench: llama-cpp-python', llama_cpp.__version__)"
