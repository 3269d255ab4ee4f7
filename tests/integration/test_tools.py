"""Function calling and structured output through the clients users run: the openai
package (chat.completions.parse with a pydantic model, tools, streamed tool calls), LangChain
(with_structured_output, bind_tools in a two-step loop with a local Python function) and
LiteLLM. The bundled model is a small base model: what is checked is the shape and the
guarantee (calls parse and validate against their schemas), not the model's choices."""
import json

import pytest

jsonschema = pytest.importorskip("jsonschema")
pydantic = pytest.importorskip("pydantic")
# litellm's own pydantic models warn on import; not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 16},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 12}},
                   "required": ["tz"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    age: int = pydantic.Field(ge=0, le=120)


def _check_call(call, tools):
    spec = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.type == "function"
    assert call.id and call.id.startswith("call_")
    assert call.function.name in spec
    jsonschema.validate(json.loads(call.function.arguments), spec[call.function.name])


def test_required_tool_call_shape(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=[WEATHER, TIME],
                                       tool_choice="required", parallel_tool_calls=False,
                                       max_tokens=80, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content is None
    assert len(ch.message.tool_calls) == 1
    _check_call(ch.message.tool_calls[0], [WEATHER, TIME])


def test_named_tool_choice_forces_that_function(client, model_id):
    for seed in range(3):
        r = client.chat.completions.create(
            model=model_id, messages=ASK, tools=[WEATHER, TIME], parallel_tool_calls=False,
            tool_choice={"type": "function", "function": {"name": "get_time"}},
            max_tokens=80, temperature=1.0, seed=seed)
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls"
        assert [c.function.name for c in calls] == ["get_time"]
        _check_call(calls[0], [TIME])


def test_parallel_calls_get_indexes(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=[WEATHER, TIME],
                                       tool_choice="required", max_tokens=120, temperature=0)
    ch = r.choices[0]
    calls = ch.message.tool_calls
    assert calls, ch
    done = calls if ch.finish_reason == "tool_calls" else calls[:-1]  # the last may be cut
    for c in done:
        _check_call(c, [WEATHER, TIME])
    assert len({c.id for c in calls}) == len(calls)
    # streamed: indexes 0, 1, ... and the reassembled calls equal the non-streamed ones
    stream = client.chat.completions.create(model=model_id, messages=ASK, tools=[WEATHER, TIME],
                                            tool_choice="required", max_tokens=120,
                                            temperature=0, stream=True)
    got, order, finish, content = {}, [], None, ""
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in got:
                assert tc.id and tc.type == "function" and tc.function.name, tc
                got[tc.index] = {"name": tc.function.name, "arguments": ""}
                order.append(tc.index)
            else:
                assert tc.id is None and (tc.function.name is None), tc
            got[tc.index]["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert order == list(range(len(order)))
    assert content == ""
    assert finish == ch.finish_reason
    assert [got[i] for i in order] == [{"name": c.function.name,
                                        "arguments": c.function.arguments} for c in calls]


def test_auto_tool_choice_text_or_call(client, model_id):
    for seed in range(4):
        r = client.chat.completions.create(model=model_id, messages=ASK, tools=[WEATHER],
                                           max_tokens=60, temperature=0.8, seed=seed)
        ch = r.choices[0]
        if ch.message.tool_calls:
            for c in ch.message.tool_calls[:-1] if ch.finish_reason == "length" else \
                    ch.message.tool_calls:
                _check_call(c, [WEATHER])
        assert "```tool_call" not in (ch.message.content or "")
    # a stream with tools never shows the marker either
    stream = client.chat.completions.create(model=model_id, messages=ASK, tools=[WEATHER],
                                            max_tokens=60, temperature=0, stream=True)
    text = "".join((c.choices[0].delta.content or "") for c in stream if c.choices)
    assert "```tool_call" not in text


def test_tool_none_and_empty_tools_are_plain(client, model_id):
    a = client.chat.completions.create(model=model_id, messages=ASK, max_tokens=12,
                                       temperature=0)
    b = client.chat.completions.create(model=model_id, messages=ASK, max_tokens=12,
                                       temperature=0, tools=[])
    c = client.chat.completions.create(model=model_id, messages=ASK, max_tokens=12,
                                       temperature=0, tools=[WEATHER], tool_choice="none")
    assert a.choices[0].message.content == b.choices[0].message.content
    assert c.choices[0].message.tool_calls is None


def test_conversation_with_tool_results(client, model_id):
    first = client.chat.completions.create(model=model_id, messages=ASK, tools=[WEATHER],
                                           tool_choice="required", parallel_tool_calls=False,
                                           max_tokens=80, temperature=0)
    m = first.choices[0].message
    msgs = ASK + [m.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": m.tool_calls[0].id,
                   "content": [{"type": "text", "text": "sunny, 21 C"}]},
                  {"role": "user", "content": "Thanks. Summarise."}]
    r = client.chat.completions.create(model=model_id, messages=msgs, tools=[WEATHER],
                                       tool_choice="none", max_tokens=16, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
    base = client.chat.completions.create(model=model_id, messages=ASK, max_tokens=1,
                                          temperature=0)
    # the call and its result are in the prompt (about 30 tokens for both)
    assert r.usage.prompt_tokens > base.usage.prompt_tokens + 25


def test_openai_parse_with_pydantic(client, model_id):
    r = client.chat.completions.parse(model=model_id, messages=[
        {"role": "user", "content": "Invent a person."}], response_format=Person,
        max_tokens=60, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "stop"
    assert isinstance(ch.message.parsed, Person)


def test_langchain_structured_output_and_tool_loop(server, model_id):
    lc = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    llm = lc.ChatOpenAI(model=model_id, base_url=server.url + "/v1", api_key="unused",
                        temperature=0, max_tokens=80, max_retries=0)
    p = llm.with_structured_output(Person, method="json_schema").invoke("Invent a person.")
    assert isinstance(p, Person)

    calls_seen = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        calls_seen.append(city)
        return f"sunny in {city}"

    bound = llm.bind_tools([get_weather], tool_choice="get_weather")
    msgs = [HumanMessage("What is the weather in Paris?")]
    ai = bound.invoke(msgs)
    assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather"
    msgs.append(ai)
    for tc in ai.tool_calls:
        msgs.append(ToolMessage(content=get_weather.invoke(tc["args"]), tool_call_id=tc["id"]))
    assert calls_seen
    final = llm.bind_tools([get_weather]).invoke(msgs)
    assert final.response_metadata.get("finish_reason") in ("stop", "length", "tool_calls")


def test_litellm(server, model_id):
    litellm = pytest.importorskip("litellm")
    r = litellm.completion(model="openai/" + model_id, api_base=server.url + "/v1",
                           api_key="unused", messages=ASK, tools=[WEATHER],
                           tool_choice="required", parallel_tool_calls=False, max_tokens=80,
                           temperature=0)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    jsonschema.validate(json.loads(calls[0].function.arguments),
                        WEATHER["function"]["parameters"])
    r = litellm.completion(model="openai/" + model_id, api_base=server.url + "/v1",
                           api_key="unused", messages=[{"role": "user",
                                                        "content": "Invent a person."}],
                           response_format=Person, max_tokens=60, temperature=0)
    Person.model_validate_json(r.choices[0].message.content)
