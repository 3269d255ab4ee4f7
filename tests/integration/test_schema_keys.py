"""JSON Schema's meaning of an absent additionalProperties (`gemmad-cli grammar --spec-keys`,
the server's json_schema_extra_keys) and the schema features MaskBench showed missing, through
`gemmad-cli grammar --schema S --check I` (helpers and soundness rule of test_schema_merge.py:
whatever is accepted must validate)."""
import subprocess

import pytest

from test_schema_merge import CLI, accepts, cli_built, compile_schema, valid  # noqa: F401

SPEC = ("--spec-keys",)
OBJ = {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}},
       "required": ["a"]}


def check(tmp_path, schema, good, bad, flags=SPEC):
    rc, err, sf = compile_schema(tmp_path, schema, flags)
    assert rc == 0, err
    for inst in good:
        assert valid(schema, inst), f"fixture error: {inst} is not valid"
        assert accepts(sf, tmp_path, inst, flags), f"valid {inst} rejected"
    for inst in bad:
        assert not accepts(sf, tmp_path, inst, flags), f"{inst} accepted"


def test_declared_keys_only_by_default(tmp_path):
    rc, err, sf = compile_schema(tmp_path, OBJ)
    assert rc == 0, err
    assert accepts(sf, tmp_path, {"a": 1, "ab": "x"})
    assert not accepts(sf, tmp_path, {"a": 1, "b": 2}), "an undeclared key was generated"


def test_spec_keys_lets_other_keys_follow(tmp_path):
    check(tmp_path, OBJ,
          [{"a": 1, "b": 2}, {"a": 1, "ab": "x", "abc": [1], "": None}, {"a": 1}],
          # a declared key's value is still checked, also when written after the others
          [{"a": "x", "b": 2}, {"a": 1, "b": 2, "ab": 3}, {"b": 2}])
    # no declared key a second time among the others
    rc, err, sf = compile_schema(tmp_path, OBJ, SPEC)
    inf = tmp_path / "dup.json"
    inf.write_text('{"a": 1, "b": 2, "a": "x"}')
    r = subprocess.run([CLI, "grammar", "--schema", str(sf), "--check", str(inf), "--spec-keys"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr


def test_spec_keys_keeps_explicit_false(tmp_path):
    check(tmp_path, dict(OBJ, additionalProperties=False), [{"a": 1}], [{"a": 1, "b": 2}])


def test_spec_keys_oneof_open_branches_made_exclusive(tmp_path):
    # with other keys allowed, branch A could write B's required key "b" (and match both);
    # A never writes it, so the grammar keeps "exactly one"
    schema = {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                         "required": ["a"]},
                        {"type": "object", "properties": {"b": {"type": "string"}},
                         "required": ["b"]}]}
    check(tmp_path, schema, [{"a": 1}, {"a": 1, "c": 2}, {"b": "x"}, {"b": "x", "c": 1}],
          [{"a": 1, "b": "x"}, {"b": "x", "a": 1}, {}])


def test_oneof_required_key_the_other_branch_forbids(tmp_path):
    # B requires "c", which A (additionalProperties false) forbids: exclusive as written
    schema = {"oneOf": [{"type": "object", "properties": {"p": {"type": "string"},
                                                          "n": {"type": "string"}},
                         "required": ["p", "n"], "additionalProperties": False},
                        {"type": "object", "properties": {"p": {"type": "string"},
                                                          "n": {"type": "string"},
                                                          "c": {"type": "string"}},
                         "required": ["p", "n", "c"], "additionalProperties": False}]}
    for flags in ((), SPEC):
        check(tmp_path, schema, [{"p": "x", "n": "y"}, {"p": "x", "n": "y", "c": "z"}],
              [{"p": "x"}], flags)


def test_oneof_object_or_string_branches_not_told_apart_by_keys(tmp_path):
    # both accept strings: the required keys that tell objects apart do not make them
    # exclusive
    schema = {"oneOf": [{"type": ["object", "string"], "required": ["a"],
                         "properties": {"a": {}}, "additionalProperties": False},
                        {"type": ["object", "string"], "required": ["b"],
                         "properties": {"b": {}}, "additionalProperties": False}]}
    rc, err, _ = compile_schema(tmp_path, schema, SPEC)
    assert rc == 2 and "oneOf" in err, err


def test_bounded_number_written_with_zero_fraction(tmp_path):
    # 2048.0 is the integer 2048 (MaskBench's instances write many numbers so)
    schema = {"type": "number", "minimum": 1, "maximum": 5}
    for flags in ((), SPEC):
        rc, err, sf = compile_schema(tmp_path, schema, flags)
        assert rc == 0, err
        for text, ok in [("1.0", True), ("5.00", True), ("3.5", True), ("5.01", False),
                         ("0.0", False), ("-0.0", False), ("6.0", False)]:
            inf = tmp_path / "n.json"
            inf.write_text(text)
            r = subprocess.run([CLI, "grammar", "--schema", str(sf), "--check", str(inf)],
                               capture_output=True, text=True, timeout=30)
            assert (r.returncode == 0) == ok, text


def test_spec_keys_any_order(tmp_path):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                               "c": {"type": "boolean"}},
              "required": ["a", "c"]}
    check(tmp_path, schema,
          [{"a": 1, "c": True}, {"c": True, "a": 1}, {"b": "x", "c": True, "z": 1, "a": 1}],
          [{"c": True}, {"a": "x", "c": True}, {"b": 1, "a": 1, "c": True}, {}])
    rc, err, sf = compile_schema(tmp_path, schema, SPEC)
    for text in ['{"a": 1, "c": true, "a": 2}', '{"a": 1, "b": "x", "c": true, "b": "y"}']:
        inf = tmp_path / "dup.json"
        inf.write_text(text)
        r = subprocess.run([CLI, "grammar", "--schema", str(sf), "--check", str(inf),
                            "--spec-keys"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, text  # a declared key twice
    # by default the schema's order
    rc, err, sf = compile_schema(tmp_path, schema)
    assert accepts(sf, tmp_path, {"a": 1, "c": True})
    assert not accepts(sf, tmp_path, {"c": True, "a": 1})


def test_spec_keys_any_order_falls_back_on_many_keys(tmp_path):
    # 2^n rules: more than 10 declared keys keep the schema's order, still sound
    props = {f"k{i:02d}": {"type": "integer"} for i in range(12)}
    schema = {"type": "object", "properties": props, "required": ["k00", "k11"]}
    inst = {k: 1 for k in props}
    check(tmp_path, schema, [inst, {"k00": 1, "k11": 2, "zz": 3}],
          [dict(reversed(list(inst.items()))), {"k00": 1}])


def test_oneof_untyped_property_not_exclusive_of_a_typed_one(tmp_path):
    # {} (any value) and {"type": "number"} share values: c does not tell the branches
    # apart, a does (each branch is made to require it)
    schema = {"type": "object", "oneOf": [
        {"type": "object", "properties": {"c": {}, "b": {}, "a": {"enum": [2.5]}},
         "additionalProperties": False},
        {"type": "object", "properties": {"b": {}, "c": {"type": "number"}, "a": {"enum": ["x"]}},
         "additionalProperties": True}]}
    for flags in ((), SPEC):
        check(tmp_path, schema, [{"c": 1, "b": "", "a": 2.5}, {"b": "", "c": 1, "a": "x"}],
              [{"c": -3, "b": ""}, {"b": ""}], flags)


@pytest.mark.parametrize("flags", [(), SPEC], ids=["declared_keys", "spec_keys"])
def test_min_max_properties(tmp_path, flags):
    two = {"a": {"type": "integer"}, "b": {"type": "integer"}}
    check(tmp_path, {"type": "object", "minProperties": 1}, [{"x": 1}, {"x": 1, "y": 2}], [{}],
          flags)
    check(tmp_path, {"type": "object", "properties": two, "minProperties": 1},
          [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}], [{}], flags)
    check(tmp_path, {"type": "object", "properties": two, "required": ["a"], "minProperties": 1},
          [{"a": 1}], [{}], flags)
    check(tmp_path, {"type": "object", "maxProperties": 2}, [{}, {"x": 1}, {"x": 1, "y": 2}],
          [{"x": 1, "y": 2, "z": 3}], flags)
    # declared keys within the bound: no others are written beside them
    check(tmp_path, {"type": "object", "properties": two, "maxProperties": 2},
          [{}, {"a": 1}, {"a": 1, "b": 2}], [{"a": 1, "c": 2}, {"a": 1, "b": 2, "c": 3}], flags)


@pytest.mark.parametrize("schema,word", [
    ({"type": "object", "minProperties": 2}, "minProperties"),
    ({"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "maxProperties": 2},
     "maxProperties"),
    ({"type": "object", "additionalProperties": False, "minProperties": 1}, "minProperties"),
])
def test_min_max_properties_refused(tmp_path, schema, word):
    rc, err, _ = compile_schema(tmp_path, schema, SPEC)
    assert rc == 2 and word in err, err


def test_number_bounds_with_fractions(tmp_path):
    check(tmp_path, {"type": "number", "minimum": 0.5, "maximum": 99.99},
          [0.5, 0.51, 0.5001, 1, 2.0, 99.99, 99.9, 50.123], [0.49, 0.4999, 99.991, 100, 0, -1],
          ())
    check(tmp_path, {"type": "number", "exclusiveMinimum": -459.67, "exclusiveMaximum": -0.25},
          [-459.669, -459, -1, -0.26, -0.250001], [-459.67, -459.671, -460, -0.25, -0.2, 0],
          ())
    rc, err, _ = compile_schema(tmp_path, {"type": "number", "minimum": 0.2, "maximum": 0.7})
    assert rc == 2 and "minimum" in err, err  # one unit interval: refused


def test_number_bounds_random(tmp_path):
    # accepted => within the bounds, over random decimal bounds and numbers near them
    import random
    rng = random.Random(7)
    accepted = 0
    for _ in range(25):
        lo = round(rng.uniform(-20, 20), rng.choice([0, 1, 2, 3]))
        hi = round(lo + rng.uniform(0, 30), rng.choice([0, 1, 2]))
        schema = {"type": "number", rng.choice(["minimum", "exclusiveMinimum"]): lo,
                  rng.choice(["maximum", "exclusiveMaximum"]): hi}
        rc, err, sf = compile_schema(tmp_path, schema)
        if rc:
            continue
        for _ in range(8):
            x = round(rng.choice([lo, hi]) + rng.choice([-1, 1]) * rng.choice([0, 0.001, 0.01, 0.5, 1]),
                      rng.choice([0, 1, 2, 3, 4]))
            if accepts(sf, tmp_path, x):
                accepted += 1
                assert valid(schema, x), f"{x} accepted for {schema}"
    assert accepted >= 20, accepted


def test_pattern_with_length_capped(tmp_path):
    # several free repeats: each repeat is capped so that every match fits maxLength
    schema = {"type": "string", "pattern": "^([\\w\\/-]|[\\w-][\\w\\/-]*[\\w-])$", "maxLength": 5}
    check(tmp_path, schema, ["a", "ab", "a/b", "abcde"], ["abcdef", "/a", "a/", ""], ())
    schema = {"type": "string", "pattern": "^[a-z]+:[a-z]*:[0-9]+$", "minLength": 3,
              "maxLength": 9}
    import random
    rng = random.Random(3)
    rc, err, sf = compile_schema(tmp_path, schema)
    assert rc == 0, err
    accepted = 0
    for _ in range(60):
        inst = ("a" * rng.randint(0, 5) + ":" + "b" * rng.randint(0, 4) + ":" +
                "1" * rng.randint(0, 4))
        if accepts(sf, tmp_path, inst):
            accepted += 1
            assert valid(schema, inst), inst
    assert accepted >= 3, accepted
    # a match shorter than minLength cannot be capped away: refused
    rc, err, _ = compile_schema(tmp_path, {"type": "string", "pattern": "^(a+|b+)$",
                                           "minLength": 2, "maxLength": 3})
    assert rc == 2 and "minLength/maxLength" in err, err


def test_dependencies_with_any_order(tmp_path):
    schema = {"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
              "dependencies": {"a": ["b"]}}
    check(tmp_path, schema, [{}, {"a": 1, "b": 2}, {"b": 2, "a": 1}, {"b": 1}, {"c": 1, "z": 1}],
          [{"a": 1}, {"c": 1, "a": 1}])
    # a dependency on a key that is never written: the key depending on it is never written
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "dependencies": {"a": ["zz"]},
              "additionalProperties": False}
    check(tmp_path, schema, [{}, {"b": 1}], [{"a": 1}])
    for flags, sch in [((), schema),  # the schema's order: refused
                       (SPEC, {"type": "object", "properties": {"a": {}},
                               "dependencies": {"a": {"required": ["b"]}}})]:
        rc, err, _ = compile_schema(tmp_path, sch, flags)
        assert rc == 2 and "dependencies" in err, err


def test_multiple_of_powers_of_ten(tmp_path):
    # a decimal with at most d decimals is a multiple of 10^-d (decimal arithmetic, as the
    # spec means it; float-based validators may differ on values like 19.99 / 0.01, so the
    # instances here avoid them)
    check(tmp_path, {"type": "number", "multipleOf": 0.01}, [1, 2.5, 0.25, 1.5, -3.75],
          [0.125, 1.001], ())
    check(tmp_path, {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 10},
          [0, 2.5, 10, 0.25], [0.125, 10.25, -0.5], ())
    check(tmp_path, {"type": "number", "multipleOf": 1, "minimum": 0}, [0, 3], [2.5, -1], ())
    check(tmp_path, {"type": "integer", "multipleOf": 1}, [3, -4], [2.5], ())
    # a whole multipleOf: the remainder automaton, or the multiples within the bounds
    check(tmp_path, {"type": "integer", "multipleOf": 5}, [0, 5, -10, 1000], [3, 7, 2.5], ())
    check(tmp_path, {"type": "integer", "multipleOf": 12, "minimum": 1}, [12, 120], [0, 6], ())
    check(tmp_path, {"type": "number", "multipleOf": 3, "minimum": -6, "maximum": 6},
          [-6, 0, 3, 6], [9, 1, -9], ())
    for schema, word in [({"type": "integer", "multipleOf": 500}, "multipleOf"),
                         ({"multipleOf": 0.3}, "multipleOf"),
                         ({"type": "integer", "multipleOf": 5, "minimum": 7}, "multipleOf"),
                         ({"type": "number", "multipleOf": 0.01, "minimum": 0.5}, "multipleOf")]:
        rc, err, _ = compile_schema(tmp_path, schema)
        assert rc == 2 and word in err, err
