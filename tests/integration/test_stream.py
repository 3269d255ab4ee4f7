"""SSE framing: headers, chunk shapes, keep-alive comments on a quiet stream, errors."""
import json
import socket
import threading
import time

import requests

from conftest import parse_sse, sse_events

MSG = [{"role": "user", "content": "Tell me a story about a cat."}]


def test_sse_headers_and_framing(server, model_id):
    r = requests.post(server.url + "/v1/chat/completions", stream=True, timeout=60,
                      json={"model": model_id, "messages": MSG, "max_tokens": 5, "stream": True})
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert r.headers["Cache-Control"] == "no-cache"
    assert r.headers["X-Accel-Buffering"] == "no"
    body = r.content.decode("utf-8")
    assert body.endswith("data: [DONE]\n\n")
    for ev in body.split("\n\n")[:-1]:
        assert ev.startswith("data: ") or ev.startswith(":"), ev
    ev = parse_sse(body)
    first = ev[0]["choices"][0]
    assert first["delta"]["role"] == "assistant" and first["finish_reason"] is None
    assert first["logprobs"] is None
    fin = [e for e in ev[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(fin) == 1 and fin[0]["choices"][0]["delta"] == {}


def test_first_chunk_before_generation(server, model_id):
    """Headers and the role chunk go out at once, before the first token."""
    r = requests.post(server.url + "/v1/chat/completions", stream=True, timeout=60,
                      json={"model": model_id, "messages": MSG, "max_tokens": 3, "stream": True})
    it = sse_events(r)
    first = json.loads(next(it))
    assert first["choices"][0]["delta"]["role"] == "assistant"
    rest = [e for e in it if e is not None]
    assert rest[-1] == "[DONE]"


def test_keepalive_while_queued(start_server, tmp_path):
    """With one running sequence, a second stream waits in the queue and receives
    ': keep-alive' comments meanwhile. Both requests use one API key, so they form one
    fairness group and the newcomer does not take the running sequence's slot after its
    first tokens (sched_fair.c: a request of another group would, and wait only briefly)."""
    keys = tmp_path / "keys"
    keys.write_text("sk-queue\n")
    s = start_server("--max-seqs", "1", "--sse-keepalive-s", "0.1", "--api-keys-file",
                     str(keys))
    auth = {"Authorization": "Bearer sk-queue"}
    mid = s.get("/v1/models", headers=auth).json()["data"][0]["id"]
    # Long enough to be running while the second request waits, also on a fast machine.
    long_body = {"model": mid, "messages": MSG, "max_tokens": 300, "ignore_eos": True,
                 "stream": True}
    t = threading.Thread(target=lambda: s.post("/v1/chat/completions", long_body, headers=auth),
                         daemon=True)
    t.start()

    deadline = time.time() + 30
    while time.time() < deadline and s.metrics(headers=auth).get(
            'gemmad_sched_sequences{state="running"}', 0) < 1:
        time.sleep(0.05)
    r = requests.post(s.url + "/v1/chat/completions", stream=True, timeout=120, headers=auth,
                      json={"model": mid, "messages": MSG, "max_tokens": 2, "stream": True})
    kinds = list(sse_events(r))
    t.join(120)
    assert kinds[-1] == "[DONE]"
    assert None in kinds, "no keep-alive comment while waiting"


def test_completions_stream_shape(server, model_id):
    ev = parse_sse(server.post("/v1/completions", {"model": model_id, "prompt": "Hi",
                                                   "max_tokens": 3, "stream": True}).text)
    assert ev[-1] == "[DONE]"
    for e in ev[:-1]:
        assert e["object"] == "text_completion"
        assert set(e["choices"][0]) >= {"index", "text", "logprobs", "finish_reason"}
    assert ev[-2]["choices"][0]["finish_reason"] in ("stop", "length")


def test_stream_http10_and_keepalive_connection(server, model_id):
    """Two streamed requests on one keep-alive connection (chunked encoding ends cleanly)."""
    sess = requests.Session()
    for _ in range(2):
        r = sess.post(server.url + "/v1/chat/completions", timeout=60,
                      json={"model": model_id, "messages": MSG, "max_tokens": 2, "stream": True})
        assert r.text.endswith("data: [DONE]\n\n")
