"""Reading a run's `$CLAUDEQ_OUTPUTS` (worker/run/outputs.py): regular files by name within the cap; a symlink, a
file with another link and what passes the cap are named, not read."""

from __future__ import annotations

import os
from pathlib import Path

from claudeq.worker.run.outputs import read_outputs


def test_only_plain_files_within_the_cap_are_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not the run's")
    out = tmp_path / "outputs"
    (out / "sub").mkdir(parents=True)
    (out / "a.bin").write_bytes(b"\x00\xff")
    (out / "sub" / "b.txt").write_text("bee")
    (out / "big.txt").write_text("x" * 100)
    (out / "link").symlink_to(secret)
    os.link(secret, out / "hard")
    (out / "dir-link").symlink_to(tmp_path, target_is_directory=True)
    kept, dropped = read_outputs(out, 50)
    assert kept == [("a.bin", b"\x00\xff"), ("sub/b.txt", b"bee")]
    assert sorted(dropped) == ["big.txt", "dir-link", "hard", "link"]


def test_no_folder_means_no_outputs(tmp_path: Path) -> None:
    assert read_outputs(tmp_path / "missing", 10) == ([], [])
