"""The status page at ``GET /``, driven in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, through selenium) against a daemon moving messages between two private nodes.

Set ``PUMPD_PAGE_SCREENSHOTS=DIR`` to keep screenshots of the page at each step of the live test
(``live.png`` is the one in the README)."""

from __future__ import annotations

import os
import shutil
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from pumpd.testing.localnode import LocalNode

from tests.support.amqp_helpers import SteadyPublisher
from tests.support.daemon_helpers import Daemon, running_state, shovel_def

CHROMIUM = "/usr/bin/chromium"


CHROMEDRIVER = "/usr/bin/chromedriver"


SCREENSHOTS = os.environ.get("PUMPD_PAGE_SCREENSHOTS")


def shot(driver: Any, name: str) -> None:
    if SCREENSHOTS:
        driver.save_screenshot(os.path.join(SCREENSHOTS, f"{name}.png"))


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium. Missing binaries skip the test on a workstation; CI (CI=true)
    installs them (.ci/run), so there they fail it."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing or not _has_selenium():
        why = f"missing {', '.join(missing) or 'selenium'} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors, CSP
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1500,800", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _has_selenium() -> bool:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return True


# What the page shows, read from its DOM in one go (it is rebuilt on every poll).
ROWS_JS = """
const out = {};
for (const tr of document.querySelectorAll('tr.shovel')) {
  out[tr.dataset.name] = {state: tr.querySelector('.st').textContent, rate: Number(tr.dataset.rate),
                          restarts: Number(tr.dataset.restarts), text: tr.innerText};
}
return out;
"""


def rows(driver: Any) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = driver.execute_script(ROWS_JS)
    return result


def wait_page(d: Daemon | None, driver: Any, predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = rows(driver)
        value = predicate(last)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"the page did not show {what}; it shows {last}\n"
                         + (d.log() if d is not None else ""))


def button(driver: Any, name: str, action: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'tr.shovel[data-name="{name}"] '
                                                f'button[data-act="{action}"]')


def answer_confirm(driver: Any, accept: bool) -> str:
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    alert = WebDriverWait(driver, 10).until(expected_conditions.alert_is_present())
    text: str = alert.text
    if accept:
        alert.accept()
    else:
        alert.dismiss()
    return text


def give_token(driver: Any, token: str) -> None:
    """What a user does when the page asks for the token: paste it, press the button."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(lambda drv: drv.find_element(By.ID, "login").is_displayed())
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "use-token").click()


def test_page_follows_the_daemon_live(pumpd_daemon, browser: Any, node_a: LocalNode,
                                      vhost_a: str, node_b: LocalNode, vhost_b: str) -> None:
    from selenium.webdriver.common.by import By

    src, dst = node_a.uri(vhost_a), node_b.uri(vhost_b)
    d = pumpd_daemon({"orders": shovel_def(src, "orders", dst, "orders-copy",
                                         reconnect_delay=0.5)})
    status, _ = d.request("PUT", "/api/shovels/audit",
                          {"src-uri": src, "src-queue": "audit", "dest-uri": dst,
                           "dest-queue": "audit-copy"})
    assert status == 201
    with SteadyPublisher(src, ["orders"], 400, declare=True) as p1, \
            SteadyPublisher(src, ["audit"], 400, declare=True) as p2:
        browser.get(f"http://127.0.0.1:{d.port}/")
        assert browser.title == "pumpd shovels"
        give_token(browser, d.token())

        # both shovels, live, with a rate above zero
        wait_page(d, browser, lambda r: set(r) == {"orders", "audit"}
                  and all(x["state"] == "running" and x["rate"] > 0 for x in r.values()),
                  60, "both shovels running with a rate above zero")
        text = rows(browser)["orders"]["text"]
        doc = d.shovel("orders")
        assert doc["dest_uri"] in text and doc["src_uri"] in text and vhost_b in doc["dest_uri"]
        assert "queue 'orders'" in text and "key 'orders-copy'" in text
        # how far behind: the source queue's backlog, once the shovel has read it
        wait_page(d, browser, lambda r: "waiting in the source" in r["orders"]["text"], 30,
                  "the source backlog in the orders row")
        # the migration's summary line, as `pumpd status` prints it first
        line = browser.find_element("id", "summary").text
        assert line.startswith("2 shovels: 2 running; ") and "left in the source queues" in line \
            and " msg/s, " in line, line
        assert "to empty" in line or line.endswith("the source queues are empty"), line
        assert button(browser, "orders", "delete").get_attribute("disabled")  # config file's
        # a row expands to its workers and definition
        browser.execute_script(
            "document.querySelector('tr.shovel[data-name=\"orders\"] td').click()")
        wait_page(d, browser, lambda r: "ack mode" in browser.execute_script(
            "return document.querySelector('tr.detail')?.innerText || ''"), 10, "the detail row")
        detail = browser.execute_script("return document.querySelector('tr.detail').innerText")
        assert str(d.worker_pids("orders")[0]) in detail and "on_confirm" in detail, detail
        if SCREENSHOTS:
            time.sleep(20)  # a sparkline with some history
        shot(browser, "live")

        # A worker killed: restarting, then running again with a new pid. A replacement comes up
        # within a second, between two polls of the page; so that the page is sure to see it
        # restarting, the source vhost refuses new connections until the page has shown it.
        (pid,) = d.worker_pids("orders")
        node_a.ctl("set_vhost_limits", "-p", vhost_a, '{"max-connections": 0}')
        try:
            os.kill(pid, signal.SIGKILL)
            seen: list[str] = []

            def track(r: dict[str, dict[str, Any]]) -> list[str]:
                if not seen or seen[-1] != r["orders"]["state"]:
                    seen.append(r["orders"]["state"])
                return seen

            wait_page(d, browser, lambda r: "restarting" in track(r), 60, "orders restarting")
            shot(browser, "restarting")
        finally:
            node_a.ctl("set_vhost_limits", "-p", vhost_a, '{"max-connections": -1}')
        wait_page(d, browser, lambda r: track(r)[-1] == "running" and r["orders"]["restarts"] == 1,
                  60, "orders running again")
        assert seen[seen.index("restarting"):][-1] == "running", seen
        assert d.worker_pids("orders")[0] not in (None, pid)
        assert "1 restart" in rows(browser)["orders"]["text"]

        # the restart button: asks first; only an accepted confirmation restarts
        button(browser, "audit", "restart").click()
        assert 'Restart shovel "audit"?' in answer_confirm(browser, accept=False)
        (audit_pid,) = d.worker_pids("audit")
        button(browser, "audit", "restart").click()
        answer_confirm(browser, accept=True)
        d.wait_for(lambda: d.worker_pids("audit")[0] not in (None, audit_pid)
                   and running_state(d, "audit"), 60, "audit restarted")
        (w,) = d.shovel("audit")["workers"]
        assert w["restarts"] == 1 and w["last_exit"].startswith("restarted on request"), w
        wait_page(d, browser, lambda r: r["audit"]["restarts"] == 1
                  and r["audit"]["state"] == "running", 30, "audit restarted and running")
        assert "accepted (HTTP 202)" in browser.find_element("id", "flash").text

        # the delete button (a run-time shovel): asks, then the row goes
        button(browser, "audit", "delete").click()
        answer_confirm(browser, accept=True)
        wait_page(d, browser, lambda r: set(r) == {"orders"}, 60, "audit deleted")
        assert d.shovel("audit") is None

        # the destination blocked (a memory alarm): the shovel is not moving and stands out
        assert not browser.find_elements(By.CSS_SELECTOR, "tr.stalled")
        node_b.set_vm_memory_high_watermark(0)
        try:
            wait_page(d, browser, lambda r: r["orders"]["state"] == "blocked" and browser.
                      find_elements(By.CSS_SELECTOR, 'tr.stalled[data-name="orders"]'),
                      60, "orders blocked and marked stalled")
            assert "stalled:" in rows(browser)["orders"]["text"]
            shot(browser, "blocked")
        finally:
            node_b.set_vm_memory_high_watermark(0.4)
        wait_page(d, browser, lambda r: r["orders"]["state"] == "running" and r["orders"]["rate"]
                  and not browser.find_elements(By.CSS_SELECTOR, "tr.stalled"),
                  60, "orders running again, no longer stalled")

        # the daemon goes away: the page says so
        assert not browser.find_element("id", "banner").is_displayed()
        assert d.stop() == 0
        wait_page(None, browser, lambda r: browser.find_element("id", "banner").is_displayed(),
                  30, "the stale-daemon notice")
        banner = browser.find_element("id", "banner").text
        assert "pumpd is not answering" in banner and "is not live" in banner, banner
        assert "stale" in browser.find_element("tag name", "body").get_attribute("class")
        shot(browser, "stale")
        assert p1.error is None and p2.error is None, (p1.error, p2.error)


def test_page_is_served_self_contained_and_cross_site_changes_stay_refused(
    pumpd_daemon, browser: Any, node_a: LocalNode, vhost_a: str
) -> None:
    uri = node_a.uri(vhost_a)
    d = pumpd_daemon({"s": shovel_def(uri, "in", uri, "out")})
    d.wait_for(lambda: running_state(d, "s"), 30, "running")
    with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/", timeout=10) as resp:
        page = resp.read().decode()
        assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
        csp = resp.headers["Content-Security-Policy"]
    assert "script-src 'sha256-" in csp and "frame-ancestors 'none'" in csp, csp
    assert page.startswith("<!doctype html>") and len(page) < 20_000
    # nothing fetched from elsewhere: no URL with a scheme or a protocol-relative one
    for needle in ("http:", "https:", "src=", "href=", "@import", "url("):
        assert needle not in page, needle
    assert d.request("POST", "/")[0] == 405

    here = f"127.0.0.1:{d.port}"
    for origin, host in [("http://evil.example", here),                      # another site
                         (f"http://evil.example:{d.port}", f"evil.example:{d.port}"),  # rebinding
                         (f"http://localhost:{d.port}", here)]:              # another origin
        status, doc = d.request("POST", "/api/shovels/s/restart",
                                headers={"Origin": origin, "Host": host})
        assert status == 403 and "other web sites" in doc["reason"], (origin, host, doc)
    (w,) = d.shovel("s")["workers"]
    assert w["restarts"] == 0
    # what a browser sends from the page itself
    status, _ = d.request("POST", "/api/shovels/s/restart",
                          headers={"Origin": f"http://{here}", "Host": here})
    assert status == 202

    # a name with markup in it shows as text: nothing from the API is taken for HTML
    name = '<i id="injected">x</i>'
    status, _ = d.request("PUT", "/api/shovels/" + urllib.parse.quote(name, safe=""),
                          {"src-uri": uri, "src-queue": "q2", "dest-uri": uri, "dest-queue": "q3"})
    assert status == 201
    browser.get(f"http://127.0.0.1:{d.port}/")
    # the page asks for the token; a wrong one is refused and asked for again
    give_token(browser, "w" * 43)
    wait_page(d, browser, lambda r: "That token was refused" in browser.find_element(
        "id", "refused").text and browser.find_element("id", "login").is_displayed(), 30,
        "the wrong token refused")
    assert not rows(browser)
    give_token(browser, d.token())
    wait_page(d, browser, lambda r: name in r and name in r[name]["text"], 30, "the odd name")
    assert not browser.find_element("id", "login").is_displayed()
    # kept in the tab (sessionStorage), nowhere else: a reload does not ask again
    assert browser.execute_script("return localStorage.length") == 0
    assert browser.execute_script("return document.cookie") == ""
    browser.refresh()
    wait_page(d, browser, lambda r: name in r, 30, "the rows after a reload")
    assert not browser.find_element("id", "login").is_displayed()
    # the answers refused for want of a token were logged; nothing else may be
    refused = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert all("401" in e["message"] for e in refused), refused
    assert browser.execute_script("return document.getElementById('injected')") is None
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors  # e.g. a Content-Security-Policy refusal

