"""The dashboard in a real headless browser (Debian's chromium via Selenium and /usr/bin/chromedriver).

A real cluster (bookie processes), `bkaudit admin serve` as its own process, and a page whose tables must show
what the test put there; a drain clicked in the page must land in ZooKeeper.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from bkaudit.admin.auth import hash_token
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord, now_iso
from bkaudit.store import ZkStore
from bkaudit.zk import dataloss
from bkaudit.zk import underreplication as ur
from bkaudit.zk.server import free_port
from tests import helpers
from tests.admin.support import ADMIN_TOKEN, write_audit_run

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def wait_for(predicate, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    """tests.helpers.wait_for, where an element gone stale because the page reloaded counts as "not yet"
    (chromedriver reports a node replaced mid-read as a bare WebDriverException: "does not belong to the
    document")."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        WebDriverException,
    )

    def attempt():  # type: ignore[no-untyped-def]
        try:
            return predicate()
        except (StaleElementReferenceException, NoSuchElementException):
            return None
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return None
            raise

    return helpers.wait_for(attempt, timeout_s, "the page", interval_s=0.1)


@pytest.fixture
def browser():  # type: ignore[no-untyped-def]
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are required (the Makefile installs them: apt-get)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def table(driver, table_id: str) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """First cell -> all cells of each body row of the table.

    Every row the dashboard renders has cells, so a row read with none was detached by a reload between the
    two lookups (chromedriver then answers an empty list rather than a stale-element error): it is reported
    as stale, which `wait_for` counts as "not yet"."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
    out = {}
    for row in rows:
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        if not cells:
            raise StaleElementReferenceException(f"a #{table_id} row lost its cells: the page reloaded")
        out[cells[0]] = cells
    return out


def test_dashboard_shows_the_cluster_and_drains_from_the_page(cluster_factory, browser, tmp_path) -> None:
    from selenium.webdriver.common.by import By

    cluster = cluster_factory(bookies=3, racks=3)
    zk = cluster.zk_client()
    a, b, c = cluster.ids()
    ur.mark_underreplicated(zk, 77, [c], root=cluster.root)
    dataloss.write(zk, DataLossRecord(78, ((0, 4),), now_iso(), (c,), 3, "w"),
                   root=cluster.root)
    cs = ZkStore(zk, root=cluster.root)
    service.transition(cs, b, lc.LifecycleState.DRAINING, actor=lc.Actor.OPERATOR, by="t")
    warehouse = str(tmp_path / "wh")
    write_audit_run(warehouse, "run-9", datetime(2026, 11, 20, tzinfo=UTC), [
        {"ledger_id": 5, "category": "placement_fail", "severity": "warning", "detail": "{}"}])

    port = free_port()
    env = {**os.environ, "BKAUDIT_ADMIN__ADMIN_TOKENS": f"ops:{hash_token(ADMIN_TOKEN)}",
           "BKAUDIT_ADMIN__DISK_INFO_TIMEOUT_S": "10"}  # a loaded machine answers GetBookieInfo slowly
    server = subprocess.Popen(
        [sys.executable, "-m", "bkaudit.cli", "admin", "serve", "--zk", cluster.zk, "--root", cluster.root,
         "--port", str(port), "--warehouse", warehouse],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "admin.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            try:
                return httpx.get(url + "/heartbeat", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert server.poll() is None, (tmp_path / "admin.log").read_text()
                return False

        wait_for(up, 60)
        browser.get(url + "/dashboard")
        bookies = table(browser, "bookies")
        assert set(bookies) == {a, b, c}
        for info in cluster.bookies:
            row = bookies[info.id]
            assert row[1] == (info.rack or "")
        assert (bookies[a][2], bookies[a][3]) == ("Active", "writable")
        assert bookies[b][2] == "Draining"
        wait_for(lambda: "%" in table(browser, "bookies")[a][4] or browser.refresh(), 60)  # disk use shown
        assert table(browser, "queue")["77"][1] == c
        assert table(browser, "dataloss")["78"][1] == "5"
        assert browser.find_element(By.ID, "verdict").text == "warning"
        assert table(browser, "categories")["placement_fail"][2] == "1"

        drain_a = browser.find_element(By.CSS_SELECTOR, f'button[data-action="drain"][data-bookie="{a}"]')
        assert not drain_a.is_displayed()  # actions need the admin login
        assert not browser.find_element(By.ID, "logout").is_displayed()
        browser.find_element(By.ID, "token").send_keys("wrong-token")
        browser.find_element(By.ID, "login").click()
        wait_for(lambda: "refused" in browser.find_element(By.ID, "status").text, 60)
        assert not drain_a.is_displayed()
        token_box = browser.find_element(By.ID, "token")
        token_box.clear()
        token_box.send_keys(ADMIN_TOKEN)
        browser.find_element(By.ID, "login").click()
        wait_for(lambda: drain_a.is_displayed(), 60)  # the inline script runs under the page's CSP
        assert browser.find_element(By.ID, "logout").is_displayed()
        csp = httpx.get(url + "/dashboard", timeout=30).headers["content-security-policy"]
        assert "script-src 'sha256-" in csp and "unsafe-inline" not in csp
        drain_a.click()
        wait_for(lambda: service.current(cs, a)[0] is lc.LifecycleState.DRAINING, 60)
        record, _ = service.current(cs, a)[1:]
        assert record.by == "api:ops" and record.reason == "dashboard"
        # the page reloads and shows the new state
        wait_for(lambda: table(browser, "bookies").get(a, ["", "", ""])[2] == "Draining", 60)
    finally:
        server.terminate()
        server.wait(30)
