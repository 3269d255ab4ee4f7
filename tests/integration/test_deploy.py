"""What a load balancer and an orchestrator rely on, against the real binary: liveness
(/live) versus readiness (/health) while draining, the KV session id in an X-Session-Id
header, several listen addresses (IPv6 included), and a /metrics page that promtool accepts
with the families gateways read (vLLM's names, the Gateway API Inference Extension's)."""
import json
import re
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
    s = start_server("--drain-timeout-s", "60")
    live = s.get("/live")
    assert live.status_code == 200, live.text
    body = live.json()
    assert body["status"] == "ok" and body["state"] == "ready" and body["pending"] == 0
    got = {"chunks": 0, "done": False}
    started = threading.Event()

    def stream():
        with requests.post(s.url + CHAT, json={
                "messages": [{"role": "user", "content": "Count from one to one hundred."}],
                "max_tokens": 120, "ignore_eos": True, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}, stream=True, timeout=90) as r:
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
    m = s.metrics()
    assert m['gemmad_server_state{state="draining"}'] == 1
    assert m['gemmad_server_state{state="ready"}'] == 0
    t.join(90)
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


def _promtool():
    p = shutil.which("promtool")
    if not p:
        pytest.skip("promtool not installed (Debian package prometheus; deploy/setup-deps.sh)")
    return p


def _stream(url, max_tokens, on_chunk=None):
    n = 0
    with requests.post(url + CHAT, json={
            "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True},
            stream=True, timeout=120) as r:
        for d in sse_events(r):
            if d is None or d == "[DONE]":
                continue
            n += 1
            if on_chunk:
                on_chunk(n)
    return n


def test_metrics_promtool_and_gateway_families(server):
    promtool = _promtool()
    r = server.post(CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert r.status_code == 200
    _stream(server.url, 4)
    text = server.get("/metrics").text
    # promtool's only objection may be the colon in vLLM's names (reserved for recording
    # rules by convention, yet the names gateways read); everything else must lint clean.
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    problems = [l for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    other = [l for l in problems
             if not (l.startswith("vllm:") and l.endswith("metric names should not contain ':'"))]
    assert not other, "promtool: " + "\n".join(other)
    families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert {l.split()[0] for l in problems} == {f for f in families if f.startswith("vllm:")}
    own = "\n".join(l for l in text.splitlines() if "vllm:" not in l) + "\n"
    p = subprocess.run([promtool, "check", "metrics"], input=own, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0 and not (p.stdout + p.stderr).strip(), p.stdout + p.stderr

    m = server.metrics()
    model = server.get("/v1/models").json()["data"][0]["id"]
    ml = '{model_name="%s"}' % model
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                 "vllm:time_per_output_token_seconds_count",
                 "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count"]:
        assert name + ml in m, name
    assert m["vllm:generation_tokens_total" + ml] == m["gemmad_generation_tokens_total"]
    assert m["vllm:e2e_request_latency_seconds_count" + ml] >= 2
    assert 0 <= m["vllm:kv_cache_usage_perc" + ml] <= 1
    assert m["vllm:prefix_cache_queries_total" + ml] >= m["vllm:prefix_cache_hits_total" + ml]
    assert m['gemmad_server_state{state="ready"}'] == 1
    assert m['gemmad_server_state{state="draining"}'] == 0
    assert m["process_resident_memory_bytes"] > 50e6
    assert m["process_open_fds"] > 3 and m["process_cpu_seconds_total"] > 0
    assert abs(m["process_start_time_seconds"] - time.time()) < 86400
    assert any(k.startswith("gemmad_build_info{") for k in m)
    assert any(k.startswith("gemmad_config_info{") and 'model_name="%s"' % model in k for k in m)
    # Buckets reach past the 600 s a request may run.
    assert 'gemmad_e2e_request_latency_seconds_bucket{le="3600"}' in m
    assert 'vllm:e2e_request_latency_seconds_bucket{model_name="%s",le="960"}' % model in m


def test_generation_tokens_move_while_streaming(start_server):
    s = start_server()
    seen = {}

    def on_chunk(n):
        if n == 12 and "mid" not in seen:
            seen["mid"] = s.metrics()["gemmad_generation_tokens_total"]

    before = s.metrics()["gemmad_generation_tokens_total"]
    n = _stream(s.url, 40, on_chunk)
    after = s.metrics()["gemmad_generation_tokens_total"]
    assert n >= 20 and "mid" in seen
    assert seen["mid"] - before >= 10, (before, seen["mid"])  # counted before the end
    assert after - before == 40
