#!/usr/bin/env python3
"""Serving benchmark: aggregate generated tokens/s and time to first token (p50/p99) at
several concurrency levels, for build/gemmad and for llama.cpp's llama-server on the same
model, threads, prompts and generation length, with ratios.

Each client streams /v1/completions requests one after another: a prompt of
--prompt-tokens random token ids (distinct per request, so no server can reuse a cached
prefix), temperature 0, exactly --gen-tokens generated (ignore_eos). Aggregate tok/s =
generated tokens of all clients / wall time of the level; TTFT = send -> first streamed
token.

llama-server is built from the llama.cpp sources bundled in the llama-cpp-python source
distribution into ~/.cache/gemmad/llama-server-build when missing (cmake, Release,
-DLLAMA_BUILD_SERVER=ON). It is restarted per level with -np equal to the concurrency.
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
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("GEMMAD_CACHE") or os.path.expanduser("~/.cache/gemmad")
LLAMA_BUILD = os.path.join(CACHE, "llama-server-build")


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


def llama_source():
    hits = sorted(glob.glob(os.path.join(CACHE, "src", "llama_cpp_python-*", "vendor", "llama.cpp")))
    return hits[-1] if hits else None


def build_llama_server(jobs):
    exe = os.path.join(LLAMA_BUILD, "bin", "llama-server")
    if os.path.exists(exe):
        return exe
    src = llama_source()
    if not src:
        print("bench_server: llama.cpp sources not found under ~/.cache/gemmad/src; "
              "run deploy/setup-bench.sh", file=sys.stderr)
        return None
    os.makedirs(LLAMA_BUILD, exist_ok=True)
    print(f"bench_server: building llama-server from {src} (a few minutes)", flush=True)
    subprocess.run(["cmake", "-S", src, "-B", LLAMA_BUILD, "-DCMAKE_BUILD_TYPE=Release",
                    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DGGML_NATIVE=ON"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", LLAMA_BUILD, "--target", "llama-server", f"-j{jobs}"],
                   check=True, stdout=subprocess.DEVNULL)
    return exe if os.path.exists(exe) else None


class Server:
    def __init__(self, name, argv, port, ready_path):
        self.name, self.port = name, port
        self.log = open(os.path.join("/tmp", f"bench-{name}-{port}.log"), "w")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}; see {self.log.name}")
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


def one_request(port, prompt, gen, model_name):
    """Stream one completion; returns (ttft_s, generated_tokens)."""
    body = json.dumps({"model": model_name, "prompt": prompt, "max_tokens": gen,
                       "temperature": 0, "stream": True, "ignore_eos": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft, chunks, usage = None, 0, None
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
                chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    c.close()
    return ttft if ttft is not None else time.perf_counter() - t0, usage or chunks


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--gemmad", default=os.path.join(ROOT, "build/gemmad"))
    ap.add_argument("--llama-server", default=None, help="path (default: build into the cache)")
    ap.add_argument("--no-llama", action="store_true", help="gemmad only")
    ap.add_argument("--llama-python", action="store_true",
                    help="baseline = llama.cpp batched decode through llama-cpp-python "
                         "(no llama-server build)")
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--requests-per-client", type=int, default=1)
    ap.add_argument("--threads", type=int, default=physical_cores())
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each level per server, alternating with the other (median)")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    name = "bench"
    # Token ids from a stretch of ordinary pieces of the Gemma vocabulary.
    lo, hi = 1000, 30000
    ctx = a.prompt_tokens + a.gen_tokens + 16
    results = {}

    port = free_port()
    gsrv = Server("gemmad", [a.gemmad, "--model", a.model, "--host", "127.0.0.1", "--port",
                             str(port), "--threads", str(a.threads), "--max-seqs",
                             str(max(levels)), "--ctx-size", str(max(ctx, 512)),
                             "--prefix-cache", "0"], port, "/health")
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

    exe = None
    if not a.no_llama and not a.llama_python:
        exe = a.llama_server or build_llama_server(2)
        if not exe:
            print("bench_server: llama-server unavailable; gemmad results only", file=sys.stderr)
    try:
        for c in levels:
            lsrv = None
            if exe:
                port = free_port()
                lsrv = Server("llama-server", [exe, "-m", a.model, "--host", "127.0.0.1",
                                               "--port", str(port), "-t", str(a.threads),
                                               "-tb", str(a.threads), "-np", str(c),
                                               "-c", str(max(ctx, 512) * c), "--no-webui"],
                              port, "/health")
                print(f"llama-server -np {c} ready in {lsrv.ready_s:.3f} s", flush=True)
            try:
                if lsrv:
                    lname = model_id(port)
                    one_request(port, list(range(lo, lo + 8)), 4, lname)
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
                            r = run_level(port, c, a.requests_per_client, a.prompt_tokens,
                                          a.gen_tokens, lo, hi, lname, 1000 + c + 7 * rep)
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
    finally:
        gsrv.stop()

    if not a.no_llama and a.llama_python:
        base = llama_python_levels(a.model, levels, a.prompt_tokens, a.gen_tokens, a.threads, lo, hi)
        for c in levels:
            r, g = base[c], results[("gemmad", c)]
            results[("llama", c)] = r
            print(f"llama.cpp(py) c={c:3d} {r['tok_s']:8.1f} tok/s  TTFT p50 {r['ttft_p50']*1e3:8.1f} ms"
                  f"  p99 {r['ttft_p99']*1e3:8.1f} ms   gemmad/llama tok/s {g['tok_s']/r['tok_s']:.2f}x",
                  flush=True)

    print("\n| concurrency | gemmad tok/s | llama tok/s | ratio | gemmad TTFT p50/p99 ms | llama TTFT p50/p99 ms |")
    print("|---|---|---|---|---|---|")
    for c in levels:
        g = results[("gemmad", c)]
        l = results.get(("llama", c))
        lt = f"{l['tok_s']:.1f}" if l else "-"
        ratio = f"{g['tok_s']/l['tok_s']:.2f}x" if l else "-"
        ll = f"{l['ttft_p50']*1e3:.0f} / {l['ttft_p99']*1e3:.0f}" if l else "-"
        print(f"| {c} | {g['tok_s']:.1f} | {lt} | {ratio} | {g['ttft_p50']*1e3:.0f} / {g['ttft_p99']*1e3:.0f} | {ll} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({(f"{k[0]}@{k[1]}" if isinstance(k, tuple) else k): v
                       for k, v in results.items()}, f, indent=1)
    bad = [k for k, v in results.items() if isinstance(v, dict) and v.get("errors")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
