#!/usr/bin/env python3
"""LLGuidance on the same MaskBench files as tools/maskbench.py, with the same rule: a schema
passes when it compiles, every valid instance (json.dumps text) is accepted whole and every
invalid one rejected. A byte-level tokenizer (256 byte tokens + EOS) makes acceptance exact.
A reference for comparisons, never a dependency: `pip install llguidance` first.

    python3 tools/maskbench_llg.py PATH/maskbench/data [--json PER_SCHEMA.json]
"""
import concurrent.futures as cf
import json
import os
import sys

import llguidance as llg


class ByteTok:
    def __init__(self):
        self.tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        self.eos_token_id = 256
        self.bos_token_id = None
        self.special_token_ids = [256]
    def __call__(self, b):
        if isinstance(b, str): b = b.encode()
        return list(b)

TOK = llg.LLTokenizer(llg.TokenizerWrapper(ByteTok()))

def accepts(m0, text):
    m = m0.deep_copy()
    toks = list(text.encode("utf-8"))
    n = m.try_consume_tokens(toks)
    if n != len(toks): return False
    return m.is_accepting()

def one(path):
    try:
        doc = json.load(open(path, encoding="utf-8"))
    except Exception as e:
        return None
    g = json.dumps({"grammars": [{"json_schema": doc["schema"]}]})
    m0 = llg.LLMatcher(TOK, g)
    if m0.is_error():
        return {"compiled": False, "vr": 0, "ia": 0}
    vr = ia = 0
    for t in doc.get("tests", []):
        a = accepts(m0, json.dumps(t["data"], ensure_ascii=False))
        if t["valid"] and not a: vr += 1
        if not t["valid"] and a: ia += 1
    return {"compiled": True, "vr": vr, "ia": ia}

def one_named(path):
    r = one(path)
    if r is not None: r["file"] = os.path.basename(path)
    return r

if __name__ == "__main__":
    args = sys.argv[1:]
    out = None
    if len(args) == 3 and args[1] == "--json":
        out = args[2]
        args = args[:1]
    if len(args) != 1:
        sys.exit(__doc__)
    d = args[0]
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".json"))
    res = []
    with cf.ProcessPoolExecutor(2) as ex:
        for r in ex.map(one_named, files, chunksize=20):
            res.append(r)
    res = [r for r in res if r is not None]
    comp = sum(r["compiled"] for r in res)
    ok = sum(r["compiled"] and not r["vr"] and not r["ia"] for r in res)
    print(f"llguidance {llg.get_version() if hasattr(llg,'get_version') else ''}: schemas {len(res)}, compiled {comp}, passing {ok}, "
          f"invalid accepted {sum(r['ia'] for r in res)} (in {sum(1 for r in res if r['ia'])} schemas), "
          f"valid rejected {sum(r['vr'] for r in res)}")
    if out:
        with open(out, "w") as f:
            json.dump(res, f)
