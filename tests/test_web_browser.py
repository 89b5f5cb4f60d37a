"""The web view in a real browser: `sobolev-index serve` on the quickstart
index, driven in headless Chromium through chromedriver's W3C WebDriver
protocol (plain HTTP and JSON, so no driver library is needed). Takes the
screenshot the README shows, and replaces docs/figures/web-search.png with
it only when SOBOLEV_INDEX_UPDATE_SCREENSHOT=1 (a test run leaves the
checkout as it found it).

Slow (it builds the quickstart index): run with `pytest -m slow
tests/test_web_browser.py`. Skipped where Chromium or chromedriver is not
installed (Debian: apt-get install chromium chromium-driver)."""
import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from _support import REPO_DIR
from _support.processes import stop_process

pytest.importorskip("datasette", reason="the web view needs Datasette (the [web] extra)")

from test_web import start_server, stop_server  # noqa: E402

pytestmark = pytest.mark.slow

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                               "google-chrome"))), None)
CHROMEDRIVER = shutil.which("chromedriver")
QUERY = "read a file line by line"
FIGURE = os.path.join(REPO_DIR, "docs", "figures", "web-search.png")
UPDATE_FIGURE = os.environ.get("SOBOLEV_INDEX_UPDATE_SCREENSHOT") == "1"
# The W3C WebDriver name of an element reference in JSON.
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def free_port():
    """A port no one listens on now (chromedriver takes its port as an
    argument, so it cannot be given 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class WebDriver:
    """Just the WebDriver commands this test needs."""

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.session = None

    def call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"WebDriver {method} {path}: {exc.read()[:500]!r}") from None

    def start(self):
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1000,760", "--hide-scrollbars"]
        value = self.call("POST", "/session", {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}})
        self.session = value["sessionId"]

    def s(self, path):
        return f"/session/{self.session}{path}"

    def find(self, css):
        return self.call("POST", self.s("/element"), {"using": "css selector", "value": css})[ELEMENT]

    def find_all(self, css):
        return [e[ELEMENT] for e in self.call("POST", self.s("/elements"),
                                              {"using": "css selector", "value": css})]

    def text(self, element):
        return self.call("GET", self.s(f"/element/{element}/text"))


@pytest.fixture(scope="module")
def quickstart_index(tmp_path_factory):
    from sobolev_index.ingest.quickstart import run_quickstart

    directory = tmp_path_factory.mktemp("quickstart") / "demo"
    run_quickstart(str(directory), log=lambda line: None)
    return directory / "index"


@pytest.fixture
def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("needs Chromium and chromedriver (apt-get install chromium chromium-driver)")
    port = free_port()
    driver_proc = subprocess.Popen([CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    driver = WebDriver(port)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                driver.call("GET", "/status", timeout=5)
                break
            except (OSError, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        driver.start()
        yield driver
    finally:
        if driver.session is not None:
            try:
                driver.call("DELETE", driver.s(""), timeout=30)
            except (OSError, AssertionError):
                pass
        stop_process(driver_proc)


def test_search_in_a_browser_finds_fileinput_and_saves_the_screenshot(quickstart_index, browser,
                                                                     tmp_path):
    proc, url = start_server(quickstart_index)
    try:
        browser.call("POST", browser.s("/url"), {"url": url})
        box = browser.find('input[name="q"]')
        browser.call("POST", browser.s(f"/element/{box}/value"), {"text": QUERY})
        browser.call("POST", browser.s(f"/element/{browser.find('input[type=submit]')}/click"),
                     {})
        deadline = time.monotonic() + 30
        while not browser.find_all("#results tbody tr"):
            assert time.monotonic() < deadline, "no results appeared"
            time.sleep(0.2)
        current = browser.call("GET", browser.s("/url"))
        assert "q=read+a+file+line+by+line" in current, current
        rows = browser.find_all("#results tbody tr")
        assert len(rows) == 10
        first_key = browser.text(browser.find("#results tbody tr td:nth-child(3) a"))
        assert first_key.startswith("fileinput."), first_key
        png = base64.b64decode(browser.call("GET", browser.s("/screenshot")))
        assert png.startswith(b"\x89PNG") and len(png) < 400_000
        shot = tmp_path / "web-search.png"
        shot.write_bytes(png)
        if UPDATE_FIGURE:
            os.makedirs(os.path.dirname(FIGURE), exist_ok=True)
            shutil.copyfile(shot, FIGURE)
        # The first result's link opens its document page, with neighbours.
        browser.call("POST", browser.s(f"/element/{browser.find('#results td a')}/click"), {})
        deadline = time.monotonic() + 30
        while not browser.find_all("#neighbours tbody tr"):
            assert time.monotonic() < deadline, "the document page did not load"
            time.sleep(0.2)
        assert browser.text(browser.find("h1")) == first_key
    finally:
        stop_server(proc)
