#!/usr/bin/env python3
"""Constrained decoding benchmark (docs/TOOLS.md).

1. Mask time per token (p50, p99; cold cache = the first pass over a grammar, warm = the
   second) for a few schemas on the model's whole vocabulary, through
   `gemmad-cli grammar --check INSTANCE -m MODEL --bench` (one thread).
2. Compile time of a large schema (JSON Schema to GBNF, GBNF to grammar).
3. Decode throughput of build/gemmad with and without a schema, at 1 and 16 streams:
   /v1/chat/completions (streamed), temperature 0, the same prompts; end to end, tok/s =
   completion tokens of all requests / wall time; and decode alone, per stream: the tokens
   after each request's first / the time from its first token to its last, summed over the
   requests (prefill and per-request costs left out: constrained answers can end earlier).
   The two sides write different text there, and drafting gains more on the unconstrained
   one (the base model's free answer copies its prompt line over and over), so a last pair
   makes both write the same text (same_text): its ratio is the grammar's own cost with
   drafting on, the median of --rounds alternating rounds (per-round ratios printed).

  python3 tests/bench/bench_grammar.py --model models/gemma-3-270m-q4_k_m.gguf
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "gemmad-cli")
GEMMAD = os.path.join(ROOT, "build", "gemmad")

SCHEMAS = {
    "person": ({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0,
                                                            "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8}},
        "required": ["name", "age", "email", "tags"], "additionalProperties": False},
        {"name": "Ada Lovelace, Countess of Lovelace", "age": 36,
         "email": "ada@analytical.engine.org", "tags": ["math", "poetry", "engines", "notes"]}),
    "free_json": ({"type": "object"},
                  {"text": "The quick brown fox jumps over the lazy dog. " * 3,
                   "n": [1, 2.5, -3e5], "ok": True, "nested": {"a": None, "b": "ünïcödé"}}),
    "enum_list": ({"type": "array", "items": {"enum": ["alpha", "beta", "gamma", "delta"]},
                   "maxItems": 40}, ["alpha", "beta", "gamma", "delta"] * 6),
}


def large_schema(n=400):
    props = {}
    for i in range(n):
        k = i % 5
        props[f"field_{i}"] = (
            {"type": "string", "maxLength": 32} if k == 0 else
            {"type": "integer", "minimum": -i, "maximum": 1000 + i} if k == 1 else
            {"enum": [f"v{i}_{j}" for j in range(8)]} if k == 2 else
            {"type": "array", "items": {"type": "number"}, "maxItems": 10} if k == 3 else
            {"type": "object", "properties": {"x": {"type": "boolean"},
                                              "y": {"type": ["string", "null"]}},
             "required": ["x"], "additionalProperties": False})
    return {"type": "object", "properties": props, "required": list(props)[::2],
            "additionalProperties": False}


def cli_bench(model, schema, inst, tmp):
    s = os.path.join(tmp, "s.json")
    i = os.path.join(tmp, "i.json")
    with open(s, "w") as f:
        json.dump(schema, f)
    with open(i, "w") as f:
        f.write(json.dumps(inst, ensure_ascii=False))
    args = [CLI, "grammar", "--schema", s, "--bench", "--check", i]
    if model:
        args += ["-m", model]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout


def post(port, body, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def post_stream(port, body, timeout=600, path="/v1/chat/completions", text=None):
    """A streamed request: (completion tokens, seconds from its first content delta to its
    last). text: a list the streamed text is appended to."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    n, first, last = 0, None, None
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                n = ev["usage"]["completion_tokens"]
            for ch in ev.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content") or ch.get("text")
                if piece:
                    last = time.time()
                    first = first or last
                    if text is not None:
                        text.append(piece)
    return n, (last - first) if first else 0.0


# The same-text pair: a few-shot prompt after which the model's own greedy answer is JSON
# that fits SAME_SCHEMA, so the constrained request writes exactly the tokens of the
# unconstrained one (checked) and the ratio is the grammar's cost alone, drafting included.
SAME_WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "piano", "lemon", "orbit",
              "candle", "forest", "silver", "garden", "rocket", "window", "pepper", "harbor",
              "violet", "marble", "falcon", "copper", "meadow", "lantern", "thunder"]
SAME_SCHEMA = {"type": "object", "properties": {
    "items": {"type": "array", "items": {"type": "string"}}, "count": {"type": "integer"}},
    "required": ["items", "count"], "additionalProperties": False}


def same_prompt(i):
    w = SAME_WORDS[i % 11:] + SAME_WORDS[:i % 11]
    return ('Text: red, green, blue\nJSON:\n{"items": ["red", "green", "blue"], "count": 3}\n'
            'Text: cat, dog\nJSON:\n{"items": ["cat", "dog"], "count": 2}\n'
            "Text: " + ", ".join(w) + "\nJSON:\n")


def same_text(port, conc, n_req, gen, rounds):
    """Unconstrained and constrained runs alternating (the order flips each round, after one
    untimed run of each): (median unconstrained and constrained decode tok/s after the first
    token, median ratio, the per-round ratios, the most requests whose texts differed in a
    round).
    Each round counts only the requests whose two texts are the same (where the model's own
    answer does not fit the schema, the constrained one differs from there on)."""
    import statistics

    def one(i, cons):
        body = {"prompt": same_prompt(i), "temperature": 0, "max_tokens": gen, "stop": ["\n"]}
        if cons:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "s", "schema": SAME_SCHEMA}}
        text = []
        n, dt = post_stream(port, body, path="/v1/completions", text=text)
        return n, dt, "".join(text)

    def run(cons, ids):
        with cf.ThreadPoolExecutor(conc) as ex:
            return list(ex.map(lambda i: one(i, cons), ids))

    for cons in (False, True):  # warm-up, as in throughput()
        run(cons, range(-n_req, 0))
    free, cons_r, ratios, differ = [], [], [], 0
    for r in range(rounds):
        out = {}
        for cons in ((False, True) if r % 2 == 0 else (True, False)):
            out[cons] = run(cons, range(1, n_req + 1))
        same = [(a, b) for a, b in zip(out[False], out[True]) if a[2] == b[2]]
        differ = max(differ, n_req - len(same))
        rate = [sum(max(p[k][0] - 1, 0) for p in same) / max(sum(p[k][1] for p in same), 1e-9)
                for k in (0, 1)]
        free.append(rate[0])
        cons_r.append(rate[1])
        ratios.append(rate[1] / rate[0] if rate[0] else 0.0)
    return (statistics.median(free), statistics.median(cons_r), statistics.median(ratios),
            ratios, differ)


def throughput(port, model_id, conc, n_req, gen, schema, spec=True):
    """(end-to-end tok/s: all completion tokens / wall time, tokens, decode tok/s: the tokens
    after each request's first / the time from its first token to its last, summed). The
    second leaves out prefill and per-request costs, which weigh more on shorter answers."""
    def one(i):
        body = {"model": model_id, "temperature": 0, "max_tokens": gen,
                "messages": [{"role": "user", "content": f"List {i} words as JSON."}]}
        if not spec:
            body["speculative"] = False
        if schema:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "s", "schema": schema}}
        return post_stream(port, body)

    # Warm-up, untimed, the same number of requests: for the constrained run it builds the
    # trie and fills the grammar cache; at `conc` streams at once it also touches the KV pages
    # that many sequences use; and the drafting cost model (speculative = 1) learns the step
    # times of multi-row steps (the first measured run after start drafted too much: 1
    # stream, constrained, 43.6 tok/s, the next 62.3, drafting off 63.1-64.2).
    with cf.ThreadPoolExecutor(conc) as ex:
        list(ex.map(one, range(-n_req, 0)))
    t0 = time.time()
    with cf.ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(one, range(1, n_req + 1)))
    wall = time.time() - t0
    toks = sum(n for n, _ in res)
    dec_t = sum(dt for _, dt in res)
    dec = sum(max(n - 1, 0) for n, _ in res) / dec_t if dec_t > 0 else 0.0
    return toks / wall, toks, dec


# Forced drafts: a schema whose keys are long, so most of an answer's key bytes are forced
# once the key's first bytes are written (sched_gram_draft drafts them).
LONG_KEYS = {"type": "object", "properties": {
    f"customer_shipping_address_line_{i}": {"type": "string", "maxLength": 20} for i in range(6)},
    "required": [f"customer_shipping_address_line_{i}" for i in range(6)],
    "additionalProperties": False}


def forced_drafts(port, gen, rounds=5):
    """Greedy constrained requests with drafting on and off, alternating (one untimed round
    first): (median decode tok/s after the first token on, off, the per-round figures)."""
    import statistics
    res = {True: [], False: []}
    for r in range(rounds + 1):
        for spec in (True, False):
            body = {"temperature": 0, "max_tokens": gen, "messages": [
                {"role": "user", "content": "Write the customer shipping address as JSON."}],
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "s", "schema": LONG_KEYS}}}
            if not spec:
                body["speculative"] = False
            n, dt = post_stream(port, body)
            if r > 0 and dt > 0:
                res[spec].append((n - 1) / dt)
    return statistics.median(res[True]), statistics.median(res[False]), res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--skip-server", action="store_true")
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating rounds of the same-text pair (its ratio is their median)")
    ap.add_argument("--forced-only", action="store_true",
                    help="only the forced-drafts pair (drafting on / off on long keys)")
    ap.add_argument("--gemmad", default=GEMMAD, help="the server binary (another build)")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        if a.forced_only:
            SCHEMAS.clear()
        print("mask time per token (gemmad-cli grammar --bench, one thread):")
        for name, (schema, inst) in SCHEMAS.items():
            rc, out = cli_bench(a.model, schema, inst, tmp)
            for line in out.splitlines():
                if line.startswith("mask") or line.startswith("cache"):
                    print(f"  {name:10s} {line}")
            if rc != 0:
                print(f"  {name}: the instance was rejected (rc {rc})")
        rc, out = cli_bench(None, large_schema(), {}, tmp) if SCHEMAS else (0, "")
        m = re.search(r"compile: schema to GBNF ([\d.]+) ms, GBNF to grammar ([\d.]+) ms "
                      r"\((\d+) rules, (\d+) elements\)", out)
        if m:
            print(f"large schema (400 properties): to GBNF {m.group(1)} ms + compile "
                  f"{m.group(2)} ms = {float(m.group(1)) + float(m.group(2)):.1f} ms "
                  f"({m.group(3)} rules, {m.group(4)} elements)")
    if a.skip_server:
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a.gemmad, "--model", a.model, "--host", "127.0.0.1", "--port", str(port),
            "--max-seqs", "16", "--ctx-size", "2048",
            # Every run sends the same prompts: without this, the first run of a level
            # would prefill them and the later ones would find them cached.
            "--prefix-cache", "0"]
    if a.threads:
        argv += ["--threads", str(a.threads)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models") as r:
            mid = json.loads(r.read())["data"][0]["id"]
        on, off, res = forced_drafts(port, 2 * a.gen)
        print(f"forced drafts (six 32-byte keys, {2 * a.gen} tokens, greedy, medians of 5 "
              f"alternating): decode after the first token, drafting on {on:.1f} tok/s, off "
              f"{off:.1f}, ratio {on / off if off else 0:.2f} (on: "
              f"{', '.join(f'{x:.0f}' for x in res[True])}; off: "
              f"{', '.join(f'{x:.0f}' for x in res[False])})")
        if a.forced_only:
            return 0
        schema = {"type": "array", "items": {"type": "string", "maxLength": 12}}
        print(f"decode throughput, {a.gen} tokens per request (tok/s):")
        # Drafting depends on the text (unconstrained output repeats itself more), so the
        # second pair turns it off for both: the grammar's own cost.
        for conc, n_req in ((1, 4), (16, 32)):
            for spec in (True, False):
                free, nf, dfree = throughput(port, mid, conc, n_req, a.gen, None, spec)
                cons, nc, dcons = throughput(port, mid, conc, n_req, a.gen, schema, spec)
                print(f"  {conc:2d} streams, speculative {'on ' if spec else 'off'}: "
                      f"unconstrained {free:7.1f} ({nf} tokens), constrained {cons:7.1f} "
                      f"({nc} tokens), ratio {cons / free:.2f}; decode after the first "
                      f"token {dfree:6.1f} vs {dcons:6.1f} per stream, ratio "
                      f"{dcons / dfree if dfree else 0:.2f}")
        print(f"same text, {2 * a.gen} tokens at most per request (the constrained answer must "
              f"equal the unconstrained one; speculative on; medians of {a.rounds} alternating "
              f"rounds, per-round ratios in brackets):")
        for conc, n_req in ((1, 8), (16, 32)):
            free, cons, ratio, ratios, differ = same_text(port, conc, n_req, 2 * a.gen, a.rounds)
            print(f"  {conc:2d} streams: decode after the first token {free:6.1f} vs {cons:6.1f} "
                  f"per stream, ratio {ratio:.2f} ({', '.join(f'{x:.2f}' for x in ratios)}); "
                  f"texts differ in {differ} of {n_req} (left out)")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
