"""`claudeq web` on a real Redis, through its ASGI app: who sees what (tenants' tokens, the operator's), actions
that only its own pages can trigger, the list's filters and paging over the indexes, and no secret on any page.
The browser and a real fleet: tests/e2e/test_web.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr
from starlette.testclient import TestClient

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from claudeq.producer.web import create_app
from claudeq.producer.web.listing import JobFilter, list_page

pytestmark = pytest.mark.integration

TOKENS = {"CQT_WEB_TOKEN_A": "web-token-of-team-a-5d1c", "CQT_WEB_TOKEN_B": "web-token-of-team-b-0a9e"}
OPERATOR = "operator-token-77b2e1"
HTML = {"accept": "text/html"}


@pytest.fixture
def fleet(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Two tenants with bearer tokens, an operator token and an account whose token must never show."""
    for name, value in TOKENS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CQT_WEB_ACCOUNT_KEY", "sk-ant-account-secret-4f4f")
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        '[[tenants]]\nname = "team-a"\nmcp_token_env = "CQT_WEB_TOKEN_A"\n\n'
        '[[tenants]]\nname = "team-b"\nmcp_token_env = "CQT_WEB_TOKEN_B"\n'
    )
    accounts = tmp_path / "accounts.toml"
    accounts.write_text('[[accounts]]\nname = "acct-one"\nkind = "api_key"\ntoken_env = "CQT_WEB_ACCOUNT_KEY"\n')
    return settings.model_copy(
        update={"tenants_file": tenants, "accounts_file": accounts, "web_token": SecretStr(OPERATOR)}
    )


@pytest.fixture
def fleet_client(fleet: Settings, redis_client: redis.Redis) -> Client:
    return Client(fleet, redis_client=redis_client)


@pytest.fixture
def browser(fleet: Settings, fleet_client: Client) -> Iterator[TestClient]:
    with TestClient(create_app(fleet, fleet_client), base_url="http://127.0.0.1:8780") as http:
        yield http


def open_view(settings: Settings, client: Client) -> TestClient:
    """The view with no token configured, as a script given the token the server made reaches it."""
    app = create_app(settings, client, start_token=OPERATOR)
    return TestClient(app, base_url="http://127.0.0.1:8780", headers={"authorization": f"Bearer {OPERATOR}"})


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no form token"
    return found[1]


def log_in(http: TestClient, token: str) -> None:
    form = http.get("/login", headers=HTML)
    answer = http.post("/login", data={"token": token, "csrf": csrf_of(form.text), "next": "/jobs"})
    assert answer.status_code == 200 and answer.url.path == "/jobs", answer.text[:300]


def test_every_page_needs_a_token_and_a_tenant_sees_only_its_own_jobs(
    browser: TestClient, fleet_client: Client, unique: str
) -> None:
    mine = fleet_client.submit(prompt=f"alpha job {unique}", tenant="team-a")
    theirs = fleet_client.submit(prompt=f"bravo job {unique}", tenant="team-b")

    # Without a token: the login form for a browser, 401 for a script, for every page and the live stream.
    for path in ("/jobs", f"/jobs/{mine.id}", "/fleet", f"/jobs/{mine.id}/transcript"):
        page = browser.get(path, headers=HTML, follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].startswith("/login?next="), path
        assert browser.get(path).status_code == 401, path
    assert browser.get(f"/jobs/{mine.id}/events").status_code == 401
    form = browser.get("/login", headers=HTML)
    refused = browser.post("/login", data={"token": "not-a-token", "csrf": csrf_of(form.text)})
    assert refused.status_code == 401 and "claudeq_session" not in browser.cookies

    log_in(browser, TOKENS["CQT_WEB_TOKEN_A"])
    listing = browser.get("/jobs", headers=HTML)
    assert f"alpha job {unique}" in listing.text and f"bravo job {unique}" not in listing.text
    # Asking for the other tenant's list changes nothing: a tenant's token lists its own jobs.
    asked = browser.get("/jobs?tenant=team-b", headers=HTML)
    assert mine.id in asked.text and theirs.id not in asked.text
    # The other tenant's job, its events, transcript and actions are as if it did not exist.
    assert browser.get(f"/jobs/{mine.id}", headers=HTML).status_code == 200
    for path in (f"/jobs/{theirs.id}", f"/jobs/{theirs.id}/events", f"/jobs/{theirs.id}/transcript"):
        assert browser.get(path, headers=HTML).status_code == 404, path
    csrf = csrf_of(listing.text)
    for action in ("cancel", "resubmit"):
        assert browser.post(f"/jobs/{theirs.id}/{action}", data={"csrf": csrf}).status_code == 404
    assert fleet_client.get(theirs.id).status == "queued"
    assert len(fleet_client.list(tenant="team-b")) == 1  # nothing resubmitted in team-b's name
    assert browser.get("/fleet", headers=HTML).status_code == 403

    # A script's bearer token works the same way.
    as_b = {"authorization": f"Bearer {TOKENS['CQT_WEB_TOKEN_B']}"}
    assert browser.get(f"/jobs/{theirs.id}", headers=as_b).status_code == 200
    assert browser.get(f"/jobs/{mine.id}", headers=as_b).status_code == 404


def test_the_operator_sees_every_tenant_and_the_fleet(browser: TestClient, fleet_client: Client, unique: str) -> None:
    a = fleet_client.submit(prompt=f"alpha {unique}", tenant="team-a")
    b = fleet_client.submit(prompt=f"bravo {unique}", tenant="team-b")
    log_in(browser, OPERATOR)
    listing = browser.get("/jobs", headers=HTML).text
    assert a.id in listing and b.id in listing
    only_b = browser.get("/jobs?tenant=team-b", headers=HTML).text
    assert b.id in only_b and a.id not in only_b
    fleet = browser.get("/fleet", headers=HTML)
    assert fleet.status_code == 200
    assert "acct-one" in fleet.text and "team-a" in fleet.text and "team-b" in fleet.text


def test_no_secret_reaches_any_page(browser: TestClient, fleet_client: Client, unique: str) -> None:
    job = fleet_client.submit(prompt=f"<script>alert('{unique}')</script>", tenant="team-a")
    log_in(browser, OPERATOR)
    pages = [browser.get(p, headers=HTML) for p in ("/jobs", f"/jobs/{job.id}", "/fleet", "/login")]
    fleet_client.cancel(job.id)
    pages.append(browser.get(f"/jobs/{job.id}/events"))  # the live stream of an ended job: its events, then its end
    secrets = [*TOKENS.values(), OPERATOR, "sk-ant-account-secret-4f4f"]
    for page in pages:
        assert page.status_code == 200, page.url
        assert not [s for s in secrets if s in page.text], page.url
    # What an agent or a producer wrote is shown as text, never run as markup.
    assert f"<script>alert('{unique}')" not in pages[1].text and "&lt;script&gt;" in pages[1].text
    assert "default-src 'self'" in pages[1].headers["content-security-policy"]


def test_actions_are_refused_from_other_sites(browser: TestClient, fleet_client: Client, unique: str) -> None:
    job = fleet_client.submit(prompt=f"keep me {unique}", tenant="team-a")
    log_in(browser, TOKENS["CQT_WEB_TOKEN_A"])
    csrf = csrf_of(browser.get(f"/jobs/{job.id}", headers=HTML).text)
    # A form on another site: the session cookie alone, no form token (or a wrong one), or another origin.
    assert browser.post(f"/jobs/{job.id}/cancel").status_code == 403
    assert browser.post(f"/jobs/{job.id}/cancel", data={"csrf": "x" * 43}).status_code == 403
    elsewhere = {"origin": "http://evil.example"}
    assert browser.post(f"/jobs/{job.id}/cancel", data={"csrf": csrf}, headers=elsewhere).status_code == 403
    assert browser.post(f"/jobs/{job.id}/resubmit", data={"csrf": csrf}, headers=elsewhere).status_code == 403
    assert fleet_client.get(job.id).status == "queued" and len(fleet_client.list(tenant="team-a")) == 1
    # Its own page's button.
    done = browser.post(f"/jobs/{job.id}/cancel", data={"csrf": csrf}, headers={"origin": "http://127.0.0.1:8780"})
    assert done.status_code == 200 and fleet_client.get(job.id).status == "cancelled"
    assert 'id="status">cancelled' in done.text


def test_resubmit_makes_a_new_job_of_the_same_spec(browser: TestClient, fleet_client: Client, unique: str) -> None:
    first = fleet_client.submit(
        prompt=f"again {unique}", tenant="team-a", idempotency_key=f"k-{unique}", metadata={"team": "a"}
    )
    log_in(browser, TOKENS["CQT_WEB_TOKEN_A"])
    csrf = csrf_of(browser.get(f"/jobs/{first.id}", headers=HTML).text)
    answer = browser.post(f"/jobs/{first.id}/resubmit", data={"csrf": csrf}, headers=HTML)
    assert answer.status_code == 200
    new_id = answer.url.path.rsplit("/", 1)[-1]
    assert new_id != first.id
    again = fleet_client.get(new_id)
    assert again.spec.prompt == f"again {unique}" and again.spec.tenant == "team-a"
    assert again.spec.idempotency_key is None
    assert again.spec.metadata == {"team": "a", "resubmitted_from": first.id}


def test_bad_filters_are_refused_with_the_field(browser: TestClient) -> None:
    log_in(browser, OPERATOR)
    for query, field in (("status=finished", "status"), ("since=yesterday", "since"), ("cursor=zz", "cursor")):
        page = browser.get(f"/jobs?{query}", headers=HTML)
        assert page.status_code == 400 and f"{field}:" in page.text, query


def test_the_list_filters_and_pages_newest_first(settings: Settings, redis_client: redis.Redis, unique: str) -> None:
    other_queue = f"{settings.queue}-b"
    client = Client(settings.model_copy(update={"queues": [settings.queue, other_queue]}), redis_client=redis_client)
    handles = client.submit_many([{"prompt": f"batch {i} {unique}"} for i in range(7)])  # one creation ms: ties
    parent = client.submit(prompt=f"parent {unique}")
    child = client.submit(prompt=f"child {unique}", metadata={"parent_job_id": parent.id}, account="acct-x")
    routed = client.submit(prompt=f"routed {unique}", queue=other_queue)
    talk = [client.submit(prompt=f"turn {i} {unique}", conversation=f"c-{unique}") for i in range(2)]
    client.cancel(handles[0].id)

    everything = [r.id for r in list_page(client, JobFilter(), limit=100).rows]  # type: ignore[union-attr]
    assert len(everything) == 12 and everything[0] == talk[1].id

    # Pages of three meet every job once, in the same order, through ties of one creation time.
    seen: list[str] = []
    cursor = None
    while True:
        page = list_page(client, JobFilter(), limit=3, cursor=cursor)
        seen += [r.id for r in page.rows]  # type: ignore[union-attr]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == everything

    def ids(**wanted: str) -> set[str]:
        return {r.id for r in list_page(client, JobFilter(**wanted), limit=100).rows}  # type: ignore[union-attr]

    assert ids(status="cancelled") == {handles[0].id}
    assert ids(queue=other_queue) == {routed.id}
    assert ids(account="acct-x") == {child.id}
    assert ids(parent=parent.id) == {child.id}
    assert ids(conversation=f"c-{unique}") == {t.id for t in talk}
    assert ids(tenant="nobody") == set()
    created = client.get(routed.id).created_at
    since = list_page(client, JobFilter(since_ms=int(created.timestamp() * 1000)), limit=100)
    assert {r.id for r in since.rows} >= {routed.id, *(t.id for t in talk)}  # type: ignore[union-attr]
    assert handles[1].id not in {r.id for r in since.rows}  # type: ignore[union-attr]
    for name in redis_client.scan_iter(match=f"{other_queue}*"):
        redis_client.delete(name)


def test_a_rare_filter_reads_a_bounded_stretch_and_says_where_it_stopped(client: Client, unique: str) -> None:
    client.submit_many([{"prompt": f"filler {i} {unique}"} for i in range(30)])
    page = list_page(client, JobFilter(status="failed"), limit=10, max_scan=12)
    assert page.rows == [] and page.scanned == 12 and page.next_cursor is not None
    rest = list_page(client, JobFilter(status="failed"), limit=10, cursor=page.next_cursor, max_scan=100)
    assert rest.rows == [] and rest.scanned == 18 and rest.next_cursor is None


def test_an_unreadable_record_is_listed_as_such_only_in_the_whole_fleets_list(
    client: Client, redis_client: redis.Redis, unique: str
) -> None:
    good = client.submit(prompt=f"fine {unique}")
    keys = client.store.keys
    redis_client.zadd(keys.jobs, {"broken-job": 1e13})  # newest, and its key is not a record
    redis_client.set(keys.job("broken-job"), "not a hash")
    rows = list_page(client, JobFilter(), limit=10).rows
    assert [getattr(r, "job_id", None) for r in rows[:1]] == ["broken-job"] and rows[1].id == good.id  # type: ignore[union-attr]
    for scoped in (JobFilter(status="queued"), JobFilter(tenant="default")):
        assert [r.id for r in list_page(client, scoped, limit=10).rows] == [good.id]  # type: ignore[union-attr]


def test_a_jobs_page_shows_its_children_however_many_jobs_came_after(
    client: Client, settings: Settings, unique: str
) -> None:
    parent = client.submit(prompt=f"parent {unique}")
    kids = [client.submit(prompt=f"kid {i} {unique}", metadata={"parent_job_id": parent.id}) for i in range(2)]
    client.submit_many([{"prompt": f"later {i} {unique}"} for i in range(300)])
    with open_view(settings, client) as http:
        page = http.get(f"/jobs/{parent.id}", headers=HTML).text
    children = page.split('id="children"', 1)[1].split("</ul>", 1)[0]
    assert all(k.id in children for k in kids) and children.count("<li>") == 2


def test_a_waiting_jobs_page_lists_what_it_waits_for(client: Client, settings: Settings, unique: str) -> None:
    first = client.submit(prompt=f"first {unique}")
    then = client.submit(prompt=f"then {unique}", depends_on=[first.id])
    with open_view(settings, client) as http:
        page = http.get(f"/jobs/{then.id}", headers=HTML).text
        listing = http.get("/jobs?status=waiting", headers=HTML).text
    assert 'id="status">waiting' in page
    waits_for = page.split('id="dependencies"', 1)[1].split("</ul>", 1)[0]
    assert first.id in waits_for and "queued" in waits_for
    assert then.id in listing and first.id not in listing
