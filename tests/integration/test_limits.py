"""Connection-level limits: slow senders are closed at the request deadline, the connection
limit refuses extra connections and recovers, and the command line rejects bad values with a
one-line error and exit status 2."""
import socket
import subprocess
import time

import pytest

from conftest import BIN, MODEL


def _closed_within(s, seconds):
    """True when the server closes s (EOF or reset) within `seconds`."""
    s.settimeout(0.5)
    end = time.time() + seconds
    while time.time() < end:
        try:
            if s.recv(4096) == b"":
                return True
        except socket.timeout:
            pass
        except (ConnectionResetError, BrokenPipeError):
            return True
        try:
            s.sendall(b"X")  # keep dribbling
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def test_slowloris_headers_and_body(start_server):
    s = start_server("--request-timeout-s", "2", "--connection-timeout-s", "30")
    hdr = socket.create_connection(("127.0.0.1", s.port))
    hdr.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    body = socket.create_connection(("127.0.0.1", s.port))
    body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: 100000\r\n\r\n{")
    t0 = time.time()
    assert _closed_within(hdr, 8), "header dribbler not closed"
    assert _closed_within(body, 8), "body dribbler not closed"
    assert time.time() - t0 < 10
    assert s.get("/health").status_code == 200
    hdr.close()
    body.close()


def test_connection_limit(start_server):
    """Past the limit a connection is not served (it waits in the listen queue or is
    closed); once the others leave it is served."""
    s = start_server("--max-connections", "4")
    socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(4)]
    time.sleep(0.3)
    extra = socket.create_connection(("127.0.0.1", s.port))
    extra.settimeout(1)
    got = None
    try:
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = extra.recv(4096)
    except socket.timeout:
        got = None  # queued
    except (ConnectionResetError, BrokenPipeError):
        got = b""  # refused
    assert got in (None, b""), got[:80]
    for k in socks:
        k.close()
    if got is None:  # the queued connection is served now
        extra.settimeout(10)
        assert extra.recv(4096).startswith(b"HTTP/1.1 200")
    extra.close()
    assert s.get("/health").status_code == 200  # recovered


@pytest.mark.parametrize("args", [["--port", "abc"], ["--ctx-size", "-5"], ["--bogus", "1"],
                                  ["--kv-dtype", "q3"], ["--port"]])
def test_bad_flags_exit2(args):
    r = subprocess.run([BIN, "--model", MODEL] + args, capture_output=True, text=True, timeout=20)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gemmad: ")


def test_bad_env_exit2():
    r = subprocess.run([BIN, "--model", MODEL], capture_output=True, text=True, timeout=20,
                       env={"GEMMAD_THREADS": "many"})
    assert r.returncode == 2 and "GEMMAD_THREADS" in r.stderr


def test_help_lists_settings():
    r = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0
    for flag in ["--model", "--host", "--port", "--threads", "--ctx-size", "--max-tokens",
                 "--body-limit", "--request-timeout-s", "--sse-keepalive-s", "--drain-timeout-s",
                 "--max-queue", "--max-n", "--kv-memory-mib", "--kv-block-size", "--kv-dtype",
                 "--max-batch-tokens", "--prefix-cache", "--session-ttl-s", "--api-keys-file",
                 "--log-level", "--device", "--connection-timeout-s", "--max-connections"]:
        assert flag in r.stdout, flag


def test_file_env_flag_precedence(start_server, tmp_path):
    conf = tmp_path / "g.conf"
    conf.write_text("model_alias = from-file\nlog_level = warn\nsse_keepalive_s = 7\n")
    s = start_server("--config", str(conf), "--model-alias", "from-flag",
                     env={"GEMMAD_MODEL_ALIAS": "from-env", "GEMMAD_LOG_LEVEL": "debug"})
    assert s.get("/v1/models").json()["data"][0]["id"] == "from-flag"  # flag beats env, file
    s.post("/v1/chat/completions", {"messages": []})
    time.sleep(0.2)
    assert " DEBUG " in s.log()  # env beats file


def test_missing_model_file_exit1(tmp_path):
    r = subprocess.run([BIN, "--model", str(tmp_path / "none.gguf"), "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "cannot load the model" in r.stderr
