"""JSON Schema combinators with sibling keywords, allOf intersections and oneOf exclusivity
(server/jschema_merge.c), patternProperties, draft-4 tuples, pattern with length bounds and unknown formats,
through `gemmad-cli grammar --schema S --check I`.

The property that matters is soundness: whatever the grammar accepts must validate against
the schema (jsonschema decides). Named cases also pin what is accepted and refused, and a
seeded random corpus of combinator schemas and instances checks soundness more widely
(with a floor on how many instances were accepted, so the check cannot pass vacuously)."""
import json
import os
import random
import subprocess

import jsonschema
import pytest

from conftest import ROOT

CLI = os.environ.get("GEMMAD_CLI", os.path.join(ROOT, "build", "gemmad-cli"))


def compile_schema(tmp_path, schema, flags=()):
    sf = tmp_path / "s.json"
    sf.write_text(json.dumps(schema))
    r = subprocess.run([CLI, "grammar", "--schema", str(sf)] + list(flags), capture_output=True,
                       text=True, timeout=30)
    return r.returncode, r.stderr.strip(), sf


def accepts(sf, tmp_path, instance, flags=()):
    inf = tmp_path / "i.json"
    inf.write_text(json.dumps(instance))
    r = subprocess.run([CLI, "grammar", "--schema", str(sf), "--check", str(inf)] + list(flags),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


def valid(schema, instance):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema).is_valid(instance)


OBJ = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}

# (name, schema, accepted instances, rejected instances); instances list keys in the order
# the grammar writes them (the schema's).
CASES = [
    ("allof_addl_false_forbids_other_parts_keys",
     {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}},
                 "additionalProperties": False},
                {"properties": {"b": {"type": "integer"}}}]},
     [{"a": "x"}, {}], [{"a": "x", "b": 1}]),
    ("allof_same_key_intersected",
     {"allOf": [{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
                {"properties": {"n": {"maximum": 3}}, "required": ["n"]}]},
     [{"n": 1}, {"n": 3}], [{"n": 0}, {"n": 4}, {}]),
    ("ref_with_siblings",
     {"$defs": {"P": {"type": "object", "properties": {"a": {"type": "integer"}}}},
      "$ref": "#/$defs/P", "required": ["a"]},
     [{"a": 5}], [{}, {"a": "x"}]),
    ("anyof_with_siblings",
     {"type": "object", "properties": {"k": {"type": "string"}, "v": {"type": "integer"}},
      "anyOf": [{"required": ["k"]}, {"required": ["v"]}]},
     [{"k": "x"}, {"v": 1}, {"k": "x", "v": 1}], [{}]),
    ("oneof_required_sets_made_exclusive",
     {"type": "object",
      "properties": {"id": {"type": "integer"}, "pub": {"type": "integer"},
                     "key": {"type": "string"}},
      "oneOf": [{"required": ["id"]}, {"required": ["pub", "key"]}]},
     [{"id": 1}, {"pub": 2, "key": "k"}, {"id": 1, "pub": 2}],
     [{"id": 1, "pub": 2, "key": "k"}, {}, {"pub": 2}]),
    ("oneof_discriminated_branches",
     {"oneOf": [{"type": "object", "properties": {"t": {"const": "a"}, "x": {"type": "integer"}},
                 "required": ["t"]},
                {"type": "object", "properties": {"t": {"const": "b"}, "y": {"type": "string"}},
                 "required": ["t"]}]},
     [{"t": "a", "x": 1}, {"t": "b", "y": "s"}], [{"t": "c"}, {"t": "a", "y": "s"}]),
    ("oneof_optional_discriminator_made_required",
     {"type": "object", "oneOf": [
         {"properties": {"kind": {"enum": ["a"]}, "x": {"type": "integer"}}},
         {"properties": {"kind": {"enum": ["b", "c"]}, "x": {"type": "string"}}}]},
     [{"kind": "a", "x": 1}, {"kind": "c", "x": "s"}, {"kind": "b"}], [{}, {"x": 1}]),
    ("type_with_oneof_of_types",
     {"type": ["string", "integer", "null"], "oneOf": [{"type": "string", "maxLength": 2},
                                                     {"type": "integer"}]},
     ["ab", 7], [None, "abc", 1.5]),
    ("pattern_properties_one_pattern",
     {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}},
      "additionalProperties": False},
     [{"ab": 1, "c": 2}, {}], [{"ab": "x"}, {"A": 1}, {"a1": 1}]),
    ("draft4_tuple_items_additional_items",
     {"$schema": "http://json-schema.org/draft-07/schema#",
      "type": "array", "items": [{"type": "integer"}, {"type": "string"}],
      "additionalItems": {"type": "boolean"}},
     [[1, "a"], [1], [1, "a", True, False]], [["a"], [1, "a", 2]]),
    ("unknown_format_is_an_annotation", {"type": "string", "format": "file-path"},
     ["a/b", ""], [1]),
    ("pattern_with_length_bounds_the_free_item",
     {"type": "string", "pattern": "^mystring-[a-zA-Z0-9]+$", "minLength": 10, "maxLength": 12},
     ["mystring-a", "mystring-abc"], ["mystring-", "mystring-abcd", "xmystring-ab"]),
    ("unanchored_pattern_with_length",
     {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_]*", "minLength": 2, "maxLength": 4},
     ["ab", "a_:!"], ["a", "abcde", "1abc"]),
    ("pattern_length_two_free_items_capped",
     {"type": "string", "pattern": "^a+b+$", "maxLength": 5},
     ["ab", "aabb"], ["aaabbb", "abc", ""]),
    # two free items, a length range: b* takes the count under which a{1,2} fits (a
    # subset: a{1,2} b{2}); what it writes is valid, what it leaves out is only narrower
    ("pattern_length_two_free_items_narrowed",
     {"type": "string", "pattern": "^a+b*$", "minLength": 3, "maxLength": 5},
     ["abb", "aabb"], ["ab", "aaabbbb", "ba", "abbbbbb"]),
    ("pattern_whose_lengths_already_fit",
     {"type": "string", "pattern": "^[0-9]{4}$", "minLength": 4, "maxLength": 4},
     ["2024"], ["202", "20245"]),
    ("other_keys_after_declared_ones_when_allowed",
     {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}},
      "additionalProperties": {"type": "integer"}},
     [{"a": 1, "ab": "x", "b": 2}, {"a": 1, "abc": 3}, {"b": 1}],
     [{"a": 1, "ab": 3}, {"a": 1, "b": "s"}, {"ab": "x", "a": 1}]),
    ("format_of_bounded_length_within_max_length",
     {"type": "string", "format": "email", "maxLength": 255}, ["a.b@example.com"], ["ab"]),
    ("optional_property_no_value_satisfies_is_left_out",
     {"type": "object", "properties": {"a": {"type": "object", "enum": ["x"]},
                                       "b": {"type": "integer"}}},
     [{"b": 1}, {}], [{"a": "x", "b": 1}, {"a": {}}]),
    ("anyof_branch_no_value_satisfies_is_left_out",
     {"anyOf": [{"type": "array", "enum": ["x"]}, {"type": "integer"}]}, [3], ["x", []]),
    ("nullable_meets_a_type",
     {"allOf": [{"type": "string", "nullable": True}, {"type": ["string", "integer"]}]},
     ["s"], [None, 1]),
]

REFUSED = [
    ("oneof_overlapping", {"oneOf": [{"type": "number"}, {"type": "integer"}]}, "oneOf"),
    ("oneof_overlap_with_siblings",
     {"type": "object", "properties": {"a": {"type": "integer"}},
      "oneOf": [{"properties": {"a": {"minimum": 1}}}, {"properties": {"a": {"maximum": 5}}}]},
     "oneOf"),
    ("two_patterns", {"allOf": [{"type": "string", "pattern": "^a"},
                                {"type": "string", "pattern": "b$"}]}, "pattern"),
    ("required_property_no_value_satisfies",
     {"type": "object", "properties": {"a": {"type": "object", "enum": ["x"]}},
      "required": ["a"]}, "enum"),
    ("no_common_type", {"allOf": [{"type": "string"}, {"type": "integer"}]}, "type"),
    ("pattern_properties_meet_other_object_keywords",
     {"allOf": [{"patternProperties": {"^a": {"type": "integer"}}},
                {"additionalProperties": {"type": "string"}}]}, "patternProperties"),
    ("required_but_forbidden",
     {"allOf": [{"type": "object", "properties": {"a": {}}, "additionalProperties": False},
                {"required": ["b"]}]}, "b"),
]


@pytest.fixture(scope="module", autouse=True)
def cli_built():
    assert os.path.exists(CLI), "build/gemmad-cli is missing (make all)"


@pytest.mark.parametrize("name,schema,good,bad", CASES, ids=[c[0] for c in CASES])
def test_named_cases(tmp_path, name, schema, good, bad):
    rc, err, sf = compile_schema(tmp_path, schema)
    assert rc == 0, err
    for inst in good:
        assert valid(schema, inst), f"fixture error: {inst} is not valid"
        assert accepts(sf, tmp_path, inst), f"{name}: valid {inst} rejected"
    for inst in bad:
        assert not accepts(sf, tmp_path, inst), f"{name}: {inst} accepted"


def test_nullable_in_a_merge_allows_null_only_where_both_do(tmp_path):
    # OpenAPI's nullable (jsonschema does not know it): null is allowed when every part is
    schema = {"allOf": [{"type": "string", "nullable": True}, {"type": ["string", "null"]}]}
    rc, err, sf = compile_schema(tmp_path, schema)
    assert rc == 0, err
    assert accepts(sf, tmp_path, None) and accepts(sf, tmp_path, "s")
    assert not accepts(sf, tmp_path, 1)


@pytest.mark.parametrize("name,schema,word", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_with_a_reason(tmp_path, name, schema, word):
    rc, err, _ = compile_schema(tmp_path, schema)
    assert rc == 2, f"{name} compiled"
    assert ("unsupported keyword combination" in err or "no value" in err) and word in err, err


# ---- a seeded corpus: accepted => valid --------------------------------------------------

KEYS = ["a", "b", "c"]
FLOOR_COMPILED, FLOOR_ACCEPTED = 50, 30
SCALARS = [0, 1, 5, -3, 2.5, "x", "abcd", "", True, False, None]


def rand_leaf(rng):
    t = rng.choice(["integer", "number", "string", "boolean", "null", None])
    s = {} if t is None else {"type": t}
    if t == "integer" and rng.random() < 0.5:
        s[rng.choice(["minimum", "maximum"])] = rng.choice([0, 1, 3])
    if t == "string" and rng.random() < 0.4:
        s["maxLength"] = rng.choice([1, 2, 4])
    if rng.random() < 0.2:
        s["enum"] = rng.sample(SCALARS, 3)
    return s


def rand_obj(rng):
    s = {"type": "object"} if rng.random() < 0.7 else {}
    if rng.random() < 0.8:
        s["properties"] = {k: rand_leaf(rng) for k in rng.sample(KEYS, rng.randint(1, 3))}
    if rng.random() < 0.5:
        s["required"] = rng.sample(KEYS, rng.randint(1, 2))
    if rng.random() < 0.3:
        s["additionalProperties"] = rng.choice([False, True, rand_leaf(rng)])
    if rng.random() < 0.15:
        s[rng.choice(["minProperties", "maxProperties"])] = rng.choice([1, 2, 3])
    return s


def rand_schema(rng):
    kind = rng.choice(["allOf", "anyOf", "oneOf", "siblings_anyOf", "siblings_oneOf",
                       "oneOf_required", "scalar_oneOf", "oneOf_discriminator"])
    if kind == "oneOf_discriminator":
        branches = []
        for v in rng.sample(SCALARS[:8], rng.randint(2, 3)):
            b = rand_obj(rng)
            b.setdefault("properties", {})["a"] = rng.choice([{"const": v}, {"enum": [v]}])
            branches.append(b)
        return {"type": "object", "oneOf": branches}
    if kind == "allOf":
        return {"allOf": [rand_obj(rng) for _ in range(rng.randint(2, 3))]}
    if kind in ("anyOf", "oneOf"):
        return dict(rand_obj(rng), **{kind: [rand_obj(rng) for _ in range(rng.randint(2, 3))]})
    if kind.startswith("siblings"):
        base = rand_obj(rng)
        kw = kind.split("_")[1]
        base[kw] = [{"required": rng.sample(KEYS, rng.randint(1, 2))},
                    {"properties": {rng.choice(KEYS): rand_leaf(rng)}}]
        return base
    if kind == "oneOf_required":
        s = {"type": "object", "properties": {k: rand_leaf(rng) for k in KEYS},
             "oneOf": [{"required": rng.sample(KEYS, rng.randint(1, 2))} for _ in range(2)]}
        return s
    return {"oneOf": [rand_leaf(rng) for _ in range(rng.randint(2, 3))]}


def _props(schema):
    """Property schemas named anywhere near the top (parts and branches included)."""
    out = {}
    for part in [schema] + schema.get("allOf", []) + schema.get("anyOf", []) + \
            schema.get("oneOf", []):
        for k, v in part.get("properties", {}).items():
            out.setdefault(k, v)
    return out


def rand_value(rng, leaf):
    t = leaf.get("type") if isinstance(leaf, dict) else None
    fits = [v for v in SCALARS if t is None or
            (t == "integer" and isinstance(v, int) and not isinstance(v, bool)) or
            (t == "number" and isinstance(v, (int, float)) and not isinstance(v, bool)) or
            (t == "string" and isinstance(v, str)) or (t == "boolean" and isinstance(v, bool)) or
            (t == "null" and v is None)]
    return rng.choice(fits if fits and rng.random() < 0.75 else SCALARS)


def rand_instance(rng, schema):
    if rng.random() < 0.15:
        return rng.choice(SCALARS)
    props = _props(schema)
    order = list(schema.get("properties", {})) + [k for k in props if k not in
                                                  schema.get("properties", {})] + KEYS + ["d"]
    keys = []
    for k in order:
        if k not in keys and rng.random() < 0.6:
            keys.append(k)
    if rng.random() < 0.3:  # out of the schema's order (--spec-keys allows any)
        rng.shuffle(keys)
    return {k: rand_value(rng, props.get(k, {})) for k in keys}


@pytest.mark.parametrize("flags", [(), ("--spec-keys",)], ids=["declared_keys", "spec_keys"])
def test_random_corpus_accepts_only_valid(tmp_path, flags):
    rng = random.Random(20261205)
    compiled = accepted = 0
    for i in range(300):
        schema = rand_schema(rng)
        rc, err, sf = compile_schema(tmp_path, schema, flags)
        assert rc in (0, 2), err
        if rc:
            continue
        compiled += 1
        for _ in range(10):
            inst = rand_instance(rng, schema)
            if accepts(sf, tmp_path, inst, flags):
                accepted += 1
                assert valid(schema, inst), (f"accepted an invalid instance\nschema: "
                                             f"{json.dumps(schema)}\ninstance: {json.dumps(inst)}")
    print(f"random corpus: {compiled} of 300 schemas compiled, {accepted} instances accepted")
    # floors well below what this seed gives, so the check cannot pass with nothing checked
    assert compiled >= FLOOR_COMPILED, compiled
    assert accepted >= FLOOR_ACCEPTED, accepted
