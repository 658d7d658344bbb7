"""JobStore on fakeredis when a job's key is not a record at all (something else wrote a string there): `get`,
`status` and `list_jobs` report it as RecordUnreadable — `claudeq list` shows it and the rest — instead of raising
Redis's WRONGTYPE error."""

from __future__ import annotations

import pytest

from claudeq.errors import RecordUnreadable
from claudeq.jobs import JobStore
from claudeq.models import JobRecord
from claudeq.script_calls import run_call
from tests.support.jobs import queued


def test_a_job_key_holding_a_string_is_reported_unreadable_and_the_others_listed(fake_store: JobStore) -> None:
    healthy, damaged = queued(fake_store, "j1"), queued(fake_store, "j2")
    fake_store.redis.delete(fake_store.keys.job(damaged))
    fake_store.redis.set(fake_store.keys.job(damaged), "not a record")

    with pytest.raises(RecordUnreadable, match="not a record"):
        run_call(fake_store.get_call(damaged))
    with pytest.raises(RecordUnreadable):
        run_call(fake_store.status_call(damaged))
    listed = fake_store.list_jobs(limit=10)
    assert sorted(getattr(item, "job_id", None) or getattr(item, "id", "") for item in listed) == [healthy, damaged]
    assert any(isinstance(item, RecordUnreadable) and item.job_id == damaged for item in listed)
    assert [r.id for r in fake_store.list_jobs(status="queued", limit=10) if isinstance(r, JobRecord)] == [healthy]
