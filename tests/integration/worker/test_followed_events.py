"""A run's events wait for its status write while nobody follows the job, and reach Redis within moments once
someone does: a follower (`events --follow`, the client's and MCP's follow) announces itself on the follow channel
and the worker running the job stores what waits at once. A real worker process (the fake runner: a 6 s run that
emits `run_started` and `session` at its start), real Redis, the producer's client."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from claudeq.models import Event
from claudeq.producer.client import Client
from claudeq.worker.run.fake_runner import BENCH_FAKE_RUNNER_ENV
from tests.conftest import make_settings
from tests.support.procs import run_until
from tests.support.worker_proc import SimAccount, start_worker, stop_all, write_accounts_toml

pytestmark = pytest.mark.integration

RUN_S = 6.0


def test_a_follower_sees_the_runs_events_while_it_runs(redis_url: str, unique: str, tmp_path: Path) -> None:
    accounts = [SimAccount("acct-a", max_concurrency=2)]
    accounts_file = write_accounts_toml(tmp_path / "accounts.toml", accounts, "http://127.0.0.1:9")
    settings = make_settings(redis_url, unique, accounts_file=accounts_file)
    assert settings.event_flush_s >= 2  # the default: a run's events wait while nobody follows
    worker = start_worker(settings, accounts, tmp_path, extra_env={BENCH_FAKE_RUNNER_ENV: str(RUN_S)})
    client = Client(settings)
    try:
        unfollowed = client.submit(prompt="nobody follows me")
        submitted = time.monotonic()
        run_until(lambda: client.get(unfollowed.id).status == "running", 30, what="the first job running")
        time.sleep(0.5)  # its run has emitted run_started and session: they wait (nobody follows)
        waiting = [e.type for e in client.events(unfollowed.id)]
        if time.monotonic() - submitted < settings.event_flush_s - 0.3:  # else this machine was too slow to tell
            assert waiting == ["submitted"], waiting

        followed = client.submit(prompt="follow me")
        seen: list[tuple[float, Event]] = []

        def follow() -> None:
            for event in client.events(followed.id, follow=True):
                seen.append((time.monotonic(), event))

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        run_until(lambda: any(e.type == "run_started" for _, e in seen), 30, what="run_started seen by the follower")
        started = next(at for at, e in seen if e.type == "run_started")
        follower.join(timeout=RUN_S + 30)
        assert not follower.is_alive()
        finished = next(at for at, e in seen if e.type == "succeeded")
        # Seen while the run still had seconds to go, not with its terminal write.
        assert finished - started > RUN_S / 2, (finished - started, [e.type for _, e in seen])
        types = [e.type for _, e in seen]
        assert types[0] == "submitted" and types[-1] == "succeeded"
        assert {"claimed", "run_started", "session", "result"} <= set(types)

        # The job nobody followed has all its events too, stored with its terminal write.
        run_until(lambda: client.get(unfollowed.id).status == "succeeded", 30, what="the first job finished")
        kept = [e.type for e in client.events(unfollowed.id)]
        assert kept[0] == "submitted" and kept[-1] == "succeeded" and "run_started" in kept and "session" in kept
    finally:
        stop_all([worker])
