"""claudeq.testing's scripted failures against the real thing: the same jobs through real `claudeq-worker`
processes, the real CLI and the simulator (directives in the prompts, docs/simulator.md), and through the kit's
in-process fleet, whose rules match those very prompts. The records must agree field by field: status, error kind
and retryability, each attempt's outcome, whether an attempt moved to another account, the answer's text."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

import pytest

from claudeq.config.account_pool import AccountConfig
from claudeq.config.settings import Settings
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from claudeq.testing import (
    Failure,
    Reply,
    api_error,
    auth_failed,
    fleet,
    never_answers,
    overloaded,
    rate_limited,
    timeout,
)
from tests.e2e.conftest import WorkerFactory

pytestmark = pytest.mark.e2e

#: (prompt with its simulator directives, the kit's failures for the same prompt, extra spec fields)
Scenario = tuple[str, list[Failure], dict[str, Any]]

COMMON: list[Scenario] = [
    ('[[sim: text "parity"]] answer', [], {}),
    ("[[sim: error 529 times=2]] overloaded twice", [overloaded(), overloaded()], {}),
    ("[[sim: error 500 times=9]] always failing", [api_error(500)] * 3, {}),
    ("[[sim: error 400]] a bad request", [api_error(400, "invalid_request_error")], {}),
    ("[[sim: stall 20 times=1]] stalls once", [timeout("idle")], {"idle_timeout_s": 2}),
    ("[[sim: delay 20 times=1]] silent once", [never_answers()], {"first_byte_timeout_s": 2}),
]
#: Each cools or disables one of the two accounts: a test of its own.
RATE_LIMITED: list[Scenario] = [("[[sim: error 429 times=1]] rate limited once", [rate_limited(resets_in=3600)], {})]
AUTH_FAILED: list[Scenario] = [("[[sim: error 401 times=2]] bad token (the CLI asks twice)", [auth_failed()], {})]


def shape(record: JobRecord) -> dict[str, Any]:
    """What the two runs of a scenario must agree on."""
    attempts = record.attempts
    return {
        "status": record.status,
        "error_kind": record.error.kind if record.error else None,
        "retryable": record.error.retryable if record.error else None,
        "outcomes": [a.outcome for a in attempts],
        # A retry goes to whichever account is free (load decides); a reroute must leave the account it met.
        "rerouted": [
            b.account != a.account
            for a, b in itertools.pairwise(attempts)
            if a.outcome in ("rate_limited", "auth_failed")
        ],
        "text": record.result.text
        if record.status == "succeeded" and record.result and "parity" in record.spec.prompt
        else None,
    }


#: The worker settings the kit's fleet takes from the real fleet's, so that both retry alike.
KNOBS = ("max_attempts", "retry_base_s", "retry_max_s", "retry_in_place_max_s", "rate_limit_cooldown_s")


def through_the_kit(
    scenarios: list[Scenario], settings: Settings, accounts: Sequence[AccountConfig | str] = ("a", "b")
) -> list[dict[str, Any]]:
    knobs = {k: getattr(settings, k) for k in KNOBS}
    with fleet(accounts=accounts, **knobs) as f:
        f.reply(re.escape('[[sim: text "parity"]]'), text="parity")
        for prompt, failures, _ in scenarios:
            if failures:
                f.fail(re.escape(prompt), *failures)
        handles = [f.client.submit(prompt=prompt, **extra) for prompt, _, extra in scenarios]
        return [shape(handle.wait()) for handle in handles]


def through_the_worker(scenarios: list[Scenario], client: Client, workers: WorkerFactory) -> list[JobRecord]:
    workers()
    handles = [client.submit(prompt=prompt, **extra) for prompt, _, extra in scenarios]
    return [client.wait(handle.id, timeout=120, poll_s=0.1) for handle in handles]


def differences(scenarios: list[Scenario], kit: list[dict[str, Any]], real: list[JobRecord]) -> str:
    """Where the kit's records differ from the real worker's, with what each real attempt said (its account and
    detail: the reason an unexpected outcome was recorded); empty when they agree."""
    lines = []
    for (prompt, _, _), got, record in zip(scenarios, kit, real, strict=True):
        want = shape(record)
        if got != want:
            lines += [f"{prompt}:", f"  kit  {got}", f"  real {want}"]
            lines += [f"    attempt {a.number} on {a.account}: {a.outcome}: {a.detail}" for a in record.attempts]
    return "\n".join(lines)


@pytest.mark.parametrize("scenarios", [COMMON, RATE_LIMITED, AUTH_FAILED], ids=["common", "429", "401"])
def test_the_kit_and_the_real_worker_give_the_same_records(
    scenarios: list[Scenario], client: Client, workers: WorkerFactory, settings: Settings
) -> None:
    real = through_the_worker(scenarios, client, workers)
    kit = through_the_kit(scenarios, settings)
    differ = differences(scenarios, kit, real)
    assert not differ, differ


def conversation_shape(records: list[JobRecord]) -> dict[str, Any]:
    return {
        "statuses": [r.status for r in records],
        "outcomes": [[a.outcome for a in r.attempts] for r in records],
        "same_session": [r.session_id == records[0].session_id for r in records[1:]],
        "plans": [r.session_plan.mode if r.session_plan else None for r in records],
    }


def test_a_conversation_resumes_the_same_way(client: Client, workers: WorkerFactory, settings: Settings) -> None:
    turns = ["[[sim: text first]] remember this", "[[sim: error 529 times=1]] [[sim: text second]] and now?"]
    workers()
    real_handles = [client.submit(prompt=p, conversation="parity") for p in turns]
    real = conversation_shape([client.wait(h.id, timeout=120, poll_s=0.1) for h in real_handles])
    knobs = {k: getattr(settings, k) for k in KNOBS}
    with fleet(accounts=["a", "b"], default=Reply(), **knobs) as f:  # only the failure is scripted
        f.fail(re.escape("[[sim: error 529 times=1]]"), overloaded())
        handles = [f.client.submit(prompt=p, conversation="parity") for p in turns]
        kit = conversation_shape([h.wait() for h in handles])
    assert kit == real
