"""FOR BENCHMARKS ONLY: a runner that starts no CLI. It sleeps, emits the events a short run emits and returns a
canned successful outcome with usage, so `bench/bench_scale.py` measures the control plane alone (Redis, the status
scripts, the loops, the engine) at hundreds of runs in flight per process.

Selected by `CLAUDEQ_BENCH_FAKE_RUNNER=<seconds per run>` (or `claudeq-worker --bench-fake-runner SECONDS`). Never
set it on a real fleet: every job would "succeed" without running. The worker logs a warning at start when it is on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
import uuid

from claudeq.events import AssistantText, ResultReceived, RunStarted, SessionStarted
from claudeq.models import JobResult, JobSpec

from .outcome import EventSink, RunOutcome, RunRequest
from .parse import usage_from_model_usage

#: The environment variable that turns the fake runner on (its value: seconds each run sleeps).
BENCH_FAKE_RUNNER_ENV = "CLAUDEQ_BENCH_FAKE_RUNNER"
FAKE_MODEL = "claude-sonnet-4-5"


def fake_run_seconds() -> float | None:
    """Seconds per fake run when CLAUDEQ_BENCH_FAKE_RUNNER is set (to a number ≥ 0), else None."""
    raw = os.environ.get(BENCH_FAKE_RUNNER_ENV, "").strip()
    if not raw:
        return None
    value = float(raw)
    if value < 0:
        raise ValueError(f"{BENCH_FAKE_RUNNER_ENV} must be a number of seconds >= 0, not {raw!r}")
    return value


class FakeRunner:
    """Implements the engine's RunnerLike: sleep `run_s` (or until cancelled), then report a success."""

    def __init__(self, run_s: float) -> None:
        self.run_s = run_s

    def check(self, spec: JobSpec) -> None:
        """Every spec is acceptable: nothing runs."""

    async def run(self, req: RunRequest, emit: EventSink, cancel: asyncio.Event) -> RunOutcome:
        """Sleep, emitting what a short real run emits (run_started, session, assistant_text, result)."""
        started = time.monotonic()
        # A version-4 UUID from the process's PRNG: uuid4() reads os.urandom, a system call per run that the bench
        # would charge to the control plane (a real session id comes from the CLI).
        session = str(uuid.UUID(int=random.getrandbits(128), version=4))
        outcome = RunOutcome(session_id=session)
        await emit(
            RunStarted(
                account=req.account.name, model=req.spec.model, attempt=req.attempt, reason=req.account_reason
            ).event(req.attempt)
        )
        await emit(SessionStarted(session_id=session).event(req.attempt))
        outcome.first_byte_at = time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.run_s):  # one timer; wait_for would wrap the wait in a task
                await cancel.wait()
        if cancel.is_set():
            outcome.stopped_by = "cancel"
            outcome.duration_s = time.monotonic() - started
            return outcome
        await emit(AssistantText(text="done").event(req.attempt))
        usage = usage_from_model_usage(
            {
                FAKE_MODEL: {
                    "inputTokens": 1200,
                    "outputTokens": 300,
                    "cacheReadInputTokens": 5000,
                    "cacheCreationInputTokens": 0,
                    "costUSD": 0.0093,
                }
            }
        )
        duration_ms = int((time.monotonic() - started) * 1000)
        outcome.result = JobResult(
            text="done", stop_reason="end_turn", num_turns=1, duration_ms=duration_ms, usage=usage
        )
        outcome.got_result = True
        outcome.subtype = "success"
        await emit(
            ResultReceived(
                is_error=False,
                subtype="success",
                num_turns=1,
                duration_ms=duration_ms,
                cost_usd=usage.cost_usd,
                stop_reason="end_turn",
            ).event(req.attempt)
        )
        outcome.duration_s = time.monotonic() - started
        outcome.exit_code = 0
        return outcome
