"""Running the real bundled Claude Code CLI (through claude-agent-sdk) against an in-process simulator."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions, Message, ResultError, ResultMessage, query

from claudeq.simulator.testing import SimulatorServer

OAUTH = "sk-ant-oat01-integration"
API_KEY = "sk-ant-api03-integration"


@dataclass
class Run:
    """What one CLI run produced: the messages (with arrival times) and the error query() raised, if any."""

    messages: list[Message] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    error: ResultError | None = None

    @property
    def result(self) -> ResultMessage:
        """The run's ResultMessage (there is exactly one)."""
        (result,) = [m for m in self.messages if isinstance(m, ResultMessage)]
        return result

    def of_type(self, kind: type[Any]) -> list[Any]:
        """The messages of one type, in order."""
        return [m for m in self.messages if isinstance(m, kind)]


def cli_env(base_url: str, home: Path, token: str = OAUTH, kind: str = "oauth", **extra: str) -> dict[str, str]:
    """The environment for a CLI run against the simulator: one credential, the other blanked, own config dir."""
    env = {
        "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CODE_OAUTH_TOKEN": token if kind == "oauth" else "",
        "ANTHROPIC_API_KEY": token if kind == "api_key" else "",
        "ANTHROPIC_AUTH_TOKEN": "",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        **extra,
    }
    return env


def options(base_url: str, home: Path, token: str = OAUTH, kind: str = "oauth", **kwargs: Any) -> ClaudeAgentOptions:
    """ClaudeAgentOptions for a plain run (no built-in tools, no machine settings)."""
    env = cli_env(base_url, home, token, kind, **kwargs.pop("env", {}))
    return ClaudeAgentOptions(env=env, tools=[], setting_sources=[], **kwargs)


async def run_cli(prompt: str, opts: ClaudeAgentOptions) -> Run:
    """Drive query() to the end; an error result is kept (query() raises ResultError after it)."""
    run = Run()
    try:
        async for message in query(prompt=prompt, options=opts):
            run.messages.append(message)
            run.times.append(time.monotonic())
    except ResultError as e:
        run.error = e
    return run


@pytest.fixture
def nonce() -> str:
    """Keeps one test's directive counters apart from another's (they are keyed on the message)."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fresh HOME for the CLI."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    """A simulator with no accounts configured (any token is welcome)."""
    with SimulatorServer() as server:
        yield server
