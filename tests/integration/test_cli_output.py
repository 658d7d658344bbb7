"""The `claudeq` command line read through a pipe: user text printed as written (never read as markup), nothing
wrapped or cut, tables as plain columns (docs/cli.md#output)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.integration.test_prometheus import free_port
from tests.support.tree import ROOT, tree_env

pytestmark = pytest.mark.integration

#: Prompts rich would read as markup: a closing tag with no opening one crashes it, the others vanish.
BRACKETED = ("bold? [/b] closes nothing", "[[sim: text hi]] steer me", "[red]not red[/red] and [link=x]y[/link]")


def cli(settings: Settings, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`claudeq ARGS` with stdout and stderr to pipes (not a terminal), on this test's Redis and queue."""
    base = {k: v for k, v in tree_env().items() if not k.startswith(("CLAUDEQ_", "COLUMNS", "LINES"))}
    env = base | {
        "CLAUDEQ_REDIS_URL": settings.redis_url,
        "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
        "CLAUDEQ_QUEUE": settings.queue,
        "CLAUDEQ_QUEUES": json.dumps(settings.queues),
    }
    if settings.accounts_file is not None:
        env["CLAUDEQ_ACCOUNTS_FILE"] = str(settings.accounts_file)
    if settings.tenants_file is not None:
        env["CLAUDEQ_TENANTS_FILE"] = str(settings.tenants_file)
    return subprocess.run(
        [sys.executable, "-m", "claudeq.producer.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_list_shows_prompts_with_brackets_as_written(settings: Settings, client: Client) -> None:
    ids = [client.submit(prompt=prompt).id for prompt in BRACKETED]
    done = cli(settings, "list")
    assert done.returncode == 0, done.stderr
    for job_id, prompt in zip(ids, BRACKETED, strict=True):
        [row] = [line for line in done.stdout.splitlines() if job_id in line]
        assert prompt in row, row


def test_an_error_about_bracketed_input_is_printed_as_written(settings: Settings, redis_client: redis.Redis) -> None:
    done = cli(settings, "submit", "hi", "--meta", "[/b]")
    assert done.returncode == 2, done.stderr
    assert "'[/b]' is not KEY=VALUE" in done.stderr, done.stderr


def test_piped_list_prints_every_value_whole_one_row_a_line(settings: Settings, client: Client) -> None:
    long_prompt = "a prompt far wider than any terminal " * 12 + "END"
    first = client.submit(prompt=long_prompt)
    client.cancel(first.id)
    second = client.submit(prompt="two\nlines")
    done = cli(settings, "list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, lines  # the header, then one line per job
    assert lines[0].split() == ["status", "account", "attempts", "created", "prompt", "id"]
    [row] = [line for line in lines if first.id in line]
    assert row.split()[0] == "cancelled" and long_prompt in row
    [row] = [line for line in lines if second.id in line]
    assert row.split()[0] == "queued" and "two lines" in row
    assert "…" not in done.stdout


def test_a_piped_error_line_is_not_broken(settings: Settings, redis_client: redis.Redis) -> None:
    pair = "no-equals-sign-" * 12
    done = cli(settings, "submit", "hi", "--meta", pair)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: metadata: {pair!r} is not KEY=VALUE"], done.stderr


def _listening(port: int) -> list[str]:
    """The local addresses (IPv4, as dotted quads) a socket listens on at `port`, read from the kernel's table."""
    found = []
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = row.split()[1], row.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.append(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return found


def test_the_exporter_listens_on_loopback_unless_told_otherwise(settings: Settings, redis_client: redis.Redis) -> None:
    port = free_port()
    env = {k: v for k, v in tree_env().items() if not k.startswith("CLAUDEQ_")} | {
        "CLAUDEQ_REDIS_URL": settings.redis_url,
        "CLAUDEQ_KEY_PREFIX": settings.key_prefix,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "claudeq.producer.cli", "exporter", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"serving /metrics on 127.0.0.1:{port}" in line, line
        assert _listening(port) == ["127.0.0.1"]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_events_and_events_follow_print_the_same_lines(settings: Settings, client: Client) -> None:
    handle = client.submit(prompt="cancel me")
    client.cancel(handle.id)
    listed = cli(settings, "events", handle.id)
    followed = cli(settings, "events", handle.id, "--follow")
    assert listed.returncode == followed.returncode == 0, listed.stderr + followed.stderr
    assert listed.stdout == followed.stdout
    lines = listed.stdout.splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [f"queued on {settings.queue}", "cancelled"]


def test_status_of_a_cancelled_job_says_so_once(settings: Settings, client: Client) -> None:
    handle = client.submit(prompt="cancel me")
    client.cancel(handle.id)
    shown = cli(settings, "status", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"{handle.id}  cancelled"
    assert "  reason    cancelled by request" in shown.stdout.splitlines()
    assert "cancelled: cancelled" not in shown.stdout


def test_top_gives_its_frame_as_json(settings: Settings, client: Client) -> None:
    queued = client.submit(prompt="waiting in line")
    done = cli(settings, "top", "--json")
    assert done.returncode == 0, done.stderr
    frame = json.loads(done.stdout)
    assert frame["counts"]["queued"] == 1
    assert frame["queues"] == [{"queue": settings.queue, "depth": 1}]
    assert frame["running"] == [] and frame["workers"] == []
    assert client.get(queued.id).status == "queued"


def test_piped_tables_keep_one_row_a_line(settings: Settings, redis_client: redis.Redis, tmp_path: Path) -> None:
    names = ["team-with-a-rather-long-name-for-the-tenant-" + c for c in "ab"]
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("".join(f'[[tenants]]\nname = "{n}"\nmax_cost_usd_per_hour = 12.5\n\n' for n in names))
    done = cli(settings.model_copy(update={"tenants_file": tenants}), "tenants")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split("  ")[0] == "tenant" and header.rstrip().endswith("on budget"), header
    assert [row.split()[0] for row in rows] == names
    assert all("$0.0000 / $12.5000 (0%)" in row for row in rows), rows


def test_piped_top_prints_one_whole_frame_in_plain_columns(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    account = "an-account-named-wider-than-the-column-a-terminal-gives-it"
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(f'[[accounts]]\nname = "{account}"\nkind = "api_key"\ntoken_env = "CQT_UNUSED_KEY"\n')
    fleet = settings.model_copy(update={"accounts_file": accounts})
    client = Client(fleet, redis_client=redis_client)
    reason = "stopped by the operator because " + "the reason goes on and on " * 6 + "END"
    stopped = client.submit(prompt="to be stopped")
    client.cancel(stopped.id, reason)
    done = cli(fleet, "top")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "…" not in done.stdout and "\x1b" not in done.stdout  # nothing cut, no terminal codes
    [row] = [line for line in lines if account in line]
    assert row.split()[:3] == [account, "ok", "0/1"], row
    [row] = [line for line in lines if stopped.id in line]
    assert row.split()[:2] == [stopped.id, "cancelled"] and reason in row, row
    assert any(line.split() == ["queue", "depth"] for line in lines), lines
    [row] = [line for line in lines if line.startswith(settings.queue + " ")]
    assert row.split() == [settings.queue, "1"], row  # the cancelled job's message stays until a worker drops it
