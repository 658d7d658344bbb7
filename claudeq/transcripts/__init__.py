"""Transcripts: the mirrored sessions of the CLI's runs in Redis (`RedisSessionStore`) and how their entries are
stored (compressed, self-describing elements). The public face of the package: import from here, never from its `_`
modules (docs/architecture.md#who-imports-whom).

- `_store.py`: `RedisSessionStore`, the SDK's `SessionStore` on Redis (and the archive);
- `_codec.py`: the element forms of a transcript's list (`encode`, `decode`).
"""

from __future__ import annotations

from ._codec import ZLIB_LEVEL, ZSTD_LEVEL, ZSTD_MAGIC, Codec, decode, encode, numbered, without_copies
from ._store import ARCHIVED_IDS_S, CAS_RETRIES, RedisSessionStore, SessionStoreContention

__all__ = [
    "ARCHIVED_IDS_S",
    "CAS_RETRIES",
    "ZLIB_LEVEL",
    "ZSTD_LEVEL",
    "ZSTD_MAGIC",
    "Codec",
    "RedisSessionStore",
    "SessionStoreContention",
    "decode",
    "encode",
    "numbered",
    "without_copies",
]
