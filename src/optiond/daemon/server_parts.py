"""What the daemon's modules share: short error texts, the size of a reply's buffers, the
per-thread counters, the refusal raised before any work, and a decoded pricing request on its
way through the shell thread.

:mod:`optiond.daemon.server` (sockets, threads, life cycle, the request loops),
:mod:`optiond.daemon.pricing_ops` (the pricing pipeline) and :mod:`optiond.daemon.control_ops`
(control operations, status and health) import these; this module imports none of them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from typing import Any

from ..costs import Cost
from ..models import Method
from .protocol import Message

log = logging.getLogger("optiond.daemon")

MAX_ERROR_CHARS = 240


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _invalid_details(e: Any) -> dict:
    """The reply fields of an :class:`optiond.models.InvalidInputError`: ``field``, ``row``,
    ``value`` (a number as it is, anything else as short text) and ``reason``."""
    value = e.value if isinstance(e.value, (int, float, bool, type(None))) else _short(e.value)
    return {"field": _short(e.field), "row": e.row, "value": value, "reason": _short(e.reason)}


def _nbytes(buffers: list) -> int:
    return sum(len(b) if isinstance(b, bytes) else memoryview(b).nbytes for b in buffers)


class _Counters:
    """Per-thread counters (each thread owns its own; status adds them up)."""

    def __init__(self) -> None:
        self.by_op: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.errors = 0
        self.auth_failures = 0
        self.malformed = 0
        self.replayed = 0
        self.coalesced = 0
        self.gpu_fallbacks = 0
        self._auth_logged_at = 0.0
        self._auth_unlogged = 0

    def auth_failure(self, reason: str) -> None:
        self.auth_failures += 1
        self._auth_unlogged += 1
        now = time.monotonic()
        if now - self._auth_logged_at >= 1.0:  # at most one line a second, whatever a peer sends
            log.warning("authentication failure: dropped %d message(s) (%s; %d in all)", self._auth_unlogged, reason,
                        self.auth_failures, extra={"event": "auth_failure", "dropped": self._auth_unlogged,
                                                   "reason": reason, "total": self.auth_failures})
            self._auth_logged_at = now
            self._auth_unlogged = 0


class _Refused(Exception):
    """A request refused before any work (draining, a cancelled job id, an unknown job)."""

    def __init__(self, ename: str, message: str, outcome: str = "refused", extra: dict | None = None):
        super().__init__(message)
        self.ename, self.outcome, self.extra = ename, outcome, extra or {}


@dataclasses.dataclass
class _Req:
    """A decoded pricing request on its way through the shell thread."""

    msg: Message
    op: str
    t0: float
    columns: dict
    method: Method
    n: int
    cost: Cost
    deadline: float
    prices: Any = None
    key: bytes | None = None
    row: tuple | None = None
    job_id: str | None = None
