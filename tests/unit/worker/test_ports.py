"""The engine's Protocols (worker/delivery/ports.py, and the runner's in worker/run/outcome.py) are typed end to end,
and the real classes satisfy them, a coroutine where the Protocol says one."""

from __future__ import annotations

import inspect

import pytest

from claudeq.worker.delivery import ports
from claudeq.worker.run.outcome import RunnerLike

PROTOCOLS = (RunnerLike, ports.AccountsLike, ports.SignalsLike, ports.AdmissionLike, ports.MetricsLike)


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_no_protocol_method_takes_or_returns_any(protocol: type) -> None:
    methods = [m for name, m in vars(protocol).items() if inspect.isfunction(m) and not name.startswith("_")]
    assert methods
    for method in methods:
        annotations = {k: str(v) for k, v in method.__annotations__.items()}
        assert set(annotations) >= {"return"}, method.__qualname__
        assert not [k for k, v in annotations.items() if "Any" in v], (method.__qualname__, annotations)


def test_the_real_implementations_have_every_protocol_method() -> None:
    from claudeq.worker.accounts.admission import TenantAdmission
    from claudeq.worker.accounts.manager import AccountManager
    from claudeq.worker.accounts.signals import AccountSignals
    from claudeq.worker.metrics.prometheus import WorkerMetrics
    from claudeq.worker.run.runner import Runner

    for protocol, real in (
        (RunnerLike, Runner),
        (ports.AccountsLike, AccountManager),
        (ports.SignalsLike, AccountSignals),
        (ports.AdmissionLike, TenantAdmission),
        (ports.MetricsLike, WorkerMetrics),
    ):
        wanted = {name: m for name, m in vars(protocol).items() if inspect.isfunction(m) and not name.startswith("_")}
        assert set(wanted) <= set(dir(real)), (real.__name__, set(wanted) - set(dir(real)))
        for name, method in wanted.items():
            is_async = inspect.iscoroutinefunction(method)
            assert inspect.iscoroutinefunction(getattr(real, name)) == is_async, (real.__name__, name, is_async)
