"""A finite set of values (enum or const) beside any keywords (server/jschema_value.c): the
grammar holds exactly the candidates that are valid against the whole schema, decided by a
validator of constant values, so keywords the generator refuses (not, if/then/else,
uniqueItems, contains, propertyNames, dependentRequired, ...) are exact there.

Checked through `gemmad-cli grammar --schema S --check X` against Python's jsonschema on a
seeded random corpus of keyword schemas S and values X: {"allOf": [{"enum": [X]}, S]} and
{"allOf": [{"enum": [X]}, {"not": S}]} (the same value on both sides of not, so a wrong
answer either way shows) must accept X exactly when jsonschema says the schema holds for X
(else be refused because no candidate is left), or be refused for another reason. Floors on the decided cases keep the check from passing with nothing
checked."""
import json
import os
import random
import subprocess

import jsonschema
import pytest

from conftest import ROOT

CLI = os.environ.get("GEMMAD_CLI", os.path.join(ROOT, "build", "gemmad-cli"))
DRAFTS = {
    "https://json-schema.org/draft/2020-12/schema": jsonschema.Draft202012Validator,
    "http://json-schema.org/draft-07/schema#": jsonschema.Draft7Validator,
    "http://json-schema.org/draft-04/schema#": jsonschema.Draft4Validator,
}


NONE_LEFT = "no value of the schema's enum or const is valid"


def run(tmp_path, schema, value):
    """0 accepted, 1 rejected, 2 refused, 3 refused because no candidate value is valid"""
    sf, vf = tmp_path / "s.json", tmp_path / "v.json"
    sf.write_text(json.dumps(schema))
    vf.write_text(json.dumps(value, ensure_ascii=False))  # literals spell text as UTF-8
    r = subprocess.run([CLI, "grammar", "--schema", str(sf), "--check", str(vf)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode in (0, 1, 2), r.stderr
    return 3 if r.returncode == 2 and NONE_LEFT in r.stderr else r.returncode


def rand_value(rng, depth=0):
    k = rng.randrange(8 if depth < 2 else 5)
    if k == 0: return None
    if k == 1: return rng.random() < 0.5
    if k == 2: return rng.choice([0, 1, 2, 3, -1, 10, 2.5, 3.0, 0.5])
    if k == 3: return rng.choice(["", "a", "ab", "abc", "b", "x1", "áé", "aaaa"])
    if k == 4: return rng.choice(["a", "b", 1])
    if k in (5, 6):
        return [rand_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice("abcx"): rand_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def rand_schema(rng, depth=0):
    kws = [
        lambda: {"type": rng.choice(["string", "integer", "number", "object", "array",
                                     "boolean", "null"])},
        lambda: {"type": ["string", rng.choice(["null", "integer", "array"])]},
        lambda: {"enum": [rand_value(rng, 2) for _ in range(2)]},
        lambda: {"const": rand_value(rng, 1)},
        lambda: {"minLength": rng.randrange(4)}, lambda: {"maxLength": rng.randrange(4)},
        lambda: {"pattern": rng.choice(["^a", "b$", "[0-9]", "^a+$", "a|b"])},
        lambda: {"minimum": rng.choice([0, 1, 2.5])},
        lambda: {"exclusiveMaximum": rng.choice([1, 3, 2.5])},
        lambda: {"multipleOf": rng.choice([2, 0.5, 3])},
        lambda: {"minItems": rng.randrange(3)}, lambda: {"maxItems": rng.randrange(3)},
        lambda: {"uniqueItems": True},
        lambda: {"contains": rand_schema(rng, depth + 1)},
        lambda: {"items": rand_schema(rng, depth + 1)},
        lambda: {"prefixItems": [rand_schema(rng, depth + 1)]},
        lambda: {"required": [rng.choice("abc")]},
        lambda: {"properties": {rng.choice("abc"): rand_schema(rng, depth + 1)}},
        lambda: {"properties": {"a": {}}, "additionalProperties": rand_schema(rng, depth + 1)},
        lambda: {"patternProperties": {"^[ab]": rand_schema(rng, depth + 1)}},
        lambda: {"propertyNames": {"maxLength": 1}},
        lambda: {"minProperties": rng.randrange(3)}, lambda: {"maxProperties": rng.randrange(3)},
        lambda: {"dependentRequired": {"a": ["b"]}},
        lambda: {"dependentSchemas": {"a": rand_schema(rng, depth + 1)}},
        lambda: {"not": rand_schema(rng, depth + 1)},
        lambda: {"anyOf": [rand_schema(rng, depth + 1), rand_schema(rng, depth + 1)]},
        lambda: {"oneOf": [rand_schema(rng, depth + 1), rand_schema(rng, depth + 1)]},
        lambda: {"allOf": [rand_schema(rng, depth + 1), rand_schema(rng, depth + 1)]},
        lambda: {"if": rand_schema(rng, depth + 1), "then": rand_schema(rng, depth + 1),
                 "else": rand_schema(rng, depth + 1)},
        lambda: {"$ref": "#/$defs/d"},
    ]
    s = {}
    for _ in range(1 if depth >= 2 else rng.randrange(1, 3)):
        s.update(rng.choice(kws[:-7] if depth >= 2 else kws)())
    return s


@pytest.fixture(scope="module", autouse=True)
def cli_built():
    assert os.path.exists(CLI), "build/gemmad-cli is missing (make all)"


@pytest.mark.parametrize("draft", list(DRAFTS), ids=["2020-12", "draft-07", "draft-04"])
def test_random_values_match_jsonschema(tmp_path, draft):
    rng = random.Random(20261206)
    cls = DRAFTS[draft]
    decided = accepted = 0
    for i in range(200):
        s = rand_schema(rng)
        while "draft-04" in draft and '"const"' in json.dumps(s):  # no such keyword in draft 4
            s = rand_schema(rng)
        x = rand_value(rng)
        defs = {"d": {"type": rng.choice(["string", "array", "object"])}}
        want = cls({"$defs": defs, "definitions": defs, **s}).is_valid(x)
        for negate in (0, 1):
            part = {"not": s} if negate else s
            schema = {"$schema": draft, "$defs": defs, "definitions": defs,
                      "allOf": [{"enum": [x]}, part]}
            expect = want != bool(negate)
            assert cls(schema).is_valid(x) == expect
            rc = run(tmp_path, schema, x)  # the schema's only candidate is x
            if rc == 2:
                continue
            decided += 1
            accepted += rc == 0
            assert (rc == 0) == expect, (f"{'accepted' if rc == 0 else 'rejected'} {json.dumps(x)}"
                                         f" against {json.dumps(schema)}")
    print(f"{draft}: {decided} of 400 decided, {accepted} accepted")
    assert decided >= 300 and 100 <= accepted <= decided - 100, (decided, accepted)


# (schema, accepted values, rejected values): named cases of what now compiles
CASES = [
    ({"enum": ["a", "b", "c"], "not": {"const": "b"}}, ["a", "c"], ["b"]),
    ({"type": "array", "uniqueItems": True, "enum": [[1, 2], [1, 1], [2, 2.0]]}, [[1, 2]],
     [[1, 1], [2, 2.0]]),
    ({"enum": [{"a": 1}, {"b": 2}], "required": ["a"]}, [{"a": 1}], [{"b": 2}]),
    ({"enum": [2.6, 100.0, 1e-05, -2.00001]}, [2.6, 100.0, 1e-05, -2.00001], [2.7]),
    ({"anyOf": [{"const": "x"}, {"enum": ["y", "z"]}], "not": {"enum": ["y"]}}, ["x", "z"], ["y"]),
    ({"enum": ["ab", "a1"], "pattern": "[0-9]"}, ["a1"], ["ab"]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_named_cases(tmp_path, case):
    schema, good, bad = CASES[case]
    for v in good:
        assert run(tmp_path, schema, v) == 0, (schema, v)
    for v in bad:
        assert run(tmp_path, schema, v) == 1, (schema, v)


def test_no_candidate_left_is_refused_with_the_reason(tmp_path):
    sf = tmp_path / "s.json"
    sf.write_text(json.dumps({"enum": ["a"], "not": {"const": "a"}}))
    r = subprocess.run([CLI, "grammar", "--schema", str(sf)], capture_output=True, text=True)
    assert r.returncode == 2 and NONE_LEFT in r.stderr


# ---- not rewritten as positive keywords (jschema_drop_not) -----------------------------

def rand_not(rng, depth=0):
    k = rng.randrange(5 if depth < 1 else 3)
    if k == 0:
        return {"type": rng.sample(["string", "number", "boolean", "null", "object", "array"],
                                   rng.randint(1, 3))}
    if k == 1:
        return {"required": rng.sample(["a", "b", "c"], rng.randint(1, 2))}
    if k == 2:
        return rng.choice([{}, True, False])
    return {rng.choice(["anyOf", "allOf"]): [rand_not(rng, depth + 1) for _ in range(2)]}


def test_not_forms_accept_only_valid(tmp_path):
    rng = random.Random(20261207)
    compiled = accepted = rejected = 0
    for i in range(120):
        s = {"not": rand_not(rng)}
        if rng.random() < 0.3:  # two nots intersected (jschema_merge)
            s = {"allOf": [{"not": rand_not(rng)}, {"not": rand_not(rng)}]}
        if rng.random() < 0.6:
            s.update({"type": "object", "properties": {"a": {"type": "integer"}, "b": {},
                                                       "c": {"type": "string"}}})
            if rng.random() < 0.3:
                s["required"] = ["a"]
        sf = tmp_path / "s.json"
        sf.write_text(json.dumps(s))
        r = subprocess.run([CLI, "grammar", "--schema", str(sf), "--spec-keys"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode in (0, 2), r.stderr
        if r.returncode:
            continue
        compiled += 1
        for _ in range(12):
            x = rand_value(rng)
            if isinstance(x, dict) and rng.random() < 0.5:
                x = {k: rng.choice([1, "s"]) for k in rng.sample(["a", "b", "c"], rng.randint(0, 3))}
            vf = tmp_path / "v.json"
            vf.write_text(json.dumps(x, ensure_ascii=False))
            r = subprocess.run([CLI, "grammar", "--schema", str(sf), "--check", str(vf),
                                "--spec-keys"], capture_output=True, text=True, timeout=30)
            assert r.returncode in (0, 1), r.stderr
            ok = jsonschema.Draft202012Validator(s).is_valid(x)
            if r.returncode == 0:
                accepted += 1
                assert ok, f"accepted invalid {json.dumps(x)} against {json.dumps(s)}"
            else:
                rejected += 1
                # with JSON Schema's meaning of objects (--spec-keys) nothing valid is lost
                # either: the rewriting is exact
                assert not ok, f"rejected valid {json.dumps(x)} against {json.dumps(s)}"
    print(f"not forms: {compiled} of 120 compiled, {accepted} accepted, {rejected} rejected")
    assert compiled >= 50 and accepted >= 100 and rejected >= 100, (compiled, accepted, rejected)
