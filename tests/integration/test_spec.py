"""Speculative decoding (prompt lookup) changes no token: greedy and seeded sampled outputs,
logprobs, stop strings, max_tokens, an end-of-turn token inside accepted drafts, concurrent
streams and a generation past the sliding window are the same with "speculative": true (the
default) and false. Most tests run on a server with `--speculative 2` (draft whatever the
lookup finds), so that drafting does not depend on this machine's step timings, and check
through /metrics that drafts were accepted while they ran, so no test passes because nothing
was drafted; the adaptive default is compared too."""
import concurrent.futures as cf
import json

import pytest

from conftest import Server


@pytest.fixture(scope="module")
def srv():
    s = Server(["--speculative", "2"])
    yield s
    assert s.stop() == 0

CODE = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
        "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n    return a / b\n")
QUOTE = "Repeat this code exactly:\n" + CODE + "\nHere it is:\n"
FREE = ["Once upon a time", "The capital of France is", "List the numbers 1 to 30, comma "
        "separated:"]


def spec_counts(srv):
    m = srv.metrics()
    return (m["gemmad_spec_draft_tokens_total"], m["gemmad_spec_accepted_tokens_total"],
            m["gemmad_spec_verify_steps_total"])


def generate(srv, path, spec, **kw):
    """POST a greedy request (64 tokens unless kw says otherwise) with speculation on/off."""
    body = {"max_tokens": 64, "temperature": 0, "speculative": spec}
    body.update(kw)
    r = srv.post(path, body)
    assert r.status_code == 200, r.text
    return r.json()


def complete(srv, prompt, spec, **kw):
    return generate(srv, "/v1/completions", spec, prompt=prompt, **kw)


def chat(srv, messages, spec, **kw):
    return generate(srv, "/v1/chat/completions", spec, messages=messages, **kw)


def same_choice(a, b):
    ca, cb = a["choices"][0], b["choices"][0]
    assert ca["text"] == cb["text"]
    assert ca["finish_reason"] == cb["finish_reason"]
    assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]
    assert ca.get("logprobs") == cb.get("logprobs")


class Accepted:
    """Asserts that drafts were verified and some accepted between enter and exit."""

    def __init__(self, srv):
        self.srv = srv

    def __enter__(self):
        self.before = spec_counts(self.srv)
        return self

    def __exit__(self, *exc):
        if exc[0]:
            return False
        after = spec_counts(self.srv)
        d = [a - b for a, b in zip(after, self.before)]
        assert d[0] > 0 and d[1] > 0 and d[2] > 0, f"no accepted drafts: {d}"
        assert d[1] <= d[0]


@pytest.mark.parametrize("prompt", [QUOTE] + FREE)
def test_greedy_same(srv, prompt):
    off = complete(srv, prompt, False)
    on = complete(srv, prompt, True)
    same_choice(off, on)


@pytest.mark.parametrize("prompt", [QUOTE, FREE[0]])
def test_greedy_same_adaptive(server, prompt):
    """The default mode, where measured step times decide how much to draft."""
    kw = dict(max_tokens=96, logprobs=2)
    same_choice(complete(server, prompt, False, **kw), complete(server, prompt, True, **kw))


def test_greedy_quote_accepts_drafts(srv):
    with Accepted(srv):
        on = complete(srv, QUOTE, True, max_tokens=48)
    off = complete(srv, QUOTE, False, max_tokens=48)
    same_choice(off, on)
    assert "return a + b" in on["choices"][0]["text"]


ARRAY = {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 40}
LIST = ("Repeat this list exactly: [\"alpha\", \"beta\", \"gamma\", \"delta\", \"alpha\", "
        "\"beta\", \"gamma\", \"delta\"]\nHere it is: ")


@pytest.mark.parametrize("fmt", [{"type": "json_schema",
                                  "json_schema": {"name": "s", "schema": ARRAY}}], ids=["schema"])
def test_constrained_greedy_drafts_same(srv, fmt):
    """A greedy constrained request drafts too: each draft is checked under the grammar
    (the greedy token of the masked row at its position), so the output is the same as
    without drafting, and valid."""
    kw = dict(max_tokens=64, response_format=fmt)
    with Accepted(srv):
        on = complete(srv, LIST, True, **kw)
    off = complete(srv, LIST, False, **kw)
    same_choice(off, on)
    assert on["choices"][0]["finish_reason"] in ("stop", "length")
    if on["choices"][0]["finish_reason"] == "stop":
        json.loads(on["choices"][0]["text"])


KEYS = {"type": "object", "properties": {
    f"customer_shipping_address_line_{i}": {"type": "string", "maxLength": 16} for i in range(4)},
    "required": [f"customer_shipping_address_line_{i}" for i in range(4)],
    "additionalProperties": False}


def test_constrained_forced_drafts_same(srv):
    """Where the schema forces the next bytes (the rest of a long key), those bytes are the
    drafts (gemmad_spec_grammar_draft_tokens_total counts them); they are verified like any
    draft, so the output is the same as without drafting, and it validates."""
    kw = dict(max_tokens=120, response_format={
        "type": "json_schema", "json_schema": {"name": "s", "schema": KEYS}})
    prompt = "Write a customer's shipping address as JSON:\n"
    g0 = srv.metrics()["gemmad_spec_grammar_draft_tokens_total"]
    with Accepted(srv):
        on = complete(srv, prompt, True, **kw)
    g1 = srv.metrics()["gemmad_spec_grammar_draft_tokens_total"]
    off = complete(srv, prompt, False, **kw)
    assert srv.metrics()["gemmad_spec_grammar_draft_tokens_total"] == g1  # off drafts nothing
    same_choice(off, on)
    assert g1 - g0 >= 3 * 4, "the keys' forced bytes were not drafted"
    if on["choices"][0]["finish_reason"] == "stop":
        obj = json.loads(on["choices"][0]["text"])
        assert sorted(obj) == sorted(KEYS["properties"])


def test_constrained_sampled_does_not_draft(srv):
    """Sampled constrained rows would need a masked rejection rule: they do not draft."""
    before = spec_counts(srv)
    complete(srv, LIST, True, max_tokens=32, temperature=0.8, seed=3,
             response_format={"type": "json_object"})
    assert spec_counts(srv)[0] == before[0]


def test_logprobs_same(srv):
    with Accepted(srv):
        on = complete(srv, QUOTE, True, max_tokens=40, logprobs=3)
    off = complete(srv, QUOTE, False, max_tokens=40, logprobs=3)
    same_choice(off, on)
    assert len(on["choices"][0]["logprobs"]["tokens"]) == on["usage"]["completion_tokens"]


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5, 17])
def test_max_tokens_same(srv, max_tokens):
    off = complete(srv, QUOTE, False, max_tokens=max_tokens)
    on = complete(srv, QUOTE, True, max_tokens=max_tokens)
    same_choice(off, on)
    assert on["usage"]["completion_tokens"] <= max_tokens


@pytest.mark.parametrize("stop", [["def mul"], ["a - b", "zzz"], ["\n\n"]])
def test_stop_strings_same(srv, stop):
    with Accepted(srv):
        on = complete(srv, QUOTE, True, max_tokens=80, stop=stop)
    off = complete(srv, QUOTE, False, max_tokens=80, stop=stop)
    same_choice(off, on)
    assert on["choices"][0]["finish_reason"] == "stop"
    for s in stop:
        assert s not in on["choices"][0]["text"]


@pytest.mark.parametrize("seed", [1, 7, 1234])
def test_seeded_sampling_same(srv, seed):
    kw = dict(max_tokens=48, temperature=0.7, top_p=0.95, seed=seed, frequency_penalty=0.2,
              logprobs=2)
    with Accepted(srv):
        on = complete(srv, QUOTE, True, **kw)
    off = complete(srv, QUOTE, False, **kw)
    same_choice(off, on)
    for p in FREE[:2]:
        kw2 = dict(kw, temperature=1.0, top_k=40, top_p=1)
        same_choice(complete(srv, p, False, **kw2), complete(srv, p, True, **kw2))


def test_chat_same(srv):
    msgs = [{"role": "user", "content": QUOTE}]
    with Accepted(srv):
        on = chat(srv, msgs, True, max_tokens=40)
    off = chat(srv, msgs, False, max_tokens=40)
    assert on["choices"][0]["message"] == off["choices"][0]["message"]
    assert on["usage"]["completion_tokens"] == off["usage"]["completion_tokens"]


def test_end_of_generation_among_drafts(srv):
    """The text repeats itself with <eos> after each sentence, so once the sentence restarts
    the drafts are its rest and the <eos>; the request must end exactly where plain decoding
    ends. (The bundled base model never emits <eos> by itself; a logit_bias of 10 makes it
    win near the sentence's end. Whether it lands on an accepted draft or as the correction
    of a rejected one depends on the model; tests/unit/test_spec.c checks the first case at
    the verification level.)"""
    prompt = "The cat sat on the mat.<eos>\n" * 3 + "The"
    kw = dict(max_tokens=24, logprobs=2, logit_bias={"1": 10})
    with Accepted(srv):
        on = complete(srv, prompt, True, **kw)
    off = complete(srv, prompt, False, **kw)
    same_choice(off, on)
    assert on["choices"][0]["finish_reason"] == "stop"
    assert 1 < on["usage"]["completion_tokens"] < 24


def test_stream_same(srv):
    import json
    from conftest import sse_events
    import requests

    def stream(spec):
        body = {"prompt": QUOTE, "max_tokens": 40, "temperature": 0, "stream": True,
                "speculative": spec}
        r = requests.post(srv.url + "/v1/completions", json=body, stream=True, timeout=120)
        assert r.status_code == 200
        text, fin = "", None
        for d in sse_events(r):
            if d is None or d == "[DONE]":
                continue
            ch = json.loads(d)["choices"]
            if ch:
                text += ch[0].get("text") or ""
                fin = ch[0].get("finish_reason") or fin
        return text, fin

    with Accepted(srv):
        on = stream(True)
    assert on == stream(False)


def test_concurrent_streams_same(srv):
    """Drafting sequences share steps with plain decode rows of others."""
    prompts = [QUOTE, FREE[0], QUOTE.replace("a, b", "x, y"), FREE[2]]
    solo = [complete(srv, p, False, max_tokens=40) for p in prompts]
    with Accepted(srv):
        with cf.ThreadPoolExecutor(len(prompts)) as ex:
            together = list(ex.map(lambda p: complete(srv, p, True, max_tokens=40), prompts))
    for a, b in zip(solo, together):
        same_choice(a, b)


def test_past_sliding_window_same(srv):
    """Generation crosses the 512-position sliding window, so the ring wraps while rejected
    draft rows are written ahead of the accepted point."""
    prompt = "Repeat this code exactly, three times:\n" + CODE * 8 + "\nHere it is:\n"
    kw = dict(max_tokens=200, ignore_eos=True)
    with Accepted(srv):
        on = complete(srv, prompt, True, **kw)
    assert on["usage"]["prompt_tokens"] + on["usage"]["completion_tokens"] > 560
    off = complete(srv, prompt, False, **kw)
    same_choice(off, on)


def test_opt_out_and_bad_value(srv):
    before = spec_counts(srv)
    complete(srv, QUOTE, False, max_tokens=24)
    assert spec_counts(srv) == before
    r = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 2, "speculative": "no"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "speculative"


def test_server_setting_off(start_server):
    srv = start_server("--speculative", "0")
    off = complete(srv, QUOTE, True, max_tokens=32)
    assert spec_counts(srv) == (0, 0, 0)
    assert "return a + b" in off["choices"][0]["text"]
