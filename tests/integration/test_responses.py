"""The OpenAI Responses API (/v1/responses) through the official openai client's
client.responses.create, plain and streamed, and raw HTTP: input as a string or message
items, instructions, max_output_tokens, the usage shape, the streaming event sequence, and
store + previous_response_id continuing a conversation whose KV stays warm (the second
turn reports the first turn's tokens as cached)."""
import json

import jsonschema

import openai
import pytest
import requests

MSG = "Write one short sentence about the sea."


def chat_greedy(client, model_id, messages, max_tokens):
    r = client.chat.completions.create(model=model_id, messages=messages, max_tokens=max_tokens,
                                       temperature=0)
    return r.choices[0].message.content, r


def test_plain_string_input(client, model_id):
    r = client.responses.create(model=model_id, input=MSG, max_output_tokens=16, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == model_id
    assert isinstance(r.created_at, (int, float))
    assert r.status in ("completed", "incomplete") and r.error is None
    assert len(r.output) == 1
    item = r.output[0]
    assert item.type == "message" and item.role == "assistant"
    assert item.status == ("incomplete" if r.status == "incomplete" else "completed")
    assert item.id.startswith("msg_")
    assert item.content[0].type == "output_text" and item.content[0].text
    assert r.output_text == item.content[0].text
    u = r.usage
    assert u.input_tokens > 5 and 0 < u.output_tokens <= 16
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0
    assert u.output_tokens_details.reasoning_tokens == 0
    text, chat = chat_greedy(client, model_id, [{"role": "user", "content": MSG}], 16)
    assert r.output_text == text and u.input_tokens == chat.usage.prompt_tokens


def test_items_and_instructions(client, model_id):
    items = [{"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "Name a colour."}]},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "Blue."}]},
             {"role": "user", "content": "Name another one."}]
    r = client.responses.create(model=model_id, input=items, instructions="Answer in one word.",
                                max_output_tokens=8, temperature=0)
    text, _ = chat_greedy(client, model_id,
                          [{"role": "system", "content": "Answer in one word."},
                           {"role": "user", "content": "Name a colour."},
                           {"role": "assistant", "content": "Blue."},
                           {"role": "user", "content": "Name another one."}], 8)
    assert r.output_text == text
    assert r.instructions == "Answer in one word."


def test_incomplete_on_max_output_tokens(client, model_id):
    r = client.responses.create(model=model_id, input="Count from one to one hundred.",
                                max_output_tokens=3, temperature=0)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_stream_events(client, model_id):
    plain = client.responses.create(model=model_id, input=MSG, max_output_tokens=20,
                                    temperature=0)
    events = list(client.responses.create(model=model_id, input=MSG, max_output_tokens=20,
                                          temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    # The last event says how it ended: completed, or incomplete at max_output_tokens.
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response." + plain.status]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    created = events[0].response
    assert created.status == "in_progress" and created.output == []
    item_id = events[2].item.id
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert all(d.item_id == item_id and d.output_index == 0 and d.content_index == 0
               for d in deltas)
    text = "".join(d.delta for d in deltas)
    done = events[-4]
    assert text == done.text == plain.output_text
    final = events[-1].response
    assert final.id == created.id and final.output_text == text
    assert final.status == plain.status
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert final.usage.input_tokens == plain.usage.input_tokens


def test_stream_sse_event_names(server, model_id):
    r = requests.post(server.url + "/v1/responses", stream=True, timeout=120,
                      json={"model": model_id, "input": MSG, "max_output_tokens": 4,
                            "stream": True})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    body = b"".join(r.iter_content(chunk_size=None)).decode()
    n = 0
    for ev in body.split("\n\n"):
        lines = [l for l in ev.split("\n") if l and not l.startswith(":")]
        if not lines:
            continue
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), ev
        assert json.loads(lines[1][6:])["type"] == lines[0][7:]
        n += 1
    assert n >= 9
    assert "[DONE]" not in body


def test_previous_response_id_reuses_kv(client, model_id):
    first = "My name is Ada and I live in a lighthouse on a small island. " * 4
    r1 = client.responses.create(model=model_id, input=first, store=True, max_output_tokens=12,
                                 temperature=0)
    r2 = client.responses.create(model=model_id, previous_response_id=r1.id,
                                 input="What is my name?", max_output_tokens=12, temperature=0)
    assert r2.previous_response_id == r1.id
    # Turn 2's prompt holds turn 1 (prompt and reply) before the new input.
    assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens
    # And the KV of turn 1's prompt was kept: at least its prompt is cached.
    assert r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens - 16, r2.usage
    text, _ = chat_greedy(client, model_id,
                          [{"role": "user", "content": first},
                           {"role": "assistant", "content": r1.output_text},
                           {"role": "user", "content": "What is my name?"}], 12)
    assert r2.output_text == text
    # A chain of three: turn 3 continues turn 2.
    r3 = client.responses.create(model=model_id, previous_response_id=r2.id,
                                 input="And where do I live?", max_output_tokens=8,
                                 temperature=0)
    assert r3.usage.input_tokens > r2.usage.input_tokens + r2.usage.output_tokens
    assert r3.usage.input_tokens_details.cached_tokens >= r2.usage.input_tokens - 16


def test_previous_response_id_unknown_or_not_stored(client, model_id):
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model=model_id, previous_response_id="resp_nope", input="Hi",
                                max_output_tokens=2)
    assert ei.value.param == "previous_response_id" and "not found" in ei.value.message
    r = client.responses.create(model=model_id, input="Hi", store=False, max_output_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=model_id, previous_response_id=r.id, input="Hi",
                                max_output_tokens=2)


def test_store_lru_bounded(start_server, model_id):
    s = start_server("--responses-store", "2")
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)
    ids = [c.responses.create(model=model_id, input="Turn %d" % i, max_output_tokens=2).id
           for i in range(3)]
    with pytest.raises(openai.BadRequestError):  # the oldest was evicted
        c.responses.create(model=model_id, previous_response_id=ids[0], input="x",
                           max_output_tokens=2)
    r = c.responses.create(model=model_id, previous_response_id=ids[2], input="x",
                           max_output_tokens=2)
    assert r.status in ("completed", "incomplete")


@pytest.mark.parametrize("body,param", [
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": [{"role": "user", "content": 5}]}, "input"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input"),
    ({"input": [{"type": "message", "role": "user",
                 "content": [{"type": "input_image", "image_url": "x"}]}]}, "input"),
    ({"input": "x", "instructions": 3}, "instructions"),
    ({"input": "x", "max_output_tokens": "many"}, "max_output_tokens"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "temperature": "hot"}, "temperature"),
    ({"input": "x", "top_p": 7}, "top_p"),
    ({"input": "x", "stream": "yes"}, "stream"),
    ({"input": "x", "store": "yes"}, "store"),
    ({"input": "x", "previous_response_id": 5}, "previous_response_id"),
])
def test_errors(server, model_id, body, param):
    r = server.post("/v1/responses", dict(body, model=model_id))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err
    assert err["message"]


def test_unknown_fields_ignored(server, model_id):
    r = server.post("/v1/responses", {"model": model_id, "input": "Hi", "max_output_tokens": 2,
                                      "metadata": {"k": "v"}, "truncation": "disabled",
                                      "some_future_field": {"a": 1}})
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] == {"k": "v"}


# ---- structured output and function calling (text.format, tools) ----------------------------

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather of a city",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 16},
               "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}}
TIME = {"type": "function", "name": "get_time", "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 12}},
                       "required": ["tz"], "additionalProperties": False}}
ASK = "What is the weather in Paris?"


def _calls(r):
    return [o for o in r.output if o.type == "function_call"]


def _check_call(item, tools):
    spec = {t["name"]: t["parameters"] for t in tools}
    assert item.type == "function_call" and item.status == "completed"
    assert item.id.startswith("fc_") and item.call_id.startswith("call_")
    assert item.name in spec
    jsonschema.validate(json.loads(item.arguments), spec[item.name])


def test_text_format_json_schema(client, model_id):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    r = client.responses.create(model=model_id, input="Describe a person as JSON.",
                                text={"format": fmt}, max_output_tokens=60, temperature=0)
    assert r.status == "completed", r.incomplete_details
    jsonschema.validate(json.loads(r.output_text), PERSON)
    assert r.text.format.type == "json_schema" and r.text.format.name == "person"
    # The same grammar as chat's response_format.
    text, _ = chat_greedy_fmt(client, model_id, "Describe a person as JSON.", fmt)
    assert r.output_text == text


def chat_greedy_fmt(client, model_id, msg, fmt):
    js = {k: v for k, v in fmt.items() if k != "type"}
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": msg}],
                                       response_format={"type": "json_schema", "json_schema": js},
                                       max_tokens=60, temperature=0)
    return r.choices[0].message.content, r


def test_text_format_json_object_and_text(client, model_id):
    ask = "Give a JSON object with a colour."
    r = client.responses.create(model=model_id, input=ask, text={"format": {"type": "json_object"}},
                                max_output_tokens=40, temperature=0)
    # The small model may run past 40 tokens; the text is then the grammar's prefix of an
    # object, the same as chat's response_format json_object gives.
    assert r.output_text.startswith("{")
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict)
    chat = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": ask}],
                                          response_format={"type": "json_object"}, max_tokens=40,
                                          temperature=0)
    assert r.output_text == chat.choices[0].message.content
    plain = client.responses.create(model=model_id, input=MSG, text={"format": {"type": "text"}},
                                    max_output_tokens=8, temperature=0)
    assert plain.output_text == client.responses.create(
        model=model_id, input=MSG, max_output_tokens=8, temperature=0).output_text


def test_function_call_required(client, model_id):
    r = client.responses.create(model=model_id, input=ASK, tools=[WEATHER, TIME],
                                tool_choice="required", parallel_tool_calls=False,
                                max_output_tokens=80, temperature=0)
    assert r.status == "completed"
    calls = _calls(r)
    assert len(calls) == 1 and len(r.output) == 1
    _check_call(calls[0], [WEATHER, TIME])
    assert [t.name for t in r.tools] == ["get_weather", "get_time"]
    assert r.tool_choice == "required" and r.parallel_tool_calls is False


def test_function_call_named(client, model_id):
    r = client.responses.create(model=model_id, input=ASK, tools=[WEATHER, TIME],
                                tool_choice={"type": "function", "name": "get_time"},
                                parallel_tool_calls=False, max_output_tokens=80, temperature=0)
    calls = _calls(r)
    assert [c.name for c in calls] == ["get_time"]
    _check_call(calls[0], [TIME])


def test_function_call_stream_matches(client, model_id):
    kw = dict(model=model_id, input=ASK, tools=[WEATHER, TIME], tool_choice="required",
              parallel_tool_calls=False, max_output_tokens=80, temperature=0)
    plain = client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    types = [e.type for e in events]
    assert types[:3] == ["response.created", "response.in_progress",
                         "response.output_item.added"]
    assert types[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    assert set(types[3:-3]) == {"response.function_call_arguments.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = events[2]
    assert added.item.type == "function_call" and added.item.status == "in_progress"
    assert added.item.arguments == "" and added.output_index == 0
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert deltas and all(d.item_id == added.item.id and d.output_index == 0 for d in deltas)
    args = "".join(d.delta for d in deltas)
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].arguments == args
    item = [e for e in events if e.type == "response.output_item.done"][0].item
    want = _calls(plain)[0]
    assert (item.name, item.arguments, item.status) == (want.name, want.arguments, "completed")
    assert item.name == added.item.name and item.call_id == added.item.call_id
    final = events[-1].response
    assert _items(final) == _items(plain)


def _items(r):
    return [o.model_dump(exclude={"id", "call_id"}) for o in r.output]


@pytest.mark.parametrize("choice,max_out", [("required", 40), ("auto", 12)])
def test_function_call_stream_cut_matches(client, model_id, choice, max_out):
    # Cut by max_output_tokens: the stream's items (the last one incomplete) equal the reply's.
    kw = dict(model=model_id, input=ASK + " Use the tool.", tools=[WEATHER], tool_choice=choice,
              max_output_tokens=max_out, temperature=0)
    plain = client.responses.create(**kw)
    final = list(client.responses.create(stream=True, **kw))[-1].response
    assert plain.status == final.status == "incomplete"
    assert _items(final) == _items(plain) and plain.output[-1].status == "incomplete"


def _out(r):
    return r.output_text, [(c.name, c.arguments) for c in _calls(r)]


def test_function_call_output_second_turn(client, model_id):
    r1 = client.responses.create(model=model_id, input=ASK, tools=[WEATHER],
                                 tool_choice="required", parallel_tool_calls=False,
                                 max_output_tokens=80, temperature=0)
    call = _calls(r1)[0]
    result = json.dumps({"temperature_c": 18, "sky": "clear"})
    items = [{"role": "user", "content": ASK},
             {"type": "function_call", "call_id": call.call_id, "name": call.name,
              "arguments": call.arguments, "id": call.id, "status": "completed"},
             {"type": "function_call_output", "call_id": call.call_id, "output": result}]
    kw = dict(model=model_id, tools=[WEATHER], parallel_tool_calls=False, temperature=0)
    r2 = client.responses.create(input=items, max_output_tokens=24, **kw)
    assert r2.status in ("completed", "incomplete") and r2.output
    # The same conversation on chat completions: the same prompt, so the same greedy reply.
    chat = client.chat.completions.create(
        model=model_id, tools=[{"type": "function", "function": {
            k: v for k, v in WEATHER.items() if k != "type"}}], parallel_tool_calls=False,
        messages=[{"role": "user", "content": ASK},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": call.call_id, "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments}}]},
                  {"role": "tool", "tool_call_id": call.call_id, "content": result}],
        max_tokens=24, temperature=0)
    m = chat.choices[0].message
    assert _out(r2) == (m.content or "", [(c.function.name, c.function.arguments)
                                          for c in m.tool_calls or []])
    assert r2.usage.input_tokens == chat.usage.prompt_tokens
    # Continuing the stored turn: only the result is new input, turn 1's KV is reused.
    r3 = client.responses.create(previous_response_id=r1.id, max_output_tokens=24,
                                 input=[{"type": "function_call_output",
                                         "call_id": call.call_id, "output": result}], **kw)
    assert _out(r3) == _out(r2) and r3.usage.input_tokens == r2.usage.input_tokens
    assert r3.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens - 16


@pytest.mark.parametrize("extra,param", [
    ({"tools": [{"type": "function", "parameters": {"type": "object"}}]}, "tools[0].name"),
    ({"tools": [{"type": "function", "name": "a b"}]}, "tools[0].name"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object",
                                                                 "not": {}}}]},
     "tools[0].parameters"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": 5}}}, "text.format.schema"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format"),
    ({"text": {"format": {"type": "json_object"}}, "tools": [WEATHER]}, "text.format"),
    ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]}, "input"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
     "input"),
])
def test_tool_errors(server, model_id, extra, param):
    r = server.post("/v1/responses", dict({"model": model_id, "input": "Hi"}, **extra))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err
