"""Continuous batching under load: 32 concurrent greedy streams equal their
solo runs, a disconnect storm returns KV to its baseline, a full queue answers 429, KV
exhaustion preempts without changing outputs, and a long prompt arriving among running streams
does not stall them for longer than a bounded step."""
import json
import socket
import statistics
import threading
import time

import requests

from conftest import sse_events

PROMPTS = ["Name a colour.", "Count to five.", "Say hello in French.", "What is 2+2?",
           "Name a fruit.", "Describe rain.", "Name a planet.", "Say a greeting.",
           "Name an animal.", "What is the sky?", "Name a river.", "Say goodbye.",
           "Name a tree.", "Describe snow.", "Name a metal.", "What is water?",
           "Name a bird.", "Name a flower.", "Say thank you.", "Name a month.",
           "Name a sport.", "Describe the sun.", "Name a fish.", "Name a city.",
           "Name a tool.", "Describe wind.", "Name a shape.", "Say yes.",
           "Name a vegetable.", "Describe fire.", "Name an insect.", "Name a song."]


def model_of(srv):
    return srv.get("/v1/models").json()["data"][0]["id"]


def chat_body(model, prompt, max_tokens, stream, **extra):
    b = {"model": model, "messages": [{"role": "user", "content": prompt}],
         "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    b.update(extra)
    return b


def stream_chat(srv, body, stamps=None, stop=None):
    """Streams one chat request; returns (text, finish_reason). Appends each content chunk's
    arrival time to `stamps` when given; leaves early (finish None) once `stop` is set."""
    r = requests.post(srv.url + "/v1/chat/completions", json=body, stream=True, timeout=120)
    assert r.status_code == 200, r.text
    text, finish = "", None
    with r:
        for d in sse_events(r):
            if stop is not None and stop.is_set():
                break
            if d is None or d == "[DONE]":
                continue
            ch = json.loads(d)["choices"][0]
            c = ch["delta"].get("content")
            if c:
                text += c
                if stamps is not None:
                    stamps.append(time.monotonic())
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    return text, finish


def solo(srv, model, prompt, max_tokens, **extra):
    r = srv.post("/v1/chat/completions", chat_body(model, prompt, max_tokens, False, **extra))
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def run_threads(fn, args):
    out = [None] * len(args)
    errs = []

    def work(i):
        try:
            out[i] = fn(*args[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append((i, repr(e)))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(args))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    assert not errs, errs
    return out


def wait_metrics(srv, cond, timeout=15):
    end = time.time() + timeout
    m = srv.metrics()
    while time.time() < end:
        if cond(m):
            return m
        time.sleep(0.1)
        m = srv.metrics()
    return m


RUNNING = 'gemmad_sched_sequences{state="running"}'
WAITING = 'gemmad_sched_sequences{state="waiting"}'
USED = ('gemmad_kv_blocks{class="full",state="used"}', 'gemmad_kv_blocks{class="swa",state="used"}')


def test_32_concurrent_streams_equal_solo(start_server):
    srv = start_server("--max-seqs", "32")
    model = model_of(srv)
    ref = [solo(srv, model, p, 6) for p in PROMPTS]
    got = run_threads(lambda p: stream_chat(srv, chat_body(model, p, 6, True)),
                      [(p,) for p in PROMPTS])
    for p, want, (text, finish) in zip(PROMPTS, ref, got):
        assert finish in ("stop", "length"), p
        assert text == want, (p, text, want)
    m = srv.metrics()
    # The 32 really shared steps: the mean batch exceeded one sequence.
    assert m["gemmad_sched_batch_sequences_sum"] > m["gemmad_sched_batch_sequences_count"]


def open_raw_stream(srv, model, prompt):
    body = json.dumps(chat_body(model, prompt, 200, True, ignore_eos=True)).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    return s


def test_disconnect_storm_frees_kv(start_server):
    srv = start_server("--max-seqs", "32", "--prefix-cache", "0")
    model = model_of(srv)
    base = srv.metrics()
    socks = [open_raw_stream(srv, model, PROMPTS[i]) for i in range(20)]
    for s in socks:
        got = b""  # the role chunk, then the first token's chunk
        while got.count(b"data: ") < 2:
            b = s.recv(4096)
            assert b, got
            got += b
    assert srv.metrics()[RUNNING] + srv.metrics()[WAITING] >= 1
    for s in socks:
        s.close()
    m = wait_metrics(srv, lambda m: m[RUNNING] == 0 and m[WAITING] == 0
                     and all(m[k] == base[k] for k in USED))
    assert m[RUNNING] == 0 and m[WAITING] == 0
    for k in USED:
        assert m[k] == base[k], (k, m[k], base[k])
    # Still serving.
    assert solo(srv, model, "hi", 2) is not None


def test_queue_overflow_429(start_server):
    srv = start_server("--max-seqs", "1", "--max-queue", "1")
    model = model_of(srv)
    body = chat_body(model, "Write a long essay.", 60, False, ignore_eos=True)
    res = run_threads(lambda: srv.post("/v1/chat/completions", body), [()] * 6)
    codes = [r.status_code for r in res]
    assert 429 in codes and 200 in codes, codes
    assert set(codes) <= {200, 429}, codes
    for r in res:
        if r.status_code == 429:
            assert r.headers.get("Retry-After", "").isdigit(), r.headers
            e = r.json()["error"]
            assert isinstance(e["message"], str) and e["message"] and "type" in e
        else:
            assert r.json()["choices"][0]["finish_reason"] == "length"
    assert srv.metrics()["gemmad_sched_queue_rejections_total"] == codes.count(429)


def test_kv_exhaustion_preempts_and_stays_correct(start_server):
    # 10 blocks of 16 positions; each request needs ~20 prompt + 90 generated tokens = 7
    # blocks, so any two sequences that run at the same time (14 blocks) must preempt, even
    # when a loaded machine staggers the four requests' arrivals.
    srv = start_server("--max-seqs", "4", "--ctx-size", "128", "--kv-tokens", "160",
                       "--prefix-cache", "0")
    model = model_of(srv)
    prompts = PROMPTS[:4]
    ref = [solo(srv, model, p, 90, ignore_eos=True) for p in prompts]
    got = run_threads(lambda p: stream_chat(srv, chat_body(model, p, 90, True, ignore_eos=True)),
                      [(p,) for p in prompts])
    for p, want, (text, finish) in zip(prompts, ref, got):
        assert finish == "length", p
        assert text == want, (p, text, want)
    assert srv.metrics()["gemmad_sched_preemptions_total"] > 0


def test_long_prompt_does_not_stall_streams(start_server):
    # A 32-token step budget: the long prompt is prefilled in chunks of at most 32 tokens
    # (less the decode rows), so every step stays short.
    srv = start_server("--max-seqs", "8", "--ctx-size", "2048", "--kv-tokens", "16384",
                       "--max-batch-tokens", "32", "--max-tokens", "1500")
    model = model_of(srv)
    stamps = [[] for _ in range(4)]
    res = []
    stop = threading.Event()

    def streamer(i):
        try:
            res.append(stream_chat(srv, chat_body(model, PROMPTS[i], 1500, True,
                                                  ignore_eos=True), stamps[i], stop))
        except Exception as e:  # noqa: BLE001 - reported below
            res.append((repr(e), "error"))

    ts = [threading.Thread(target=streamer, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    try:
        # Let every stream decode for a while to measure the steady gap.
        end = time.time() + 60
        while time.time() < end and min(len(s) for s in stamps) < 15 and not res:
            time.sleep(0.05)
        assert min(len(s) for s in stamps) >= 15, [len(s) for s in stamps]
        t_long = time.monotonic()
        long_prompt = " ".join("word%d" % (i % 97) for i in range(500))  # ~1,500 tokens
        long_stamps = []
        text, finish = stream_chat(srv, chat_body(model, long_prompt, 2, True), long_stamps)
        assert long_stamps, "the long request produced no token"
        t_first = long_stamps[0]
    finally:
        stop.set()
        for t in ts:
            t.join(180)
    assert len(res) == 4 and all(f is None for _, f in res), res
    before = []
    during = []
    for s in stamps:
        gaps = [(b - a, b) for a, b in zip(s, s[1:])]
        before += [g for g, b in gaps if b < t_long]
        during += [g for g, b in gaps if t_long <= b <= t_first]
    median = statistics.median(before)
    # Bound: one step carrying a <=32-token prefill chunk plus the 4 decode rows. We allow 3x
    # the median steady decode gap plus 1.5 s slack for this noisy shared 2-core machine. A
    # scheduler that prefills the whole prompt in one step, or stops decoding until the
    # prefill ends, exceeds it by far (about 10 s here).
    bound = 3 * median + 1.5
    prefill = t_first - t_long
    print("long prompt: prefill %.2f s, %d gaps during it, max %.3f s, steady median %.3f s, "
          "bound %.3f s" % (prefill, len(during), max(during, default=0), median, bound))
    # The prompt really took several steps while the streams ran, else the test proves nothing.
    assert len(during) >= 8, (len(during), prefill)
    assert max(during) < bound, (max(during), median, prefill)


def seeded_body(model, prompt, seed, max_tokens=16):
    return {"model": model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0.9, "top_p": 0.95, "seed": seed,
            "logprobs": True, "top_logprobs": 2, "ignore_eos": True}


def seeded(srv, body):
    """One sampled request; returns (content, [(token, logprob, top_logprobs)], usage)."""
    r = srv.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    j = r.json()
    ch = j["choices"][0]
    lp = [(e["token"], e["logprob"], [(t["token"], t["logprob"]) for t in e["top_logprobs"]])
          for e in ch["logprobs"]["content"]]
    assert len(lp) == body["max_tokens"], len(lp)
    return ch["message"]["content"], lp, j["usage"]


def test_seeded_sampling_same_alone_among_31_and_cached(start_server):
    """A seeded, sampled request (temperature 0.9, top_p)
    gives the same tokens and bit-equal logprobs alone, among 31 concurrent sampled requests,
    and when its prompt comes from the prefix cache."""
    srv = start_server("--max-seqs", "32", "--deterministic")
    model = model_of(srv)
    # Long enough (> 2 blocks of 16 tokens) for whole prompt blocks to be cached.
    body = seeded_body(model, "You are a poet who writes short, vivid lines about nature, "
                       "weather and the sea. Write one sentence about the sea.", 1234)
    text0, lp0, u0 = seeded(srv, body)
    # The same request again: its prompt blocks come from the prefix cache.
    text1, lp1, u1 = seeded(srv, body)
    cached = (u1.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    assert cached > 0, u1
    assert (text1, lp1) == (text0, lp0)
    # Among 31 other sampled requests with their own seeds, all in flight together.
    others = [seeded_body(model, PROMPTS[i], 100 + i) for i in range(31)]
    bodies = [body] + others
    got = run_threads(lambda b: seeded(srv, b), [(b,) for b in bodies])
    assert (got[0][0], got[0][1]) == (text0, lp0)
    m = srv.metrics()
    assert m["gemmad_sched_batch_sequences_sum"] > m["gemmad_sched_batch_sequences_count"]
    # And each of the others equals its own solo run.
    for b, (t, lp, _) in zip(others[:4], got[1:5]):
        assert seeded(srv, b)[:2] == (t, lp), b["messages"][0]["content"]


def test_seeded_sampling_same_after_preemption(start_server):
    """Seeded, sampled requests that are preempted (KV exhausted) and
    recomputed give the same tokens and logprobs as alone."""
    srv = start_server("--max-seqs", "4", "--ctx-size", "128", "--kv-tokens", "160",
                       "--prefix-cache", "0", "--deterministic")
    model = model_of(srv)
    # 100 tokens each (8 of the 10 KV blocks a sequence): any two requests in flight together
    # exhaust the KV, so preemption does not depend on how closely the threads' requests
    # arrive (with 40 tokens, a CI run under load once saw none)
    bodies = [seeded_body(model, p, 7 + i, max_tokens=100) for i, p in enumerate(PROMPTS[:4])]
    ref = [seeded(srv, b)[:2] for b in bodies]
    got = run_threads(lambda b: seeded(srv, b)[:2], [(b,) for b in bodies])
    assert srv.metrics()["gemmad_sched_preemptions_total"] > 0
    for b, want, have in zip(bodies, ref, got):
        assert have == want, b["messages"][0]["content"]
