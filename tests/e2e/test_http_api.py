"""The HTTP API over a live fleet: `claudeq api` as its own process, a real worker, the real CLI and the simulator.

A job submitted over HTTP is followed over `text/event-stream` to its end and gives the record and events the Python
client gives; a follower that reconnects with `Last-Event-ID` gets exactly the rest; the Node.js producer of
docs/http-api.md (examples/http-api/producer.mjs) runs with the machine's node and prints the answer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.binaries import require_binary
from tests.support.web_proc import Served, serve_command

pytestmark = pytest.mark.e2e

OPERATOR = "http-api-e2e-operator-44a1"
AUTH = {"authorization": f"Bearer {OPERATOR}"}
NODE_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "http-api" / "producer.mjs"


@pytest.fixture
def api(settings: Settings, tmp_path: Path) -> Iterator[Served]:
    with serve_command("api", settings.model_copy(update={"web_token": SecretStr(OPERATOR)}), tmp_path) as served:
        yield served


def frames(response: httpx.Response) -> Iterator[dict[str, str]]:
    """The server-sent events of a streamed response, each as its fields (id, event, data)."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if not line:
            if fields:
                yield fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


def follow(base: str, job_id: str, headers: dict[str, str]) -> list[dict[str, str]]:
    sse = {**AUTH, "accept": "text/event-stream", **headers}
    with httpx.stream("GET", f"{base}/api/v1/jobs/{job_id}/events", headers=sse, timeout=120) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        return list(frames(response))


def test_a_job_followed_over_http_ends_with_the_python_clients_record(
    api: Served, workers: WorkerFactory, client: Client, unique: str
) -> None:
    workers(concurrency=2)
    read = json.dumps({"file_path": "/etc/hostname"})
    spec = {"prompt": f"[[sim: tool Read {read}]] [[sim: text all read]] read it {unique}", "tools": "read-only"}
    submitted = httpx.post(f"{api.base}/api/v1/jobs", json=spec, headers=AUTH)
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]

    got = follow(api.base, job_id, {})  # opened while the job is queued or running: it follows it live
    assert got[-1] == {"event": "end", "data": json.dumps({"status": "succeeded"})}
    events = [json.loads(f["data"]) for f in got[:-1]]
    assert [f["id"] for f in got[:-1]] == [e["id"] for e in events]
    # The same events, in the same order, as the Python client reads them; the same record.
    assert [(e["type"], e["data"]) for e in events] == [(e.type, e.data) for e in client.events(job_id)]
    assert {"tool_call", "tool_result", "succeeded"} <= {e["type"] for e in events}
    record = httpx.get(f"{api.base}/api/v1/jobs/{job_id}", headers=AUTH).json()
    assert record == json.loads(json.dumps(client.get(job_id).public()))
    assert record["result"]["text"].startswith("all read")

    # Reconnecting with Last-Event-ID gives exactly what came after it; the JSON form reads the same stretch.
    middle = len(events) // 2
    rest = follow(api.base, job_id, {"last-event-id": events[middle]["id"]})
    assert [json.loads(f["data"]) for f in rest[:-1]] == events[middle + 1 :]
    page = httpx.get(f"{api.base}/api/v1/jobs/{job_id}/events", params={"after": events[middle]["id"]}, headers=AUTH)
    assert page.json()["events"] == events[middle + 1 :] and page.json()["status"] == "succeeded"


def test_the_node_example_submits_follows_and_prints_the_answer(
    api: Served, workers: WorkerFactory, client: Client, unique: str
) -> None:
    node = require_binary("node", "apt-get install nodejs")
    workers(concurrency=1)
    env = {"PATH": "/usr/bin:/bin", "CLAUDEQ_API": f"{api.base}/api/v1", "CLAUDEQ_TOKEN": OPERATOR}
    prompt = f"[[sim: text hello from the fleet {unique}]] greet"
    done = subprocess.run(
        [node, str(NODE_EXAMPLE), prompt], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"hello from the fleet {unique}"
    assert "ended succeeded" in done.stderr and " run_started" in done.stderr
    assert [r.spec.prompt for r in client.list()] == [prompt]  # submitted once, through the API
