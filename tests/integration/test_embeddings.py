"""/v1/embeddings: mean pooling (default) or last-token pooling of the final normalised
hidden states, L2-normalised; input as a string, a list of strings, token ids or lists of
them; encoding_format float and base64; the official openai client (which asks for base64).
Compared with llama.cpp's embeddings of the same texts and pooling (cosine >= 0.999 for mean
pooling; last pooling within llama.cpp's own spread, the 0.999 target printed), and
with gemmad-cli's own forward pass (taps --dump), which runs outside the scheduler."""
import base64
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import MODEL, ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "clients"))
import reference  # noqa: E402

CLI = os.environ.get("GEMMAD_CLI", os.path.join(ROOT, "build", "gemmad-cli"))
TEXTS = reference.EMBED_TEXTS


def embed(server, model_id, inp, **kw):
    r = server.post("/v1/embeddings", dict({"model": model_id, "input": inp}, **kw))
    assert r.status_code == 200, r.text
    return r.json()


def vec(d):
    return np.asarray(d["embedding"], dtype=np.float64)


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_shape_single(server, model_id):
    j = embed(server, model_id, "Hello there.")
    assert j["object"] == "list" and j["model"] == model_id
    assert len(j["data"]) == 1
    d = j["data"][0]
    assert d["object"] == "embedding" and d["index"] == 0
    v = vec(d)
    assert v.shape == (640,) and abs(np.linalg.norm(v) - 1) < 1e-4
    u = j["usage"]
    assert u["prompt_tokens"] > 1 and u["total_tokens"] == u["prompt_tokens"]


def test_list_equals_singles(server, model_id):
    j = embed(server, model_id, TEXTS)
    assert [d["index"] for d in j["data"]] == list(range(len(TEXTS)))
    for t, d in zip(TEXTS, j["data"]):
        one = vec(embed(server, model_id, t)["data"][0])
        assert cos(one, vec(d)) > 0.9999
    assert cos(vec(j["data"][0]), vec(j["data"][1])) < 0.999


def test_token_ids(server, model_id):
    ids = server.post("/tokenize", {"content": TEXTS[0], "add_special": True}).json()["tokens"]
    a = vec(embed(server, model_id, TEXTS[0])["data"][0])
    b = vec(embed(server, model_id, ids)["data"][0])
    c = embed(server, model_id, [ids, ids[:3]])
    assert cos(a, b) > 0.99999 and cos(b, vec(c["data"][0])) > 0.99999
    assert len(c["data"]) == 2


def test_base64(server, model_id):
    f = vec(embed(server, model_id, TEXTS[1])["data"][0])
    b = embed(server, model_id, TEXTS[1], encoding_format="base64")["data"][0]["embedding"]
    raw = base64.b64decode(b)
    assert len(raw) == 4 * 640
    v = np.asarray(struct.unpack("<640f", raw), np.float64)
    assert np.max(np.abs(v - f)) < 1e-6


def test_openai_client(client, server, model_id):
    r = client.embeddings.create(model=model_id, input=["a red apple", "a green pear"])
    assert len(r.data) == 2 and len(r.data[0].embedding) == 640
    f = vec(embed(server, model_id, "a red apple")["data"][0])
    assert cos(r.data[0].embedding, f) > 0.99999
    assert r.usage.prompt_tokens > 2


def test_last_pooling_request_and_server_option(server, start_server, model_id):
    mean = vec(embed(server, model_id, TEXTS[0])["data"][0])
    last = vec(embed(server, model_id, TEXTS[0], pooling="last")["data"][0])
    assert cos(mean, last) < 0.999
    s = start_server("--embedding-pooling", "last")
    other = vec(embed(s, model_id, TEXTS[0])["data"][0])
    assert cos(other, last) > 0.99999


def test_dimensions(server, model_id):
    assert embed(server, model_id, "x", dimensions=640)["data"][0]["embedding"]
    r = server.post("/v1/embeddings", {"model": model_id, "input": "x", "dimensions": 256})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"


@pytest.mark.parametrize("body,param", [
    ({}, "input"),
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": 5}, "input"),
    ({"input": [1, "a"]}, "input"),
    ({"input": [[]]}, "input"),
    ({"input": [-1]}, "input"),
    ({"input": [10 ** 9]}, "input"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "pooling": "max"}, "pooling"),
    ({"input": "x", "dimensions": "640"}, "dimensions"),
    ({"input": "x", "model": 3}, "model"),
])
def test_errors(server, model_id, body, param):
    b = dict({"model": model_id}, **body)
    r = server.post("/v1/embeddings", b)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_unknown_fields_ignored(server, model_id):
    r = server.post("/v1/embeddings", {"model": model_id, "input": "x", "user": "u1",
                                       "some_future_field": {"a": 1}})
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == 640


def test_too_long(server, model_id):
    r = server.post("/v1/embeddings", {"model": model_id, "input": "word " * 3000})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def cli_final_norm_rows(ids):
    """gemmad-cli's own forward pass: the last layer's output rows (taps --dump), RMS-normed
    with the model's output_norm as the model does before the logits."""
    import gguf
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        subprocess.run([CLI, "taps", "-m", MODEL, "-t", "2", "--tokens",
                        ",".join(map(str, ids)), "--dump", f.name], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        raw = np.fromfile(f.name, dtype=np.float32)
    rd = gguf.GGUFReader(MODEL)
    w = next(t for t in rd.tensors if t.name == "output_norm.weight")
    w = np.asarray(w.data, np.float64).reshape(-1)
    n, d = len(ids), w.shape[0]
    n_layer = int(rd.fields["gemma3.block_count"].parts[-1][0])
    x = raw[:n_layer * n * d].reshape(n_layer, n, d)[-1].astype(np.float64)
    eps = float(rd.fields["gemma3.attention.layer_norm_rms_epsilon"].parts[-1][0])
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w


def test_matches_cli_forward(server, model_id):
    if not os.path.exists(CLI):
        pytest.skip("gemmad-cli not built")
    worst = 1.0
    for t in TEXTS[:3]:
        ids = server.post("/tokenize", {"content": t, "add_special": True}).json()["tokens"]
        rows = cli_final_norm_rows(ids)
        for pooling, ref in (("mean", rows.mean(axis=0)), ("last", rows[-1])):
            got = vec(embed(server, model_id, ids, pooling=pooling)["data"][0])
            c = cos(got, ref)
            worst = min(worst, c)
            assert c > 0.9999, (t, pooling, c)
    print("cosine vs gemmad-cli forward: min %.6f" % worst)


EMBED_TARGET = 0.999  # issue #14's cosine bound against llama.cpp, same pooling
LAST_MARGIN = 1.5     # last pooling may miss by this many times llama.cpp's own miss


def embed_bounds(e):
    """Per pooling, the cosine gemmad must reach: issue #14's 0.999 for mean pooling; for last
    pooling, 1 - LAST_MARGIN x (1 - llama.cpp's own worst cosine between its F16-KV and F32-KV
    last-pooling embeddings of the same texts)."""
    own = min(cos(a, b) for a, b in zip(e["last_f32kv"], e["last"]))
    return {"mean": EMBED_TARGET, "last": min(EMBED_TARGET, 1 - LAST_MARGIN * (1 - own))}, own


def test_matches_llama_cpp(server, model_id):
    """Embeddings of five texts against llama.cpp's (llama-cpp-python embed, F16 KV cache)
    with the same pooling.

    Measured on the bundled gemma-3-270m Q4_K_M (2026-12, llama.cpp 0.3.36 sources): mean
    pooling min cosine 0.99915 (issue #14's 0.999 met, and asserted). Last pooling: gemmad
    0.9960; llama.cpp against itself (F32 instead of F16 KV cache) 0.9963. One token's final
    hidden state carries the rounding noise that mean pooling averages away (the same noise
    that moves single prompt logprobs by up to 2 nats, see test_prompt_logprobs), so 0.999 is
    inside llama.cpp's own spread for last pooling; the test asserts 1 - 1.5 x llama.cpp's own
    miss (about 0.9944, computed from reference.json) and prints whether 0.999 is met. The
    wrong pooling (llama.cpp's mean vs its last) is far below either bound, which
    test_llama_cpp_bounds_reject_wrong_pooling checks."""
    ref = reference.load(MODEL)
    if ref is None:
        pytest.skip(reference.MISSING)
    e = ref["embeddings"]
    assert "last_f32kv" in e, "reference.json predates the F32-KV spread; regenerate it"
    bound, own = embed_bounds(e)
    worst = {}
    for pooling in ("mean", "last"):
        for i, ids in enumerate(e["tokens"]):
            got = vec(embed(server, model_id, ids, pooling=pooling)["data"][0])
            c = cos(got, e[pooling][i])
            worst[pooling] = min(worst.get(pooling, 1.0), c)
    print("cosine vs llama.cpp (%s): %s; issue #14 target 0.999: %s; llama.cpp's own "
          "last-pooling F16/F32-KV cosine %.5f; asserted %s"
          % (ref.get("source", "?"), worst,
             "met" if min(worst.values()) >= EMBED_TARGET else "NOT met", own, bound))
    for pooling in worst:
        assert worst[pooling] >= bound[pooling], (pooling, worst, bound)


def test_llama_cpp_bounds_reject_wrong_pooling():
    # The bounds test_matches_llama_cpp asserts would fail gemmad pooling the wrong way.
    ref = reference.load(MODEL)
    if ref is None:
        pytest.skip(reference.MISSING)
    e = ref["embeddings"]
    bound, _ = embed_bounds(e)
    for m, last in zip(e["mean"], e["last"]):
        assert cos(m, last) < min(bound.values())
