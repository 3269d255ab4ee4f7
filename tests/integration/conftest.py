"""Fixtures for the integration tests: start the real gemmad binary on a free loopback port
with the bundled model and talk to it over HTTP.

Environment: GEMMAD_BIN (default build/gemmad), GEMMAD_TEST_MODEL (default the bundled
model). Tests that cannot run here (no binary, no model) are skipped.
"""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("GEMMAD_BIN", os.path.join(ROOT, "build", "gemmad"))
MODEL = os.environ.get("GEMMAD_TEST_MODEL",
                       os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))

# Small limits keep the suite fast on two cores.
BASE_ARGS = ["--host", "127.0.0.1", "--port", "0", "--ctx-size", "1024", "--max-tokens", "512",
             "--threads", "2", "--max-n", "4", "--body-limit", "262144", "--kv-tokens", "8192",
             "--drain-timeout-s", "10"]


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run the schemathesis pass for longer (make fuzz-api)")


class Server:
    """A running gemmad process; `url` is its base URL, `lines` its stderr so far."""

    def __init__(self, extra=(), env=None):
        if not os.path.exists(BIN):
            pytest.skip(f"gemmad binary not built ({os.path.relpath(BIN, ROOT)})")
        if not os.path.exists(MODEL):
            pytest.skip("bundled model missing (make model)")
        e = dict(os.environ)
        e.update(env or {})
        self.args = [BIN, "--model", MODEL] + BASE_ARGS + list(extra)
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=e, text=True, errors="replace")
        self.lines = []
        self.port = None
        self._ready = threading.Event()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()
        if not self._ready.wait(30) or self.port is None:
            self.stop()
            raise RuntimeError("gemmad did not start:\n" + "".join(self.lines[-30:]))
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gemmad exited:\n" + "".join(self.lines[-30:]))
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError("gemmad never became healthy")

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._ready.set()
        self._ready.set()

    def log(self):
        return "".join(self.lines)

    def post(self, path, body, **kw):
        return requests.post(self.url + path, json=body, timeout=kw.pop("timeout", 120), **kw)

    def get(self, path, **kw):
        return requests.get(self.url + path, timeout=kw.pop("timeout", 30), **kw)

    def metrics(self, **kw):
        """Parses /metrics into {name{labels}: value} (kw: passed to get, e.g. headers)."""
        out = {}
        for line in self.get("/metrics", **kw).text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out

    def raw(self, data, timeout=10):
        """Sends raw bytes, returns everything the server answered (until close/timeout)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(data)
            chunks = []
            while True:
                try:
                    b = s.recv(65536)
                except socket.timeout:
                    break
                if not b:
                    break
                chunks.append(b)
                if b"\r\n\r\n" in b"".join(chunks) and not data.startswith(b"POST"):
                    pass
            return b"".join(chunks)
        finally:
            s.close()

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=45):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    rc = s.stop()
    assert rc == 0, "gemmad exited with %r\n%s" % (rc, s.log()[-3000:])


@pytest.fixture
def start_server():
    """Factory for a server with extra flags; stopped at the end of the test."""
    started = []

    def make(*extra, env=None):
        s = Server(extra, env=env)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop(signal.SIGKILL if s.proc.poll() is None else signal.SIGTERM)


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


@pytest.fixture(scope="session")
def model_id(server):
    return server.get("/v1/models").json()["data"][0]["id"]


def sse_events(resp):
    """Yields the data payloads of an SSE response (requests, stream=True)."""
    buf = b""
    for chunk in resp.iter_content(chunk_size=None):
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data: "):
                    yield line[6:].decode("utf-8")
                elif line.startswith(b":"):
                    yield None  # a comment (keep-alive)


def parse_sse(text):
    """All data payloads of a complete SSE body; '[DONE]' stays a string."""
    out = []
    for ev in text.split("\n\n"):
        for line in ev.split("\n"):
            if line.startswith("data: "):
                d = line[6:]
                out.append(d if d == "[DONE]" else json.loads(d))
    return out
