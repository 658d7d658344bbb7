"""claudeq.testing: test the code that submits agent jobs in milliseconds, on fakeredis, with scripted replies.

    >>> from claudeq.testing import fleet, overloaded
    >>> with fleet() as f:
    ...     f.reply(r"triage", text="3 issues need a look", usage={"input_tokens": 1200, "cost_usd": 0.01})
    ...     f.fail(r"triage", overloaded())           # the first attempt meets a 529, the retry is answered
    ...     job = f.client.submit(prompt="triage the open issues")
    ...     record = job.wait()                       # drives the in-process worker; no real sleeping
    >>> record.status, [a.outcome for a in record.attempts], record.result.text
    ('succeeded', ['transient_error', 'success'], '3 issues need a look')

The client and the worker are claudeq's own code on fakeredis (or a real Redis with `redis_url`); only the CLI is
replaced, by scripted runs. The pytest plugin (registered by the package's `pytest11` entry point) gives the fixture
`claudeq_fleet`, and `--claudeq-redis-url` runs the same tests against a real Redis. See docs/testing.md.
"""

from claudeq.testing._loop import FleetStalled
from claudeq.testing.clock import VirtualClock
from claudeq.testing.fleet import Delivery, Fleet, FleetAsyncClient, FleetClient, Metrics, fleet
from claudeq.testing.replies import (
    Failure,
    Reply,
    Run,
    UnmatchedPrompt,
    api_error,
    auth_failed,
    budget_exhausted,
    crash,
    max_turns_reached,
    never_answers,
    overloaded,
    rate_limited,
    timeout,
)

__all__ = [
    "Delivery",
    "Failure",
    "Fleet",
    "FleetAsyncClient",
    "FleetClient",
    "FleetStalled",
    "Metrics",
    "Reply",
    "Run",
    "UnmatchedPrompt",
    "VirtualClock",
    "api_error",
    "auth_failed",
    "budget_exhausted",
    "crash",
    "fleet",
    "max_turns_reached",
    "never_answers",
    "overloaded",
    "rate_limited",
    "timeout",
]
