"""Build the SDK's `ClaudeAgentOptions` for one run from the spec, the account and the worker policy (pure).

The permission policy (claudeq.permissions) caps what any job gets: a forbidden tool, cwd, permission mode or an
unknown MCP tool raises `PolicyViolation` (the engine fails the job with kind `input`).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, SessionStore
from claude_agent_sdk.types import (
    HookContext,
    HookInput,
    HookJSONOutput,
    McpServerConfig,
    SandboxSettings,
    SystemPromptFile,
    SystemPromptPreset,
    ThinkingConfig,
)

from claudeq.errors import PolicyViolation
from claudeq.models import APPROVAL_MODES, JobSpec
from claudeq.permissions import allowed_builtin_tools, check_spec

from ...config.settings import FILE_TOOLS, BasePrompt, Settings, WorkerPolicy
from .approval import ApprovalGate
from .cli_env import JOB_ID_VAR, sealed
from .tools import SERVER_NAME, ToolRegistry, wire_name
from .workdirs import default_cwd, runs_under_own_uid

#: Input fields of the file tools that name a path.
PATH_FIELDS: tuple[str, ...] = ("file_path", "path", "notebook_path")
#: Input fields holding glob patterns, which may not climb out with `..` or start at `/`.
PATTERN_FIELDS: tuple[str, ...] = ("pattern", "glob")
DEFAULT_THINKING_BUDGET = 8000


def tool_path(value: str, base: Path, home: Path) -> Path | None:
    """The absolute path a file tool's path argument names, read the way the CLI reads it: `~` and `~/…` are the
    CLI's `$HOME` (`home`), `~user/…` that user's home, a relative path is under the cwd `base`; `..` and symlinks
    are resolved by `WorkerPolicy.path_allowed`. None when it cannot be resolved (an unknown `~user`, a NUL): the
    hook refuses those rather than guess."""
    if "\0" in value:
        return None
    if value.startswith("~"):
        user, _, rest = value[1:].partition("/")
        if user:
            try:
                start = Path(pwd.getpwnam(user).pw_dir)
            except KeyError:
                return None
        else:
            start = home
        return start / rest if rest else start
    return Path(value) if value.startswith("/") else base / value


def unclean(value: str) -> str | None:
    """Why a path or glob pattern is refused as it is, before it is read as a path: surrounding whitespace, a control
    character or a NUL. The CLI trims or reinterprets such a value (`" /outside"` is `/outside` to it), so the hook
    judges the exact string and never normalises it; None when it is clean."""
    if value != value.strip():
        return "starts or ends with whitespace"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "holds a control character (a NUL, a tab, a newline, ...)"
    return None


def pattern_climbs(pattern: str) -> bool:
    """Whether a glob pattern may match outside the directory it is searched in: it is absolute, starts at a home
    (`~`), or holds `..` anywhere (also inside braces or brackets: `{..,x}/…`)."""
    return pattern.startswith(("/", "~")) or ".." in pattern


def workspace_hook(policy: WorkerPolicy, home: Path) -> Callable[[HookInput, str | None, HookContext], Any]:
    """A PreToolUse hook denying file tools whose paths resolve outside the workspace roots (`home`: the CLI's
    `$HOME`, what it expands `~` to).

    Needed because `can_use_tool` is not consulted for tools already in `allowed_tools`. A second layer, not the
    only one: a root worker runs every run with file tools under a uid of its own (`runs_under_own_uid`), so what
    the hook misjudges still meets the kernel's permission check (docs/workers.md#security-defaults).
    """

    async def hook(data: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        if data.get("hook_event_name") != "PreToolUse":
            return {}
        tool_input: dict[str, Any] = data.get("tool_input") or {}  # type: ignore[assignment]
        if data.get("tool_name") not in FILE_TOOLS:
            return {}
        base = Path(str(data.get("cwd") or "/"))
        reason: str | None = None
        paths = [str(tool_input[f]) for f in PATH_FIELDS if isinstance(tool_input.get(f), str) and tool_input[f]]
        if not paths:
            paths = [str(base)]  # Glob/Grep without a path search the cwd
        for path in paths:
            why = unclean(path)
            if why is not None:
                reason = f"the path {path!r} {why}: give the exact path, without it"
                break
            target = tool_path(path, base, home)
            if target is None:
                reason = f"{path} cannot be resolved, so it is treated as outside the workspace roots"
                break
            if not policy.path_allowed(str(target)):
                reason = f"{path} is outside the workspace roots"
                break
        for name in PATTERN_FIELDS:
            pattern = tool_input.get(name)
            if not isinstance(pattern, str):
                continue
            # Grep's `pattern` is a regular expression (spaces are its own business); Glob's, and Grep's `glob`, are
            # paths to the CLI.
            why = unclean(pattern) if (name, data.get("tool_name")) != ("pattern", "Grep") else None
            if why is not None:
                reason = f"the pattern {pattern!r} {why}: give the exact pattern, without it"
            elif pattern_climbs(pattern):
                reason = f"pattern {pattern!r} may reach outside the workspace roots"
        if reason is None:
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }

    return hook


#: Names of the files a run's system prompts are written to, in its run directory.
SYSTEM_PROMPT_FILE = "system-prompt.txt"
APPEND_PROMPT_FILE = "append-system-prompt.txt"


def base_prompt(spec: JobSpec, settings: Settings) -> BasePrompt | None:
    """The base prompt a run starts from: the spec's, else the fleet's; None when `system_prompt` replaces it."""
    if spec.system_prompt is not None:
        return None
    return spec.base_prompt or settings.base_prompt


@dataclass(frozen=True)
class PromptFiles:
    """A run's system prompts as files: the CLI reads them with `--system-prompt-file` and
    `--append-system-prompt-file`, so their size is not bound by the 128 KiB an argv argument may hold."""

    system: Path | None = None  # the replacement system prompt (with the appended text, if any)
    append: Path | None = None  # text appended to Claude Code's preset

    @classmethod
    def write(cls, spec: JobSpec, directory: Path, base: BasePrompt | None = "claude_code") -> PromptFiles:
        """Write the spec's system prompts under `directory` (mode 0600); blocking file I/O. `base`: what
        `base_prompt` chose (the minimal base extended by an append is the append alone, as a whole prompt)."""

        def put(name: str, text: str) -> Path:
            path = directory / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            return path

        if spec.system_prompt is not None:
            text = spec.system_prompt + (f"\n\n{spec.append_system_prompt}" if spec.append_system_prompt else "")
            return cls(system=put(SYSTEM_PROMPT_FILE, text))
        if spec.append_system_prompt and base == "minimal":
            return cls(system=put(SYSTEM_PROMPT_FILE, spec.append_system_prompt))
        if spec.append_system_prompt:
            return cls(append=put(APPEND_PROMPT_FILE, spec.append_system_prompt))
        return cls()


SystemPrompt = str | SystemPromptPreset | SystemPromptFile | None


def _preset(settings: Settings, append: str | None = None) -> SystemPromptPreset:
    preset: SystemPromptPreset = {"type": "preset", "preset": "claude_code"}
    if append:
        preset["append"] = append
    if settings.cacheable_prompts:
        # The working directory, memory path and git status go to the first user message instead: the system
        # prompt is then the same for every run with the same options (docs/cli-behaviour.md#prompt-caching).
        preset["exclude_dynamic_sections"] = True
    return preset


def _system_prompt(
    spec: JobSpec, settings: Settings, files: PromptFiles | None
) -> tuple[SystemPrompt, dict[str, str | None]]:
    """The SDK's `system_prompt` and the extra CLI flags that carry the spec's system prompts."""
    if files is not None and files.system is not None:
        return {"type": "file", "path": str(files.system)}, {}
    if files is not None and files.append is not None:
        # The preset without `append`: the SDK then passes no prompt flag, and the file flag appends.
        return _preset(settings), {"append-system-prompt-file": str(files.append)}
    return _inline_system_prompt(spec, settings), {}


def _inline_system_prompt(spec: JobSpec, settings: Settings) -> SystemPrompt:
    if spec.system_prompt is not None:
        if spec.append_system_prompt:
            return f"{spec.system_prompt}\n\n{spec.append_system_prompt}"
        return spec.system_prompt
    if base_prompt(spec, settings) == "minimal":
        # None: the SDK passes an empty `--system-prompt`, and the CLI sends its one-line identity alone.
        return spec.append_system_prompt or None
    return _preset(settings, spec.append_system_prompt)


def _thinking(spec: JobSpec) -> ThinkingConfig | None:
    if spec.thinking == "adaptive":
        return {"type": "adaptive"}
    if spec.thinking == "enabled":
        return {"type": "enabled", "budget_tokens": spec.thinking_budget_tokens or DEFAULT_THINKING_BUDGET}
    if spec.thinking == "disabled":
        return {"type": "disabled"}
    return None


@dataclass(frozen=True)
class CliLaunch:
    """How a run's CLI process starts: its environment (`build_env`, `sealed` here), the program the SDK runs (the
    wrapper that starts the CLI; None: the SDK's own lookup) and where its stderr lines go."""

    env: dict[str, str]
    cli_path: str | Path | None = None
    stderr: Callable[[str], None] | None = None


@dataclass(frozen=True)
class SessionStart:
    """Where a run's conversation starts: a session to resume (branched off when `fork`, from message `resume_at`
    when set) or a new one, and the store its transcript is mirrored in (and resumed from). The default: a new
    session, mirrored nowhere."""

    resume: str | None = None
    fork: bool = False
    resume_at: str | None = None
    store: SessionStore | None = None


#: A new session, mirrored nowhere.
NEW_SESSION = SessionStart()


def build_options(
    spec: JobSpec,
    settings: Settings,
    *,
    launch: CliLaunch,
    tools: ToolRegistry | None = None,
    session: SessionStart = NEW_SESSION,
    prompt_files: PromptFiles | None = None,
    approvals: ApprovalGate | None = None,
) -> ClaudeAgentOptions:
    """The SDK options for one run; raises PolicyViolation when the policy forbids what the spec asks.
    With `prompt_files` (what the runner always gives) the system prompts go to the CLI as files, else inline.
    With `approvals`, the tools its rules name are left out of `allowed_tools`, so the CLI asks it before each use
    (docs/cli-behaviour.md#tool-approval-can_use_tool)."""
    policy = settings.policy
    env = launch.env
    check_spec(spec, policy, tools)
    if approvals is not None and spec.permission_mode not in APPROVAL_MODES:
        # The CLI would not ask: a tenant's approve_tools must not be bypassed (the spec's own is refused at submit).
        raise PolicyViolation("permission_mode", f"{spec.permission_mode} lets tools through that wait for approval")
    builtin = allowed_builtin_tools(spec, policy)
    mcp_servers: dict[str, McpServerConfig] = {}
    if spec.mcp_tools:
        assert tools is not None  # check_spec refused unknown tools
        mcp_servers[SERVER_NAME] = tools.server(spec.mcp_tools, job_id=env.get(JOB_ID_VAR), tenant=spec.tenant)
    hooks = None
    if FILE_TOOLS.intersection(builtin):
        home = Path(env.get("HOME") or os.environ.get("HOME") or os.path.expanduser("~"))  # the CLI's `~`
        hook = workspace_hook(policy, home)
        hooks = {"PreToolUse": [HookMatcher(matcher="|".join(sorted(FILE_TOOLS)), hooks=[hook])]}
    sandbox: SandboxSettings | None = None
    if policy.shell_sandbox and "Bash" in builtin:
        # A second layer for shell commands, never unsandboxed
        # (docs/cli-behaviour.md#file-tool-paths-and-the-shell-sandbox).
        # A sandboxed Bash the CLI allows by itself would never be asked about: not when it waits for approval.
        auto = approvals is None or not approvals.asks("Bash")
        sandbox = {"enabled": True, "autoAllowBashIfSandboxed": auto, "allowUnsandboxedCommands": False}
        sandbox["failIfUnavailable"] = True  # type: ignore[typeddict-unknown-key]  # the CLI's, not in the SDK's type
    output_format = {"type": "json_schema", "schema": spec.output_schema} if spec.output_schema else None
    system_prompt, extra_args = _system_prompt(spec, settings, prompt_files)
    allowed = [*builtin, *(wire_name(t) for t in dict.fromkeys(spec.mcp_tools))]
    if approvals is not None:
        allowed = [t for t in allowed if not approvals.asks(t)]
    return ClaudeAgentOptions(
        # tools= is the built-in set offered at all; allowed_tools=[] alone would leave every built-in offered.
        tools=builtin,
        allowed_tools=allowed,
        can_use_tool=approvals,
        mcp_servers=mcp_servers,
        strict_mcp_config=True,  # ignore .mcp.json and user MCP config on the worker machine
        setting_sources=[],  # and its settings files
        system_prompt=system_prompt,
        extra_args=extra_args,
        model=spec.model,
        fallback_model=spec.fallback_model,
        max_turns=spec.max_turns,
        max_budget_usd=spec.max_budget_usd,
        effort=spec.effort,
        thinking=_thinking(spec),
        permission_mode=spec.permission_mode,
        cwd=spec.cwd or default_cwd(runs_under_own_uid(spec, policy)),
        add_dirs=list(spec.add_dirs),
        output_format=output_format,
        include_partial_messages=True,  # liveness for the watchdogs; never stored as events
        hooks=hooks,  # type: ignore[arg-type]
        sandbox=sandbox,
        env=sealed(env),  # the wrapper starts the CLI with what it names alone
        cli_path=launch.cli_path,
        stderr=launch.stderr,
        resume=session.resume,
        fork_session=session.fork,
        resume_session_at=session.resume_at,
        session_store=session.store,
    )
