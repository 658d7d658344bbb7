"""RedisSessionStore on fakeredis: the SDK's conformance suite (nothing skipped), dedup, races and retention."""

from __future__ import annotations

import asyncio
import json
import uuid
import zlib

import fakeredis
import pytest
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from claudeq.keys import Keys
from claudeq.transcripts import Codec, RedisSessionStore, decode, encode

KEY: SessionKey = {"project_key": "-tmp-work", "session_id": "3f8e0a52-7a3e-4f7e-9d55-0d1b7c1c2a11"}


@pytest.fixture
def aredis() -> fakeredis.FakeAsyncRedis:
    """One in-memory async Redis shared by the stores of a test."""
    return fakeredis.FakeAsyncRedis()


def _store(redis: fakeredis.FakeAsyncRedis, ttl_s: int = 3600) -> RedisSessionStore:
    return RedisSessionStore(redis, Keys(f"cqt-{uuid.uuid4().hex[:8]}:"), ttl_s)


def _e(uuid_: str | None, **fields: object) -> SessionStoreEntry:
    entry: dict[str, object] = {"type": "user", **fields}
    if uuid_ is not None:
        entry["uuid"] = uuid_
    return entry  # type: ignore[return-value]


async def test_conformance_suite_passes_with_no_optional_method_skipped(aredis: fakeredis.FakeAsyncRedis) -> None:
    # A fresh key prefix per contract gives the isolation the suite asks of make_store.
    await run_session_store_conformance(lambda: _store(aredis), skip_optional=frozenset())


def test_store_overrides_every_optional_method() -> None:
    from claude_agent_sdk.types import SessionStore

    for name in ("list_sessions", "list_session_summaries", "delete", "list_subkeys"):
        assert getattr(RedisSessionStore, name) is not getattr(SessionStore, name), name


async def test_append_dedups_by_uuid_across_and_within_batches(aredis: fakeredis.FakeAsyncRedis) -> None:
    store = _store(aredis)
    await store.append(KEY, [_e("a", n=1), _e("b", n=2), _e("a", n=3)])
    await store.append(KEY, [_e("b", n=4), _e("c", n=5), _e(None, n=6), _e(None, n=6)])
    loaded = await store.load(KEY)
    assert loaded == [_e("a", n=1), _e("b", n=2), _e("c", n=5), _e(None, n=6), _e(None, n=6)]


async def test_concurrent_appends_keep_every_entry_and_a_consistent_summary(aredis: fakeredis.FakeAsyncRedis) -> None:
    store = _store(aredis)
    other = RedisSessionStore(aredis, store.keys, 3600)  # a second process writing the same session

    async def writer(s: RedisSessionStore, tag: str) -> None:
        for i in range(20):
            await s.append(KEY, [_e(f"{tag}-{i}", timestamp="2026-01-01T00:00:00.000Z", lastPrompt=f"{tag}{i}")])

    await asyncio.gather(writer(store, "x"), writer(other, "y"))
    loaded = await store.load(KEY)
    assert loaded is not None and len(loaded) == 40
    assert {e["uuid"] for e in loaded} == {f"{t}-{i}" for t in "xy" for i in range(20)}
    [summary] = await store.list_session_summaries(KEY["project_key"])
    # last-wins field equals the last entry in the stored order: fold order == commit order
    assert summary["data"]["last_prompt"] == loaded[-1]["lastPrompt"]  # type: ignore[typeddict-item]
    [listed] = await store.list_sessions(KEY["project_key"])
    assert summary["mtime"] >= listed["mtime"]


async def test_every_key_of_a_session_gets_the_retention_ttl(aredis: fakeredis.FakeAsyncRedis) -> None:
    store = _store(aredis, ttl_s=120)
    await store.append(KEY, [_e("a")])
    await store.append({**KEY, "subpath": "subagents/agent-1"}, [_e("s")])
    keys = [k async for k in aredis.scan_iter(match=f"{store.keys.prefix}*")]
    assert len(keys) >= 7
    for key in keys:
        ttl = await aredis.ttl(key)
        assert 0 < ttl <= 120, key


async def test_expired_transcript_disappears_from_listings(aredis: fakeredis.FakeAsyncRedis) -> None:
    store = _store(aredis)
    await store.append(KEY, [_e("a")])
    await aredis.delete(store.keys.session_entries(KEY["project_key"], KEY["session_id"]))  # as if it expired
    assert await store.list_sessions(KEY["project_key"]) == []
    assert await store.list_session_summaries(KEY["project_key"]) == []
    assert await store.projects_of(KEY["session_id"]) == []


async def test_find_and_delete_a_session_by_id_alone(aredis: fakeredis.FakeAsyncRedis) -> None:
    store = _store(aredis)
    await store.append(KEY, [_e("a")])
    await store.append({**KEY, "subpath": "subagents/agent-1"}, [_e("s")])
    assert await store.projects_of(KEY["session_id"]) == [KEY["project_key"]]
    assert await store.delete_everywhere(KEY["session_id"]) == 1
    assert await store.load(KEY) is None
    assert [k async for k in aredis.scan_iter(match=f"{store.keys.prefix}*")] == []


async def test_colons_in_key_parts_never_collide(aredis: fakeredis.FakeAsyncRedis) -> None:
    store = _store(aredis)
    await store.append({"project_key": "a:b", "session_id": "c"}, [_e("1")])
    await store.append({"project_key": "a", "session_id": "b:c"}, [_e("2")])
    assert await store.load({"project_key": "a:b", "session_id": "c"}) == [_e("1")]
    assert await store.load({"project_key": "a", "session_id": "b:c"}) == [_e("2")]


async def test_scrub_keeps_secrets_out_of_stored_transcripts(aredis: fakeredis.FakeAsyncRedis) -> None:
    secret = "sk-ant-oat01-test-scrubbed-token"
    store = RedisSessionStore(aredis, Keys("cqt-scrub:"), 3600, scrub=lambda s: s.replace(secret, "[redacted]"))
    key: SessionKey = {"project_key": "p", "session_id": "s"}
    await store.append(key, [_e("u1", message={"content": [{"type": "text", "text": f"env says {secret}"}]})])
    loaded = await store.load(key)
    assert loaded is not None
    assert secret not in json.dumps(loaded)
    assert "[redacted]" in json.dumps(loaded)
    for name in await aredis.keys("cqt-scrub:*"):
        dumped = await aredis.dump(name)
        assert dumped is None or secret.encode() not in dumped, name


@pytest.mark.parametrize("codec", ["zstd", "zlib", "none"])
async def test_conformance_suite_passes_with_every_codec(aredis: fakeredis.FakeAsyncRedis, codec: Codec) -> None:
    def make() -> RedisSessionStore:
        return RedisSessionStore(aredis, Keys(f"cqt-{uuid.uuid4().hex[:8]}:"), 3600, codec=codec)

    await run_session_store_conformance(make, skip_optional=frozenset())


async def test_a_transcript_written_by_every_codec_in_turn_loads_back_exactly(aredis: fakeredis.FakeAsyncRedis) -> None:
    # A fleet upgrading mid-conversation: entries stored uncompressed (as before) come first, then compressed
    # batches of either codec; whichever worker loads the session gets every entry, in order, as appended.
    keys = Keys(f"cqt-{uuid.uuid4().hex[:8]}:")
    written: list[SessionStoreEntry] = []
    for n, codec in enumerate(["none", "zlib", "zstd", "none", "zstd"]):
        store = RedisSessionStore(aredis, keys, 3600, codec=codec)  # type: ignore[arg-type]
        batch = [_e(f"{codec}-{n}-{i}", text="é ✓ " * i, nested={"a": [1, 2.5, None, True]}) for i in range(3)]
        await store.append(KEY, batch)
        written += batch
    elements = await aredis.lrange(keys.session_entries(KEY["project_key"], KEY["session_id"]), 0, -1)
    assert len(elements) == 3 + 1 + 1 + 3 + 1  # one element per compressed batch, one per uncompressed entry
    for codec in ("zstd", "zlib", "none"):
        reader = RedisSessionStore(aredis, keys, 3600, codec=codec)  # type: ignore[arg-type]
        assert await reader.load(KEY) == written


def test_an_element_of_unknown_form_is_an_error_not_a_silent_loss() -> None:
    with pytest.raises(ValueError, match="unknown form"):
        decode([b"garbage"])


def test_compressed_batches_keep_the_json_of_every_entry() -> None:
    entries = [{"uuid": "u1", "message": {"content": "x" * 5000}, "toolUseResult": {"content": "x" * 5000}}]
    for codec in ("zstd", "zlib"):
        (element,) = encode(entries, codec)  # type: ignore[arg-type]
        assert len(element) < 200  # the tool result stored twice compresses to about nothing
        assert decode([element if isinstance(element, bytes) else element.encode()]) == entries


async def test_retain_shortens_a_session_or_deletes_it(aredis: fakeredis.FakeAsyncRedis) -> None:
    store = _store(aredis)
    sub: SessionKey = {**KEY, "subpath": "subagents/agent-1"}
    await store.append(KEY, [_e("a")])
    await store.append(sub, [_e("b")])
    await store.retain(KEY["session_id"], 60)
    k, p, s = store.keys, KEY["project_key"], KEY["session_id"]
    for name in (k.session_entries(p, s), k.session_summary(p, s), k.session_entries(p, s, "subagents/agent-1")):
        assert 0 < await aredis.ttl(name) <= 60, name
    await store.retain(KEY["session_id"], 7200)  # never lengthens
    assert await aredis.ttl(k.session_entries(p, s)) <= 60
    await store.retain(KEY["session_id"], 0)
    assert await store.load(KEY) is None and await store.load(sub) is None
    assert await store.projects_of(KEY["session_id"]) == []


def _read_result(raw: str, start: int = 1, suffix: str = "") -> dict[str, object]:
    numbered = "\n".join(f"{n}\t{line}" for n, line in enumerate(raw.split("\n"), start)) + suffix
    return {
        "type": "user",
        "uuid": uuid.uuid4().hex,
        "message": {"role": "user", "content": [{"tool_use_id": "t1", "type": "tool_result", "content": numbered}]},
        "toolUseResult": {
            "type": "text",
            "file": {"filePath": "/w/a.py", "content": raw, "numLines": 3, "startLine": start, "totalLines": 3},
        },
    }


@pytest.mark.parametrize("codec", ["zstd", "zlib"])
def test_a_read_result_is_stored_once_and_loads_back_with_its_raw_copy_in_place(codec: Codec) -> None:
    raw = "import os\n\tindented\n" + "x = 1\n" * 2000
    entries = [
        _read_result(raw),
        _read_result(raw, start=40, suffix="\n\n<system-reminder>mind it</system-reminder>"),
        _read_result("not\tnumbered\n3\tas claimed"),
    ]
    entries[2]["message"]["content"][0]["content"] = "1\tnot\tnumbered\n3\tas claimed"  # type: ignore[index]
    (element,) = encode(entries, codec)
    assert isinstance(element, bytes)
    loaded = decode([element])
    assert json.dumps(loaded) == json.dumps(entries)  # same values, same key order
    if codec == "zlib":
        payload = json.loads(zlib.decompress(element))
        assert payload["r"] == [[0, 1], [1, 40]]  # the third was not numbered as it said: kept as it came
        texts = [e["message"]["content"][0]["content"] for e in payload["e"]]
        assert texts == ["", "\n\n<system-reminder>mind it</system-reminder>", "1\tnot\tnumbered\n3\tas claimed"]


async def test_dedup_reads_the_uuid_set_of_a_session_written_before_and_odd_uuids(
    aredis: fakeredis.FakeAsyncRedis,
) -> None:
    store = _store(aredis)
    p, s = KEY["project_key"], KEY["session_id"]
    # As a worker before the compact id list wrote it: one JSON text per entry and a set of uuids.
    await aredis.rpush(store.keys.session_entries(p, s), json.dumps(_e("old-1", n=1)), json.dumps(_e("old-2", n=2)))
    await aredis.sadd(store.keys.session_uuids(p, s), "old-1", "old-2")
    odd = 'line\nbreak "quoted" ✓'
    await store.append(KEY, [_e("old-2", n=3), _e(odd, n=4), _e("new", n=5)])
    await store.append(KEY, [_e(odd, n=6), _e("new", n=7), _e("old-1", n=8), _e("last", n=9)])
    loaded = await store.load(KEY)
    assert loaded == [_e("old-1", n=1), _e("old-2", n=2), _e(odd, n=4), _e("new", n=5), _e("last", n=9)]
    assert await aredis.ttl(store.keys.session_ids(p, s)) > 0
    await store.delete(KEY)
    assert not await aredis.exists(store.keys.session_ids(p, s), store.keys.session_uuids(p, s))
