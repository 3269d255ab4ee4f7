"""gen-gguf writes random-weight GGUFs with a real model's layout that gemmad loads and runs:
the built-in Gemma 3 270M Q4_K_M table matches the bundled file tensor for tensor, a copy
--from a real file keeps its layout and metadata, the --f32 twin dequantizes the same
blocks, and every variant gives finite logits on the CPU."""
import hashlib
import json
import math
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.environ.get("GEMMAD_GEN_GGUF", os.path.join(ROOT, "build", "gen-gguf"))
CLI = os.environ.get("GEMMAD_CLI", os.path.join(ROOT, "build", "gemmad-cli"))
MODEL = os.environ.get("GEMMAD_TEST_MODEL", os.path.join(ROOT, "models",
                                                          "gemma-3-270m-q4_k_m.gguf"))

pytestmark = pytest.mark.skipif(not (os.path.exists(GEN) and os.path.exists(CLI)),
                                reason="build/gen-gguf or build/gemmad-cli not built")


def gen(*args):
    p = subprocess.run([GEN, *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def top3(path):
    p = subprocess.run([CLI, "logits", "-m", str(path), "--tokens", "2,3,4", "--top", "3"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    top = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(top) == 3
    for t in top:
        assert math.isfinite(t["logit"]), top
    assert top[0]["logit"] != top[2]["logit"], "flat logits: the weights carry no signal"
    return top


def layout(path):
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(path))
    return [(t.name, t.tensor_type, [int(x) for x in t.shape]) for t in r.tensors]


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def tail_sha(path, n):
    with open(path, "rb") as f:
        f.seek(-n, os.SEEK_END)
        return hashlib.sha256(f.read()).hexdigest()


def test_builtin_real_shape(tmp_path):
    out = tmp_path / "gen.gguf"
    gen("-o", str(out), "--seed", "7")
    top3(out)
    if not os.path.exists(MODEL):
        return
    # --from the real file with the same seed writes the same bytes for every tensor when
    # names, order, types and shapes agree; only the metadata (the vocabulary) differs
    real = tmp_path / "from.gguf"
    gen("-o", str(real), "--from", MODEL, "--seed", "7")
    assert os.path.getsize(real) == os.path.getsize(MODEL)
    n = 200 << 20  # the tensor data is ~250 MB, the metadata < 10 MB
    assert tail_sha(out, n) == tail_sha(real, n)
    top3(real)


def test_small_f32_twin_and_determinism(tmp_path):
    q, q2, f = tmp_path / "q.gguf", tmp_path / "q2.gguf", tmp_path / "f.gguf"
    gen("-o", str(q), "--layers", "2", "--vocab", "1024", "--seed", "3")
    gen("-o", str(q2), "--layers", "2", "--vocab", "1024", "--seed", "3")
    gen("-o", str(f), "--layers", "2", "--vocab", "1024", "--seed", "3", "--f32")
    assert sha(q) == sha(q2)
    for name, ty, _ in layout(f):
        assert ty.name == "F32", name
    tq, tf = top3(q), top3(f)
    # the same weights: only the CPU's activation quantization separates the two
    assert tq[0]["id"] == tf[0]["id"]
    assert abs(tq[0]["logit"] - tf[0]["logit"]) < 0.1


def test_f32_blas_path_turns_speculation_off(tmp_path):
    """F32/F16/BF16 weights take OpenBLAS for batches unless --deterministic (where the build
    has it): rows then depend on their batch, so speculative decoding, exact only for
    batch-invariant rows, is switched off and says so; --deterministic keeps both off."""
    from conftest import BIN, Server
    dyn = subprocess.run(["readelf", "-d", BIN], capture_output=True, text=True).stdout
    if "libopenblas" not in dyn:
        pytest.skip("gemmad built without OpenBLAS")
    f = tmp_path / "f.gguf"
    gen("-o", str(f), "--layers", "2", "--vocab", "1024", "--seed", "3", "--f32")
    for extra, on in ((["--model", str(f)], True),
                      (["--model", str(f), "--deterministic"], False)):
        s = Server(extra)
        try:
            r = s.post("/v1/completions", {"prompt": "a b c a b c a b", "max_tokens": 40,
                                           "temperature": 0})
            assert r.status_code == 200, r.text
        finally:
            assert s.stop() == 0
        log = "".join(s.lines)
        assert ("through OpenBLAS sgemm" in log) == on, log[-2000:]
        assert ("speculative decoding off" in log) == on, log[-2000:]


@pytest.mark.parametrize("args", [[], ["-o"], ["-o", "x.gguf", "--layers", "0"],
                                  ["-o", "x.gguf", "--bogus"]])
def test_bad_arguments(args):
    p = subprocess.run([GEN, *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and p.stderr.strip()


def test_layers_with_from_refused(tmp_path):
    p = subprocess.run([GEN, "-o", str(tmp_path / "x.gguf"), "--from", MODEL, "--layers", "2"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "built-in" in p.stderr


def test_bf16_batches_fast_path(tmp_path):
    """A BF16 model: batches of 16+ rows take the fast path unless --deterministic, and the
    log says which: on AMD CPUs with AVX512_BF16 the packed BF16 kernels (activations rounded
    to BF16, vdpbf16ps), elsewhere OpenBLAS sgemm where the build has it. A 60-word prompt
    (one prefill batch) gives the same greedy tokens in both modes and top logprobs within
    0.05: both multiply BF16 weights by BF16-rounded activations, in other orders (sgemm by
    the f32 input itself)."""
    from conftest import BIN, Server
    f = tmp_path / "b.gguf"
    gen("-o", str(f), "--layers", "2", "--vocab", "1024", "--seed", "3", "--bf16")
    for name, ty, _ in layout(f):
        assert ty.name in ("BF16", "F32"), name
    cpu = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    packed = "AuthenticAMD" in cpu and " avx512_bf16" in cpu
    dyn = subprocess.run(["readelf", "-d", BIN], capture_output=True, text=True).stdout
    blas = "libopenblas" in dyn
    prompt = " ".join("abcdefghij"[i % 10] * (1 + i % 3) for i in range(60))
    got = {}
    for det in (False, True):
        s = Server(["--model", str(f)] + (["--deterministic"] if det else []))
        try:
            r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0,
                                           "logprobs": 3})
            assert r.status_code == 200, r.text
            body = r.json()
        finally:
            assert s.stop() == 0
        assert body["usage"]["prompt_tokens"] >= 16, body["usage"]
        log = "".join(s.lines)
        assert ("vdpbf16ps" in log) == (packed and not det), log[-2000:]
        assert ("through OpenBLAS sgemm" in log) == (blas and not det), log[-2000:]
        got[det] = body["choices"][0]["logprobs"]
    fast, exact = got[False], got[True]
    assert fast["tokens"] == exact["tokens"], (fast["tokens"], exact["tokens"])
    for a, b in zip(fast["top_logprobs"], exact["top_logprobs"]):
        for tok, lp in b.items():
            if tok in a:
                assert abs(a[tok] - lp) < 0.05, (tok, a[tok], lp)
