"""Keeping what an attempt wrote under `$CLAUDEQ_OUTPUTS`: the bytes in the job's artifacts hash, the list in the
record (fenced) (docs/jobs.md#artifacts). The files were read by the runner (`worker/run/outputs.py`)."""

from __future__ import annotations

import hashlib
from typing import Any

from claudeq.artifacts import Artifact, Artifacts, pack
from claudeq.script_calls import PipeCall, done

from ...config.settings import Settings
from ..run.outcome import RunOutcome
from .fenced import FencedWriter
from .state import Delivery

#: How long a job's artifacts outlive its record's retention at most: they are written as its attempts end, the
#: record's retention starts at its end (a day covers the runs and retries in between).
SLACK_S = 86_400


async def keep_outputs(settings: Settings, writer: FencedWriter, d: Delivery, outcome: RunOutcome) -> None:
    """Store the attempt's files (replacing an earlier attempt's) and list them in the record."""
    if d.lost or not (outcome.outputs or outcome.outputs_dropped):
        return
    store = writer.store
    key = store.keys.artifacts(d.job_id)
    files = [Artifact(name=n, size=len(b), sha256=hashlib.sha256(b).hexdigest()) for n, b in outcome.outputs]

    def queue(pipe: Any) -> None:
        pipe.delete(key)
        if outcome.outputs:
            pipe.hset(key, mapping={name: pack(data) for name, data in outcome.outputs})
            pipe.expire(key, settings.result_ttl_s + SLACK_S)

    await store.send(PipeCall(store.redis, queue, done, transaction=True))
    artifacts = Artifacts(files=files, dropped=outcome.outputs_dropped)
    d.record = d.record.model_copy(update={"artifacts": artifacts})
    await writer.write(d, hold_events=True, artifacts=artifacts)
