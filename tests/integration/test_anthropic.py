"""The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) through the official
`anthropic` Python package pointed at gemmad, and raw HTTP for the error shape: plain and
streamed replies, system prompts as a string or text blocks, stop_sequences, usage,
count_tokens, errors as {"type":"error","error":{"type","message"}}, x-api-key."""
import json

import pytest
import requests


anthropic = pytest.importorskip("anthropic")

MSG = [{"role": "user", "content": "Write one short sentence about the sea."}]
# Recent anthropic packages no longer take sampling fields as arguments; the API still
# accepts them in the body.
GREEDY = {"extra_body": {"temperature": 0}}


@pytest.fixture(scope="module")
def ac(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def chat_greedy(client, model_id, messages, max_tokens, system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + messages
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=max_tokens,
                                       temperature=0)
    return r.choices[0].message.content, r


def test_messages_plain(ac, client, model_id):
    m = ac.messages.create(model=model_id, max_tokens=16, messages=MSG, **GREEDY)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.model == model_id
    assert len(m.content) == 1 and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert m.usage.input_tokens >= 1 and 0 < m.usage.output_tokens <= 16
    text, r = chat_greedy(client, model_id, MSG, 16)
    assert m.content[0].text == text
    # Anthropic's accounting: computed + cache-read input tokens make the prompt.
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == r.usage.prompt_tokens
    assert m.stop_reason == ("max_tokens" if r.choices[0].finish_reason == "length" else "end_turn")


def test_messages_system_and_blocks(ac, client, model_id):
    system = "You answer in French."
    blocks = [{"role": "user", "content": [{"type": "text", "text": "Say good morning."}]}]
    a = ac.messages.create(model=model_id, max_tokens=12, system=system, messages=blocks, **GREEDY)
    b = ac.messages.create(model=model_id, max_tokens=12,
                           system=[{"type": "text", "text": system}], messages=blocks, **GREEDY)
    text, _ = chat_greedy(client, model_id, [{"role": "user", "content": "Say good morning."}],
                          12, system=system)
    assert a.content[0].text == b.content[0].text == text


def test_messages_multi_turn(ac, client, model_id):
    turns = [{"role": "user", "content": "Name a colour."},
             {"role": "assistant", "content": [{"type": "text", "text": "Blue."}]},
             {"role": "user", "content": "Name another one."}]
    m = ac.messages.create(model=model_id, max_tokens=8, messages=turns, **GREEDY)
    flat = [dict(t, content=t["content"] if isinstance(t["content"], str)
                 else t["content"][0]["text"]) for t in turns]
    text, _ = chat_greedy(client, model_id, flat, 8)
    assert m.content[0].text == text


def test_stop_sequences(ac, model_id):
    full = ac.messages.create(model=model_id, max_tokens=24, messages=MSG, **GREEDY)
    words = full.content[0].text.split()
    assert len(words) >= 3, full.content[0].text
    stop = words[2]
    m = ac.messages.create(model=model_id, max_tokens=24, messages=MSG, stop_sequences=[stop], **GREEDY)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == full.content[0].text.split(stop)[0]


def test_stream_helper(ac, model_id):
    plain = ac.messages.create(model=model_id, max_tokens=20, messages=MSG, **GREEDY)
    with ac.messages.stream(model=model_id, max_tokens=20, messages=MSG, **GREEDY) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == plain.content[0].text == final.content[0].text
    assert final.stop_reason == plain.stop_reason
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert (final.usage.input_tokens + final.usage.cache_read_input_tokens ==
            plain.usage.input_tokens + plain.usage.cache_read_input_tokens)


def test_stream_event_sequence(server, model_id):
    r = requests.post(server.url + "/v1/messages", stream=True, timeout=120,
                      headers={"x-api-key": "unused", "anthropic-version": "2023-06-01"},
                      json={"model": model_id, "max_tokens": 8, "messages": MSG, "stream": True,
                            "temperature": 0})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    names, datas, name = [], [], None
    buf = b""
    for chunk in r.iter_content(chunk_size=None):
        buf += chunk
    for ev in buf.decode().split("\n\n"):
        name = None
        for line in ev.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                d = json.loads(line[6:])
                assert d["type"] == name, (name, d)
                names.append(name)
                datas.append(d)
    kinds = [n for n in names if n != "ping"]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) <= {"content_block_delta"} and len(kinds) > 5
    start = datas[0]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] > 5
    md0 = [d for d in datas if d["type"] == "message_delta"][0]["usage"]
    assert md0["input_tokens"] + md0["cache_read_input_tokens"] == start["usage"]["input_tokens"]
    md = [d for d in datas if d["type"] == "message_delta"][0]
    assert md["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert 0 < md["usage"]["output_tokens"] <= 8
    for d in datas:
        if d["type"] == "content_block_delta":
            assert d["index"] == 0 and d["delta"]["type"] == "text_delta"


def test_count_tokens(ac, model_id):
    system = "Be brief."
    c = ac.messages.count_tokens(model=model_id, system=system, messages=MSG)
    m = ac.messages.create(model=model_id, max_tokens=1, system=system, messages=MSG)
    assert c.input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens > 5


def anthropic_error(r, status, etype, word):
    assert r.status_code == status, r.text
    j = r.json()
    assert j["type"] == "error" and j["error"]["type"] == etype, j
    assert word in j["error"]["message"], j


@pytest.mark.parametrize("body,word", [
    ({"messages": MSG}, "max_tokens"),
    ({"max_tokens": "ten", "messages": MSG}, "max_tokens"),
    ({"max_tokens": 0, "messages": MSG}, "max_tokens"),
    ({"max_tokens": 8}, "messages"),
    ({"max_tokens": 8, "messages": "hi"}, "messages"),
    ({"max_tokens": 8, "messages": [{"role": "robot", "content": "hi"}]}, "role"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": 5}]}, "content"),
    ({"max_tokens": 8, "messages": MSG, "system": 3}, "system"),
    ({"max_tokens": 8, "messages": MSG, "temperature": "hot"}, "temperature"),
    ({"max_tokens": 8, "messages": MSG, "top_k": -2}, "top_k"),
    ({"max_tokens": 8, "messages": MSG, "stop_sequences": "x"}, "stop_sequences"),
    ({"max_tokens": 8, "messages": MSG, "stream": "yes"}, "stream"),
])
def test_errors_shape(server, model_id, body, word):
    b = dict(body, model=model_id)
    anthropic_error(server.post("/v1/messages", b), 400, "invalid_request_error", word)


def test_error_unknown_fields_ignored(server, model_id):
    r = server.post("/v1/messages", {"model": model_id, "max_tokens": 4, "messages": MSG,
                                     "metadata": {"user_id": "u1"}, "some_future_field": 1})
    assert r.status_code == 200, r.text


def test_error_bad_json(server):
    r = requests.post(server.url + "/v1/messages", data=b"{not json", timeout=30,
                      headers={"Content-Type": "application/json"})
    anthropic_error(r, 400, "invalid_request_error", "JSON")


def test_error_client_raises(ac, model_id):
    with pytest.raises(anthropic.BadRequestError) as ei:
        ac.messages.create(model=model_id, max_tokens=-1, messages=MSG)
    assert ei.value.body["error"]["type"] == "invalid_request_error"


def test_x_api_key(start_server, tmp_path, model_id):
    keys = tmp_path / "keys"
    keys.write_text("sk-test-123\n")
    s = start_server("--api-keys-file", str(keys))
    good = anthropic.Anthropic(base_url=s.url, api_key="sk-test-123", max_retries=0, timeout=120)
    m = good.messages.create(model=model_id, max_tokens=2, messages=MSG)
    assert m.content[0].type == "text"
    bad = anthropic.Anthropic(base_url=s.url, api_key="wrong", max_retries=0, timeout=120)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model=model_id, max_tokens=2, messages=MSG)
    r = requests.post(s.url + "/v1/messages", timeout=30,
                      json={"model": model_id, "max_tokens": 2, "messages": MSG})
    anthropic_error(r, 401, "authentication_error", "key")
    # The same key in the Authorization header still works there.
    r = requests.post(s.url + "/v1/messages", timeout=60,
                      headers={"Authorization": "Bearer sk-test-123"},
                      json={"model": model_id, "max_tokens": 2, "messages": MSG})
    assert r.status_code == 200
