"""A fleet behind the shipped nginx config: three real gemmad replicas on loopback ports and
Debian's nginx running deploy/nginx/gemmad.conf (only its addresses rewritten), in a temp
directory of its own (config, pid, logs, temp files). Checks that a replica that crashes
(SIGKILL) or drains (SIGTERM) loses no request that has not started streaming, that streams
cut off by a crash end with an error the client sees, and that a conversation with an
X-Session-Id keeps landing on the replica that holds its KV cache.

Bounded: every request has a timeout, load loops have fixed counts, and nginx and the
replicas are stopped at the end of each test."""
import concurrent.futures as cf
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest
import requests

from conftest import ROOT, Server

NGINX_CONF = os.path.join(ROOT, "deploy", "nginx", "gemmad.conf")
CHAT = "/v1/chat/completions"
# One compute thread per replica: three replicas share this machine's cores.
REPLICA_ARGS = ("--threads", "1", "--drain-timeout-s", "60", "--max-seqs", "16")


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_nginx_conf(ports, listen_port):
    """The shipped config with its replica addresses and listen port replaced."""
    text = open(NGINX_CONF).read()
    addrs = []
    for a in re.findall(r"^\s*server\s+(\S+:\d+)\s", text, re.M):
        if a not in addrs:
            addrs.append(a)
    assert len(addrs) == len(ports), f"the shipped config lists {addrs}"
    for a, p in zip(addrs, ports):
        text = re.sub(r"(^\s*server\s+)" + re.escape(a) + r"(\s)", r"\g<1>127.0.0.1:%d\g<2>" % p,
                      text, flags=re.M)
    text, n = re.subn(r"^(\s*)listen\s+\d+;", r"\g<1>listen 127.0.0.1:%d;" % listen_port, text,
                      flags=re.M)
    assert n == 1
    return text


class Nginx:
    def __init__(self, tmp, ports):
        self.bin = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(self.bin):
            pytest.skip("nginx not installed (deploy/setup-deps.sh installs it)")
        self.dir = str(tmp)
        os.chmod(self.dir, 0o755)
        self.port = _free_port()
        with open(os.path.join(self.dir, "gemmad.conf"), "w") as f:
            f.write(render_nginx_conf(ports, self.port))
        d = self.dir
        user = "user root;" if os.geteuid() == 0 else ""
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(f"""{user}
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format fleet '$http_x_test_id|$status|$upstream_addr|$upstream_status';
    access_log {d}/access.log fleet;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    include {d}/gemmad.conf;
}}
""")
        t = subprocess.run([self.bin, "-t", "-p", d, "-c", f"{d}/nginx.conf", "-e",
                            f"{d}/error.log"], capture_output=True, text=True, timeout=30)
        assert t.returncode == 0, t.stderr
        self.proc = subprocess.Popen([self.bin, "-p", d, "-c", f"{d}/nginx.conf", "-e",
                                      f"{d}/error.log"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                requests.get(self.url + "/health", timeout=2)
                return
            except requests.RequestException:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nginx did not start: " + self.errors())

    def errors(self):
        try:
            return open(os.path.join(self.dir, "error.log")).read()[-3000:]
        except OSError:
            return ""

    def access(self):
        """{test id: [(status, upstream_addr, upstream_status)]} from the access log."""
        out = {}
        with open(os.path.join(self.dir, "access.log")) as f:
            for line in f:
                parts = line.split("|", 3)
                if len(parts) == 4:
                    out.setdefault(parts[0], []).append((parts[1], parts[2], parts[3].strip()))
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: the access log is complete
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def fleet(tmp_path):
    replicas = []
    ngx = None
    try:
        for _ in range(3):
            replicas.append(Server(REPLICA_ARGS))
        ngx = Nginx(tmp_path, [r.port for r in replicas])
        yield replicas, ngx
    finally:
        if ngx:
            ngx.stop()
        for r in replicas:
            r.stop(signal.SIGKILL)


def chat(url, tid, max_tokens, content="Say something about the sea.", session=None,
         messages=None):
    h = {"X-Test-Id": tid}
    if session:
        h["X-Session-Id"] = session
    r = requests.post(url + CHAT, headers=h, timeout=90, json={
        "messages": messages or [{"role": "user", "content": content}],
        "max_tokens": max_tokens, "temperature": 0})
    return r


def stream(url, tid, max_tokens, started=None):
    """('done', chunks) when the stream ended with [DONE], ('error', what) when the client
    saw it break (a connection error or a body that ended early)."""
    chunks = 0
    try:
        with requests.post(url + CHAT, headers={"X-Test-Id": tid}, stream=True,
                           timeout=(5, 60), json={
                               "messages": [{"role": "user", "content": "Tell a long story."}],
                               "max_tokens": max_tokens, "temperature": 0,
                               "ignore_eos": True, "stream": True}) as r:
            if r.status_code != 200:
                return ("status", r.status_code)
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    if line == b"data: [DONE]":
                        return ("done", chunks)
                    if b'"error"' in line:
                        return ("error", "error event")
                    chunks += 1
                    if started is not None and chunks == 1:
                        started.release()
        return ("error", f"ended without [DONE] after {chunks} chunks")
    except requests.RequestException as e:
        return ("error", type(e).__name__)


def addr(replica):
    return f"127.0.0.1:{replica.port}"


def conversation(url, tid, topic, first, follows, session=None):
    """Three turns, each carrying the replies so far; the cached_tokens of each turn."""
    msgs = [{"role": "system", "content": f"You answer questions about {topic} in short "
                                          "sentences, one fact at a time, politely."},
            {"role": "user", "content": first}]
    cached = []
    for turn, follow in enumerate(follows + [None]):
        r = chat(url, f"{tid}-{turn}", 6, session=session, messages=msgs)
        assert r.status_code == 200, r.text
        j = r.json()
        cached.append(j["usage"]["prompt_tokens_details"]["cached_tokens"])
        if follow:
            msgs += [{"role": "assistant", "content": j["choices"][0]["message"]["content"]},
                     {"role": "user", "content": follow}]
    return cached


def test_session_affinity(fleet):
    replicas, ngx = fleet
    cached = conversation(ngx.url, "aff", "geography", "What is the capital of France?",
                          ["And of Spain?", "And of Italy?"], session="conv-42")
    assert cached[0] == 0 and cached[1] > 0 and cached[2] > 0, cached
    # The same conversation without the header (another system prompt, so nothing is cached
    # from the first): least_conn spreads its turns, and a turn that lands on another
    # replica than the one before finds nothing cached.
    plain = conversation(ngx.url, "rr", "history", "Who built the pyramids?",
                         ["And the Colosseum?", "And the Great Wall?"])
    ngx.stop()
    log = ngx.access()
    ups = {log[f"aff-{t}"][0][1] for t in range(3)}
    assert len(ups) == 1, f"the conversation moved between replicas: {ups}"
    rr = [log[f"rr-{t}"][0][1] for t in range(3)]
    assert len(set(rr)) > 1, f"without a session id every turn went to {rr[0]}"
    for t in (1, 2):
        if rr[t] != rr[t - 1]:
            assert plain[t] == 0, (rr, plain)


def test_sigkill_one_replica_under_load(fleet):
    replicas, ngx = fleet
    victim = replicas[0]
    n_plain, n_stream = 60, 20
    streams_started = threading.Semaphore(0)
    with cf.ThreadPoolExecutor(max_workers=28) as pool:
        sf = {pool.submit(stream, ngx.url, f"s{i}", 96, streams_started): f"s{i}"
              for i in range(n_stream)}
        pf = {}
        for i in range(n_plain):
            pf[pool.submit(chat, ngx.url, f"p{i}", 8)] = f"p{i}"
            if i == 20:
                # a third of the plain requests and at least 10 streams are under way
                for _ in range(10):
                    assert streams_started.acquire(timeout=60)
                victim.proc.send_signal(signal.SIGKILL)
        plain = {pf[f]: f.result(timeout=120) for f in pf}
        streams = {sf[f]: f.result(timeout=120) for f in sf}
    victim.proc.wait(10)
    bad = {t: (r.status_code, r.text[:200]) for t, r in plain.items() if r.status_code != 200}
    assert not bad, f"non-streamed requests failed: {bad}"
    ngx.stop()
    log = ngx.access()
    cut = 0
    for t, res in streams.items():
        up = log[t][-1][1] if t in log else "?"
        if res[0] == "done":
            continue
        assert res[0] == "error", (t, res)
        # only a stream that was on the killed replica may break
        assert up.split(", ")[-1] == addr(victim), (t, res, up)
        cut += 1
    retried = sum(1 for t in plain if ", " in log[t][-1][1])
    assert all(log[t][-1][0] == "200" for t in plain)
    print(f"\nSIGKILL: {n_plain} plain all 200 ({retried} retried by nginx), "
          f"{n_stream - cut} streams done, {cut} cut off with a client-visible error")


def test_sigterm_one_replica_during_streams(fleet):
    replicas, ngx = fleet
    victim = replicas[1]
    n_stream = 20
    started = threading.Semaphore(0)
    with cf.ThreadPoolExecutor(max_workers=32) as pool:
        sf = {pool.submit(stream, ngx.url, f"t{i}", 64, started): f"t{i}"
              for i in range(n_stream)}
        for _ in range(n_stream):
            assert started.acquire(timeout=90), "streams did not start"
        victim.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        # New work during the drain: the draining replica answers 503, nginx retries
        # elsewhere and then leaves it out (max_fails=1).
        pf = {pool.submit(chat, ngx.url, f"n{i}", 4): f"n{i}" for i in range(10)}
        plain = {pf[f]: f.result(timeout=120) for f in pf}
        streams = {sf[f]: f.result(timeout=150) for f in sf}
    assert victim.proc.wait(90) == 0, "the drained replica did not exit 0"
    not_done = {t: r for t, r in streams.items() if r[0] != "done"}
    assert not not_done, f"streams failed during the drain: {not_done}"
    bad = {t: (r.status_code, r.text[:200]) for t, r in plain.items() if r.status_code != 200}
    assert not bad, f"requests failed during the drain: {bad}"
    ngx.stop()
    log = ngx.access()
    on_victim = [t for t in streams if log[t][-1][1] == addr(victim)]
    assert on_victim, "no stream ran on the drained replica (nothing was tested)"
    for t in plain:
        final = log[t][-1][1].split(", ")[-1]
        assert final != addr(victim), f"{t} was answered by the draining replica"
