"""What a scripted run answers: a `Reply`, or a `Failure` shaped as users meet it (docs/testing.md#replies).

Each answer becomes the `RunOutcome` the real runner would fill in for it (claudeq.worker.run.parse reads the SDK's
messages into the same fields), and the worker's real failure policy (claudeq.worker.delivery.failure) decides what
follows.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from claudeq.events import (
    AssistantText,
    RateLimited,
    ResultReceived,
    RunStarted,
    SessionStarted,
    Stopped,
    ToolCalled,
    ToolResult,
)
from claudeq.models import Event, JobResult, JobSpec, Usage, utcnow
from claudeq.worker.run.outcome import EventSink, RateLimitSignal, RunOutcome, RunRequest
from claudeq.worker.run.watchdog import Timeouts
from claudeq.worker.run.workdirs import default_cwd, project_key_for_directory, runs_under_own_uid

if TYPE_CHECKING:
    from claudeq.config.settings import Settings
    from claudeq.producer.client import JobHandle

#: The model a reply's usage is counted under when the job names none.
DEFAULT_MODEL = "claude-sonnet-4-5"

#: A tool call of a reply: a tool name, a (name, input) pair, or {"tool": name, "input": {...}, "result": text}.
ToolCall = str | tuple[str, Mapping[str, Any]] | Mapping[str, Any]


def usage_of(value: Usage | Mapping[str, Any] | None, model: str) -> Usage:
    """A reply's usage: `Usage`, a mapping of its fields, or None for a small default (100 in, 20 out, $0.001)."""
    if isinstance(value, Usage):
        usage = value.model_copy(deep=True)
    else:
        fields = dict(value) if value is not None else {"input_tokens": 100, "output_tokens": 20, "cost_usd": 0.001}
        usage = Usage(**fields)
    if not usage.model_usage:
        usage.model_usage = {
            model: {
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "cacheReadInputTokens": usage.cache_read_tokens,
                "cacheCreationInputTokens": usage.cache_creation_tokens,
                "costUSD": usage.cost_usd,
            }
        }
    return usage


@dataclass(frozen=True)
class Reply:
    """A run that answers: `text`, a `structured` output (for jobs with an `output_schema`), `usage`, the
    `tool_calls` it made (each shown as a `tool_call` and a `tool_result` event) and its `turns`."""

    text: str = "ok"
    structured: Any = None
    usage: Usage | Mapping[str, Any] | None = None
    tool_calls: Sequence[ToolCall] = ()
    turns: int = 1
    session_id: str | None = None  # the run's session (default: a new one, or the session it resumes)


FailureKind = Literal[
    "rate_limited", "overloaded", "auth_failed", "api_error", "timeout", "never_answers", "crash", "limit_reached"
]


@dataclass(frozen=True)
class Failure:
    """A run that fails the way the real CLI does; made by `rate_limited`, `overloaded`, `auth_failed`,
    `api_error`, `timeout`, `never_answers` and `crash`."""

    kind: FailureKind
    status: int | None = None  # the API's HTTP status
    message: str = ""
    resets_in: float | None = None  # rate_limited: seconds until the window resets (None: no reset time given)
    window: str = "five_hour"
    stall: Literal["first_byte", "idle", "deadline"] | None = None  # timeout / never_answers: which watchdog fires
    usage: Usage | Mapping[str, Any] | None = None
    subtype: str = "success"  # the result's subtype (limit_reached: which limit)


def rate_limited(resets_in: float | None = 60.0, *, window: str = "five_hour") -> Failure:
    """HTTP 429. On an OAuth account the CLI also reports the rejected window and when it resets (`resets_in`
    seconds from now): the account cools until then. An API-key account gets a plain 429 (`rate_limit_cooldown_s`)."""
    return Failure("rate_limited", 429, "API Error: 429 rate_limit_error", resets_in=resets_in, window=window)


def overloaded() -> Failure:
    """HTTP 529 Overloaded: transient, retried with backoff."""
    return Failure("overloaded", 529, 'API Error: 529 {"type":"overloaded_error","message":"Overloaded"}')


def auth_failed() -> Failure:
    """HTTP 401: the account is disabled and the job goes to another one."""
    return Failure("auth_failed", 401, "Invalid API key · Please run /login")


#: The API's error type and words for each HTTP status (what the real CLI prints after `API Error: STATUS`).
API_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Bad request"),
    401: ("authentication_error", "Invalid bearer token"),
    403: ("permission_error", "Forbidden"),
    404: ("not_found_error", "Not found"),
    408: ("timeout_error", "Request timeout"),
    413: ("request_too_large", "Request too large"),
    422: ("invalid_request_error", "Unprocessable entity"),
    429: ("rate_limit_error", "Rate limited"),
    500: ("api_error", "Internal server error"),
    502: ("api_error", "Bad gateway"),
    503: ("api_error", "Service unavailable"),
    504: ("api_error", "Gateway timeout"),
    529: ("overloaded_error", "Overloaded"),
}


def api_error(status: int = 500, message: str | None = None) -> Failure:
    """Another API error: 5xx are transient (retried), 400/403/404/413/422 fail the job at once. Its text is the
    API's for that status (`API Error: 400 {"type":"invalid_request_error","message":"Bad request"}`), with
    `message` in place of the standard words when given."""
    kind, words = API_ERRORS.get(status, ("api_error" if status >= 500 else "invalid_request_error", f"HTTP {status}"))
    body = json.dumps({"type": kind, "message": words if message is None else message}, separators=(",", ":"))
    return Failure("api_error", status, f"API Error: {status} {body}")


def timeout(kind: Literal["first_byte", "idle", "deadline"] = "idle") -> Failure:
    """The run streams, then stalls until the worker's `kind` watchdog stops it (virtual time passes): retried."""
    return Failure("timeout", stall=kind)


def never_answers() -> Failure:
    """The run never sends a byte: the first-byte watchdog stops it (virtual time passes)."""
    return Failure("never_answers", stall="first_byte")


def crash(exit_code: int = 1) -> Failure:
    """The CLI exits without a result: transient, retried."""
    return Failure("crash", status=exit_code, message=f"Command failed with exit code {exit_code}")


def max_turns_reached(usage: Usage | Mapping[str, Any] | None = None) -> Failure:
    """The run used its `max_turns` without finishing: the job fails at once (kind `job`), not retried."""
    return Failure("limit_reached", message="Reached maximum number of turns", usage=usage, subtype="error_max_turns")


def budget_exhausted(usage: Usage | Mapping[str, Any] | None = None) -> Failure:
    """The run spent its `max_budget_usd` without finishing: the job fails at once (kind `job`), not retried."""
    return Failure("limit_reached", message="Reached maximum budget", usage=usage, subtype="error_max_budget_usd")


Answer = Reply | Failure | str

#: What an unmatched run answers: the job fails at once (kind `job`) and the driver raises UnmatchedPrompt.
UNMATCHED = Failure("api_error", 400, "claudeq.testing: no rule answers this prompt (UnmatchedPrompt)")


@dataclass
class Run:
    """One attempt as a responder sees it."""

    job_id: str
    attempt: int
    prompt: str  # what the run was sent (a continuing retry sends claudeq's continue prompt)
    spec: JobSpec
    account: str
    resume: str | None  # the session it resumes (conversations, `resume`, a continuing retry)
    fork: bool
    job_prompt: str = ""  # the job's own prompt, as submitted (what rules match)
    _submit: Callable[..., JobHandle] | None = field(default=None, repr=False)

    def submit(self, spec: JobSpec | dict[str, Any] | None = None, **fields: Any) -> JobHandle:
        """Submit a job from this run, as its fleet tools (`submit_job`) would: the new job's `parent_job_id` is this
        job."""
        assert self._submit is not None
        return self._submit(self.job_id, spec, **fields)


Responder = Callable[[Run], "Answer | None"]
Match = str | re.Pattern[str] | Responder


class UnmatchedPrompt(AssertionError):
    """A run whose prompt no rule matches, in a fleet given pattern rules and no `default`: a mistyped pattern would
    otherwise pass quietly with the default answer. Raised by whatever drove the fleet (`job.wait()`, `step()`, …)."""


@dataclass
class Rule:
    """A scripted answer for the runs it matches; `left` is how many runs it still answers (None: any number)."""

    match: Match
    answers: list[Answer]
    left: int | None
    kind: Literal["reply", "fail"] = "reply"

    @property
    def is_pattern(self) -> bool:
        """Whether the rule matches by a pattern (a callable chooses its runs itself)."""
        return not callable(self.match) or isinstance(self.match, re.Pattern)

    def names(self, run: Run) -> bool:
        """Whether the rule's pattern matches the run's prompt, answers left or not (a callable: never)."""
        return self.is_pattern and re.search(self.match, run.job_prompt or run.prompt) is not None  # type: ignore[arg-type]

    def __str__(self) -> str:
        what = getattr(self.match, "pattern", self.match)
        shown = repr(what) if isinstance(what, str) else getattr(what, "__qualname__", repr(what))
        if self.left is None:
            return f"{self.kind} {shown} (every run)"
        answers = ", ".join(
            a if isinstance(a, str) else getattr(a, "kind", "reply") for a in self.answers[-self.left :]
        )
        return f"{self.kind} {shown} ({self.left} left{': ' + answers if self.left else ''})"

    def answer(self, run: Run) -> Answer | None:
        if self.left is not None and self.left <= 0:
            return None
        if callable(self.match) and not isinstance(self.match, re.Pattern):
            found = self.match(run)
            if found is None:
                return None
        else:
            if re.search(self.match, run.job_prompt or run.prompt) is None:
                return None
            found = (
                self.answers[0]
                if self.left is None
                else self.answers[(len(self.answers) - self.left) % len(self.answers)]
            )
        if self.left is not None:
            self.left -= 1
        return found


class ScriptedRunner:
    """A `RunnerLike` (claudeq.worker.delivery.ports) that answers from rules instead of running the CLI."""

    def __init__(
        self,
        settings: Settings,
        default: Answer | None,
        submit: Callable[..., JobHandle] | None = None,
        job_prompt: Callable[[str], str] | None = None,
    ) -> None:
        self.settings = settings
        self._job_prompt = job_prompt
        self.failures: list[Rule] = []
        self.replies: list[Rule] = []
        #: What a run no rule answers gets; None: `Reply()` while no pattern rule is given, else the run is unmatched.
        self.default = default
        #: Runs no rule matched (in a fleet with rules and no default): what the driver raises UnmatchedPrompt with.
        self.unmatched: list[str] = []
        self.requests: list[RunRequest] = []
        self._submit = submit

    def check(self, spec: JobSpec) -> None:
        """The scripted runner refuses nothing (the worker policy is still checked by the handler)."""

    def answer_for(self, run: Run) -> Answer:
        rules = [*self.failures, *self.replies]
        for rule in rules:
            found = rule.answer(run)
            if found is not None:
                return found
        if self.default is not None:
            return self.default
        patterns = [rule for rule in rules if rule.is_pattern]
        if not patterns or any(rule.names(run) for rule in patterns):  # no pattern to mistype, or a used-up rule's
            return Reply()
        listed = "\n".join(f"  {rule}" for rule in rules)
        self.unmatched.append(
            f"no rule answers the prompt {run.job_prompt or run.prompt!r} (job {run.job_id}, attempt {run.attempt}); "
            f"the rules, in the order they are tried:\n{listed}\n"
            "fix the pattern, or give the fleet an answer for such runs: fleet(default=Reply(text=...))"
        )
        return UNMATCHED

    async def run(self, req: RunRequest, emit: EventSink, cancel: asyncio.Event) -> RunOutcome:
        self.requests.append(req)
        run = Run(
            job_id=req.job_id,
            attempt=req.attempt,
            prompt=req.spec.prompt,
            spec=req.spec,
            account=req.account.name,
            resume=req.resume,
            fork=req.fork,
            job_prompt=self._job_prompt(req.job_id) if self._job_prompt is not None else req.spec.prompt,
            _submit=self._submit,
        )
        answer = self.answer_for(run)
        if isinstance(answer, str):
            answer = Reply(text=answer)
        model = req.spec.model or DEFAULT_MODEL
        budget = req.spec.max_budget_usd  # the spec's, or what the tenant and the account have left (the handler's)
        if isinstance(answer, Reply) and budget is not None and usage_of(answer.usage, model).cost_usd > budget:
            # The CLI ends a run whose spend passed --max-budget-usd with `error_max_budget_usd`, its answer or not.
            answer = budget_exhausted(usage=answer.usage)
        started_event = RunStarted(
            account=req.account.name, model=req.spec.model, attempt=req.attempt, reason=req.account_reason
        )
        await emit(started_event.event(req.attempt))
        started = asyncio.get_running_loop().time()
        session = (
            answer.session_id
            if isinstance(answer, Reply) and answer.session_id
            else (req.resume if req.resume and not req.fork else str(uuid.uuid4()))
        )
        if isinstance(answer, Reply):
            outcome = await self._reply(req, answer, session, model, emit)
        else:
            outcome = await self._failure(req, answer, session, model, emit, cancel)
        outcome.duration_s = asyncio.get_running_loop().time() - started
        return outcome

    async def _session(self, req: RunRequest, session: str, emit: EventSink, entries: list[dict[str, Any]]) -> None:
        await emit(SessionStarted(session_id=session).event(req.attempt))
        if req.session_store is not None and entries:
            key = {"project_key": self._project_of(req), "session_id": session}
            await req.session_store.append(key, entries)  # type: ignore[arg-type]

    def _project_of(self, req: RunRequest) -> str:
        """The session-store project key of the run's directory (as delivery.session_planner computes it)."""
        if req.spec.cwd:
            return str(project_key_for_directory(req.spec.cwd))
        return str(project_key_for_directory(default_cwd(runs_under_own_uid(req.spec, self.settings.policy))))

    async def _reply(self, req: RunRequest, reply: Reply, session: str, model: str, emit: EventSink) -> RunOutcome:
        prompt_entry = _entry("user", session, {"role": "user", "content": req.spec.prompt})
        answer_entry = _entry(
            "assistant",
            session,
            {"role": "assistant", "model": model, "content": [{"type": "text", "text": reply.text}]},
        )
        await self._session(req, session, emit, [prompt_entry, answer_entry])
        names: list[str] = []
        for i, call in enumerate(reply.tool_calls):
            name, tool_input, tool_result = _tool_call(call)
            names.append(name)
            use_id = f"toolu_{req.attempt}_{i}"
            await emit(ToolCalled(tool=name, id=use_id, input=json.dumps(tool_input)).event(req.attempt))
            await emit(ToolResult(id=use_id, is_error=False, text=tool_result).event(req.attempt))
        if reply.text:
            await emit(AssistantText(text=reply.text).event(req.attempt))
        usage = usage_of(reply.usage, model)
        result = JobResult(
            text=reply.text,
            structured_output=reply.structured,
            stop_reason="end_turn",
            num_turns=reply.turns,
            duration_ms=1,
            usage=usage,
        )
        await emit(_result_event(req, False, "success", result))
        return RunOutcome(
            result=result, session_id=session, got_result=True, subtype="success", tool_calls=names, first_byte_at=0.0
        )

    async def _failure(
        self, req: RunRequest, failure: Failure, session: str, model: str, emit: EventSink, cancel: asyncio.Event
    ) -> RunOutcome:
        usage = usage_of(failure.usage, model) if failure.usage is not None else Usage()
        if failure.stall is not None:
            return await self._stall(req, failure, session, usage, emit, cancel)
        await self._session(req, session, emit, [_entry("user", session, {"role": "user", "content": req.spec.prompt})])
        if failure.kind == "crash":
            return RunOutcome(
                result=JobResult(usage=usage),
                session_id=session,
                exception=f"ProcessError: {failure.message}",
                exit_code=failure.status,
            )
        outcome = RunOutcome(
            result=JobResult(text=failure.message, usage=usage, num_turns=1, duration_ms=1),
            session_id=session,
            got_result=True,
            is_error=True,
            subtype=failure.subtype,
            api_error_status=failure.status,
        )
        if failure.kind == "rate_limited":
            outcome.assistant_error = "rate_limit"
            if failure.resets_in is not None and req.account.kind == "oauth":
                resets_at = utcnow() + timedelta(seconds=failure.resets_in)
                signal = RateLimitSignal("rejected", resets_at=resets_at, window=failure.window)
                outcome.rate_limits.append(signal)
                limited = RateLimited(
                    status="rejected", window=failure.window, utilization=None, resets_at=resets_at.isoformat()
                )
                await emit(limited.event(req.attempt))
        elif failure.kind == "auth_failed":
            outcome.assistant_error = "authentication_failed"
        elif failure.kind == "overloaded":
            outcome.assistant_error = "server_error"
        await emit(_result_event(req, True, failure.subtype, outcome.result))
        return outcome

    async def _stall(
        self,
        req: RunRequest,
        failure: Failure,
        session: str,
        usage: Usage,
        emit: EventSink,
        cancel: asyncio.Event,
    ) -> RunOutcome:
        timeouts = Timeouts.for_job(req.spec, self.settings)
        outcome = RunOutcome(result=JobResult(usage=usage), session_id=session)
        if failure.stall == "first_byte":
            wait_s, why = min(timeouts.first_byte_s, timeouts.deadline_s), "first_byte"
        else:
            entry = _entry("user", session, {"role": "user", "content": req.spec.prompt})
            await self._session(req, session, emit, [entry])
            outcome.first_byte_at = asyncio.get_running_loop().time()
            if failure.stall == "idle":
                wait_s, why = min(timeouts.idle_s, timeouts.deadline_s), "idle"
            else:
                wait_s, why = timeouts.deadline_s, "deadline"
            if why == "idle" and timeouts.deadline_s <= timeouts.idle_s:
                why = "deadline"
        if why == "first_byte" and timeouts.deadline_s <= timeouts.first_byte_s:
            why = "deadline"
        try:
            await asyncio.wait_for(cancel.wait(), timeout=wait_s)
            why = "cancel"
        except TimeoutError:
            pass
        outcome.stopped_by = why  # type: ignore[assignment]
        await emit(Stopped(reason=why).event(req.attempt))
        return outcome


def _entry(kind: str, session: str, message: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "uuid": str(uuid.uuid4()), "sessionId": session, "message": message}


def _tool_call(call: ToolCall) -> tuple[str, Mapping[str, Any], str]:
    if isinstance(call, str):
        return call, {}, "ok"
    if isinstance(call, tuple):
        return call[0], call[1], "ok"
    return str(call["tool"]), dict(call.get("input") or {}), str(call.get("result", "ok"))


def _result_event(req: RunRequest, is_error: bool, subtype: str, result: JobResult) -> Event:
    return ResultReceived(
        is_error=is_error,
        subtype=subtype,
        num_turns=result.num_turns,
        duration_ms=result.duration_ms,
        cost_usd=result.usage.cost_usd,
        stop_reason=result.stop_reason,
    ).event(req.attempt)
