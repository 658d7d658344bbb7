"""Watchdog timers with a fake clock: first byte, idle (suspended while a tool runs), deadline."""

from __future__ import annotations

import pytest

from claudeq.config.settings import Settings
from claudeq.models import JobSpec
from claudeq.worker.run.watchdog import Timeouts, Watchdog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def dog(clock: Clock, first: float = 10, idle: float = 2, deadline: float = 100) -> Watchdog:
    return Watchdog(Timeouts(first_byte_s=first, idle_s=idle, deadline_s=deadline), clock=clock)


def test_first_byte_fires_when_nothing_streams(clock: Clock) -> None:
    wd = dog(clock)
    wd.prompt_sent()
    clock.now = 3
    wd.mark()  # the init message is progress but not model output
    assert wd.check() == (None, pytest.approx(7))
    clock.now = 10
    assert wd.check()[0] == "first_byte"


def test_idle_after_first_byte_and_progress_resets_it(clock: Clock) -> None:
    wd = dog(clock)
    clock.now = 1
    wd.mark(first_byte=True)
    assert wd.check() == (None, pytest.approx(2))
    clock.now = 2.5
    wd.mark()
    clock.now = 4.0
    assert wd.check()[0] is None
    clock.now = 4.5
    assert wd.check()[0] == "idle"


def test_idle_is_suspended_while_a_tool_runs(clock: Clock) -> None:
    wd = dog(clock)
    clock.now = 1
    wd.mark(first_byte=True)
    wd.tool_running(True)
    clock.now = 50
    assert wd.check() == (None, pytest.approx(50))  # only the deadline is left
    wd.tool_running(False)
    assert wd.check() == (None, pytest.approx(2))  # idle restarts when the tool returns
    clock.now = 52
    assert wd.check()[0] == "idle"


def test_deadline_beats_everything(clock: Clock) -> None:
    wd = dog(clock, deadline=5)
    clock.now = 1
    wd.mark(first_byte=True)
    wd.tool_running(True)
    clock.now = 5
    assert wd.check()[0] == "deadline"


def test_timeouts_from_spec_then_settings_and_deadline_capped() -> None:
    settings = Settings(_env_file=None, idle_timeout_s=7, max_deadline_s=50)  # type: ignore[call-arg]
    t = Timeouts.for_job(JobSpec(prompt="x", deadline_s=99, first_byte_timeout_s=3), settings)
    assert t == Timeouts(first_byte_s=3, idle_s=7, deadline_s=50)


def test_first_byte_counts_from_when_the_cli_has_the_prompt(clock: Clock) -> None:
    """A slow CLI start (a loaded host) does not eat the model's time to first byte; only the deadline runs while
    the CLI starts."""
    wd = dog(clock, first=2, deadline=100)
    clock.now = 5
    assert wd.check() == (None, pytest.approx(95))
    wd.prompt_sent()
    clock.now = 6.5
    assert wd.check() == (None, pytest.approx(0.5))
    clock.now = 7
    assert wd.check()[0] == "first_byte"


def test_the_deadline_runs_while_the_cli_starts(clock: Clock) -> None:
    wd = dog(clock, first=2, deadline=5)
    clock.now = 5
    assert wd.check()[0] == "deadline"


def test_idle_after_first_byte_ignores_when_the_prompt_was_sent(clock: Clock) -> None:
    wd = dog(clock, first=2, idle=2)
    wd.prompt_sent()
    clock.now = 1
    wd.mark(first_byte=True)
    clock.now = 2.5
    assert wd.check() == (None, pytest.approx(0.5))  # the idle timer, from the first byte
