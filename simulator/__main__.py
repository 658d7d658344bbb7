"""`claudeq-sim` / `python -m claudeq.simulator`: serve the simulator until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Generator, Sequence
from types import FrameType
from typing import Any

import uvicorn
from pydantic import ValidationError

from .app import create_app, quiet_dropped_streams
from .config import SimConfig, load_config
from .service import Simulator
from .testing import READY_PREFIX, bind_socket, uvicorn_config

DEFAULT_PORT = 8790
EXIT_OK = 0
EXIT_BAD_CONFIG = 2


class _Server(uvicorn.Server):
    """uvicorn, except that a signal just stops it (uvicorn re-raises it afterwards, which would turn a
    clean SIGTERM stop into a death by signal)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        def stop(sig: int, frame: FrameType | None) -> None:
            if self.should_exit:
                self.force_exit = True  # a second signal: do not wait for open streams
            self.should_exit = True

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def parse_accounts(spec: str) -> list[dict[str, Any]]:
    """`name=token[:kind],…` → account dicts (kind: oauth, the default, or api_key)."""
    accounts = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, token = item.partition("=")
        if not sep or not name or not token:
            raise ValueError(f"--accounts: expected name=token[:kind], got {name or item[:3]!r}…")
        kind = "oauth"
        for suffix in (":oauth", ":api_key"):
            if token.endswith(suffix):
                token, kind = token[: -len(suffix)], suffix[1:]
        accounts.append({"name": name, "token": token, "kind": kind})
    return accounts


def build_config(args: argparse.Namespace) -> SimConfig:
    """The config from --config, with --accounts appended and --seed applied."""
    config = load_config(args.config) if args.config else SimConfig()
    data = config.model_dump()
    for account in data["accounts"]:
        account["token"] = account["token"].get_secret_value()
    if args.accounts:
        data["accounts"] += parse_accounts(args.accounts)
    if args.seed is not None:
        data["seed"] = args.seed
    return SimConfig.model_validate(data)


async def _serve(server: uvicorn.Server, sock: socket.socket, url: str) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn offers no started event
        await asyncio.sleep(0.01)
    if server.started:
        # Scripts wait for exactly this line.
        print(f"{READY_PREFIX}{url}", flush=True)
    await task


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `claudeq-sim`."""
    parser = argparse.ArgumentParser(prog="claudeq-sim", description="Offline Anthropic Messages API simulator.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port (it is printed)")
    parser.add_argument("--config", help="TOML config file (see docs/simulator.md)")
    parser.add_argument("--accounts", help="extra accounts: name=token[:oauth|:api_key],…")
    parser.add_argument("--seed", type=int, help="seed of the fault RNG (overrides the config)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")
    args = parser.parse_args(argv)
    try:
        config = build_config(args)
    except (OSError, ValueError) as e:
        # ValidationError is a ValueError; its text never includes the token values (SecretStr).
        detail = e if not isinstance(e, ValidationError) else str(e).replace("\n", "\n  ")
        print(f"claudeq-sim: bad configuration: {detail}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    quiet_dropped_streams()
    sock = bind_socket(args.host, args.port)
    port = sock.getsockname()[1]
    server = _Server(uvicorn_config(create_app(Simulator(config)), args.log_level, configure_logging=True))
    asyncio.run(_serve(server, sock, f"http://{args.host}:{port}"))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
