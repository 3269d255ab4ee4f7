"""Structured output: a corpus of more than 100 JSON Schemas of varied shapes, each sent as
response_format json_schema; every output that ends normally must parse and validate
(jsonschema, with format checks), greedy and sampled, 16 requests at a time, and greedy
outputs must not depend on what else runs in the batch. Plus the grammar/json_schema
fields, json_object, finish_reason "length" inside a value, and the 400s of bad input.

The schemas keep their outputs short (small lengths, counts and ranges) so the suite stays
within a minute or two on two cores."""
import concurrent.futures as cf
import json
import random

import pytest

jsonschema = pytest.importorskip("jsonschema")

MAX_TOKENS = 64
PROMPT = "Reply with JSON only."


def _prim(rng):
    return rng.choice([
        {"type": "string", "maxLength": rng.randint(1, 6)},
        {"type": "integer", "minimum": rng.randint(-50, 0), "maximum": rng.randint(1, 300)},
        {"type": "boolean"},
        {"type": "null"},
        {"enum": ["red", "green", "blue"][: rng.randint(1, 3)]},
        {"type": "string", "enum": ["a", "bb", "ccc"]},
        {"const": rng.choice([1, "x", True, None])},
        {"type": "integer", "minimum": rng.randint(0, 9), "maximum": 9},
    ])


def corpus():
    """Deterministic list of (name, schema)."""
    out = []
    # primitives
    for lo, hi in [(0, 9), (-5, 5), (10, 99), (100, 250), (-1000, -10), (7, 7), (0, 1000),
                   (-1, 0), (95, 105), (1, 12)]:
        out.append((f"int_{lo}_{hi}", {"type": "integer", "minimum": lo, "maximum": hi}))
    out.append(("int_excl", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 5}))
    out.append(("int_min_only", {"type": "integer", "minimum": 42}))
    out.append(("int_max_only", {"type": "integer", "maximum": -3}))
    for n in [1, 3, 5, 8]:
        out.append((f"str_max{n}", {"type": "string", "maxLength": n}))
    out.append(("str_min2_max4", {"type": "string", "minLength": 2, "maxLength": 4}))
    out.append(("str_max32767", {"type": "string", "minLength": 3, "maxLength": 32767}))
    out.append(("int_mult7", {"type": "integer", "minimum": 0, "multipleOf": 7}))
    out.append(("int_mult4_range", {"type": "integer", "minimum": 16, "maximum": 100,
                                    "multipleOf": 4}))
    out.append(("enum_len", {"enum": ["a", "bbbb", "cc"], "maxLength": 2}))
    out.append(("str_pattern_len", {"type": "string", "minLength": 5, "maxLength": 40,
                                    "pattern": r"^\S+@\S+$"}))
    out.append(("obj_pattern_props", {"type": "object", "properties": {"name": {"type": "string"}},
                                      "patternProperties": {"^x_": {"type": "integer"}},
                                      "required": ["name"], "additionalProperties": False}))
    # a finite set beside keywords the generator alone refuses (server/jschema_value.c)
    out.append(("enum_not", {"enum": ["red", "green", "blue"], "not": {"const": "green"}}))
    out.append(("enum_unique_items", {"type": "array", "uniqueItems": True,
                                      "enum": [[1, 2], [3, 3], ["a", "b"]]}))
    out.append(("enum_if_then_else", {"enum": [1, 5, 12], "if": {"minimum": 10},
                                      "then": {"multipleOf": 4}, "else": {"maximum": 3}}))
    out.append(("obj_any_key_pattern", {"type": "object", "properties": {"id": {"type": "integer"}},
                                        "required": ["id"], "maxProperties": 3,
                                        "patternProperties": {".*": {"type": "integer",
                                                                     "minimum": 0,
                                                                     "maximum": 9}}}))
    out.append(("bool", {"type": "boolean"}))
    out.append(("null", {"type": "null"}))
    out.append(("enum_str", {"enum": ["yes", "no", "maybe"]}))
    out.append(("enum_mixed", {"enum": [1, "two", None, False, 3.5]}))
    out.append(("enum_obj", {"enum": [{"a": 1}, [1, 2]]}))
    out.append(("const_str", {"const": "fixed"}))
    out.append(("const_obj", {"const": {"k": [1, {"z": None}]}}))
    out.append(("union_types", {"type": ["integer", "boolean"], "maximum": 50, "minimum": 0}))
    out.append(("nullable_str", {"type": ["string", "null"], "maxLength": 3}))
    out.append(("openapi_nullable", {"type": "integer", "minimum": 0, "maximum": 5,
                                     "nullable": True}))
    # formats and patterns
    for f in ["date", "time", "date-time", "uuid", "email"]:
        out.append((f"fmt_{f}", {"type": "string", "format": f}))
    for i, p in enumerate([r"^[A-Z]{2}-\d{3}$", r"^(cat|dog)s?$", r"^\w{1,4}@x\.io$",
                           r"^[a-f0-9]{4}$", r"^\+?[0-9]{3}$", r"^(ab|cd){1,2}[.!]$",
                           r"^[^\s]{2}$", r"^a.c$", r"^([a-z.-]+)\.([a-z]{2,6})([/\w .-]*)*/?$"]):
        out.append((f"pattern_{i}", {"type": "string", "pattern": p}))
    # arrays
    for lo, hi in [(0, 2), (1, 3), (2, 2), (3, 4)]:
        out.append((f"arr_int_{lo}_{hi}", {"type": "array", "minItems": lo, "maxItems": hi,
                                           "items": {"type": "integer", "minimum": 0,
                                                     "maximum": 9}}))
    out.append(("arr_enum", {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3}))
    out.append(("tuple", {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0,
                                                            "maximum": 3}, {"type": "boolean"}],
                          "items": False}))
    out.append(("tuple_min", {"type": "array", "prefixItems": [{"const": "a"}, {"const": "b"}],
                              "minItems": 1, "maxItems": 2}))
    out.append(("tuple_rest", {"type": "array", "prefixItems": [{"type": "null"}],
                               "items": {"type": "boolean"}, "maxItems": 3}))
    out.append(("arr_arr", {"type": "array", "maxItems": 2, "items": {
        "type": "array", "maxItems": 2, "items": {"type": "integer", "minimum": 0,
                                                  "maximum": 5}}}))
    # objects
    out.append(("obj_simple", {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": False}))
    out.append(("obj_optional", {"type": "object", "properties": {
        "a": {"type": "boolean"}, "b": {"type": "integer", "minimum": 0, "maximum": 3},
        "c": {"enum": ["u", "v"]}}, "required": ["b"], "additionalProperties": False}))
    out.append(("obj_none_required", {"type": "object", "properties": {
        "x": {"type": "null"}, "y": {"const": 1}}, "additionalProperties": False}))
    out.append(("obj_nested", {"type": "object", "properties": {
        "inner": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0,
                                                        "maximum": 9}},
                  "required": ["v"], "additionalProperties": False}},
        "required": ["inner"], "additionalProperties": False}))
    out.append(("obj_map", {"type": "object", "additionalProperties": {"type": "integer",
                                                                       "minimum": 0,
                                                                       "maximum": 9},
                            "maxProperties_note": "none"}))
    out.append(("obj_required_only", {"type": "object", "required": ["k"]}))
    out.append(("obj_empty_closed", {"type": "object", "additionalProperties": False}))
    out.append(("obj_escaped_key", {"type": "object", "properties": {
        'q"uote': {"type": "boolean"}, "sl/ash~": {"type": "null"}},
        "required": ['q"uote', "sl/ash~"], "additionalProperties": False}))
    out.append(("obj_unicode", {"type": "object", "properties": {
        "café": {"enum": ["naïve", "日本"]}}, "required": ["café"],
        "additionalProperties": False}))
    # combinators
    out.append(("anyof", {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                    {"type": "string", "maxLength": 3}]}))
    out.append(("oneof_disjoint", {"oneOf": [{"type": "boolean"}, {"type": "null"}]}))
    out.append(("anyof_optional", {"anyOf": [{"type": "string", "maxLength": 4},
                                             {"type": "null"}], "title": "Maybe"}))
    out.append(("allof_merge", {"allOf": [
        {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "null"}}, "required": ["b"]}],
        "description": "merged"}))
    out.append(("allof_single", {"allOf": [{"type": "integer", "minimum": 1, "maximum": 2}]}))
    # refs
    defs = {"$defs": {"pos": {"type": "integer", "minimum": 1, "maximum": 9},
                      "pt": {"type": "object", "properties": {"x": {"$ref": "#/$defs/pos"},
                                                              "y": {"$ref": "#/$defs/pos"}},
                             "required": ["x", "y"], "additionalProperties": False}}}
    out.append(("ref_simple", dict(defs, **{"$ref": "#/$defs/pt"})))
    out.append(("ref_array", dict(defs, type="array", items={"$ref": "#/$defs/pt"},
                                  maxItems=2)))
    out.append(("ref_definitions", {"definitions": {"c": {"enum": ["on", "off"]}},
                                    "type": "object", "properties": {
                                        "state": {"$ref": "#/definitions/c"}},
                                    "required": ["state"], "additionalProperties": False}))
    out.append(("ref_recursive", {"$defs": {"node": {
        "type": "object", "properties": {
            "v": {"type": "integer", "minimum": 0, "maximum": 9},
            "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"}))
    out.append(("annotations", {"type": "object", "title": "T", "description": "d",
                                "$comment": "c", "examples": [{"a": 1}], "properties": {
                                    "a": {"type": "integer", "default": 3, "minimum": 0,
                                          "maximum": 5}},
                                "required": ["a"], "additionalProperties": False}))
    # generated objects and arrays of primitives
    rng = random.Random(1234)
    i = 0
    while len(out) < 112:
        kind = rng.choice(["obj", "obj", "arr", "nest"])
        if kind == "arr":
            s = {"type": "array", "items": _prim(rng), "maxItems": rng.randint(1, 3)}
        else:
            props = {f"k{j}": _prim(rng) for j in range(rng.randint(1, 4))}
            req = [k for k in props if rng.random() < 0.6]
            s = {"type": "object", "properties": props, "required": req,
                 "additionalProperties": False}
            if kind == "nest":
                s = {"type": "object", "properties": {"o": s, "n": _prim(rng)},
                     "required": ["o"], "additionalProperties": False}
        out.append((f"gen_{i}", s))
        i += 1
    return out


CORPUS = corpus()


def _validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _ask(server, model_id, name, schema, temperature, seed=None, **extra):
    body = {"model": model_id, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": MAX_TOKENS, "temperature": temperature,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "s", "schema": schema}}}
    if seed is not None:
        body["seed"] = seed
    body.update(extra)
    r = server.post("/v1/chat/completions", body, timeout=300)
    assert r.status_code == 200, (name, r.text)
    ch = r.json()["choices"][0]
    return ch["message"]["content"], ch["finish_reason"]


def _check_all(server, model_id, temperature, workers):
    jobs = {}
    with cf.ThreadPoolExecutor(workers) as ex:
        for k, (name, schema) in enumerate(CORPUS):
            jobs[name] = ex.submit(_ask, server, model_id, name, schema, temperature, 1000 + k)
    outs, lengths = {}, 0
    for name, schema in CORPUS:
        text, fin = jobs[name].result()
        outs[name] = text
        if fin == "length":
            lengths += 1
            continue
        assert fin == "stop", (name, fin, text)
        try:
            value = json.loads(text)
        except ValueError as e:
            pytest.fail(f"{name}: output does not parse ({e}): {text!r}")
        errors = sorted(_validator(schema).iter_errors(value), key=str)
        assert not errors, f"{name}: {text!r} does not validate: {errors[0].message}"
    # outputs that were cut by max_tokens may not validate; most must end normally
    assert lengths <= len(CORPUS) // 10, f"{lengths} of {len(CORPUS)} outputs hit max_tokens"
    return outs


def test_corpus_is_large_and_compiles():
    assert len(CORPUS) >= 100
    assert len({n for n, _ in CORPUS}) == len(CORPUS)
    for name, schema in CORPUS:
        jsonschema.validators.validator_for(schema).check_schema(schema)


def test_schemas_greedy_16_at_once_and_alone(server, model_id):
    outs = _check_all(server, model_id, 0.0, 16)
    # batch invariance: the same schema alone gives the same greedy output
    for name, schema in CORPUS[::11]:
        alone, _ = _ask(server, model_id, name, schema, 0.0)
        assert alone == outs[name], (name, alone, outs[name])


def test_greedy_shortcut_equals_the_mask(server, model_id):
    """A greedy constrained sequence takes the raw argmax when the grammar allows it, without
    building the mask (sched_gram_greedy); asking for logprobs sends every step through the
    mask instead. The tokens must be the same."""
    for name, schema in CORPUS[::9]:
        fast, _ = _ask(server, model_id, name, schema, 0.0)
        masked, _ = _ask(server, model_id, name, schema, 0.0, logprobs=True, top_logprobs=1)
        assert fast == masked, (name, fast, masked)


def test_schemas_sampled_16_at_once(server, model_id):
    outs = _check_all(server, model_id, 1.0, 16)
    # seeded sampling repeats
    name, schema = CORPUS[5]
    again, _ = _ask(server, model_id, name, schema, 1.0, 1005)
    assert again == outs[name]


def test_json_object_and_llama_fields(server, model_id):
    r = server.post("/v1/chat/completions", {
        "model": model_id, "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS, "temperature": 0,
        "response_format": {"type": "json_object"}})
    ch = r.json()["choices"][0]
    if ch["finish_reason"] == "stop":
        assert isinstance(json.loads(ch["message"]["content"]), dict)
    else:
        assert ch["message"]["content"].startswith("{")
    # llama.cpp's GBNF field, on completions
    r = server.post("/v1/completions", {"model": model_id, "prompt": "The answer is",
                                        "max_tokens": 16, "temperature": 0,
                                        "grammar": 'root ::= ("yes" | "no") "."'})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["text"] in ("yes.", "no.") and c["finish_reason"] == "stop", c
    # llama.cpp's top-level json_schema
    r = server.post("/v1/completions", {"model": model_id, "prompt": "Count:", "max_tokens": 16,
                                        "temperature": 0.7, "seed": 3,
                                        "json_schema": {"type": "integer", "minimum": 3,
                                                        "maximum": 7}})
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "stop" and 3 <= int(c["text"]) <= 7, c


def test_same_schema_reuses_the_compiled_grammar(server, model_id):
    """The second request with an identical schema hits the shared grammar cache and gets the
    same greedy output; a different schema misses."""
    schema = {"type": "object", "properties": {"cache_probe_k": {"type": "integer",
              "minimum": 0, "maximum": 9}}, "required": ["cache_probe_k"],
              "additionalProperties": False}
    body = {"model": model_id, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": MAX_TOKENS, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p",
                                                                       "schema": schema}}}

    def counts():
        m = server.metrics()
        return m["gemmad_grammar_cache_hits_total"], m["gemmad_grammar_cache_misses_total"]

    h0, m0 = counts()
    first = server.post("/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
    h1, m1 = counts()
    assert (h1, m1) == (h0, m0 + 1)
    second = server.post("/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
    h2, m2 = counts()
    assert (h2, m2) == (h1 + 1, m1)
    assert first == second
    schema["properties"]["cache_probe_k"]["maximum"] = 8
    server.post("/v1/chat/completions", body)
    assert counts() == (h2, m2 + 1)
    assert server.metrics()["gemmad_grammar_cache_entries"] >= 2


def test_length_inside_a_value(server, model_id):
    r = server.post("/v1/chat/completions", {
        "model": model_id, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 3,
        "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {
            "name": "s", "schema": {"type": "array", "minItems": 5, "items": {
                "type": "string", "minLength": 5}}}}})
    ch = r.json()["choices"][0]
    assert ch["finish_reason"] == "length"
    assert ch["message"]["content"].startswith("[")


def test_streamed_output_follows_the_grammar(server, model_id):
    import requests
    from conftest import sse_events
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                     "maximum": 99}},
              "required": ["n"], "additionalProperties": False}
    body = {"model": model_id, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s",
                                                                       "schema": schema}}}
    text, fin = "", None
    with requests.post(server.url + "/v1/chat/completions", json=body, stream=True,
                       timeout=120) as r:
        for d in sse_events(r):
            if not d or d == "[DONE]":
                continue
            ch = json.loads(d)["choices"][0]
            text += ch["delta"].get("content") or ""
            fin = ch["finish_reason"] or fin
    assert fin == "stop"
    jsonschema.validate(json.loads(text), schema)


BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "type": "object", "properties": {"a": {"not": {"minimum": 3}}}}}}},
     "response_format.json_schema.schema", ["'not'", "#/properties/a"]),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "$ref": "#/$defs/missing"}}}}, "response_format.json_schema.schema", ["$ref"]),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "type": "number", "multipleOf": 0.3}}}}, "response_format.json_schema.schema",
     ["'multipleOf'"]),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "type": "string", "pattern": "(a)\\1"}}}}, "response_format.json_schema.schema",
     ["pattern"]),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "type": "string", "format": "iri-reference"}}}}, "response_format.json_schema.schema",
     ["'format'"]),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "s"}}},
     "response_format.json_schema.schema", []),
    ({"response_format": {"type": "xml"}}, "response_format", []),
    ({"grammar": "root ::= foo"}, "grammar", ["foo"]),
    ({"grammar": "root ::= root \"a\" | \"b\""}, "grammar", ["left recursion"]),
    # 210 counts of 1,000 copies (counts past 1,024 are built from blocks and stay small)
    ({"grammar": "root ::= " + " ".join(['"b"{1000}'] * 210)}, "grammar", ["too large"]),
    ({"grammar": "root ::= a{0,5000}\na ::= \"x\"?"}, "grammar", ["budget"]),
    ({"grammar": "root ::= \"a\"", "json_schema": {"type": "null"}}, "json_schema", []),
    ({"grammar": "root ::= " + "(" * 20000 + "\"a\"" + ")" * 20000}, "grammar", ["nested"]),
    ({"json_schema": dict({"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"}
                                     for i in range(3000)}}, **{"$ref": "#/$defs/d0"})},
     "json_schema", ["nested"]),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
     "tools[0].function.name", []),
    ({"tools": [{"type": "function", "function": {"name": "f"}},
                {"type": "function", "function": {"name": "f"}}]},
     "tools[1].function.name", ["duplicate"]),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice", []),
    ({"tool_choice": "required"}, "tool_choice", []),
    ({"tool_choice": "sometimes", "tools": [{"type": "function", "function": {"name": "f"}}]},
     "tool_choice", []),
    ({"tools": [{"type": "function", "function": {"name": "f%d" % i}} for i in range(129)]},
     "tools", []),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"if": {}}}}}}]},
     "tools[0].function.parameters", ["'if'"]),
    ({"tools": "nope"}, "tools", []),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x",
                                                       "content": "r"}]},
     "messages[1].tool_call_id", []),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                         "function": {"name": "f",
                                                                      "arguments": "[1]"}}]}]},
     "messages[1].tool_calls[0]", []),
]


@pytest.mark.parametrize("extra,param,words", BAD, ids=[b[1] + str(i) for i, b in
                                                         enumerate(BAD)])
def test_bad_input_is_400(server, model_id, extra, param, words):
    body = {"model": model_id, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4}
    body.update(extra)
    r = server.post("/v1/chat/completions", body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    for w in words:
        assert w in err["message"], err


def test_tools_on_completions_is_400(server, model_id):
    r = server.post("/v1/completions", {"model": model_id, "prompt": "x", "max_tokens": 2,
                                        "tools": [{"type": "function",
                                                   "function": {"name": "f"}}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
