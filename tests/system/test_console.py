"""The web console at ``/ui`` in a real headless Chromium (selenium), against a real node
with authentication on: log in with a token, create a queue, send, browse, edit
settings, see subscriptions, the live queues table and the cluster view; the
streams pages with a live tail; a dead-letter queue's sources, redrive and purge
with their progress; the batches page following a batch to completion. Each
page is saved as a PNG (to ``$DYNAQ_CONSOLE_SCREENSHOTS`` when set: the README's
``docs/console/`` pictures come from this test)."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.client import Client, NewMessage
from dynaq.core.batch_items import BATCH_ITEM_ATTRIBUTE
from dynaq.testing.cluster import start_haproxy
from dynaq.testing.process import NodeProcess, node_process
from tests.fixtures.nodes import require_haproxy

TOKEN = "console-0123456789abcdef"

selenium = pytest.importorskip("selenium")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


def _chromium() -> tuple[str, str]:
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        why = "chromium and chromedriver are not installed (scripts/deps/chromium.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} in CI")
        pytest.skip(why)
    return browser, driver


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(
        tmp_path_factory.mktemp("console"), env={"DYNAQ_AUTH_TOKENS": f"ops:{TOKEN}:admin=*"}
    )
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    binary, driver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,860",
    ):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("DYNAQ_CONSOLE_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("console-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _text(b: webdriver.Chrome, css: str, contains: str, timeout_s: float = 15) -> str:
    """The element's text once it contains ``contains``, read in the same look (the
    page may re-render the element between a wait and a second lookup)."""

    def found(driver: webdriver.Chrome) -> str | bool:
        text = str(driver.find_element(By.CSS_SELECTOR, css).text)
        return text if contains in text else False

    wait = WebDriverWait(b, timeout_s, ignored_exceptions=[StaleElementReferenceException])
    return str(wait.until(found))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_console_in_a_real_browser(
    node: NodeProcess, browser: webdriver.Chrome, shots: Path
) -> None:
    b = browser
    b.get(f"{node.url}/ui")  # redirected to /ui/
    WebDriverWait(b, 15).until(ec.visibility_of_element_located((By.ID, "login")))
    assert b.current_url == f"{node.url}/ui/"
    b.find_element(By.ID, "token").send_keys(TOKEN)
    b.save_screenshot(str(shots / "login.png"))
    b.find_element(By.ID, "login-button").click()
    _text(b, "#queues-page h2", "Queues")

    # Create a queue from the page.
    b.find_element(By.ID, "new-queue").send_keys("orders")
    vt = b.find_element(By.ID, "new-vt")
    vt.clear()
    vt.send_keys("45")
    b.find_element(By.CSS_SELECTOR, "#create button").click()
    assert _text(b, "#queue-name", "orders") == "orders"
    with Client(node.url, token=TOKEN) as c:
        assert c.describe_queue("orders").settings.visibility_timeout_s == 45

        # Send two messages from the page; the browser shows them without locking them.
        for body in ("first order", "second <b>order</b>"):
            b.find_element(By.ID, "send-body").send_keys(body)
            b.find_element(By.CSS_SELECTOR, "#send button").click()
            _text(b, "#messages", body)
        assert _text(b, "#figures", "depth 2")
        stored = c.browse("orders").messages
        assert [m.body for m in stored] == [b"first order", b"second <b>order</b>"]
        assert str(stored[0].id) in b.find_element(By.ID, "messages").text
        assert c.describe_queue("orders").in_flight == 0  # browsing took nothing

        # Edit settings.
        field = b.find_element(By.ID, "set-vt")
        field.clear()
        field.send_keys("90")
        b.find_element(By.ID, "save").click()
        _text(b, "#saved", "saved")
        assert c.describe_queue("orders").settings.visibility_timeout_s == 90

        # Subscriptions show up.
        c.create_topic("order-events")
        c.subscribe("order-events", "orders")
        b.refresh()
        _text(b, "#subscriptions", "order-events")
        b.save_screenshot(str(shots / "queue.png"))

        # The queues table is live: a message sent elsewhere appears within a refresh.
        b.get(f"{node.url}/ui/#/queues")
        _text(b, "#queues", "orders")
        c.send("orders", "third")
        row = _text(b, "#queues tbody tr", "orders 3")
        assert row.split()[:3] == ["orders", "3", "0"]
        b.save_screenshot(str(shots / "queues.png"))

    b.get(f"{node.url}/ui/#/cluster")
    assert "serving" in _text(b, "#health", "serving")
    assert "dynaq-1" in _text(b, "#members", "dynaq-1")
    b.save_screenshot(str(shots / "cluster.png"))
    assert b.find_element(By.ID, "error").text == ""
    for name in ("login", "queue", "queues", "cluster"):
        assert (shots / f"{name}.png").stat().st_size > 5000


@pytest.mark.slow
def test_the_console_works_through_haproxy(
    node: NodeProcess, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    require_haproxy()
    lb = start_haproxy(tmp_path, [node.url.removeprefix("http://")])
    try:
        with Client(node.url, token=TOKEN) as c:
            c.create_queue("through-lb")
            c.send("through-lb", "via haproxy")
        b = browser
        b.get(f"{lb.url}/ui")  # another origin: the token is asked for again
        WebDriverWait(b, 15).until(ec.visibility_of_element_located((By.ID, "login")))
        b.find_element(By.ID, "token").send_keys(TOKEN)
        b.find_element(By.ID, "login-button").click()
        assert _text(b, "#queues", "through-lb")
        b.get(f"{lb.url}/ui/#/queue/through-lb")
        assert "via haproxy" in _text(b, "#messages", "via haproxy")
        # A live tail through the balancer: chunked responses pass as they come.
        with Client(node.url, token=TOKEN) as c:
            c.declare_stream("lb-ticks", PRICES, "ts")
            c.append("lb-ticks", [{"ts": 1, "price": 1.0}])
            b.get(f"{lb.url}/ui/#/stream/lb-ticks")
            _text(b, "#tail tbody", '{"ts":1,"price":1.0}')
            c.append("lb-ticks", [{"ts": 2, "price": 2.0}])
            _text(b, "#tail tbody", '{"ts":2,"price":2.0}')
            # A batch followed through the balancer (no item: complete when closed).
            batch = c.open_batch(user_key="via-lb")
            b.get(f"{lb.url}/ui/#/batches/exact/{batch}")
            _text(b, "#batch-state", "open, not complete")
            assert c.close_batch(batch) is True
            _text(b, "#batch-state", "closed, complete")
            assert "via-lb" in b.find_element(By.ID, "batch-user-key").text
            b.get(f"{lb.url}/ui/#/cluster")
            c.delete_stream("lb-ticks")
        assert "serving" in _text(b, "#health", "serving")
    finally:
        lb.stop()


def _signed_in(b: webdriver.Chrome, url: str, page: str) -> None:
    """Open ``page`` of the console at ``url`` with the token already in this tab."""
    b.get(f"{url}/ui/")
    b.execute_script("sessionStorage.setItem('dynaq-token', arguments[0])", TOKEN)
    b.get(f"{url}/ui/{page}")
    b.refresh()  # only the hash changed: load the page again, now with the token


PRICES = {
    "type": "object",
    "properties": {"ts": {"type": "integer"}, "price": {"type": "number"}},
    "required": ["ts", "price"],
}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_streams_page_and_live_tail(
    node: NodeProcess, browser: webdriver.Chrome, shots: Path
) -> None:
    b = browser
    with Client(node.url, token=TOKEN) as c:
        c.declare_stream("prices", PRICES, "ts")
        c.append("prices", [{"ts": t, "price": 100.0 + t} for t in range(1, 4)])
        _signed_in(b, node.url, "#/streams")
        row = _text(b, "#streams tbody tr", "prices")
        assert row.split()[:4] == ["prices", "3", "ts", "1"]
        b.save_screenshot(str(shots / "streams.png"))

        b.find_element(By.LINK_TEXT, "prices").click()
        _text(b, "#tail-state", "live")
        _text(b, "#tail tbody", '{"ts":3')
        assert len(b.find_elements(By.CSS_SELECTOR, "#tail tbody tr")) == 3
        assert '"required"' in str(b.find_element(By.ID, "schema").get_attribute("textContent"))

        # Appended elsewhere: it shows up without a reload.
        c.append("prices", [{"ts": 4, "price": 104.5}])
        _text(b, "#tail tbody", '{"ts":4,"price":104.5}')
        # Appended from the page; a bad entry is a message, not a broken page.
        b.find_element(By.ID, "entry").send_keys('{"ts": 5, "price": 99}')
        b.find_element(By.CSS_SELECTOR, "#append button").click()
        _text(b, "#tail tbody", '{"ts":5,"price":99}')
        assert _text(b, "#stream-size", "5") == "5"
        assert [r.text.split()[0] for r in b.find_elements(By.CSS_SELECTOR, "#tail tbody tr")] == [
            "0", "1", "2", "3", "4",
        ]  # fmt: skip
        assert not b.find_element(By.ID, "login").is_displayed()
        b.save_screenshot(str(shots / "stream.png"))

        # The node restarts under the open tail: it reconnects from the next index.
        node.kill()
        node.start()
        with Client(node.url, token=TOKEN) as fresh:  # c's kept-alive connection died with it
            fresh.append("prices", [{"ts": 7, "price": 7.0}])
        _text(b, "#tail tbody", '{"ts":7,"price":7.0}')
        assert _text(b, "#tail-state", "live") == "live"
        rows = b.find_elements(By.CSS_SELECTOR, "#tail tbody tr")
        assert [r.text.split()[0] for r in rows] == ["0", "1", "2", "3", "4", "5"]
        b.find_element(By.ID, "entry").send_keys("{nope")
        b.find_element(By.CSS_SELECTOR, "#append button").click()
        assert "not JSON" in _text(b, "#error", "not JSON")
        b.find_element(By.ID, "entry").clear()
        b.find_element(By.ID, "entry").send_keys('{"ts": 6}')
        b.find_element(By.CSS_SELECTOR, "#append button").click()
        assert "invalid_input" in _text(b, "#error", "invalid_input")  # the schema wants a price

        # Leaving the page closes the tail: the stream deletes at once, the page stays quiet.
        b.get(f"{node.url}/ui/#/queues")
        _text(b, "#queues-page h2", "Queues")
        c.delete_stream("prices")
        assert b.find_element(By.ID, "error").text == ""
    for name in ("streams", "stream"):
        assert (shots / f"{name}.png").stat().st_size > 5000


def _patch(url: str, queue: str, body: dict[str, object]) -> None:
    req = urllib.request.Request(
        f"{url}/v1/queues/{queue}",
        data=json.dumps(body).encode(),
        method="PATCH",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_dead_letters_redrive_and_purge(
    node: NodeProcess, browser: webdriver.Chrome, shots: Path
) -> None:
    b = browser
    with Client(node.url, token=TOKEN) as c:
        c.create_queue("payments")
        c.create_queue("payments-dlq")
        policy = {"dead_letter_queue": "payments-dlq", "max_receive_count": 1}
        _patch(node.url, "payments", {"redrive_policy": policy})
        c.enqueue("payments", ["pay 1", "pay 2", "pay 3"])
        # Received once and given back: the next receive moves each to the DLQ.
        deadline = time.monotonic() + 20
        while c.describe_queue("payments-dlq").depth < 3:
            assert time.monotonic() < deadline, c.describe_queue("payments-dlq")
            got = c.receive("payments", 10, visibility_timeout_s=30)
            if got:
                c.release("payments", [m.id for m in got], got[0].addr)
        assert c.describe_queue("payments").depth == 0

        _signed_in(b, node.url, "#/queue/payments")
        assert "payments-dlq" in _text(b, "#dlq-policy", "received 1 times go to payments-dlq")
        b.find_element(By.LINK_TEXT, "payments-dlq").click()
        _text(b, "#queue-name", "payments-dlq")
        assert _text(b, "#dlq-sources", "payments").endswith("payments")
        assert "depth 3" in _text(b, "#figures", "depth 3")
        b.find_element(By.ID, "redrive-rate").send_keys("50")
        b.find_element(By.ID, "redrive-button").click()
        assert _text(b, "#task-progress", "redrive done") == "redrive done: 3 moved, 0 skipped"
        assert b.find_element(By.ID, "task-bar").get_attribute("value") == "3"
        assert "depth 0" in _text(b, "#figures", "depth 0")
        assert b.find_element(By.ID, "messages").find_elements(By.CSS_SELECTOR, "tbody tr") == []
        assert not b.find_element(By.ID, "login").is_displayed()
        b.save_screenshot(str(shots / "dead-letters.png"))
        assert c.describe_queue("payments").depth == 3  # back where they came from
        assert c.describe_queue("payments-dlq").depth == 0

        # Purge from the page (after a confirmation).
        b.get(f"{node.url}/ui/#/queue/payments")
        _text(b, "#figures", "depth 3")
        b.find_element(By.ID, "purge").click()
        WebDriverWait(b, 10).until(ec.alert_is_present())
        b.switch_to.alert.accept()
        assert _text(b, "#task-progress", "purge done") == "purge done: 3 moved, 0 skipped"
        assert c.describe_queue("payments").depth == 0
        # A refused redrive (into itself) is shown, not thrown.
        b.find_element(By.ID, "redrive-to").send_keys("payments")
        b.find_element(By.ID, "redrive-button").click()
        assert "invalid_input" in _text(b, "#error", "invalid_input")

        # A slow redrive (one a second) is stopped from the page: what moved stays moved.
        c.enqueue("payments-dlq", [f"late {i}" for i in range(30)])
        b.get(f"{node.url}/ui/#/queue/payments-dlq")
        _text(b, "#figures", "depth 30")
        b.find_element(By.ID, "redrive-to").send_keys("payments")
        b.find_element(By.ID, "redrive-rate").send_keys("1")
        b.find_element(By.ID, "redrive-button").click()
        WebDriverWait(b, 10).until(lambda d: d.find_element(By.ID, "task-cancel").is_displayed())
        b.find_element(By.ID, "task-cancel").click()
        assert _text(b, "#task-progress", "redrive cancelled").startswith("redrive cancelled: ")
        assert not b.find_element(By.ID, "task-cancel").is_displayed()
        moved = c.describe_queue("payments").depth
        assert moved < 20 and c.describe_queue("payments-dlq").depth == 30 - moved
    assert (shots / "dead-letters.png").stat().st_size > 5000


def _look_up(b: webdriver.Chrome, batch_id: str, mode: str = "exact") -> None:
    field = b.find_element(By.ID, "batch-id-input")
    field.clear()
    field.send_keys(batch_id)
    Select(b.find_element(By.ID, "batch-mode-input")).select_by_value(mode)
    b.find_element(By.CSS_SELECTOR, "#lookup button").click()


def _polling(b: webdriver.Chrome) -> bool:
    return bool(b.execute_script("return batchPolling !== null"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_batches_page_follows_a_batch_to_completion(
    node: NodeProcess, browser: webdriver.Chrome, shots: Path
) -> None:
    b = browser
    with Client(node.url, token=TOKEN) as c:
        c.create_queue("exports")
        c.create_queue("exports-dlq")
        _patch(
            node.url,
            "exports",
            {"redrive_policy": {"dead_letter_queue": "exports-dlq", "max_receive_count": 1}},
        )
        batch = c.open_batch(user_key="nightly-export")
        items = [i for block in c.add_items(batch, 3) for i in block.item_ids()]
        assert len(items) == 3
        c.enqueue(
            "exports",
            [NewMessage(f"row {n}", {BATCH_ITEM_ATTRIBUTE: i}) for n, i in enumerate(items)],
        )

        _signed_in(b, node.url, "#/batches")
        _text(b, "#recent", "No batch looked up yet")
        # A malformed id is refused by the page; an unknown one is the node's 404, named.
        _look_up(b, "12ab")
        assert "malformed batch id" in _text(b, "#error", "malformed batch id")
        unknown = str(2**62)  # ids are drawn below 2^53: none has this one
        _look_up(b, unknown)
        error = _text(b, "#error", "batch_not_found")
        assert f"no exact batch {unknown}" in error
        assert b.find_element(By.ID, "batch").text == ""
        _text(b, "#recent", "No batch looked up yet")  # a mistyped id is not remembered

        # Looked up: open, 3 items in one block, nothing failed yet, polled.
        _look_up(b, str(batch))
        assert _text(b, "#batch-state", "open, not complete") == "open, not complete"
        assert b.current_url.endswith(f"#/batches/exact/{batch}")
        assert _text(b, "#batch-id", str(batch)) == str(batch)
        assert _text(b, "#batch-progress", "3 items") == "3 items, some still pending"
        assert _text(b, "#batch-pending", "1 block(s) pending").startswith("1 block(s) pending")
        assert _text(b, "#batch-user-key", "nightly-export") == "User key: nightly-export"
        assert _text(b, "#failed-items", "No failed item") == "No failed item."
        assert b.find_element(By.ID, "batch-bar").get_attribute("value") in (None, "0")
        assert b.find_element(By.ID, "error").text == ""
        row = _text(b, "#recent tbody tr", str(batch))
        assert row.split()[:5] == [str(batch), "exact", "open,", "not", "complete"]
        assert _polling(b)

        # Two items acked: their messages are received and deleted.
        got = c.receive("exports", 10, visibility_timeout_s=30)
        assert len(got) == 3
        by_item = {(m.attributes or {})[BATCH_ITEM_ATTRIBUTE]: m for m in got}
        assert c.delete("exports", [by_item[i].id for i in items[:2]], got[0].addr) == 2
        # Exact mode counts unfinished blocks: one of 3 items left is still a block.
        assert c.describe_batch(batch).pending == 1
        time.sleep(1.5)  # a poll or two: still open, not complete
        assert b.find_element(By.ID, "batch-state").text == "open, not complete"

        # The third is given back and dead-lettered by the next receive: it fails.
        c.release("exports", [by_item[items[2]].id], got[0].addr)
        deadline = time.monotonic() + 20
        while c.describe_queue("exports-dlq").depth < 1:
            assert time.monotonic() < deadline, c.describe_queue("exports-dlq")
            c.receive("exports", 10, visibility_timeout_s=30)
        failed = _text(b, "#failed-items tbody", "dead_lettered")
        assert failed.split() == [items[2], "exports", str(by_item[items[2]].id), "dead_lettered"]
        assert _text(b, "#batch-progress", "3 of 3") == "3 of 3 items done"
        assert _text(b, "#batch-pending", "0 block(s)").startswith("0 block(s) pending")
        assert b.find_element(By.ID, "batch-state").text == "open, not complete"  # not closed yet

        # Closed: complete at once (every item acked or failed); polling stops.
        assert c.close_batch(batch) is True
        assert _text(b, "#batch-state", "closed, complete") == "closed, complete"
        assert _text(b, "#batch-poll", "no longer polled") == "complete: no longer polled"
        assert b.find_element(By.ID, "batch-bar").get_attribute("value") == "3"
        assert "completed 20" in b.find_element(By.ID, "batch-times").text
        row = _text(b, "#recent tbody tr", "closed, complete")
        assert row.split()[:4] == [str(batch), "exact", "closed,", "complete"]
        assert not _polling(b)
        assert not b.find_element(By.ID, "login").is_displayed()
        assert b.find_element(By.ID, "error").text == ""
        b.save_screenshot(str(shots / "batches.png"))

        # The recent list outlives the page (localStorage): back to it from elsewhere.
        b.get(f"{node.url}/ui/#/cluster")
        _text(b, "#health", "serving")
        b.get(f"{node.url}/ui/#/batches")
        row = _text(b, "#recent tbody tr", str(batch))
        assert row.split()[:4] == [str(batch), "exact", "closed,", "complete"]
        b.find_element(By.LINK_TEXT, str(batch)).click()
        assert _text(b, "#batch-state", "closed, complete") == "closed, complete"

        # Estimated mode: one counter, so items done are known; the wrong mode is named.
        est = c.open_batch("estimated", user_key="est")
        c.incr_batch(est, 4)
        c.decr_batches({est: 1})
        _look_up(b, str(est))
        assert "wrong_batch_mode" in _text(b, "#error", "wrong_batch_mode")
        assert not _polling(b)
        _look_up(b, str(est), "estimated")
        assert _text(b, "#batch-progress", "1 of 4") == "1 of 4 items done"
        assert _text(b, "#batch-pending", "3 item(s)") == "3 item(s) pending"
        assert _text(b, "#failed-items", "do not record") != ""
        c.decr_batches({est: 1})
        assert _text(b, "#batch-progress", "2 of 4") == "2 of 4 items done"  # live
        assert b.find_element(By.ID, "batch-bar").get_attribute("value") == "2"
        assert _polling(b)
        # Leaving the page stops the polling of an incomplete batch.
        b.get(f"{node.url}/ui/#/queues")
        _text(b, "#queues-page h2", "Queues")
        assert not _polling(b)
        rows = b.execute_script("return JSON.parse(localStorage.getItem('dynaq-recent-batches'))")
        assert [(r["id"], r["mode"], r["state"]) for r in rows] == [
            (str(est), "estimated", "open, not complete"),
            (str(batch), "exact", "closed, complete"),
        ]
    assert (shots / "batches.png").stat().st_size > 5000
