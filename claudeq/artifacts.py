"""Files a job produced: what the agent wrote under `$CLAUDEQ_OUTPUTS` in its sandbox, kept by name with the record
(docs/jobs.md#artifacts). The record lists them (`JobRecord.artifacts`); their bytes are a hash of their own."""

from __future__ import annotations

import zlib
from typing import Any

from pydantic import BaseModel

#: The variable a run's CLI (and every command it starts) reads the outputs folder from.
OUTPUTS_VAR = "CLAUDEQ_OUTPUTS"


class Artifact(BaseModel):
    """One kept file: its path under the outputs folder, its size in bytes and its SHA-256 (hex)."""

    name: str
    size: int
    sha256: str


class Artifacts(BaseModel):
    """What the job's last attempt produced: the kept files, and those left out (over the size cap, not a regular
    file)."""

    files: list[Artifact] = []
    dropped: list[str] = []


def pack(data: bytes) -> bytes:
    """A file's bytes as stored."""
    return zlib.compress(data, 6)


def unpack(stored: Any) -> bytes:
    """A stored file's bytes back."""
    return zlib.decompress(stored if isinstance(stored, bytes) else str(stored).encode("latin-1"))
