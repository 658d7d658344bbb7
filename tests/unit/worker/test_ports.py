"""The engine's Protocols (claudeq/worker/ports.py) are typed end to end, and the real classes satisfy them."""

from __future__ import annotations

import inspect

import pytest

from claudeq.worker import ports

PROTOCOLS = (ports.RunnerLike, ports.AccountsLike, ports.MetricsLike)


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_no_protocol_method_takes_or_returns_any(protocol: type) -> None:
    methods = [m for name, m in vars(protocol).items() if inspect.isfunction(m) and not name.startswith("_")]
    assert methods
    for method in methods:
        annotations = {k: str(v) for k, v in method.__annotations__.items()}
        assert set(annotations) >= {"return"}, method.__qualname__
        assert not [k for k, v in annotations.items() if "Any" in v], (method.__qualname__, annotations)


def test_the_real_implementations_have_every_protocol_method() -> None:
    from claudeq.worker.account_manager import AccountManager
    from claudeq.worker.metrics import WorkerMetrics
    from claudeq.worker.runner import Runner

    for protocol, real in (
        (ports.RunnerLike, Runner),
        (ports.AccountsLike, AccountManager),
        (ports.MetricsLike, WorkerMetrics),
    ):
        wanted = {name for name, m in vars(protocol).items() if inspect.isfunction(m) and not name.startswith("_")}
        assert wanted <= set(dir(real)), (real.__name__, wanted - set(dir(real)))
