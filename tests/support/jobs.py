"""Jobs as tests set them up: a queued record, and one created through a store."""

from __future__ import annotations

import uuid
from typing import Any

from claudeq.jobs import JobStore
from claudeq.models import JobRecord, JobSpec, utcnow
from claudeq.script_calls import run_call


def queued_record(job_id: str = "j1", **spec: Any) -> JobRecord:
    """A queued job's record: prompt "hi" unless `spec` says otherwise, with `spec`'s other fields."""
    return JobRecord(id=job_id, spec=JobSpec(**{"prompt": "hi", **spec}), status="queued", created_at=utcnow())


def queued(store: JobStore, job_id: str | None = None, **spec: Any) -> str:
    """A new queued job created through `store` (a fresh id unless `job_id`); its id."""
    created_id, created = run_call(store.create_call(queued_record(job_id or f"j-{uuid.uuid4().hex}", **spec)))
    assert created
    return created_id
