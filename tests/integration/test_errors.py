"""Checklist section B (HTTP requests), items 1-20: every malformed or out-of-range input
gets the right status and an OpenAI error body naming the parameter. Raw HTTP where the
official client would refuse to send the input."""
import json
import re
import socket
import time

import pytest
import requests

from conftest import ROOT

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "Hi"}]


def post_raw(server, path, data, ctype="application/json", headers=None):
    h = {"Content-Type": ctype} if ctype else {}
    h.update(headers or {})
    return requests.post(server.url + path, data=data, headers=h, timeout=60)


def err(resp, status, param=None, code=None):
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    e = body["error"]
    assert set(e) >= {"message", "type", "param", "code"}
    assert isinstance(e["message"], str) and e["message"]
    # never a server path or a pointer
    assert ROOT not in resp.text and not re.search(r"0x[0-9a-f]{6,}", resp.text)
    if param is not None:
        assert e["param"] == param, e
    if code is not None:
        assert e["code"] == code, e
    return e


def chat(server, **fields):
    body = {"messages": MSG, "max_tokens": 4}
    body.update(fields)
    return server.post(CHAT, body)


# B1
@pytest.mark.parametrize("data", [b'{"messages": [', b'{"messages": []} x', b"[]", b"null",
                                  b"", b'"str"', b"42"])
def test_b01_bad_json(server, data):
    err(post_raw(server, CHAT, data), 400)


# B2
def test_b02_deep_nesting(server):
    data = b'{"messages":' + b"[" * 10000 + b"]" * 10000 + b"}"
    err(post_raw(server, CHAT, data), 400)
    assert server.get("/health").status_code == 200


# B3
@pytest.mark.parametrize("data", [
    b'{"messages":[{"role":"user","content":"a"}],"messages":[]}',
    b'{"messages":[{"role":"user","content":"a\\u0000b"}]}',
    b'{"messages":[{"role":"user","content":"\xff\xfe"}]}',
    b'{"messages":[{"role":"user","content":"\xed\xa0\x80"}]}',
])
def test_b03_duplicates_nul_utf8(server, data):
    err(post_raw(server, CHAT, data), 400)


# B4
def test_b04_body_over_limit(server):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 300000}]})
    err(post_raw(server, CHAT, big), 413)


def declared_post(server, length, body=b""):
    """A POST that declares `length` body bytes (a string: sent as is) but sends `body`;
    returns the first bytes of the answer."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: " + str(length).encode() + b"\r\n\r\n" + body)
    data = s.recv(4096)
    s.close()
    return data


def test_b04_lying_content_length(server):
    data = declared_post(server, 100000000, b"{}")
    assert data.startswith(b"HTTP/1.1 413"), data[:100]


def test_b04_endless_chunked(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    got = b""
    try:
        for _ in range(200):  # 13 MB, far over the 256 KiB limit
            s.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        got = s.recv(4096)
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    # 413, or the connection closed
    assert got == b"" or got.startswith(b"HTTP/1.1 413"), got[:100]
    assert server.get("/health").status_code == 200


# B5
def test_b05_huge_header(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
        data = s.recv(4096)
    except (BrokenPipeError, ConnectionResetError):
        data = b""
    s.close()
    assert data == b"" or data.startswith(b"HTTP/1.1 431") or data.startswith(b"HTTP/1.1 413"), \
        data[:100]


def test_b05_many_headers(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    hdrs = b"".join(b"X-H%d: v\r\n" % i for i in range(10000))
    try:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + hdrs + b"\r\n")
        data = s.recv(4096)
    except (BrokenPipeError, ConnectionResetError):
        data = b""
    s.close()
    assert data == b"" or data.startswith(b"HTTP/1.1 431") or data.startswith(b"HTTP/1.1 413"), \
        data[:100]
    assert server.get("/health").status_code == 200


# B6
def test_b06_wrong_method(server):
    r = requests.get(server.url + CHAT, timeout=10)
    err(r, 405)
    assert r.headers["Allow"] == "POST"
    r = requests.delete(server.url + "/v1/models", timeout=10)
    err(r, 405)
    assert "GET" in r.headers["Allow"]


def test_b06_wrong_content_type(server):
    err(post_raw(server, CHAT, b'{"messages":[]}', ctype="text/plain"), 415)
    err(post_raw(server, CHAT, b"a=b", ctype="application/x-www-form-urlencoded"), 415)
    err(post_raw(server, CHAT, b"{}", ctype="application/jsonx"), 415)


# B7
@pytest.mark.parametrize("path", ["/v1/../v1/models", "//v1/models", "/v1/%2e%2e/v1/models",
                                  "/V1/MODELS", "/v1/models/", "/v1/chat/completions/x", "/x",
                                  "/v1/Chat/Completions"])
def test_b07_path_tricks(server, path):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    assert data.startswith(b"HTTP/1.1 404"), (path, data[:100])


def test_b07_api_key(start_server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# test keys\nsecret-key-1\n  secret-key-2  \n")
    s = start_server("--api-keys-file", str(keys))
    assert s.get("/health").status_code == 200
    e = err(s.get("/v1/models"), 401)
    assert e["type"] == "authentication_error"
    err(s.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
    err(s.get("/v1/models", headers={"Authorization": "secret-key-1"}), 401)
    err(s.post(CHAT, {"messages": MSG}), 401)
    err(s.get("/metrics"), 401)
    assert s.get("/v1/models", headers={"Authorization": "Bearer secret-key-1"}).status_code == 200
    assert s.get("/v1/models", headers={"Authorization": "Bearer secret-key-2"}).status_code == 200
    r = s.post(CHAT, {"messages": MSG, "max_tokens": 2},
               headers={"Authorization": "Bearer secret-key-2"})
    assert r.status_code == 200, r.text
    err(s.get("/nope", headers={"Authorization": "Bearer secret-key-1"}), 404)
    import openai
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="bad", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        c.models.list()


# B8
@pytest.mark.parametrize("model", ["../x.gguf", "/etc/passwd", "models/gemma-3-270m-q4_k_m.gguf",
                                   "no-such-model", ""])
def test_b08_model_path_or_unknown(server, model):
    e = err(chat(server, model=model), 404, param="model")
    assert e["code"] == "model_not_found"


def test_b08_model_type(server):
    err(chat(server, model=5), 400, param="model")


# B9
@pytest.mark.parametrize("messages,param", [
    (None, "messages"), ([], "messages"), ("hi", "messages"), ({}, "messages"),
    ([{"role": "wizard", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": {"a": 1}}], "messages[0].content"),
    ([{"role": "user"}], "messages[0].content"),
    ([{"content": "x"}], "messages[0].role"),
    (["x"], "messages[0]"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
     "messages[0].content"),
])
def test_b09_messages(server, messages, param):
    body = {"max_tokens": 4}
    if messages is not None:
        body["messages"] = messages
    err(server.post(CHAT, body), 400, param=param)


# B10
@pytest.mark.parametrize("v", [0, -1, 2 ** 63, 2 ** 62, "10", 1.5, True, [], 100000])
def test_b10_max_tokens(server, v):
    if v == 2 ** 63:
        r = post_raw(server, CHAT, b'{"messages":[{"role":"user","content":"a"}],'
                                   b'"max_tokens":9223372036854775808}')
        err(r, 400)
        return
    err(chat(server, max_tokens=v), 400, param="max_tokens")


def test_b10_max_completion_tokens(server):
    err(chat(server, max_completion_tokens=0), 400, param="max_completion_tokens")


# B11
def test_b11_context_length(server):
    e = err(chat(server, max_tokens=512, messages=[{"role": "user", "content": "hello " * 700}]),
            400, code="context_length_exceeded")
    assert e["param"] == "messages"
    e = err(server.post("/v1/completions", {"prompt": "hello " * 1100, "max_tokens": 4}), 400,
            code="context_length_exceeded")
    # without max_tokens the prompt alone must fit
    err(chat(server, max_tokens=None, messages=[{"role": "user", "content": "hello " * 1100}]),
        400, code="context_length_exceeded")


# B12
def test_b12_huge_upload_declared(server):
    data = declared_post(server, 5000000000)
    assert data.startswith(b"HTTP/1.1 413"), data[:100]
    data = declared_post(server, "18446744073709551617")  # past 2^64
    assert data.startswith(b"HTTP/1.1 4"), data[:100]


# B13
@pytest.mark.parametrize("n", [0, -1, 10 ** 9, 1.5, "2", 5])
def test_b13_n(server, n):
    err(chat(server, n=n), 400, param="n")


# B14
@pytest.mark.parametrize("v", [21, -1, 10 ** 9, 1.5, "3"])
def test_b14_top_logprobs(server, v):
    err(chat(server, logprobs=True, top_logprobs=v), 400, param="top_logprobs")


def test_b14_top_logprobs_needs_logprobs(server):
    err(chat(server, top_logprobs=2), 400, param="top_logprobs")
    err(chat(server, logprobs="yes"), 400, param="logprobs")
    err(server.post("/v1/completions", {"prompt": "a", "logprobs": 21}), 400, param="logprobs")


# B15
@pytest.mark.parametrize("bias", [{"-1": 1}, {"262144": 1}, {"9999999": 1}, {"abc": 1}, {"": 1},
                                  {"1": 101}, {"1": -101}, {"1": "5"}, {"1.5": 1}, [1], "x"])
def test_b15_logit_bias(server, bias):
    err(chat(server, logit_bias=bias), 400, param="logit_bias")


@pytest.mark.parametrize("raw", [b'NaN', b'1e309', b'Infinity'])
def test_b15_logit_bias_raw(server, raw):
    r = post_raw(server, CHAT, b'{"messages":[{"role":"user","content":"a"}],"logit_bias":{"1":'
                 + raw + b'}}')
    err(r, 400)


# B16
@pytest.mark.parametrize("field,v", [
    ("temperature", -1), ("temperature", 1e6), ("temperature", 2.5), ("temperature", "1"),
    ("top_p", 0), ("top_p", 1.5), ("top_p", -0.1), ("top_k", -1), ("top_k", 1.5),
    ("min_p", 2), ("presence_penalty", 3), ("frequency_penalty", -3),
    ("repetition_penalty", 0), ("repetition_penalty", -1),
])
def test_b16_sampling_ranges(server, field, v):
    err(chat(server, **{field: v}), 400, param=field)


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_b16_temperature_nonfinite(server, raw):
    err(post_raw(server, CHAT, b'{"messages":[{"role":"user","content":"a"}],"temperature":'
                 + raw + b"}"), 400)


# B17
def test_b17_stop_limits(server):
    err(chat(server, stop=["s%d" % i for i in range(1000)]), 400, param="stop")
    err(chat(server, stop="x" * 100000), 400, param="stop")
    err(chat(server, stop="x" * 1000000), 413)  # over the test server's body limit
    err(chat(server, stop=[1, 2]), 400, param="stop")
    err(chat(server, stop=""), 400, param="stop")


@pytest.mark.parametrize("seed", [1.5, "7", [], True])
def test_b17_seed(server, seed):
    err(chat(server, seed=seed), 400, param="seed")


# B18
def test_b18_internal_fields_ignored(server):
    r = chat(server, n_discard=5, chat_template="{{evil}}", slot_id=3, id_slot=1,
             cache_prompt=False, unknown_field={"x": 1})
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "chat.completion"


# B19
@pytest.mark.parametrize("prompt", [[-1], [262144], [10 ** 12], [[1, -1]], [1.5], [], [[]],
                                    [1, "a"], 5, {"a": 1}])
def test_b19_token_prompt(server, prompt):
    err(server.post("/v1/completions", {"prompt": prompt, "max_tokens": 2}), 400, param="prompt")


# B20
@pytest.mark.parametrize("field,v", [
    ("functions", [{"name": "f"}]),
    ("function_call", "auto"),
])
def test_b20_unimplemented(server, field, v):
    e = err(chat(server, **{field: v}), 400, param=field)
    assert field.split("_")[0] in e["message"]


def test_b20_suffix(server):
    err(server.post("/v1/completions", {"prompt": "a", "suffix": "b", "max_tokens": 2}), 400,
        param="suffix")


def test_response_format_text_ok(server):
    assert chat(server, response_format={"type": "text"}).status_code == 200


def test_errors_as_openai_exceptions(client, server):
    import openai
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="x" if False else server.get("/v1/models").json()
                                       ["data"][0]["id"], messages=MSG, temperature=5)
    assert ei.value.status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=MSG)
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=server.get("/v1/models").json()["data"][0]["id"],
                                  prompt="hello " * 1100, max_tokens=4)
    assert ei.value.code == "context_length_exceeded"


def test_server_survives(server):
    assert server.get("/health").status_code == 200
    assert server.proc.poll() is None
