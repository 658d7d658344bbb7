"""The suite leaves no key behind in a shared Redis: what a test's settings named is swept when the session ends."""

from __future__ import annotations

import os
import socket
import subprocess

import redis

from tests.conftest import PIDBOX_BINDINGS, PIDBOX_SEP, USED, make_settings, sweep, sweep_pidbox


def test_the_session_sweep_removes_what_a_tests_settings_named_and_nothing_else(
    redis_url: str, unique: str, redis_client: redis.Redis
) -> None:
    settings = make_settings(redis_url, f"{unique}-sweep")
    assert (settings.redis_url, settings.key_prefix, settings.queue) in USED
    redis_client.set(f"{settings.key_prefix}left-by-a-worker", "1")
    redis_client.rpush(settings.queue, "message")
    bystander = f"cqt-bystander-{unique}"
    redis_client.set(bystander, "1")
    try:
        assert sweep({(settings.redis_url, settings.key_prefix, settings.queue)}) == 2
        assert not redis_client.exists(f"{settings.key_prefix}left-by-a-worker", settings.queue)
        assert redis_client.get(bystander) == b"1"
    finally:
        redis_client.delete(bystander)


def test_the_sweep_takes_out_the_pidbox_bindings_of_this_hosts_workers_that_are_gone(
    redis_client: redis.Redis,
) -> None:
    """Every claudeq-worker binds its remote-control queue and kombu never unbinds it: the suite's workers must not
    stay named in the shared Redis, and a live worker's binding (or another host's) must stay."""
    dead = _gone_pid()
    host = socket.gethostname()
    ours_gone = PIDBOX_SEP * 2 + f"claudeq.{dead}@{host}.celery.pidbox".encode()
    ours_alive = PIDBOX_SEP * 2 + f"claudeq.{os.getpid()}@{host}.celery.pidbox".encode()
    elsewhere = PIDBOX_SEP * 2 + f"claudeq.{dead}@another-host.celery.pidbox".encode()
    redis_client.sadd(PIDBOX_BINDINGS, ours_gone, ours_alive, elsewhere)
    try:
        assert sweep_pidbox(redis_client) >= 1
        members = redis_client.smembers(PIDBOX_BINDINGS)
        assert ours_gone not in members and {ours_alive, elsewhere} <= members
    finally:
        redis_client.srem(PIDBOX_BINDINGS, ours_alive, elsewhere)
        sweep_pidbox(redis_client)


def _gone_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid
