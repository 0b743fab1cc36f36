"""The web console in a real headless Chromium (selenium, as ``test_console.py``), on what a
black-box probe found: a token limited to some queues uses the Queues and queue pages
(what it may not read is left out, quietly); the live Queues table refreshes one
refresh at a time, asks about the rows shown only, a few at a time; and a page that
fails shows its error alone, not under the page it replaced."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dynaq.client import Client
from dynaq.testing.process import NodeProcess, node_process
from tests.system.test_console import _chromium, _text

selenium = pytest.importorskip("selenium")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

ADMIN = "console-admin-0123456789"
READER = "console-jobs-reader-0123456789"
TOKENS = f"ops:{ADMIN}:admin=*,jobs:{READER}:read=queue/jobs-*"
MANY = 120
"""Queues for the fan-out test: more than a page of the table (50)."""

# Wraps the page's fetch: counts list and detail requests of the Queues page, the most
# detail requests in flight at once, whether a listing started while another refresh's
# requests were in flight, and delays each kind as the test says.
_COUNT_REQUESTS = """
const s = window.__probe = {inflight: 0, max: 0, perRefresh: [], overlap: false,
  delay: {list: 0, detail: 0}};
const orig = window.__origFetch || window.fetch;
window.__origFetch = orig;
window.fetch = async (url, opts) => {
  const path = new URL(String(url), location.href).pathname;
  const list = path === "/v1/queues", detail = /^\\/v2\\/queues\\/[^/]+$/.test(path);
  if (!list && !detail) return orig(url, opts);
  if (list) { if (s.inflight > 0) s.overlap = true; s.perRefresh.push(0); }
  s.inflight += 1;
  if (detail) { s.max = Math.max(s.max, s.inflight); s.perRefresh[s.perRefresh.length - 1] += 1; }
  try {
    await new Promise((r) => setTimeout(r, list ? s.delay.list : s.delay.detail));
    return await orig(url, opts);
  } finally { s.inflight -= 1; }
};
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("console-probe"), env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        with Client(p.url, token=ADMIN) as c:
            for queue in ("jobs-1", "other"):
                c.create_queue(queue)
            c.create_topic("events")
            c.send("jobs-1", "hello")
        yield p
    finally:
        p.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    binary, driver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield chrome
    finally:
        chrome.quit()


def _open(b: webdriver.Chrome, node: NodeProcess, token: str, hash_: str) -> None:
    """The console at ``hash_``, logged in with ``token`` (kept in the tab's session)."""
    b.get(f"{node.url}/ui/")
    b.execute_script("sessionStorage.setItem('dynaq-token', arguments[0])", token)
    b.get(f"{node.url}/ui/{hash_}")
    b.refresh()


def _error(b: webdriver.Chrome) -> str:
    return str(b.find_element(By.ID, "error").text)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_token_limited_to_some_queues_uses_the_console(
    node: NodeProcess, browser: webdriver.Chrome
) -> None:
    b = browser
    _open(b, node, READER, "#/queues")
    _text(b, "#queues", "jobs-1")
    time.sleep(2.5)  # a refresh later, still so
    rows = [r.text.split()[0] for r in b.find_elements(By.CSS_SELECTOR, "#queues tbody tr")]
    assert rows == ["jobs-1"] and _error(b) == ""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_token_limited_to_some_queues_sees_their_pages(
    node: NodeProcess, browser: webdriver.Chrome
) -> None:
    b = browser
    # The queue's page, though a topic exists that the token may not read.
    _open(b, node, READER, "#/queue/jobs-1")
    assert _text(b, "#queue-name", "jobs-1") == "jobs-1"
    assert "no topic" in _text(b, "#subscriptions", "no topic")
    assert "hello" in _text(b, "#messages", "hello")
    assert _error(b) == ""
    # A queue it may not read is still refused, by name.
    b.get(f"{node.url}/ui/#/queue/other")
    assert "forbidden" in _text(b, "#error", "forbidden")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_queue_refreshes_never_overlap(node: NodeProcess, browser: webdriver.Chrome) -> None:
    b = browser
    _open(b, node, ADMIN, "#/queues")
    _text(b, "#queues", "jobs-1")
    # A listing slower than the refresh period: the next refresh must wait for it.
    b.execute_script(_COUNT_REQUESTS + "s.delay.list = 2500;")
    time.sleep(9.5)
    probe: dict[str, Any] = b.execute_script("return window.__probe")
    assert not probe["overlap"], probe
    assert len(probe["perRefresh"]) >= 2, probe  # and it still refreshes
    assert _error(b) == ""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_refresh_asks_about_the_rows_shown_a_few_at_a_time(
    node: NodeProcess, browser: webdriver.Chrome
) -> None:
    with Client(node.url, token=ADMIN) as c:
        for i in range(MANY):
            c.create_queue(f"load-{i:03d}")
    total = MANY + 2
    b = browser
    _open(b, node, ADMIN, "#/queues")
    _text(b, "#queues", "load-000")
    b.execute_script(_COUNT_REQUESTS + "s.delay.detail = 100;")
    deadline = time.monotonic() + 30
    probe: dict[str, Any] = {}
    while time.monotonic() < deadline:
        probe = b.execute_script("return window.__probe")
        if len(probe["perRefresh"]) >= 3:  # two whole refreshes behind the third
            break
        time.sleep(0.5)
    done = probe["perRefresh"][:-1]
    assert len(done) >= 2, probe
    assert max(done) <= 50, probe  # the rows shown, not every queue
    assert probe["max"] <= 6, probe  # a few at a time
    assert not probe["overlap"], probe
    rows = b.find_elements(By.CSS_SELECTOR, "#queues tbody tr")
    assert len(rows) == 50
    assert _text(b, "#queues-range", "of") == f"queues 1\N{EN DASH}50 of {total}"
    b.find_element(By.ID, "queues-next").click()
    assert _text(b, "#queues-range", "51") == f"queues 51\N{EN DASH}100 of {total}"
    assert _error(b) == ""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_page_that_fails_shows_its_error_alone(
    node: NodeProcess, browser: webdriver.Chrome
) -> None:
    b = browser
    _open(b, node, ADMIN, "#/queues")
    _text(b, "#queues", "jobs-1")
    b.get(f"{node.url}/ui/#/queue/nope")
    assert "queue_not_found" in _text(b, "#error", "queue_not_found")
    assert b.find_elements(By.ID, "queues-page") == []
    assert b.find_element(By.ID, "view").text == ""
    time.sleep(2.5)  # no refresh of the page left brings it back
    assert b.find_elements(By.ID, "queues-page") == []
