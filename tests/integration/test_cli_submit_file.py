"""`claudeq submit --from-file`: one spec per line, all or nothing, errors with line numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from claudeq.broker import pending_job_ids
from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.integration.test_producer import _cli

pytestmark = pytest.mark.integration


def test_from_file_submits_every_line_with_the_options_as_defaults(
    settings: Settings, client: Client, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.jsonl"
    lines = [json.dumps({"prompt": f"triage #{i}", "metadata": {"n": i}}) for i in range(5)]
    lines.insert(2, "")  # blank lines are skipped
    lines.append(json.dumps({"prompt": "pinned", "model": "opus"}))
    path.write_text("\n".join(lines) + "\n")
    done = _cli(settings, "submit", "--from-file", str(path), "--model", "haiku", "--priority", "3")
    assert done.returncode == 0, done.stderr
    ids = done.stdout.split()
    assert len(ids) == 6
    assert "submitted 6 jobs" in done.stderr
    records = [client.get(job_id) for job_id in ids]
    assert [r.spec.prompt for r in records] == [f"triage #{i}" for i in range(5)] + ["pinned"]
    assert [r.spec.model for r in records] == ["haiku"] * 5 + ["opus"]  # a line's own field wins
    assert {r.spec.priority for r in records} == {3}
    assert pending_job_ids(redis_client, [settings.queue]) == set(ids)


def test_from_file_refuses_everything_and_names_the_bad_lines(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"prompt": "fine"}),
                '{"prompt": "broken',  # line 2: not JSON
                json.dumps(["not", "an", "object"]),  # line 3
                json.dumps({"prompt": "x", "colour": "red"}),  # line 4: unknown field
                json.dumps({"prompt": "fine too"}),
                json.dumps({"prompt": "  "}),  # line 6: blank prompt
            ]
        )
    )
    done = _cli(settings, "submit", "--from-file", str(path))
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    for expected in ("line 2: not JSON", "line 3: not a JSON object", "line 4: colour: unknown field", "line 6:"):
        assert expected in done.stderr
    assert "line 1:" not in done.stderr and "line 5:" not in done.stderr
    assert "nothing submitted" in done.stderr
    assert list(redis_client.scan_iter(match=f"{settings.key_prefix}*", count=1000)) == []
    assert pending_job_ids(redis_client, [settings.queue]) == set()

    as_json = _cli(settings, "submit", "--from-file", str(path), "--json")
    assert as_json.returncode == 2
    assert [item["line"] for item in json.loads(as_json.stdout)["lines"]] == [2, 3, 4, 6]


def test_from_file_json_and_stdin(settings: Settings, client: Client) -> None:
    text = json.dumps({"prompt": "a", "idempotency_key": "same"}) + "\n" + json.dumps({"prompt": "b"}) + "\n"
    first = _cli(settings, "submit", "--from-file", "-", "--json", stdin=text)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert (report["submitted"], report["created"]) == (2, 2)
    assert [job["line"] for job in report["jobs"]] == [1, 2]
    again = json.loads(_cli(settings, "submit", "--from-file", "-", "--json", stdin=text).stdout)
    assert again["jobs"][0] == {**report["jobs"][0], "created": False}  # same idempotency key, same job
    assert client.get(report["jobs"][1]["id"]).spec.prompt == "b"


def test_prompt_and_from_file_are_exclusive(settings: Settings, tmp_path: Path) -> None:
    assert _cli(settings, "submit").returncode == 2
    path = tmp_path / "one.jsonl"
    path.write_text('{"prompt": "x"}\n')
    assert _cli(settings, "submit", "hello", "--from-file", str(path)).returncode == 2
    assert _cli(settings, "submit", "--from-file", str(tmp_path / "missing.jsonl")).returncode == 2
