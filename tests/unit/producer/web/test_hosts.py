"""The host allow-list of `claudeq web` / `claudeq api` (producer/web/hosts.py): which names and origins it lets in."""

from __future__ import annotations

import pytest

from claudeq.producer.web.hosts import HostAllowList, host_of


@pytest.mark.parametrize(
    ("authority", "host"),
    [
        ("127.0.0.1:8780", "127.0.0.1"),
        ("LocalHost", "localhost"),
        ("[::1]:8780", "::1"),
        ("::1", "::1"),
        ("claudeq.example.com.:443", "claudeq.example.com"),
        ("rebind.attacker.example:8780", "rebind.attacker.example"),
    ],
)
def test_host_of_drops_port_brackets_case_and_trailing_dot(authority: str, host: str) -> None:
    assert host_of(authority) == host


def test_a_loopback_bind_answers_to_loopback_names_only() -> None:
    allowed = HostAllowList("127.0.0.1")
    assert all(allowed.allows(h) for h in ("127.0.0.1:8780", "localhost:8780", "[::1]:8780"))
    assert not allowed.allows("rebind.attacker.example:8780")
    assert not allowed.allows("10.0.0.5:8780") and not allowed.allows("")
    assert allowed.allows_origin("http://localhost:8780")
    assert not allowed.allows_origin("http://rebind.attacker.example:8780")
    assert not allowed.allows_origin("file://localhost")


def test_a_wildcard_bind_answers_to_addresses_never_to_names_but_the_origins() -> None:
    allowed = HostAllowList("0.0.0.0", "https://claudeq.example.com")
    assert allowed.allows("10.0.0.5:8780") and allowed.allows("[fd00::5]:8780")
    assert allowed.allows("claudeq.example.com")
    assert not allowed.allows("rebind.attacker.example")
    assert allowed.allows_origin("https://claudeq.example.com")


def test_a_named_bind_answers_to_that_name() -> None:
    allowed = HostAllowList("fleet.internal")
    assert allowed.allows("fleet.internal:8780") and not allowed.allows("localhost:8780")
