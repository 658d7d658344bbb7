"""Measure what the bundled CLI does with the SDK's `can_use_tool` callback.

The findings: docs/cli-behaviour.md#tool-approval-can_use_tool.

Each case runs the CLI once against an in-process simulator that scripts one `Bash` call (`echo <marker>`), with
`Bash` offered but not pre-allowed, so the CLI asks the callback before running it:

    .venv/bin/python ops/approval_probe.py allow            # allow with the input as asked
    .venv/bin/python ops/approval_probe.py update           # allow with another command (updated input)
    .venv/bin/python ops/approval_probe.py deny             # deny with a message
    .venv/bin/python ops/approval_probe.py wait --hold 75   # answer allow after 75 s
    .venv/bin/python ops/approval_probe.py resume           # stop the CLI while the request is pending, then
                                                            # resume the session and see what the CLI does

It prints the permission requests the callback saw, the SDK messages, what the tool printed (a marker file the
command appends to) and the requests the simulator received (their last message, where a tool result shows).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    UserMessage,
)
from claude_agent_sdk.types import PermissionResult, ToolPermissionContext

from claudeq.simulator.testing import SimulatorServer

OAUTH_TOKEN = "sk-ant-oat01-probe"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="approval_probe", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("case", choices=["allow", "update", "deny", "wait", "resume", "resume-at"])
    parser.add_argument("--hold", type=float, default=5.0, help="seconds the callback waits before answering")
    parser.add_argument("--write", action="store_true", help="script a Write of the marker file instead of Bash")
    parser.add_argument("--mode", default=None, help="the permission mode (e.g. acceptEdits)")
    return parser.parse_args(argv)


def options(
    home: str, base_url: str, ask: Any, resume: str | None = None, tool: str = "Bash", mode: str | None = None
) -> ClaudeAgentOptions:
    """A run with `tool` offered but not pre-allowed: the CLI asks `ask` before each use (unless `mode` says
    otherwise)."""
    return ClaudeAgentOptions(
        env={
            "ANTHROPIC_BASE_URL": base_url,
            "CLAUDE_CODE_OAUTH_TOKEN": OAUTH_TOKEN,
            "ANTHROPIC_API_KEY": "",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "HOME": home,
            "CLAUDE_CONFIG_DIR": str(Path(home) / ".claude"),
        },
        tools=[tool],
        allowed_tools=[],
        permission_mode=mode,  # type: ignore[arg-type]
        setting_sources=[],
        can_use_tool=ask,
        cwd=home,
        resume=resume,
    )


async def run(args: argparse.Namespace) -> None:
    """One case, printed as it happens."""
    nonce = uuid.uuid4().hex[:8]
    with SimulatorServer({}) as sim, tempfile.TemporaryDirectory() as home:
        marker = Path(home) / "ran.txt"
        command = f"echo {nonce} >> {marker}"
        tool = "Write" if args.write else "Bash"
        call = {"file_path": str(marker), "content": nonce} if args.write else {"command": command}
        prompt = f"probe {nonce} [[sim: tool {tool} {json.dumps(call)}]]"
        asked: list[tuple[str, dict[str, Any], str | None]] = []
        pending = asyncio.Event()
        started = time.monotonic()

        async def ask(tool: str, tool_input: dict[str, Any], context: ToolPermissionContext) -> PermissionResult:
            asked.append((tool, tool_input, context.tool_use_id))
            print(f"{time.monotonic() - started:8.3f}s can_use_tool {tool} {tool_input} id={context.tool_use_id}")
            pending.set()
            if args.case == "deny":
                return PermissionResultDeny(message="denied by the probe: not today")
            if args.case == "update":
                return PermissionResultAllow(updated_input={"command": f"echo updated-{nonce} >> {marker}"})
            if args.case in ("wait", "resume", "resume-at"):
                await asyncio.sleep(args.hold if args.case == "wait" else 3600)
            return PermissionResultAllow()

        session_id: str | None = None

        async def consume(client: ClaudeSDKClient) -> None:
            nonlocal session_id
            async for message in client.receive_response():
                name = type(message).__name__
                shown: object = ""
                if isinstance(message, AssistantMessage | UserMessage):
                    shown = (
                        [
                            type(b).__name__ + ":" + str(getattr(b, "content", getattr(b, "text", "")))[:120]
                            for b in message.content
                        ]
                        if isinstance(message.content, list)
                        else message.content
                    )
                if isinstance(message, ResultMessage):
                    session_id = message.session_id
                    shown = {"subtype": message.subtype, "is_error": message.is_error, "result": message.result}
                print(f"{time.monotonic() - started:8.3f}s {name} {shown}", flush=True)

        client = ClaudeSDKClient(options(home, sim.base_url, ask, tool=tool, mode=args.mode))
        await client.connect(prompt)
        reader = asyncio.create_task(consume(client))
        at = args.case == "resume-at"
        if args.case not in ("resume", "resume-at"):
            await reader
            await client.disconnect()
        else:
            await pending.wait()
            await asyncio.sleep(1)
            files = sorted(str(p.relative_to(home)) for p in (Path(home) / ".claude").rglob("*.jsonl"))
            print("transcripts:", files)
            session_id = Path(files[0]).stem if files else None
            mark = time.monotonic()
            await client.interrupt()
            print(f"interrupt() while pending took {time.monotonic() - mark:.3f}s", flush=True)
            await asyncio.wait({reader}, timeout=3)
            reader.cancel()
            await client.disconnect()
            resume_at: str | None = None
            for path in (Path(home) / ".claude").rglob("*.jsonl"):
                for line in path.read_text().splitlines():
                    entry = json.loads(line)
                    content = (entry.get("message") or {}).get("content")
                    if at and entry.get("type") == "assistant" and resume_at is None:
                        resume_at = entry.get("uuid")
                    print("transcript:", entry.get("type"), json.dumps(content)[:200])
            print(f"--- resume {session_id} at {resume_at} with the prompt 'go on {nonce}'")
            args.case = "allow"
            opts = options(home, sim.base_url, ask, resume=session_id)
            opts.resume_session_at = resume_at
            client = ClaudeSDKClient(opts)
            await client.connect(f"go on {nonce}")
            await consume(client)
            await client.disconnect()
        print("asked:", len(asked), "times")
        print("tool ran:", marker.read_text().splitlines() if marker.exists() else "never")
        for entry in sim.requests():
            print(
                "request:",
                entry.get("outcome"),
                [
                    (m.get("role"), str(m.get("text"))[:90])
                    for m in entry["messages"]
                    if not str(m.get("text")).startswith("# Environment")
                ],
            )


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    asyncio.run(run(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
