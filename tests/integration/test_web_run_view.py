"""The job page as a run view, on records and events claudeq's own worker wrote (claudeq.testing's fleet on the
real Redis): the prompt at the top, every kind of token and the cost in the header and per attempt, the timeline
drawn from the record (a bar per attempt, a mark per tool call, the wait before the retry), the summary the live
page fetches again, the transcript as a conversation. In a browser: tests/e2e/test_web_run_view.py."""

from __future__ import annotations

import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from claudeq.producer.web import create_app
from claudeq.testing import Fleet, api_error, fleet, overloaded, rate_limited
from claudeq.worker.run.outcome import RateLimitSignal
from claudeq.worker.store.job_store import make_worker_store
from tests.support.aio import run

pytestmark = pytest.mark.integration

OPERATOR = "run-view-operator-token-1e5a"
USAGE = {"input_tokens": 320, "output_tokens": 23, "cache_read_tokens": 3573, "cache_creation_tokens": 1947}
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def kit(redis_url: str) -> Iterator[Fleet]:
    with fleet(redis_url=redis_url, web_token=SecretStr(OPERATOR)) as made:
        yield made


@pytest.fixture
def http(kit: Fleet) -> Iterator[TestClient]:
    headers = {"authorization": f"Bearer {OPERATOR}", "accept": "text/html"}
    with TestClient(create_app(kit.settings, kit.client), base_url="http://127.0.0.1:8780", headers=headers) as made:
        yield made


def timeline_of(page: str) -> ET.Element:
    found = re.search(r"<svg class=\"timeline\".*?</svg>", page, re.DOTALL)
    assert found, "the page draws no timeline"
    return ET.fromstring(found[0].replace("<svg ", f'<svg xmlns="{SVG[1:-1]}" ', 1))


def test_the_job_page_shows_the_prompt_the_cost_and_the_run_drawn(kit: Fleet, http: TestClient) -> None:
    kit.fail("^build", overloaded())
    kit.reply("^build", text="built it", usage={**USAGE, "cost_usd": 0.0061}, tool_calls=[("Read", {"p": "a"}), "Grep"])
    job = kit.client.submit(prompt="build the thing, then report", conversation="run-view")
    record = job.wait()
    assert [a.outcome for a in record.attempts] == ["transient_error", "success"]

    page = http.get(f"/jobs/{job.id}")
    assert page.status_code == 200, page.text[:300]
    text = page.text
    assert text.index('id="prompt"') < text.index('id="summary"') < text.index('id="events"')
    assert "build the thing, then report" in text[text.index('id="prompt"') : text.index('id="summary"')]
    header = text[text.index('id="facts"') : text.index("<h2>Timeline</h2>")]
    for value in ("320", "23", "3,573", "1,947", "$0.0061"):
        assert value in header, (value, header)
    attempts = text[text.index('id="attempts"') :]
    assert "3,573" in attempts and "1,947" in attempts  # the succeeding attempt's own usage

    svg = timeline_of(text)
    bars = svg.findall(f"{SVG}rect[@data-kind='attempt']")
    assert [b.get("data-attempt") for b in bars] == ["1", "2"]
    tools = svg.findall(f"{SVG}circle[@data-kind='tool']")
    calls = [e for e in kit.events(job.id) if e.type == "tool_call"]
    assert [(m.get("data-attempt"), m.findtext(f"{SVG}title").split(" ")[3]) for m in tools] == [
        (str(e.attempt), e.data["tool"]) for e in calls
    ]
    [retry] = svg.findall(f"{SVG}rect[@data-kind='retry']")
    first, second = (float(b.get("x")) for b in bars)
    first_end = first + float(bars[0].get("width"))
    assert float(retry.get("x")) == pytest.approx(first_end, abs=1.5)  # the backoff starts as attempt 1 ends ...
    assert float(retry.get("x")) + float(retry.get("width")) == pytest.approx(second, abs=1.5)  # ... until 2
    [wait] = [e for e in kit.events(job.id) if e.type == "retry"]
    assert f"backoff {wait.data['wait_s']} s" in retry.findtext(f"{SVG}title")
    assert svg.find(f"{SVG}line[@class='end']") is not None

    summary = http.get(f"/jobs/{job.id}?part=summary")
    assert summary.status_code == 200 and "<html" not in summary.text
    assert 'id="attempts"' in summary.text and "built it" in summary.text


def test_the_transcript_page_is_the_conversation_with_the_entries_on_demand(kit: Fleet, http: TestClient) -> None:
    kit.reply("^summarise", text="three things changed")
    job = kit.client.submit(prompt="summarise the changelog", conversation="transcript-view")
    assert job.wait().status == "succeeded"
    page = http.get(f"/jobs/{job.id}/transcript")
    assert page.status_code == 200
    kinds = re.findall(r'<li class="block b-(\w+)', page.text)
    assert kinds == ["user", "assistant"], kinds
    assert "summarise the changelog" in page.text and "three things changed" in page.text
    raw = http.get(f"/jobs/{job.id}/transcript?raw=1")
    assert raw.status_code == 200 and '"type": "user"' in raw.text.replace("&#34;", '"')
    assert 'class="block' not in raw.text


def segments(page: str, chart: str) -> dict[tuple[str, int], float]:
    """(series, epoch hour) -> value of every segment a chart draws."""
    found = re.search(rf'<figure class="chart" id="chart-{chart}">.*?</figure>', page, re.DOTALL)
    assert found, f"no chart {chart}"
    return {
        (series, int(bucket)): float(value)
        for series, bucket, value in re.findall(
            r'data-series="([^"]+)" data-bucket="(\d+)" data-value="([^"]+)"', found[0]
        )
    }


def test_the_fleet_pictures_draw_what_redis_counts(redis_url: str) -> None:
    tenants = {"tenants": [{"name": "team-a"}, {"name": "team-b"}]}
    with fleet(
        redis_url=redis_url, accounts=["acct-1", "acct-2"], tenants=tenants, web_token=SecretStr(OPERATOR)
    ) as kit:
        kit.reply("^alpha", text="a", usage={"input_tokens": 10, "cost_usd": 0.25})
        kit.reply("^beta", text="b", usage={"input_tokens": 10, "cost_usd": 0.5})
        kit.fail("^limited", rate_limited(resets_in=600))
        kit.reply("^limited", text="c", usage={"input_tokens": 10, "cost_usd": 0.125})
        kit.fail("^doomed", api_error(400))
        jobs = [
            kit.client.submit(prompt="alpha one", tenant="team-a"),
            kit.client.submit(prompt="alpha two", tenant="team-a"),
            kit.client.submit(prompt="beta", tenant="team-b"),
            kit.client.submit(prompt="limited", tenant="team-b"),
            kit.client.submit(prompt="doomed", tenant="team-b"),
        ]
        kit.run_until_idle()
        dropped = kit.client.submit(prompt="alpha never", tenant="team-a")
        kit.client.cancel(dropped.id)
        statuses = [kit.record(j.id).status for j in [*jobs, dropped]]
        assert statuses == ["succeeded"] * 4 + ["failed", "cancelled"]

        keys, r = kit.settings_keys, kit.redis
        for _ in range(2):  # two warnings, as a run's stream reports them
            kit.accounts.signals.observe(
                "acct-1", RateLimitSignal("allowed_warning", window="five_hour", utilization=0.9)
            )
        now = time.time()
        r.zadd(keys.account_slots("acct-2"), {"a-run-in-flight": now + 600})  # one slot held until its expiry
        run(make_worker_store(kit.settings, r).sample_slots(["acct-1", "acct-2"], now))
        headers = {"authorization": f"Bearer {OPERATOR}", "accept": "text/html"}
        with TestClient(create_app(kit.settings, kit.client), base_url="http://127.0.0.1:8780", headers=headers) as h:
            page = h.get("/fleet")
        assert page.status_code == 200, page.text[:300]

        def history(account: str, counters: tuple[str, ...]) -> dict[int, float]:
            """minute -> the sum of `counters` the account's per-minute history holds for it."""
            found: dict[int, float] = {}
            for key in r.scan_iter(match=keys.account_history(account, 0)[:-1] + "*"):
                for f, v in r.hgetall(key).items():
                    counter, _, minute = f.decode().partition(":")
                    if counter in counters and float(v):
                        found[int(minute)] = found.get(int(minute), 0.0) + float(v)
            return found

        signals, slots = segments(page.text, "rate-limits"), segments(page.text, "slots")
        for account in ("acct-1", "acct-2"):
            assert {b: v for (s, b), v in signals.items() if s == account} == history(account, ("rejected", "warnings"))
            assert {b: v for (s, b), v in slots.items() if s == account} == history(account, ("slots",))
        assert sum(v for (s, _), v in signals.items() if s == "acct-1") == 2
        assert slots == {("acct-2", int(now // 60)): 1.0}

        drawn = segments(page.text, "cost-tenant")
        for tenant in ("team-a", "team-b"):
            stored = {
                int(f[2:]): float(v)
                for f, v in ((k.decode(), v.decode()) for k, v in r.hgetall(keys.tenant_spend(tenant)).items())
                if f.startswith("h:")
            }
            assert {b: v for (s, b), v in drawn.items() if s == tenant} == {b: v for b, v in stored.items() if v}
        assert sum(v for (s, _), v in drawn.items() if s == "team-a") == pytest.approx(0.5)
        assert sum(v for (s, _), v in drawn.items() if s == "team-b") == pytest.approx(0.625)
        by_account = segments(page.text, "cost-account")
        assert sum(by_account.values()) == pytest.approx(1.125)

        finished = segments(page.text, "finished")
        for status in ("succeeded", "failed", "cancelled"):
            stored = sum(int(v) for v in r.hgetall(keys.finished_counts(status)).values())
            assert sum(v for (s, _), v in finished.items() if s == status) == stored
        assert {s: sum(v for (t, _), v in finished.items() if t == s) for s, _ in finished} == {
            "succeeded": 4,
            "failed": 1,
            "cancelled": 1,
        }

        per_minute = segments(page.text, "finished-minute")  # from the newest records, by their finished_at
        records = [kit.record(j.id) for j in [*jobs, dropped]]
        assert sorted((s, b) for (s, b), v in per_minute.items() for _ in range(int(v))) == sorted(
            (r.status, int(r.finished_at.timestamp() // 60)) for r in records if r.finished_at
        )

        states = {s.name: s for s in kit.accounts.store.states()}
        rows = re.findall(
            r'<tr data-account="([^"]+)">.*?data-rejected="(\d+)" data-warnings="(\d+)" data-cooled="(\d+)"',
            page.text,
            re.DOTALL,
        )
        counted = ("rejected", "warnings", "cooled")
        assert {name: tuple(int(n) for n in ns) for name, *ns in rows} == {
            name: tuple(s.counters.get(c, 0) for c in counted) for name, s in states.items()
        }
        assert sum(int(cooled) for *_, cooled in rows) >= 1  # the rate-limited attempt cooled its account


def test_the_fleet_page_says_deferred_once_and_no_unknown_allowed(kit: Fleet, http: TestClient) -> None:
    from claudeq.worker.run.outcome import RateLimitSignal

    # a signal naming no window, saying nothing more
    kit.accounts.signals.observe("default", RateLimitSignal("allowed"))
    kit.accounts.signals.observe("default", RateLimitSignal("allowed", window="five_hour", utilization=0.25))
    assert set(kit.accounts.store.state("default").windows) == {"unknown", "five_hour"}
    page = http.get("/fleet")
    assert page.status_code == 200
    facts = re.search(r'<p class="facts">(.*?)</p>', page.text, re.DOTALL)
    assert facts and re.findall(r"\bdeferred\b", facts[1]) == ["deferred"], facts[1] if facts else page.text
    assert "unknown" not in page.text and "five_hour: 25%" in page.text
