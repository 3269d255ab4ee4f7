#!/usr/bin/env python3
"""How much can prompt-lookup drafting gain on a given workload, whatever its policy?

Runs the model greedily once (gemmad-cli generate --print-ids), then replays that output:
  - policy: scheduler/spec.c's lookup and length rules (the copy in progress while it
    matches, else the longest suffix match of SPEC_NGRAM_MIN..SPEC_NGRAM_MAX tokens, newest
    occurrence first; limit halves on a miss with a cool-down, doubles on a full accept),
    every draft verified (the ALWAYS mode);
  - oracle: at each step the earlier occurrence (any suffix match of >= --oracle-ngram tokens)
    whose continuation agrees longest with what the model really produced.
Greedy output does not depend on drafting, so the replay is exact. A step of 1 + k rows is
taken to cost 1 + k * --row-cost single-row steps (0.125: nine rows cost twice one row, as
measured for Gemma 3 270M on 2 cores). Prints tokens per step and the modelled speed-up.

  python3 tools/spec_bound.py -m models/gemma-3-270m-q4_k_m.gguf [--kind repetitive]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "bench"))
import bench_server  # noqa: E402  (the bench's prompts)

NGRAM_MIN, NGRAM_MAX, MAX_DRAFT, START_DRAFT, MAX_COOLDOWN = 2, 4, 8, 4, 32  # spec.h


def match(h, e, cap):
    n, ln = len(h), 0
    while ln < cap and e - ln >= 0 and h[e - ln] == h[n - 1 - ln]:
        ln += 1
    return ln


def lookup(h, max_draft, align):
    """spec_lookup: (drafts, new align)."""
    n, best_end = len(h), -1
    x = n - 1 - align if align > 0 else -1
    if x >= 0:
        for e in range(max(x - 1, 0), n - 1):
            ln = match(h, e, NGRAM_MIN) if h[e] == h[-1] else 0
            if ln >= NGRAM_MIN or (ln >= 1 and e <= x):
                best_end = e
                break
    if best_end < 0 and n >= NGRAM_MIN + 1:
        best_len = 0
        for e in range(n - 2, NGRAM_MIN - 2, -1):
            if h[e] != h[-1]:
                continue
            ln = match(h, e, NGRAM_MAX)
            if ln > best_len:
                best_len, best_end = ln, e
                if ln == NGRAM_MAX:
                    break
        if best_len < NGRAM_MIN:
            best_end = -1
    if best_end < 0:
        return [], align
    d, i = [], best_end + 1
    while len(d) < max_draft:
        d.append(h[i] if i < n else d[i - n])
        i += 1
    return d, n - 1 - best_end


def replay(prompt, out, row_cost, oracle_ngram=None):
    h, pos, cost, steps, drafted, accepted = list(prompt), 0, 0.0, 0, 0, 0
    limit, misses, cooldown, align = START_DRAFT, 0, 0, 0
    while pos < len(out):
        if oracle_ngram is None:
            d = []
            if cooldown > 0:
                cooldown -= 1
            else:
                d, align = lookup(h, limit, align)
            a = 0
            while a < len(d) and pos + a < len(out) and d[a] == out[pos + a]:
                a += 1
            if d:
                if a == 0:
                    misses += 1
                    cooldown = min(misses - 1, MAX_COOLDOWN)
                    limit = max(limit // 2, 1)
                else:
                    misses = 0
                    limit = a + 1 if a < len(d) else min(2 * limit, MAX_DRAFT)
            nd = len(d)
        else:
            n, a = len(h), 0
            for e in range(n - 1):
                ln = 0
                while ln < NGRAM_MAX * 2 and e - ln >= 0 and h[e - ln] == h[n - 1 - ln]:
                    ln += 1
                if ln < oracle_ngram:
                    continue
                k = 0
                while (k < MAX_DRAFT and pos + k < len(out) and e + 1 + k < n
                       and h[e + 1 + k] == out[pos + k]):
                    k += 1
                a = max(a, k)
            nd = a + 1 if a < MAX_DRAFT else MAX_DRAFT  # the oracle drafts one wrong token at most
        take = min(a + 1, len(out) - pos)
        h += out[pos:pos + take]
        pos += take
        cost += 1 + row_cost * nd
        steps += 1
        drafted += nd
        accepted += a
    return {"tokens_per_step": len(out) / steps, "speedup": len(out) / cost,
            "drafted": drafted, "accepted": accepted}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--cli", default="build/gemmad-cli")
    ap.add_argument("--kind", default="repetitive", choices=sorted(bench_server.SPEC_PROMPTS))
    ap.add_argument("-n", type=int, default=256, help="tokens generated (the bench's --spec-gen)")
    ap.add_argument("--row-cost", type=float, default=0.125)
    a = ap.parse_args()
    prompt_text = bench_server.SPEC_PROMPTS[a.kind]
    prompt = json.loads(subprocess.check_output([a.cli, "tokenize", "-m", a.model, prompt_text],
                                                stderr=subprocess.DEVNULL))
    txt = subprocess.check_output([a.cli, "generate", "-m", a.model, "-p", prompt_text, "--temp", "0",
                                   "-n", str(a.n), "--print-ids"], stderr=subprocess.DEVNULL)
    out = [int(x) for x in txt.decode().strip().strip("[]").split(",") if x.strip()]
    print(f"{a.kind}: {len(prompt)} prompt tokens, {len(out)} generated (greedy), "
          f"row cost {a.row_cost}")
    for name, ng in (("policy (spec.c)", None), ("oracle, >= 2-token match", 2),
                     ("oracle, >= 1-token match", 1)):
        r = replay(prompt, out, a.row_cost, ng)
        print(f"  {name:26s} {r['tokens_per_step']:5.2f} tokens/step, drafted {r['drafted']:4d}, "
              f"accepted {r['accepted']:4d}, modelled speed-up {r['speedup']:.2f}x")


if __name__ == "__main__":
    main()
