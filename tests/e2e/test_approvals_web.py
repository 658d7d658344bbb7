"""Tool approval in `claudeq web`, in a real browser (headless chromium): a tenant finds its waiting jobs under
Approvals, approves one and denies another with the job page's buttons; and the webhook events a chat bot would ask
the person from (docs/jobs.md#tool-approval).

Real workers, the real CLI, the simulator scripting a `Bash` call per job; a marker file counts the commands that
really ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.e2e.test_approvals import WORKSPACE_GID, bash_prompt, marker, ran, waiting, workspace
from tests.e2e.test_notifications import SECRET, Receiver, receiver
from tests.e2e.test_web import TENANTS, TOKENS, browser, web
from tests.support.procs import run_until
from tests.support.webdriver import Browser
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

__all__ = ["browser", "marker", "receiver", "web", "workspace"]  # fixtures, used by name


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, tmp_path: Path, workspace: Path) -> Settings:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANTS)
    policy = WorkerPolicy(allowed_tools=["Bash"], workspace_roots=[workspace], run_groups=[WORKSPACE_GID])
    return make_settings(
        redis_url, unique, accounts_file=accounts_file, tenants_file=tenants, policy=policy, **FAST_E2E
    )


def test_a_tenant_approves_and_denies_from_the_job_page(
    web: str, browser: Browser, workers: WorkerFactory, client: Client, marker: Path
) -> None:
    workers()
    yes = client.submit(
        prompt=bash_prompt(marker, "yes"),
        tools=["Bash"],
        cwd=str(marker.parent),
        approve_tools=["Bash"],
        tenant="team-a",
    )
    no = client.submit(
        prompt=bash_prompt(marker, "no"),
        tools=["Bash"],
        cwd=str(marker.parent),
        approve_tools=["Bash"],
        tenant="team-a",
    )
    waiting(client, yes.id)
    waiting(client, no.id)

    browser.get(f"{web}/login")
    browser.find("#token").send_keys(TOKENS["CQT_WEB_E2E_A"])
    browser.find("#login").click()
    browser.until(lambda d: d.find_all("#approvals-link"))
    assert browser.find(f'#jobs tr[data-job="{yes.id}"] .status').text == "waiting_approval"
    browser.find("#approvals-link").click()
    browser.until(lambda d: d.find_all("#approvals"))
    assert {yes.id[:12], no.id[:12]} <= {a.text for a in browser.find_all("#approvals a")}

    browser.get(f"{web}/jobs/{yes.id}")
    assert browser.find("#status").text == "waiting_approval"
    assert "echo yes" in browser.find("#approval-input").text
    browser.find("#approve").click()
    assert client.wait(yes.id, timeout=90).status == "succeeded"
    browser.get(f"{web}/jobs/{yes.id}")
    assert "approved by tenant:team-a" in browser.find("#approval-decided").text

    browser.get(f"{web}/jobs/{no.id}")
    browser.find("#approval-reason").send_keys("not from the browser")
    browser.find("#deny").click()
    done = client.wait(no.id, timeout=90)
    assert done.status == "succeeded", done.error
    assert "not from the browser" in (done.result.text if done.result else "")
    browser.get(f"{web}/approvals")
    assert browser.find_all("#no-approvals")
    assert ran(marker) == ["yes"]


class TestWebhook:
    """A webhook that follows `approval_requested` hears of the request while the job waits: a chat bot can ask."""

    @pytest.fixture
    def settings(
        self, redis_url: str, unique: str, accounts_file: Path, workspace: Path, receiver: Receiver
    ) -> Settings:
        return make_settings(
            redis_url,
            unique,
            accounts_file=accounts_file,
            webhook_hosts=["127.0.0.1"],
            webhook_ports=[receiver.server.server_address[1]],  # a loopback receiver: its port and its range allowed
            webhook_allow_nets=["127.0.0.0/8"],
            webhook_secret=SecretStr(SECRET),
            webhook_timeout_s=1.0,
            notify_backoff_s=0.1,
            policy=WorkerPolicy(allowed_tools=["Bash"], workspace_roots=[workspace], run_groups=[WORKSPACE_GID]),
            **FAST_E2E,
        )

    def test_the_request_reaches_the_webhook_while_the_job_waits(
        self, client: Client, workers: WorkerFactory, receiver: Receiver, marker: Path
    ) -> None:
        workers()
        job = client.submit(
            prompt=bash_prompt(marker, "bot"),
            tools=["Bash"],
            cwd=str(marker.parent),
            approve_tools=["Bash"],
            webhook={"url": f"{receiver.url}/ok", "events": ["approval_requested", "approval_decided"]},
        )

        def asked() -> list[dict[str, Any]]:
            with receiver.lock:
                return [
                    s["payload"]["event"]
                    for s in receiver.seen
                    if s["id"].startswith(f"job_{job.id}_") and s["payload"] and "event" in s["payload"]
                ]

        [request] = run_until(asked, timeout=90, what="the approval request at the webhook")
        assert request["type"] == "approval_requested" and "echo bot" in request["data"]["input"]["command"]
        assert client.get(job.id).shown_status == "waiting_approval"
        client.approve(job.id, reason=f"via bot for {request['data']['request_id']}")
        assert client.wait(job.id, timeout=90).status == "succeeded"
        assert run_until(lambda: len(asked()) == 2 and asked(), timeout=60)[1]["type"] == "approval_decided"
        assert ran(marker) == ["bot"]
