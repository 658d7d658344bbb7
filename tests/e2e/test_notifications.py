"""End notifications end to end: real worker processes, the real CLI and the simulator; webhook receivers on loopback
that verify every signature with the Standard Webhooks library's own verifier, one answering 500 to its first three
tries, one hanging past the timeout, one down until the test fixes it (dead, then `retry`); and a Celery app of the
test's own whose worker receives each job's `link` or `link_error` exactly once."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import SecretStr
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError
from claudeq.models import JobRecord
from claudeq.producer.client import Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.tree import ROOT
from tests.support.worker_proc import FAST_E2E

pytestmark = pytest.mark.e2e

SECRET = "whsec_" + base64.b64encode(b"claudeq-e2e-webhook-secret-0123456").decode()
MAX_TRIES = 5


class Receiver:
    """Webhook receivers on one loopback server, by path: /ok answers 200; /flaky 500 to the first three tries of
    each message; /hang sleeps past the workers' timeout on the first two tries; /down 500 until `up` is set."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []  # path, id, verified, payload
        self.tries: dict[tuple[str, str], int] = {}
        self.up = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    payload = Webhook(SECRET).verify(body, headers)
                    verified = True
                except WebhookVerificationError:
                    payload, verified = None, False
                msg_id = headers.get("webhook-id", "")
                with receiver.lock:
                    n = receiver.tries.get((self.path, msg_id), 0) + 1
                    receiver.tries[(self.path, msg_id)] = n
                if self.path == "/hang" and n <= 2:
                    time.sleep(3)  # the workers wait 1 s
                status = 200
                if (self.path == "/flaky" and n <= 3) or (self.path == "/down" and not receiver.up.is_set()):
                    status = 500
                with receiver.lock:
                    receiver.seen.append(
                        {
                            "path": self.path,
                            "id": msg_id,
                            "verified": verified,
                            "payload": payload,
                            "status": status,
                            "host": headers.get("host"),
                            "at": time.time(),
                        }
                    )
                try:
                    self.send_response(status)
                    self.end_headers()
                except OSError:
                    pass  # the worker gave up waiting

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self, path: str, job_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.seen if s["path"] == path and s["id"] == f"job_{job_id}_end" and s["status"] == 200]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, receiver: Receiver) -> Settings:
    return make_settings(
        redis_url,
        unique,
        accounts_file=accounts_file,
        webhook_hosts=["127.0.0.1", "localhost"],
        webhook_ports=[receiver.server.server_address[1]],  # a loopback receiver: its port and its range allowed
        webhook_allow_nets=["127.0.0.0/8", "::1/128"],
        webhook_secret=SecretStr(SECRET),
        callback_queues=[f"cqt-links-{unique}"],  # the link_worker's queue
        webhook_timeout_s=1.0,
        notify_backoff_s=0.1,
        notify_max_attempts=MAX_TRIES,
        **FAST_E2E,
    )


def settled(client: Client, job_id: str, timeout: float = 90) -> JobRecord:
    """The record once none of its notifications is pending."""
    found: list[JobRecord] = []

    def check() -> bool:
        record = client.get(job_id)
        found[:] = [record]
        return bool(record.notifications) and all(n.state != "pending" for n in record.notifications)

    run_until(check, timeout=timeout, what=f"job {job_id}: notifications still pending")
    return found[0]


def test_each_jobs_end_reaches_its_webhook_signed_through_failing_and_hanging_receivers(
    client: Client, workers: WorkerFactory, receiver: Receiver, unique: str
) -> None:
    workers(concurrency=4)
    workers(concurrency=4)  # whichever worker is free delivers
    url = receiver.url
    ok = client.submit(prompt=f"[[sim: text fine]] ok {unique}", webhook={"url": f"{url}/ok"})
    flaky = client.submit(prompt=f"[[sim: text f]] flaky {unique}", webhook={"url": f"{url}/flaky", "body": "result"})
    hang = client.submit(prompt=f"[[sim: text h]] hang {unique}", webhook={"url": f"{url}/hang"})
    broken = client.submit(prompt=f"[[sim: error 500]] broken {unique}", max_attempts=1, webhook={"url": f"{url}/ok"})
    doomed = client.submit(prompt=f"[[sim: delay 60]] doomed {unique}", webhook={"url": f"{url}/ok"})
    run_until(lambda: client.get(doomed.id).status == "running", timeout=60, what="doomed never ran")
    client.cancel(doomed.id)
    ends = {h.id: client.wait(h.id, timeout=120).status for h in (ok, flaky, hang, broken, doomed)}
    expected = {ok.id: "succeeded", flaky.id: "succeeded", hang.id: "succeeded", broken.id: "failed"}
    assert ends == {**expected, doomed.id: "cancelled"}

    for handle, path in ((ok, "/ok"), (flaky, "/flaky"), (hang, "/hang"), (broken, "/ok"), (doomed, "/ok")):
        record = settled(client, handle.id)
        [note] = record.notifications
        assert note.target == "webhook" and note.state == "delivered" and note.status_code == 200, note
        got = receiver.delivered(path, handle.id)
        assert got, f"{path} never answered 200 for {handle.id}"
        assert got[0]["payload"]["status"] == ends[handle.id] and got[0]["payload"]["id"] == handle.id
    assert all(s["verified"] for s in receiver.seen), [s for s in receiver.seen if not s["verified"]]
    assert client.get(flaky.id).notifications[0].attempts == 4  # three 500s, then 200
    assert set(receiver.delivered("/flaky", flaky.id)[0]["payload"]) == {"id", "status", "result", "error"}
    assert client.get(hang.id).notifications[0].attempts == 3  # two timeouts, then 200
    assert receiver.delivered("/ok", ok.id)[0]["payload"]["spec"]["prompt"].endswith(f"ok {unique}")
    # Every try of one message carries the same webhook-id: a receiver deduplicates by it.
    assert {s["id"] for s in receiver.seen if s["path"] == "/flaky"} == {f"job_{flaky.id}_end"}


def test_a_webhook_connects_only_to_an_address_the_fleet_allows(
    client: Client, workers: WorkerFactory, receiver: Receiver, unique: str
) -> None:
    port = receiver.server.server_address[1]
    # An allowed name that resolves to loopback, on a worker that allows no private range: never POSTed.
    workers(webhook_allow_nets=[])
    job = client.submit(prompt=f"[[sim: text x]] rebind {unique}", webhook={"url": f"http://localhost:{port}/ok"})
    assert client.wait(job.id, timeout=120).status == "succeeded"
    note = run_until(
        lambda: next((n for n in client.get(job.id).notifications if n.state == "dead"), None),
        timeout=60,
        what="the notification to a loopback address was not refused",
    )
    assert note.error is not None and "loopback" in note.error and str(port) not in note.error, note
    assert receiver.seen == []
    # A port neither 80, 443 nor listed is refused at submit.
    with pytest.raises(JobSpecError) as caught:
        client.submit(prompt="p", webhook={"url": f"http://127.0.0.1:{port + 1}/ok"})
    assert caught.value.field == "webhook.url" and "CLAUDEQ_WEBHOOK_PORTS" in str(caught.value)


def test_a_webhook_to_an_allowed_range_keeps_its_host_name(
    client: Client, workers: WorkerFactory, receiver: Receiver, unique: str
) -> None:
    port = receiver.server.server_address[1]
    workers()  # allows 127.0.0.0/8 (the settings fixture)
    job = client.submit(prompt=f"[[sim: text x]] named {unique}", webhook={"url": f"http://localhost:{port}/ok"})
    assert client.wait(job.id, timeout=120).status == "succeeded"
    run_until(lambda: receiver.delivered("/ok", job.id), timeout=60, what="the webhook was not delivered")
    [got] = receiver.delivered("/ok", job.id)
    assert got["verified"] and got["host"] == f"localhost:{port}"  # the URL's name, not the address connected to


def test_a_webhook_that_keeps_failing_is_dead_until_retried(
    client: Client, workers: WorkerFactory, receiver: Receiver, unique: str
) -> None:
    workers(concurrency=2)
    job = client.submit(prompt=f"[[sim: text d]] down {unique}", webhook={"url": f"{receiver.url}/down"})
    assert client.wait(job.id, timeout=120).status == "succeeded"
    [note] = settled(client, job.id).notifications
    assert note.state == "dead" and note.attempts == MAX_TRIES and note.status_code == 500 and note.error == "HTTP 500"
    assert [r.id for r in client.dead_notifications()] == [job.id]  # type: ignore[union-attr]
    receiver.up.set()
    assert client.retry_notifications(job.id) == 1
    [note] = settled(client, job.id).notifications
    assert note.state == "delivered" and note.attempts == 1
    assert receiver.delivered("/down", job.id) and client.dead_notifications() == []


@pytest.fixture
def link_worker(settings: Settings, unique: str, redis_client: redis.Redis) -> Iterator[tuple[str, str]]:
    """A worker of the test's own Celery app (tests/support/link_app.py) on its own queue; yields (queue, the list
    its task appends to)."""
    queue, seen = f"cqt-links-{unique}", f"{settings.key_prefix}links-seen"
    env = {
        **os.environ,
        "CQT_LINK_BROKER": settings.redis_url,
        "CQT_LINK_QUEUE": queue,
        "CQT_LINK_SEEN": seen,
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-m", "celery", "-A", "tests.support.link_app", "worker", "-Q", queue]
    command += ["--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"]
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield queue, seen
    finally:
        proc.terminate()
        proc.wait(30)
        redis_client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


def test_a_celery_app_of_ones_own_receives_link_or_link_error_exactly_once(
    client: Client, workers: WorkerFactory, link_worker: tuple[str, str], redis_client: redis.Redis, unique: str
) -> None:
    queue, seen = link_worker
    workers(concurrency=4)
    workers(concurrency=4)
    callbacks = {
        "link": {"task": "cqtest.job_ended", "queue": queue},
        "link_error": {"task": "cqtest.job_ended", "queue": queue},
    }
    good = [client.submit(prompt=f"[[sim: text y]] good {i} {unique}", **callbacks) for i in range(4)]
    bad = [client.submit(prompt=f"[[sim: error 500]] bad {i} {unique}", max_attempts=1, **callbacks) for i in range(2)]
    expected = {f"{h.id} succeeded" for h in good} | {f"{h.id} failed" for h in bad}
    run_until(
        lambda: set(x.decode() for x in redis_client.lrange(seen, 0, -1)) == expected,
        timeout=120,
        what="the Celery app did not receive every job's callback",
    )
    time.sleep(2)  # anything sent twice would have arrived by now
    received = [x.decode() for x in redis_client.lrange(seen, 0, -1)]
    assert sorted(received) == sorted(expected), received
    for handle in (*good, *bad):
        [note] = settled(client, handle.id).notifications
        assert note.state == "delivered" and note.attempts == 1
        assert note.target == ("link" if handle in good else "link_error")
    assert json.loads(redis_client.hget(client.store.keys.job(good[0].id), "notifications") or b"[]")


def test_a_webhook_follows_the_chosen_events_while_the_job_runs_then_its_end(
    client: Client, workers: WorkerFactory, receiver: Receiver, unique: str
) -> None:
    workers(concurrency=2)
    read = json.dumps({"file_path": "/etc/hostname"})
    job = client.submit(
        prompt=f"[[sim: tool Read {read}]] [[sim: stall 8 after=1 times=1]] follow {unique}",
        tools="read-only",
        webhook={"url": f"{receiver.url}/ok", "events": ["tool_call", "tool_result"]},
    )
    record = client.wait(job.id, timeout=120)
    assert record.status == "succeeded" and record.finished_at is not None
    settled(client, job.id)
    with receiver.lock:
        mine = [s for s in receiver.seen if s["id"].startswith(f"job_{job.id}_")]
    assert all(s["verified"] for s in mine)
    events = [s for s in mine if s["id"] != f"job_{job.id}_end"]
    assert [s["payload"]["event"]["type"] for s in events] == ["tool_call", "tool_result"]
    assert events[0]["payload"]["event"]["data"]["tool"] == "Read"
    assert len({s["id"] for s in events}) == 2  # one webhook-id per event
    # The tool call arrived while the job still ran (its answer stalled 8 s after it), the end after the events.
    assert events[0]["at"] < record.finished_at.timestamp()
    [end] = [s for s in mine if s["id"] == f"job_{job.id}_end"]
    assert end["at"] >= events[-1]["at"] and end["payload"]["status"] == "succeeded"
    notes = {n.target: n for n in client.get(job.id).notifications}
    assert notes["events"].state == "delivered" and notes["webhook"].state == "delivered"
