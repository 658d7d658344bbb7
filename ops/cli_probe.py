"""Run the Claude CLI bundled in claude-agent-sdk once against an in-process simulator and print what it did.

Re-measures the CLI facts claudeq depends on (docs/cli-behaviour.md): the messages the SDK yields with their
arrival times, how long `interrupt()` and `disconnect()` take, the CLI's peak memory and CPU, and every request the
simulator received. Examples:

    .venv/bin/python ops/cli_probe.py 'hello [[sim: error 529]]'
    .venv/bin/python ops/cli_probe.py 'hello [[sim: error 529]]' --env CLAUDE_CODE_MAX_RETRIES=2
    .venv/bin/python ops/cli_probe.py 'hello [[sim: stall 20]]' --partial --stop-after 4

Each run gets a fresh HOME and config dir, no built-in tools, no machine settings, one credential (the other
blanked), `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` and `CLAUDE_CODE_MAX_RETRIES=0`, unless `--env` says
otherwise. No real account and no network are needed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, StreamEvent

from claudeq.simulator.testing import SimulatorServer
from claudeq.worker.run.launcher import bundled_cli, wrapper_path

#: What is printed of each message type (StreamEvents print their event type).
SHOWN: dict[str, tuple[str, ...]] = {
    "SystemMessage": ("subtype",),
    "AssistantMessage": ("model", "error"),
    "RateLimitEvent": ("rate_limit_info",),
    "ResultMessage": (
        "subtype",
        "is_error",
        "api_error_status",
        "terminal_reason",
        "num_turns",
        "total_cost_usd",
        "result",
    ),
}
OAUTH_TOKEN = "sk-ant-oat01-probe"
API_KEY = "sk-ant-api03-probe"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="cli_probe", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("prompt", help="the prompt; simulator directives such as [[sim: error 529]] steer the reply")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the CLI's environment (repeat)")
    parser.add_argument("--kind", default="oauth", choices=["oauth", "api_key"], help="the credential the CLI uses")
    parser.add_argument("--sim", default="{}", help="simulator configuration as JSON (docs/simulator.md)")
    parser.add_argument("--partial", action="store_true", help="include_partial_messages=True")
    parser.add_argument("--stop-after", type=float, help="stop the run this many seconds after it started")
    parser.add_argument("--no-interrupt", action="store_true", help="stop with disconnect() alone")
    parser.add_argument("--wrapper", action="store_true", help="start the CLI through the parent-death wrapper")
    parser.add_argument("--tools", default="", help="built-in tools the CLI gets, comma-separated (default: none)")
    parser.add_argument(
        "--otlp",
        action="store_true",
        help="turn the CLI's telemetry on (traces, under a made-up TRACEPARENT) to an OTLP/HTTP receiver on loopback "
        "and print the spans it decoded (docs/cli-behaviour.md#telemetry; needs the dev install)",
    )
    return parser.parse_args(argv)


def cli_env(args: argparse.Namespace, base_url: str, home: str) -> dict[str, str]:
    """The CLI's environment for one probe run."""
    env = {
        "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CODE_OAUTH_TOKEN": OAUTH_TOKEN if args.kind == "oauth" else "",
        "ANTHROPIC_API_KEY": API_KEY if args.kind == "api_key" else "",
        "ANTHROPIC_AUTH_TOKEN": "",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "HOME": home,
        "CLAUDE_CONFIG_DIR": str(Path(home) / ".claude"),
    }
    for item in args.env:
        name, _, value = item.partition("=")
        env[name] = value
    if args.wrapper:
        env["CLAUDEQ_CLAUDE_BIN"] = str(bundled_cli())
        env["CLAUDEQ_PYTHON"] = sys.executable
    return env


#: The repository root (--otlp imports the tests' receiver from it).
REPO = Path(__file__).resolve().parents[1]
#: The parent the CLI's spans get with --otlp (a W3C traceparent).
PROBE_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def probe(args: argparse.Namespace) -> None:
    """One run, printed as it happens (with --otlp, inside a loopback OTLP receiver)."""
    if not args.otlp:
        await probe_run(args, {})
        return
    sys.path.insert(0, str(REPO))  # tests.support
    from tests.support.otlp_receiver import OtlpReceiver

    with OtlpReceiver() as receiver:
        telemetry = {
            "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
            "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "TRACEPARENT": PROBE_TRACEPARENT,
        }
        await probe_run(args, telemetry)
        await asyncio.sleep(1)  # the CLI exports as it exits
        print("otlp paths:", sorted(set(receiver.received.paths)))
        for span in receiver.spans():
            print(f"span: {span.name} trace {span.trace_id} parent {span.parent_span_id or '-'}")
            print("  attributes:", json.dumps(span.attributes, default=str))


async def probe_run(args: argparse.Namespace, extra_env: dict[str, str]) -> None:
    """The run itself; `extra_env` goes over the probe's CLI environment (--env still wins)."""
    with SimulatorServer(json.loads(args.sim)) as sim, tempfile.TemporaryDirectory() as home:
        env = cli_env(args, sim.base_url, home)
        env.update({k: v for k, v in extra_env.items() if not any(e.startswith(k + "=") for e in args.env)})
        options = ClaudeAgentOptions(
            env=env,
            tools=[t for t in args.tools.split(",") if t],
            allowed_tools=[t for t in args.tools.split(",") if t],
            setting_sources=[],
            include_partial_messages=args.partial,
            cli_path=wrapper_path() if args.wrapper else None,
        )
        started = time.monotonic()
        client = ClaudeSDKClient(options)
        await client.connect(args.prompt)

        async def consume() -> None:
            async for message in client.receive_response():
                name = type(message).__name__
                detail: dict[str, object] = {f: getattr(message, f, None) for f in SHOWN.get(name, ())}
                if isinstance(message, StreamEvent):
                    detail = {"event": message.event.get("type")}
                print(f"{time.monotonic() - started:8.3f}s {name} {detail}", flush=True)

        reader = asyncio.create_task(consume())
        if args.stop_after is None:
            await reader
        else:
            await asyncio.sleep(args.stop_after)
            if not args.no_interrupt:
                mark = time.monotonic()
                await client.interrupt()
                print(f"interrupt() took {time.monotonic() - mark:.3f}s", flush=True)
                await asyncio.wait({reader}, timeout=2)
            reader.cancel()
        mark = time.monotonic()
        await client.disconnect()
        print(f"disconnect() took {time.monotonic() - mark:.3f}s")
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"CLI: peak RSS {children.ru_maxrss / 1024:.0f} MiB, CPU {children.ru_utime + children.ru_stime:.2f}s")
        for entry in sim.requests():
            print("request:", {k: entry.get(k) for k in ("kind", "stream", "status", "outcome", "tool_names")})
        for entry in sim.wire():  # every HTTP request that reached the simulator, whatever its path
            print("wire:", entry["method"], entry["path"] + ("?" + entry["query"] if entry["query"] else ""))


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    asyncio.run(probe(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
