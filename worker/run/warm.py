"""Warm CLIs: idle Claude CLIs a worker process keeps for later jobs with exactly the same options.

A job's run may reuse a CLI (a connected `ClaudeSDKClient`) that a finished job left, instead of paying a CLI start
(~0.5 s of CPU, ~200 MB) each time. The rules (docs/architecture.md#warm-clis):

- A CLI is keyed by the fingerprint of everything it was started with (`fingerprint`: the account, and every SDK
  option: model, tools, permission mode, cwd and dirs, system prompts, MCP tools, limits, the environment); a job
  reuses only a CLI whose key is its own.
- Only jobs that start a new session and need no uid of their own per run are eligible (`warm_eligible`): conversation
  turns, resumed or forked sessions, shell and file-writing jobs, fleet tools and interactive logins run cold. A
  sandboxed job runs warm in a sandbox kept with its CLI (on a root worker with a run uid the CLI holds for its
  life): the key then also holds what the sandbox shows (`SandboxView.fingerprint`), so a CLI never serves a job
  whose view would differ.
- Between jobs the CLI is cleared (`/clear`) and verified clean (`_clear`) before it goes idle; a CLI that ended a
  job abnormally (error, timeout, watchdog, cancel, interrupt) is never given back. It is stopped after
  `warm_max_jobs` jobs or `warm_idle_s` idle seconds.
- `warm_budget` idle CLIs at most per process; the idle ones are stopped first (least recently used) when a cold
  start needs the room, so the process never holds more CLIs than max(concurrency, budget).
- A CLI keeps its run directory (its own config dir) and its pass-through stand-in for its whole life; the
  stand-in is parked (refused) while the CLI is idle and revoked when it stops.

All of it runs on the engine's loop thread (the CLIs are spawned there, so they die with the worker).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import shutil
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ConversationResetMessage, ResultMessage, SystemMessage

from claudeq import tracing
from claudeq.permissions import allowed_builtin_tools

from ...config.account_pool import AccountConfig
from ...config.settings import FILE_TOOLS, Settings
from ..passthrough.server import PassThrough, RunGrant
from . import procs
from .launcher import RunIdentity
from .outcome import RunRequest
from .sandbox import sandboxed
from .tools import FLEET_TOOLS, ToolRegistry
from .workdirs import runs_under_own_uid

log = logging.getLogger("claudeq.warm")

#: The longest a `/clear` and its check may take (it answers in ~0.1 s: no request leaves the CLI).
CLEAR_TIMEOUT_S = 5.0
#: How long a job waits for a CLI of its key that is being cleared, rather than start one cold.
CLEAR_WAIT_S = 2.0
#: How often idle CLIs are checked against `warm_idle_s`.
REAP_EVERY_S = 1.0
STOP_TIMEOUT_S = 2.0


def warm_eligible(req: RunRequest, settings: Settings, tools: ToolRegistry) -> str | None:
    """Why the run of `req` must start a CLI of its own and not reuse one (None: it may run warm)."""
    spec = req.spec
    if settings.warm_budget <= 0:
        return "warm CLIs are off"
    if req.resume is not None or req.fork or req.resume_at is not None or spec.resume is not None:
        return "resumes a session"
    if spec.conversation:
        return "a conversation turn"
    if req.approvals is not None:
        return "its tool uses may wait for approval (the CLI's callback is the job's own)"
    policy = settings.policy
    if runs_under_own_uid(spec, policy) and (
        not sandboxed(spec, policy) or policy.isolated_tools(allowed_builtin_tools(spec, policy))
    ):
        # A run uid only for reading tools in a sandbox (a root worker) may be held by a warm CLI for its life.
        return "runs under a uid of its own (shell, file tools)"
    if any(name in FLEET_TOOLS and tools.get(name) is None for name in spec.mcp_tools):
        return "fleet tools are bound to the job"
    if req.account.config_dir is not None:
        return "an interactive login's config dir"
    if req.traceparent is not None and tracing.cli_traced():
        return "traced (the CLI takes its spans' parent from TRACEPARENT when it starts: docs/tracing.md)"
    run_root = settings.run_root or Path(tempfile.gettempdir())
    if FILE_TOOLS.intersection(allowed_builtin_tools(spec, policy)) and policy.path_allowed(str(run_root)):
        return "its file tools could reach the CLIs' config dirs (the run root is under a workspace root)"
    return None


def _canon(value: Any) -> Any:
    """A JSON-able form of an option's value that is equal for equal options (never an object's address)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _canon(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_canon(v) for v in value]
        return sorted(items, key=json.dumps) if isinstance(value, set | frozenset) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canon(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(value):
        return f"callable:{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__name__)}"
    return f"object:{type(value).__module__}.{type(value).__qualname__}:{id(value)}"


def fingerprint(options: ClaudeAgentOptions, account: AccountConfig) -> str:
    """The key of a CLI started with `options` on `account`: two runs share a CLI only when every option is equal.

    `options` must have been built with the same placeholders for the per-CLI values (run id, stand-in, config
    dir) by every caller; the MCP servers count by their names and tools (their instances are per run), the session
    store by its identity."""
    parts: dict[str, Any] = {"account": [account.name, account.kind, account.base_url, account.token_env_var]}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.name == "mcp_servers" and isinstance(value, dict):
            value = {name: {k: v for k, v in dict(cfg).items() if k != "instance"} for name, cfg in value.items()}
        parts[f.name] = _canon(value)
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _forget_session(run_dir: Path, session_id: str) -> None:
    for path in (run_dir / "config" / "projects").glob(f"*/{session_id}.jsonl"):
        path.unlink(missing_ok=True)


def new_cli_id() -> str:
    """A warm CLI's own id: its run id (CLAUDEQ_RUN_ID, what its processes are swept by) for its whole life."""
    return f"warm.{uuid.uuid4().hex[:16]}"


@dataclass
class WarmCli:
    """One CLI started for warm reuse, and what it needs for its whole life."""

    key: str
    account: str
    cli_id: str  # its run id
    client: ClaudeSDKClient
    run_dir: Path
    grant: RunGrant | None
    stderr: deque[str]
    jobs: int = 0  # jobs it ran (started)
    pid: int | None = None  # the process the worker started (in a sandbox: its bwrap)
    sandbox_cli: Path | None = None  # the CLI's program, when it runs in a sandbox of its own
    identity: RunIdentity | None = None  # the run uid it holds for its life (a root worker's sandboxed CLI)
    session_id: str | None = None  # the session of its last job
    idle_since: float = field(default_factory=time.monotonic)
    connected: bool = False


@dataclass
class _Clearing:
    cli: WarmCli
    done: asyncio.Event = field(default_factory=asyncio.Event)


class WarmPool:
    """The idle CLIs of one worker process (engine loop only)."""

    def __init__(self, settings: Settings, passthrough: Callable[[], PassThrough | None]) -> None:
        self.settings = settings
        self._passthrough = passthrough
        self._idle: list[WarmCli] = []  # oldest idle first
        self._clearing: list[_Clearing] = []
        self.busy = 0  # runs in flight in this process (any CLI: warm, cold)
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False
        self._background: set[asyncio.Task[None]] = set()
        #: Counters for tests and benchmarks: CLIs reused, started for warm use, stopped (and why).
        self.reused = 0
        self.started = 0
        self.stopped: dict[str, int] = {}

    @property
    def budget(self) -> int:
        """Idle CLIs kept at most."""
        return self.settings.warm_budget

    @property
    def enabled(self) -> bool:
        """Whether warm CLIs are on."""
        return self.budget > 0 and not self._closed

    @property
    def idle(self) -> int:
        """CLIs idle now (cleared, waiting for a job)."""
        return len(self._idle)

    def idle_ids(self) -> list[str]:
        """Run ids of the idle CLIs (tests)."""
        return [cli.cli_id for cli in self._idle]

    # ---- taking and giving back --------------------------------------------------------------------------------

    async def take(self, key: str) -> WarmCli | None:
        """An idle CLI started with exactly `key`'s options (the most recently used), or None: start one cold."""
        deadline = time.monotonic() + CLEAR_WAIT_S
        while True:
            await self._expire()
            for cli in reversed(self._idle):
                if cli.key != key:
                    continue
                self._idle.remove(cli)
                if self._usable(cli):
                    self.reused += 1
                    return cli
                self._spawn(self.stop(cli, "unusable"))
            pending = [c for c in self._clearing if c.cli.key == key]
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                return None
            # One of ours is being cleared (~0.1 s): wait for it rather than pay a cold start.
            waits = [asyncio.ensure_future(c.done.wait()) for c in pending]
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def _usable(self, cli: WarmCli) -> bool:
        if cli.pid is None or not procs.alive(cli.pid):
            return False
        if cli.jobs >= self.settings.warm_max_jobs:
            return False
        if cli.grant is not None:
            passthrough = self._passthrough()
            if passthrough is None or not passthrough.valid(cli.grant) or cli.grant.idle_requests:
                return False
        return True

    def give_back(self, cli: WarmCli) -> None:
        """A job ended normally on `cli`: clear it in the background; it goes idle once verified clean."""
        if self._closed or cli.jobs >= self.settings.warm_max_jobs:
            self._spawn(self.stop(cli, "max_jobs" if not self._closed else "closing"))
            return
        clearing = _Clearing(cli)
        self._clearing.append(clearing)
        self._spawn(self._clear_then_park(clearing))

    async def _clear_then_park(self, clearing: _Clearing) -> None:
        cli = clearing.cli
        try:
            problem = await self._clear(cli)
        except Exception as exc:  # anything unexpected: the CLI is not reused
            problem = f"{type(exc).__name__}: {exc}"
        finally:
            self._clearing.remove(clearing)
        if problem is None and self._closed:
            problem = "closing"
        if problem is not None:
            log.info("warm CLI %s not reused: %s", cli.cli_id, problem)
            clearing.done.set()
            await self.stop(cli, "unclean" if problem != "closing" else "closing")
            return
        passthrough = self._passthrough()
        if cli.grant is not None and passthrough is not None:
            passthrough.park(cli.grant)
        cli.idle_since = time.monotonic()
        self._idle.append(cli)
        clearing.done.set()
        while len(self._idle) > self.budget:
            await self.stop(self._idle.pop(0), "budget")
        self._ensure_reaper()

    async def _clear(self, cli: WarmCli) -> str | None:
        """Send `/clear` and check that the CLI is clean; the problem found, or None when it is.

        Clean: the conversation was reset (a new session, different from the last job's), the reset result reports
        zero cost and usage (the running totals the next job's result reports start at zero: its own figures), no
        process of the CLI is left besides itself (no tool command), and nothing called the API while idle."""
        reset = False
        new_session: str | None = None
        result: ResultMessage | None = None
        async with asyncio.timeout(CLEAR_TIMEOUT_S):
            await cli.client.query("/clear")
            async for message in cli.client.receive_response():
                if isinstance(message, ConversationResetMessage):
                    reset = True
                elif isinstance(message, SystemMessage) and message.subtype == "init":
                    new_session = str(message.data.get("session_id") or "") or None
                elif isinstance(message, ResultMessage):
                    result = message
        if not reset or result is None:
            return "the conversation was not reset"
        if result.is_error:
            return f"/clear ended in error ({result.subtype})"
        if new_session is None or new_session == cli.session_id:
            return "no new session after /clear"
        if (result.total_cost_usd or 0) != 0 or result.model_usage:
            return "the running totals were not reset"
        left = await asyncio.to_thread(procs.run_pids, cli.cli_id)
        if cli.pid is None or cli.pid not in left:
            return "the CLI is gone"
        strays = (
            [p for p in left if p != cli.pid]
            if cli.sandbox_cli is None
            else await asyncio.to_thread(procs.sandbox_strays, left, cli.pid, cli.sandbox_cli)
        )
        if strays:
            return f"processes of the CLI besides itself (and its sandbox): {strays}"
        if cli.grant is not None and cli.grant.idle_requests:
            return "it called the API while idle"
        if cli.session_id is not None:
            # The transcript is in Redis (mirrored at the result); the CLI's own copy goes, so its config dir keeps
            # no earlier job's conversation.
            await asyncio.to_thread(_forget_session, cli.run_dir, cli.session_id)
        return None

    # ---- room and expiry ---------------------------------------------------------------------------------------

    async def make_room(self) -> None:
        """A CLI is about to start: stop idle ones (least recently used first) while the process would hold more
        CLIs than max(concurrency, budget). Call with the new run already counted in `busy`."""
        cap = max(self.settings.concurrency, self.budget)
        while self._idle and self.busy + len(self._idle) + len(self._clearing) > cap:
            await self.stop(self._idle.pop(0), "room")

    async def _expire(self) -> None:
        now = time.monotonic()
        expired = [c for c in self._idle if now - c.idle_since >= self.settings.warm_idle_s]
        for cli in expired:
            if self._closed or cli not in self._idle:
                return  # close() stops what is left
            self._idle.remove(cli)
            # A background task of its own: close() waits for it, and cancelling the reaper (at close) cannot
            # cut the stop short between killing the CLI and revoking its stand-in.
            stopping: asyncio.Task[None] = asyncio.ensure_future(self.stop(cli, "idle"))
            self._background.add(stopping)
            stopping.add_done_callback(self._background.discard)
            await asyncio.shield(stopping)

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    async def _reap(self) -> None:
        while self._idle and not self._closed:
            await asyncio.sleep(min(REAP_EVERY_S, self.settings.warm_idle_s / 2))
            await self._expire()

    # ---- stopping ----------------------------------------------------------------------------------------------

    async def stop(self, cli: WarmCli, why: str) -> None:
        """Stop a CLI that is not running a job: SIGKILL its processes, disconnect, revoke its stand-in, remove its
        run directory."""
        self.stopped[why] = self.stopped.get(why, 0) + 1
        await asyncio.to_thread(procs.kill_and_wait, procs.run_pids(cli.cli_id), STOP_TIMEOUT_S)
        disconnect = asyncio.ensure_future(cli.client.disconnect())
        done, _ = await asyncio.wait({disconnect}, timeout=STOP_TIMEOUT_S)
        if disconnect in done and not disconnect.cancelled() and disconnect.exception() is not None:
            log.debug("disconnect of warm CLI %s raised", cli.cli_id, exc_info=disconnect.exception())
        passthrough = self._passthrough()
        if cli.grant is not None and passthrough is not None:
            passthrough.close_run(cli.grant)
        await asyncio.to_thread(shutil.rmtree, cli.run_dir, True)
        if cli.identity is not None:
            await asyncio.to_thread(cli.identity.release)  # kills what is left under its uid, frees the uid

    async def close(self) -> None:
        """Stop every idle CLI and take no more (worker shutdown)."""
        self._closed = True
        if self._background:  # clears under way (they stop their CLI once they see the pool closed) and stops
            await asyncio.wait(set(self._background), timeout=CLEAR_TIMEOUT_S + STOP_TIMEOUT_S * 2)
        while self._idle:
            await self.stop(self._idle.pop(), "closing")
        if self._reaper is not None:
            self._reaper.cancel()

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
