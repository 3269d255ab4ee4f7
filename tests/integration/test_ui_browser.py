"""The built-in chat page in a real headless Chromium (Debian's chromium + chromium-driver,
driven with selenium): type a message, see the reply stream in with its time to first token
and tokens/s, press Stop mid-reply and see /metrics count the sequence as cancelled, reload
and find the conversation kept in localStorage, and enter the API key once when the server
requires one. Screenshots go to build/ui-*.png as artifacts."""
import os
import shutil
import time

import pytest

from conftest import ROOT

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
ART = os.path.join(ROOT, "build")
CANCELLED = 'gemmad_request_success_total{finished_reason="cancelled"}'


@pytest.fixture
def browser():
    if not CHROMIUM or not DRIVER:
        pytest.skip("chromium / chromedriver not installed (deploy/setup-deps.sh)")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1100,800", "--disable-extensions", "--no-first-run"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    d.set_page_load_timeout(30)
    yield d
    d.quit()


def shot(d, name):
    os.makedirs(ART, exist_ok=True)
    d.save_screenshot(os.path.join(ART, "ui-%s.png" % name))


def replies(d):
    return d.find_elements(By.CSS_SELECTOR, ".msg.assistant")


def set_field(d, el_id, value):
    el = d.find_element(By.ID, el_id)
    el.clear()
    el.send_keys(str(value))


def open_fresh(d, url, max_tokens, temperature=None):
    """The page with empty storage, settings open, max tokens (and temperature) set."""
    d.get(url + "/")
    d.execute_script("localStorage.clear()")
    d.refresh()
    d.find_element(By.ID, "toggle-settings").click()
    if temperature is not None:
        set_field(d, "temperature", temperature)
    set_field(d, "max-tokens", max_tokens)


def send(d, text):
    box = d.find_element(By.ID, "input")
    box.send_keys(text)
    d.find_element(By.ID, "send").click()


def test_chat_stream_stop_and_storage(browser, start_server):
    s = start_server("--max-tokens", "2000", "--ctx-size", "2048")
    d = browser
    open_fresh(d, s.url, 12, temperature=0)

    # A short reply: streamed text, then its stats.
    send(d, "Say hello in one short sentence.")
    WebDriverWait(d, 60).until(lambda x: "done" in replies(x)[-1].get_attribute("class"))
    r = replies(d)[-1]
    assert r.find_element(By.CLASS_NAME, "text").text.strip()
    stats = r.find_element(By.CLASS_NAME, "stats").text
    assert "first token" in stats and "ms" in stats and "tokens" in stats, stats
    assert "error" not in r.find_element(By.CLASS_NAME, "error").text.lower()
    model = d.find_element(By.ID, "model").text
    assert model and model == s.get("/v1/models").json()["data"][0]["id"]
    shot(d, "chat")

    # A long reply: stop it once text is streaming; the server cancels the sequence.
    before = s.metrics().get(CANCELLED, 0)
    set_field(d, "max-tokens", 1500)
    send(d, "Write a very long story about a dragon who learns to bake bread.")
    WebDriverWait(d, 60).until(
        lambda x: len(x.find_elements(By.CSS_SELECTOR, ".msg.assistant.streaming .text")) and
        len(x.find_element(By.CSS_SELECTOR, ".msg.assistant.streaming .text").text) > 20)
    assert d.find_element(By.ID, "send").get_attribute("disabled")
    n_before_stop = len(replies(d)[-1].find_element(By.CLASS_NAME, "text").text)
    d.find_element(By.ID, "stop").click()
    WebDriverWait(d, 10).until(lambda x: "done" in replies(x)[-1].get_attribute("class"))
    r = replies(d)[-1]
    assert "stopped" in r.find_element(By.CLASS_NAME, "stats").text
    assert len(r.find_element(By.CLASS_NAME, "text").text) >= n_before_stop
    deadline = time.time() + 10
    while time.time() < deadline and s.metrics().get(CANCELLED, 0) <= before:
        time.sleep(0.2)
    m = s.metrics()
    assert m.get(CANCELLED, 0) == before + 1, m
    assert m.get("gemmad_requests_running", 0) == 0
    shot(d, "stopped")

    # The conversation survives a reload (localStorage).
    d.refresh()
    WebDriverWait(d, 10).until(lambda x: len(replies(x)) == 2)
    users = d.find_elements(By.CSS_SELECTOR, ".msg.user")
    assert [u.text for u in users] == ["Say hello in one short sentence.",
                                       "Write a very long story about a dragon who learns to "
                                       "bake bread."]
    assert "stopped" in replies(d)[-1].find_element(By.CLASS_NAME, "stats").text
    d.find_element(By.ID, "new-chat").click()
    assert not replies(d)


def test_api_key_asked_once(browser, start_server, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("sk-browser-1\n")
    s = start_server("--api-keys-file", str(keys))
    d = browser
    open_fresh(d, s.url, 4)
    send(d, "Hi")
    WebDriverWait(d, 20).until(lambda x: x.find_element(By.ID, "api-key").is_displayed())
    shot(d, "key")
    d.find_element(By.ID, "api-key").send_keys("sk-browser-1")
    d.find_element(By.ID, "api-key-save").click()
    WebDriverWait(d, 60).until(lambda x: "done" in replies(x)[-1].get_attribute("class"))
    assert replies(d)[-1].find_element(By.CLASS_NAME, "text").text.strip()
    assert not replies(d)[-1].find_element(By.CLASS_NAME, "error").text
    # Kept: a second message (and a reload) does not ask again.
    d.refresh()
    send(d, "Hi again")
    WebDriverWait(d, 60).until(lambda x: len(replies(x)) == 2 and
                               "done" in replies(x)[-1].get_attribute("class"))
    assert not d.find_element(By.ID, "api-key").is_displayed()
    assert d.execute_script("return localStorage.getItem('gemmad.apiKey')") == "sk-browser-1"
