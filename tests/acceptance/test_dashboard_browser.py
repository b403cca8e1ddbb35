"""The dashboard in a real browser (docs/adr/0023): Debian's chromium, driven by Selenium
through Debian's chromedriver (.ci/run installs both), against `alkstore dashboard` run as
a user runs it, on both engines. Screenshots land in artifacts/dashboard/ (git-ignored;
$ALKSTORE_ARTIFACTS elsewhere). Without the browser the tests skip, except under CI=true,
where that is a failure."""

from __future__ import annotations

import os
import shutil
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import alkstore
from tests.conftest import IN_CI, Backend
from tests.processes import ROOT, CliProcess

CHROMIUM = os.environ.get("ALKSTORE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ALKSTORE_CHROMEDRIVER", "/usr/bin/chromedriver")
TOKEN = "browser-test-token"
ARTIFACTS = Path(os.environ.get("ALKSTORE_ARTIFACTS", ROOT / "artifacts")) / "dashboard"

pytestmark = pytest.mark.slow


def _missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.access(path, os.X_OK) or shutil.which(path)):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,900")
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def dashboard(backend: Backend, tmp_path: Path) -> Iterator[tuple[alkstore.Store, str]]:
    """A migrated store and the URL of `alkstore dashboard --token` serving it."""
    with backend.migrated() as store:
        port = _free_port()
        args = ["--db", backend.url, "--namespace", backend.namespace, "--port", str(port)]
        proc = CliProcess("dashboard", [*args, "--token", TOKEN], tmp_path / "dashboard.log")
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    urllib.request.urlopen(base + "/login", timeout=1).close()
                    break
                except OSError:
                    assert proc.alive(), proc.describe()
                    assert time.monotonic() < deadline, proc.describe()
                    time.sleep(0.1)
            yield store, base
        finally:
            proc.terminate()
            proc.close()


def _until(check: Callable[[], bool], what: str, timeout: float = 15) -> None:
    """Wait for `check`; an element the live refresh swapped out meanwhile is looked up
    again (Selenium's StaleElementReferenceException)."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except StaleElementReferenceException:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _shot(driver: Any, backend: Backend, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{backend.name}-{name}.png"))


def test_counts_go_live_and_a_dead_letter_is_requeued_with_the_token(
    browser: Any, dashboard: tuple[alkstore.Store, str], backend: Backend
) -> None:
    from selenium.webdriver.common.by import By

    store, base = dashboard
    mail = store.queue("mail")
    mail.enqueue({"to": "dead@example.com"}, max_attempts=1)
    job = mail.claim()
    assert job is not None
    job.fail("smtp timeout")
    browser.get(base + "/")
    browser.delete_all_cookies()  # signed out (the browser is the module's)
    browser.get(base + "/")
    cell = '//tr[td/a[text()="mail"]]/td[2]'  # the ready count of queue mail
    _until(lambda: browser.find_element(By.XPATH, cell).text == "0", "the ready count 0")
    browser.execute_script("window.notReloaded = true")
    mail.enqueue_many([{"to": f"u{i}@example.com"} for i in range(7)])
    _until(lambda: browser.find_element(By.XPATH, cell).text == "7", "the ready count to be 7")
    assert browser.execute_script("return window.notReloaded") is True  # swapped in place
    _shot(browser, backend, "1-overview")

    # Not signed in: no buttons, and the endpoint refuses the browser's own POST.
    browser.get(base + "/queues/mail/dead")
    assert browser.find_elements(By.CSS_SELECTOR, "input[type=checkbox]") == []
    assert f'href="/jobs/{job.id}"' in browser.page_source
    browser.get(f"{base}/jobs/{job.id}")  # the dead letter, from the link on that page
    assert "smtp timeout" in browser.page_source
    assert browser.find_elements(By.CSS_SELECTOR, "form[method=post]") == []
    status = browser.execute_async_script(
        "const done = arguments[0]; fetch('/queues/mail/dead/requeue', {method: 'POST', "
        f"body: new URLSearchParams({{ids: '{job.id}', confirm: '1'}})}})"
        ".then(r => done(r.status))"
    )
    assert status == 403 and mail.count_dead() == 1
    _shot(browser, backend, "2-read-only-dead-letter")

    # Signed in with the token: requeue it, confirm the count, see it gone.
    browser.get(base + "/login")
    browser.find_element(By.NAME, "token").send_keys(TOKEN)
    browser.find_element(By.XPATH, '//button[text()="sign in"]').click()
    _until(lambda: "signed in" in browser.page_source, "the sign-in")
    browser.get(f"{base}/jobs/{job.id}")
    browser.find_element(By.XPATH, '//button[text()="requeue"]').click()
    _until(lambda: "Confirm" in browser.title, "the confirmation")
    assert "Requeue 1 dead letter of mail" in browser.find_element(By.ID, "live").text
    _shot(browser, backend, "3-confirm")
    _until(lambda: "Confirm" in browser.title, "the confirmation")
    browser.find_element(By.XPATH, '//button[text()="requeue 1"]').click()
    _until(lambda: "requeue: 1 (mail)" in browser.page_source, "the requeue's note")
    assert browser.find_elements(By.PARTIAL_LINK_TEXT, str(job.id)) == []
    assert mail.count_dead() == 0 and mail.info().ready == 8
    _shot(browser, backend, "4-requeued")

    # Throughput (ADR 0023, addendum): a worker's row reports jobs done; the queues
    # page's "done (1 min)" cell fills in without a reload.
    browser.get(base + "/queues")
    done_cell = '//tr[td/a[text()="mail"]]/td[7]'
    assert browser.find_element(By.XPATH, done_cell).text == ""  # no worker reports
    browser.execute_script("window.notReloaded = true")
    done = {"n": 0}
    presence = store.worker_presence(
        ["mail"], 1, lambda: {"mail": {"done": done["n"], "retried": 0, "dead": 0}}
    )
    renewal = store.renewal()
    try:
        time.sleep(1.0)
        done["n"] = 120
        renewal.beat(presence)
        _until(
            lambda: browser.find_element(By.XPATH, done_cell).text.endswith("/s"),
            "the done rate of mail",
        )
        assert browser.execute_script("return window.notReloaded") is True
        _shot(browser, backend, "5-throughput")
    finally:
        renewal.close()
        presence.leave()
