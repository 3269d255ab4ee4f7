"""Gemma 4's native tool calls (docs/TOOLS.md, "Tool calling with Gemma 4") on the synthetic
Gemma 4 model of tests/fixtures/synthetic/gen_synthetic.py, whose vocabulary has Gemma 4's
turn and tool tokens: forced calls (tool_choice required and named) whose arguments are JSON
valid against the tool's schema, the same call streamed and not, and a conversation with a
call and its result rendered in the native format (the prompt's token count against the
expected text tokenized by /tokenize).
"""
import json
import os
import sys

import jsonschema
import pytest
import requests

from conftest import ROOT, sse_events

sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "synthetic"))
import gen_synthetic  # noqa: E402

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "maxLength": 12},
                         "days": {"type": "integer", "minimum": 1, "maximum": 7},
                         "unit": {"enum": ["c", "f"]},
                         "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
          "required": ["city", "days"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "description": "Weather of a city",
                                           "parameters": SCHEMA}},
         {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}]
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def g4(tmp_path_factory):
    from conftest import Server
    path = str(tmp_path_factory.mktemp("g4") / "gemma4-f32.gguf")
    gen_synthetic.write_model("gemma4", "f32", path)
    s = Server(["--model", path])
    yield s
    s.stop()


def chat(s, **body):
    r = requests.post(s.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("choice", ["required",
                                    {"type": "function", "function": {"name": "get_weather"}}])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_forced_call_valid_and_streamed_alike(g4, choice, seed):
    body = dict(messages=MSGS, tools=TOOLS, tool_choice=choice, seed=seed, temperature=1.0,
                max_tokens=300, parallel_tool_calls=False)
    j = chat(g4, **body)
    ch = j["choices"][0]
    assert ch["finish_reason"] == "tool_calls", ch
    assert ch["message"]["content"] is None
    calls = ch["message"]["tool_calls"]
    assert len(calls) == 1
    fn = calls[0]["function"]
    if isinstance(choice, dict):
        assert fn["name"] == "get_weather"
    args = json.loads(fn["arguments"])
    schema = SCHEMA if fn["name"] == "get_weather" else {"type": "object"}
    jsonschema.validate(args, schema)
    # streamed: the same call (first delta index/id/type/name, then the arguments)
    r = requests.post(g4.url + "/v1/chat/completions", json=dict(body, stream=True),
                      stream=True, timeout=120)
    assert r.status_code == 200
    name, frags, first, finish = None, [], None, None
    for ev in sse_events(r):
        if ev == "[DONE]":
            break
        c = json.loads(ev)["choices"]
        if not c:
            continue
        d = c[0]["delta"]
        finish = c[0].get("finish_reason") or finish
        assert not d.get("content")
        for tc in d.get("tool_calls", []):
            assert tc["index"] == 0
            if first is None:
                first = tc
                assert tc["type"] == "function" and tc["id"] and tc["function"]["name"]
                name = tc["function"]["name"]
            frags.append(tc["function"].get("arguments", ""))
    assert finish == "tool_calls"
    assert name == fn["name"]
    assert json.loads("".join(frags)) == args


def note(v):
    """Gemma 4's notation of a JSON value (keys sorted, strings between <|"|>)."""
    q = '<|"|>'
    if isinstance(v, str):
        return q + v + q
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "{" + ",".join(k + ":" + note(v[k]) for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(note(x) for x in v) + "]"
    return json.dumps(v)


def upper_types(v):
    if isinstance(v, dict):
        return {k: (x.upper() if k == "type" and isinstance(x, str) else upper_types(x))
                for k, x in v.items()}
    if isinstance(v, list):
        return [upper_types(x) for x in v]
    return v


def ntokens(s, text):
    r = requests.post(s.url + "/tokenize", json={"content": text, "parse_special": True},
                      timeout=30)
    assert r.status_code == 200, r.text
    return len(r.json()["tokens"])


def test_conversation_with_result_renders_native(g4):
    args = {"city": "Paris", "days": 2}
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'}]
    j = chat(g4, messages=msgs, tools=TOOLS, tool_choice="none", max_tokens=1, seed=1)
    got = j["usage"]["prompt_tokens"]
    # tool_choice none: no declarations, the call and its result in the model turn
    call = "<|tool_call>call:get_weather" + note(args) + "<tool_call|>"
    resp = "<|tool_response>response:get_weather{value:" + note('{"temp": 21}') + "}<tool_response|>"
    head = "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nWeather in Paris?<turn|>\n"
    gen = "<|turn>model\n<|channel>thought\n<channel|>"
    want = head + "<|turn>model\n" + call + resp + "<turn|>\n" + gen
    assert got == ntokens(g4, want), (got, want)
    # the same with tools declared (auto): the declarations end the system turn
    decl = "".join("<|tool>declaration:" + t["function"]["name"] + "{" +
                   ("description:" + note(t["function"]["description"]) + ","
                    if "description" in t["function"] else "") +
                   "parameters:" + note(upper_types(t["function"]["parameters"])) + "}<tool|>"
                   for t in TOOLS)
    j = chat(g4, messages=msgs, tools=TOOLS, max_tokens=1, seed=1)
    want2 = want.replace("Be brief.", "Be brief." + decl)
    assert j["usage"]["prompt_tokens"] == ntokens(g4, want2)
    # the count tells renderings apart: the Gemma 3 text format would be far longer
    assert ntokens(g4, want2) != ntokens(g4, want)
    assert ntokens(g4, want) != ntokens(g4, want.replace("<|tool_call>", "```tool_call\n"))


def test_auto_may_call_and_text_has_no_markup(g4):
    for seed in range(1, 6):
        j = chat(g4, messages=MSGS, tools=TOOLS, seed=seed, temperature=1.0, max_tokens=60)
        m = j["choices"][0]["message"]
        for c in m.get("tool_calls") or []:
            a = json.loads(c["function"]["arguments"])
            jsonschema.validate(a, SCHEMA if c["function"]["name"] == "get_weather"
                                else {"type": "object"})
        assert not (m["content"] or "").count("call:get_weather{")


def test_responses_api_forced_call(g4):
    tools = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
    r = requests.post(g4.url + "/v1/responses", json={
        "input": "Weather in Paris?", "tools": tools, "tool_choice": "required", "seed": 4,
        "temperature": 1.0, "max_output_tokens": 300}, timeout=120)
    assert r.status_code == 200, r.text
    items = [o for o in r.json()["output"] if o["type"] == "function_call"]
    assert len(items) == 1 and items[0]["name"] == "get_weather"
    jsonschema.validate(json.loads(items[0]["arguments"]), SCHEMA)
    assert not [o for o in r.json()["output"] if o["type"] == "message"]
