"""`claudeq conversation show|delete|list`: a typer sub-app, mounted by `claudeq.producer.cli` as `conversation`.

Exit codes follow `claudeq`: 0 ok, 1 runtime error (Redis unreachable, …), 5 no such conversation.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import redis
import typer

from claudeq.conversations import ConversationInfo, ConversationStore, delete_conversation
from claudeq.errors import ConfigError
from claudeq.transcripts import RedisSessionStore

from ..config.settings import Settings, load_settings
from ..config.tenants import DEFAULT_TENANT
from .cli_output import CliConsole, styled

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 5

conversation_app = typer.Typer(help="Inspect and delete conversations (turns, sessions, jobs).", no_args_is_help=True)

out = CliConsole()
err = CliConsole(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
#: Conversations are each tenant's own (claudeq/conversations.py): the commands look in one tenant's.
TenantOpt = Annotated[str, typer.Option("--tenant", help="Whose conversation (a tenant's names are its own).")]


def _fail(code: int, message: str, as_json: bool) -> typer.Exit:
    if as_json:
        print(json.dumps({"error": message}))
    else:
        err.print(styled(("error:", "red"), f" {message}"))
    return typer.Exit(code)


def _settings(as_json: bool) -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        raise _fail(EXIT_BAD_INPUT, f"configuration: {exc}", as_json) from None


def _print_info(info: ConversationInfo) -> None:
    out.print(styled((info.name, "bold"), "  session ", (info.session_id or "-", "cyan")))
    if info.running:
        out.print(f"  running   {info.running}")
    if info.waiting:
        out.print(f"  waiting   {', '.join(info.waiting)}")
    for number, turn in enumerate(info.turns, 1):
        how = "forked" if turn.forked else "restarted" if turn.restarted else "resumed" if turn.resumed_from else "new"
        out.print(
            f"  {number:>3}. {turn.finished_at.isoformat()}  {turn.job_id}  {turn.status:<9}  "
            f"{how:<9}  {turn.session_id or '-'}",
            highlight=False,
        )


@conversation_app.command("show")
def show(name: str, tenant: TenantOpt = DEFAULT_TENANT, as_json: JsonOpt = False) -> None:
    """Show a conversation: its latest session, running/waiting jobs and turns (job, status, session)."""
    settings = _settings(as_json)
    try:
        info = ConversationStore.from_settings(settings).info(name, tenant)
    except redis.RedisError as exc:
        raise _fail(EXIT_ERROR, f"redis: {exc}", as_json) from None
    if info is None:
        raise _fail(EXIT_NOT_FOUND, f"no conversation named {name!r} (never started, deleted or expired)", as_json)
    if as_json:
        print(json.dumps(info.public()))
    else:
        _print_info(info)


@conversation_app.command("delete")
def delete(name: str, tenant: TenantOpt = DEFAULT_TENANT, as_json: JsonOpt = False) -> None:
    """Delete a conversation: its pointer, its turns and the transcripts of its sessions."""
    settings = _settings(as_json)
    conversations = ConversationStore.from_settings(settings)

    async def run() -> list[str]:
        sessions = RedisSessionStore.from_settings(settings)
        try:
            return await delete_conversation(conversations, sessions, name, tenant)
        finally:
            await sessions.aclose()

    try:
        if conversations.info(name, tenant) is None:
            raise _fail(EXIT_NOT_FOUND, f"no conversation named {name!r}", as_json)
        deleted = asyncio.run(run())
    except redis.RedisError as exc:
        raise _fail(EXIT_ERROR, f"redis: {exc}", as_json) from None
    if as_json:
        print(json.dumps({"name": name, "deleted": True, "sessions": deleted}))
    else:
        out.print(f"deleted conversation {name} ({len(deleted)} session transcript(s))")


@conversation_app.command("list")
def list_cmd(
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    tenant: TenantOpt = DEFAULT_TENANT,
    as_json: JsonOpt = False,
) -> None:
    """List conversations, most recent turn first."""
    settings = _settings(as_json)
    try:
        names = ConversationStore.from_settings(settings).names(limit, tenant)
    except redis.RedisError as exc:
        raise _fail(EXIT_ERROR, f"redis: {exc}", as_json) from None
    if as_json:
        print(json.dumps(names))
    else:
        for name in names:
            out.print(name)
