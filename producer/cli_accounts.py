"""`claudeq accounts`: see every account's state and slots; enable, disable or end a cooldown (operators).

Exit codes: 0 ok, 1 runtime error (Redis unreachable, …), 2 bad input (unknown account, bad configuration).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, NoReturn, TypeVar

import redis
import typer
from rich.text import Text

from claudeq import connections
from claudeq.accounts import AccountStore
from claudeq.errors import ConfigError, UnknownAccount
from claudeq.keys import Keys
from claudeq.models import AccountState, utcnow

from ..config.settings import load_settings
from .cli_output import CliConsole, print_table, styled

#: Token families the API reports for API-key accounts (the tightest is shown).
TOKEN_WINDOWS: tuple[str, ...] = ("tokens", "input_tokens", "output_tokens")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2

accounts_app = typer.Typer(
    help="Accounts: state, slots, cooldowns; enable / disable / clear-cooldown.",
    invoke_without_command=True,
    no_args_is_help=False,
)

out = CliConsole()
err = CliConsole(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
T = TypeVar("T")


def _fail(code: int, message: str, as_json: bool = False) -> NoReturn:
    if as_json:
        print(json.dumps({"error": message}))
    else:
        err.print(styled(("error:", "red"), f" {message}"))
    raise typer.Exit(code)


def _store(ctx: typer.Context, as_json: bool) -> AccountStore:
    """The store injected by a caller (tests: `CliRunner.invoke(..., obj=store)`), else one from the settings."""
    if isinstance(ctx.obj, AccountStore):
        return ctx.obj
    try:
        settings = load_settings()
        pool = settings.accounts
    except ConfigError as exc:
        _fail(EXIT_BAD_INPUT, f"configuration: {exc}", as_json)
    return AccountStore(connections.sync_client(settings), Keys(settings.key_prefix), pool)


def _run(as_json: bool, action: Callable[[], T]) -> T:
    """Map expected failures to exit codes with one clear line."""
    try:
        return action()
    except UnknownAccount as exc:
        _fail(EXIT_BAD_INPUT, f"{exc} (see `claudeq accounts`)", as_json)
    except ConfigError as exc:
        _fail(EXIT_BAD_INPUT, f"configuration: {exc}", as_json)
    except redis.RedisError as exc:
        _fail(EXIT_ERROR, f"Redis: {exc.__class__.__name__}: {exc}", as_json)


def _relative(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    seconds = (when - now).total_seconds()
    if seconds <= 0:
        return "now"
    if seconds < 120:
        return f"in {seconds:.0f}s"
    if seconds < 7200:
        return f"in {seconds / 60:.0f}m"
    return f"in {seconds / 3600:.1f}h"


def _utilization(state: AccountState) -> str:
    """Each window's utilization: what the API last reported, else what the window holding runs back was read at
    (a rejection reports no window utilization, but its reservation knows it)."""
    known = {name: w.utilization for name, w in state.windows.items() if w.utilization is not None}
    for r in state.reservations:
        known.setdefault(r.window, r.utilization)
    return ", ".join(f"{name} {value:.2f}" for name, value in known.items()) or "-"


def _left(state: AccountState, windows: tuple[str, ...], now: datetime) -> str:
    """What the API last said is left of the tightest of `windows`: `remaining/limit, resets in …`."""
    shown = []
    for name in windows:
        w = state.windows.get(name)
        if w is None or w.remaining is None:
            continue
        if w.resets_at is not None and w.resets_at <= now and w.limit is not None:
            shown.append((1.0, f"{w.limit}/{w.limit} (reset)"))  # the window it was read in is over
            continue
        ratio = w.remaining / w.limit if w.limit else 0.0
        limit = f"/{w.limit}" if w.limit is not None else ""
        prefix = "" if name in ("requests", "tokens") else f"{name.split('_')[0]} "
        shown.append((ratio, f"{prefix}{w.remaining}{limit}, reset {_relative(w.resets_at, now)}"))
    return min(shown)[1] if shown else "-"


_STYLE = {"ok": "green", "warning": "yellow", "cooling": "cyan", "reserved": "magenta", "disabled": "red"}


def _reserved(state: AccountState, now: datetime) -> list[str]:
    """One line per window keeping runs off the account, and per model family cooling: which, until when."""
    lines = []
    for r in state.reservations:
        who = "every job" if r.family == "-" else f"{r.family} jobs"
        why = "predicted to pass" if r.predicted else "at"
        lines.append(
            f"{who}: {r.window} {r.utilization:.2f} {why} ceiling {r.ceiling:.2f}, until {r.until.isoformat()} "
            f"({_relative(r.until, now)})"
        )
    for family, until in state.family_cooldowns.items():
        lines.append(f"{family} jobs: cooling until {until.isoformat()} ({_relative(until, now)})")
    return lines


def _show(store: AccountStore, as_json: bool) -> None:
    states = _run(as_json, store.states)
    if as_json:
        print(json.dumps([s.public() for s in states]))
        return
    if not states:
        out.print("no accounts configured (set CLAUDEQ_ACCOUNTS_FILE; see accounts.example.toml)")
        return
    now = utcnow()
    kinds = {a.name: a.kind for a in store.pool.accounts}
    table: list[list[str | Text]] = []
    limits: list[list[str | Text]] = []
    reserved: list[list[str | Text]] = []
    cache: list[list[str | Text]] = []
    for s in states:
        table.append(
            [
                s.name,
                kinds.get(s.name, "?"),
                Text(s.state, _STYLE.get(s.state, "")),
                s.reason or "-",
                f"{s.slots_in_use}/{s.max_concurrency}",
                _relative(s.cooldown_until, now),
                _utilization(s),
            ]
        )
        ratio = s.cache_hit_ratio()
        if ratio is not None:
            n = s.counters
            cache.append(
                [
                    s.name,
                    f"{ratio:.0%}",
                    f"{n.get('cache_read_tokens', 0):,}",
                    f"{n.get('cache_write_tokens', 0):,}",
                    f"{n.get('input_tokens', 0):,}",
                ]
            )
        requests, tokens = _left(s, ("requests",), now), _left(s, TOKEN_WINDOWS, now)
        if (requests, tokens) != ("-", "-") or s.held_until is not None:
            held = f"until {_relative(s.held_until, now)}: {s.held_reason}" if s.held_until is not None else "-"
            limits.append([s.name, requests, tokens, held])
        for line in _reserved(s, now):
            reserved.append([s.name, line])
    print_table(out, ("name", "kind", "state", "reason", "slots", "cooldown until", "utilization"), table)
    if reserved:
        # Window-aware admission: windows at (or predicted to pass) their ceiling, model families cooling.
        out.print()
        print_table(out, ("name", "held back"), reserved)
    if cache:
        # The share of the runs' input-side tokens read from the prompt cache (docs/architecture.md#cache-affinity).
        out.print()
        print_table(out, ("name", "cache hit", "read", "written", "plain"), cache)
    if limits:
        # What the API said is left (API-key accounts, read from response headers by the workers' pass-through).
        out.print()
        print_table(out, ("name", "requests left", "tokens left", "holding back"), limits)


@accounts_app.callback()
def accounts(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List accounts (state, reason, slots in use, cooldown, utilization per window)."""
    if ctx.invoked_subcommand is None:
        _show(_store(ctx, as_json), as_json)


@accounts_app.command("list")
def list_accounts(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List accounts (same as `claudeq accounts`)."""
    _show(_store(ctx, as_json), as_json)


def _act(ctx: typer.Context, as_json: bool, name: str, verb: str, action: Callable[[AccountStore], Any]) -> None:
    store = _store(ctx, as_json)
    _run(as_json, lambda: action(store))
    state = _run(as_json, lambda: store.state(name))
    if as_json:
        print(json.dumps(state.public()))
    else:
        out.print(f"account {name} {verb}: now {state.state}" + (f" ({state.reason})" if state.reason else ""))


@accounts_app.command()
def enable(ctx: typer.Context, name: str, as_json: JsonOpt = False) -> None:
    """Enable a disabled account."""
    _act(ctx, as_json, name, "enabled", lambda store: store.enable(name))


@accounts_app.command()
def disable(
    ctx: typer.Context,
    name: str,
    reason: Annotated[str, typer.Option(help="Why (shown in `claudeq accounts`).")] = "disabled by an operator",
    as_json: JsonOpt = False,
) -> None:
    """Disable an account: no new run goes there until it is enabled."""
    _act(ctx, as_json, name, "disabled", lambda store: store.disable(name, reason))


@accounts_app.command("clear-cooldown")
def clear_cooldown(ctx: typer.Context, name: str, as_json: JsonOpt = False) -> None:
    """End an account's cooldown now."""
    _act(ctx, as_json, name, "cooldown cleared", lambda store: store.clear_cooldown(name))
