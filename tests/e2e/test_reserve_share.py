"""Reserved fair share end to end: while another tenant is active, a flooding tenant holds at most its weighted share
of the slots, so the other tenant's jobs start without waiting for the flood's runs to end; alone, a tenant uses
every slot.

One account with 4 slots, two worker processes, the real CLI and the simulator. Tenants `fa` (weight 3) and `fb`
(weight 1), `reserve_share = true`: while both are active `fa` holds at most 3 slots and `fb` 1.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from claudeq.config.settings import Settings
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.worker_proc import FAST_E2E, SimAccount

pytestmark = pytest.mark.e2e

#: fa's runs: long enough that none of those in flight when fb's second job arrives ends before it starts.
FA_RUN_S = 10
GRACE_S = 2


@pytest.fixture
def accounts() -> list[SimAccount]:
    return [SimAccount("pool", max_concurrency=4)]


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, tmp_path: Path) -> Settings:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        f"reserve_share = true\nshare_idle_s = {GRACE_S}\n\n"
        '[[tenants]]\nname = "default"\n\n'
        '[[tenants]]\nname = "fa"\nweight = 3\n\n'
        '[[tenants]]\nname = "fb"\nweight = 1\n'
    )
    return make_settings(redis_url, unique, accounts_file=accounts_file, tenants_file=tenants, **FAST_E2E)


def running_at(records: list[JobRecord], at: datetime) -> list[JobRecord]:
    """The jobs whose first run was in flight at `at`."""
    return [r for r in records if r.attempts and r.attempts[0].started_at <= at and at < finished(r)]


def finished(record: JobRecord) -> datetime:
    """When the job's first run ended (its slot was given back); far in the future while it runs."""
    end = record.attempts[0].finished_at if record.attempts else None
    return end if end is not None else datetime.max.replace(tzinfo=UTC)


def most_at_once(records: list[JobRecord]) -> int:
    """The most of these jobs' runs in flight at any one time."""
    starts = [r.attempts[0].started_at for r in records if r.attempts]
    return max((len(running_at(records, t)) for t in starts), default=0)


def test_a_flooding_tenant_leaves_its_share_free_for_an_active_tenant_and_takes_every_slot_alone(
    client: Client, workers: WorkerFactory, unique: str
) -> None:
    workers(concurrency=6)
    workers(concurrency=6)
    # fb is active (a job running) when fa floods.
    fb0 = client.submit(prompt=f"[[sim: delay 4]] [[sim: text b0]] fb 0 {unique}", tenant="fb")
    run_until(lambda: client.get(fb0.id).status == "running", 60, what="fb's first job running")
    flood = [
        client.submit(prompt=f"[[sim: delay {FA_RUN_S}]] [[sim: text a]] fa {i} {unique}", tenant="fa")
        for i in range(10)
    ]
    first = client.wait(fb0.id, timeout=60, poll_s=0.1)
    assert first.status == "succeeded", first.error
    # fb's next job, within the idle grace: the slot fb0 left is still fb's share, so it starts at once.
    fb1 = client.submit(prompt=f"[[sim: delay 1]] [[sim: text b1]] fb 1 {unique}", tenant="fb")
    second = client.wait(fb1.id, timeout=60, poll_s=0.1)
    assert second.status == "succeeded", second.error
    submitted, started = second.created_at, second.attempts[0].started_at
    a_now = [client.get(j.id) for j in flood]
    in_flight = running_at(a_now, submitted)
    # fa held its share (3 of 4) while fb was active, and fb1 did not wait for any of fa's runs to end.
    assert len(in_flight) == 3, [r.status for r in a_now]
    assert all(started < finished(r) for r in in_flight), (started, [finished(r) for r in in_flight])
    assert (started - submitted).total_seconds() < FA_RUN_S / 2

    # fb goes idle: past the grace, fa alone takes every slot (the next end of one of its runs lets more start).
    records = [client.wait(j.id, timeout=180, poll_s=0.2) for j in flood]
    assert all(r.status == "succeeded" for r in records), [r.error for r in records]
    assert most_at_once(records) == 4
    assert most_at_once([r for r in records if r.attempts[0].started_at < started]) == 3
