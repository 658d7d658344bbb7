"""Run one attempt of a job through the SDK: `Runner.run(req, emit, cancel) -> RunOutcome`.

Uses `ClaudeSDKClient` (not `query()`, which raises on error results and cannot be interrupted cleanly). Stopping a
run (watchdog, cancel, an exception, or cancellation of `run()` itself) is interrupt, then disconnect (≈0.5 s;
disconnect alone takes 5 s), then SIGKILL for anything left: `run()` never returns with its CLI alive. The timings
are in docs/cli-behaviour.md#stalls-and-stopping-a-run.

Runs must be started from the engine's one long-lived event-loop thread: the CLI is spawned through a wrapper that
sets the parent-death signal, which the kernel ties to the thread that forked it
(docs/cli-behaviour.md#process-control-and-liveness).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ProcessError

from claudeq import tracing
from claudeq.artifacts import OUTPUTS_VAR
from claudeq.errors import ConfigError
from claudeq.events import RunStarted, Stopped
from claudeq.models import Event, JobSpec
from claudeq.permissions import allowed_builtin_tools, check_spec

from ...config.account_pool import AccountConfig
from ...config.settings import Settings
from ..passthrough.server import PassThrough, RunGrant
from ..redaction import redact, remember_settings_secrets
from . import procs
from .cli_env import Credential, RunTags, build_env, exporter_env, sealed
from .launcher import (
    RunIdentity,
    acquire_identity,
    can_switch_uid,
    closed_to_others,
    exposed_secret_files,
    locate_cli,
    python_for_wrapper,
    take_back,
    wrapper_path,
)
from .options import CliLaunch, PromptFiles, SessionStart, base_prompt, build_options
from .outcome import EventSink, RunOutcome, RunRequest, StopReason
from .outputs import OUTPUTS_DIR, read_outputs
from .parse import MessageParser
from .relay import HostProxy, Relay, collector_address, through_loopback
from .sandbox import ARGS_VAR as SANDBOX_ARGS_VAR
from .sandbox import FORWARD_VAR, Forward, SandboxView, sandboxed
from .sandbox import problem as sandbox_problem
from .tools import ToolRegistry
from .warm import WarmCli, WarmPool, fingerprint, new_cli_id, warm_eligible
from .watchdog import Timeouts, Watchdog
from .workdirs import runs_under_own_uid

log = logging.getLogger(__name__)

INTERRUPT_TIMEOUT_S = 1.0  # interrupt answers in ~15 ms when the CLI is healthy
RESULT_GRACE_S = 0.3  # after interrupt, the CLI reports the cut-off turn (with its usage) almost at once
DISCONNECT_TIMEOUT_S = 2.0  # after interrupt disconnect takes ~0.5 s; past this, SIGKILL
REAP_TIMEOUT_S = 2.0
STDERR_TAIL_LINES = 40
STDERR_TAIL_CHARS = 4000
#: The run directory a warm CLI's key is computed with (each CLI has its own; the key must not differ by it).
WARM_RUN_DIR = "/claudeq-warm-run-dir"


#: errno values with which starting the CLI fails for good: retrying the same command cannot help.
PERMANENT_START_ERRNOS: frozenset[int] = frozenset({errno.E2BIG, errno.ENOENT, errno.EACCES, errno.ENOEXEC})
#: Exit codes of the wrapper's `exec` (setpriv, sh) when the CLI itself cannot be executed: not found, not executable.
_EXEC_EXIT_CODES: dict[int, int] = {127: errno.ENOENT, 126: errno.EACCES}


def start_errno(exc: BaseException, outcome: RunOutcome) -> int | None:
    """The errno for which the CLI could not start at all, when it is a permanent one; else None.

    Either spawning the wrapper failed in this process (the SDK wraps the OSError: E2BIG for an argument over
    MAX_ARG_STRLEN, ENOENT, EACCES), or the wrapper's exec of the CLI failed (exit 127 / 126 before any output)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in PERMANENT_START_ERRNOS:
            return cause.errno
        cause = cause.__cause__ or cause.__context__
    if outcome.first_byte_at is None and not outcome.got_result and outcome.exit_code in _EXEC_EXIT_CODES:
        return _EXEC_EXIT_CODES[outcome.exit_code]
    return None


def exec_errno(stderr_lines: Iterable[str], outcome: RunOutcome) -> int | None:
    """The errno of the wrapper's failed exec of the CLI, from its `failed to execute <path>: <strerror>` line
    (setpriv's wording, which the wrapper's fallback repeats). The SDK reports that early exit in several ways
    (a failed stdin write, a terminated process, a ProcessError), not all with the exit code; the line is there."""
    if outcome.first_byte_at is not None or outcome.got_result:
        return None
    for line in stderr_lines:
        # setpriv's wording, or env's (`env: '<path>': <strerror>`: the wrapper starts the CLI through `env -i`).
        if "failed to execute " not in line and not line.startswith("env: "):
            continue
        for code in PERMANENT_START_ERRNOS:
            if line.rstrip().endswith(os.strerror(code)):
                return code
    return None


class Runner:
    """Drives SDK runs; one instance serves all runs of a worker process (it keeps no per-run state)."""

    def __init__(
        self, settings: Settings, tools: ToolRegistry | None = None, passthrough: PassThrough | None = None
    ) -> None:
        self.settings = settings
        self.tools = tools if tools is not None else ToolRegistry.from_settings(settings)
        #: The worker's pass-through: runs get a stand-in credential and their responses' rate-limit headers are
        #: read (None: the CLI gets the real token and talks to the model service directly).
        self.passthrough = passthrough
        #: Idle CLIs kept for later jobs with the same options (docs/architecture.md#warm-clis).
        self.pool = WarmPool(settings, lambda: self.passthrough)
        #: Relays to the trace collector for sandboxed runs, by address (docs/architecture.md#the-run-sandbox).
        self._relays: dict[tuple[str, int], Relay] = {}
        self._relays_lock = threading.Lock()
        self._proxy: HostProxy | None = None
        remember_settings_secrets(settings)

    def check(self, spec: JobSpec) -> None:
        """Raise PolicyViolation if this worker's policy forbids the spec (cheap; call before leasing a slot)."""
        check_spec(spec, self.settings.policy, self.tools)

    async def run(self, req: RunRequest, emit: EventSink, cancel: asyncio.Event) -> RunOutcome:
        """Run one attempt; run failures go into the outcome, only ConfigError/PolicyViolation are raised."""
        self.check(req.spec)
        self.pool.busy += 1
        try:
            if self.warm_refusal(req) is None:
                return await self._run_warm(req, emit, cancel)
            return await self._run_cold(req, emit, cancel)
        finally:
            self.pool.busy -= 1

    def warm_refusal(self, req: RunRequest) -> str | None:
        """Why the run of `req` starts a CLI of its own rather than reuse a warm one (None: it may reuse one)."""
        if self.passthrough is None:
            return "no pass-through (a warm CLI's credential must be a stand-in the worker can revoke)"
        return warm_eligible(req, self.settings, self.tools)

    async def _run_cold(self, req: RunRequest, emit: EventSink, cancel: asyncio.Event) -> RunOutcome:
        # A run that may execute commands or write files gets a uid of its own (None: the worker's uid).
        if not runs_under_own_uid(req.spec, self.settings.policy):
            if sandboxed(req.spec, self.settings.policy):
                await asyncio.to_thread(self._check_sandbox)  # tried until it works once in this process
            return await self._run(req, emit, cancel, None)
        acquiring = asyncio.ensure_future(asyncio.to_thread(self._identity_for, req))
        try:
            identity = await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            acquiring.add_done_callback(lambda done: self._release_late(done, req.account))
            raise
        try:
            return await self._run(req, emit, cancel, identity)
        finally:
            if identity is not None:
                await asyncio.shield(asyncio.to_thread(self._release, identity, req.account))

    def _identity_for(self, req: RunRequest) -> RunIdentity | None:
        """The uid the run's CLI runs under, or None for the worker's own; ConfigError when it needs one and the
        worker cannot give it (blocking: scans /proc, chowns)."""
        policy = self.settings.policy
        if not runs_under_own_uid(req.spec, policy):
            return None
        wanted = policy.isolated_tools(allowed_builtin_tools(req.spec, policy))
        sandbox = sandboxed(req.spec, policy)
        if sandbox:
            self._check_sandbox()
        if not can_switch_uid():
            if policy.shared_uid_ok or sandbox:
                return None  # in a sandbox, the worker's uid sees nothing of the worker (its own PID namespace)
            raise ConfigError(
                "CLAUDEQ_POLICY__SHARED_UID_OK",
                f"the job's tools ({', '.join(wanted)}) run only under a uid of their own, and this worker runs as "
                f"uid {os.geteuid()}, which cannot switch: run the worker as root (with setpriv), or set "
                "CLAUDEQ_POLICY__SHARED_UID_OK=true to accept that such a job can read the worker's environment "
                "(account tokens, the Redis password) and other runs'",
            )
        exposed = exposed_secret_files(self.settings, policy.run_groups)
        if exposed:
            raise ConfigError(
                "accounts.token_file",
                f"{', '.join(str(p) for p in exposed)} can be read by other users, so by a run's own uid: "
                "chmod o-r (and keep it out of CLAUDEQ_POLICY__RUN_GROUPS) before running shell or file-writing jobs",
            )
        root = self.settings.run_root or Path(tempfile.gettempdir())
        for setting, path, execute in (
            ("CLAUDEQ_RUN_ROOT", root, False),
            ("TMPDIR", Path(tempfile.gettempdir()), False),  # where the SDK materializes a resumed session
            ("CLAUDEQ_CLI_PATH", locate_cli(self.settings), True),
        ):
            closed = closed_to_others(path, policy.run_groups, execute=execute)
            if closed is not None:
                raise ConfigError(
                    setting,
                    f"{closed} (mode {closed.stat().st_mode & 0o7777:o}) keeps the runs' own uids from reaching "
                    f"{path}: make it enterable by others (chmod o+x), or choose another path",
                )
        for field, where in [("cwd", req.spec.cwd), *(("add_dirs", d) for d in req.spec.add_dirs)]:
            shut = closed_to_others(Path(where), policy.run_groups) if where else None
            if shut is not None:
                raise ConfigError(
                    "CLAUDEQ_POLICY__RUN_GROUPS",
                    f"{shut} (mode {shut.stat().st_mode & 0o7777:o}) keeps the run's own uid from the job's "
                    f"{field} {where}: give the workspace roots to a group in CLAUDEQ_POLICY__RUN_GROUPS "
                    "(chgrp, chmod g+rwX, setgid on directories) and make the way to them enterable (o+x)",
                )
        identity = acquire_identity(policy)
        try:
            if req.account.config_dir is not None:
                identity.give(req.account.config_dir)  # an interactive login: one run at a time uses it
            if req.spec.workspace is not None and req.spec.cwd:
                identity.give(Path(req.spec.cwd))  # a coding job's worktree is its run's own (docs/jobs.md#coding-jobs)
        except BaseException:
            identity.release()
            raise
        return identity

    def _check_sandbox(self) -> None:
        """ConfigError when a run with tools cannot get its sandbox here (blocking: tried until it works once)."""
        policy = self.settings.policy
        why = sandbox_problem(policy.run_uids[0] if can_switch_uid() else None)
        if why is not None:
            raise ConfigError(
                "CLAUDEQ_POLICY__SANDBOX",
                f"a run with tools runs in a sandbox of its own, which cannot start on this host: {why}. Install "
                "bubblewrap and socat and allow unprivileged user namespaces, or set CLAUDEQ_POLICY__SANDBOX=off to "
                "accept runs held by the workspace hook and the run uid alone",
            )

    def _sandbox_view(
        self, req: RunRequest, run_dir: Path, cwd: Path, stand_in: bool, env: dict[str, str]
    ) -> tuple[SandboxView, dict[str, str]]:
        """What the run's sandbox shows — its workspace (writable when its tools write), its run directory, the CLI,
        its pass-through (`stand_in`: the CLI has a stand-in credential for it) and (traced) the trace collector
        through forwarders — and the variables that change for it (blocking: may start the relay to the collector)."""
        policy = self.settings.policy
        tools = allowed_builtin_tools(req.spec, policy)
        forwards: list[Forward] = []
        changed: dict[str, str] = {}
        if stand_in and self.passthrough is not None and self.passthrough.unix_path is not None:
            forwards.append(Forward(port=self.passthrough.port, socket=self.passthrough.unix_path))
        if "Bash" in tools and policy.network_hosts:
            # The operator's hole: the named hosts, through the worker's proxy (docs/workers.md#security-defaults).
            port = next(p for p in range(3128, 3200) if all(f.port != p for f in forwards))
            forwards.append(Forward(port=port, socket=self._hosts_proxy().path))
            proxy = f"http://127.0.0.1:{port}"
            changed.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, http_proxy=proxy, https_proxy=proxy)
        collector = collector_address(env) if env.get("TRACEPARENT") else None
        if collector is not None:
            port = collector[1] if all(f.port != collector[1] for f in forwards) else collector[1] + 1
            forwards.append(Forward(port=port, socket=self._relay_to(collector).path))
            changed.update(through_loopback(env, port))
        return SandboxView(
            cli=locate_cli(self.settings),
            run_dir=run_dir,
            cwd=cwd,
            add_dirs=[Path(d) for d in req.spec.add_dirs],
            writable=bool(policy.isolated_tools(tools)),
            config_dir=req.account.config_dir,
            forwards=forwards,
            # Without the pass-through the CLI talks to the model service itself; WebFetch fetches pages itself.
            share_net=not stand_in or "WebFetch" in tools,
        ), changed

    def _write_sandbox(
        self, req: RunRequest, run_dir: Path, cwd: Path, grant: RunGrant | None, env: dict[str, str]
    ) -> dict[str, str]:
        """Write the run's sandbox arguments into its run directory; the variables that change for it (blocking)."""
        view, changed = self._sandbox_view(req, run_dir, cwd, grant is not None, env)
        return {**changed, SANDBOX_ARGS_VAR: str(view.write()), FORWARD_VAR: view.forward_spec()}

    def _hosts_proxy(self) -> HostProxy:
        """The proxy to the policy's network hosts, started on first use; one per worker process."""
        with self._relays_lock:
            if self._proxy is None:
                self._proxy = HostProxy(list(self.settings.policy.network_hosts)).start()
            return self._proxy

    def _relay_to(self, address: tuple[str, int]) -> Relay:
        """The relay to `address` (the trace collector), started on first use; one per worker process."""
        with self._relays_lock:
            relay = self._relays.get(address)
            if relay is None:
                relay = self._relays[address] = Relay(*address, name="collector").start()
            return relay

    def _release_late(self, acquired: asyncio.Future[RunIdentity | None], account: AccountConfig) -> None:
        """Free an identity whose run was cancelled while it was being acquired (never leak its uid)."""
        if acquired.cancelled() or acquired.exception() is not None:
            return
        identity = acquired.result()
        if identity is not None:
            asyncio.get_running_loop().run_in_executor(None, self._release, identity, account)

    @staticmethod
    def _release(identity: RunIdentity, account: AccountConfig) -> None:
        identity.release()
        if account.config_dir is not None:
            take_back(account.config_dir)

    async def _run(
        self, req: RunRequest, emit: EventSink, cancel: asyncio.Event, identity: RunIdentity | None
    ) -> RunOutcome:
        # File system work happens off the engine loop: every run's heartbeat and watchdog share that loop.
        started = time.monotonic()
        parser = MessageParser(attempt=req.attempt, tool_result_limit=self.settings.event_tool_result_chars)
        watchdog = Watchdog(Timeouts.for_job(req.spec, self.settings))
        stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        run_id = f"{req.job_id}.{req.attempt}.{uuid.uuid4().hex[:8]}"
        wrapper = wrapper_path()
        # One trip to a thread for all of it (each trip waits for a thread, which a loaded machine makes slow).
        cli, token, run_dir, prompt_files, grant, failure = await asyncio.to_thread(
            self._prepare_cold, req, identity, run_id
        )
        if failure is not None:
            failed = RunOutcome(exception=failure)
            failed.passthrough_failed = failure
            return failed
        try:
            prepared = (cli, token, run_dir, prompt_files, grant)
            options = await self._cold_options(req, identity, run_id, prepared, wrapper, stderr_tail.append)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            if grant is not None and self.passthrough is not None:
                self.passthrough.close_run(grant)
            raise
        outcome = parser.outcome
        await self.pool.make_room()
        client = ClaudeSDKClient(options)
        connected = asyncio.Event()  # connect() returned: the CLI answers control requests (interrupt)
        pump: asyncio.Task[None] | None = None
        stopped: StopReason | None = None
        killer = asyncio.create_task(self._kill_when(req.urgent, run_id)) if req.urgent is not None else None
        try:
            await self._emit(
                emit,
                RunStarted(
                    account=req.account.name, model=req.spec.model, attempt=req.attempt, reason=req.account_reason
                ).event(req.attempt),
            )
            wake = asyncio.Event()
            prompt = req.spec.prompt
            pump = asyncio.create_task(
                self._pump(lambda: client.connect(prompt), client, parser, watchdog, emit, wake, connected)
            )
            stopped = await self._supervise(pump, watchdog, cancel, wake)
            if stopped is None:
                pump.result()  # re-raise what ended the stream abnormally
        except asyncio.CancelledError:
            stopped = stopped or "cancel"
            raise
        except Exception as exc:
            _record_failure(outcome, exc)
        finally:
            if killer is not None and not killer.done():
                killer.cancel()
            cleanup = asyncio.ensure_future(self._shutdown(client, pump, connected.is_set(), req.job_id, run_id))
            try:
                await asyncio.shield(cleanup)
            except asyncio.CancelledError:
                # Cancelled again while cleaning up: never leave the CLI (or what it started) behind.
                procs.kill_and_wait(procs.run_pids(run_id), timeout_s=0)
                raise
            finally:
                if grant is not None:
                    await self._close_grant(grant, outcome)
                outcome.outputs, outcome.outputs_dropped = await asyncio.to_thread(
                    read_outputs, run_dir / OUTPUTS_DIR, self.settings.artifact_max_bytes
                )
                await asyncio.to_thread(shutil.rmtree, run_dir, True)
                outcome.stopped_by = stopped
                outcome.duration_s = time.monotonic() - started
                _record_stderr(outcome, stderr_tail)
        if stopped is not None:
            await self._emit(emit, Stopped(reason=stopped).event(req.attempt))
        return parser.finish()

    async def _cold_options(
        self,
        req: RunRequest,
        identity: RunIdentity | None,
        run_id: str,
        prepared: tuple[Path, str, Path, PromptFiles, RunGrant | None],
        wrapper: Path,
        stderr: Callable[[str], None],
    ) -> ClaudeAgentOptions:
        """The options a cold run's CLI (started through `wrapper`) starts with: its environment (token or
        stand-in, identity, home, tracing), the job's options, and in a sandbox the view's variables."""
        cli, token, run_dir, prompt_files, grant = prepared
        # With the pass-through the run's CLI gets a stand-in; the pass-through reads the real token per request.
        credential = Credential(token) if grant is None else Credential(grant.token, grant.base_url)
        env = build_env(
            req.account,
            self.settings,
            credential=credential,
            tags=RunTags(req.job_id, run_id, str(cli)),
            config_dir=run_dir / "config",  # unless the account has its own (an interactive login)
        )
        env["CLAUDEQ_PYTHON"] = python_for_wrapper()
        env[OUTPUTS_VAR] = str(run_dir / OUTPUTS_DIR)
        traced = tracing.cli_env(req.traceparent)  # nothing unless the job is traced (docs/tracing.md)
        if traced:
            env.update(exporter_env(), **traced)  # where the CLI sends its spans: the worker's collector
        sandbox = sandboxed(req.spec, self.settings.policy)
        if identity is not None:
            env.update(identity.env())
        if identity is not None or sandbox:
            # Its own home and temp dir: the worker's are not the run's to write in (nor to see, in a sandbox).
            env.update(HOME=str(run_dir), TMPDIR=str(run_dir / "tmp"))
        options = build_options(
            req.spec,
            self.settings,
            launch=CliLaunch(env, wrapper, stderr),
            tools=self.tools,
            session=SessionStart(req.resume, req.fork, req.resume_at, req.session_store),
            prompt_files=prompt_files,
            approvals=req.approvals,
        )
        if sandbox:
            # One trip to a thread: the view (may start a relay) and its arguments file.
            changed = await asyncio.to_thread(
                self._write_sandbox, req, run_dir, Path(str(options.cwd)), grant, options.env
            )
            options.env = sealed({**options.env, **changed})
        return options

    def _prepare_cold(
        self, req: RunRequest, identity: RunIdentity | None, run_id: str
    ) -> tuple[Path, str, Path, PromptFiles, RunGrant | None, str | None]:
        """Blocking set-up of a cold run: (CLI, token, run dir, prompt files, stand-in grant, why the pass-through
        could not give one). ConfigError when the CLI or the token is missing."""
        cli = locate_cli(self.settings)
        token = req.account.read_token()  # ConfigError now when the token is missing
        run_dir, prompt_files = self._make_run_dir(req, identity)
        if self.passthrough is None:
            return cli, token, run_dir, prompt_files, None, None
        try:
            grant = self.passthrough.open_run(run_id, req.account)
            grant.prefix_key = req.prefix_key
        except Exception as exc:
            shutil.rmtree(run_dir, ignore_errors=True)
            return (
                cli,
                "",
                run_dir,
                prompt_files,
                None,
                redact(f"pass-through unavailable: {type(exc).__name__}: {exc}"),
            )
        return cli, "", run_dir, prompt_files, grant, None

    # ---- warm CLIs (docs/architecture.md#warm-clis) ----------------------------------------------------------------

    def _warm_key(self, req: RunRequest) -> str:
        """The fingerprint of every option a CLI for `req` starts with (per-CLI values replaced by placeholders)."""
        env = build_env(
            req.account,
            self.settings,
            credential=Credential("-", "http://passthrough"),
            tags=RunTags("-", "-", str(locate_cli(self.settings))),
            config_dir=Path("/config"),
        )
        env["CLAUDEQ_PYTHON"] = python_for_wrapper()
        sandbox = sandboxed(req.spec, self.settings.policy)
        if sandbox:
            env.update(HOME=WARM_RUN_DIR, TMPDIR=f"{WARM_RUN_DIR}/tmp")
        options = build_options(
            req.spec,
            self.settings,
            launch=CliLaunch(env, wrapper_path()),
            tools=self.tools,
            session=SessionStart(store=req.session_store),  # a warm CLI starts a new session
        )
        # A warm CLI serves one tenant: its config dir keeps its earlier jobs' transcripts, never another team's.
        key = f"{req.spec.tenant}|{fingerprint(options, req.account)}"
        if not sandbox:
            return key
        # And a sandboxed one serves only jobs whose sandbox would show exactly what its own shows.
        view, changed = self._sandbox_view(req, Path(WARM_RUN_DIR), Path(str(options.cwd)), True, options.env)
        return f"{key}|{view.fingerprint()}|{json.dumps(changed, sort_keys=True)}"

    async def _start_warm(self, req: RunRequest, key: str) -> WarmCli | RunOutcome:
        """A new CLI for warm use (not started yet: the job's prompt connects it), or the outcome of a run that
        could not get a stand-in. On a root worker a sandboxed CLI holds a run uid of its own for its whole life."""
        identity: RunIdentity | None = None
        if runs_under_own_uid(req.spec, self.settings.policy):
            acquiring = asyncio.ensure_future(asyncio.to_thread(self._identity_for, req))
            try:
                identity = await asyncio.shield(acquiring)
            except asyncio.CancelledError:
                acquiring.add_done_callback(lambda done: self._release_late(done, req.account))
                raise
        try:
            made = await self._start_warm_as(req, key, identity)
        except BaseException:
            if identity is not None:
                await asyncio.shield(asyncio.to_thread(identity.release))
            raise
        if isinstance(made, RunOutcome) and identity is not None:
            await asyncio.to_thread(identity.release)
        return made

    async def _start_warm_as(self, req: RunRequest, key: str, identity: RunIdentity | None) -> WarmCli | RunOutcome:
        assert self.passthrough is not None
        cli_path = await asyncio.to_thread(locate_cli, self.settings)
        wrapper = wrapper_path()
        await asyncio.to_thread(req.account.read_token)  # ConfigError now when the token is missing
        sandbox = sandboxed(req.spec, self.settings.policy)
        if sandbox:
            await asyncio.to_thread(self._check_sandbox)  # tried until it works once in this process
        cli_id = new_cli_id()
        run_dir, prompt_files = await asyncio.to_thread(self._make_run_dir, req, identity, f"claudeq-{cli_id}-")
        try:
            grant = await asyncio.to_thread(self.passthrough.open_run, cli_id, req.account)
        except Exception as exc:
            await asyncio.to_thread(shutil.rmtree, run_dir, True)
            failed = RunOutcome(exception=redact(f"pass-through unavailable: {type(exc).__name__}: {exc}"))
            failed.passthrough_failed = failed.exception
            return failed
        try:
            env = build_env(
                req.account,
                self.settings,
                credential=Credential(grant.token, grant.base_url),
                # The CLI outlives the job: its processes carry its own id, not a job's.
                tags=RunTags(cli_id, cli_id, str(cli_path)),
                config_dir=run_dir / "config",
            )
            env["CLAUDEQ_PYTHON"] = python_for_wrapper()
            if identity is not None:
                env.update(identity.env())
            if sandbox:
                env.update(HOME=str(run_dir), TMPDIR=str(run_dir / "tmp"))
            stderr: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
            options = build_options(
                req.spec,
                self.settings,
                launch=CliLaunch(env, wrapper, stderr.append),
                tools=self.tools,
                session=SessionStart(store=req.session_store),
                prompt_files=prompt_files,
            )
            if sandbox:
                # Kept with the CLI for its whole life: the key holds what it shows (`_warm_key`).
                changed = await asyncio.to_thread(
                    self._write_sandbox, req, run_dir, Path(str(options.cwd)), grant, options.env
                )
                options.env = sealed({**options.env, **changed})
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            self.passthrough.close_run(grant)
            raise
        self.pool.started += 1
        return WarmCli(
            key=key,
            account=req.account.name,
            cli_id=cli_id,
            client=ClaudeSDKClient(options),
            run_dir=run_dir,
            grant=grant,
            stderr=stderr,
            sandbox_cli=cli_path if sandbox else None,
            identity=identity,
        )

    async def _run_warm(self, req: RunRequest, emit: EventSink, cancel: asyncio.Event) -> RunOutcome:
        """Run the attempt on a warm CLI of exactly its options, or on a new one that may be reused afterwards.

        The CLI goes back to the pool (cleared and checked in the background) only when the job ended normally: a
        result without error, nothing stopped it, nothing went wrong in the pass-through. Otherwise it is stopped
        like a cold run's CLI (interrupt, disconnect, SIGKILL of all its processes) and its stand-in revoked."""
        assert self.passthrough is not None
        started = time.monotonic()
        taken = await self._take_warm(req)
        if isinstance(taken, RunOutcome):
            return taken
        cli, fresh = taken
        if cli.grant is not None:
            cli.grant.prefix_key = req.prefix_key
        cli.jobs += 1
        cli.stderr.clear()
        parser = MessageParser(attempt=req.attempt, tool_result_limit=self.settings.event_tool_result_chars)
        watchdog = Watchdog(Timeouts.for_job(req.spec, self.settings))
        outcome = parser.outcome
        connected = asyncio.Event()
        pump: asyncio.Task[None] | None = None
        stopped: StopReason | None = None
        clean_end = False
        client = cli.client
        prompt = req.spec.prompt
        start: Callable[[], Awaitable[None]] = (
            (lambda: client.connect(prompt)) if fresh else (lambda: client.query(prompt))
        )
        killer = asyncio.create_task(self._kill_when(req.urgent, cli.cli_id)) if req.urgent is not None else None
        try:
            await self._emit(
                emit,
                RunStarted(
                    account=req.account.name,
                    model=req.spec.model,
                    attempt=req.attempt,
                    warm=not fresh,
                    reason=req.account_reason,
                ).event(req.attempt),
            )
            wake = asyncio.Event()
            pump = asyncio.create_task(self._pump(start, client, parser, watchdog, emit, wake, connected))
            stopped = await self._supervise(pump, watchdog, cancel, wake)
            if stopped is None:
                pump.result()  # re-raise what ended the stream abnormally
                clean_end = True
        except asyncio.CancelledError:
            stopped = stopped or "cancel"
            raise
        except Exception as exc:
            _record_failure(outcome, exc)
        finally:
            if killer is not None and not killer.done():
                killer.cancel()
            if cli.pid is None:
                cli.pid = await asyncio.to_thread(procs.cli_pid, cli.cli_id)
            if cli.grant is not None:
                await self._settle_grant(cli.grant, outcome)
            cli.session_id = outcome.session_id
            if clean_end and _reusable(req, outcome, cancel):
                self.pool.give_back(cli)
            else:
                cleanup = asyncio.ensure_future(self._stop_warm(cli, pump, connected.is_set()))
                try:
                    await asyncio.shield(cleanup)
                except asyncio.CancelledError:
                    procs.kill_and_wait(procs.run_pids(cli.cli_id), timeout_s=0)
                    raise
                finally:
                    outcome.stopped_by = stopped
            outcome.stopped_by = stopped
            outcome.duration_s = time.monotonic() - started
            _record_stderr(outcome, cli.stderr)
        if stopped is not None:
            await self._emit(emit, Stopped(reason=stopped).event(req.attempt))
        return parser.finish()

    async def _take_warm(self, req: RunRequest) -> tuple[WarmCli, bool] | RunOutcome:
        """A warm CLI of exactly `req`'s options from the pool, or a new one (True: fresh); the outcome of a CLI
        that could not start."""
        assert self.passthrough is not None
        key = self._warm_key(req)  # no blocking I/O worth a thread: a few stat calls
        cli = await self.pool.take(key)
        if cli is not None:
            if cli.grant is not None:
                self.passthrough.unpark(cli.grant)
            return cli, False
        await self.pool.make_room()
        made = await self._start_warm(req, key)
        if isinstance(made, RunOutcome):
            return made
        return made, True

    async def _stop_warm(self, cli: WarmCli, pump: asyncio.Task[None] | None, connected: bool) -> None:
        """Stop a CLI whose job did not end normally: never reused."""
        self.pool.stopped["abnormal"] = self.pool.stopped.get("abnormal", 0) + 1
        try:
            await self._shutdown(cli.client, pump, connected, cli.cli_id, cli.cli_id)
        finally:
            if cli.grant is not None and self.passthrough is not None:
                self.passthrough.close_run(cli.grant)
            await asyncio.to_thread(shutil.rmtree, cli.run_dir, True)
            if cli.identity is not None:
                await asyncio.to_thread(cli.identity.release)

    async def _close_grant(self, grant: RunGrant, outcome: RunOutcome) -> None:
        """Revoke the run's stand-in; carry what the pass-through learnt (a 429's cooldown, its own failure)."""
        assert self.passthrough is not None
        self.passthrough.close_run(grant)
        await self._settle_grant(grant, outcome)

    async def _settle_grant(self, grant: RunGrant, outcome: RunOutcome) -> None:
        """Carry what the pass-through learnt in this run into its outcome (the stand-in stays valid)."""
        assert self.passthrough is not None
        await self.passthrough.settle(grant)
        outcome.limit_hint = grant.hint
        failure = self.passthrough.failure_for(grant)
        if failure is not None:
            # Never silent: a run cut off by the pass-through's end fails as transient, saying so.
            outcome.passthrough_failed = redact(failure)
            log.error("run %s: the pass-through it used stopped: %s", grant.run_id, outcome.passthrough_failed)

    def _make_run_dir(
        self, req: RunRequest, identity: RunIdentity | None, prefix: str | None = None
    ) -> tuple[Path, PromptFiles]:
        """The run's own directory (mode 0700; owned by the run's uid when it has one): its CLI config dir, temp
        dir and system prompt files. Removed after the run (a warm CLI's: when the CLI stops)."""
        root = self.settings.run_root or Path(tempfile.gettempdir())
        root.mkdir(mode=0o711, parents=True, exist_ok=True)  # runs may enter it, not list it (when we make it)
        prefix = prefix or f"claudeq-run-{req.job_id[:40]}-{req.attempt}-"
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        try:
            (path / "config").mkdir(mode=0o700)
            (path / "tmp").mkdir(mode=0o700)
            (path / OUTPUTS_DIR).mkdir(mode=0o700)  # $CLAUDEQ_OUTPUTS: kept as artifacts (docs/jobs.md#artifacts)
            files = PromptFiles.write(req.spec, path, base_prompt(req.spec, self.settings))
            if identity is not None:
                identity.give(path)
            return path, files
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise

    @staticmethod
    async def _emit(emit: EventSink, event: Event) -> None:
        # Events are progress reports: losing one (Redis hiccup) must not fail the run.
        try:
            await emit(event)
        except Exception:
            log.warning("could not emit %s event", event.type, exc_info=True)

    async def _pump(
        self,
        start: Callable[[], Awaitable[None]],
        client: ClaudeSDKClient,
        parser: MessageParser,
        watchdog: Watchdog,
        emit: EventSink,
        wake: asyncio.Event,
        connected: asyncio.Event,
    ) -> None:
        await start()  # connect with the prompt (a new CLI), or send the prompt (a warm one)
        connected.set()
        watchdog.prompt_sent()  # the first-byte timer starts: the CLI's own start is not the model's latency
        wake.set()
        async for message in client.receive_response():
            events = parser.feed(message)
            before = (watchdog.first_byte_at is None, watchdog.tool_in_flight)
            now = parser.last_progress
            watchdog.mark(at=now, first_byte=parser.outcome.first_byte_at is not None)
            watchdog.tool_running(parser.tool_in_flight, at=now)
            if (watchdog.first_byte_at is None, watchdog.tool_in_flight) != before:
                wake.set()  # a different timer applies now: the supervisor recomputes its wait
            for event in events:
                await self._emit(emit, event)

    @staticmethod
    async def _kill_when(urgent: asyncio.Event, run_id: str) -> None:
        """SIGKILL every process of the run the moment `urgent` is set (the graceful stop follows, on corpses)."""
        await urgent.wait()
        log.warning("run %s: the job is no longer ours; killing its processes now", run_id)
        # On the loop itself (a /proc scan and a few kill(2)): the thread pool may be full of Redis calls stuck on
        # the very outage that made the job ours no more.
        procs.kill_and_wait(procs.run_pids(run_id), timeout_s=0)

    @staticmethod
    async def _supervise(
        pump: asyncio.Task[None], watchdog: Watchdog, cancel: asyncio.Event, wake: asyncio.Event
    ) -> StopReason | None:
        """Wait for the stream to end, a watchdog to fire or cancel; return why the worker stops it (or None)."""
        cancelled = asyncio.create_task(cancel.wait())
        woken = asyncio.create_task(wake.wait())
        try:
            while True:
                if cancel.is_set():
                    return "cancel"
                reason, wait_s = watchdog.check()
                if reason is not None:
                    return reason
                done, _ = await asyncio.wait(
                    {pump, cancelled, woken}, timeout=wait_s + 0.005, return_when=asyncio.FIRST_COMPLETED
                )
                if pump in done:
                    return None
                if woken in done:
                    wake.clear()
                    woken = asyncio.create_task(wake.wait())
        finally:
            cancelled.cancel()
            woken.cancel()

    async def _shutdown(
        self, client: ClaudeSDKClient, pump: asyncio.Task[None] | None, connected: bool, job_id: str, run_id: str
    ) -> None:
        """Interrupt, let the CLI report, disconnect; SIGKILL whatever is left of this run (tool processes too)."""
        # Found by the run id in its environment (the SDK keeps its process private); None before it started.
        # Looked up only when it is needed (a /proc scan): a run that ended by itself is swept by run id below.
        pid: int | None = None
        if pump is not None and not pump.done():
            pid = await asyncio.to_thread(procs.cli_pid, run_id)
            if connected and pid is not None and procs.alive(pid):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.interrupt(), INTERRUPT_TIMEOUT_S)
                # The interrupted CLI sends a result for the cut-off turn; it carries the turn's usage.
                await asyncio.wait({pump}, timeout=RESULT_GRACE_S)
            else:
                # Still connecting: nothing to save, and a cancelled connect() would wait 5 s on the CLI.
                procs.kill_and_wait([pid] if pid else [], timeout_s=0)
            if not pump.done():
                pump.cancel()
            await asyncio.wait({pump}, timeout=DISCONNECT_TIMEOUT_S)
        if pump is not None and pump.done() and not pump.cancelled():
            pump.exception()  # retrieved so asyncio does not log "exception never retrieved"
        disconnect = asyncio.ensure_future(client.disconnect())
        done, _ = await asyncio.wait({disconnect}, timeout=DISCONNECT_TIMEOUT_S)
        if not done:
            log.warning("CLI of job %s did not stop on disconnect; killing it", job_id)
            pid = pid or await asyncio.to_thread(procs.cli_pid, run_id)
            procs.kill_and_wait([pid] if pid else [], timeout_s=0)
            await asyncio.wait({disconnect}, timeout=DISCONNECT_TIMEOUT_S)
        if disconnect.done() and not disconnect.cancelled() and disconnect.exception() is not None:
            log.debug("disconnect raised", exc_info=disconnect.exception())
        # By run id, not parent: commands a tool started are the CLI's children and outlive it when it is killed.
        swept = await asyncio.to_thread(procs.run_pids, run_id)
        left = [p for p in {pid, *swept} if p is not None and procs.alive(p)]
        if left:
            left = await asyncio.to_thread(procs.kill_and_wait, left, REAP_TIMEOUT_S)
            if left:
                log.error("CLI processes %s of job %s survived SIGKILL", left, job_id)


def _record_failure(outcome: RunOutcome, exc: Exception) -> None:
    """What ended a run abnormally, as the outcome reports it (redacted), with the CLI's exit code and errno."""
    outcome.exception = redact(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, ProcessError):
        outcome.exit_code = exc.exit_code
    outcome.start_errno = start_errno(exc, outcome)


def _record_stderr(outcome: RunOutcome, stderr: Iterable[str]) -> None:
    """The CLI's last stderr lines (redacted) and, for a run that failed without one, the errno they show."""
    lines = list(stderr)
    tail = "\n".join(lines)[-STDERR_TAIL_CHARS:]
    outcome.stderr_tail = redact(tail) if tail else None
    if outcome.exception is not None and outcome.start_errno is None:
        outcome.start_errno = exec_errno(lines, outcome)


def _reusable(req: RunRequest, outcome: RunOutcome, cancel: asyncio.Event) -> bool:
    """Whether a warm CLI whose stream ended cleanly goes back to the pool: a result without error, nothing
    stopped it, nothing went wrong in the pass-through."""
    return (
        outcome.got_result
        and not outcome.is_error
        and outcome.exception is None
        and outcome.passthrough_failed is None
        and outcome.limit_hint is None
        and not cancel.is_set()
        and not (req.urgent is not None and req.urgent.is_set())
    )
