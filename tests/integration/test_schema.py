"""Property-based requests generated from docs/openapi.yaml (schemathesis) against a live
server: no 5xx, and every response matches the spec (status, content type, body schema).
Short by default; `--fuzz-long` (make fuzz-api) runs much longer."""
import os
import shutil
import subprocess

import pytest

from conftest import ROOT

SPEC = os.path.join(ROOT, "docs", "openapi.yaml")
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")


def test_schemathesis(start_server, request, tmp_path):
    exe = shutil.which("schemathesis") or shutil.which("st")
    if not exe:
        pytest.skip("schemathesis not installed (pip install -r tests/requirements.txt)")
    # tight generation limits keep every generated request cheap
    s = start_server("--max-tokens", "8", "--max-n", "2", "--ctx-size", "512")
    long = request.config.getoption("--fuzz-long")
    args = [exe, "run", SPEC, "--url", s.url, "--checks", CHECKS,
            "--max-examples", "300" if long else "10", "--seed", "1",
            "--max-time", "900" if long else "30", "--workers", "1",
            "--request-timeout", "60", "--no-color", "--warnings", "off",
            "--suppress-health-check", "all"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=1200 if long else 240,
                       cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert s.proc.poll() is None, "server died during fuzzing:\n" + s.log()[-3000:]
