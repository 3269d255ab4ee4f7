"""Routes for more clients: CORS (--cors-origins, OPTIONS preflight), the OpenAI routes
without the /v1 prefix, /v1/models listing every --model-alias, --accept-any-model, and the
built-in chat page at GET / (--no-ui turns it off)."""
import os

import pytest
import requests

from conftest import ROOT, parse_sse

MSG = [{"role": "user", "content": "Say hi."}]
A, B = "http://a.example", "https://b.example:8443"


def preflight(url, path, origin, headers="authorization, content-type"):
    return requests.options(url + path, timeout=10, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": headers})


@pytest.fixture(scope="module")
def cors_server(request):
    from conftest import Server
    s = Server(["--cors-origins", A + "," + B])
    yield s
    s.stop()


def test_cors_preflight_allowed(cors_server):
    for origin in (A, B):
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/models",
                     "/v1/embeddings", "/chat/completions"):
            r = preflight(cors_server.url, path, origin)
            assert r.status_code == 204, (path, r.status_code, r.text)
            h = r.headers
            assert h["Access-Control-Allow-Origin"] == origin
            assert "POST" in h["Access-Control-Allow-Methods"]
            allowed = {x.strip().lower() for x in h["Access-Control-Allow-Headers"].split(",")}
            assert {"authorization", "content-type"} <= allowed
            assert int(h["Access-Control-Max-Age"]) > 0
            assert "Origin" in h.get("Vary", "")
            assert r.content == b""


def test_cors_anthropic_headers_allowed(cors_server):
    r = preflight(cors_server.url, "/v1/messages", A,
                  "x-api-key, anthropic-version, content-type")
    allowed = {x.strip().lower() for x in r.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"x-api-key", "anthropic-version", "content-type"} <= allowed


def test_cors_preflight_other_origin(cors_server):
    r = preflight(cors_server.url, "/v1/chat/completions", "http://evil.example")
    assert "Access-Control-Allow-Origin" not in r.headers
    r = preflight(cors_server.url, "/v1/chat/completions", A + ".evil.example")
    assert "Access-Control-Allow-Origin" not in r.headers


def test_cors_on_real_responses(cors_server, model_id):
    h = {"Origin": A}
    r = requests.post(cors_server.url + "/v1/chat/completions", headers=h, timeout=60,
                      json={"model": model_id, "messages": MSG, "max_tokens": 2})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == A
    r = requests.post(cors_server.url + "/v1/chat/completions", headers=h, timeout=60,
                      json={"model": model_id, "messages": MSG, "max_tokens": 2,
                            "stream": True})
    assert r.headers["Access-Control-Allow-Origin"] == A
    assert parse_sse(r.text)[-1] == "[DONE]"
    r = requests.post(cors_server.url + "/v1/chat/completions", headers=h, timeout=60,
                      json={"messages": 3})
    assert r.status_code == 400 and r.headers["Access-Control-Allow-Origin"] == A
    r = requests.get(cors_server.url + "/v1/models", headers={"Origin": "http://evil.example"},
                     timeout=10)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers


def test_cors_wildcard(start_server):
    s = start_server("--cors-origins", "*")
    r = preflight(s.url, "/v1/chat/completions", "http://anything.example")
    assert r.status_code == 204 and r.headers["Access-Control-Allow-Origin"] == "*"


def test_cors_preflight_needs_no_key(start_server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("sk-1\n")
    s = start_server("--cors-origins", A, "--api-keys-file", str(keys))
    r = preflight(s.url, "/v1/chat/completions", A)
    assert r.status_code == 204 and r.headers["Access-Control-Allow-Origin"] == A
    r = requests.get(s.url + "/v1/models", headers={"Origin": A}, timeout=10)
    assert r.status_code == 401 and r.headers["Access-Control-Allow-Origin"] == A


def test_cors_off_by_default(server):
    r = preflight(server.url, "/v1/chat/completions", A)
    assert "Access-Control-Allow-Origin" not in r.headers
    r = requests.get(server.url + "/v1/models", headers={"Origin": A}, timeout=10)
    assert "Access-Control-Allow-Origin" not in r.headers


def test_routes_without_v1(server, model_id):
    r = server.post("/chat/completions", {"model": model_id, "messages": MSG, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "chat.completion"
    r = server.post("/completions", {"model": model_id, "prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "text_completion"
    r = server.get("/models")
    assert r.status_code == 200 and r.json()["data"][0]["id"] == model_id
    r = server.post("/responses", {"model": model_id, "input": "Hi", "max_output_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "response"
    r = server.post("/embeddings", {"model": model_id, "input": "Hi"})
    assert r.status_code == 200 and r.json()["object"] == "list"
    # Not a prefix match: unknown paths stay unknown.
    assert server.get("/chat").status_code == 404


def test_openai_client_without_v1(server, model_id):
    import openai
    c = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=60)
    r = c.chat.completions.create(model=model_id, messages=MSG, max_tokens=2)
    assert r.choices[0].message.content is not None


def test_model_aliases(start_server):
    s = start_server("--model-alias", "gemma", "--model-alias", "gpt-4o-mini",
                     "--model-alias", "local/small")
    ids = [m["id"] for m in s.get("/v1/models").json()["data"]]
    assert ids == ["gemma", "gpt-4o-mini", "local/small"]
    for name in ids:
        r = s.post("/v1/chat/completions", {"model": name, "messages": MSG, "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == name
    r = s.post("/v1/chat/completions", {"model": "other", "messages": MSG, "max_tokens": 2})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_accept_any_model(start_server):
    s = start_server("--accept-any-model")
    served = s.get("/v1/models").json()["data"][0]["id"]
    r = s.post("/v1/chat/completions", {"model": "gpt-4o", "messages": MSG, "max_tokens": 2})
    assert r.status_code == 200
    assert r.json()["model"] == served
    r = s.post("/v1/messages", {"model": "claude-sonnet-4-5", "messages": MSG, "max_tokens": 2})
    assert r.status_code == 200


def test_unknown_model_refused_by_default(server):
    r = server.post("/v1/chat/completions", {"model": "gpt-4o", "messages": MSG, "max_tokens": 2})
    assert r.status_code == 404


def test_ui_page(server):
    r = server.get("/")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/html")
    with open(os.path.join(ROOT, "server", "ui", "index.html"), "rb") as f:
        assert r.content == f.read()
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    # Self-contained: nothing fetched from elsewhere.
    text = r.text.lower()
    for bad in ("http://", "https://", "<link", "src=\"//", "@import"):
        assert bad not in text, bad
    assert server.get("/index.html").status_code in (200, 404)
    assert requests.head(server.url + "/", timeout=10).status_code == 200


def test_ui_needs_no_key(start_server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("sk-1\n")
    s = start_server("--api-keys-file", str(keys))
    assert s.get("/").status_code == 200
    assert s.get("/v1/models").status_code == 401


def test_no_ui(start_server):
    s = start_server("--no-ui")
    assert s.get("/").status_code == 404
