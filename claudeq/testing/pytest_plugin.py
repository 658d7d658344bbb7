"""The pytest plugin of claudeq.testing (entry point `pytest11: claudeq`): the `claudeq_fleet` fixture and the
`--claudeq-redis-url` option. See docs/testing.md#pytest.

    def test_triage(claudeq_fleet):
        claudeq_fleet.reply(r"triage", text="nothing urgent")
        assert my_app.triage(claudeq_fleet.client).status == "succeeded"

`@pytest.mark.claudeq_fleet(accounts=["a", "b"], max_attempts=2)` passes its keyword arguments to `fleet()`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from claudeq.testing.fleet import Fleet

#: The environment variable that does what `--claudeq-redis-url` does.
REDIS_URL_ENV = "CLAUDEQ_TESTING_REDIS_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("claudeq", "claudeq.testing")
    group.addoption(
        "--claudeq-redis-url",
        default=None,
        help=f"run the claudeq_fleet fixture on this real Redis instead of fakeredis (or set {REDIS_URL_ENV})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "claudeq_fleet(**options): options for the claudeq_fleet fixture's fleet()")


def redis_url_of(config: pytest.Config) -> str | None:
    """The real Redis the fleets of this session use, if one was asked for."""
    url = config.getoption("--claudeq-redis-url", default=None)
    return str(url) if url else os.environ.get(REDIS_URL_ENV) or None


@pytest.fixture
def claudeq_fleet(request: pytest.FixtureRequest) -> Iterator[Fleet]:
    """A `claudeq.testing.Fleet` for this test (fakeredis, or the `--claudeq-redis-url` Redis), closed after it."""
    from claudeq.testing.fleet import fleet  # imported when a test asks: plain pytest runs pay nothing

    marker = request.node.get_closest_marker("claudeq_fleet")
    options = dict(marker.kwargs) if marker is not None else {}
    options.setdefault("redis_url", redis_url_of(request.config))
    with fleet(**options) as made:
        yield made
