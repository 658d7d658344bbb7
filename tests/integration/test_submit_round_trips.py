"""What one `Client.submit` costs, as a user of a real Redis sees it: the round trips its connection makes (each
write of commands to the socket and the replies read back) and the commands Redis runs (`INFO commandstats`, a
script's own calls included), on a private redis-server. One round trip whatever the spec: the record, its index
entries, its fair-share tag and its broker message are one script (docs/architecture.md#the-submit-walk). A
`submit_many` chunk is one round trip too (two with a tenants file: the tenants' backlogs read first)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from claudeq.broker import list_for
from claudeq.config.settings import Settings
from claudeq.producer.client import TENANT_BACKLOG, Client
from tests.conftest import make_settings
from tests.support.redis_server import command_calls, commands_since, private_client

pytestmark = pytest.mark.integration

TENANTS = """
[[tenants]]
name = "a"
weight = 2

[[tenants]]
name = "b"
weight = 1
"""


class CountingConnection(redis.Connection):
    """A connection that counts its writes: each is one round trip (a pipeline's commands go in one write)."""

    writes = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.writes += 1
        super().send_packed_command(command, check_health)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[redis.Redis, str]]:
    with private_client() as found:
        yield found


def _client(url: str, settings: Settings) -> Client:
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
    return Client(settings, redis_client=redis.Redis(connection_pool=pool), celery_app=object())


def _cost(watch: redis.Redis, client: Client, **spec: Any) -> tuple[int, dict[str, int], bool]:
    """(round trips, commands run, created) of one submit of `spec`."""
    before, writes = command_calls(watch), CountingConnection.writes
    handle = client.submit(prompt="count me", model="haiku", **spec)
    return CountingConnection.writes - writes, commands_since(watch, before), handle.created


def test_a_plain_submit_is_one_round_trip(server: tuple[redis.Redis, str]) -> None:
    watch, url = server
    client = _client(url, make_settings(url, "trips-plain"))
    client.submit(prompt="warm-up")  # the script loaded, whether the fleet uses tenants read (at most every 30 s)

    trips, commands, created = _cost(watch, client)
    assert (trips, created) == (1, True)
    # the script; the record; its `jobs` and `queued` entries; its message
    assert commands == {"evalsha": 1, "hset": 1, "zadd": 2, "lpush": 1}, commands


def test_a_submit_with_tenants_is_one_round_trip(server: tuple[redis.Redis, str], tmp_path: Path) -> None:
    watch, url = server
    (tmp_path / "tenants.toml").write_text(TENANTS)
    settings = make_settings(url, "trips-tenants", tenants_file=tmp_path / "tenants.toml")
    client = _client(url, settings)
    client.submit(prompt="warm-up", tenant="b")

    trips, commands, created = _cost(watch, client, tenant="a")
    assert (trips, created) == (1, True)
    # as a plain submit, and: the tenant's job index (its entry, its expired entries looked for), the fair-share tag
    # (the job's, the fleet's virtual time and the tenant's last tag read; the tenant's and the job's written, the
    # record seen), the tenant's backlog read (ZCARD) and its active-job index entry
    assert commands == {
        "evalsha": 1,
        "hset": 3,
        "zadd": 4,
        "zrangebyscore": 1,
        "hget": 3,
        "exists": 1,
        "zcard": 1,
        "lpush": 1,
    }, commands
    keys = client.store.keys
    assert watch.zcard(keys.tenant_jobs("a")) == 1 and watch.hget(keys.fair_share, "t:a") == b"0.5"


def test_a_submit_past_the_tenants_backlog_sends_at_the_last_priority_step(
    server: tuple[redis.Redis, str], tmp_path: Path
) -> None:
    watch, url = server
    (tmp_path / "tenants.toml").write_text(TENANTS)
    settings = make_settings(url, "trips-backlog", tenants_file=tmp_path / "tenants.toml")
    client = _client(url, settings)
    client.submit_many([{"prompt": f"a {i}", "tenant": "a"} for i in range(TENANT_BACKLOG - 1)])
    queue = settings.queue

    trips, _, _ = _cost(watch, client, tenant="a")  # the 100th: not past the backlog
    assert (trips, watch.llen(list_for(queue, 0)), watch.llen(list_for(queue, 9))) == (1, TENANT_BACKLOG, 0)
    trips, _, _ = _cost(watch, client, tenant="a")  # the 101st
    assert (trips, watch.llen(list_for(queue, 0)), watch.llen(list_for(queue, 9))) == (1, TENANT_BACKLOG, 1)
    _cost(watch, client, tenant="b")
    assert watch.llen(list_for(queue, 0)) == TENANT_BACKLOG + 1


def test_a_submit_with_an_idempotency_key_is_one_round_trip_and_a_repeat_sends_nothing(
    server: tuple[redis.Redis, str],
) -> None:
    watch, url = server
    client = _client(url, make_settings(url, "trips-idem"))
    client.submit(prompt="warm-up")

    trips, commands, created = _cost(watch, client, idempotency_key="k")
    assert (trips, created) == (1, True)
    # as a plain submit, and: the key read, written, and named in the record
    assert commands == {"evalsha": 1, "get": 1, "set": 1, "hset": 2, "zadd": 2, "lpush": 1}, commands

    trips, commands, created = _cost(watch, client, idempotency_key="k")
    assert (trips, created) == (1, False)
    assert commands == {"evalsha": 1, "get": 1, "exists": 1}, commands  # the live job found: nothing written


def test_a_submit_waiting_for_a_dependency_writes_no_message(server: tuple[redis.Redis, str]) -> None:
    watch, url = server
    client = _client(url, make_settings(url, "trips-deps"))
    first = client.submit(prompt="first")

    trips, commands, created = _cost(watch, client, depends_on=[first.id])
    # the dependencies checked as the spec names them (one round trip), then the submit (one)
    assert (trips, created) == (2, True)
    assert "lpush" not in commands and commands["evalsha"] == 1, commands


def _batch_cost(
    watch: redis.Redis, client: Client, specs: list[dict[str, Any]], chunk: int
) -> tuple[int, dict[str, int]]:
    """(round trips, commands run) of one `submit_many` of `specs` in chunks of `chunk`."""
    before, writes = command_calls(watch), CountingConnection.writes
    handles = client.submit_many(specs, chunk_size=chunk)
    assert all(handle.created for handle in handles)
    return CountingConnection.writes - writes, commands_since(watch, before)


def test_a_plain_batch_is_one_round_trip_per_chunk(server: tuple[redis.Redis, str]) -> None:
    watch, url = server
    client = _client(url, make_settings(url, "trips-batch"))
    client.submit(prompt="warm-up")

    trips, commands = _batch_cost(watch, client, [{"prompt": f"job {i}"} for i in range(100)], chunk=50)
    assert trips == 2  # one per chunk
    # per chunk: MULTI/EXEC, the records, their `jobs` and `queued` entries (one ZADD each), their messages (one
    # LPUSH): 1.1 commands per job
    assert commands == {"multi": 2, "hset": 100, "zadd": 4, "lpush": 2, "exec": 2}, commands


def test_a_batch_with_tenants_is_two_round_trips_per_chunk(server: tuple[redis.Redis, str], tmp_path: Path) -> None:
    watch, url = server
    (tmp_path / "tenants.toml").write_text(TENANTS)
    client = _client(url, make_settings(url, "trips-batch-tenants", tenants_file=tmp_path / "tenants.toml"))
    client.submit(prompt="warm-up", tenant="b")

    specs = [{"prompt": f"job {i}", "tenant": "ab"[i % 2]} for i in range(100)]
    trips, commands = _batch_cost(watch, client, specs, chunk=50)
    assert trips == 4  # per chunk: the tenants' backlogs read, then the write
    # per chunk as a plain batch, and: the backlogs (one ZCARD per tenant), `TAG` loaded, each job's tag (the job's,
    # the fleet's virtual time and the tenant's last tag read; the tenant's and the job's written, the record seen),
    # one ZADD per tenant's job index (trimmed: EVAL, its expired entries looked for) and active-job index
    assert commands == {
        "zcard": 4,
        "script": 2,
        "multi": 2,
        "hset": 300,
        "evalsha": 100,
        "hget": 300,
        "exists": 100,
        "zadd": 12,
        "eval": 4,
        "zrangebyscore": 4,
        "lpush": 2,
        "exec": 2,
    }, commands
    keys = client.store.keys
    assert watch.zcard(keys.tenant_jobs("a")) == 50 and watch.hget(keys.fair_share, "t:a") == b"25"
