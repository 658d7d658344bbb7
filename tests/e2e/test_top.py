"""`claudeq top` in a pseudo-terminal: a frame names the accounts and the running job; `q` quits."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from claudeq.config.settings import Settings
from claudeq.producer.client import Client
from tests.e2e.conftest import WorkerFactory
from tests.support.procs import run_until
from tests.support.tree import ROOT, tree_env
from tests.support.worker_proc import SimAccount, settings_env

pytestmark = pytest.mark.e2e

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


@pytest.fixture
def accounts() -> list[SimAccount]:
    return [SimAccount("alpha-acct", max_concurrency=2), SimAccount("beta-acct", max_concurrency=2)]


def test_top_renders_accounts_and_a_running_job_and_q_quits(
    settings: Settings, workers: WorkerFactory, client: Client, unique: str
) -> None:
    workers()
    job = client.submit(prompt=f"[[sim: stall 60]] keep running {unique}")
    run_until(lambda: client.get(job.id).status == "running", 30, what="the job running")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 220, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "claudeq.producer.cli", "top", "--interval", "0.5"],
        env=tree_env(**settings_env(settings), TERM="xterm-256color", COLUMNS="220", LINES="60"),
        cwd=ROOT,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    screen = ""
    try:
        deadline = time.monotonic() + 60
        while not all(s in screen for s in ("alpha-acct", "beta-acct", job.id, "running")):
            assert time.monotonic() < deadline, screen[-4000:]
            assert proc.poll() is None, screen[-4000:]
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                screen += ANSI.sub("", os.read(master, 65536).decode(errors="replace"))
        frame = screen[screen.rfind("claudeq top") :]
        assert "alpha-acct" in frame and job.id in frame, frame
        os.write(master, b"q")
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        client.cancel(job.id)
        client.wait(job.id, timeout=30)
        os.close(master)
