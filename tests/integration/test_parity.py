"""Model parity with llama.cpp on the bundled Gemma 3 270M.

The fixture comes from tests/fixtures/parity/gen_parity.py (llama-cpp-python, n_threads=2,
F16 KV cache). Checks greedy 32-token continuations of 10 prompts and teacher-forced top-1
agreement over 10 x 64 positions against llama.cpp's (bounds below); prints the top-5 logit
differences (max and mean over the ids in both top-5 lists).

Why these bounds and not 99% / 9 of 10 (the original targets, still printed with the
result): llama.cpp does not reach them against itself. Evaluating the same cases one token
per ubatch instead of one 512-token ubatch (gen_parity.py records this in
meta.llama_cpp_self) gives 620/640 = 96.9% teacher-forced top-1 and 4/10 equal greedy
continuations: this base model has many near-ties, and any change in summation order flips
some of them. The fixture was made on an AMD AVX2 machine; on an Intel AVX-512 machine
llama.cpp itself scores 630/640 (ubatch 512) and 620/640 (ubatch 1) against it, and
gemmad's count moves between 613 and 625 with nothing but the summation order of its
kernels (AVX2 vs AVX-512 tiles, attention block size). Every disagreement seen, ours or
llama.cpp's, was at a margin below 0.9 logits (llama.cpp's own: below 0.61). So:

- top-1: at least llama.cpp's self-consistency minus 10 positions (1.6%), and gemmad must
  agree at EVERY position where llama.cpp's top-1 leads its runner-up by at least
  CLEAR_MARGIN logits;
- greedy: equal 32-token continuations count how often no near-tie flips anywhere in 32
  steps (that count moves between 2 and 5 of 10 with summation order alone; llama.cpp
  against itself: 4), so the test asserts what a correct implementation guarantees instead:
  at the first token where a continuation departs from llama.cpp's, llama.cpp's token is a
  near-tie in gemmad's own logits there (within CLEAR_MARGIN of gemmad's choice).

A real bug (wrong RoPE, norm or scale) departs at a clear token and fails both checks by far.
"""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("GEMMAD_CLI", os.path.join(ROOT, "build", "gemmad-cli"))
MODEL = os.environ.get("GEMMAD_TEST_MODEL", os.path.join(ROOT, "models",
                                                          "gemma-3-270m-q4_k_m.gguf"))
# llama.cpp's top-1 must be ours wherever it leads its runner-up by this many logits.
CLEAR_MARGIN = 1.0
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "parity", "parity_gemma3_270m.json")

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CLI), reason="build/gemmad-cli not built"),
    pytest.mark.skipif(not os.path.exists(MODEL), reason="model not present"),
]


@pytest.fixture(scope="module")
def fixture():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def cli(*args):
    p = subprocess.run([CLI, *args, "-t", "2"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_prompt_tokenization(fixture):
    """Not a parity criterion by itself, but the greedy test below starts from the text."""
    bad = []
    for c in fixture["cases"]:
        if c["chat"]:
            continue
        ids = cli("tokenize", "-m", MODEL, "--special", c["prompt"])
        if ids != c["prompt_ids"]:
            bad.append(c["prompt"])
    assert not bad, "tokenization differs from llama.cpp for %r" % bad


# Gemma's end-of-generation tokens (<eos>, <end_of_turn>): a continuation that ends early
# chose one of them.
EOG_IDS = (1, 106)


def test_greedy_continuations(fixture):
    same = 0
    departures = []
    for c in fixture["cases"]:
        args = ["generate", "-m", MODEL, "-p", c["prompt"], "-n", "32", "--temp", "0",
                "--print-ids"]
        if c["chat"]:
            args.append("--chat")
        got = cli(*args)
        ok = got == c["greedy"]
        same += ok
        if ok:
            continue
        n = next((i for i, (a, b) in enumerate(zip(got, c["greedy"])) if a != b),
                 min(len(got), len(c["greedy"])))
        if n == 32:
            continue  # one side stopped at the 32-token limit, the other went on
        print("greedy differs for %r at token %d: ours %s, llama.cpp %s" %
              (c["prompt"][:40], n, got[n:n + 4], c["greedy"][n:n + 4]))
        # gemmad's logits at the departure: the prompt and the shared prefix
        row = cli("logits", "-m", MODEL, "--tokens",
                  ",".join(map(str, c["prompt_ids"] + got[:n])), "--top", "20")
        top = {e["id"]: e["logit"] for e in row}
        theirs = [c["greedy"][n]] if n < len(c["greedy"]) else list(EOG_IDS)
        gap = min((row[0]["logit"] - top[t] for t in theirs if t in top), default=None)
        departures.append((c["prompt"][:24], n, gap))
    selfc = fixture["meta"]["llama_cpp_self"]
    print("greedy continuations equal: %d/%d (target 9/10 %s; llama.cpp vs itself: %d/%d)"
          % (same, len(fixture["cases"]), "met" if same >= 9 else "NOT met",
             selfc["greedy_equal"], selfc["greedy_total"]))
    print("departures (prompt, token, gemmad's margin over llama.cpp's token): %s" % departures)
    bad = [d for d in departures if d[2] is None or d[2] >= CLEAR_MARGIN]
    assert not bad, "continuations depart where gemmad's choice is clear: %s" % bad


def test_teacher_forced_top5(fixture):
    agree = total = clear = 0
    diffs, clear_bad = [], []
    for c in fixture["cases"]:
        rows = cli("logits", "-m", MODEL, "--tokens", ",".join(map(str, c["tf_tokens"])),
                   "--all", "--top", "5")
        assert len(rows) == len(c["tf_top"])
        for ours, ref in zip(rows, c["tf_top"]):
            total += 1
            agree += ours[0]["id"] == ref[0][0]
            if ref[0][1] - ref[1][1] >= CLEAR_MARGIN:
                clear += 1
                if ours[0]["id"] != ref[0][0]:
                    clear_bad.append((c["prompt"][:24], len(diffs), ref[:2], ours[:2]))
            mine = {e["id"]: e["logit"] for e in ours}
            for tid, logit in ref:
                if tid in mine:
                    diffs.append(abs(mine[tid] - logit))
    pct = 100.0 * agree / total
    print("teacher-forced top-1 agreement: %d/%d = %.2f%%" % (agree, total, pct))
    print("top-5 logit |diff| over %d shared ids: max %.4f, mean %.4f" %
          (len(diffs), max(diffs), sum(diffs) / len(diffs)))
    selfc = fixture["meta"]["llama_cpp_self"]
    print("target 99%%: %s; llama.cpp vs itself: %d/%d = %.2f%%" %
          ("met" if pct >= 99.0 else "NOT met", selfc["tf_top1_agree"], selfc["tf_total"],
           100.0 * selfc["tf_top1_agree"] / selfc["tf_total"]))
    floor = selfc["tf_top1_agree"] * total // selfc["tf_total"] - 10
    print("clear positions (llama.cpp margin >= %.1f): %d/%d agree" %
          (CLEAR_MARGIN, clear - len(clear_bad), clear))
    assert not clear_bad, "disagree where llama.cpp's choice is clear: %s" % clear_bad[:5]
    assert agree >= floor, (agree, floor)
