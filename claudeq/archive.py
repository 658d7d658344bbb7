"""The transcript archive: where finished jobs' bulk history goes when the fleet has somewhere better than Redis.

Off unless `CLAUDEQ_ARCHIVE_URL` names a store: `postgresql://…` (psycopg, the `archive` extra) for a fleet, or
`sqlite:///path/archive.db` (the standard library) for one host. `CLAUDEQ_ARCHIVE_AFTER_S` after a job ends, a
worker moves the transcripts of the job's sessions (their stored elements byte for byte, the uuids they were
deduplicated by, the folded summary) and the record's compacted events and result (when longer than
`RESULT_KEPT_CHARS`) out of Redis, and a coding job's patch too large for its record goes there when its attempt
ends (`put_patch`, read back by `Client.diff`); what reads them (`RedisSessionStore.load`/`list_sessions`/…, hence
resume and the SDK's session listing; `JobStore.read_events`, `get` and `list_jobs`; `claudeq transcript`) read the
archive transparently. Moves are idempotent: an element is keyed by its digest within its transcript, so a move
retried after a crash between the archive's commit and the Redis delete adds nothing. Rows keep the retention the Redis
keys had (`expires_at`); the archiver deletes expired ones. Why, and the layout:
docs/architecture.md#the-transcript-archive.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from claudeq.errors import ConfigError

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS claudeq_transcript_elements (
        prefix TEXT NOT NULL, project_key TEXT NOT NULL, session_id TEXT NOT NULL, subpath TEXT NOT NULL,
        seq BIGINT NOT NULL, digest TEXT NOT NULL, element {blob} NOT NULL,
        PRIMARY KEY (prefix, project_key, session_id, subpath, digest))""",
    """CREATE TABLE IF NOT EXISTS claudeq_sessions (
        prefix TEXT NOT NULL, project_key TEXT NOT NULL, session_id TEXT NOT NULL, mtime BIGINT NOT NULL,
        summary TEXT, ids TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (prefix, project_key, session_id))""",
    """CREATE TABLE IF NOT EXISTS claudeq_job_history (
        prefix TEXT NOT NULL, job_id TEXT NOT NULL, events {blob}, result TEXT, expires_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (prefix, job_id))""",
    """CREATE TABLE IF NOT EXISTS claudeq_job_patches (
        prefix TEXT NOT NULL, job_id TEXT NOT NULL, patch {blob} NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (prefix, job_id))""",
]


@dataclass
class ArchivedSession:
    """A session as the archive holds it: each transcript's elements (subpath '' is the main one) in order."""

    project_key: str
    session_id: str
    mtime: int
    summary: str | None
    transcripts: dict[str, list[bytes]] = field(default_factory=dict)
    #: per transcript, the entry uuids its elements hold: one JSON text and a newline each (the Redis `ids` string)
    ids: dict[str, str] = field(default_factory=dict)


class Archive(Protocol):
    """What the session and job stores need of an archive (sync: callers run it off their event loop)."""

    def put_session(self, prefix: str, session: ArchivedSession, expires_at: float) -> None: ...
    def get_session(self, prefix: str, project_key: str, session_id: str) -> ArchivedSession | None: ...
    def sessions(self, prefix: str, project_key: str) -> list[tuple[str, int, str | None]]: ...
    def projects_of(self, prefix: str, session_id: str) -> list[str]: ...
    def delete_session(self, prefix: str, project_key: str, session_id: str, subpath: str | None = None) -> None: ...
    def retain_session(self, prefix: str, session_id: str, expires_at: float) -> None: ...
    def put_job(
        self, prefix: str, job_id: str, events: bytes | None, result: str | None, expires_at: float
    ) -> None: ...
    def get_events(self, prefix: str, job_id: str) -> bytes | None: ...
    def get_results(self, prefix: str, job_ids: Sequence[str]) -> dict[str, str]: ...
    def put_patch(self, prefix: str, job_id: str, patch: bytes, expires_at: float) -> None: ...
    def get_patch(self, prefix: str, job_id: str) -> bytes | None: ...
    def purge(self, prefix: str, now: float | None = None) -> int: ...
    def close(self) -> None: ...


class SqlArchive:
    """The archive on a SQL database: PostgreSQL (psycopg) or SQLite. One short transaction per call, on a
    connection of the calling thread's own (SQLite) or one shared under a lock (psycopg)."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.url = url
        self.kind = "sqlite" if parsed.scheme == "sqlite" else "postgresql"
        if parsed.scheme not in ("sqlite", "postgresql", "postgres"):
            raise ConfigError("archive_url", f"{parsed.scheme or url!r} is not a store (postgresql://… or sqlite:///…)")
        self._path = unquote(parsed.path) if self.kind == "sqlite" else ""
        if self.kind == "sqlite" and not self._path:
            raise ConfigError("archive_url", "sqlite:///path names the database file")
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pg: Any = None
        if self.kind == "postgresql":
            try:
                import psycopg  # noqa: F401  (the `archive` extra)
            except ImportError as exc:
                needs = "a PostgreSQL archive needs psycopg (pip install 'claudeq[archive]')"
                raise ConfigError("archive_url", needs) from exc
        try:
            with self._tx() as cur:
                for statement in SCHEMA:
                    cur.execute(statement.format(blob="BLOB" if self.kind == "sqlite" else "BYTEA"))
        except Exception as exc:  # the driver's errors name the host, never the URL's password
            raise ConfigError("archive_url", f"the archive cannot be opened: {type(exc).__name__}: {exc}") from None

    # ---- connections -----------------------------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """A cursor in a transaction committed at the end of the block (rolled back on an error)."""
        if self.kind == "sqlite":
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = sqlite3.connect(self._path, timeout=30)
            with conn:
                yield _Cursor(conn.cursor(), "?")
            return
        import psycopg

        with self._lock:
            if self._pg is None or self._pg.closed:
                self._pg = psycopg.connect(self.url, autocommit=True)  # transactions are explicit
            try:
                with self._pg.transaction(), self._pg.cursor() as cur:
                    yield _Cursor(cur, "%s")
            except psycopg.OperationalError:
                self._pg.close()  # reconnect on the next call
                raise

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        if self._pg is not None:
            self._pg.close()

    # ---- sessions --------------------------------------------------------------------------------------------

    def put_session(self, prefix: str, session: ArchivedSession, expires_at: float) -> None:
        """Add a session's elements after those archived before (one already here, by digest, is skipped) and
        merge its uuids, summary, mtime and expiry."""
        key = (prefix, session.project_key, session.session_id)
        with self._tx() as cur:
            cur.execute(
                "SELECT ids, mtime, expires_at FROM claudeq_sessions WHERE prefix = ? AND project_key = ? "
                "AND session_id = ?",
                key,
            )
            row = cur.fetchone()
            stored, mtime, expiry = (json.loads(row[0]), int(row[1]), float(row[2])) if row else ({}, 0, 0.0)
            for subpath, text in session.ids.items():
                known = set(stored.get(subpath, "").split("\n"))
                fresh = "".join(line + "\n" for line in text.split("\n") if line and line not in known)
                stored[subpath] = stored.get(subpath, "") + fresh
            ids = json.dumps(stored)
            for subpath, elements in session.transcripts.items():
                cur.execute(
                    "SELECT COALESCE(MAX(seq), -1) FROM claudeq_transcript_elements WHERE prefix = ? AND "
                    "project_key = ? AND session_id = ? AND subpath = ?",
                    (*key, subpath),
                )
                seq = int(cur.fetchone()[0]) + 1
                for element in elements:
                    cur.execute(
                        "INSERT INTO claudeq_transcript_elements VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        (*key, subpath, seq, hashlib.sha256(element).hexdigest(), element),
                    )
                    seq += 1
            summary = session.summary
            if row is not None:
                cur.execute(
                    "UPDATE claudeq_sessions SET ids = ?, mtime = ?, summary = COALESCE(?, summary), expires_at = ? "
                    "WHERE prefix = ? AND project_key = ? AND session_id = ?",
                    (ids, max(mtime, session.mtime), summary, max(expiry, expires_at), *key),
                )
            else:
                cur.execute(
                    "INSERT INTO claudeq_sessions VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (*key, session.mtime, summary, ids, expires_at),
                )

    def get_session(self, prefix: str, project_key: str, session_id: str) -> ArchivedSession | None:
        key = (prefix, project_key, session_id)
        with self._tx() as cur:
            cur.execute(
                "SELECT mtime, summary, ids FROM claudeq_sessions WHERE prefix = ? AND project_key = ? AND "
                "session_id = ? AND expires_at > ?",
                (*key, time.time()),
            )
            row = cur.fetchone()
            if row is None:
                return None
            cur.execute(
                "SELECT subpath, element FROM claudeq_transcript_elements WHERE prefix = ? AND project_key = ? "
                "AND session_id = ? ORDER BY subpath, seq",
                key,
            )
            transcripts: dict[str, list[bytes]] = {}
            for subpath, element in cur.fetchall():
                transcripts.setdefault(subpath, []).append(bytes(element))
        return ArchivedSession(project_key, session_id, int(row[0]), row[1], transcripts, json.loads(row[2]))

    def sessions(self, prefix: str, project_key: str) -> list[tuple[str, int, str | None]]:
        """(session id, mtime, summary JSON) of a project's archived sessions."""
        with self._tx() as cur:
            cur.execute(
                "SELECT session_id, mtime, summary FROM claudeq_sessions WHERE prefix = ? AND project_key = ? "
                "AND expires_at > ? ORDER BY mtime",
                (prefix, project_key, time.time()),
            )
            return [(str(r[0]), int(r[1]), r[2]) for r in cur.fetchall()]

    def projects_of(self, prefix: str, session_id: str) -> list[str]:
        with self._tx() as cur:
            cur.execute(
                "SELECT project_key FROM claudeq_sessions WHERE prefix = ? AND session_id = ? AND expires_at > ?",
                (prefix, session_id, time.time()),
            )
            return sorted(str(r[0]) for r in cur.fetchall())

    def delete_session(self, prefix: str, project_key: str, session_id: str, subpath: str | None = None) -> None:
        """Delete one archived transcript (`subpath`), or the whole session (None)."""
        key = (prefix, project_key, session_id)
        with self._tx() as cur:
            where = "prefix = ? AND project_key = ? AND session_id = ?"
            if subpath is not None:
                cur.execute(f"DELETE FROM claudeq_transcript_elements WHERE {where} AND subpath = ?", (*key, subpath))
                return
            cur.execute(f"DELETE FROM claudeq_transcript_elements WHERE {where}", key)
            cur.execute(f"DELETE FROM claudeq_sessions WHERE {where}", key)

    def retain_session(self, prefix: str, session_id: str, expires_at: float) -> None:
        """Keep an archived session (under every project key) at most until `expires_at`."""
        with self._tx() as cur:
            cur.execute(
                "UPDATE claudeq_sessions SET expires_at = ? WHERE prefix = ? AND session_id = ? AND expires_at > ?",
                (expires_at, prefix, session_id, expires_at),
            )

    # ---- job history: a finished job's events and result ----------------------------------------------------

    def put_job(self, prefix: str, job_id: str, events: bytes | None, result: str | None, expires_at: float) -> None:
        """A finished job's packed events and its result JSON (either None: not moved), replacing what was there."""
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO claudeq_job_history VALUES (?, ?, ?, ?, ?) ON CONFLICT (prefix, job_id) DO UPDATE SET "
                "events = COALESCE(excluded.events, claudeq_job_history.events), "
                "result = COALESCE(excluded.result, claudeq_job_history.result), expires_at = excluded.expires_at",
                (prefix, job_id, events, result, expires_at),
            )

    def get_events(self, prefix: str, job_id: str) -> bytes | None:
        with self._tx() as cur:
            cur.execute(
                "SELECT events FROM claudeq_job_history WHERE prefix = ? AND job_id = ? AND expires_at > ?",
                (prefix, job_id, time.time()),
            )
            row = cur.fetchone()
        return bytes(row[0]) if row and row[0] is not None else None

    def get_results(self, prefix: str, job_ids: Sequence[str]) -> dict[str, str]:
        """The archived results (JSON) of those of `job_ids` that have one, in one query."""
        if not job_ids:
            return {}
        marks = ", ".join("?" for _ in job_ids)
        with self._tx() as cur:
            cur.execute(
                f"SELECT job_id, result FROM claudeq_job_history WHERE prefix = ? AND job_id IN ({marks}) "
                "AND result IS NOT NULL AND expires_at > ?",
                (prefix, *job_ids, time.time()),
            )
            return {str(r[0]): str(r[1]) for r in cur.fetchall()}

    # ---- coding jobs' patches too large for their record ----------------------------------------------------

    def put_patch(self, prefix: str, job_id: str, patch: bytes, expires_at: float) -> None:
        """A coding job's whole patch (zlib), replacing its previous attempt's."""
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO claudeq_job_patches VALUES (?, ?, ?, ?) ON CONFLICT (prefix, job_id) DO UPDATE SET "
                "patch = excluded.patch, expires_at = excluded.expires_at",
                (prefix, job_id, patch, expires_at),
            )

    def get_patch(self, prefix: str, job_id: str) -> bytes | None:
        with self._tx() as cur:
            cur.execute(
                "SELECT patch FROM claudeq_job_patches WHERE prefix = ? AND job_id = ? AND expires_at > ?",
                (prefix, job_id, time.time()),
            )
            row = cur.fetchone()
        return bytes(row[0]) if row else None

    # ---- retention -------------------------------------------------------------------------------------------

    def purge(self, prefix: str, now: float | None = None) -> int:
        """Delete what outlived its retention; -> sessions, job histories and patches deleted."""
        now = time.time() if now is None else now
        with self._tx() as cur:
            cur.execute(
                "DELETE FROM claudeq_transcript_elements WHERE prefix = ? AND (project_key, session_id) IN "
                "(SELECT project_key, session_id FROM claudeq_sessions WHERE prefix = ? AND expires_at <= ?)",
                (prefix, prefix, now),
            )
            cur.execute("DELETE FROM claudeq_sessions WHERE prefix = ? AND expires_at <= ?", (prefix, now))
            gone = max(0, int(cur.rowcount))
            cur.execute("DELETE FROM claudeq_job_history WHERE prefix = ? AND expires_at <= ?", (prefix, now))
            gone += max(0, int(cur.rowcount))
            cur.execute("DELETE FROM claudeq_job_patches WHERE prefix = ? AND expires_at <= ?", (prefix, now))
            return gone + max(0, int(cur.rowcount))

    def drop(self, prefix: str) -> None:
        """Delete everything under `prefix` (tests, a fleet taken down)."""
        with self._tx() as cur:
            tables = ("claudeq_transcript_elements", "claudeq_sessions", "claudeq_job_history", "claudeq_job_patches")
            for table in tables:
                cur.execute(f"DELETE FROM {table} WHERE prefix = ?", (prefix,))


class _Cursor:
    """A DB-API cursor whose statements are written with `?` placeholders whatever the driver's style."""

    def __init__(self, cursor: Any, style: str) -> None:
        self._cursor = cursor
        self._style = style

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        if self._style != "?":
            sql = sql.replace("?", self._style)
        self._cursor.execute(sql, params)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cursor.fetchall())

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)


#: A result at most this long (its JSON) stays in the record when the job's history moves: reading it back costs
#: the archive a query, and a short one costs Redis little.
RESULT_KEPT_CHARS = 512

_archives: dict[str, SqlArchive] = {}
_archives_lock = threading.Lock()


def _close_archives() -> None:
    """Close the process's archives on its way out (registered with atexit): left open, psycopg finds its connection
    open when the interpreter drops it and warns on every exit."""
    with _archives_lock:
        archives = list(_archives.values())
        _archives.clear()
    for archive in archives:
        with contextlib.suppress(Exception):  # exiting: a connection already broken has nothing left to close
            archive.close()


atexit.register(_close_archives)


def open_archive(url: str | None) -> SqlArchive | None:
    """The archive at `url` (one per URL in a process), or None when none is configured."""
    if not url:
        return None
    with _archives_lock:
        archive = _archives.get(url)
        if archive is None:
            archive = _archives[url] = SqlArchive(url)
        return archive
