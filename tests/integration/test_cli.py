"""gemmad-cli: bad arguments and bad files give one line on stderr and a non-zero exit
status, never a signal; the good paths print what the CLI promises."""
import json
import os
import tempfile
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("GEMMAD_CLI", os.path.join(ROOT, "build", "gemmad-cli"))
MODEL = os.environ.get("GEMMAD_TEST_MODEL", os.path.join(ROOT, "models",
                                                          "gemma-3-270m-q4_k_m.gguf"))

pytestmark = pytest.mark.skipif(not os.path.exists(CLI), reason="build/gemmad-cli not built")


def run(*args, timeout=300):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def assert_clean_failure(p):
    assert p.returncode > 0, "expected a non-zero exit status, got %d" % p.returncode
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, "expected one line on stderr, got: %r" % p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("args", [
    [],
    ["frobnicate"],
    ["generate"],
    ["generate", "-m"],
    ["generate", "-m", "x.gguf"],
    ["generate", "-m", "x.gguf", "-p", "hi", "-n", "abc"],
    ["generate", "-m", "x.gguf", "-p", "hi", "--temp", "-1"],
    ["generate", "-m", "x.gguf", "-p", "hi", "--bogus"],
    ["logits", "-m", "x.gguf"],
    ["logits", "-m", "x.gguf", "-p", "a", "--tokens", "1"],
    ["bench", "-m", "x.gguf", "--prompt-tokens", "0"],
    ["generate", "-m", "x.gguf", "-p", "hi", "--kv-type", "q3"],
])
def test_bad_arguments(args):
    assert_clean_failure(run(*args))


def test_missing_file(tmp_path):
    p = run("generate", "-m", str(tmp_path / "nope.gguf"), "-p", "hi")
    assert_clean_failure(p)


@pytest.mark.parametrize("content", [
    b"",
    b"GGUF",
    b"NOPE" + b"\0" * 60,
    b"GGUF\x03\0\0\0" + b"\xff" * 16,
])
def test_malformed_file(tmp_path, content):
    f = tmp_path / "bad.gguf"
    f.write_bytes(content)
    assert_clean_failure(run("generate", "-m", str(f), "-p", "hi"))


@pytest.mark.skipif(not os.path.exists(MODEL), reason="model not present")
def test_truncated_model(tmp_path):
    f = tmp_path / "trunc.gguf"
    with open(MODEL, "rb") as src:
        f.write_bytes(src.read(3 << 20))
    assert_clean_failure(run("logits", "-m", str(f), "-p", "hi"))


@pytest.mark.skipif(not os.path.exists(MODEL), reason="model not present")
def test_token_out_of_range():
    assert_clean_failure(run("logits", "-m", MODEL, "--tokens", "2,99999999"))


@pytest.mark.skipif(not os.path.exists(MODEL), reason="model not present")
def test_tokenize_and_logits():
    p = run("tokenize", "-m", MODEL, "The capital of France is")
    assert p.returncode == 0, p.stderr
    ids = json.loads(p.stdout)
    assert ids[0] == 2 and len(ids) > 3
    p = run("logits", "-m", MODEL, "--tokens", ",".join(map(str, ids)), "--top", "3", "-t", "2")
    assert p.returncode == 0, p.stderr
    top = json.loads(p.stdout)
    assert len(top) == 3 and top[0]["logit"] >= top[1]["logit"] >= top[2]["logit"]
    p = run("logits", "-m", MODEL, "--tokens", ",".join(map(str, ids)), "--top", "2", "--all")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert len(rows) == len(ids) and all(len(r) == 2 for r in rows)
    assert rows[-1][0]["id"] == top[0]["id"]


@pytest.mark.skipif(not os.path.exists(MODEL), reason="model not present")
def test_generate_stdout_is_only_text():
    p = run("generate", "-m", MODEL, "-p", "The capital of France is", "-n", "8", "--temp", "0",
            "-t", "2")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() != ""
    assert "capital of France is" not in p.stdout  # the prompt is not echoed
    # sampling with a seed is reproducible
    a = run("generate", "-m", MODEL, "-p", "Once upon a time", "-n", "8", "--temp", "0.9",
            "--seed", "7", "-t", "2")
    b = run("generate", "-m", MODEL, "-p", "Once upon a time", "-n", "8", "--temp", "0.9",
            "--seed", "7", "-t", "2")
    assert a.returncode == 0 and a.stdout == b.stdout


@pytest.mark.skipif(not os.path.exists(MODEL), reason="model not present")
def test_taps_and_bench():
    p = run("taps", "-m", MODEL, "-p", "Hello", "-t", "2")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert [d["layer"] for d in lines[:19]] == list(range(19))
    # --dump: every row of each of the 18 layers, then the final-norm row, as raw f32; the
    # summaries printed are those of the last row
    dump = os.path.join(tempfile.mkdtemp(), "taps.f32")
    p = run("taps", "-m", MODEL, "--tokens", "2,9259,1902", "-t", "2", "--dump", dump)
    assert p.returncode == 0, p.stderr
    raw = np.fromfile(dump, dtype=np.float32)
    assert raw.size == 18 * 3 * 640 + 640
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    last = raw[: 18 * 3 * 640].reshape(18, 3, 640)[:, 2, :]
    for layer in (0, 9, 17):
        assert abs(lines[layer]["max"] - float(last[layer].max())) <= 1e-4 * abs(lines[layer]["max"])
    p = run("bench", "-m", MODEL, "--prompt-tokens", "16", "--gen", "4", "-t", "2")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    for k in ("prefill_tok_s", "decode_tok_s", "rss_mib", "load_s"):
        assert d[k] > 0
    # --seqs: several sequences decoded together, one forward step of N rows per token
    p = run("bench", "-m", MODEL, "--prompt-tokens", "16", "--gen", "4", "--seqs", "3", "-t", "2")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["seqs"] == 3 and d["gen_tokens"] == 4 and d["decode_tok_s"] > 0
    # --profile: a line before the usual one with the steps' time by operation class
    p = run("bench", "-m", MODEL, "--prompt-tokens", "16", "--gen", "4", "-t", "2", "--profile")
    assert p.returncode == 0, p.stderr
    prof, d = [json.loads(line) for line in p.stdout.splitlines()]
    assert d["decode_tok_s"] > 0 and "profile" not in d
    dec, pre = prof["profile"]["decode_ms_per_step"], prof["profile"]["prefill_ms"]
    assert dec["steps"] == 4 and pre["steps"] == 1
    for part in (dec, pre):
        classes = [part[k] for k in ("matmul", "attn", "norm", "other", "head")]
        assert min(classes) >= 0 and part["matmul"] > 0 and part["attn"] > 0 and part["head"] > 0
        # the classes tile the backend's step, which sits inside the loop's wall time
        # (printed to 4 decimals: allow their rounding)
        assert sum(classes) <= part["step"] + 1e-3 and part["step"] <= part["wall"] + 1e-4


@pytest.mark.skipif(not os.path.exists(MODEL), reason="bundled model missing (make model)")
def test_kvmem_sliding_window_ring():
    """The memory a 32k-token session needs with and without the
    sliding-window ring. Gemma 3 270M: 18 layers, 1 KV head of 256 dims for K and V, so each
    position costs 1 KiB per layer in f16: 18 x 32768 KiB = 576 MiB when every layer keeps
    every position; with the ring only the 3 global layers do (96 MiB) and the 15 sliding
    layers keep a ring of blocks covering the 512-token window plus one 512-token step."""
    p = run("kvmem", "-m", MODEL, "--ctx", "32768")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert (r["global_layers"], r["sliding_layers"], r["sliding_window"]) == (3, 15, 512)
    assert r["without_ring_mib"] == pytest.approx(576.0)
    ring_tokens = r["ring_blocks"] * r["block_size"]
    assert 1024 <= ring_tokens <= 1024 + 2 * r["block_size"], r
    assert r["with_ring_mib"] == pytest.approx(96.0 + 15 * ring_tokens / 1024, abs=0.05)
    q8 = json.loads(run("kvmem", "-m", MODEL, "--kv-type", "q8_0").stdout)
    # q8_0: 34 bytes per 32 values instead of 64
    assert q8["without_ring_mib"] == pytest.approx(576.0 * 34 / 64)


@pytest.mark.skipif(not os.path.exists(MODEL), reason="model not present")
def test_grammar_token_run_times(tmp_path):
    """grammar -m MODEL --check I --times T: the instance's tokens go through the vocabulary
    masks; T gets a line per token (cold and warm mask time, microseconds); a rejected
    instance exits 1 and writes no times."""
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "n": {"type": "integer"}},
              "required": ["name", "n"], "additionalProperties": False}
    sf, inf, bad, tf = (tmp_path / "s.json", tmp_path / "i.json", tmp_path / "b.json",
                        tmp_path / "t.txt")
    sf.write_text(json.dumps(schema))
    text = json.dumps({"name": "Ada Lovelace", "n": 36})
    inf.write_text(text)
    bad.write_text(json.dumps({"name": "Ada", "n": "x"}))
    p = run("grammar", "--schema", str(sf), "--check", str(inf), "-m", MODEL, "--times", str(tf))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "accepted"
    rows = [list(map(float, ln.split())) for ln in tf.read_text().splitlines()]
    ids = json.loads(run("tokenize", "-m", MODEL, text).stdout)
    assert len(rows) == len(ids) - 1  # the tokenizer's BOS is not part of the instance
    assert all(len(r) == 2 and r[0] > 0 and r[1] > 0 for r in rows)
    tf.unlink()
    p = run("grammar", "--schema", str(sf), "--check", str(bad), "-m", MODEL, "--times", str(tf))
    assert p.returncode == 1 and "rejected" in p.stdout
    assert not tf.exists()
