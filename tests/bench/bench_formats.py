"""Every weight format: `bench_engine.py --formats` (see docs/BENCHMARKS.md).

Builds llama.cpp's llama-quantize, llama-bench and llama-simple from the llama.cpp sources in
the llama-cpp-python source distribution that deploy/setup-bench.sh unpacks (under
~/.cache/gemmad, build folder llama-tools-build), requantizes the model (--allow-requantize)
into each format under BUILD/bench/formats/, then per format:
  * correctness: a greedy continuation of a fixed prompt from gemmad (gemmad-cli generate)
    and from llama.cpp (llama-simple, greedy), and how many leading tokens' text they share
    (a near-tie may flip one; a broken format gives garbage from the first token);
  * speed (unless --no-speed): prefill and decode tok/s, gemmad (gemmad-cli bench) and llama.cpp (llama-bench,
    pp P and tg G), alternating, median of --runs, with the ratio.
The llama.cpp build is portable (GGML_NATIVE=OFF with each AVX / AVX2 / AVX-512 option this
CPU has, AMX off; baseline.portable_isa_options): a native build crashes on some AMX hosts
(KVM guests), and AVX-512 code must not be switched on where the CPU lacks it. Requantizing from the bundled Q4_K_M cannot add precision back:
the F16/BF16/Q8_0 files hold the Q4_K_M values in a wider format, which is what a speed
comparison needs.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import baseline

FORMATS = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K",
           "IQ4_NL"]
CACHE = os.environ.get("GEMMAD_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "gemmad"))
TOOLS_BUILD = os.path.join(CACHE, "llama-tools-build")
TOOLS = ["llama-quantize", "llama-bench", "llama-simple"]
PROMPT = "The history of the printing press begins in the fifteenth century, when"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def build_tools(jobs):
    """Paths of the llama.cpp tools, built when missing (or built for other options); None
    when the sources are absent."""
    exes = {t: os.path.join(TOOLS_BUILD, "bin", t) for t in TOOLS}
    isa = baseline.portable_isa_options(baseline.cpu_flags())
    stamp = os.path.join(TOOLS_BUILD, "gemmad-isa-options")
    try:
        with open(stamp) as f:
            same = f.read().split() == isa
    except OSError:
        same = False
    if same and all(os.path.exists(e) for e in exes.values()):
        return exes
    src = baseline.llama_source()
    if not src:
        log("bench_formats: llama.cpp sources not found under", CACHE, "(run deploy/setup-bench.sh)")
        return None
    on = [o[2:-3] for o in isa if o.endswith("=ON")]
    log(f"bench_formats: building {', '.join(TOOLS)} from {src} (portable build: GGML_NATIVE=OFF, "
        f"{', '.join(on)}, AMX off; several minutes)")
    subprocess.run(["cmake", "-S", src, "-B", TOOLS_BUILD, "-DCMAKE_BUILD_TYPE=Release",
                    "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=ON",
                    "-DLLAMA_BUILD_SERVER=OFF", "-DGGML_NATIVE=OFF", "-DGGML_BLAS=OFF"] + isa,
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", TOOLS_BUILD, "--target", *TOOLS, f"-j{jobs}"],
                   check=True, stdout=subprocess.DEVNULL)
    if not all(os.path.exists(e) for e in exes.values()):
        return None
    with open(stamp, "w") as f:
        f.write("\n".join(isa) + "\n")
    return exes


def requantize(quantize, src, fmt, out_dir):
    base = os.path.splitext(os.path.basename(src))[0]
    out = os.path.join(out_dir, f"{base}-as-{fmt.lower()}.gguf")
    if not os.path.exists(out):
        os.makedirs(out_dir, exist_ok=True)
        r = subprocess.run([quantize, "--allow-requantize", src, out + ".tmp", fmt],
                           capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            raise RuntimeError(f"llama-quantize {fmt} failed: {r.stderr[-1500:]}")
        os.replace(out + ".tmp", out)
    return out


def gemmad_text(cli, model, n):
    r = subprocess.run([cli, "generate", "-m", model, "-p", PROMPT, "-n", str(n), "--temp", "0"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"gemmad-cli generate failed ({r.returncode}): {r.stderr[-1000:]}")
    return r.stdout


def llama_text(simple, model, n):
    # Passive OpenMP waits: a correctness check need not spin (on a busy machine spinning
    # threads slow it down by orders of magnitude); llama-bench keeps llama.cpp's default.
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    r = subprocess.run([simple, "-m", model, "-n", str(n), PROMPT], capture_output=True,
                       text=True, timeout=600, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"llama-simple failed ({r.returncode}): {r.stderr[-1000:]}")
    out = r.stdout.strip()
    i = out.find(PROMPT)
    return out[i + len(PROMPT):] if i >= 0 else out


def common_words(a, b):
    """Leading whitespace-separated words two continuations share."""
    wa, wb = a.split(), b.split()
    k = 0
    while k < min(len(wa), len(wb)) and wa[k] == wb[k]:
        k += 1
    return k, min(len(wa), len(wb))


def llama_bench(exe, model, prompt, gen, threads):
    r = subprocess.run([exe, "-m", model, "-p", str(prompt), "-n", str(gen), "-t", str(threads),
                        "-r", "1", "-o", "json"], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({r.returncode}): {r.stderr[-1000:]}")
    res = {}
    for e in json.loads(r.stdout):
        if e.get("n_prompt") and not e.get("n_gen"):
            res["prefill_tok_s"] = e["avg_ts"]
        elif e.get("n_gen") and not e.get("n_prompt"):
            res["decode_tok_s"] = e["avg_ts"]
    return res


def run(args, run_gemmad, cli, out_dir):
    """The --formats mode of bench_engine.py: returns the per-format results."""
    formats = [f.strip().upper() for f in args.format_list.split(",")] if args.format_list \
        else FORMATS
    exes = build_tools(max(1, os.cpu_count() or 1))
    if not exes:
        sys.exit("bench_formats: llama.cpp tools unavailable (see above)")
    runs = max(1, args.runs)
    results = []
    for fmt in formats:
        row = {"format": fmt}
        results.append(row)
        try:
            t0 = time.time()
            model = requantize(exes["llama-quantize"], args.model, fmt, out_dir)
            row["file"], row["file_mib"] = model, os.path.getsize(model) / 2**20
            log(f"bench_formats: {fmt}: {row['file_mib']:.0f} MiB ({time.time() - t0:.0f} s)")
            g_txt = gemmad_text(cli, model, args.check_tokens)
            l_txt = llama_text(exes["llama-simple"], model, args.check_tokens)
            row["same_words"], row["words"] = common_words(g_txt, l_txt)
            row["gemmad_text"], row["llama_text"] = g_txt.strip(), l_txt.strip()
            if args.no_speed:
                log(f"  {fmt}: {row['same_words']}/{row['words']} leading words equal\n"
                    f"    gemmad:    {row['gemmad_text'][:160]}\n"
                    f"    llama.cpp: {row['llama_text'][:160]}")
                continue
            g_runs, l_runs = [], []
            for i in range(runs):
                g_runs.append(run_gemmad(cli, model, args.prompt_tokens, args.gen, args.threads,
                                         args.gemmad_arg))
                l_runs.append(llama_bench(exes["llama-bench"], model, args.prompt_tokens, args.gen,
                                          args.threads))
                log(f"  {fmt} run {i + 1}/{runs}: gemmad {g_runs[-1]['prefill_tok_s']:.1f} / "
                    f"{g_runs[-1]['decode_tok_s']:.1f}, llama.cpp "
                    f"{l_runs[-1].get('prefill_tok_s', 0):.1f} / "
                    f"{l_runs[-1].get('decode_tok_s', 0):.1f} tok/s (prefill / decode)")
            for who, rs in (("gemmad", g_runs), ("llama_cpp", l_runs)):
                row[who] = {k: statistics.median(r[k] for r in rs) if all(k in r for r in rs)
                            else None for k in ("prefill_tok_s", "decode_tok_s")}
                row[who]["runs"] = rs
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            row["error"] = str(e)
            log(f"bench_formats: {fmt}: FAILED: {e}")
    return results


def print_table(results, args):
    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "n/a"
    timing = "greedy cross-check only" if args.no_speed else (
        f"{args.threads} threads, prompt {args.prompt_tokens}, gen {args.gen}, median of "
        f"{max(1, args.runs)}")
    print(f"\nWeight formats: {args.model} requantized, {timing} "
          f"(load avg {os.getloadavg()[0]:.1f})")
    print(f"{'format':8}{'MiB':>6}{'prefill g':>11}{'llama':>9}{'ratio':>7}"
          f"{'decode g':>10}{'llama':>9}{'ratio':>7}  greedy words equal")
    for r in results:
        if "error" in r:
            print(f"{r['format']:8} FAILED: {r['error'][:200]}")
            continue
        if "gemmad" not in r:  # --no-speed
            print(f"{r['format']:8}{r['file_mib']:6.0f}{'(not timed: --no-speed)':>60}  "
                  f"{r['same_words']}/{r['words']}")
            continue
        g, l = r["gemmad"], r["llama_cpp"]
        print(f"{r['format']:8}{r['file_mib']:6.0f}{g['prefill_tok_s']:11.1f}"
              f"{(l['prefill_tok_s'] or 0):9.1f}{ratio(g['prefill_tok_s'], l['prefill_tok_s']):>7}"
              f"{g['decode_tok_s']:10.1f}{(l['decode_tok_s'] or 0):9.1f}"
              f"{ratio(g['decode_tok_s'], l['decode_tok_s']):>7}  {r['same_words']}/{r['words']}")
