"""Graceful drain on SIGTERM: /health 503 at once, new generation 503 + Retry-After +
Connection: close, the running stream finishes, exit 0; past the drain deadline the stream
gets a final SSE error event."""
import json
import signal
import threading
import time

import requests

from conftest import sse_events

MSG = [{"role": "user", "content": "Write a long story."}]


def _stream(url, mid, max_tokens, out):
    r = requests.post(url + "/v1/chat/completions", stream=True, timeout=120,
                      json={"model": mid, "messages": MSG, "max_tokens": max_tokens,
                            "ignore_eos": True, "stream": True})
    out["status"] = r.status_code
    out["events"] = [e for e in sse_events(r) if e is not None]


def test_drain_finishes_stream(start_server):
    s = start_server("--drain-timeout-s", "60")
    mid = s.get("/v1/models").json()["data"][0]["id"]
    out = {}
    # Long enough (ignore_eos) to still be streaming when SIGTERM comes, also on a fast
    # machine: 16 tokens once finished before the signal at ~60 tok/s and the server,
    # drained of nothing, exited before the /health check.
    t = threading.Thread(target=_stream, args=(s.url, mid, 400, out), daemon=True)
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline and s.metrics().get(
            'gemmad_sched_sequences{state="running"}', 0) < 1:
        time.sleep(0.05)
    s.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    h = s.get("/health")
    assert h.status_code == 503 and h.json()["status"] == "draining"
    r = s.post("/v1/chat/completions", {"model": mid, "messages": MSG, "max_tokens": 2})
    assert r.status_code == 503
    assert r.headers.get("Retry-After")
    assert r.headers.get("Connection", "").lower() == "close"
    assert r.json()["error"]["type"]
    t.join(120)
    assert out["status"] == 200
    assert out["events"][-1] == "[DONE]", out["events"][-3:]
    fin = json.loads(out["events"][-2])["choices"][0]["finish_reason"]
    assert fin == "length"
    assert s.proc.wait(30) == 0
    assert "draining" in s.log()


def test_drain_deadline_error_event(start_server):
    s = start_server("--drain-timeout-s", "0.5", "--max-tokens", "900", "--ctx-size", "1024")
    mid = s.get("/v1/models").json()["data"][0]["id"]
    out = {}
    t = threading.Thread(target=_stream, args=(s.url, mid, 900, out), daemon=True)
    t.start()
    time.sleep(0.5)
    s.send_signal(signal.SIGTERM)
    t.join(60)
    assert out["status"] == 200
    last = json.loads(out["events"][-1])
    assert "error" in last and last["error"]["message"]
    assert s.proc.wait(30) == 0


def test_sigint_idle_exit0(start_server):
    s = start_server()
    s.send_signal(signal.SIGINT)
    assert s.proc.wait(30) == 0
