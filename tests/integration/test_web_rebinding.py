"""`claudeq web` with no token configured (the default) is not open to a page on another site: DNS rebinding (a
name the attacker controls, resolved to 127.0.0.1) is refused by the host allow-list before any route, and every page
needs the token the server printed at start (docs/web.md#who-sees-what)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from claudeq.producer.web import create_app
from tests.support.web_proc import serve_command

pytestmark = pytest.mark.integration

ATTACKER = "rebind.attacker.example"


def test_a_rebound_name_reads_no_prompt_and_cancels_no_job(
    settings: Settings, client: Client, redis_client: redis.Redis, tmp_path: Path, unique: str
) -> None:
    job = client.submit(prompt=f"private prompt {unique}")
    with serve_command("web", settings, tmp_path) as web:
        port = web.base.rsplit(":", 1)[1]
        # The browser of a user who opened the attacker's page, once the name resolves to 127.0.0.1: the request
        # reaches the server with the attacker's name as Host and Origin.
        rebound = {"host": f"{ATTACKER}:{port}", "origin": f"http://{ATTACKER}:{port}", "accept": "text/html"}
        with httpx.Client(base_url=web.base, headers=rebound) as attacker:
            listing = attacker.get("/jobs")
            assert f"private prompt {unique}" not in listing.text
            assert listing.status_code == 421, listing.status_code
            page = attacker.get(f"/jobs/{job.id}")
            assert f"private prompt {unique}" not in page.text and page.status_code == 421
            form = re.search(r'name="csrf" value="([^"]+)"', page.text)
            cancel = attacker.post(f"/jobs/{job.id}/cancel", data={"csrf": form[1] if form else ""})
            assert cancel.status_code == 421
            # The HTTP API it serves is behind the same guard.
            assert attacker.get("/api/v1/jobs").status_code == 421
            assert attacker.post(f"/api/v1/jobs/{job.id}/cancel").status_code == 421
        assert client.get(job.id).status == "queued"


def test_with_no_token_configured_the_server_prints_one_and_every_page_needs_it(
    settings: Settings, client: Client, redis_client: redis.Redis, tmp_path: Path, unique: str
) -> None:
    job = client.submit(prompt=f"kept for the token holder {unique}")
    with serve_command("web", settings, tmp_path) as web:
        token = web.printed_token()
        assert token is not None and len(token) >= 32, web.log()
        with httpx.Client(base_url=web.base) as anyone:
            assert anyone.get("/jobs").status_code == 401
            assert anyone.get(f"/jobs/{job.id}").status_code == 401
            assert anyone.get("/jobs?token=not-the-token", follow_redirects=True).status_code == 401
        # The printed URL logs the browser in (a session cookie; the token leaves the address bar at once).
        with httpx.Client(base_url=web.base, headers={"accept": "text/html"}) as browser:
            landed = browser.get(f"/?token={token}", follow_redirects=True)
            assert landed.status_code == 200 and "token=" not in str(landed.url)
            assert f"kept for the token holder {unique}" in landed.text
            assert browser.get(f"/jobs/{job.id}").status_code == 200
        # A script gives it as a bearer token; localhost is the same server.
        bearer = {"authorization": f"Bearer {token}", "host": web.base.replace("http://127.0.0.1", "localhost")}
        assert httpx.get(f"{web.base}/jobs/{job.id}", headers=bearer).status_code == 200


def test_behind_a_proxy_the_configured_origin_is_answered_and_may_act(
    settings: Settings, client: Client, redis_client: redis.Redis, unique: str
) -> None:
    job = client.submit(prompt=f"behind the proxy {unique}")
    proxied = settings.model_copy(update={"web_origin": "https://claudeq.example.com"})
    app = create_app(proxied, client, start_token="operator-token-of-the-proxy-test")
    with TestClient(app, base_url="https://claudeq.example.com") as browser:
        landed = browser.get("/?token=operator-token-of-the-proxy-test", headers={"accept": "text/html"})
        assert landed.status_code == 200 and job.id in landed.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', landed.text)
        assert csrf is not None
        other = {"origin": "https://rebind.attacker.example"}
        assert browser.post(f"/jobs/{job.id}/cancel", data={"csrf": csrf[1]}, headers=other).status_code == 403
        assert client.get(job.id).status == "queued"
        mine = {"origin": "https://claudeq.example.com"}
        assert browser.post(f"/jobs/{job.id}/cancel", data={"csrf": csrf[1]}, headers=mine).status_code == 200
        assert client.get(job.id).status == "cancelled"


def test_claudeq_api_prints_its_own_token_and_answers_only_to_its_names(
    settings: Settings, client: Client, redis_client: redis.Redis, tmp_path: Path, unique: str
) -> None:
    job = client.submit(prompt=f"for the api's token holder {unique}")
    with serve_command("api", settings, tmp_path) as api:
        token = api.printed_token()
        assert token is not None and len(token) >= 32, api.log()
        base = f"{api.base}/api/v1"
        assert httpx.get(f"{base}/jobs/{job.id}").status_code == 401
        answer = httpx.get(f"{base}/jobs/{job.id}", headers={"authorization": f"Bearer {token}"})
        assert answer.status_code == 200 and answer.json()["spec"]["prompt"] == f"for the api's token holder {unique}"
        port = api.base.rsplit(":", 1)[1]
        rebound = {"authorization": f"Bearer {token}", "host": f"{ATTACKER}:{port}"}
        assert httpx.get(f"{base}/jobs/{job.id}", headers=rebound).status_code == 421
