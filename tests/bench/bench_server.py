#!/usr/bin/env python3
"""Serving benchmark: aggregate generated tokens/s and time to first token (p50/p99) at
several concurrency levels, for build/gemmad and for llama.cpp's llama-server on the same
model, threads, prompts and generation length, with ratios.

Each client streams /v1/completions requests one after another: a prompt of
--prompt-tokens random token ids (distinct per request, so no server can reuse a cached
prefix), temperature 0, exactly --gen-tokens generated (ignore_eos). Aggregate tok/s =
generated tokens of all clients / wall time of the level; TTFT = send -> first streamed
token.

Then (skip with --no-spec / --no-mixed):
  * speculative decoding: one stream at a time, a repetitive request (rewrite a given piece
    of code changing one name: most of the answer quotes the prompt) and a free-text one,
    each with gemmad's speculation on and off ("speculative": false) and on llama-server;
    decode tok/s = (tokens - 1) / (last token - first token); gemmad's draft/accept counters.
  * mixed: --mixed-streams (16) streams decode while --mixed-long (4) prompts of
    --mixed-long-tokens (2,000) random ids arrive one every --mixed-interval seconds: TTFT
    of the long prompts (p50/p99, vs llama-server's) and the gaps between the running
    streams' chunks while those prompts prefill (p99 vs their median over the whole run).

llama-server is built from the llama.cpp sources bundled in the llama-cpp-python source
distribution (tests/bench/baseline.py): natively into ~/.cache/gemmad/llama-server-build, and
when that binary cannot run here (it dies with SIGILL on some AMX KVM guests) portably
(GGML_NATIVE=OFF, the AVX2/AVX-512 options of this CPU) into llama-server-build-portable;
which one ran is printed, and a baseline that cannot run is printed as FAILED (exit status 1).
It is restarted per level with -np equal to the concurrency.
Each level runs --repeats times (default 3) on each server, the two servers back to back
and the order alternating, because these shared machines drift by tens of percent within
minutes; the table gives each server's median run and the per-run ratios are printed.

  python3 tests/bench/bench_server.py --model models/gemma-3-270m-q4_k_m.gguf
"""
import argparse
import glob
import http.client
import json
import os
import random
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baseline  # noqa: E402  (tests/bench/baseline.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def physical_cores():
    try:
        seen = set()
        core = phys = None
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("physical id"):
                    phys = line.split(":")[1].strip()
                elif line.startswith("core id"):
                    core = line.split(":")[1].strip()
                    seen.add((phys, core))
        return max(1, len(seen))
    except OSError:
        return os.cpu_count() or 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name, argv, port, ready_path):
        self.name, self.port = name, port
        self.log = open(os.path.join("/tmp", f"bench-{name}-{port}.log"), "w")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self.log.close()
                raise RuntimeError(f"{name} exited ({baseline.describe_exit(rc)}) before it "
                                   f"was ready; see {self.log.name}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", ready_path)
                if c.getresponse().status == 200:
                    self.ready_s = time.perf_counter() - t0  # start -> model loaded, serving
                    return
            except OSError:
                pass
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"{name} did not become ready")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def model_id(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/v1/models")
    data = json.loads(c.getresponse().read())
    c.close()
    return data["data"][0]["id"]


def stream_request(port, body, stop=None):
    """Streams one /v1/completions request (body without "stream"); returns {ttft, tokens,
    stamps: perf_counter times of the chunks that carried text, t0}. Leaves early (closing
    the connection, which cancels the request) once the `stop` event is set."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    stamps, usage = [], None
    for raw in r:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"].get("completion_tokens")
        for ch in ev.get("choices") or []:
            if ch.get("text") is not None and (ch.get("text") or ch.get("finish_reason") is None):
                stamps.append(time.perf_counter())
        if stop is not None and stop.is_set():
            break
    c.close()
    ttft = stamps[0] - t0 if stamps else time.perf_counter() - t0
    return {"ttft": ttft, "tokens": usage or len(stamps), "stamps": stamps, "t0": t0}


def one_request(port, prompt, gen, model_name):
    """Stream one greedy completion of exactly gen tokens; returns (ttft_s, tokens)."""
    r = stream_request(port, {"model": model_name, "prompt": prompt, "max_tokens": gen,
                              "temperature": 0, "ignore_eos": True})
    return r["ttft"], r["tokens"]


def run_level(port, conc, per_client, prompt_tokens, gen, vocab_lo, vocab_hi, model_name, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab_lo, vocab_hi) for _ in range(prompt_tokens)]
               for _ in range(conc * per_client)]
    ttfts, toks, errors = [], [0], []
    lock = threading.Lock()

    def client(i):
        for k in range(per_client):
            try:
                t, n = one_request(port, prompts[i * per_client + k], gen, model_name)
            except Exception as e:  # report, keep the others going
                with lock:
                    errors.append(str(e))
                return
            with lock:
                ttfts.append(t)
                toks[0] += n

    threads = [threading.Thread(target=client, args=(i,)) for i in range(conc)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttfts.sort()
    p = lambda q: ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))] if ttfts else float("nan")
    return {"tok_s": toks[0] / wall, "ttft_p50": p(0.5), "ttft_p99": p(0.99),
            "tokens": toks[0], "wall_s": wall, "errors": errors}


def llama_python_levels(model_path, levels, prompt_tokens, gen, threads, lo, hi):
    """Fallback baseline without llama-server: llama.cpp's batched decode driven in-process
    through llama-cpp-python. All c sequences arrive at once; prompts are packed into 512-token
    llama_decode batches, then every step decodes one token per sequence (greedy). No HTTP,
    so this flatters the baseline slightly."""
    import numpy as np
    import llama_cpp as L
    quiet = L.llama_log_callback(lambda level, text, user: None)
    L.llama_log_set(quiet, None)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(model_path.encode(), L.llama_model_default_params())
    nv = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    out = {}
    for c in levels:
        cp = L.llama_context_default_params()
        cp.n_ctx = c * (prompt_tokens + gen + 16)
        cp.n_batch = cp.n_ubatch = 512
        cp.n_seq_max = c
        cp.n_threads = cp.n_threads_batch = threads
        ctx = L.llama_init_from_model(model, cp)
        batch = L.llama_batch_init(512, 0, 1)
        rng = random.Random(1000 + c)
        prompts = [[rng.randrange(lo, hi) for _ in range(prompt_tokens)] for _ in range(c)]
        nxt, ttft, ntok = [0] * c, [0.0] * c, 0

        def run(rows):
            batch.n_tokens = len(rows)
            for k, (sq, pos, tok, lg) in enumerate(rows):
                batch.token[k], batch.pos[k], batch.n_seq_id[k] = tok, pos, 1
                batch.seq_id[k][0], batch.logits[k] = sq, lg
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            res = []
            for k, (sq, _, _, lg) in enumerate(rows):
                if lg:
                    row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, k), shape=(nv,))
                    res.append((sq, int(row.argmax())))
            return res

        run([(0, 0, lo, True)])  # warm-up, then forget it
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        t0 = time.perf_counter()
        rows = [(sq, i, t, i == prompt_tokens - 1) for sq in range(c)
                for i, t in enumerate(prompts[sq])]
        for i in range(0, len(rows), 512):
            for sq, tok in run(rows[i:i + 512]):
                nxt[sq], ttft[sq] = tok, time.perf_counter() - t0
                ntok += 1
        for step in range(gen - 1):
            for sq, tok in run([(sq, prompt_tokens + step, nxt[sq], True) for sq in range(c)]):
                nxt[sq] = tok
                ntok += 1
        wall = time.perf_counter() - t0
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        ttft.sort()
        out[c] = {"tok_s": ntok / wall, "ttft_p50": ttft[len(ttft) // 2],
                  "ttft_p99": ttft[min(c - 1, int(0.99 * c))], "tokens": ntok, "wall_s": wall,
                  "errors": []}
    L.llama_model_free(model)
    return out


# ---- llama-server on any host ------------------------------------------------------------

class LlamaServers:
    """Starts llama-server in the first build variant that runs here (tests/bench/baseline.py)
    and sticks to it; .desc says which one ran and why others did not, .failed why none did."""

    def __init__(self, a):
        self.a, self.tried, self.failed, self.desc = a, [], None, None
        if a.llama_server:
            self.variants = [("given", None, None, f"{a.llama_server} (--llama-server)")]
        else:
            self.variants = baseline.llama_server_variants()

    def start(self, np_, ctx_total):
        while self.variants and not self.failed:
            name, build_dir, opts, desc = self.variants[0]
            try:
                exe = self.a.llama_server or baseline.build_llama_server(
                    build_dir, opts, 2, log=lambda m: print(m, flush=True))
                port = free_port()
                srv = Server("llama-server", [exe, "-m", self.a.model, "--host", "127.0.0.1",
                                              "--port", str(port), "-t", str(self.a.threads),
                                              "-tb", str(self.a.threads), "-np", str(np_),
                                              "-c", str(ctx_total), "--no-webui"],
                             port, "/health")
                try:
                    srv.name_id = model_id(port)
                    one_request(port, list(range(1000, 1008)), 4, srv.name_id)  # warm-up
                except Exception as e:
                    rc = srv.proc.poll()
                    srv.stop()
                    raise RuntimeError(f"warm-up request failed ({e}); server "
                                       f"{baseline.describe_exit(rc)}") from None
            except (RuntimeError, baseline.BaselineFailed) as e:
                self.tried.append(f"{name}: {e}")
                print(f"baseline: llama-server {desc} cannot run here: {e}", flush=True)
                self.variants.pop(0)
                continue
            self.desc = f"llama-server, {desc}" + (
                f" [fallback: {'; '.join(self.tried)}]" if self.tried else "")
            print(f"baseline: {self.desc}; -np {np_} ready in {srv.ready_s:.3f} s", flush=True)
            return srv
        if not self.failed:
            self.failed = "llama-server: no build runs here: " + "; ".join(self.tried)
            print(f"baseline FAILED: {self.failed}", flush=True)
        return None


# ---- speculative decoding workload --------------------------------------------------------

SPEC_CODE = """import json
import os


class Inventory:
    \"\"\"A small inventory of named items with quantities and prices.\"\"\"

    def __init__(self, path):
        self.path = path
        self.items = {}

    def load(self):
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.items = json.load(f)

    def save(self):
        with open(self.path, "w") as f:
            json.dump(self.items, f, indent=2)

    def add(self, name, quantity, price):
        item = self.items.setdefault(name, {"quantity": 0, "price": price})
        item["quantity"] += quantity
        item["price"] = price

    def remove(self, name, quantity):
        item = self.items.get(name)
        if item is None or item["quantity"] < quantity:
            raise ValueError(f"not enough {name}")
        item["quantity"] -= quantity

    def total_value(self):
        return sum(i["quantity"] * i["price"] for i in self.items.values())
"""
SPEC_PROMPTS = {
    "repetitive": ("Rewrite the following Python code, renaming the class Inventory to Stock "
                   "and changing nothing else.\n\n" + SPEC_CODE + "\nRewritten code:\n\n"),
    "free": "Write a long story about a lighthouse keeper who finds a message in a bottle.\n\n",
    # The same prompt sampled: a small base model's greedy free text soon repeats itself
    # (drafts then pay off); sampled text rarely does, so this run shows what failed drafts
    # cost.
    "sampled": "Write a long story about a lighthouse keeper who finds a message in a "
               "bottle.\n\n",
}
SPEC_SAMPLING = {"sampled": {"temperature": 1.0, "top_p": 0.95, "seed": 11}}


def spec_counts(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        for k in ("draft", "accepted"):
            if line.startswith(f"gemmad_spec_{k}_tokens_total "):
                out[k] = float(line.split()[1])
    return out


def decode_run(port, name, prompt, gen, extra):
    r = stream_request(port, dict({"model": name, "prompt": prompt, "max_tokens": gen,
                                   "temperature": 0, "ignore_eos": True}, **extra))
    # Tokens that arrive together (accepted drafts) are one delivery: the rate counts tokens.
    st = r["stamps"]
    dt = st[-1] - st[0] if len(st) > 1 else float("nan")
    return {"decode_tok_s": (r["tokens"] - 1) / dt if dt > 0 else float("nan"),
            "ttft": r["ttft"], "tokens": r["tokens"]}


def spec_bench(a, gport, gname, llama):
    """Single-stream decode: gemmad with speculation on and off (alternating), llama-server."""
    out = {}
    lsrv = llama.start(1, a.spec_gen + 1024) if llama else None
    try:
        for kind, prompt in SPEC_PROMPTS.items():
            samp = SPEC_SAMPLING.get(kind, {})
            on, off, ll, ratios, acc = [], [], [], [], []
            for rep in range(a.repeats):
                order = ["on", "off"] if rep % 2 == 0 else ["off", "on"]
                for who in order:
                    if who == "on":
                        before = spec_counts(gport)
                        r = decode_run(gport, gname, prompt, a.spec_gen, samp)
                        after = spec_counts(gport)
                        acc.append({k: after.get(k, 0) - before.get(k, 0) for k in after})
                        on.append(r)
                    else:
                        off.append(decode_run(gport, gname, prompt, a.spec_gen,
                                              dict(samp, speculative=False)))
                ratios.append(on[-1]["decode_tok_s"] / off[-1]["decode_tok_s"])
                if lsrv:
                    ll.append(decode_run(lsrv.port, lsrv.name_id, prompt, a.spec_gen, samp))
                print(f"spec {kind:10s} run {rep + 1}/{a.repeats}: gemmad spec on "
                      f"{on[-1]['decode_tok_s']:7.1f} tok/s (drafted {acc[-1].get('draft', 0):.0f}, "
                      f"accepted {acc[-1].get('accepted', 0):.0f}), off "
                      f"{off[-1]['decode_tok_s']:7.1f} tok/s = {ratios[-1]:.2f}x"
                      + (f"; llama-server {ll[-1]['decode_tok_s']:7.1f} tok/s" if ll else ""),
                      flush=True)
            med = lambda rs: statistics.median(r["decode_tok_s"] for r in rs) if rs else None
            out[kind] = {"spec_on_tok_s": med(on), "spec_off_tok_s": med(off),
                         "llama_tok_s": med(ll), "ratio_runs": ratios,
                         "ratio": statistics.median(ratios), "accepted": acc,
                         "goal": 2.0 if kind == "repetitive" else 0.97, "sampling": samp}
    finally:
        if lsrv:
            lsrv.stop()
    return out


# ---- mixed: long prompts arriving among decoding streams -----------------------------------

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def mixed_run(port, name, a, seed):
    """--mixed-streams streams decode (until the long prompts are done); --mixed-long prompts
    of --mixed-long-tokens arrive --mixed-interval s apart once every stream has started."""
    rng = random.Random(seed)
    lo, hi = 1000, 30000
    stop = threading.Event()
    streams, longs, errors = [None] * a.mixed_streams, [None] * a.mixed_long, []
    started = threading.Semaphore(0)
    sp = [[rng.randrange(lo, hi) for _ in range(a.prompt_tokens)] for _ in streams]
    lp = [[rng.randrange(lo, hi) for _ in range(a.mixed_long_tokens)] for _ in longs]

    def stream(i):
        body = {"model": name, "prompt": sp[i], "max_tokens": a.mixed_gen, "temperature": 0,
                "ignore_eos": True}
        try:
            first = [True]

            class Ev:  # signals the first token, then acts as the stop event
                def is_set(self):
                    if first[0]:
                        first[0] = False
                        started.release()
                    return stop.is_set()
            streams[i] = stream_request(port, body, stop=Ev())
        except Exception as e:
            errors.append(str(e))
            started.release()

    def long_req(j):
        body = {"model": name, "prompt": lp[j], "max_tokens": 8, "temperature": 0,
                "ignore_eos": True}
        try:
            longs[j] = stream_request(port, body)
        except Exception as e:
            errors.append(str(e))

    ts = [threading.Thread(target=stream, args=(i,)) for i in range(a.mixed_streams)]
    for t in ts:
        t.start()
    for _ in ts:
        started.acquire(timeout=600)
    time.sleep(1.0)
    lt = []
    for j in range(a.mixed_long):
        t = threading.Thread(target=long_req, args=(j,))
        t.start()
        lt.append(t)
        time.sleep(a.mixed_interval)
    for t in lt:
        t.join()
    stop.set()
    for t in ts:
        t.join()
    if errors or None in longs or None in streams:
        return {"errors": errors or ["a request did not finish"]}
    w0 = min(r["t0"] for r in longs)
    w1 = max(r["stamps"][0] if r["stamps"] else r["t0"] + r["ttft"] for r in longs)
    gaps_all, gaps_win = [], []
    for r in streams:
        # Chunks that arrive within 1 ms of each other (accepted drafts of one step, or what
        # one read returned) are one delivery; the gaps are between deliveries.
        st = [t for i, t in enumerate(r["stamps"]) if i == 0 or t - r["stamps"][i - 1] > 1e-3]
        for x, y in zip(st, st[1:]):
            gaps_all.append(y - x)
            if w0 <= y <= w1:
                gaps_win.append(y - x)
    ttft = [r["ttft"] for r in longs]
    res = {"long_ttft_p50": pct(ttft, 0.5), "long_ttft_p99": pct(ttft, 0.99),
           "gap_median": pct(gaps_all, 0.5), "gap_p99_window": pct(gaps_win, 0.99),
           "gaps_in_window": len(gaps_win), "errors": []}
    res["gap_ratio"] = res["gap_p99_window"] / res["gap_median"]
    return res


def mixed_bench(a, gport, gname, llama):
    out = {"gemmad": [], "llama": []}
    ctx_slot = max(a.mixed_long_tokens, a.prompt_tokens + a.mixed_gen) + 64
    lsrv = llama.start(a.mixed_streams + a.mixed_long, ctx_slot * (a.mixed_streams + a.mixed_long)) \
        if llama else None
    try:
        for rep in range(a.repeats):
            order = ["gemmad", "llama"] if rep % 2 == 0 else ["llama", "gemmad"]
            for who in order:
                if who == "gemmad":
                    r = mixed_run(gport, gname, a, 5000 + rep)
                elif lsrv:
                    r = mixed_run(lsrv.port, lsrv.name_id, a, 5000 + rep)
                else:
                    continue
                out[who].append(r)
                if r.get("errors"):
                    print(f"mixed {who} run {rep + 1}: ERRORS {r['errors'][:3]}", flush=True)
                    continue
                print(f"mixed {who:12s} run {rep + 1}/{a.repeats}: long-prompt TTFT p50 "
                      f"{r['long_ttft_p50']*1e3:8.1f} ms p99 {r['long_ttft_p99']*1e3:8.1f} ms; "
                      f"stream gaps median {r['gap_median']*1e3:6.1f} ms, p99 during prefills "
                      f"{r['gap_p99_window']*1e3:7.1f} ms = {r['gap_ratio']:.2f}x "
                      f"({r['gaps_in_window']} gaps)", flush=True)
    finally:
        if lsrv:
            lsrv.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--gemmad", default=os.path.join(ROOT, "build/gemmad"))
    ap.add_argument("--llama-server", default=None, help="path (default: build into the cache)")
    ap.add_argument("--no-llama", action="store_true", help="gemmad only")
    ap.add_argument("--llama-python", action="store_true",
                    help="baseline = llama.cpp batched decode through llama-cpp-python "
                         "(no llama-server build)")
    ap.add_argument("--concurrency", default="1,4,16,32,64")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--requests-per-client", type=int, default=1)
    ap.add_argument("--threads", type=int, default=physical_cores())
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each level per server, alternating with the other (median)")
    ap.add_argument("--no-spec", action="store_true", help="skip the speculative-decoding runs")
    ap.add_argument("--spec-gen", type=int, default=256, help="tokens per speculative run")
    ap.add_argument("--no-mixed", action="store_true", help="skip the mixed run")
    ap.add_argument("--mixed-streams", type=int, default=16)
    ap.add_argument("--mixed-long", type=int, default=4)
    ap.add_argument("--mixed-long-tokens", type=int, default=2000)
    ap.add_argument("--mixed-interval", type=float, default=1.5)
    ap.add_argument("--mixed-gen", type=int, default=1500,
                    help="most tokens a running stream decodes (it stops once the long "
                         "prompts are answered)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--gemmad-args", default="",
                    help="more gemmad options, one string (e.g. '--prefill-stall 0')")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    # Token ids from a stretch of ordinary pieces of the Gemma vocabulary.
    lo, hi = 1000, 30000
    ctx = a.prompt_tokens + a.gen_tokens + 16
    g_ctx = max(ctx, 512)
    if not a.no_spec:
        g_ctx = max(g_ctx, a.spec_gen + 1024)
    if not a.no_mixed:
        g_ctx = max(g_ctx, a.mixed_long_tokens + 64, a.prompt_tokens + a.mixed_gen + 16)
    g_seqs = max(levels + ([a.mixed_streams + a.mixed_long] if not a.no_mixed else []))
    results = {}

    port = free_port()
    gsrv = Server("gemmad", [a.gemmad, "--model", a.model, "--host", "127.0.0.1", "--port",
                             str(port), "--threads", str(a.threads), "--max-seqs",
                             str(g_seqs), "--ctx-size", str(g_ctx),
                             "--prefix-cache", "0"] + shlex.split(a.gemmad_args), port, "/health")
    results["gemmad_ready_s"] = gsrv.ready_s
    print(f"gemmad ready (start -> /health 200) in {gsrv.ready_s:.3f} s", flush=True)
    gport, gname = port, model_id(port)
    one_request(gport, list(range(lo, lo + 8)), 4, gname)  # warm-up

    def show(who, c, r, rep):
        print(f"{who:12s} c={c:3d} run {rep + 1}/{a.repeats} {r['tok_s']:8.1f} tok/s  TTFT p50 "
              f"{r['ttft_p50']*1e3:8.1f} ms  p99 {r['ttft_p99']*1e3:8.1f} ms  ({r['tokens']} tokens, "
              f"{r['wall_s']:.1f} s{', ERRORS ' + str(len(r['errors'])) if r['errors'] else ''})",
              flush=True)

    def median_of(runs):
        """The run with the median tok/s, its TTFTs, and every run's tok/s."""
        srt = sorted(runs, key=lambda r: r["tok_s"])
        med = dict(srt[(len(srt) - 1) // 2])
        med["tok_s"] = statistics.median(r["tok_s"] for r in runs)
        med["runs_tok_s"] = [r["tok_s"] for r in runs]
        med["errors"] = [e for r in runs for e in r["errors"]]
        return med

    llama = None if a.no_llama or a.llama_python else LlamaServers(a)
    failed = []
    try:
        for c in levels:
            lsrv = llama.start(c, max(ctx, 512) * c) if llama else None
            try:
                gr, lr, ratios = [], [], []
                for rep in range(a.repeats):
                    # Both servers run each level back to back, the order alternating, so a
                    # machine that slows down for a while hurts both alike (the per-run ratio).
                    order = ["gemmad", "llama"] if rep % 2 == 0 else ["llama", "gemmad"]
                    for who in order:
                        if who == "gemmad":
                            r = run_level(gport, c, a.requests_per_client, a.prompt_tokens,
                                          a.gen_tokens, lo, hi, gname, 1000 + c + 7 * rep)
                            gr.append(r)
                            show("gemmad", c, r, rep)
                        elif lsrv:
                            r = run_level(lsrv.port, c, a.requests_per_client, a.prompt_tokens,
                                          a.gen_tokens, lo, hi, lsrv.name_id, 1000 + c + 7 * rep)
                            lr.append(r)
                            show("llama-server", c, r, rep)
                    if lsrv:
                        ratios.append(gr[-1]["tok_s"] / lr[-1]["tok_s"])
            finally:
                if lsrv:
                    lsrv.stop()
            results[("gemmad", c)] = median_of(gr)
            if lsrv:
                results[("llama", c)] = median_of(lr)
                results[("ratio_runs", c)] = ratios
                g, l = results[("gemmad", c)], results[("llama", c)]
                print(f"c={c:3d} median: gemmad {g['tok_s']:.1f} vs llama-server {l['tok_s']:.1f} "
                      f"tok/s = {g['tok_s']/l['tok_s']:.2f}x; per-run ratios "
                      f"{', '.join(f'{x:.2f}x' for x in ratios)}", flush=True)
        if not a.no_spec:
            results["spec"] = spec_bench(a, gport, gname, llama)
        if not a.no_mixed:
            results["mixed"] = mixed_bench(a, gport, gname, llama)
    finally:
        gsrv.stop()

    if not a.no_llama and a.llama_python:
        try:
            base, desc = baseline.llama_py_function(
                os.path.abspath(__file__), "llama_python_levels",
                {"model_path": a.model, "levels": levels, "prompt_tokens": a.prompt_tokens,
                 "gen": a.gen_tokens, "threads": a.threads, "lo": lo, "hi": hi},
                log=lambda m: print(m, flush=True))
            results["baseline"] = desc
            print(f"baseline: {desc}", flush=True)
            for c in levels:
                r, g = base[str(c)], results[("gemmad", c)]
                results[("llama", c)] = r
                print(f"llama.cpp(py) c={c:3d} {r['tok_s']:8.1f} tok/s  TTFT p50 "
                      f"{r['ttft_p50']*1e3:8.1f} ms  p99 {r['ttft_p99']*1e3:8.1f} ms   "
                      f"gemmad/llama tok/s {g['tok_s']/r['tok_s']:.2f}x", flush=True)
        except baseline.BaselineFailed as e:
            failed.append(str(e))
    if llama:
        results["baseline"] = llama.desc
        if llama.failed:
            failed.append(llama.failed)

    lcell = "FAILED" if failed else "-"
    print(f"\nbaseline: {results.get('baseline') or ('FAILED: ' + '; '.join(failed) if failed else 'none (--no-llama)')}")
    print("\n| concurrency | gemmad tok/s | llama tok/s | ratio | gemmad TTFT p50/p99 ms | llama TTFT p50/p99 ms |")
    print("|---|---|---|---|---|---|")
    for c in levels:
        g = results[("gemmad", c)]
        l = results.get(("llama", c))
        lt = f"{l['tok_s']:.1f}" if l else lcell
        ratio = f"{g['tok_s']/l['tok_s']:.2f}x" if l else "-"
        ll = f"{l['ttft_p50']*1e3:.0f} / {l['ttft_p99']*1e3:.0f}" if l else lcell
        print(f"| {c} | {g['tok_s']:.1f} | {lt} | {ratio} | {g['ttft_p50']*1e3:.0f} / {g['ttft_p99']*1e3:.0f} | {ll} |")
    if "spec" in results:
        print("\n| single stream decode | gemmad spec on tok/s | spec off tok/s | on/off (per-run) | goal | llama-server tok/s |")
        print("|---|---|---|---|---|---|")
        for kind, r in results["spec"].items():
            lt = f"{r['llama_tok_s']:.1f}" if r["llama_tok_s"] else lcell
            print(f"| {kind} | {r['spec_on_tok_s']:.1f} | {r['spec_off_tok_s']:.1f} | "
                  f"{r['ratio']:.2f}x ({', '.join(f'{x:.2f}' for x in r['ratio_runs'])}) | "
                  f">= {r['goal']:.2f}x | {lt} |")
    if "mixed" in results:
        def med(rs, k):
            ok = [r[k] for r in rs if not r.get("errors")]
            return statistics.median(ok) if ok else None
        g, l = results["mixed"]["gemmad"], results["mixed"]["llama"]
        fmt = lambda v: f"{v * 1e3:.0f}" if v is not None else lcell
        fmtx = lambda v: f"{v:.2f}x" if v is not None else lcell
        gt, lt = med(g, "long_ttft_p99"), med(l, "long_ttft_p99")
        print(f"\n| mixed: {a.mixed_streams} streams + {a.mixed_long} x {a.mixed_long_tokens}-token "
              f"prompts | gemmad | llama-server | goal |")
        print("|---|---|---|---|")
        print(f"| long-prompt TTFT p99 ms | {fmt(gt)} | {fmt(lt)} | gemmad <= 0.5x llama"
              + (f" (now {gt / lt:.2f}x)" if gt and lt else "") + " |")
        print(f"| stream gap p99 during prefills / median | {fmtx(med(g, 'gap_ratio'))} "
              f"| {fmtx(med(l, 'gap_ratio'))} | <= 2x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({(f"{k[0]}@{k[1]}" if isinstance(k, tuple) else k): v
                       for k, v in results.items()}, f, indent=1)
    bad = [k for k, v in results.items() if isinstance(v, dict) and v.get("errors")]
    bad += [r for side in results.get("mixed", {}).values() for r in side if r.get("errors")]
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
