"""claudeq.testing's fleet: scripted replies and failures through the real worker code, virtual time, stepping,
the async client, idempotency, conversations, tenants and fleet-tool children, asserted on records and events."""

from __future__ import annotations

import time

import pytest

from claudeq.errors import JobSpecError, JobTimeout
from claudeq.testing import (
    Fleet,
    FleetStalled,
    Reply,
    Run,
    api_error,
    auth_failed,
    budget_exhausted,
    crash,
    fleet,
    max_turns_reached,
    never_answers,
    overloaded,
    rate_limited,
    timeout,
)


def outcomes(f: Fleet, job_id: str) -> list[str | None]:
    return [a.outcome for a in f.record(job_id).attempts]


def test_reply_by_pattern_with_structured_output_usage_and_tool_calls(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.reply(
        r"^triage",
        text="two need a look",
        structured={"urgent": 2},
        usage={"input_tokens": 1200, "output_tokens": 80, "cost_usd": 0.012},
        tool_calls=[("Grep", {"pattern": "TODO"}), "Read"],
    )
    schema = {"type": "object", "properties": {"urgent": {"type": "integer"}}, "required": ["urgent"]}
    job = claudeq_fleet.client.submit(prompt="triage the issues", output_schema=schema)
    record = job.wait()
    assert record.status == "succeeded" and record.result is not None
    assert record.result.text == "two need a look" and record.result.structured_output == {"urgent": 2}
    assert record.result.usage.input_tokens == 1200 and record.result.usage.cost_usd == pytest.approx(0.012)
    types = claudeq_fleet.event_types(job.id)
    assert types[0] == "submitted" and types[-1] == "succeeded"
    tools = [e.data["tool"] for e in claudeq_fleet.events(job.id) if e.type == "tool_call"]
    assert tools == ["Grep", "Read"]


def test_structured_output_that_breaks_the_schema_fails_the_job(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.reply("count", structured={"n": "many"})
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    record = claudeq_fleet.client.submit(prompt="count", output_schema=schema).wait()
    assert record.status == "failed" and record.error is not None and record.error.kind == "job"


def test_unmatched_prompts_get_the_default_and_callables_choose(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.reply(lambda run: Reply(text=run.prompt.upper()) if "shout" in run.prompt else None)
    loud = claudeq_fleet.client.submit(prompt="shout this")
    other = claudeq_fleet.client.submit(prompt="something else")
    claudeq_fleet.run_until_idle()
    assert claudeq_fleet.record(loud.id).result.text == "SHOUT THIS"  # type: ignore[union-attr]
    assert claudeq_fleet.record(other.id).result.text == "ok"  # type: ignore[union-attr]


def test_overloaded_is_retried_then_succeeds(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.fail("x", overloaded(), overloaded())
    job = claudeq_fleet.client.submit(prompt="x")
    assert job.wait().status == "succeeded"
    assert outcomes(claudeq_fleet, job.id) == ["transient_error", "transient_error", "success"]
    assert [e.type for e in claudeq_fleet.events(job.id)].count("retry") == 2


def test_transient_errors_past_max_attempts_fail_the_job(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.fail("x", api_error(500), crash(), overloaded())
    record = claudeq_fleet.client.submit(prompt="x").wait()
    assert record.status == "failed" and record.error is not None
    assert record.error.kind == "transient" and record.error.retryable
    assert [a.outcome for a in record.attempts] == ["transient_error"] * 3


def test_a_permanent_api_error_fails_at_once(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.fail("x", api_error(400, "bad request"))
    record = claudeq_fleet.client.submit(prompt="x").wait()
    assert record.status == "failed" and [a.outcome for a in record.attempts] == ["failed"]


def test_rate_limited_then_succeeds_on_the_next_window_in_virtual_time() -> None:
    started = time.monotonic()
    with fleet() as f:
        f.fail("report", rate_limited(resets_in=3600))
        job = f.client.submit(prompt="report")
        before = f.now()
        record = job.wait()
        assert record.status == "succeeded"
        assert [a.outcome for a in record.attempts] == ["rate_limited", "success"]
        assert (f.now() - before).total_seconds() >= 3600
        assert "deferred" in f.event_types(job.id)
    assert time.monotonic() - started < 5  # the real clock is back, and barely moved


def test_rate_limit_moves_the_job_to_another_account_at_once() -> None:
    with fleet(accounts=["a", "b"]) as f:
        f.fail("x", rate_limited(resets_in=600))
        record = f.client.submit(prompt="x").wait()
        assert record.status == "succeeded"
        assert [a.outcome for a in record.attempts] == ["rate_limited", "success"]
        assert record.attempts[0].account != record.attempts[1].account
        assert "deferred" not in f.event_types(record.id)


def test_auth_failure_disables_the_account_and_reroutes() -> None:
    with fleet(accounts=["a", "b"]) as f:
        f.fail("x", auth_failed())
        record = f.client.submit(prompt="x").wait()
        assert record.status == "succeeded"
        assert [a.outcome for a in record.attempts] == ["auth_failed", "success"]
        assert record.attempts[0].account != record.attempts[1].account


def test_auth_failure_on_the_only_account_fails_the_job(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.fail("x", auth_failed())
    record = claudeq_fleet.client.submit(prompt="x", max_attempts=1).wait()
    assert record.status == "failed" and record.error is not None and record.error.kind == "account"


@pytest.mark.parametrize("failure", [timeout(), timeout("first_byte"), never_answers()])
def test_stalled_runs_are_stopped_by_the_watchdog_and_retried(claudeq_fleet: Fleet, failure: object) -> None:
    claudeq_fleet.fail("x", failure)  # type: ignore[arg-type]
    before = claudeq_fleet.now()
    job = claudeq_fleet.client.submit(prompt="x", idle_timeout_s=30, first_byte_timeout_s=20)
    assert job.wait().status == "succeeded"
    assert outcomes(claudeq_fleet, job.id) == ["timeout", "success"]
    assert (claudeq_fleet.now() - before).total_seconds() >= 20
    assert "stopped" in claudeq_fleet.event_types(job.id)


def test_step_lets_a_test_assert_between_deliveries(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.fail("x", rate_limited(resets_in=120))
    job = claudeq_fleet.client.submit(prompt="x")
    assert claudeq_fleet.record(job.id).status == "queued"
    first = claudeq_fleet.step()
    assert first is not None and first.outcome == "deferred"
    assert claudeq_fleet.record(job.id).status == "deferred"
    assert claudeq_fleet.step() is None  # not due yet: time stands still between steps
    claudeq_fleet.advance(121)
    claudeq_fleet.run_until_idle()
    assert claudeq_fleet.record(job.id).status == "succeeded"


def test_wait_with_a_timeout_is_virtual(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.fail("x", rate_limited(resets_in=3600))
    job = claudeq_fleet.client.submit(prompt="x")
    with pytest.raises(JobTimeout):
        job.wait(timeout=60)
    assert job.wait(timeout=7200).status == "succeeded"


def test_submit_validation_and_idempotency_are_the_real_clients(claudeq_fleet: Fleet) -> None:
    with pytest.raises(JobSpecError) as refused:
        claudeq_fleet.client.submit(prompt="  ")
    assert refused.value.errors[0][0] == "prompt"
    first = claudeq_fleet.client.submit(prompt="once", idempotency_key="k1")
    again = claudeq_fleet.client.submit(prompt="once", idempotency_key="k1")
    assert first.id == again.id and first.created and not again.created
    claudeq_fleet.run_until_idle()
    assert len(claudeq_fleet.runs) == 1
    assert [s.prompt for s in claudeq_fleet.specs()] == ["once"]


def test_cancel_of_a_queued_job(claudeq_fleet: Fleet) -> None:
    job = claudeq_fleet.client.submit(prompt="x")
    assert job.cancel() == "cancelled"
    claudeq_fleet.run_until_idle()
    assert claudeq_fleet.record(job.id).status == "cancelled" and claudeq_fleet.runs == []


def test_cancel_while_a_run_hangs_reaches_it_through_the_heartbeat(claudeq_fleet: Fleet) -> None:
    def hang_and_cancel(run: Run) -> object:
        claudeq_fleet.client.cancel(run.job_id)
        return never_answers()

    claudeq_fleet.reply(hang_and_cancel)  # type: ignore[arg-type]
    record = claudeq_fleet.client.submit(prompt="x").wait()
    assert record.status == "cancelled" and [a.outcome for a in record.attempts] == ["cancelled"]


def test_conversation_turns_resume_the_previous_session(claudeq_fleet: Fleet) -> None:
    first = claudeq_fleet.client.submit(prompt="hello", conversation="chat-1")
    second = claudeq_fleet.client.submit(prompt="and then?", conversation="chat-1")
    claudeq_fleet.run_until_idle()
    one, two = claudeq_fleet.record(first.id), claudeq_fleet.record(second.id)
    assert one.status == two.status == "succeeded"
    assert claudeq_fleet.runs[-1].resume == one.session_id
    assert two.session_id == one.session_id


def test_children_submitted_from_a_run_record_their_parent(claudeq_fleet: Fleet) -> None:
    def fan_out(run: Run) -> Reply | None:
        if run.prompt != "plan":
            return None
        for part in ("a", "b"):
            run.submit(prompt=f"part {part}")
        return Reply(text="fanned out")

    claudeq_fleet.reply(fan_out)
    parent = claudeq_fleet.client.submit(prompt="plan")
    claudeq_fleet.run_until_idle()
    children = claudeq_fleet.client.list(parent_job_id=parent.id)
    assert sorted(c.spec.prompt for c in children if not isinstance(c, Exception)) == ["part a", "part b"]
    assert all(r.status == "succeeded" for r in claudeq_fleet.submitted())


def test_tenant_budget_defers_until_the_next_hour() -> None:
    tenants = {"tenants": [{"name": "team-a", "max_cost_usd_per_hour": 0.05}]}
    with fleet(tenants=tenants) as f:
        f.reply("x", usage={"input_tokens": 10, "cost_usd": 0.05})  # each run spends the whole hour's cap
        jobs = [f.client.submit(prompt="x", tenant="team-a") for _ in range(3)]
        f.run_until_idle(advance=False)
        statuses = [f.record(j.id).status for j in jobs]
        assert statuses.count("succeeded") >= 1 and "deferred" in statuses
        f.run_until_idle()
        assert all(f.record(j.id).status == "succeeded" for j in jobs)
        with pytest.raises(JobSpecError):
            f.client.submit(prompt="x", tenant="nobody")  # a tenant the tenants file does not list


async def test_async_client(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.fail("x", overloaded())
    job = await claudeq_fleet.async_client.submit(prompt="x")
    record = await job.wait()
    assert record.status == "succeeded"
    types = [event.type async for event in job.events(follow=True)]
    assert types[-1] == "succeeded"


def test_events_follow_drives_the_job_to_its_end(claudeq_fleet: Fleet) -> None:
    job = claudeq_fleet.client.submit(prompt="x")
    assert [e.type for e in job.events(follow=True)][-1] == "succeeded"


def test_a_job_that_cannot_finish_says_so(claudeq_fleet: Fleet) -> None:
    job = claudeq_fleet.client.submit(prompt="x")
    claudeq_fleet.redis.delete(claudeq_fleet.settings.queue)  # its message lost
    with pytest.raises(FleetStalled):
        job.wait()


def test_the_real_clock_is_back_after_close() -> None:
    real_before = time.time()
    with fleet() as f:
        f.advance(3600)
        assert time.time() >= real_before + 3600
    assert time.time() < real_before + 60


def test_a_run_that_waits_forever_fails_instead_of_spinning() -> None:
    forty_days = 40 * 86400
    # Watchdogs further out than the kit's limit on one delivery's virtual waits (30 days): called stuck.
    slow = {"heartbeat_s": 3600, "lease_ttl_s": 7200}  # hourly heartbeats: the limit comes after ~720 jumps
    with fleet(first_byte_timeout_s=forty_days, deadline_s=forty_days, max_deadline_s=forty_days, **slow) as f:
        f.fail("x", never_answers())
        job = f.client.submit(prompt="x")
        with pytest.raises(FleetStalled):
            job.wait()


def test_submit_many_and_priorities_go_through_the_real_client(claudeq_fleet: Fleet) -> None:
    priorities = [9, 5, 0]  # kombu's steps 9, 3 and 0: the broker hands out step 0 first
    handles = claudeq_fleet.client.submit_many(
        [{"prompt": f"job {i}", "priority": p} for i, p in enumerate(priorities)]
    )
    claudeq_fleet.run_until_idle()
    assert all(claudeq_fleet.record(h.id).status == "succeeded" for h in handles)
    assert [run.spec.prompt for run in claudeq_fleet.runs] == ["job 2", "job 1", "job 0"]
    assert all(run.job_id and run.attempt == 1 for run in claudeq_fleet.runs)


@pytest.mark.parametrize("failure", [max_turns_reached(), budget_exhausted({"cost_usd": 0.5})])
def test_a_run_that_hits_its_limits_fails_at_once(claudeq_fleet: Fleet, failure: object) -> None:
    claudeq_fleet.fail("x", failure)  # type: ignore[arg-type]
    record = claudeq_fleet.client.submit(prompt="x").wait()
    assert record.status == "failed" and record.error is not None and record.error.kind == "job"
    assert [a.outcome for a in record.attempts] == ["failed"]


def test_a_reply_costing_more_than_the_runs_budget_ends_as_the_cli_ends_it() -> None:
    """The CLI stops a run whose spend passed its --max-budget-usd with `error_max_budget_usd`, so a scripted reply
    costing more than the run's budget (the spec's, or the tenant's hourly cap left) fails the job, kind `job`."""
    tenants = {"tenants": [{"name": "default"}, {"name": "team-a", "max_cost_usd_per_hour": 0.01, "on_budget": "fail"}]}
    with fleet(tenants=tenants) as f:
        f.reply("x", usage={"input_tokens": 10, "cost_usd": 0.02})
        over_spec = f.client.submit(prompt="x", max_budget_usd=0.015).wait()
        within = f.client.submit(prompt="x", max_budget_usd=0.05).wait()
        over_cap = f.client.submit(prompt="x", tenant="team-a").wait()
        after = f.client.submit(prompt="x", tenant="team-a").wait()
    assert (over_spec.status, over_spec.error and over_spec.error.kind) == ("failed", "job")
    assert [a.outcome for a in over_spec.attempts] == ["failed"]
    assert within.status == "succeeded"
    assert (over_cap.status, over_cap.error and over_cap.error.kind) == ("failed", "job")
    assert (after.status, after.error and after.error.kind) == ("failed", "budget_exceeded")


def test_a_finished_jobs_events_are_packed_by_the_worker_and_read_the_same(claudeq_fleet: Fleet) -> None:
    claudeq_fleet.reply("review", text="looks fine " * 200, tool_calls=[("Read", {"file_path": "a.py"})] * 5)
    job = claudeq_fleet.client.submit(prompt="review it")
    assert job.wait().status == "succeeded"
    stored = claudeq_fleet.redis.hget(claudeq_fleet.settings_keys.job(job.id), "events")
    assert isinstance(stored, bytes) and stored[:1] == b"x"  # zlib, not the JSON the status script wrote
    types = claudeq_fleet.event_types(job.id)
    assert types[0] == "submitted" and types.count("tool_call") == 5 and types[-1] == "succeeded"
    assert [e.type for e in job.events()] == types


def test_event_codec_none_keeps_the_json() -> None:
    with fleet(event_codec="none") as f:
        job = f.client.submit(prompt="plain")
        assert job.wait().status == "succeeded"
        stored = f.redis.hget(f.settings_keys.job(job.id), "events")
        assert isinstance(stored, bytes) and stored.startswith(b"[")
