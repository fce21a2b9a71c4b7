"""A bounded cache of pricing replies, keyed by the canonical request.

Pricing is deterministic: the same columns and method give the same numbers, so a repeated
request (a sheet recalculated without a change, two traders asking for the same chain) is
answered from here without pricing. :func:`request_key` makes the key from the request as the
daemon understands it, not from its bytes on the wire: column order, message ids, client
sessions, ``force``, ``deadline_s`` and ``job_id`` do not matter; values, dtypes and the
method do. A request with ``force: true`` skips the lookup (and refreshes the entry).

The cache holds the reply's content and buffers (never the signature, which covers a header
that differs per request) and is bounded both in entries and in bytes (least recently used
out first); a reply larger than an eighth of the byte budget is not kept. Thread-safe.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

from .protocol import is_array_spec, packb

#: content fields that say how to run a request, not what to price (not part of the key)
NON_KEY_FIELDS = frozenset({"force", "deadline_s", "job_id", "progress"})


def _update(h: "hashlib._Hash", value: Any, buffers: Sequence[bytes]) -> None:
    if is_array_spec(value):
        desc = value["__nd__"]
        if isinstance(desc, list) and len(desc) == 3 and type(desc[2]) is int and 0 <= desc[2] < len(buffers):
            h.update(packb(["nd", desc[0], desc[1]]))
            h.update(buffers[desc[2]])
            return
    h.update(packb(value))


def request_key(op: str, content: dict, buffers: Sequence[bytes], raw_content: bytes | None = None) -> bytes | None:
    """A 20-byte key for the request ``op`` with ``content`` and ``buffers``; None when the
    content is not a map of the expected shape (such a request is not cached).

    With ``raw_content`` (the content frame as received) and no run option (``force``,
    ``deadline_s``, ``job_id``) in the content, the key is the hash of that frame and the
    buffers: :class:`optiond.daemon.client.Client` writes the content canonically (columns in
    sorted order, every method field, options in the metadata), so this is the canonical key at
    the cost of one hash. Otherwise columns and method fields are taken in sorted order and
    arrays by dtype, shape and bytes.
    """
    h = hashlib.blake2b(op.encode(), digest_size=20)
    if raw_content is not None and NON_KEY_FIELDS.isdisjoint(content):
        h.update(raw_content)
        for b in buffers:
            h.update(b)
        return h.digest()
    h.update(b"\x01")  # a different key space from the raw one
    try:
        for part in ("columns", "method"):
            section = content.get(part)
            if section is None:
                h.update(b"\x00")
                continue
            if not isinstance(section, dict):
                return None
            h.update(part.encode())
            for name in sorted(section):
                h.update(packb(name))
                _update(h, section[name], buffers)
        for name in sorted(k for k in content if k not in ("columns", "method") and k not in NON_KEY_FIELDS):
            h.update(packb(name))
            _update(h, content[name], buffers)
    except (TypeError, ValueError):  # unsortable or unpackable: a malformed request, never cached
        return None
    return h.digest()


@dataclass
class Entry:
    """A cached reply: its ``content`` map and ``buffers``, with what the metrics need."""

    content: dict
    buffers: list
    model: str = ""
    device: str = ""
    nbytes: int = field(default=0)

    def __post_init__(self) -> None:
        if not self.nbytes:
            self.nbytes = 512 + sum(len(b) if isinstance(b, bytes) else memoryview(b).nbytes for b in self.buffers)


class ReplyCache:
    """LRU of :class:`Entry` bounded by ``max_entries`` and ``max_bytes``.

    Args:
        max_entries: entries kept (0 disables the cache).
        max_bytes: bytes of buffers kept.
    """

    def __init__(self, max_entries: int = 4096, max_bytes: int = 256 << 20):
        self.max_entries = int(max_entries)
        self.max_bytes = int(max_bytes)
        self._d: OrderedDict[bytes, Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> Entry | None:
        """The entry for ``key`` (now most recently used), counting a hit or a miss."""
        with self._lock:
            e = self._d.get(key)
            if e is None:
                self.misses += 1
                return None
            self._d.move_to_end(key)
            self.hits += 1
            return e

    def put(self, key: bytes, entry: Entry) -> bool:
        """Keep ``entry`` (replacing any under ``key``); False when it is too large to keep."""
        if self.max_entries <= 0 or entry.nbytes > self.max_bytes // 8:
            return False
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._d[key] = entry
            self._bytes += entry.nbytes
            while len(self._d) > self.max_entries or self._bytes > self.max_bytes:
                _, e = self._d.popitem(last=False)
                self._bytes -= e.nbytes
        return True

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._bytes = 0

    @property
    def hit_ratio(self) -> float:
        """Hits over lookups so far (0.0 before the first lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def stats(self) -> dict[str, Any]:
        """``{entries, bytes, max_entries, max_bytes, hits, misses, hit_ratio}``."""
        with self._lock:
            return {"entries": len(self._d), "bytes": self._bytes, "max_entries": self.max_entries,
                    "max_bytes": self.max_bytes, "hits": self.hits, "misses": self.misses,
                    "hit_ratio": self.hit_ratio}


__all__ = ["ReplyCache", "Entry", "request_key", "NON_KEY_FIELDS"]
