"""`make soak`: the long chaos soak (3,000 jobs by default) on a private Redis with AOF on, printing the table.

    python -m tests.chaos.soak [--jobs N] [--kill-every S] [--redis-restarts N] [--workers N]

Exit status 0 only when every count that must be zero is zero.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.fleet import SoakConfig, run_soak
from tests.support.redis_server import PrivateRedis


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds between worker SIGKILLs (0: none)")
    parser.add_argument("--redis-restarts", type=int, default=3)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--cold", action="store_true", help="a new CLI per run (default: warm CLIs, as workers run)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="claudeq-soak-") as tmp:
        server = PrivateRedis(appendonly=True)
        try:
            config = SoakConfig(
                jobs=args.jobs,
                workers=args.workers,
                concurrency=args.concurrency,
                kill_every_s=args.kill_every or None,
                redis_restarts=args.redis_restarts,
                seed=args.seed,
                warm=not args.cold,
                deadline_s=max(900.0, args.jobs * 3.0),
                log_dir=Path(tmp),
            )
            started = time.monotonic()
            report = run_soak(config, server, progress=lambda line: print(line, flush=True))
        finally:
            server.stop()
    print()
    print(report.table())
    bad = {name: count for name, count in report.zeros().items() if count}
    if bad:
        print(f"\nFAILED after {time.monotonic() - started:.0f} s: {report.problems()}")
        return 1
    print("\nevery count that must be zero is zero")
    return 0


if __name__ == "__main__":
    sys.exit(main())
