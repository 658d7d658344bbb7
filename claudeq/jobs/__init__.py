"""Jobs: the job records and their events in Redis (`JobStore`), the scripts producers start (create, cancel, …) and
the counts per status. The public face of the package: import from here, never from its `_` modules
(docs/architecture.md#who-imports-whom).

- `_store.py`: `JobStore` (create, read, cancel, events) and the record's stored form, which the worker's
  `WorkerJobStore` (worker/store/job_store.py) builds on;
- `_scripts.py`: the Lua scripts producers start, with their arguments; here as `scripts` (`from claudeq.jobs import
  scripts`), its names also one by one;
- `_counts.py`: jobs per status, for `claudeq top` and the exporter.
"""

from __future__ import annotations

from . import _scripts as scripts
from ._counts import FINISHED, status_counts
from ._scripts import (
    APPROVAL_DECIDE,
    CANCEL,
    CREATE,
    RETRY_NOTIFICATIONS,
    SUBMIT,
    TRIM_INDEX,
    ApprovalDecideArgs,
    CancelArgs,
    CreateArgs,
    RetryNotificationsArgs,
    SubmitArgs,
    TrimIndexArgs,
)
from ._store import (
    ARCHIVED_FIELD,
    CANCEL_FIELD,
    EVENTS_ZLIB_LEVEL,
    FOLLOW_ANNOUNCE_S,
    INDEXED_FIELD,
    LISTING_FIELDS,
    NOTIFY_EVENTS_FIELD,
    NOTIFY_FIELD,
    SUBMITTED_ENTRY_ID,
    WEBHOOK_CURSOR_FIELD,
    ActiveIndex,
    BrokerMessage,
    JobFields,
    JobStore,
    compact_json,
    create_reply,
    encode_event,
    encode_fields,
    events_page,
    listing_records,
    listing_replies,
    pack_events,
    parse_record,
    record_fields,
    record_reply,
    status_reply,
    stored_time,
    unpack_events,
)

__all__ = [
    "APPROVAL_DECIDE",
    "ARCHIVED_FIELD",
    "CANCEL",
    "CANCEL_FIELD",
    "CREATE",
    "EVENTS_ZLIB_LEVEL",
    "FINISHED",
    "FOLLOW_ANNOUNCE_S",
    "INDEXED_FIELD",
    "LISTING_FIELDS",
    "NOTIFY_EVENTS_FIELD",
    "NOTIFY_FIELD",
    "RETRY_NOTIFICATIONS",
    "SUBMIT",
    "SUBMITTED_ENTRY_ID",
    "TRIM_INDEX",
    "WEBHOOK_CURSOR_FIELD",
    "ActiveIndex",
    "ApprovalDecideArgs",
    "BrokerMessage",
    "CancelArgs",
    "CreateArgs",
    "JobFields",
    "JobStore",
    "RetryNotificationsArgs",
    "SubmitArgs",
    "TrimIndexArgs",
    "compact_json",
    "create_reply",
    "encode_event",
    "encode_fields",
    "events_page",
    "listing_records",
    "listing_replies",
    "pack_events",
    "parse_record",
    "record_fields",
    "record_reply",
    "scripts",
    "status_counts",
    "status_reply",
    "stored_time",
    "unpack_events",
]
