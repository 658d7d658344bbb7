"""SessionPlanner on fakeredis: new/resume/fork/missing/restart, the turn lock's wait and hand-over, and a retry
continuing its own session. Plus the pure transcript helpers."""

from __future__ import annotations

import time
from typing import Any

import fakeredis
import pytest
from claude_agent_sdk import project_key_for_directory

from claudeq.config.settings import Settings
from claudeq.models import Attempt, Event, JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call
from claudeq.transcripts import RedisSessionStore
from claudeq.worker.delivery.session_planner import (
    CONTINUE_PROMPT,
    SessionPlanner,
    find_continuation,
    is_real_message,
    user_text,
)
from claudeq.worker.run.workdirs import default_cwd
from claudeq.worker.store.job_store import WorkerJobStore, make_worker_store


def _user(uuid: str, text: Any) -> dict[str, Any]:
    return {"type": "user", "uuid": uuid, "message": {"role": "user", "content": text}}


def _assistant(uuid: str, model: str = "claude-sonnet-5-5", content: Any = None) -> dict[str, Any]:
    return {
        "type": "assistant",
        "uuid": uuid,
        "message": {"role": "assistant", "model": model, "content": content or []},
    }


TOOL_RESULT = [{"type": "tool_result", "tool_use_id": "t1", "content": "5"}]


def test_real_messages_exclude_api_error_placeholders_and_metadata() -> None:
    assert is_real_message(_user("u", "hi"))
    assert not is_real_message(_assistant("a", model="<synthetic>"))
    assert not is_real_message({"type": "attachment", "uuid": "x"})
    assert user_text(_user("u", [{"type": "text", "text": "hi"}])) == "hi"
    assert user_text(_user("u", TOOL_RESULT)) is None


def test_continuation_resumes_after_the_tool_work_of_the_failed_attempt() -> None:
    entries = [
        _user("p0", "earlier turn"),
        _assistant("a0"),
        _user("p1", "the prompt"),
        {"type": "attachment", "uuid": "att"},
        _assistant("a1"),
        _user("r1", TOOL_RESULT),
        _assistant("err", model="<synthetic>"),
    ]
    found = find_continuation(entries, "the prompt", base="a0")
    assert found is not None and found.resume_at == "r1" and found.progressed
    nothing_yet = find_continuation(entries[:4], "the prompt", base="a0")
    assert nothing_yet is not None and nothing_yet.resume_at == "p1" and not nothing_yet.progressed
    # the same text in an earlier turn is not this job's prompt
    assert find_continuation([*entries[:2], _user("p2", "again")], "earlier turn", base="a0") is None


class World:
    """A JobStore and a RedisSessionStore sharing one fakeredis server, and a planner over them."""

    def __init__(self, settings: Settings) -> None:
        server = fakeredis.FakeServer()
        self.jobs: WorkerJobStore = make_worker_store(settings, fakeredis.FakeRedis(server=server))
        self.sessions = RedisSessionStore.from_settings(settings, fakeredis.FakeAsyncRedis(server=server))
        self.planner = SessionPlanner(settings, self.jobs, store=self.sessions, recheck_s=5)
        self.project = project_key_for_directory(default_cwd())
        self.events: list[Event] = []

    async def emit(self, event: Event) -> None:
        self.events.append(event)

    def job(self, status: str = "running", **spec: Any) -> JobRecord:
        spec.setdefault("prompt", "the prompt")
        record = JobRecord(id=f"j{time.monotonic_ns()}", spec=JobSpec(**spec), status="queued", created_at=utcnow())
        run_call(self.jobs.create_call(record))
        self.jobs.redis.hset(self.jobs.keys.job(record.id), "status", status)
        return record

    @staticmethod
    def ran(record: JobRecord) -> JobRecord:
        """The record as a retry sees it: its first attempt was written before that attempt's run started."""
        attempt = Attempt(number=len(record.attempts) + 1, started_at=utcnow(), outcome="transient_error")
        return record.model_copy(update={"attempts": [*record.attempts, attempt]})

    def finish(self, record: JobRecord, status: str) -> None:
        """The engine writes the terminal status before calling `finished()`."""
        self.jobs.redis.hset(self.jobs.keys.job(record.id), "status", status)

    async def transcript(self, session_id: str, *entries: dict[str, Any]) -> None:
        await self.sessions.append({"project_key": self.project, "session_id": session_id}, list(entries))  # type: ignore[arg-type]


@pytest.fixture
def world(fake_settings: Settings) -> World:
    return World(fake_settings)


async def test_conversation_starts_then_resumes_and_forks_without_moving(world: World) -> None:
    first = world.job(conversation="c")
    plan = await world.planner.plan(first, world.emit)
    assert plan.mode == "new" and plan.resume is None and plan.session_store is world.sessions
    await world.transcript("s1", _user("p", "the prompt"), _assistant("a"))
    world.finish(first, "succeeded")
    assert await world.planner.finished(first, "succeeded", "s1") == []
    assert world.planner.conversations is not None
    assert run_call(world.planner.conversations.latest_session_call("c")) == "s1"

    second = world.job(conversation="c", prompt="next")
    plan = await world.planner.plan(second, world.emit)
    assert (plan.mode, plan.resume, plan.fork) == ("resume", "s1", False)
    world.jobs.append_event(second.id, world.events[-1])
    world.finish(second, "succeeded")
    await world.planner.finished(second, "succeeded", "s1")

    fork = world.job(conversation="c", prompt="what if", fork=True)
    plan = await world.planner.plan(fork, world.emit)
    assert (plan.mode, plan.resume, plan.fork) == ("fork", "s1", True)
    world.jobs.append_event(fork.id, world.events[-1])
    await world.planner.finished(fork, "succeeded", "s9")
    info = world.planner.conversations.info("c")
    assert info is not None and info.session_id == "s1"  # a fork branches; the conversation stays
    assert [(t.job_id, t.forked, t.resumed_from) for t in info.turns] == [
        (first.id, False, None),
        (second.id, False, "s1"),
        (fork.id, True, "s1"),
    ]


async def test_second_turn_waits_and_is_handed_the_lock_when_the_first_ends(world: World) -> None:
    first, second = world.job(conversation="c"), world.job(conversation="c")
    assert (await world.planner.plan(first)).wait is None
    plan = await world.planner.plan(second)
    assert plan.wait is not None and plan.wait.holder == first.id
    world.jobs.redis.hset(world.jobs.keys.job(second.id), "status", "deferred")
    world.finish(first, "failed")
    assert await world.planner.finished(first, "failed", None) == [second.id]
    assert await world.planner.recheck(second)


async def test_missing_session_fails_the_job_or_restarts_when_asked(world: World) -> None:
    failing = world.job(resume="0d3c1a6e-0000-4000-8000-000000000001")
    plan = await world.planner.plan(failing, world.emit)
    assert plan.error is not None and plan.error.kind == "input"
    assert "0d3c1a6e-0000-4000-8000-000000000001 not found" in plan.error.message

    assert world.planner.conversations is not None
    world.planner.conversations.redis.set(world.jobs.keys.conversation("old"), "expired-session")
    restarting = world.job(conversation="old", on_missing_session="restart")
    plan = await world.planner.plan(restarting, world.emit)
    assert plan.mode == "restart" and plan.resume is None and plan.error is None
    assert [e.type for e in world.events[-2:]] == ["session_restarted", "session_plan"]
    assert world.events[-2].data == {"missing_session_id": "expired-session"}


async def test_session_under_another_project_key_is_copied_and_resumed(world: World) -> None:
    await world.sessions.append({"project_key": "-other-cwd", "session_id": "s5"}, [_user("p", "x")])  # type: ignore[list-item]
    plan = await world.planner.plan(world.job(resume="s5"), world.emit)
    assert plan.mode == "resume" and plan.resume == "s5"
    assert await world.sessions.load({"project_key": world.project, "session_id": "s5"}) is not None


async def test_retry_continues_its_own_session_instead_of_resending_the_prompt(world: World) -> None:
    job = world.job(conversation="c")
    plan = await world.planner.plan(job, world.emit)
    world.jobs.append_event(job.id, world.events[-1])  # session_plan of attempt 1
    world.jobs.append_event(job.id, Event(type="session", data={"session_id": "s1"}))
    await world.transcript(
        "s1", _user("p", "the prompt"), _assistant("a1"), _user("r1", TOOL_RESULT), _assistant("e", "<synthetic>")
    )
    plan = await world.planner.plan(world.ran(job), world.emit)
    assert (plan.mode, plan.resume, plan.resume_at, plan.prompt) == ("continue", "s1", "r1", CONTINUE_PROMPT)

    fresh_retry = world.job()
    world.jobs.append_event(fresh_retry.id, Event(type="session", data={"session_id": "s2"}))  # prompt never stored
    assert (await world.planner.plan(world.ran(fresh_retry))).mode == "new"


async def test_a_job_that_never_ran_is_planned_without_reading_its_events(world: World) -> None:
    job = world.job()

    def no_read(*_: Any, **__: Any) -> Any:
        raise AssertionError("the first attempt's plan read the job's events")

    world.jobs.reads.events = no_read  # type: ignore[method-assign]
    assert (await world.planner.plan(job, world.emit)).mode == "new"
    with pytest.raises(AssertionError, match="read the job's events"):
        await world.planner.plan(world.ran(job), world.emit)  # a retry looks for its own session


async def test_retry_of_an_unanswered_prompt_starts_fresh_instead_of_continuing(world: World) -> None:
    job = world.job()
    await world.planner.plan(job, world.emit)
    world.jobs.append_event(job.id, world.events[-1])  # session_plan of attempt 1 (fresh: no base)
    world.jobs.append_event(job.id, Event(type="session", data={"session_id": "s1"}))
    # The first request failed (e.g. 529): the transcript holds the prompt and a synthetic error message only.
    await world.transcript("s1", _user("p", job.spec.prompt), _assistant("e", "<synthetic>"))
    plan = await world.planner.plan(world.ran(job), world.emit)
    assert plan.mode == "new"
    assert plan.resume is None
    assert plan.prompt is None  # the original prompt is sent, once


async def test_retry_of_an_unanswered_conversation_turn_retakes_it_from_the_same_base(world: World) -> None:
    await world.transcript("s0", _user("u0", "turn one"), _assistant("a0"))
    assert world.planner.conversations is not None
    world.planner.conversations.redis.set(world.jobs.keys.conversation("c2"), "s0")
    job = world.job(conversation="c2")
    first = await world.planner.plan(job, world.emit)
    assert (first.mode, first.resume) == ("resume", "s0")
    world.jobs.append_event(job.id, world.events[-1])
    world.jobs.append_event(job.id, Event(type="session", data={"session_id": "s0"}))
    await world.sessions.append(
        {"project_key": world.project, "session_id": "s0"},
        [_user("p2", job.spec.prompt), _assistant("e2", "<synthetic>")],  # type: ignore[list-item]
    )
    plan = await world.planner.plan(world.ran(job), world.emit)
    assert (plan.mode, plan.resume, plan.resume_at, plan.prompt) == ("retake", "s0", "a0", None)


async def test_a_one_shot_jobs_sessions_get_the_one_shot_retention_at_success_only(fake_settings: Settings) -> None:
    world = World(fake_settings.model_copy(update={"oneshot_session_ttl_s": 0}))
    keep = World(fake_settings)  # unset: the session retention for every transcript

    async def stored(w: World, sid: str) -> bool:
        return await w.sessions.load({"project_key": w.project, "session_id": sid}) is not None

    job = world.job()
    plan = await world.planner.plan(job, world.emit)
    job = job.model_copy(update={"session_plan": plan.stored()})
    for sid in ("s1", "s2"):  # a first attempt that started afresh, then the retry's own session
        world.jobs.append_event(job.id, Event(type="session", data={"session_id": sid}))
        await world.transcript(sid, _user(f"p-{sid}", "the prompt"))
    failed = world.job()
    failed = failed.model_copy(update={"session_plan": plan.stored()})
    await world.transcript("s3", _user("p3", "the prompt"))
    resumed = world.job(resume="s4")
    await world.transcript("s4", _user("p4", "earlier"))
    resumed_plan = await world.planner.plan(resumed, world.emit)
    resumed = resumed.model_copy(update={"session_plan": resumed_plan.stored()})

    await world.planner.finished(failed, "failed", "s3")
    await world.planner.finished(resumed, "succeeded", "s4")
    assert await stored(world, "s3") and await stored(world, "s4")  # a failed job, a resumed session: kept
    await world.planner.finished(job, "succeeded", "s2")
    assert not await stored(world, "s1") and not await stored(world, "s2")

    other = keep.job()
    other = other.model_copy(update={"session_plan": (await keep.planner.plan(other, keep.emit)).stored()})
    await keep.transcript("s5", _user("p5", "the prompt"))
    await keep.planner.finished(other, "succeeded", "s5")
    assert await stored(keep, "s5")
