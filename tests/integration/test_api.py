"""The API through the official openai client and raw HTTP: chat (plain and streamed),
completions (string, list, token ids, echo), models, health, metrics, tokenize/detokenize,
logprobs shapes, finish reasons, n > 1, usage."""
import json
import re

import pytest

from conftest import parse_sse

MSG = [{"role": "user", "content": "Write one short sentence about the sea."}]


def test_health(server):
    r = server.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_models(client, server):
    ms = client.models.list()
    assert len(ms.data) == 1
    m = ms.data[0]
    assert m.object == "model" and m.id and m.owned_by
    raw = server.get("/v1/models").json()
    assert raw["object"] == "list" and isinstance(raw["data"][0]["created"], int)


def test_chat_plain(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=MSG, max_tokens=12,
                                       temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == model_id and isinstance(r.created, int)
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 0 < r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_equals_plain_greedy(client, model_id):
    kw = dict(model=model_id, messages=MSG, max_tokens=24, temperature=0)
    plain = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    ids = {c.id for c in chunks}
    assert len(ids) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert len({c.created for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    fins = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert all(f is None for f in fins[:-1]) and fins[-1] == plain.choices[0].finish_reason


def test_chat_stream_include_usage(server, model_id):
    r = server.post("/v1/chat/completions", {"model": model_id, "messages": MSG, "max_tokens": 6,
                                             "stream": True,
                                             "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    ev = parse_sse(r.text)
    assert ev[-1] == "[DONE]"
    last = ev[-2]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] <= 6
    assert last["usage"]["total_tokens"] == (last["usage"]["prompt_tokens"]
                                             + last["usage"]["completion_tokens"])
    for e in ev[:-2]:
        assert e["usage"] is None and e["object"] == "chat.completion.chunk"


def test_finish_reason_length(client, model_id):
    r = client.chat.completions.create(model=model_id, max_tokens=3, temperature=0,
                                       messages=[{"role": "user",
                                                  "content": "Count from 1 to 100."}])
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3
    s = list(client.chat.completions.create(model=model_id, max_tokens=3, temperature=0,
                                            stream=True, messages=[
                                                {"role": "user",
                                                 "content": "Count from 1 to 100."}]))
    assert s[-1].choices[0].finish_reason == "length"


def test_completions_string(client, model_id):
    r = client.completions.create(model=model_id, prompt="The capital of France is",
                                  max_tokens=5, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 5


def test_completions_list_and_tokens(server, model_id):
    toks = server.post("/tokenize", {"content": "The capital of France is",
                                     "add_special": True}).json()["tokens"]
    r = server.post("/v1/completions", {"model": model_id, "prompt": toks, "max_tokens": 4,
                                        "temperature": 0})
    assert r.status_code == 200, r.text
    a = r.json()["choices"][0]["text"]
    r2 = server.post("/v1/completions", {"model": model_id,
                                         "prompt": ["The capital of France is", "1, 2, 3,"],
                                         "max_tokens": 4, "temperature": 0}).json()
    assert [c["index"] for c in r2["choices"]] == [0, 1]
    assert r2["choices"][0]["text"] == a  # same tokens, same greedy output
    r3 = server.post("/v1/completions", {"model": model_id, "prompt": [toks, toks],
                                         "max_tokens": 4, "temperature": 0}).json()
    assert r3["choices"][0]["text"] == r3["choices"][1]["text"] == a


def test_completions_echo(server, model_id):
    r = server.post("/v1/completions", {"model": model_id, "prompt": "Once upon a time",
                                        "max_tokens": 3, "echo": True, "temperature": 0}).json()
    assert r["choices"][0]["text"].startswith("Once upon a time")
    ev = parse_sse(server.post("/v1/completions", {"model": model_id, "prompt": "Once upon a time",
                                                   "max_tokens": 3, "echo": True,
                                                   "temperature": 0, "stream": True}).text)
    assert ev[-1] == "[DONE]"
    text = "".join(e["choices"][0]["text"] for e in ev[:-1] if e["choices"])
    assert text == r["choices"][0]["text"]


def test_completions_stream_equals_plain(client, model_id):
    kw = dict(model=model_id, prompt="Here is a list of fruits:", max_tokens=16, temperature=0)
    plain = client.completions.create(**kw).choices[0].text
    text = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw)
                   if c.choices)
    assert text == plain


def test_n_choices(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=MSG, max_tokens=5, n=3,
                                       temperature=0.9, seed=1)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    s = list(client.chat.completions.create(model=model_id, messages=MSG, max_tokens=5, n=2,
                                            stream=True))
    fin = {c.choices[0].index: c.choices[0].finish_reason for c in s if c.choices
           and c.choices[0].finish_reason}
    assert set(fin) == {0, 1}


def test_seed_reproducible(client, model_id):
    kw = dict(model=model_id, messages=MSG, max_tokens=10, temperature=1.0, seed=1234)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_chat_logprobs(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=MSG, max_tokens=4,
                                       temperature=0, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for e in lp:
        assert e.logprob <= 0 and isinstance(e.bytes, list) and len(e.top_logprobs) == 3
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        # greedy: the chosen token is the most likely one
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-3
    s = list(client.chat.completions.create(model=model_id, messages=MSG, max_tokens=4,
                                            temperature=0, logprobs=True, top_logprobs=2,
                                            stream=True))
    n = sum(len(c.choices[0].logprobs.content) for c in s
            if c.choices and c.choices[0].logprobs)
    assert n == len(lp)


def test_completions_logprobs_legacy(server, model_id):
    r = server.post("/v1/completions", {"model": model_id, "prompt": "Hello", "max_tokens": 3,
                                        "logprobs": 2, "temperature": 0}).json()
    lp = r["choices"][0]["logprobs"]
    n = r["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == n
    assert all(isinstance(t, dict) and len(t) <= 2 for t in lp["top_logprobs"])
    assert lp["text_offset"] == sorted(lp["text_offset"])


def test_stop_string_not_in_output(client, model_id):
    base = client.chat.completions.create(model=model_id, messages=MSG, max_tokens=20,
                                          temperature=0).choices[0].message.content
    words = base.split()
    if len(words) < 3:
        pytest.skip("output too short to pick a stop string")
    stop = words[2]
    r = client.chat.completions.create(model=model_id, messages=MSG, max_tokens=20,
                                       temperature=0, stop=[stop])
    assert stop not in r.choices[0].message.content
    assert base.startswith(r.choices[0].message.content)
    assert r.choices[0].finish_reason == "stop"


def test_content_parts(client, model_id):
    a = client.chat.completions.create(model=model_id, max_tokens=6, temperature=0,
                                       messages=[{"role": "user", "content": [
                                           {"type": "text", "text": "Say hi."}]}])
    b = client.chat.completions.create(model=model_id, max_tokens=6, temperature=0,
                                       messages=[{"role": "user", "content": "Say hi."}])
    assert a.choices[0].message.content == b.choices[0].message.content


def test_utf8_emoji_cjk(server, model_id):
    """Output that contains multi-byte characters arrives intact, streamed and not."""
    msgs = [{"role": "user", "content": "Reply with three emoji and the Chinese word for "
                                        "water (水), nothing else. 🌊🐟"}]
    body = {"model": model_id, "messages": msgs, "max_tokens": 24, "temperature": 0}
    plain = server.post("/v1/chat/completions", body)
    assert plain.status_code == 200
    plain.content.decode("utf-8")  # strict
    text = plain.json()["choices"][0]["message"]["content"]
    st = server.post("/v1/chat/completions", dict(body, stream=True))
    ev = parse_sse(st.content.decode("utf-8"))
    deltas = [e["choices"][0]["delta"].get("content") or "" for e in ev[:-1] if e["choices"]]
    assert "".join(deltas) == text
    assert "\ufffd" not in text
    # a token-level check: a prompt of raw byte tokens round-trips through /detokenize
    toks = server.post("/tokenize", {"content": "水🌊"}).json()["tokens"]
    assert server.post("/detokenize", {"tokens": toks}).json()["content"] == "水🌊"


def test_tokenize_detokenize(server):
    r = server.post("/tokenize", {"content": "Hello world", "add_special": True})
    toks = r.json()["tokens"]
    assert all(isinstance(t, int) for t in toks) and len(toks) >= 3
    r = server.post("/tokenize", {"content": "Hello world", "with_pieces": True}).json()
    assert "".join(p["piece"] for p in r["tokens"]) == "Hello world"
    d = server.post("/detokenize", {"tokens": toks[1:]}).json()
    assert d["content"] == "Hello world"
    assert server.post("/detokenize", {"tokens": [-1]}).status_code == 400
    assert server.post("/tokenize", {"content": 5}).status_code == 400


def test_metrics(server, client, model_id):
    client.chat.completions.create(model=model_id, messages=MSG, max_tokens=2)
    text = server.get("/metrics").text
    names = re.findall(r"^# TYPE (\S+) ", text, re.M)
    assert len(names) == len(set(names)), "duplicate metric families"
    for n in ["gemmad_http_requests_total", "gemmad_time_to_first_token_seconds",
              "gemmad_inter_token_latency_seconds", "gemmad_e2e_request_latency_seconds",
              "gemmad_request_queue_time_seconds", "gemmad_prompt_tokens_total",
              "gemmad_generation_tokens_total", "gemmad_requests_running",
              "gemmad_requests_waiting", "gemmad_request_success_total"]:
        assert n in names, n
    m = server.metrics()
    assert m['gemmad_http_requests_total{route="chat_completions",status="200"}'] >= 1
    assert m["gemmad_generation_tokens_total"] >= 1
    assert m["gemmad_time_to_first_token_seconds_count"] >= 1


def test_request_log_line(server, client, model_id):
    client.chat.completions.create(model=model_id, messages=MSG, max_tokens=2)
    lines = [l for l in server.lines if "/v1/chat/completions status=200" in l]
    assert lines
    assert re.search(r"req=\d+ .*prompt_tokens=\d+ completion_tokens=\d+ ttft=[\d.]+ "
                     r"total=[\d.]+", lines[-1])
