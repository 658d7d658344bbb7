"""Every Redis script claudeq ships loads into a real Redis (`SCRIPT LOAD`): a syntax error, or a script too big
for Redis's Lua, fails here rather than at its first call in a fleet (docs/architecture.md#lua-scripts)."""

from __future__ import annotations

import hashlib

import pytest
import redis

from claudeq.lua import names, script

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", names())
def test_the_script_loads_in_real_redis_under_its_sha(redis_url: str, name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    text = script(name)
    assert client.script_load(text) == hashlib.sha1(text.encode()).hexdigest()


def test_a_script_that_does_not_compile_is_refused_by_script_load(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with pytest.raises(redis.ResponseError, match="Error compiling script"):
        client.script_load("local x = = 1\nreturn x\n")
