"""Prompt logprobs: /v1/completions with echo + logprobs returns every prompt token's
log-probability (the first, BOS, has none) and its top alternatives, in the legacy shape;
max_tokens 0 with echo scores without generating. Checked against the decode path (the
logprob of a generated token equals the prompt logprob of the same token fed back), against
llama.cpp's perplexity of a public-domain text (within 1%), and with the request shape of
lm-evaluation-harness' local-completions (a batch of prompts, echo, logprobs 1)."""
import math
import os
import sys

import pytest

from conftest import MODEL, ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "clients"))
import reference  # noqa: E402

PROMPT = "The capital of France is Paris. The capital of Italy is"


def score(server, model_id, prompt, k=1, max_tokens=0, **kw):
    r = server.post("/v1/completions", dict({"model": model_id, "prompt": prompt, "echo": True,
                                             "logprobs": k, "max_tokens": max_tokens,
                                             "temperature": 0}, **kw))
    assert r.status_code == 200, r.text
    return r.json()


def test_echo_shape(server, model_id):
    j = score(server, model_id, PROMPT, k=3)
    c = j["choices"][0]
    assert c["text"] == PROMPT and c["finish_reason"] == "length"
    lp = c["logprobs"]
    n = j["usage"]["prompt_tokens"]
    assert j["usage"]["completion_tokens"] == 0 and j["usage"]["total_tokens"] == n
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert len(lp[key]) == n, key
    assert "".join(lp["tokens"]) == PROMPT
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"][1:])
    for i in range(1, n):
        top = lp["top_logprobs"][i]
        assert 1 <= len(top) <= 3
        vals = list(top.values())
        assert vals == sorted(vals, reverse=True)
        assert lp["token_logprobs"][i] <= vals[0] + 1e-4
    offs = lp["text_offset"]
    assert offs == sorted(offs) and offs[-1] < len(PROMPT)
    assert all(PROMPT[offs[i]:].startswith(lp["tokens"][i]) for i in range(n))
    # "Paris" after "The capital of France is" is likely.
    i = lp["tokens"].index(" Paris")
    assert lp["token_logprobs"][i] > math.log(0.05)


def test_echo_then_generate(server, model_id):
    j = score(server, model_id, PROMPT, k=2, max_tokens=4)
    c = j["choices"][0]
    n = j["usage"]["prompt_tokens"]
    assert c["text"].startswith(PROMPT) and len(c["text"]) > len(PROMPT)
    lp = c["logprobs"]
    assert len(lp["tokens"]) == n + j["usage"]["completion_tokens"]
    assert lp["token_logprobs"][0] is None
    assert all(x is not None for x in lp["token_logprobs"][1:])


def test_stream_echo_logprobs(server, model_id):
    from conftest import parse_sse
    r = server.post("/v1/completions", {"model": model_id, "prompt": PROMPT, "echo": True,
                                        "logprobs": 1, "max_tokens": 2, "stream": True})
    chunks = [c for c in parse_sse(r.text) if c != "[DONE]" and c.get("choices")]
    toks = [t for c in chunks if c["choices"][0]["logprobs"]
            for t in c["choices"][0]["logprobs"]["tokens"]]
    assert "".join(c["choices"][0]["text"] for c in chunks).startswith(PROMPT)
    assert "".join(toks).startswith(PROMPT)
    first = chunks[0]["choices"][0]["logprobs"]
    assert first["token_logprobs"][0] is None


def test_prompt_logprob_equals_decode_logprob(server, model_id):
    ids = server.post("/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    g = server.post("/v1/completions", {"model": model_id, "prompt": ids, "max_tokens": 1,
                                        "temperature": 0, "logprobs": 5}).json()
    lp = g["choices"][0]["logprobs"]
    tok_lp, top = lp["token_logprobs"][0], lp["top_logprobs"][0]
    nxt = server.post("/tokenize", {"content": lp["tokens"][0]}).json()["tokens"]
    assert len(nxt) == 1
    s = score(server, model_id, ids + nxt, k=5)
    slp = s["choices"][0]["logprobs"]
    assert abs(slp["token_logprobs"][-1] - tok_lp) < 0.02, (slp["token_logprobs"][-1], tok_lp)
    assert list(slp["top_logprobs"][-1]) == list(top)
    for k, v in top.items():
        assert abs(slp["top_logprobs"][-1][k] - v) < 0.02


def test_lm_eval_request_shape(server, model_id):
    # lm-evaluation-harness local-completions, loglikelihood: context + continuation strings,
    # echo, logprobs 1, temperature 0, max_tokens 0 (or 1 in older versions), a seed.
    ctx = ["Question: What is 2 + 2?\nAnswer:", "The sky is", "Water boils at"]
    cont = [" 4", " blue", " 100 degrees"]
    for mt in (0, 1):
        j = server.post("/v1/completions", {"model": model_id, "prompt": [a + b for a, b in
                                                                           zip(ctx, cont)],
                                            "echo": True, "logprobs": 1, "max_tokens": mt,
                                            "temperature": 0, "seed": 1234}).json()
        ch = sorted(j["choices"], key=lambda c: c["index"])
        assert [c["index"] for c in ch] == [0, 1, 2]
        for c, a, b in zip(ch, ctx, cont):
            assert c["text"].startswith(a + b)
            lp = c["logprobs"]
            assert lp["token_logprobs"][0] is None
            # Every prompt token scored, with its greedy alternative (is_greedy check).
            assert all(x is not None for x in lp["token_logprobs"][1:])
            assert all(len(t) >= 1 for t in lp["top_logprobs"][1:])


def test_max_tokens_zero_needs_echo(server, model_id):
    r = server.post("/v1/completions", {"model": model_id, "prompt": "Hi", "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    r = server.post("/v1/completions", {"model": model_id, "prompt": "Hi", "max_tokens": 0,
                                        "echo": True})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "Hi"


def test_logprobs_bounds(server, model_id):
    r = server.post("/v1/completions", {"model": model_id, "prompt": "Hi", "echo": True,
                                        "logprobs": 21, "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"


def test_perplexity_matches_llama_cpp(server, model_id):
    ref = reference.load(MODEL)
    if ref is None:
        pytest.skip(reference.MISSING)
    pp = ref["perplexity"]
    j = score(server, model_id, pp["tokens"], k=1)
    lps = j["choices"][0]["logprobs"]["token_logprobs"]
    assert len(lps) == len(pp["tokens"])
    nll = -sum(lps[1:])
    ppl = math.exp(nll / (len(lps) - 1))
    ratio = ppl / pp["ppl"]
    print("perplexity: gemmad %.4f, llama.cpp %.4f (%s), ratio %.4f over %d tokens"
          % (ppl, pp["ppl"], ref.get("source", "?"), ratio, len(lps)))
    assert abs(ratio - 1) < 0.01


def test_perplexity_text_tokenizes_alike(server):
    # The text as a string gives the token ids llama.cpp scored (when the reference exists).
    ids = server.post("/tokenize", {"content": reference.GETTYSBURG, "add_special": True})
    ids = ids.json()["tokens"]
    ref = reference.load(MODEL)
    if ref:
        assert ids == ref["perplexity"]["tokens"]
    assert 250 < len(ids) < 1000
