"""Settings: one typed object read from `CLAUDEQ_*` environment variables (and an optional `.env`)."""

from __future__ import annotations

import ipaddress
import json
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from claudeq.errors import ConfigError

from .account_pool import AccountPool
from .tenants import Tenants

#: Built-in tool sets a job may ask for by name. `none` is the default: a plain LLM run with no tools at all.
TOOL_PROFILES: dict[str, list[str]] = {
    "none": [],
    "read-only": ["Read", "Glob", "Grep"],
    "web": ["WebFetch", "WebSearch"],
    "edit": ["Read", "Glob", "Grep", "Edit", "Write"],
    "shell": ["Read", "Glob", "Grep", "Edit", "Write", "Bash"],
}

#: Built-in tools that read or write files; their paths are held to the workspace roots by a PreToolUse hook.
FILE_TOOLS: frozenset[str] = frozenset(
    {"Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "NotebookRead", "NotebookEdit"}
)

#: Built-in tools that run commands or write files: a run offered any of them gets a uid of its own (see
#: WorkerPolicy.run_uids), so what it executes cannot read the worker's or other runs' environments or files.
ISOLATED_TOOLS: frozenset[str] = frozenset({"Bash", "Write", "Edit", "MultiEdit", "NotebookEdit"})

#: The most attempts a job may ask for (JobSpec.max_attempts); bounds how long one task can run.
MAX_ATTEMPTS_CAP = 20

#: Keys kombu's Redis transport keeps beside the queue lists (default names): never a queue.
KOMBU_RESERVED_KEYS: frozenset[str] = frozenset({"unacked", "unacked_index", "unacked_mutex"})


def shared_key_problem(name: str, prefix: str) -> str | None:
    """Why `name` cannot be a queue (a Redis list on the broker): blank, under claudeq's key prefix, or one of the
    keys Celery's Redis transport uses itself; None when it can."""
    if not name.strip():
        return "a queue name must not be blank"
    if name.startswith(prefix):
        return f"queue {name!r} starts with the key prefix {prefix!r}: it would share claudeq's keys"
    if name in KOMBU_RESERVED_KEYS or name.startswith("_kombu."):
        return f"queue {name!r} is a key Celery's Redis transport uses itself"
    return None


def callback_queue_problem(name: str, prefix: str, job_queues: list[str]) -> str | None:
    """Why a Celery callback (`link`, `link_error`) may never go to `name`: shared state (claudeq's keys, kombu's)
    or one of claudeq's own job queues; None when an allow-list may hold it (docs/notifications.md)."""
    if name in job_queues:
        return f"{name!r} is a claudeq queue: name your own app's queue"
    return shared_key_problem(name, prefix)


PermissionMode = Literal["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions"]
#: The system prompt a job's run starts from (docs/jobs.md#the-base-prompt).
BasePrompt = Literal["claude_code", "minimal"]


def json_or_commas(value: Any) -> Any:
    """A list setting from the environment: a JSON list (`["a", "b"]`) or comma-separated values (`a,b`, or one
    value `a`), as docs/configuration.md writes them."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON list ({exc.msg}); give a JSON list or comma-separated values") from None
    return [item.strip() for item in text.split(",") if item.strip()]


class WorkerPolicy(BaseModel):
    """What any job may get on this fleet, whatever its spec asks for."""

    model_config = ConfigDict(extra="forbid")

    allowed_tools: Annotated[list[str], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=lambda: list(TOOL_PROFILES["read-only"]) + list(TOOL_PROFILES["web"]),
        description="Built-in tools a job may be given; Bash and file writes only when listed here.",
    )
    workspace_roots: Annotated[list[Path], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=list,
        description="Directories a job's cwd/add_dirs and file tools must stay under; empty = jobs get no cwd.",
    )
    permission_modes: Annotated[list[PermissionMode], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=lambda: list[PermissionMode](["default", "dontAsk"]),
        description="Permission modes a job may ask for; bypassPermissions only if listed.",
    )
    mcp_tools_module: str | None = Field(
        default=None,
        description="Import path of a module exposing `TOOLS` (SDK @tool functions) that jobs may use by name.",
    )
    run_uids: Annotated[tuple[int, int], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default=(61000, 61999),
        description="First and last uid (inclusive) of the range a root worker runs shell or file-writing CLIs "
        "under, one uid per concurrent run on the host (its gid is the same number); no other user or process on "
        "the host may use these ids.",
    )
    run_groups: Annotated[list[int], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=list,
        description="Supplementary gids of those runs, e.g. the group that owns the workspace roots (g+rwX, setgid).",
    )
    shell_sandbox: bool = Field(
        default=False,
        description="Run a shell job's commands in Claude Code's own sandbox too (bubblewrap on Linux: writes only "
        "under the cwd, no network), a second layer beside the run uid; with failIfUnavailable, so a host without "
        "bubblewrap fails such jobs rather than run them unsandboxed "
        "(docs/cli-behaviour.md#file-tool-paths-and-the-shell-sandbox).",
    )
    sandbox: Literal["bwrap", "off"] = Field(
        default="bwrap",
        description="What holds a run with tools to its workspace and its pass-through: `bwrap` runs its CLI in a "
        "bubblewrap sandbox of its own (mount, PID and network namespaces; docs/workers.md#security-defaults), and "
        "a worker where bubblewrap cannot start refuses such runs; `off` accepts them without it (the workspace hook "
        "and the run uid alone).",
    )
    network_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts a sandboxed shell job may reach through the worker's proxy (its HTTP_PROXY and "
        "HTTPS_PROXY): `name` (any port), `name:port`, or `*.example.com` for its subdomains; empty = none. A hole "
        "the operator opens: those hosts, for programs that use a proxy; nothing else "
        "(docs/workers.md#security-defaults).",
    )
    shared_uid_ok: bool = Field(
        default=False,
        description="Accept running shell or file-writing jobs under the worker's own uid when it cannot switch "
        "(not root): such a job can then read the worker's environment (tokens, Redis password) and other runs'.",
    )

    @field_validator("run_uids")
    @classmethod
    def _uid_range(cls, value: tuple[int, int]) -> tuple[int, int]:
        first, last = value
        if not 0 < first <= last < 2**32 - 1:
            raise ValueError("must be [first, last] with 0 < first <= last < 4294967295 (never root)")
        return value

    @model_validator(mode="after")
    def _groups_outside_the_run_ids(self) -> WorkerPolicy:
        first, last = self.run_uids
        clash = [g for g in self.run_groups if first <= g <= last or g == 0]
        if clash:
            # A run's private gid is its uid's number: a shared group in that range would be some run's own.
            raise ValueError(f"run_groups {clash} must be outside run_uids {first}-{last} and not 0")
        return self

    def isolated_tools(self, tools: list[str]) -> list[str]:
        """Those of `tools` that make a run need a uid of its own (shell, file writes)."""
        return [t for t in tools if t in ISOLATED_TOOLS]

    fleet_tools: bool = Field(
        default=False,
        description="Offer the `claudeq mcp` tools (submit_job, get_job, list_jobs, cancel_job, wait_job, "
        "accounts) to jobs that name them in mcp_tools: a run can hand work to the fleet; its jobs record it as "
        "their parent.",
    )

    def tools_for(self, request: str | list[str]) -> list[str]:
        """Resolve a profile name or a tool list to built-in tool names (unchecked against the policy)."""
        if isinstance(request, str):
            return list(TOOL_PROFILES[request])
        return list(request)

    def forbidden_tools(self, tools: list[str]) -> list[str]:
        """The tools in `tools` this policy does not allow."""
        allowed = set(self.allowed_tools)
        return [t for t in tools if t not in allowed]

    def path_allowed(self, path: str) -> bool:
        """Whether `path` (absolute) lies under one of the workspace roots."""
        target = Path(path).resolve()
        return any(target == root.resolve() or root.resolve() in target.parents for root in self.workspace_roots)


class Settings(BaseSettings):
    """Everything configurable in claudeq: env prefix `CLAUDEQ_`, nested fields with `__` (`CLAUDEQ_POLICY__...`)."""

    model_config = SettingsConfigDict(
        env_prefix="CLAUDEQ_", env_file=".env", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    # Redis and Celery
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="Redis for state and as the Celery broker; `redis://:password@host:port/db` or `rediss://`.",
    )
    redis_sentinels: str = Field(
        default="",
        description="Sentinels to find the Redis primary through, `host:port,host:port,…`; empty = `redis_url`'s "
        "host. With them, the db, password and TLS still come from `redis_url` (docs/failover.md).",
    )
    redis_master_name: str = Field(
        default="mymaster", description="The name the sentinels monitor the primary under (with `redis_sentinels`)."
    )
    redis_wait_replicas: int = Field(
        default=0,
        ge=0,
        description="Replicas a submit must reach before it returns, and a finished job before `wait` reports it "
        "(Redis WAIT); 0 = as soon as the primary has it (docs/failover.md#durability).",
    )
    redis_wait_timeout_ms: int = Field(
        default=1000, ge=1, description="How long a submit or a `wait` waits for `redis_wait_replicas` (ms)."
    )
    key_prefix: str = Field(default="claudeq:", description="Prefix of every Redis key claudeq writes.")
    queue: str = Field(default="claudeq.runs", description="Default Celery queue for agent runs.")
    queues: Annotated[list[str], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=lambda: ["claudeq.runs"],
        description="Queues a worker consumes; with `queue`, the only names a job's `queue` may give (see job_queues).",
    )

    # Retention and limits
    result_ttl_s: int = Field(default=7 * 86400, ge=60, description="How long finished jobs and events are kept.")
    session_ttl_s: int | None = Field(
        default=None,
        ge=1,
        description="How long mirrored session transcripts and conversations are kept after their last turn "
        "(refreshed on every append); default: result_ttl_s.",
    )
    session_codec: Literal["zstd", "zlib", "none"] = Field(
        default="zstd",
        description="How mirrored transcripts are stored: each append batch as one compressed element (zstd needs "
        "the `zstandard` package), or `none` (one JSON text per entry and a set of their uuids, as before). Any worker "
        "reads every form.",
    )
    oneshot_session_ttl_s: int | None = Field(
        default=None,
        ge=0,
        description="How long the transcript of a job that succeeded outside a conversation, starting a new "
        "session, is kept after its success (0: deleted at success; it can then no longer be resumed); default: "
        "the session retention. Conversations' and failed jobs' transcripts keep the session retention.",
    )
    event_codec: Literal["zlib", "none"] = Field(
        default="zlib",
        description="How a finished job's events are kept in its record: compressed by the worker that finished it "
        "(zlib: the producer install reads it with the standard library), or `none` (JSON text). Either is read.",
    )
    archive_url: str | None = Field(
        default=None,
        description="A transcript archive finished jobs' transcripts and events move to (`postgresql://…` with the "
        "`archive` extra, or `sqlite:///path` for one host), read back transparently; default: none, Redis only.",
    )
    archive_after_s: int = Field(
        default=3600,
        ge=0,
        description="How long after a job ends its transcripts and events move to the archive (with archive_url).",
    )
    webhook_hosts: Annotated[list[str], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=list,
        description="Hosts a job's or a tenant's webhook URL may name: `hooks.example.com`, or `*.example.com` for "
        "its subdomains; empty = no webhooks (docs/notifications.md).",
    )
    webhook_ports: Annotated[list[int], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=list,
        description="Ports a webhook URL may name besides 80 and 443.",
    )
    webhook_allow_nets: Annotated[list[str], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=list,
        description="Address ranges (CIDR, e.g. 10.20.0.0/16) a webhook may connect to although they are loopback, "
        "private or link-local; empty = public addresses only (docs/notifications.md).",
    )
    webhook_ca_file: Path | None = Field(
        default=None,
        description="A PEM file of the certificate authorities an https webhook receiver's certificate is checked "
        "against, in place of the system's (a private CA); the certificate must still name the URL's host "
        "(docs/notifications.md#webhooks).",
    )
    callback_queues: Annotated[list[str], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=list,
        description="Without a tenants file: the queues of the producers' own Celery apps a job's `link` / "
        "`link_error` may name (with one, each tenant's `callback_queues`); empty = no callbacks. Never a name "
        "under the key prefix, one of kombu's keys or a claudeq queue (docs/notifications.md).",
    )
    max_schedules_per_tenant: int = Field(
        default=100, ge=1, description="Schedules one tenant may have; more are refused at add."
    )
    max_schedule_fires_per_hour: int = Field(
        default=3600,
        ge=1,
        description="How often one tenant's schedules may fire together, per hour (an `every_s=1` schedule fires "
        "3600 times); a schedule that would take it past is refused at add.",
    )
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="The Standard Webhooks secret (`whsec_…`) webhooks are signed with, for tenants without their own "
        "`webhook_secret_env`. Read by the workers, which deliver.",
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=300, description="How long a receiver has to answer.")
    notify_max_attempts: int = Field(
        default=10, ge=1, le=100, description="Tries of an end notification before it is dead (then: webhooks retry)."
    )
    notify_backoff_s: float = Field(
        default=5.0, gt=0, description="Wait before a notification's second try; doubled each time, at most 600 s."
    )
    web_token: SecretStr | None = Field(
        default=None,
        description="The operator's token for `claudeq web` (CLAUDEQ_WEB_TOKEN): every tenant's jobs and the fleet "
        "page. Without it or tenants' `mcp_token_env` tokens, `claudeq web` makes a token of its own and prints it.",
    )
    web_origin: str | None = Field(
        default=None,
        description="The origin browsers reach `claudeq web` / `claudeq api` at when it is not the address it binds "
        "(`https://claudeq.example.com`, behind a proxy): its host joins the host allow-list and it is the origin "
        "actions may come from (docs/web.md#who-sees-what).",
    )
    events_maxlen: int = Field(default=2000, ge=10, description="Approximate cap of events kept per job.")
    event_tool_result_chars: int = Field(
        default=1000,
        ge=100,
        description="Longest text of a tool result kept in its `tool_result` event (the whole result is in the "
        "session transcript; the event's `chars` gives its length). Other text fields keep 4000 characters.",
    )
    event_flush_s: float = Field(
        default=2.0,
        ge=0.1,
        le=30,
        description="How long a run's events may wait to be stored while nobody follows the job (s): they go with "
        "the run's next status write or after this long, whichever comes first. A followed job's (events --follow, "
        "the client's and MCP's follow) wait at most 0.1 s. A worker killed mid-run loses what was still waiting.",
    )
    max_prompt_bytes: int = Field(default=1_000_000, ge=1, description="Largest prompt accepted at submit.")
    max_spec_bytes: int = Field(default=2_000_000, ge=1, description="Largest whole spec (JSON) accepted at submit.")

    # Run defaults and caps
    deadline_s: float = Field(default=3600, gt=0, description="Default hard deadline of one attempt.")
    max_deadline_s: float = Field(default=4 * 3600, gt=0, description="Largest deadline a job may ask for.")
    idle_timeout_s: float = Field(default=300, gt=0, description="Default idle watchdog (no stream progress).")
    first_byte_timeout_s: float = Field(default=120, gt=0, description="Default time to the first streamed byte.")
    max_attempts: int = Field(default=3, ge=1, le=20, description="Default attempts for a job (rate limits excluded).")
    approval_hold_s: float = Field(
        default=60,
        ge=0,
        description="How long a run waits for a decision on a tool use with its CLI held (docs/jobs.md#tool-approval).",
    )
    output_check_timeout_s: float = Field(
        default=10, gt=0, description="Longest a structured output's schema validation may take (own process)."
    )
    max_worker_lost: int = Field(
        default=3, ge=1, description="A job whose worker is lost this many times fails as `poisoned`."
    )
    loop_item_max_failures: int = Field(
        default=5,
        ge=1,
        description="Passes of the promoter or the reconciler (within an hour) that may fail to handle one job before "
        "the loop fails it (kind `internal`, the loop's error in its message) instead of trying it forever "
        "(docs/architecture.md#background-loops).",
    )

    # Worker
    concurrency: int = Field(default=4, ge=1, le=256, description="Runs in flight per worker process.")
    lease_ttl_s: float = Field(default=15, gt=0, description="A run lease expires this long after its last heartbeat.")
    heartbeat_s: float = Field(default=3, gt=0, description="Lease and worker heartbeat interval.")
    loop_interval_s: float = Field(default=1.0, gt=0, description="Period of the promoter and reconciler loops.")
    unclaimed_resend_s: float = Field(default=120, gt=0, description="Re-send a queued job nobody claimed this long.")
    waiter_fallback_s: float = Field(
        default=300,
        gt=0,
        description="Re-send a job waiting in an account's line that no freed slot was handed to this long (a fallback "
        "only: a release or the promoter's pass hands a waiter its slot).",
    )
    retry_base_s: float = Field(default=1.0, gt=0, description="Transient retry backoff base (full jitter).")
    retry_max_s: float = Field(default=60.0, gt=0, description="Transient retry backoff cap.")
    retry_in_place_max_s: float = Field(default=5.0, ge=0, description="Longest wait in place; longer re-enqueues.")
    rate_limit_cooldown_s: float = Field(
        default=60, gt=0, description="Longest cooldown after a 429 that said nothing about when to come back."
    )
    rate_limit_backoff_s: float = Field(
        default=2.0, gt=0, description="First cooldown after a 429 without a hint; doubles while 429s repeat."
    )
    ramp_jitter_s: float = Field(
        default=1.0,
        ge=0,
        description="When a cooldown or reservation ends, each account's first start waits a random 0..this "
        "many seconds, so accounts that reset together do not all start at once.",
    )
    predictive_admission: bool = Field(
        default=True,
        description="Hold an account back when the runs in flight would likely take a window's reported "
        "utilization past its ceiling (one request each, at what one request added so far).",
    )
    passthrough: bool = Field(
        default=True,
        description="Runs talk to the model service through the worker's loopback pass-through (rate-limit "
        "headers of every response; runs get a stand-in credential, never the real token).",
    )
    base_prompt: BasePrompt = Field(
        default="claude_code",
        description="The system prompt a job without `system_prompt` starts from, unless its spec names one: "
        "Claude Code's preset or the CLI's minimal one (docs/jobs.md#the-base-prompt).",
    )
    cacheable_prompts: bool = Field(
        default=True,
        description="Keep the preset's per-run sections (working directory, memory path, git status) out of the "
        "system prompt, so jobs with the same options share a cached prefix (docs/cli-behaviour.md#prompt-caching).",
    )
    cache_affinity: bool = Field(
        default=True,
        description="Prefer, among the accounts a job may use, one whose prompt cache holds the job's prefix "
        "(docs/architecture.md#cache-affinity); false: the least used account, as before.",
    )
    cache_affinity_max_skew: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="How much more used (utilization per weight, 0-1) a warm account may be than the least used "
        "one and still be preferred.",
    )
    cache_affinity_wait_s: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description="How long after its submit a job may wait for a warm account whose slots are all taken while a "
        "cold one is free (0: never waits).",
    )
    cli_max_retries: int = Field(default=0, ge=0, le=10, description="CLAUDE_CODE_MAX_RETRIES given to the CLI.")
    celery_events: bool = Field(
        default=False,
        description="Celery's task events (task-sent/received/started/succeeded, for Flower or `celery events`). "
        "Off by default: each job would publish three more messages through Redis; the job record and its events "
        "are claudeq's own monitoring.",
    )
    warm_clients: int | None = Field(
        default=None,
        ge=0,
        le=256,
        description="Idle CLIs a worker process keeps warm for later jobs with exactly the same options "
        "(docs/architecture.md#warm-clis); 0 turns warm CLIs off; unset: the concurrency.",
    )
    warm_max_jobs: int = Field(default=100, ge=1, description="A warm CLI is stopped after this many jobs.")
    warm_idle_s: float = Field(default=120, gt=0, description="A warm CLI left idle this long is stopped.")
    shutdown_grace_s: float = Field(default=30, ge=0, description="On SIGTERM, how long runs may finish.")
    run_root: Path | None = Field(default=None, description="Where per-run config dirs go (default: temp dir).")
    worktree_dir: Path | None = Field(
        default=None,
        description="Where coding jobs' git worktrees go; under a workspace root (default: `.claudeq-worktrees` in "
        "the workspace root holding the job's repository; docs/jobs.md#coding-jobs).",
    )
    concurrency_recheck_s: float = Field(
        default=60,
        gt=0,
        description="How long a job waiting for its concurrency key stays deferred before it looks again, if no "
        "run of its key woke it first (docs/jobs.md#concurrency-keys).",
    )
    artifact_max_bytes: int = Field(
        default=10_000_000,
        ge=0,
        description="The most bytes of files one attempt's `$CLAUDEQ_OUTPUTS` keeps as artifacts; files past it are "
        "named in the record, not kept (docs/jobs.md#artifacts).",
    )
    workspace_patch_max_bytes: int = Field(
        default=1_000_000,
        ge=0,
        description="The largest patch (uncompressed) a coding job's record keeps; beyond it, the stat and the branch "
        "(and the whole patch in the transcript archive, when one is configured).",
    )
    cli_path: Path | None = Field(default=None, description="Claude CLI to run (default: the SDK's bundled one).")
    secret_env: Annotated[list[str], NoDecode, BeforeValidator(json_or_commas)] = Field(
        default_factory=list,
        description="More environment variables holding secrets that a run's CLI must not see (blanked for it).",
    )
    cli_env: list[str] = Field(
        default_factory=list,
        description="More of the worker's environment variables a run's CLI gets as they are (it gets PATH, HOME, "
        "LANG, LC_*, TZ, TMPDIR and the CA bundle variables, and what claudeq sets; nothing else). Never a secret: a "
        "name that secret_env, an account or a tenant names stays out.",
    )
    worker_id: str | None = Field(default=None, description="Worker identity (default: host:pid).")
    metrics_port: int = Field(default=0, ge=0, le=65535, description="Worker /metrics port; 0 = off.")

    # Accounts and policy
    accounts_file: Path | None = Field(default=None, description="TOML file with `[[accounts]]` tables.")
    tenants_file: Path | None = Field(
        default=None, description="TOML file with `[[tenants]]` tables (caps, weights, budgets); none = no limits."
    )
    policy: WorkerPolicy = Field(default_factory=WorkerPolicy, description="What jobs may get on this fleet.")

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str) -> str:
        if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinels(cls, value: str) -> str:
        for item in (part.strip() for part in value.split(",") if part.strip()):
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{item!r} is not host:port; give e.g. 10.0.0.1:26379,10.0.0.2:26379")
        return value

    @model_validator(mode="after")
    def _sentinels_need_tcp(self) -> Settings:
        if self.sentinel_addresses and urlsplit(self.redis_url).scheme == "unix":
            raise ValueError("redis_sentinels: a unix:// redis_url cannot be failed over; use redis:// or rediss://")
        return self

    @field_validator("web_origin")
    @classmethod
    def _web_origin(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query:
            raise ValueError("give scheme://host[:port] and nothing more, e.g. https://claudeq.example.com")
        return f"{parts.scheme}://{parts.netloc.lower()}"

    @field_validator("key_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value or any(c.isspace() for c in value):
            raise ValueError("must be non-empty and without spaces, e.g. 'claudeq:'")
        return value

    @field_validator("queue", "queues")
    @classmethod
    def _queue_names(cls, value: str | list[str], info: ValidationInfo) -> str | list[str]:
        # A queue name is a Redis list key on the broker: it must not be one of claudeq's keys or kombu's own.
        prefix = info.data.get("key_prefix") or "claudeq:"
        for name in [value] if isinstance(value, str) else value:
            problem = shared_key_problem(name, prefix)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("webhook_allow_nets")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for net in value:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError:
                raise ValueError(f"{net!r} is not an address range (CIDR, e.g. 10.20.0.0/16)") from None
        return value

    @field_validator("callback_queues")
    @classmethod
    def _callback_queue_names(cls, value: list[str], info: ValidationInfo) -> list[str]:
        prefix = info.data.get("key_prefix") or "claudeq:"
        own = [info.data.get("queue"), *(info.data.get("queues") or [])]
        for name in value:
            problem = callback_queue_problem(name, prefix, [q for q in own if q])
            if problem:
                raise ValueError(problem)
        return value

    @property
    def warm_budget(self) -> int:
        """Idle CLIs this worker process may keep warm (0: warm CLIs are off)."""
        return self.concurrency if self.warm_clients is None else self.warm_clients

    @property
    def job_queues(self) -> list[str]:
        """The queues a job may name in `spec.queue`: the default `queue` and the consumed `queues`, in that order.
        A producer that routes jobs to more queues lists them in CLAUDEQ_QUEUES."""
        return list(dict.fromkeys([self.queue, *self.queues]))

    @cached_property
    def accounts(self) -> AccountPool:
        """The account pool: from `accounts_file`, else one account from a token in the environment."""
        if self.accounts_file is not None:
            return AccountPool.from_toml(self.accounts_file)
        return AccountPool.from_environment()

    @cached_property
    def tenants(self) -> Tenants:
        """The tenants: from `tenants_file`, else every tenant name accepted with no limits."""
        if self.tenants_file is None:
            return Tenants.unconfigured()
        tenants = Tenants.from_toml(self.tenants_file)
        for tenant in tenants.tenants:
            unknown = [p for p in tenant.tool_profiles or [] if p not in TOOL_PROFILES]
            if unknown:
                raise ConfigError(
                    f"{self.tenants_file}: tenants.{tenant.name}.tool_profiles",
                    f"unknown profile(s) {', '.join(unknown)}; one of {', '.join(TOOL_PROFILES)}",
                )
        return tenants

    @property
    def worker_redis_timeout_s(self) -> float:
        """Socket and connect timeout of a worker's Redis client: below the heartbeat interval, so a heartbeat stuck
        on a dead connection fails (and is retried) before the next one is due."""
        return max(0.1, self.heartbeat_s / 2)

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """`redis_sentinels` as (host, port) pairs; empty when the primary is `redis_url`'s host."""
        pairs = []
        for item in (part.strip() for part in self.redis_sentinels.split(",") if part.strip()):
            host, _, port = item.rpartition(":")
            pairs.append((host.strip("[]"), int(port)))
        return pairs

    @property
    def session_retention_s(self) -> int:
        """Effective transcript and conversation retention: `session_ttl_s`, else `result_ttl_s`."""
        return self.session_ttl_s if self.session_ttl_s is not None else self.result_ttl_s

    @property
    def visibility_timeout_s(self) -> int:
        """Broker visibility timeout: above the longest a task can run (every attempt a job may make, each up to
        the largest deadline, plus backoff), so Redis never redelivers a live run. A dead worker's job is
        recovered by the reconciler long before this, from its expired lease."""
        return int(self.max_deadline_s * MAX_ATTEMPTS_CAP + 3600)

    def redacted_redis_url(self) -> str:
        """The Redis URL without its password (in the userinfo or a `password=` query), for logs and `config check`."""
        parts = urlsplit(self.redis_url)
        if parts.password is not None:
            netloc = f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}"
            parts = parts._replace(netloc=netloc)
        query = "&".join(
            "password=***" if item.split("=", 1)[0].lower() == "password" else item
            for item in parts.query.split("&")
            if item
        )
        return urlunsplit(parts._replace(query=query))


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; invalid values raise ConfigError naming the variable and the fix."""
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except SettingsError as exc:  # a value the environment source could not decode (the message names the field)
        raise ConfigError(_variable_of(str(exc)), "cannot be read; give JSON or comma-separated values") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = "__".join(str(p) for p in first["loc"]).upper()
        raise ConfigError(f"CLAUDEQ_{loc}", first["msg"]) from None
    return settings


def _variable_of(message: str) -> str:
    """The variable a pydantic-settings SettingsError is about (`error parsing value for field "x" …`)."""
    start = message.find('field "')
    if start < 0:
        return "CLAUDEQ_*"
    name = message[start + 7 :].split('"', 1)[0]
    return f"CLAUDEQ_{name.upper()}"
