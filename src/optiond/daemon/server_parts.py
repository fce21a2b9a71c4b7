"""What the daemon's modules share: short error texts, the size of a reply's buffers, the
per-thread counters, the one function that sends a reply (:func:`answer`), the refusal
raised before any work, a decoded pricing request on its way through the shell thread, and
the replies kept for copies of their requests.

:mod:`optiond.daemon.server` (sockets, threads, life cycle, the request loops),
:mod:`optiond.daemon.pricing` (the pricing pipeline) and :mod:`optiond.daemon.control_ops`
(control operations, status and health) import these; this module imports none of them.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter, OrderedDict
from typing import Any

from ..costs import Cost
from ..models import Method
from .protocol import FUTURE_SLACK_S, Message, send_frames

log = logging.getLogger("optiond.daemon")

MAX_ERROR_CHARS = 240
#: pricing replies kept for retries: at most this many, of at most this many bytes in all
REPLY_CACHE_ENTRIES = 256
REPLY_CACHE_BYTES = 64 * 1024 * 1024


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


def answer(sock: Any, frames: list, metrics: Any, counters: _Counters | None, op: str, model: str, device: str,
           outcome: str, t0: float) -> float:
    """Send one reply, observed first: every request the daemon answers is answered here
    (a copy of one answered already gets the first reply again, counted as ``replayed``).

    The request is counted (``counters.outcomes``, which ``status`` adds up, and the
    ``requests_total`` counter and ``request_duration_seconds`` histogram of ``metrics``)
    *before* its frames are handed to the socket, so whatever a client does once it holds
    the reply (a scrape of ``/metrics``, a ``status``) already sees it, however the threads
    are scheduled.

    Args:
        sock: the socket the reply leaves by (a ROUTER, or the outbox a thread hands its
            replies to); None: nobody to answer (a message without a return address), the
            request is only counted.
        frames: the routing identities, then the signed message's frames.
        metrics: the daemon's :class:`optiond.daemon.metrics.Metrics`.
        counters: the calling thread's counters (None: a thread without any).
        op, model, device, outcome: the labels of the observation.
        t0: when the request was received (``time.perf_counter``).

    Returns:
        Seconds from ``t0`` to the observation (the latency observed).

    Raises:
        zmq.ZMQError: the send failed (the request stays counted: it was answered as far as
        the daemon goes).
    """
    if counters is not None:
        counters.outcomes[outcome] += 1
    dt = time.perf_counter() - t0
    metrics.observe(op, model, device, outcome, dt)
    if sock is not None:
        send_frames(sock, frames)
    return dt


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


class ReplyMemory:
    """The replies kept for copies of their requests (same session and ``msg_id``: a client's
    retry, or a captured message replayed within the replay window), which get the first
    reply again instead of acting twice. Any thread.

    Two rules of keeping: the reply of a state-changing request (:meth:`keep_once`) for the
    replay window, after which its copies are refused as stale anyway (a date may be at most
    FUTURE_SLACK_S ahead of the clock); a pricing reply, or a submit's acceptance
    (:meth:`keep`), among the newest :data:`REPLY_CACHE_ENTRIES` of at most
    :data:`REPLY_CACHE_BYTES` in all.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = float(window_s)
        self._once: OrderedDict[tuple[str, str], tuple[float, list]] = OrderedDict()
        self._priced: OrderedDict[tuple[str, str], tuple[list, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[str, str]) -> bool:
        """Whether a pricing reply is kept for ``key`` (no lock: a look at a dict)."""
        return key in self._priced

    def once(self, key: tuple[str, str]) -> list | None:
        """The frames of the state-changing request ``key`` answered already, or None."""
        with self._lock:
            first = self._once.get(key)
        return None if first is None else first[1]

    def priced(self, key: tuple[str, str]) -> list | None:
        """The frames of the pricing request ``key`` answered already, or None."""
        with self._lock:
            kept = self._priced.get(key)
        return None if kept is None else kept[0]

    def keep_once(self, key: tuple[str, str], frames: list) -> None:
        """Keep the reply of a state-changing request for the replay window; older ones are forgotten."""
        now = time.monotonic()
        with self._lock:
            self._once[key] = (now, frames)
            while self._once and (len(self._once) > REPLY_CACHE_ENTRIES * 64
                                  or next(iter(self._once.values()))[0] < now - self.window_s - FUTURE_SLACK_S - 2.0):
                self._once.popitem(last=False)

    def keep(self, key: tuple[str, str], frames: list, size: int = 0) -> None:
        """Keep a reply for a retry of its request; ``size`` is its buffers' bytes (the other
        frames are small)."""
        if size > REPLY_CACHE_BYTES // 4:
            return
        size += 1024
        with self._lock:
            self._priced[key] = (frames, size)
            self._bytes += size
            while len(self._priced) > REPLY_CACHE_ENTRIES or self._bytes > REPLY_CACHE_BYTES:
                _, (_, old) = self._priced.popitem(last=False)
                self._bytes -= old
