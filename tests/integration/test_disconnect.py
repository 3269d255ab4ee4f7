"""A client that leaves mid-stream cancels its sequence: the running gauge returns to 0 and
the cancellation is counted; the server keeps serving."""
import socket
import time
import json


def running(server):
    return server.metrics().get("gemmad_requests_running", 0)


def wait_idle(server, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        m = server.metrics()
        if m.get("gemmad_requests_running", 0) == 0 and m.get("gemmad_requests_waiting", 0) == 0:
            return True
        time.sleep(0.1)
    return False


def open_stream(server, model_id, max_tokens=400):
    body = json.dumps({"model": model_id, "stream": True, "max_tokens": max_tokens,
                       "ignore_eos": True,
                       "messages": [{"role": "user", "content": "Write a long essay."}]}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    return s


def test_disconnect_mid_stream(server, model_id):
    assert wait_idle(server)
    before = server.metrics().get('gemmad_request_success_total{finished_reason="cancelled"}', 0)
    s = open_stream(server, model_id)
    got = b""
    while got.count(b"data: ") < 4:  # role chunk + a few tokens
        b = s.recv(4096)
        assert b, got
        got += b
    assert running(server) >= 1
    s.close()
    assert wait_idle(server, 20), "sequence still running after the client left"
    after = server.metrics().get('gemmad_request_success_total{finished_reason="cancelled"}', 0)
    assert after == before + 1
    log = server.log()
    assert "connection lost" in log


def test_disconnect_before_first_token(server, model_id):
    assert wait_idle(server)
    for _ in range(5):
        s = open_stream(server, model_id)
        s.close()
    assert wait_idle(server, 30)
    r = server.post("/v1/chat/completions", {"model": model_id, "max_tokens": 2,
                                             "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200


def test_disconnect_non_stream(server, model_id):
    assert wait_idle(server)
    body = json.dumps({"model": model_id, "max_tokens": 300, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "Write a long essay."}]}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    end = time.time() + 30
    while running(server) < 1 and time.time() < end:
        time.sleep(0.05)
    assert running(server) >= 1
    before = server.metrics().get('gemmad_request_success_total{finished_reason="cancelled"}', 0)
    s.close()
    # a suspended non-stream request cannot see the close by itself: the server notices and
    # cancels the sequence within a tick
    assert wait_idle(server, 10)
    after = server.metrics().get('gemmad_request_success_total{finished_reason="cancelled"}', 0)
    assert after == before + 1
