"""The suite leaves no key behind in a shared Redis: what a test's settings named is swept when the session ends."""

from __future__ import annotations

import redis

from tests.conftest import USED, make_settings, sweep


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
