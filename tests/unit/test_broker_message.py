"""The `claudeq.run` message built from its template (claudeq/broker/_message.py) is exactly the text `json.dumps`
writes for the same message (the shape `send_task` writes is compared in tests/integration/test_submit_many.py)."""

from __future__ import annotations

import base64
import json

import pytest

from claudeq.broker import SENT_HEADER, run_message, sent_at_of


@pytest.mark.parametrize(("job_id", "queue", "priority"), [("0661881607ba49bf", "claudeq", 0), ('j"\\é', 'q "x"\n', 9)])
def test_the_template_writes_what_json_dumps_writes(job_id: str, queue: str, priority: int) -> None:
    text = run_message(job_id, queue, priority, sent_at=1796086973.3157744)
    message = json.loads(text)
    assert json.dumps(message) == text
    assert json.loads(base64.b64decode(message["body"]))[0] == [job_id]
    assert message["headers"]["argsrepr"] == repr([job_id])
    assert message["headers"]["id"] == message["headers"]["root_id"] == message["properties"]["correlation_id"]
    assert message["headers"]["id"].startswith(f"{job_id}-")
    assert message["properties"]["delivery_info"]["routing_key"] == queue
    assert message["properties"]["priority"] == priority
    assert message["headers"][SENT_HEADER] == sent_at_of(text) == 1796086973.3157744
    assert sent_at_of(run_message(job_id, queue, priority)) is not None  # a send time of now
