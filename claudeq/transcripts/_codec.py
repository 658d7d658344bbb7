"""How a mirrored transcript's entries are stored in their Redis list: one element per `append` batch, compressed.

An element is self-describing by its first byte, so a list may mix the forms (a fleet upgrading mid-conversation
keeps resuming sessions written before, and a worker whose codec setting differs still reads every element):

- `{`: one entry as JSON text, the uncompressed form (`session_codec = "none"`, and everything stored before
  transcripts were compressed);
- the zstd frame magic (`28 b5 2f fd`): a zstd frame of a JSON array of entries (`"zstd"`);
- a zlib header (`78 ..`): a zlib stream of a JSON array of entries (`"zlib"`).

A compressed payload is either that array or `{"e": entries, "r": [[index, start_line], ...]}`: Claude Code's
transcript keeps a file the Read tool returned twice, raw in `toolUseResult.file.content` (for its UI) and
numbered (`12<TAB>line`) in the tool result the model saw. When that tool result is exactly the raw copy numbered
from `start_line` and some text after it, entry `index` keeps only that text after it, and the numbered copy is
rebuilt from the raw one on load; anything else is stored as it came. Entries read back as the JSON they were
appended as (same values, same key order), so `load` returns exactly what was appended. Why, and the codecs
measured: docs/architecture.md#what-a-job-keeps-in-redis.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Literal

Codec = Literal["zstd", "zlib", "none"]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: zstd level 9: -12 costs three times the CPU for 1% less; zlib level 6, its default (bench/bench_weight.py).
ZSTD_LEVEL = 9
ZLIB_LEVEL = 6


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _numbered_text(entry: Any) -> str | None:
    """The text of an entry's one tool result, when that is all its message holds."""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or len(content) != 1 or not isinstance(content[0], dict):
        return None
    block = content[0]
    text = block.get("content")
    return text if block.get("type") == "tool_result" and isinstance(text, str) else None


def numbered(raw: str, start: int) -> str:
    """`raw`'s lines numbered from `start` as the Read tool shows them to the model (`12<TAB>line`)."""
    return "\n".join(f"{n}\t{line}" for n, line in enumerate(raw.split("\n"), start))


def without_copies(entries: list[Any]) -> Any:
    """The payload of a batch: the entries, each Read result's numbered copy left out where it can be rebuilt."""
    slim: list[Any] = []
    rebuilt: list[list[int]] = []
    for i, entry in enumerate(entries):
        result = entry.get("toolUseResult") if isinstance(entry, dict) else None
        file = result.get("file") if isinstance(result, dict) else None
        raw = file.get("content") if isinstance(file, dict) else None
        start = file.get("startLine") if isinstance(file, dict) else None
        text = _numbered_text(entry) if isinstance(raw, str) and raw else None
        if text is None or not isinstance(raw, str) or not isinstance(start, int) or isinstance(start, bool):
            slim.append(entry)
            continue
        lines = numbered(raw, start)
        if not text.startswith(lines):
            slim.append(entry)
            continue
        block = {**entry["message"]["content"][0], "content": text[len(lines) :]}  # what follows the lines
        slim.append({**entry, "message": {**entry["message"], "content": [block]}})
        rebuilt.append([i, start])
    return {"e": slim, "r": rebuilt} if rebuilt else entries


def _with_copies(payload: Any) -> list[Any]:
    """The entries of a decoded payload, numbered copies put back in their place."""
    if isinstance(payload, list):
        return payload
    entries: list[Any] = payload["e"]
    for i, start in payload["r"]:
        entry = entries[i]
        block = entry["message"]["content"][0]
        block["content"] = numbered(entry["toolUseResult"]["file"]["content"], start) + block["content"]
    return entries


def encode(entries: list[Any], codec: Codec) -> list[bytes | str]:
    """The list elements storing `entries` (one batch): one compressed element, or one JSON text per entry."""
    if codec == "none":
        return [_dumps(e) for e in entries]
    raw = _dumps(without_copies(entries)).encode()
    if codec == "zstd":
        import zstandard

        return [zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)]
    return [zlib.compress(raw, ZLIB_LEVEL)]


def decode(elements: list[bytes] | list[str] | list[bytes | str]) -> list[Any]:
    """The entries stored in `elements` (a whole list, in order), whatever form each element has."""
    out: list[Any] = []
    for item in elements:
        data = item if isinstance(item, bytes) else str(item).encode()
        if data[:1] == b"{":
            out.append(json.loads(data))
        elif data[:4] == ZSTD_MAGIC:
            import zstandard

            out.extend(_with_copies(json.loads(zstandard.ZstdDecompressor().decompress(data))))
        elif data[:1] == b"\x78":
            out.extend(_with_copies(json.loads(zlib.decompress(data))))
        else:
            raise ValueError(f"transcript element of unknown form (first bytes {data[:4]!r})")
    return out
