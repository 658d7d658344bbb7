"""Fixtures shared by every test: a real Redis, isolated settings per test, stores and clients.

Tests run concurrently with other suites against the same Redis, so each test gets its own key prefix and its own
Celery queue name instead of flushing the database.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import hypothesis
import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.jobs import JobStore
from claudeq.producer.client import Client, make_store
from tests.support.redis_server import PrivateRedis, redis_url_for_tests

# The property tests assert what is accepted and refused, never how fast: a per-example deadline only measures how
# busy the machine is (two cores shared by pytest-xdist's workers and the suite's Redis and worker processes), and
# speed is measured in bench/. Hypothesis' default of 200 ms failed a plain validation test under that load.
hypothesis.settings.register_profile("claudeq", deadline=None)
hypothesis.settings.load_profile("claudeq")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis server (the machine's, or a private one started for this session)."""
    url, server = redis_url_for_tests()
    yield url
    if server is not None:
        server.stop()


@pytest.fixture
def unique() -> str:
    """A short unique token for names in this test."""
    return uuid.uuid4().hex[:10]


#: (Redis URL, key prefix, queue) of every settings a test made: what the session sweeps when it ends.
USED: set[tuple[str, str, str]] = set()


def make_settings(redis_url: str, unique: str, **overrides: Any) -> Settings:
    """Settings isolated to one test: own key prefix and own queue."""
    queue = f"claudeq-test-{unique}"
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "key_prefix": f"cqt-{unique}:",
        "queue": queue,
        "queues": [queue],
    }
    values.update(overrides)
    made = Settings(_env_file=None, **values)  # type: ignore[call-arg]
    USED.add((made.redis_url, made.key_prefix, made.queue))
    return made


def sweep(used: set[tuple[str, str, str]]) -> int:
    """Delete every key under the prefixes (and the queues, with kombu's bindings of them) of `used` on each Redis
    still answering; -> how many there were. A test's own fixtures delete its keys; this catches what a worker wrote
    after them."""
    left = 0
    for url in {u for u, _, _ in used}:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=5)
        try:
            client.ping()
        except (redis.RedisError, OSError):
            continue  # a private server already stopped, or no server behind a unit test's URL
        try:
            sweep_pidbox(client)  # not counted: members of a shared key, not keys
            for _, prefix, queue in (entry for entry in used if entry[0] == url):
                keys = [*client.scan_iter(match=f"{prefix}*", count=1000), *client.scan_iter(match=f"{queue}*")]
                keys += [f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"]  # a worker's bindings
                for start in range(0, len(keys), 500):
                    left += int(client.delete(*keys[start : start + 500]))
        finally:
            client.close()
    return left


#: Where kombu keeps the queues bound to Celery's remote-control exchange: each worker adds its own
#: (`\x06\x16\x06\x16<node>.celery.pidbox`) and never takes it out, so each worker the suite ran would stay named there.
PIDBOX_BINDINGS = "_kombu.binding.celery.pidbox"
PIDBOX_SEP = b"\x06\x16"


def sweep_pidbox(client: redis.Redis) -> int:
    """Take out of PIDBOX_BINDINGS the queue of every claudeq-worker of this host whose process is gone (its node is
    `claudeq.<pid>@<host>`: worker/main.py), and the key once nothing is left in it; -> how many were taken out. A
    live worker's binding, and another host's, stay."""
    host = socket.gethostname()
    gone = []
    for member in client.smembers(PIDBOX_BINDINGS):
        queue = member.split(PIDBOX_SEP)[-1].decode(errors="replace")
        node = queue.removesuffix(".celery.pidbox")
        name, _, node_host = node.partition("@")
        if not name.startswith("claudeq.") or node_host != host or not name[len("claudeq.") :].isdigit():
            continue
        try:
            os.kill(int(name[len("claudeq.") :]), 0)
        except ProcessLookupError:
            gone.append(member)
        except PermissionError:
            pass  # alive, another user's
    if gone:
        client.srem(PIDBOX_BINDINGS, *gone)
    if not client.scard(PIDBOX_BINDINGS):
        client.delete(PIDBOX_BINDINGS)
        client.zrem("_kombu.binding_deadlines", "celery.pidbox")
    return len(gone)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite leaves no key behind in a shared Redis: whatever the tests' settings named is removed here."""
    left = sweep(USED)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if left and reporter is not None:
        reporter.write_line(f"swept {left} keys the tests left behind in Redis")


@pytest.fixture
def settings(redis_url: str, unique: str) -> Settings:
    """Settings on the real Redis, isolated to this test."""
    return make_settings(redis_url, unique)


@pytest.fixture
def redis_client(redis_url: str, settings: Settings) -> Iterator[redis.Redis]:
    """A client on the real Redis; this test's keys are deleted afterwards."""
    client = redis.Redis.from_url(redis_url)
    yield client
    for key in client.scan_iter(match=f"{settings.key_prefix}*", count=1000):
        client.delete(key)
    client.delete(settings.queue)
    client.close()


@pytest.fixture
def store(settings: Settings, redis_client: redis.Redis) -> JobStore:
    """A JobStore on the real Redis."""
    return make_store(settings, redis_client)


@pytest.fixture
def client(settings: Settings, redis_client: redis.Redis) -> Client:
    """A producer Client on the real Redis and broker."""
    return Client(settings, redis_client=redis_client)


@pytest.fixture
def fake_redis() -> fakeredis.FakeRedis:
    """An in-memory Redis (with Lua) for fast unit tests of Redis logic."""
    return fakeredis.FakeRedis()


@pytest.fixture
def fake_settings(unique: str) -> Settings:
    """Settings for unit tests (no server behind the URL)."""
    return make_settings("redis://127.0.0.1:1/0", unique)


@pytest.fixture
def fake_store(fake_settings: Settings, fake_redis: fakeredis.FakeRedis) -> JobStore:
    """A JobStore on fakeredis."""
    return make_store(fake_settings, fake_redis)


__all__ = ["PrivateRedis", "make_settings"]
