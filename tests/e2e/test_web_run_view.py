"""The run view in headless chromium over a real fleet (real workers, the real CLI, the simulator): a job followed
live ends whole without a reload — status, attempts with their usage, the result — and its timeline matches the
record (a bar per attempt, a mark per tool call on its attempt, the wait before the retry); the transcript page is
the conversation; a prompt that is one 2,000-character word wraps in the job list; the fleet page's cost chart
draws each tenant's spend hash. With
CLAUDEQ_WEB_SCREENSHOTS=DIR it saves the job page, the transcript and the fleet page there (docs/web*.png)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from claudeq.config.settings import Settings
from claudeq.keys import Keys
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.e2e.test_web import TENANTS, TOKENS, browser, web  # noqa: F401 (fixtures)
from tests.support.webdriver import Browser
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

OPERATOR = "e2e-run-view-operator-91f0"


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, tmp_path: Path) -> Settings:
    """The web e2e fleet, with an operator's token (the fleet page) and retries that wait long enough to see."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANTS)
    fast = {**FAST_E2E, "retry_base_s": 2.0, "retry_max_s": 2.0}
    return make_settings(
        redis_url, unique, accounts_file=accounts_file, tenants_file=tenants, web_token=SecretStr(OPERATOR), **fast
    )


def log_in(driver: Browser, base: str, token: str) -> None:
    driver.get(f"{base}/login")
    driver.find("#token").send_keys(token)
    driver.find("#login").click()
    driver.until(lambda d: d.current_url.endswith("/jobs") and d.find_all("#jobs"))


def test_a_run_followed_live_ends_whole_and_its_timeline_matches_the_record(
    web: str,  # noqa: F811
    browser: Browser,  # noqa: F811
    workers: WorkerFactory,
    client: Client,
    settings: Settings,
    redis_client: redis.Redis,
    unique: str,
) -> None:
    workers(concurrency=4)
    glob = json.dumps({"pattern": "**/*"})
    grep = json.dumps({"pattern": "claudeq"})
    # Attempt 1 meets a 500 (a retry after its backoff); attempt 2 waits 6 s before answering (the page is open
    # by then), calls two tools, then answers.
    prompt = (
        f"[[sim: error 500 times=1]] [[sim: delay 6 after=1 times=1]] [[sim: tool Glob {glob}]] "
        f"[[sim: tool Grep {grep}]] [[sim: text all read]] look around {unique}"
    )
    job = client.submit(prompt=prompt, tools="read-only", tenant="team-a", conversation=f"view-{unique}")
    wide = client.submit(prompt="w" * 2000, tenant="team-a")

    log_in(browser, web, OPERATOR)
    browser.get(f"{web}/jobs/{job.id}")
    browser.until(lambda d: d.find_all("#events"))
    assert client.get(job.id).status != "succeeded", "the job ended before its page was open"
    browser.execute("window.claudeqSamePage = true")
    # Live while it runs: the retry's attempt appears on the timeline before the job ends (attempt 2 waits 6 s).
    browser.until(lambda d: len(d.find_all("#timeline rect[data-kind='attempt']")) == 2, timeout=90)
    assert client.get(job.id).status == "running" and browser.find("#status").text != "succeeded"
    browser.until(lambda d: d.find("#status").text == "succeeded", timeout=120)
    record = client.get(job.id)
    assert record.result is not None and [a.outcome for a in record.attempts] == ["transient_error", "success"]

    # Without a reload: the attempts with their usage, the result, the job's cost.
    browser.until(lambda d: len(d.find_all("#attempts li")) == 2 and d.find_all("#result"), timeout=30)
    assert browser.execute("return window.claudeqSamePage") is True
    assert not browser.find_all("#no-attempt")
    assert "all read" in browser.find("#result").text
    usage = record.result.usage
    shown = {k: browser.find(f"#summary > dl.usage dd.{k}").text for k in ("in", "cache-read", "cache-write", "cost")}
    assert shown == {
        "in": f"{usage.input_tokens:,}",
        "cache-read": f"{usage.cache_read_tokens:,}",
        "cache-write": f"{usage.cache_creation_tokens:,}",
        "cost": f"${usage.cost_usd:.4f}",
    }

    # The timeline against the record and its events.
    bars = browser.find_all("#timeline rect[data-kind='attempt']")
    assert [b.attribute("data-attempt") for b in bars] == [str(a.number) for a in record.attempts]
    calls = [e for e in client.events(job.id) if e.type == "tool_call"]
    assert [e.data["tool"] for e in calls] == ["Glob", "Grep"]
    marks = browser.find_all("#timeline circle[data-kind='tool']")
    assert [m.attribute("data-attempt") for m in marks] == [str(e.attempt) for e in calls] == ["2", "2"]
    [retry_event] = [e for e in client.events(job.id) if e.type == "retry"]
    [retry] = browser.find_all("#timeline rect[data-kind='retry']")
    title = browser.execute("return document.querySelector(\"#timeline rect[data-kind='retry'] title\").textContent")
    assert f"backoff {retry_event.data['wait_s']} s" in title, title
    first, second = ((float(b.attribute("x") or 0), float(b.attribute("width") or 0)) for b in bars)
    begins, width = float(retry.attribute("x") or 0), float(retry.attribute("width") or 0)
    assert begins == pytest.approx(sum(first), abs=1.5) and begins + width == pytest.approx(second[0], abs=1.5)
    shots = os.environ.get("CLAUDEQ_WEB_SCREENSHOTS")
    if shots:
        browser.execute("window.scrollTo(0, 0)")
        browser.screenshot(Path(shots) / "web.png")

    # The transcript as a conversation, the raw entries one click away.
    browser.get(f"{web}/jobs/{job.id}/transcript")
    kinds = [li.attribute("data-kind") for li in browser.find_all("li.block")]
    assert kinds[0] == "user" and kinds[-1] == "assistant", kinds
    assert kinds.count("tool_use") == 2 and kinds.count("tool_result") == 2, kinds
    if shots:
        browser.screenshot(Path(shots) / "web-transcript.png")
    browser.find("#raw-link").click()
    browser.until(lambda d: d.find_all("li.entry"))

    # A prompt that is one 2,000-character word wraps inside its column.
    assert client.wait(wide.id, timeout=120).status == "succeeded"
    browser.get(f"{web}/jobs")
    row = f'tr[data-job="{wide.id}"]'
    browser.until(lambda d: d.find_all(row))
    overflow = browser.execute(
        "const row = document.querySelector(arguments[0]);"
        "const prompt = row.querySelector('td.prompt').getBoundingClientRect();"
        "const tenant = row.querySelector('td.prompt + td').getBoundingClientRect();"
        "return [prompt.right - tenant.left, document.documentElement.scrollWidth - window.innerWidth];",
        row,
    )
    assert overflow[0] <= 1 and overflow[1] <= 0, overflow
    browser.get(f"{web}/jobs/{wide.id}")
    assert browser.execute("return document.documentElement.scrollWidth - window.innerWidth") <= 0

    # The fleet's pictures draw what Redis counts: each tenant's cost per hour is its spend hash's.
    browser.get(f"{web}/fleet")
    browser.until(lambda d: d.find_all("#chart-cost-tenant"))
    drawn = browser.execute(
        "return [...document.querySelectorAll('#chart-cost-tenant rect.seg')]"
        ".map(r => [r.dataset.series, Number(r.dataset.bucket), Number(r.dataset.value)]);"
    )
    keys = Keys(settings.key_prefix)
    stored = [
        [tenant, int(field.decode()[2:]), float(value)]
        for tenant in ("team-a", "team-b")
        for field, value in sorted(redis_client.hgetall(keys.tenant_spend(tenant)).items())
        if field.startswith(b"h:") and float(value)
    ]
    assert sorted(drawn) == sorted(stored) and stored, (drawn, stored)
    # Rate-limit signals and slots in use per minute: what each account's per-minute history holds.
    names = [a.name for a in settings.accounts.accounts]
    for chart, counters in (("rate-limits", ("rejected", "warnings")), ("slots", ("slots",))):
        drawn = browser.execute(
            f"return [...document.querySelectorAll('#chart-{chart} rect.seg')]"
            ".map(r => [r.dataset.series, Number(r.dataset.bucket), Number(r.dataset.value)]);"
        )
        held: dict[tuple[str, int], float] = {}
        for name in names:
            for key in redis_client.scan_iter(match=keys.account_history(name, 0)[:-1] + "*"):
                for field, value in redis_client.hgetall(key).items():
                    counter, _, minute = field.decode().partition(":")
                    if counter in counters and float(value):
                        held[(name, int(minute))] = held.get((name, int(minute)), 0.0) + float(value)
        assert browser.find_all(f"#chart-{chart}")
        assert sorted(drawn) == sorted([name, minute, value] for (name, minute), value in held.items()), chart
    if shots:
        browser.screenshot(Path(shots) / "web-fleet.png")
