"""What a load balancer and an orchestrator rely on, against the real binary: liveness
(/live) versus readiness (/health) while draining, the KV session id in an X-Session-Id
header, several listen addresses (IPv6 included), and a /metrics page that promtool accepts
with the families gateways read (vLLM's names, the Gateway API Inference Extension's)."""
import json
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests

from conftest import sse_events

CHAT = "/v1/chat/completions"


def test_live_stays_up_while_draining(start_server):
    s = start_server("--drain-timeout-s", "20")
    live = s.get("/live")
    assert live.status_code == 200, live.text
    body = live.json()
    assert body["status"] == "ok" and body["state"] == "ready" and body["pending"] == 0
    got = {"chunks": 0, "done": False}
    started = threading.Event()

    def stream():
        with requests.post(s.url + CHAT, json={
                "messages": [{"role": "user", "content": "Count from one to one hundred."}],
                "max_tokens": 80, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}, stream=True, timeout=60) as r:
            for d in sse_events(r):
                if d is None:
                    continue
                got["chunks"] += 1
                started.set()
                if d == "[DONE]":
                    got["done"] = True

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(30)
    s.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    h = s.get("/health")
    lv = s.get("/live")
    assert h.status_code == 503 and h.json()["status"] == "draining"
    assert lv.status_code == 200, lv.text
    assert lv.json()["state"] == "draining" and lv.json()["pending"] >= 1
    t.join(60)
    assert got["done"], "the stream did not finish during the drain"
    assert s.proc.wait(30) == 0


def test_session_id_header(start_server):
    s = start_server()
    bad = s.post(CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                 headers={"X-Session-Id": "x" * 129})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "X-Session-Id"
    # The header keeps the conversation's KV: turn 2 reuses turn 1's blocks.
    msgs = [{"role": "system", "content": "You answer questions about geography in short "
                                          "sentences, one fact at a time, politely."},
            {"role": "user", "content": "What is the capital of France?"}]
    cached = []
    for turn in range(2):
        r = s.post(CHAT, {"messages": msgs, "max_tokens": 6, "temperature": 0},
                   headers={"X-Session-Id": "geo-1"})
        assert r.status_code == 200, r.text
        j = r.json()
        cached.append(j["usage"]["prompt_tokens_details"]["cached_tokens"])
        msgs += [{"role": "assistant", "content": j["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "And of Spain?"}]
    assert cached[0] == 0 and cached[1] > 0, cached
    assert s.metrics().get("gemmad_kv_sessions", 0) >= 1


def _ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as t:
            t.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_several_listen_addresses(start_server):
    if not _ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine")
    s = start_server("--host", "[::1]")
    assert "listening on http://[::1]:%d" % s.port in s.log()
    r4 = requests.get(f"http://127.0.0.1:{s.port}/health", timeout=5)
    r6 = requests.get(f"http://[::1]:{s.port}/health", timeout=5)
    assert r4.status_code == 200 and r6.status_code == 200
    r = requests.post(f"http://[::1]:{s.port}{CHAT}", timeout=60, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_bad_listen_address_fails_at_start(tmp_path):
    from conftest import BIN, MODEL
    p = subprocess.run([BIN, "--model", MODEL, "--port", "0", "--host", "127.0.0.1",
                        "--host", "no-such-host.invalid"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0
    assert "no-such-host.invalid" in p.stderr
