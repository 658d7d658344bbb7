"""Spec fields the worker passes as one command-line argument are refused at submit when they cannot fit one
(MAX_ARG_STRLEN, 128 KiB), naming the field and the limit; system prompts of any size the spec allows go through,
and `claudeq submit` reads them from `@file`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from claudeq.config.settings import Settings
from claudeq.errors import JobSpecError
from claudeq.producer.client import Client

pytestmark = pytest.mark.integration

BIG = 200 * 1024


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CLAUDEQ_REDIS_URL": settings.redis_url,
        "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
        "CLAUDEQ_QUEUE": settings.queue,
        "CLAUDEQ_QUEUES": json.dumps(settings.queues),
    }
    return subprocess.run(
        [sys.executable, "-m", "claudeq.producer.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_output_schema_over_one_argv_argument_is_refused_with_the_field_and_the_limit(client: Client) -> None:
    schema = {"type": "object", "description": "d" * BIG}
    with pytest.raises(JobSpecError) as info:
        client.submit(prompt="hi", output_schema=schema)
    [(field, reason)] = info.value.errors
    assert field == "output_schema"
    assert "131071" in reason and "MAX_ARG_STRLEN" in reason
    assert client.list() == []


def test_a_model_name_over_one_argv_argument_is_refused(client: Client) -> None:
    with pytest.raises(JobSpecError) as info:
        client.submit(prompt="hi", model="claude-" + "x" * BIG)
    assert [f for f, _ in info.value.errors] == ["model"]


def test_system_prompts_over_one_argv_argument_are_accepted(client: Client) -> None:
    handle = client.submit(prompt="hi", system_prompt="s" * BIG, append_system_prompt="a" * BIG)
    spec = client.get(handle.id).spec
    assert spec.system_prompt == "s" * BIG and spec.append_system_prompt == "a" * BIG


def test_cli_submit_reads_system_prompts_from_files(settings: Settings, client: Client, tmp_path: Path) -> None:
    system = tmp_path / "system.txt"
    system.write_text("You are a careful reviewer.\n" + "s" * BIG)
    append = tmp_path / "append.txt"
    append.write_text("Answer in French.\n" + "a" * BIG)
    done = _cli(
        settings, "submit", "hi", "--system-prompt", f"@{system}", "--append-system-prompt", f"@{append}", "--json"
    )
    assert done.returncode == 0, done.stderr
    spec = client.get(json.loads(done.stdout)["id"]).spec
    assert spec.system_prompt == system.read_text()
    assert spec.append_system_prompt == append.read_text()


def test_cli_submit_names_an_unreadable_system_prompt_file(settings: Settings, client: Client, tmp_path: Path) -> None:
    done = _cli(settings, "submit", "hi", "--append-system-prompt", f"@{tmp_path / 'missing.txt'}")
    assert done.returncode == 2
    assert "append_system_prompt" in done.stderr and "cannot read" in done.stderr
    assert client.list() == []


def test_cli_submit_refuses_a_schema_file_over_one_argv_argument(
    settings: Settings, client: Client, tmp_path: Path
) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "description": "d" * BIG}))
    done = _cli(settings, "submit", "hi", "--output-schema", f"@{schema}", "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["fields"][0]["field"] == "output_schema"
    assert client.list() == []
