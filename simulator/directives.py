"""Per-request steering: `[[sim: …]]` directives written in the prompt text.

Grammar: `[[sim: VERB ARG… key=value…]]`. An ARG is a bare word, or a JSON value (object, array or string)
starting with `{`, `[` or `"`; a value after `key=` may be JSON too. Several directives may appear in one
prompt. See docs/simulator.md for the verbs.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

OPEN = "[[sim:"
MAX_TOKENS = 1_000_000  # largest `tokens out=` / `in=` (out is also capped by the request's max_tokens)
MAX_JSON_DEPTH = 100  # nesting allowed in a directive's JSON value
MAX_NESTED = 500  # deepest structured output `structured nested=N` builds (JSON encoders recurse per level)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range")
    return number


# NaN and Infinity (also 1e400) are not JSON: a tool input or structured value carrying one could not be sent back.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
_OPTION = re.compile(r"^([a-z_]+)=(.*)$", re.DOTALL)


class DirectiveError(ValueError):
    """A `[[sim: …]]` directive that cannot be understood (answered as a 400 naming it)."""


@dataclass(frozen=True)
class Gate:
    """Which requests carrying the same message a directive acts on: skip `after`, then act `times` times."""

    after: int = 0
    times: int | None = None  # None: every request from `after` on

    def active(self, seen: int) -> bool:
        """Whether the directive acts on the request that is number `seen` (0-based) with its message."""
        return seen >= self.after and (self.times is None or seen < self.after + self.times)


@dataclass(frozen=True)
class ToolCall:
    """Reply with a tool_use of `name` with `input`."""

    name: str
    input: dict[str, Any]


@dataclass
class Steering:
    """Everything the directives of one message ask for."""

    raw: list[str] = field(default_factory=list)
    tools: list[ToolCall] = field(default_factory=list)
    #: A call the last user message asks to make again (`approved_call`): the reply, before anything else.
    again: ToolCall | None = None
    error: tuple[int, Gate] | None = None
    retry_after: float | None = None  # error 429 retry_after=S: send exactly this retry-after
    no_hint: bool = False  # error 429 retry_after=none: a 429 saying nothing about when to come back
    stall: tuple[float, Gate] | None = None
    delay: tuple[float, Gate] | None = None
    drop: Gate | None = None
    tokens_out: int | None = None
    tokens_in: int | None = None
    text: str | None = None
    structured: Any = None
    has_structured: bool = False


def _depth(value: Any) -> int:
    """How deeply a JSON value nests (iteratively: the value may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _decode(text: str, i: int, what: str) -> tuple[Any, int]:
    try:
        value, end = _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as e:
        raise DirectiveError(f"bad JSON {what}: {e.msg}") from e
    except ValueError as e:  # NaN or Infinity
        raise DirectiveError(f"bad JSON {what}: {e}") from None
    except RecursionError:
        raise DirectiveError(f"bad JSON {what}: nested too deeply") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise DirectiveError(f"bad JSON {what}: nested more than {MAX_JSON_DEPTH} levels")
    return value, end


class _Quoted(str):
    """A JSON string argument: text, never a key=value option even when it looks like one."""

    __slots__ = ()


def _scan(text: str, start: int) -> tuple[list[Any], int, str]:
    """Tokens of the directive whose `[[sim:` is at `start`, the index after its `]]`, and its raw body."""
    i = start + len(OPEN)
    tokens: list[Any] = []
    n = len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            raise DirectiveError(f"unterminated directive: {text[start : start + 60]!r}")
        if text.startswith("]]", i):
            return tokens, i + 2, text[start + len(OPEN) : i].strip()
        if text[i] in '{["':
            value, i = _decode(text, i, f"in directive at {text[i : i + 40]!r}")
            tokens.append(_Quoted(value) if isinstance(value, str) else value)
            continue
        j = i
        while j < n and not text[j].isspace() and not text.startswith("]]", j):
            if text[j] == "=" and j + 1 < n and text[j + 1] in '{["':
                value, end = _decode(text, j + 1, f"value for {text[i:j]!r}")
                tokens.append((text[i:j], value))
                i = end
                break
            j += 1
        else:
            tokens.append(text[i:j])
            i = j


def _number(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DirectiveError(f"{what}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        # inf would wait forever or overflow int(); nan compares false with everything.
        raise DirectiveError(f"{what}: expected a finite number, got {value!r}")
    if number < 0:
        raise DirectiveError(f"{what}: must not be negative")
    return number


def _integer(value: Any, what: str) -> int:
    number = _number(value, what)
    if number != int(number):
        raise DirectiveError(f"{what}: expected a whole number, got {value!r}")
    return int(number)


def _tokens(value: Any, what: str) -> int:
    number = _integer(value, what)
    if number > MAX_TOKENS:
        raise DirectiveError(f"{what}: at most {MAX_TOKENS}, got {value!r}")
    return number


def _split(tokens: list[Any]) -> tuple[str, list[Any], dict[str, Any]]:
    if not tokens or not isinstance(tokens[0], str):
        raise DirectiveError("directive needs a verb, e.g. [[sim: error 529]]")
    positional: list[Any] = []
    options: dict[str, Any] = {}
    for tok in tokens[1:]:
        if isinstance(tok, tuple):
            options[tok[0]] = tok[1]
            continue
        m = _OPTION.match(tok) if isinstance(tok, str) and not isinstance(tok, _Quoted) else None
        if m:
            options[m.group(1)] = m.group(2)
        else:
            positional.append(tok)
    return tokens[0].lower(), positional, options


def _gate(verb: str, options: dict[str, Any]) -> Gate:
    times = options.pop("times", None)
    after = options.pop("after", 0)
    return Gate(
        after=_integer(after, f"{verb} after="),
        times=None if times is None else _integer(times, f"{verb} times="),
    )


def _no_extra(verb: str, positional: list[Any], options: dict[str, Any], allowed_positional: int) -> None:
    if len(positional) > allowed_positional:
        raise DirectiveError(f"{verb}: unexpected argument {positional[allowed_positional]!r}")
    if options:
        raise DirectiveError(f"{verb}: unknown option {next(iter(options))}=")


def _apply(steering: Steering, verb: str, positional: list[Any], options: dict[str, Any]) -> None:
    if verb == "tool":
        if not positional or not isinstance(positional[0], str):
            raise DirectiveError('tool: expected a tool name, e.g. [[sim: tool mcp__calc__add {"a": 2}]]')
        tool_input = positional[1] if len(positional) > 1 else {}
        if not isinstance(tool_input, dict):
            raise DirectiveError("tool: the input must be a JSON object")
        _no_extra(verb, positional, options, 2)
        steering.tools.append(ToolCall(positional[0], tool_input))
    elif verb == "error":
        if not positional:
            raise DirectiveError("error: expected an HTTP status, e.g. [[sim: error 529]]")
        status = _integer(positional[0], "error status")
        if not 400 <= status <= 599:
            raise DirectiveError(f"error: status must be 4xx or 5xx, got {status}")
        gate = _gate(verb, options)
        retry_after = options.pop("retry_after", None)
        _no_extra(verb, positional, options, 1)
        if retry_after is not None:
            if status != 429:
                raise DirectiveError("error: retry_after= only goes with status 429")
            if isinstance(retry_after, str) and retry_after.lower() == "none":
                steering.no_hint = True
            else:
                steering.retry_after = _number(retry_after, "error retry_after=")
        steering.error = (status, gate)
    elif verb in ("stall", "delay"):
        if not positional:
            raise DirectiveError(f"{verb}: expected seconds, e.g. [[sim: {verb} 5]]")
        seconds = _number(positional[0], f"{verb} seconds")
        gate = _gate(verb, options)
        _no_extra(verb, positional, options, 1)
        if verb == "stall":
            steering.stall = (seconds, gate)
        else:
            steering.delay = (seconds, gate)
    elif verb == "drop":
        gate = _gate(verb, options)
        _no_extra(verb, positional, options, 0)
        steering.drop = gate
    elif verb == "tokens":
        out, inp = options.pop("out", None), options.pop("in", None)
        if out is None and inp is None:
            raise DirectiveError("tokens: expected out=N and/or in=N")
        _no_extra(verb, positional, options, 0)
        steering.tokens_out = None if out is None else _tokens(out, "tokens out=")
        steering.tokens_in = None if inp is None else _tokens(inp, "tokens in=")
    elif verb == "text":
        if not positional:
            raise DirectiveError('text: expected the reply text, e.g. [[sim: text "hello"]]')
        _no_extra(verb, [], options, 0)
        steering.text = " ".join(p if isinstance(p, str) else json.dumps(p) for p in positional)
    elif verb == "structured":
        nested = options.pop("nested", None)
        if nested is not None:
            _no_extra(verb, positional, options, 0)
            depth = _integer(nested, "structured nested=")
            if not 1 <= depth <= MAX_NESTED:
                raise DirectiveError(f"structured nested=: from 1 to {MAX_NESTED}, got {nested!r}")
            value: Any = 0
            for _ in range(depth):
                value = {"a": value}
            steering.structured, steering.has_structured = value, True
            return
        if len(positional) != 1:
            raise DirectiveError('structured: expected one JSON value, e.g. [[sim: structured {"x": 1}]]')
        _no_extra(verb, positional, options, 1)
        steering.structured, steering.has_structured = positional[0], True
    else:
        raise DirectiveError(
            f"unknown directive {verb!r} (known: tool, error, stall, delay, drop, tokens, text, structured)"
        )


def parse_directives(text: str) -> Steering:
    """Parse every `[[sim: …]]` in `text` into one Steering; raise DirectiveError on a malformed one."""
    steering = Steering()
    pos = text.find(OPEN)
    while pos != -1:
        tokens, end, raw = _scan(text, pos)
        verb, positional, options = _split(tokens)
        _apply(steering, verb, positional, options)
        steering.raw.append(raw)
        pos = text.find(OPEN, end)
    return steering


def strip_directives(text: str) -> str:
    """`text` without its directives (unparseable ones are left in place)."""
    out, pos = [], 0
    start = text.find(OPEN)
    while start != -1:
        try:
            _, end, _ = _scan(text, start)
        except DirectiveError:
            break
        out.append(text[pos:start])
        pos = end
        start = text.find(OPEN, end)
    out.append(text[pos:])
    return "".join(out)


#: A prompt asking for a call again with an exact input: what claudeq's resumed session is told once a person
#: approved the call its run parked on (docs/jobs.md#tool-approval).
APPROVED_CALL = re.compile(r"Call (\S+) again now with exactly this input: (\{.*\})\s*$", re.S)


def approved_call(prompt_text: str) -> ToolCall | None:
    """The call a prompt asks to make again with an exact input (answered as a model that follows instructions
    would: with that call), or None."""
    m = APPROVED_CALL.search(prompt_text)
    if m is None:
        return None
    try:
        value = json.loads(m.group(2))
    except ValueError:
        return None
    return ToolCall(m.group(1), value) if isinstance(value, dict) else None
