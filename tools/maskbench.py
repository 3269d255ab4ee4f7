#!/usr/bin/env python3
"""MaskBench coverage of gemmad's JSON Schema support (guidance-ai/jsonschemabench,
maskbench/data: about 11,000 real schemas with valid and invalid instances).

A schema passes when `gemmad-cli grammar --schema` compiles it, `--check` accepts every valid
instance and rejects every invalid one. An invalid instance that is accepted is an
"invalidation" error (the engine would let invalid output through); a valid one rejected only
narrows what can be generated. Instances are written as json.dumps writes them (", " and
": "), since JSON whitespace is free. The data is not part of this repository: fetch the
benchmark and point --data at its maskbench/data folder.

    python3 tools/maskbench.py --data PATH/maskbench/data [--jobs 2] [--limit N] [--json OUT]
        [--spec-keys | --extra-keys]
    python3 tools/maskbench.py --data PATH/maskbench/data --mask-times N [--model GGUF]

--mask-times N times the masks instead, as the published figures do (mask time per token):
N schemas drawn at random (seeded) among those that compile, each with its first valid
instance that the grammar accepts, run token by token through Gemma's vocabulary masks with
`gemmad-cli grammar -m MODEL --times`, each schema with a fresh grammar (so its cache starts
cold); it prints p50 / p99 / max over all tokens of the first pass (cold cache: what a new
grammar costs) and of a second pass over the same tokens (warm cache).

--spec-keys runs `gemmad-cli grammar --spec-keys`: an absent additionalProperties lets other
keys follow the declared ones, and keys come in any order, as JSON Schema says (the server's
json_schema_extra_keys and json_schema_any_order); by default only the declared keys are
generated, in the schema's order, which rejects valid instances with others or in another
order. --extra-keys runs `gemmad-cli grammar --extra-keys`: other keys may follow the declared
ones, which keep the schema's order (json_schema_extra_keys alone), the rule LLGuidance's
JSON Schema support follows.
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cli, args, timeout, extra=()):
    try:
        r = subprocess.run([cli, "grammar"] + args + list(extra), capture_output=True, text=True,
                           timeout=timeout)
        return r.returncode, r.stderr.strip()
    except subprocess.TimeoutExpired:
        return "timeout", ""


def one(cli, path, tmp, timeout, extra=()):
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:  # a damaged file in the snapshot: counted, not run
        return {"name": name, "unreadable": str(e)}
    sfile = os.path.join(tmp, name + ".schema.json")
    with open(sfile, "w", encoding="utf-8") as f:
        json.dump(doc["schema"], f)
    t0 = time.time()
    rc, err = run(cli, ["--schema", sfile], timeout, extra)
    res = {"name": name, "compiled": rc == 0, "error": err if rc != 0 else "",
           "compile_s": time.time() - t0, "valid_rejected": 0, "invalid_accepted": 0,
           "tests": len(doc.get("tests", []))}
    if rc == "timeout":
        res["error"] = "timeout"
    if rc != 0:
        os.unlink(sfile)
        return res
    for i, t in enumerate(doc.get("tests", [])):
        ifile = os.path.join(tmp, f"{name}.{i}.json")
        with open(ifile, "w", encoding="utf-8") as f:
            f.write(json.dumps(t["data"], ensure_ascii=False))
        rc, _ = run(cli, ["--schema", sfile, "--check", ifile], timeout, extra)
        os.unlink(ifile)
        if t["valid"] and rc != 0:
            res["valid_rejected"] += 1
        if not t["valid"] and rc == 0:
            res["invalid_accepted"] += 1
    os.unlink(sfile)
    return res


def mask_times(a, files, extra):
    """--mask-times: per-token mask times over N schemas (see the module text)."""
    import random
    rng = random.Random(1)
    files = list(files)
    rng.shuffle(files)
    cold, warm, used, skipped = [], [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        def timed(path):
            name = os.path.basename(path)
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                return None
            sfile = os.path.join(tmp, name + ".schema.json")
            with open(sfile, "w", encoding="utf-8") as f:
                json.dump(doc["schema"], f)
            out = None
            for i, t in enumerate(doc.get("tests", [])):
                if not t["valid"]:
                    continue
                ifile = os.path.join(tmp, f"{name}.{i}.json")
                tfile = ifile + ".times"
                with open(ifile, "w", encoding="utf-8") as f:
                    f.write(json.dumps(t["data"], ensure_ascii=False))
                rc, _ = run(a.cli, ["--schema", sfile, "--check", ifile, "-m", a.model,
                                    "--times", tfile], a.timeout, extra)
                os.unlink(ifile)
                if rc == 2 or rc == "timeout":  # does not compile: no instance will do
                    break
                if rc == 0:
                    with open(tfile) as f:
                        out = [tuple(map(float, ln.split())) for ln in f if ln.strip()]
                    os.unlink(tfile)
                    break
            os.unlink(sfile)
            return out

        at = 0
        with cf.ThreadPoolExecutor(a.jobs) as ex:
            while used < a.mask_times and at < len(files):
                batch = files[at:at + 2 * a.jobs]  # a few at a time: stop at N
                at += len(batch)
                for r in ex.map(timed, batch):
                    if not r:
                        skipped += 1
                    elif used < a.mask_times:
                        used += 1
                        cold += [c for c, _ in r]
                        warm += [w for _, w in r]

    def pct(v, q):
        v = sorted(v)
        return v[min(len(v) - 1, int(q * (len(v) - 1)))] if v else 0.0
    print(f"mask time per token, {used} schemas ({skipped} passed over: not compiled or no "
          f"accepted valid instance), {len(cold)} tokens, one thread:")
    for what, v in (("cold cache (a new grammar)", cold), ("warm cache", warm)):
        print(f"  {what}: p50 {pct(v, 0.5):.0f} us, p99 {pct(v, 0.99):.0f} us, "
              f"max {max(v) if v else 0:.0f} us")
    return 0


def key_flags(a):
    return ["--spec-keys"] if a.spec_keys else ["--extra-keys"] if a.extra_keys else []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "gemmad-cli"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--json", help="write per-schema results here")
    ap.add_argument("--only", help="a file of schema file names to run (one a line)")
    ap.add_argument("--spec-keys", action="store_true",
                    help="gemmad-cli grammar --spec-keys (JSON Schema's additionalProperties)")
    ap.add_argument("--extra-keys", action="store_true",
                    help="gemmad-cli grammar --extra-keys (other keys after the declared ones, "
                    "which keep the schema's order: LLGuidance's rule)")
    ap.add_argument("--mask-times", type=int, default=0,
                    help="time the masks of N schemas instead (see the module text)")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    a = ap.parse_args()
    files = sorted(os.path.join(a.data, f) for f in os.listdir(a.data) if f.endswith(".json"))
    if a.only:
        with open(a.only) as f:
            keep = {ln.strip() for ln in f if ln.strip()}
        files = [p for p in files if os.path.basename(p) in keep]
    if a.limit:
        files = files[:a.limit]
    if a.mask_times:
        return mask_times(a, files, key_flags(a))
    results = []
    with tempfile.TemporaryDirectory() as tmp, cf.ThreadPoolExecutor(a.jobs) as ex:
        extra = key_flags(a)
        for r in ex.map(lambda p: one(a.cli, p, tmp, a.timeout, extra), files):
            results.append(r)
            if len(results) % 500 == 0:
                print(f"  {len(results)} / {len(files)}", file=sys.stderr)
    bad = [r for r in results if "unreadable" in r]
    results = [r for r in results if "unreadable" not in r]
    n = len(results)
    compiled = sum(r["compiled"] for r in results)
    passing = sum(r["compiled"] and not r["valid_rejected"] and not r["invalid_accepted"]
                  for r in results)
    inval = sum(r["invalid_accepted"] for r in results)
    inval_schemas = sum(1 for r in results if r["invalid_accepted"])
    vrej = sum(r["valid_rejected"] for r in results)
    reasons = {}
    for r in results:
        if not r["compiled"]:
            msg = r["error"].split(".schema.json: ", 1)[-1]
            key = msg.split(" at ")[0].split(" (")[0][:70]
            reasons[key] = reasons.get(key, 0) + 1
    print(f"schemas: {n}, compiled: {compiled}, passing: {passing}")
    if bad:
        print(f"unreadable files skipped: {len(bad)} ({', '.join(r['name'] for r in bad[:5])})")
    print(f"invalid instances accepted: {inval} (in {inval_schemas} schemas); "
          f"valid instances rejected: {vrej}")
    print("most common reasons a schema does not compile:")
    for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {v:6d}  {k}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
