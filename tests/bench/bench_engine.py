#!/usr/bin/env python3
"""Engine benchmark: gemmad vs llama.cpp on the same GGUF file, machine and thread count.

What it measures (see docs/BENCHMARKS.md for how to read the output):
  * gemmad: `gemmad-cli bench -m MODEL --prompt-tokens P --gen G --threads T --profile`,
    which prints one JSON object (prefill_tok_s, decode_tok_s, rss_mib, load_s, ...) and,
    before it, the steps' time by operation class: per run and as medians, a decode step's
    layer matmuls, attention, head, norms and the rest, with the bandwidth the matmuls, the
    attention (KV cache bytes) and the head reached.
  * llama.cpp through llama-cpp-python: a P-token prompt evaluated in one call (prefill),
    then G greedy decode steps, each timed as a whole; same threads for both phases.
  * read bandwidth: a STREAM-like read probe (tests/bench/bench_kern.c --bandwidth, built
    here against build/libgemmad.a; numpy fallback), and the bytes the model reads per
    decoded token (every weight tensor once, the tied embedding once more as the LM head,
    minus the embedding table itself, of which a token reads one row; plus the F16 KV cache
    a step reads, averaged over the decoded tokens), giving a roofline; the probe runs again
    before each gemmad run, and the roofline figure is the median of the runs' own fractions.
  * the kern_matmul micro-benchmark on the model's shapes (tests/bench/bench_kern.c; skip
    with --no-kernels), with ggml's own vec_dot on the same data as a kernel-level baseline.
llama.cpp runs in a child process in the first configuration that works on this host
(tests/bench/baseline.py: the library's defaults, else use_extra_bufts = False), and the
table says which one ran; a baseline that cannot run is printed as FAILED (exit status 1).
With --formats it instead requantizes the model into every weight format (or --format-list)
with llama.cpp's llama-quantize and prints prefill, decode and a greedy cross-check per
format for gemmad and llama.cpp (tests/bench/bench_formats.py).
The machine is shared and noisy: gemmad and llama.cpp runs are interleaved, each figure is
the median of --runs runs, and the ratios are ratios of medians. Results go to stdout (a
table) and to build/bench/engine.json.
"""
import argparse
import ctypes
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baseline  # noqa: E402  (tests/bench/baseline.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The same natural text gemmad-cli bench repeats to build its prompt.
BENCH_TEXT = ("The history of the printing press begins in the fifteenth century, when movable "
              "type changed how books were made, sold and read across Europe and beyond. ")
LDLIBS = ["-lmicrohttpd", "-ljansson", "-luv", "-lm", "-lpthread", "-ldl"]
# libgemmad.a holds the OpenBLAS path when the Makefile found OpenBLAS (the same test).
_blas = subprocess.run(["pkg-config", "--libs", "openblas"], capture_output=True, text=True)
LDLIBS += _blas.stdout.split() if _blas.returncode == 0 else []


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- gemmad ---------------------------------------------------------------------------------

def run_gemmad(cli, model, prompt, gen, threads, extra, profile=False):
    """gemmad-cli bench's JSON object; with profile, its "profile" line (the steps' time by
    operation class, gemmad-cli bench --profile) under the key "profile"."""
    cmd = [cli, "bench", "-m", model, "--prompt-tokens", str(prompt), "--gen", str(gen),
           "--threads", str(threads)] + (["--profile"] if profile else []) + extra
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr[-2000:]}")
    res, prof = None, None
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            d = json.loads(line)
            if "profile" in d:
                prof = d["profile"]
            else:
                res = d
    if res is None:
        raise RuntimeError(f"no JSON line in gemmad-cli bench output: {out.stdout[-2000:]}")
    if prof is not None:
        res["profile"] = prof
    return res


# ---- llama.cpp --------------------------------------------------------------------------------

class LlamaBench:
    """One llama.cpp context, reused across runs (the KV cache is cleared per run)."""

    def __init__(self, model, prompt, gen, threads):
        import llama_cpp  # noqa: deferred so that --skip-llama works without it
        import numpy as np
        self.np = np
        self.llm = llama_cpp.Llama(model_path=model, n_threads=threads, n_threads_batch=threads,
                                   n_ctx=prompt + gen + 16, n_batch=prompt, n_ubatch=prompt,
                                   verbose=False)
        self.version = llama_cpp.__version__
        self.info = {"version": self.version}
        body = self.llm.tokenize(BENCH_TEXT.encode(), add_bos=False, special=False)
        bos = self.llm.token_bos()
        self.prompt = [bos] + [body[i % len(body)] for i in range(prompt - 1)]
        self.gen = gen
        self.n_vocab = self.llm.n_vocab()

    def _logits(self):
        return self.np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.n_vocab,))

    def run(self):
        llm = self.llm
        llm.reset()  # n_tokens = 0; eval() then drops the whole KV cache
        t0 = time.perf_counter()
        llm.eval(self.prompt)
        t1 = time.perf_counter()
        tok = int(self._logits().argmax())
        for _ in range(self.gen):
            llm.eval([tok])
            tok = int(self._logits().argmax())
        t2 = time.perf_counter()
        # The argmax over the vocabulary is part of a greedy step, as in gemmad-cli bench.
        return {"prefill_tok_s": len(self.prompt) / (t1 - t0), "decode_tok_s": self.gen / (t2 - t1)}


# ---- bandwidth and bytes per token --------------------------------------------------------------

def build_bench_kern(build):
    lib = os.path.join(ROOT, build, "libgemmad.a")
    if not os.path.exists(lib):
        return None
    out = os.path.join(ROOT, build, "bench", "bench_kern")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    src = os.path.join(ROOT, "tests", "bench", "bench_kern.c")
    if not os.path.exists(out) or os.path.getmtime(out) < max(os.path.getmtime(src),
                                                                os.path.getmtime(lib)):
        cmd = ["gcc", "-std=gnu11", "-O2", "-march=native", "-pthread", f"-I{ROOT}",
               "-I/usr/include/x86_64-linux-gnu", src, lib, "-o", out] + LDLIBS
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            log("bench_engine: cannot build bench_kern:", r.stderr[-1500:])
            return None
    return out


def bandwidth_numpy(threads):
    import numpy as np
    a = np.ones(32 << 20, dtype=np.float64)  # 256 MiB
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        a.sum()
        ts.append(time.perf_counter() - t0)
    return a.nbytes / statistics.median(ts) / 1e9  # one thread only: a lower bound


def read_bandwidth(bench_kern, threads, mib):
    """Read bandwidth over a buffer of `mib` MiB: best of plain AVX2 loads and loads with
    software prefetch, each re-reading the buffer for half a second."""
    if bench_kern:
        r = subprocess.run([bench_kern, "--bandwidth", "--json", "--threads", str(threads),
                            "--bw-mib", str(mib)], capture_output=True, text=True, timeout=600)
        if r.returncode == 0:
            return (json.loads(r.stdout)["read_gb_s"],
                    f"bench_kern --bandwidth --bw-mib {mib} (AVX2 loads, +/- prefetch)")
    return bandwidth_numpy(threads), "numpy sum (1 thread, lower bound)"


def model_bytes_per_token(r):
    """Bytes of weights one decode step reads: every tensor once, except that a token reads
    one row of the embedding table; a tied LM head (no output.weight) reads it whole.
    r: the model's gguf.GGUFReader."""
    total, embd, has_output, n_embd_row = 0, 0, False, 0
    for t in r.tensors:
        n = int(t.n_bytes)
        total += n
        if t.name == "token_embd.weight":
            embd = n
            n_embd_row = n // int(t.shape[-1])
        if t.name == "output.weight":
            has_output = True
    per_token = total - embd + n_embd_row + (0 if has_output else embd)
    return per_token, total


def decode_byte_split(r):
    """(bytes of the layers' tensors, bytes of the LM head): the parts of a decode step's
    weights that the profile's layer matmuls and head read (norm vectors included in the
    first; they are a few KB). r: the model's gguf.GGUFReader."""
    layers = sum(int(t.n_bytes) for t in r.tensors if t.name.startswith("blk."))
    head = [t for t in r.tensors if t.name == "output.weight"] or \
        [t for t in r.tensors if t.name == "token_embd.weight"]
    return layers, (int(head[0].n_bytes) if head else 0)


def profile_line(p, layer_bytes, head_bytes, kv_bytes):
    """One decode step's time by class (gemmad-cli bench --profile), with the bandwidth the
    layer matmuls, the attention (over the KV cache) and the head reached."""
    def gbs(b, ms):
        return f" ({b / (ms * 1e6):.1f} GB/s)" if ms > 0 and b else ""
    return (f"step {p['step']:.2f} ms: layer matmuls {p['matmul']:.2f}"
            f"{gbs(layer_bytes, p['matmul'])}, attention {p['attn']:.2f}"
            f"{gbs(kv_bytes, p['attn'])}, head {p['head']:.2f}{gbs(head_bytes, p['head'])}, "
            f"norms {p['norm']:.2f}, other {p['other']:.2f}; outside the step "
            f"{p['wall'] - p['step']:.2f}")


def kv_bytes_per_token(r, cli, model, prompt, gen):
    """Bytes of F16 KV cache one decode step reads, averaged over the G steps after a
    P-token prompt: a step at context L reads L positions in each global layer and
    min(L, window) in each sliding one. Layer split and window from `gemmad-cli kvmem`,
    K/V widths from the GGUF metadata. Layers without KV of their own (Gemma 4 KV sharing)
    are not subtracted; the bundled model has none. r: the model's gguf.GGUFReader."""
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

    def field(key):
        f = r.fields.get(f"{arch}.{key}")
        return None if f is None else int(f.parts[f.data[-1]][0])
    n_kv, dk, dv = field("attention.head_count_kv"), field("attention.key_length"), \
        field("attention.value_length")
    out = subprocess.run([cli, "kvmem", "-m", model, "--ctx", str(prompt + gen)],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0 or None in (n_kv, dk, dv):
        return 0
    km = json.loads(out.stdout)
    per_pos = n_kv * (dk + dv) * 2
    win = km["sliding_window"] or (prompt + gen)
    tot = 0
    for L in range(prompt + 1, prompt + gen + 1):
        tot += (km["global_layers"] * L + km["sliding_layers"] * min(L, win)) * per_pos
    return tot // gen


# ---- main -----------------------------------------------------------------------------------

def fmt_ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--build", default="build", help="build folder with gemmad-cli, libgemmad.a")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3, help="runs per side (median; >= 3)")
    ap.add_argument("--skip-llama", action="store_true", help="gemmad only")
    ap.add_argument("--no-kernels", dest="kernels", action="store_false",
                    help="skip the kern_matmul micro-benchmark (about a minute)")
    ap.add_argument("--gemmad-arg", action="append", default=[],
                    help="extra argument for gemmad-cli bench (repeatable)")
    ap.add_argument("--out", default=None, help="JSON output (default BUILD/bench/engine.json)")
    ap.add_argument("--formats", action="store_true",
                    help="every weight format: requantize with llama-quantize, bench each")
    ap.add_argument("--format-list", default=None,
                    help="--formats: comma-separated llama-quantize types (default: all eleven)")
    ap.add_argument("--check-tokens", type=int, default=24,
                    help="--formats: greedy tokens compared between gemmad and llama.cpp")
    ap.add_argument("--no-speed", action="store_true",
                    help="--formats: the greedy cross-check only, no timing")
    args = ap.parse_args()
    os.chdir(ROOT)
    runs = max(3, args.runs)
    cli = os.path.join(args.build, "gemmad-cli")
    if not os.path.exists(cli):
        sys.exit(f"bench_engine: {cli} not found (run make first)")
    if not os.path.exists(args.model):
        sys.exit(f"bench_engine: {args.model} not found (make model)")

    if args.formats:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_formats
        results = bench_formats.run(args, run_gemmad, cli,
                                    os.path.join(args.build, "bench", "formats"))
        out = args.out or os.path.join(args.build, "bench", "formats.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump({"model": args.model, "threads": args.threads,
                       "prompt_tokens": args.prompt_tokens, "gen_tokens": args.gen,
                       "load_avg": os.getloadavg(), "formats": results}, f, indent=2)
        bench_formats.print_table(results, args)
        print(f"\nwritten {out}")
        return

    bench_kern = build_bench_kern(args.build)
    import gguf
    reader = gguf.GGUFReader(args.model)
    w_tok, file_bytes = model_bytes_per_token(reader)
    layer_bytes, head_bytes = decode_byte_split(reader)
    kv_tok = kv_bytes_per_token(reader, cli, args.model, args.prompt_tokens, args.gen)
    del reader
    per_tok = w_tok + kv_tok
    # The roofline uses a buffer of the size one decode step reads, re-read like decode
    # re-reads the weights every token, so both see the same caches (a machine whose last
    # level cache holds most of the weights is faster than DRAM for both). A 1 GiB probe,
    # beyond any cache, gives the DRAM figure for reference.
    # The probe runs again right before each gemmad run and each run's decode is set against
    # its own probe: a shared host's bandwidth moves (on a 2-core Zen 4 guest, 244 MiB probes
    # of 24.6 / 31.2 / 42.1 GB/s a few seconds apart), and one probe at the start set every
    # run against that one moment. The per-run figures are printed: there they still spread
    # 58-113%, so read the median with its spread.
    probe_mib = max(1, int(per_tok / 2**20))
    bw, bw_how = read_bandwidth(bench_kern, args.threads, probe_mib)
    bw_dram, _ = read_bandwidth(bench_kern, args.threads, 1024)
    log(f"bench_engine: read bandwidth {bw:.2f} GB/s ({bw_how}); {per_tok / 1e6:.1f} MB read "
        f"per token -> roofline {bw * 1e9 / per_tok:.1f} tok/s (1 GiB buffer: {bw_dram:.2f} "
        f"GB/s); probed again before each run")

    llama, llama_failed = None, None
    if not args.skip_llama:
        # In a child process, in the first configuration whose warm-up run (page the file
        # in, let llama.cpp allocate its graphs) does not crash.
        try:
            llama = baseline.LlamaPy(os.path.abspath(__file__), "LlamaBench",
                                     {"model": args.model, "prompt": args.prompt_tokens,
                                      "gen": args.gen, "threads": args.threads}, log=log)
            log(f"bench_engine: baseline {llama.describe()}")
        except baseline.BaselineFailed as e:
            llama_failed = str(e)
            log(f"bench_engine: llama.cpp baseline FAILED: {e}")
    g_runs, l_runs = [], []
    for i in range(runs):
        bw_i = read_bandwidth(bench_kern, args.threads, probe_mib)[0] if i > 0 else bw
        g = run_gemmad(cli, args.model, args.prompt_tokens, args.gen, args.threads, args.gemmad_arg,
                       profile=True)
        g["read_bandwidth_gb_s"] = bw_i
        g["roofline_frac"] = g["decode_tok_s"] * per_tok / (bw_i * 1e9)
        g_runs.append(g)
        log(f"  run {i + 1}/{runs} gemmad    prefill {g['prefill_tok_s']:8.1f} tok/s  "
            f"decode {g['decode_tok_s']:7.1f} tok/s  (probe {bw_i:.2f} GB/s: "
            f"{100 * g['roofline_frac']:.0f}% of the roofline)")
        if "profile" in g:
            log("    decode " + profile_line(g["profile"]["decode_ms_per_step"], layer_bytes,
                                              head_bytes, kv_tok))
        if llama:
            try:
                l = llama.call("run")
            except baseline.BaselineFailed as e:
                llama_failed = str(e)
                log(f"bench_engine: llama.cpp baseline FAILED: {e}")
                llama.close()
                llama, l_runs = None, []
                continue
            l_runs.append(l)
            log(f"  run {i + 1}/{runs} llama.cpp prefill {l['prefill_tok_s']:8.1f} tok/s  "
                f"decode {l['decode_tok_s']:7.1f} tok/s")

    def med(rs, k):
        return statistics.median(r[k] for r in rs) if rs else None

    bw = med(g_runs, "read_bandwidth_gb_s")
    roofline = bw * 1e9 / per_tok

    res = {
        "model": args.model, "file_bytes": file_bytes, "threads": args.threads,
        "prompt_tokens": args.prompt_tokens, "gen_tokens": args.gen, "runs": runs,
        "machine": {"cpu": platform.processor() or platform.machine(), "nproc": os.cpu_count(),
                    "load_avg": os.getloadavg()},
        "read_bandwidth_gb_s": bw, "bandwidth_probe": bw_how, "read_bandwidth_1gib_gb_s": bw_dram,
        "bytes_per_token": per_tok, "weight_bytes_per_token": w_tok,
        "kv_bytes_per_token": kv_tok, "roofline_decode_tok_s": roofline,
        "gemmad": {"prefill_tok_s": med(g_runs, "prefill_tok_s"),
                   "decode_tok_s": med(g_runs, "decode_tok_s"),
                   "rss_mib": med(g_runs, "rss_mib"), "load_s": med(g_runs, "load_s"),
                   "isa": g_runs[0].get("isa"), "runs": g_runs},
    }
    if llama_failed:
        res["llama_cpp"] = {"failed": llama_failed}
    if llama:
        res["llama_cpp"] = {"version": llama.info.get("version"), "config": llama.describe(),
                            "prefill_tok_s": med(l_runs, "prefill_tok_s"),
                            "decode_tok_s": med(l_runs, "decode_tok_s"), "runs": l_runs}
        res["ratio"] = {k: res["gemmad"][k] / res["llama_cpp"][k]
                        for k in ("prefill_tok_s", "decode_tok_s")}
    # the median of the runs' own fractions (each decode against the probe just before it)
    res["decode_roofline_frac"] = med(g_runs, "roofline_frac")
    profs = [r["profile"]["decode_ms_per_step"] for r in g_runs if "profile" in r]
    if profs:
        res["decode_profile_ms"] = {k: statistics.median(p[k] for p in profs)
                                    for k in ("matmul", "attn", "norm", "other", "head", "step",
                                              "wall")}
        res["decode_profile_bytes"] = {"layers": layer_bytes, "head": head_bytes, "kv": kv_tok}

    if args.kernels and bench_kern:
        cmd = [bench_kern, "--json", "--threads", str(args.threads), "--time", "0.3"]
        lib = glob.glob(os.path.join(os.path.dirname(__import__("llama_cpp").__file__), "lib",
                                     "libggml-cpu.so")) if llama else []
        if lib:
            cmd += ["--ggml", lib[0]]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if r.returncode == 0:
            res["kernels"] = json.loads(r.stdout)
        else:
            log("bench_engine: bench_kern failed:", r.stderr[-1000:])

    out = args.out or os.path.join(args.build, "bench", "engine.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=2)

    g, l = res["gemmad"], res.get("llama_cpp", {})
    if llama:
        llama.close()
    print(f"\nEngine benchmark: {args.model}, {args.threads} threads, prompt {args.prompt_tokens}, "
          f"gen {args.gen}, median of {runs} (load avg {res['machine']['load_avg'][0]:.1f})")
    if "config" in l:
        print(f"llama.cpp baseline: {l['config']}")
    elif llama_failed:
        print(f"llama.cpp baseline: FAILED: {llama_failed}")
    print(f"{'':22}{'gemmad':>12}{'llama.cpp':>12}{'ratio':>9}{'target':>9}")
    for k, name in (("prefill_tok_s", "prefill tok/s"), ("decode_tok_s", "decode tok/s")):
        lv = l.get(k)
        lcol = f"{lv:12.1f}" if lv else f"{'FAILED' if llama_failed else '-':>12}"
        print(f"{name:22}{g[k]:12.1f}{lcol}{fmt_ratio(g[k], lv):>9}{'1.25x':>9}")
    print(f"{'decode roofline tok/s':22}{roofline:12.1f}{'':12}"
          f"{100 * res['decode_roofline_frac']:8.0f}%{'90%':>9}")
    print("roofline per run (decode / the probe before it): " + ", ".join(
        f"{100 * r['roofline_frac']:.0f}% ({r['read_bandwidth_gb_s']:.2f} GB/s)" for r in g_runs))
    if "decode_profile_ms" in res:
        print("decode step, medians of the runs (gemmad-cli bench --profile): " +
              profile_line(res["decode_profile_ms"], layer_bytes, head_bytes, kv_tok))
    print(f"read bandwidth {bw:.2f} GB/s (median of the runs' probes); {per_tok / 1e6:.1f} MB per "
          f"token ({w_tok / 1e6:.1f} "
          f"weights + {kv_tok / 1e6:.1f} KV cache); "
          f"gemmad RSS {g['rss_mib']:.0f} MiB, load {g['load_s']:.3f} s (file {file_bytes / 2**20:.0f} MiB)")
    if "kernels" in res:
        print("\nkern_matmul (gemmad, %d threads; ms = median per call, weights from DRAM)" % args.threads)
        print(f"{'matmul':12} {'type':5} {'n_in':>6} {'n_out':>7} {'M':>3} {'ms':>9} {'GB/s':>7} "
              f"{'GMAC/s':>7} {'%bw':>5} {'vs ggml 1T':>10}")
        for c in res["kernels"]["cases"]:
            vs = f"{c['vs_ggml']:.2f}x" if "vs_ggml" in c else ""
            print(f"{c['name']:12} {c['type']:5} {c['n_in']:6d} {c['n_out']:7d} {c['M']:3d} "
                  f"{c['ms']:9.3f} {c['gb_s']:7.2f} {c['gmac_s']:7.2f} {100 * c['bw_frac']:4.0f}% {vs:>10}")
    print(f"\nwritten {out}")
    return 1 if llama_failed else 0


if __name__ == "__main__":
    sys.exit(main())
