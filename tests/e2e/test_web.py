"""`claudeq web` in a real browser over a real fleet: headless Debian chromium (driven by its chromedriver over
WebDriver, tests/support/webdriver.py) against the `claudeq web` command, real workers, the real CLI and the simulator.

It opens the job list, opens a running job and sees its tool call arrive without reloading, cancels a job with the
button and sees it `cancelled`, and checks that a tenant's token shows none of another tenant's jobs. With
CLAUDEQ_WEB_SCREENSHOT set, it saves the finished job's page there (docs/web.png itself is taken by
tests/e2e/test_web_run_view.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.binaries import require_binary
from tests.support.webdriver import Browser
from tests.support.worker_proc import FAST_E2E, settings_env, worker_env

pytestmark = pytest.mark.e2e

TOKENS = {"CQT_WEB_E2E_A": "e2e-web-token-a-3c8d", "CQT_WEB_E2E_B": "e2e-web-token-b-6e21"}
TENANTS = """
[[tenants]]
name = "team-a"
mcp_token_env = "CQT_WEB_E2E_A"

[[tenants]]
name = "team-b"
mcp_token_env = "CQT_WEB_E2E_B"
"""


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, tmp_path: Path) -> Settings:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANTS)
    return make_settings(redis_url, unique, accounts_file=accounts_file, tenants_file=tenants, **FAST_E2E)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def web(settings: Settings, tmp_path: Path) -> Iterator[str]:
    """`claudeq web` as its own process (the command a user runs); yields its base URL."""
    port = _free_port()
    log = (tmp_path / "web.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "claudeq.producer.cli", "web", "--port", str(port)],
        env={**worker_env(settings, []), **settings_env(settings), **TOKENS},
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/login", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, (tmp_path / "web.log").read_text()
                assert time.monotonic() < deadline, "claudeq web did not listen"
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    """Headless chromium from Debian's packages (no browser download)."""
    chromium = require_binary("chromium", "apt-get install chromium chromium-driver")
    chromedriver = require_binary("chromedriver", "apt-get install chromium-driver")
    flags = [
        "--headless=new",
        "--no-sandbox",  # root in a container: chromium's own sandbox needs user namespaces
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1360,1500",
    ]
    driver = Browser(chromium, chromedriver, tmp_path / "chromium", flags)
    try:
        yield driver
    finally:
        driver.quit()


def test_a_tenant_follows_a_run_live_cancels_one_and_never_sees_another_tenants(
    web: str, browser: Browser, workers: WorkerFactory, client: Client, unique: str
) -> None:
    workers(concurrency=4)
    read = json.dumps({"file_path": "/etc/hostname"})
    # Its first request waits 8 s (the page is open by then), its tool call follows, then a slow answer (6 s).
    live = client.submit(
        prompt=f"[[sim: delay 8 times=1]] [[sim: tool Read {read}]] [[sim: stall 6 after=1 times=1]] live {unique}",
        tools="read-only",
        tenant="team-a",
    )
    doomed = client.submit(prompt=f"[[sim: delay 60]] doomed {unique}", tenant="team-a")
    theirs = client.submit(prompt=f"[[sim: text hi]] bravo secret plan {unique}", tenant="team-b")

    # Every page needs a token: the list sends the browser to the login form.
    browser.get(f"{web}/jobs")
    browser.until(lambda d: "/login" in d.current_url)
    browser.find("#token").send_keys(TOKENS["CQT_WEB_E2E_A"])
    browser.find("#login").click()
    browser.until(lambda d: d.current_url.endswith("/jobs") and d.find_all("#jobs"))
    listed = {row.attribute("data-job") for row in browser.find_all("#jobs tr[data-job]")}
    assert listed == {live.id, doomed.id}, listed
    assert "bravo secret plan" not in browser.page_source

    # The running job: its page is open before the tool call, which then arrives without a reload.
    browser.find(f'tr[data-job="{live.id}"] a').click()
    browser.until(lambda d: d.find_all("#events"))
    assert not browser.find_all("#events .ev-tool_call"), "the tool call came before the page"
    assert client.get(live.id).status in ("queued", "running")
    browser.execute("window.claudeqSamePage = true")
    call = browser.until(lambda d: d.find_all("#events .ev-tool_call"), timeout=90)[0]
    assert "Read" in call.text and "/etc/hostname" in call.text
    assert browser.execute("return window.claudeqSamePage") is True  # not reloaded
    browser.until(lambda d: d.find("#status").text == "succeeded", timeout=90)
    assert browser.find_all("#events .ev-tool_result")
    assert browser.execute("return window.claudeqSamePage") is True
    browser.get(f"{web}/jobs/{live.id}")
    assert browser.find("#result").text  # after a reload, the result
    shot = os.environ.get("CLAUDEQ_WEB_SCREENSHOT")
    if shot:
        browser.screenshot(shot)

    # Cancel with the button: the running job stops and the page says so.
    browser.get(f"{web}/jobs/{doomed.id}")
    browser.until(lambda d: client.get(doomed.id).status == "running", timeout=90)
    browser.find("#cancel").click()
    browser.until(lambda d: d.find("#status").text == "cancelled", timeout=60)
    assert client.get(doomed.id).status == "cancelled"

    # The other tenant's job is not there, however it is asked for.
    browser.get(f"{web}/jobs/{theirs.id}")
    assert "no job" in browser.find("h1").text
    assert "bravo secret plan" not in browser.page_source
    browser.get(f"{web}/jobs?tenant=team-b")
    assert not browser.find_all(f'tr[data-job="{theirs.id}"]')
    assert browser.find('input[name="tenant"]').property("value") == "team-a"
    browser.get(f"{web}/fleet")
    assert "operator" in browser.find("h1").text
    assert client.wait(theirs.id, timeout=120).status == "succeeded"
