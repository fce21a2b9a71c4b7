"""Jobs: large requests split into chunks and priced across the daemon's ranks.

A request whose estimated work is more than a few milliseconds (and every ``submit``) becomes a
:class:`Job`. The :class:`JobManager`'s thread splits it into chunks of at least
:data:`MIN_CHUNK_S` seconds of single-core work, shrinking towards the end of the job (guided
self-scheduling, :func:`guided_works`, so the slots finish within about one small chunk of each
other: with four equal chunks the slower rank's last chunk is the tail; BENCHMARKS.md gives
the parallel efficiency of each), and keeps every slot busy: one
slot is a thread of the front end itself (rank 0 prices too), the others are the MPI worker
ranks (``mpi4py.futures``). Each option is priced by the same kernel whatever chunk it falls
in, so the numbers are those of one in-process call, bit for bit, on any number of ranks.

While a job runs its progress (fraction of work done, ETA) is published on the daemon's PUB
socket (topic ``progress.<job_id>``), at most every :data:`PROGRESS_EVERY_S` and at each change
of state: ``queued``, ``running``, ``done``, ``failed``, ``cancelled``.

CPU chunks are also at most :data:`MAX_CHUNK_S` of single-core work, so that a cancelled job
frees its slots soon; on GPUs each slot gets one chunk (a GPU prices thousands of options at
once, and every further chunk costs a dispatch and a kernel launch).

A job ends in exactly one of these ways, and only then is its requester answered:

* ``done``: every chunk priced; the whole result, never a part of one;
* ``failed``: a chunk raised. An input error of the whole table fails the job at once with
  that error; any other exception runs the chunk once more, on rank 0, first;
* ``cancelled``: :meth:`JobManager.cancel` (the control channel's ``cancel``), daemon stopping,
  or a job with a lease (:attr:`Job.lease_s`) that its client stopped renewing (its error
  reply's ``why`` says which: ``request``, ``stopping`` or ``lease``);
* ``deadline``: the job ran past its deadline (the rest of its chunks are dropped).

A chunk that does not come back within :data:`HUNG_CHUNK_FACTOR` times its estimate (and at
least :data:`HUNG_CHUNK_MIN_S`) is run again on rank 0 and its rank is counted as lost.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
import logging
import secrets
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import runctl
from ..costs import Cost
from ..models import InvalidInputError, Method, per_row
from . import pool, wire

log = logging.getLogger("optiond.daemon.jobs")

MIN_CHUNK_S = 0.010
#: chunks of each kind of slot whose speed is remembered (for GPU jobs' shares)
SPEED_MEMORY = 4
#: longest chunk on a CPU (single-core estimate): bounds how long a cancelled job keeps a slot
MAX_CHUNK_S = 0.25
CHUNKS_PER_SLOT = 4
MAX_CHUNKS = 512
PROGRESS_EVERY_S = 0.1
HUNG_CHUNK_FACTOR = 50.0
HUNG_CHUNK_MIN_S = 60.0
#: runs of one chunk before its job fails (the first, and once again on rank 0)
MAX_CHUNK_TRIES = 1
#: how long finished ``submit`` jobs wait for their ``result`` (and how many are kept)
KEEP_FINISHED_S = 600.0
KEEP_FINISHED = 256
#: how long a cancelled job id is remembered (a request that arrives later with it is refused)
CANCELLED_MEMORY_S = 30.0

FINAL_STATES = frozenset({"done", "failed", "cancelled", "deadline"})


@dataclass
class Waiter:
    """A client waiting for a job's reply: where to send it and what it answers."""

    identities: list[bytes]
    parent: bytes
    reply_type: str
    session: str
    msg_id: str
    received: float
    expires: float = float("inf")


@dataclass
class Lease:
    """The lease of a request answered off the job queue (a ``chain``): its client's session,
    the lease in seconds and until when it holds (``time.monotonic()``); the client's
    ``renew`` heartbeat moves that on (:meth:`renew`), and the request's work stops at its next
    safe point once :meth:`lapsed` (:mod:`optiond.runctl`)."""

    client: str
    seconds: float
    until: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        self.until = max(self.until, time.monotonic() + self.seconds)

    def lapsed(self) -> bool:
        return time.monotonic() > self.until


@dataclass
class Job:
    """One chunked request (see the module docstring). Fields set by the server:

    Attributes:
        id: the job id clients see (their own ``job_id`` label when they gave one).
        op: ``"price"`` or ``"implied_vol"``.
        kind: ``"request"`` (a price/implied_vol request waiting for its answer) or
            ``"submit"`` (answered with the id; the result is fetched with ``result``).
        columns, method, prices: what to price (columns scalars or (n,) arrays).
        cost: the estimate; ``deadline``: ``time.monotonic()`` after which the job stops.
    """

    id: str
    op: str
    kind: str
    columns: dict
    method: Method
    cost: Cost
    deadline: float
    prices: Any = None
    client: str = ""
    msg_id: str = ""
    cache_key: bytes | None = None
    weights: np.ndarray | None = None
    key: str = field(default_factory=lambda: secrets.token_hex(6))
    state: str = "queued"
    submitted: float = field(default_factory=time.monotonic)
    started: float | None = None
    finished: float | None = None
    waiters: list[Waiter] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # filled by the manager
    chunks: list[tuple[int, int, float]] = field(default_factory=list)
    pending: deque = field(default_factory=deque)
    done_work: float = 0.0
    done_rows: int = 0
    total_work: float = 0.0
    retried: dict[int, int] = field(default_factory=dict)
    result: dict | None = None
    error: tuple[str, str, dict] | None = None
    cancel_reason: str | None = None
    reply: tuple[dict, list] | None = None
    devices: dict[str, int] = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    pids: set = field(default_factory=set)
    #: fraction done of the chunks running on rank 0's thread that report from inside (MLMC)
    partial: dict[int, float] = field(default_factory=dict)
    #: per chunk ``[where, dispatched, collected, pricing seconds]`` and, for a chunk priced on
    #: rank 0's host, ``began, ended`` there; times in seconds after :attr:`t0` (the job's
    #: submission, ``time.perf_counter``): the job's timeline
    timeline: dict[int, list] = field(default_factory=dict)
    t0: float = field(default_factory=time.perf_counter)
    _last_progress: float = 0.0
    #: a followed job's lease (seconds; None: none): unless its client renews it (:meth:`renew`:
    #: the client's ``renew`` heartbeat, or a ``result`` ask) the job is cancelled at
    #: :attr:`lease_until` (``time.monotonic()``)
    lease_s: float | None = None
    lease_until: float = float("inf")
    #: why the job was cancelled (the error reply's ``why``): ``request``, ``stopping``, ``lease``
    cancel_why: str = "request"

    def renew(self, until: float) -> None:
        """The client renewed this job's lease and waits on the daemon until ``until``
        (``time.monotonic()``): keep the job until ``lease_s`` after that."""
        if self.lease_s is not None:
            self.lease_until = max(self.lease_until if self.lease_until != float("inf") else 0.0,
                                   until + self.lease_s)

    @property
    def n(self) -> int:
        return self.cost.n

    @property
    def fraction(self) -> float:
        if self.state == "done":
            return 1.0
        if self.total_work <= 0:
            return 0.0
        partial = sum(f * self.chunks[i][2] for i, f in list(self.partial.items()))
        return min(1.0, (self.done_work + partial) / self.total_work)

    def eta_s(self, capacity: float) -> float | None:
        """Seconds left: from the progress so far, else from the estimate."""
        if self.state in FINAL_STATES:
            return 0.0
        f = self.fraction
        if self.started is not None and f > 0.0:
            return (time.monotonic() - self.started) * (1.0 - f) / f
        return self.cost.cpu_s / max(capacity, 1.0)

    def summary(self, capacity: float = 1.0) -> dict[str, Any]:
        """The job as ``jobs`` and progress events show it (plain types only)."""
        now = time.monotonic()
        eta = self.eta_s(capacity)
        return {"job_id": self.id, "msg_id": self.msg_id, "client": self.client, "op": self.op, "kind": self.kind,
                "state": self.state, "n": self.n, "model": self.cost.model, "done_rows": self.done_rows,
                "fraction": round(self.fraction, 6), "eta_s": None if eta is None else round(eta, 3),
                "elapsed_s": round(now - (self.started or self.submitted), 3),
                "chunks": len(self.chunks), "chunks_done": self.chunks_done,
                "error": self.error[1] if self.error else None}

    #: chunks per pricing slot: CHUNKS_PER_SLOT on CPUs; 1 on GPUs, where a chunk takes
    #: milliseconds and each more one costs a dispatch and a kernel launch
    chunks_per_slot: int = CHUNKS_PER_SLOT
    _inflight: int = 0
    chunks_done: int = 0
    part_diagnostics: dict = field(default_factory=dict)

    def merged_diagnostics(self) -> dict:
        """The chunks' diagnostics as one request's: lists with one item per row (in every
        chunk) joined in row order, maps keyed by row number shifted to the job's rows, anything
        else from the first chunk."""
        parts = [(self.chunks[i], self.part_diagnostics[i]) for i in sorted(self.part_diagnostics)]
        complete = len(parts) == len(self.chunks)
        out: dict = {}
        for key in dict.fromkeys(k for _, d in parts for k in d):
            values = [((a, b), d.get(key)) for (a, b, _), d in parts]
            if complete and all(isinstance(v, list) and len(v) == b - a for (a, b), v in values):
                out[key] = [x for _, v in values for x in v]
            elif all(isinstance(v, dict) and all(isinstance(r, (int, np.integer)) for r in v) for _, v in values):
                out[key] = {int(r) + a: x for (a, _), v in values for r, x in v.items()}
            else:
                out[key] = next(v for _, v in values if v is not None)
        return out


def split(n: int, total_work: float, weights: np.ndarray | None, chunk_work: float) -> list[tuple[int, int, float]]:
    """Rows ``[0, n)`` cut into contiguous chunks of about ``chunk_work`` each.

    Args:
        n: rows.
        total_work: the job's work.
        weights: per-row relative work (None: equal).
        chunk_work: target work per chunk.

    Returns:
        ``[(start, stop, work), ...]`` covering every row once, in order.
    """
    k = int(min(max(1, round(total_work / chunk_work)) if chunk_work > 0 else 1, n, MAX_CHUNKS))
    if k <= 1:
        return [(0, n, total_work)]
    if weights is None:
        edges = np.linspace(0, n, k + 1).round().astype(np.int64)
        share = total_work / n
        return [(int(a), int(b), (b - a) * share) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    cum = np.cumsum(weights, dtype=np.float64)
    scale = total_work / cum[-1]
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, k) / k, side="right")
    edges = np.unique(np.concatenate([[0], np.clip(cuts, 1, n - 1), [n]]))
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        w = cum[b - 1] - (cum[a - 1] if a > 0 else 0.0)
        out.append((int(a), int(b), float(w * scale)))
    return out


def guided_works(total_work: float, slots: int, min_work: float, max_work: float) -> list[float]:
    """Chunk sizes of guided self-scheduling (Polychronopoulos & Kuck 1987, IEEE Trans. Comput.
    C-36(12), where a chunk is ``1/P`` of the remaining work; here, for a margin against
    uneven ranks, each chunk is ``1 / (2 slots)`` of the work still unassigned), clamped to
    ``[min_work, max_work]``, so chunks shrink towards the end of a job and the slots finish
    within about one small chunk of each other (equal chunks leave the slowest slot's last
    chunk as the tail).

    Returns:
        the chunk works, in order, summing to ``total_work``.
    """
    out: list[float] = []
    left = float(total_work)
    while left > 0 and len(out) < MAX_CHUNKS - 1:
        w = min(max(left / (2 * max(slots, 1)), min_work), max_work, left)
        if left - w < 0.5 * min_work:  # do not leave a crumb
            w = left
        out.append(w)
        left -= w
    if left > 0:
        out.append(left)
    return out


def slot_shares(total_work: float, slots: int, local_speed: float | None, worker_speed: float | None
                ) -> list[float]:
    """The work of each slot's one chunk of a GPU job: the MPI workers' chunks first (they are
    dispatched first), rank 0's last, all in proportion to the slots' measured speeds: work
    per second from a chunk's dispatch to its result's arrival at rank 0, so that a worker's
    transfers and rank 0's serving and gathering are part of its slot's speed and every
    chunk comes back at about the same time (with speeds of pricing time alone, rank 0 idles
    while the workers' results travel). Equal shares until both
    speeds are known; the ratio is clamped to [0.5, 1.5]."""
    ratio = 1.0
    if local_speed and worker_speed:
        ratio = min(1.5, max(0.5, local_speed / worker_speed))
    unit = total_work / (slots - 1 + ratio)
    return [unit] * (slots - 1) + [total_work - unit * (slots - 1)]


def split_works(n: int, total_work: float, weights: np.ndarray | None, works: list[float]
                ) -> list[tuple[int, int, float]]:
    """Rows ``[0, n)`` cut into contiguous chunks of about the given ``works`` (in order),
    by per-row ``weights`` (None: equal); chunks that would be empty are merged away.

    Returns:
        ``[(start, stop, work), ...]`` covering every row once, in order.
    """
    if len(works) <= 1 or n <= 1:
        return [(0, n, total_work)]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    cum = np.cumsum(w)
    scale = total_work / cum[-1]
    targets = np.cumsum(works[:-1]) / scale
    cuts = np.searchsorted(cum, targets, side="left") + 1
    edges = np.unique(np.concatenate([[0], np.clip(cuts, 1, n - 1), [n]]))
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        out.append((int(a), int(b), float((cum[b - 1] - (cum[a - 1] if a > 0 else 0.0)) * scale)))
    return out


class SparseColumn:
    """A job's per-row string column (status, error) gathered from its chunks' sparse parts
    (:func:`optiond.daemon.wire.sparse`): only the rows that differ from the default."""

    def __init__(self) -> None:
        self._parts: list[tuple[int, np.ndarray, list]] = []

    def add(self, start: int, rows: np.ndarray, values: list) -> None:
        """A chunk's part: ``rows`` relative to the chunk, which starts at row ``start``."""
        if len(rows):
            self._parts.append((start, np.asarray(rows, dtype=np.int64) + start, list(values)))

    def rows_values(self) -> tuple[np.ndarray, list]:
        """All the rows that differ (ascending) and their values."""
        parts = sorted(self._parts, key=lambda p: p[0])
        rows = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, dtype=np.int64)
        return rows, [v for p in parts for v in p[2]]


def _slice_columns(columns: dict, a: int, b: int, n: int) -> dict:
    out = {}
    for k, v in columns.items():
        if per_row(k, v, n):
            out[k] = v[a:b]
        else:
            out[k] = v
    return out


def _slice_method(method: Method, a: int, b: int, n: int) -> Method:
    if np.ndim(method.steps) == 1 and np.shape(method.steps)[0] == n:
        return dataclasses.replace(method, steps=np.asarray(method.steps)[a:b])
    return method


class JobManager:
    """Runs jobs on the front end's own pricing thread and the MPI workers.

    Args:
        executor: an :class:`mpi4py.futures.MPIPoolExecutor` (from ``MPICommExecutor``) or None.
        workers: the worker ranks' info (from :func:`optiond.daemon.pool.bootstrap`).
        on_event: ``on_event(job, final)`` after each state change or progress step (publish);
            ``final`` when the job has ended (answer its waiters, count it).
        local_rank, local_size: rank 0's place on its host (pins its pricing thread's GPU and
            threads).
        max_queued: jobs accepted and unfinished at most.
        max_inflight_bytes: memory of the jobs accepted and unfinished at most.
    """

    def __init__(self, on_event: Callable[["Job", bool], None], *, executor: Any = None,
                 workers: list[dict] | None = None, local_rank: int = 0, local_size: int = 1,
                 max_queued: int = 64, max_inflight_bytes: int = 1 << 62):
        self._on_event = on_event
        self._executor = executor
        self.workers = list(workers or [])
        self._mpi_capacity = len(self.workers) if executor is not None else 0
        self.workers_lost = 0
        self._local = cf.ThreadPoolExecutor(1, thread_name_prefix="optiond-pricer", initializer=pool.configure_rank,
                                            initargs=(local_rank, local_size))
        self.max_queued = max_queued
        self.max_inflight_bytes = max_inflight_bytes
        self._cv = threading.Condition()
        self._queue: deque[Job] = deque()      # accepted, chunks not all dispatched
        self._active: dict[str, Job] = {}      # key -> job not finished
        self._finished: dict[str, Job] = {}    # key -> finished job kept for ``result``
        self._by_id: dict[str, list[str]] = {}  # job id -> keys, newest last
        self._cancelled_ids: dict[str, float] = {}
        self._local_queue: deque[tuple[Job, int]] = deque()  # chunks to run again, on rank 0
        self._inflight: dict[cf.Future, tuple[Job, int, str, float]] = {}
        self._mpi_inflight = 0
        self._local_busy = False
        self._stop = False
        self._ids = itertools.count(1)
        self.counts = {"done": 0, "failed": 0, "cancelled": 0, "deadline": 0}
        self.chunk_reruns = 0
        #: measured speeds (work per second, dispatch to result) of the last SPEED_MEMORY
        #: chunks of rank 0's slot ("local") and of the workers ("mpi") on one-chunk-per-slot
        #: (GPU) jobs; the median of each splits the next such job (robust to a cold start, and
        #: to rank 0's speed, which varies with what else its process does)
        self._speeds: dict[str, deque] = {}
        self._thread = threading.Thread(target=self._run, name="optiond-jobs", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public (any thread)

    @property
    def slots(self) -> int:
        """Pricing slots: rank 0's thread plus the MPI workers still trusted."""
        return 1 + self._mpi_capacity

    def new_id(self) -> str:
        return f"job-{next(self._ids)}-{secrets.token_hex(3)}"

    def is_cancelled_id(self, job_id: str) -> bool:
        """Whether ``job_id`` was cancelled in the last :data:`CANCELLED_MEMORY_S` seconds."""
        t = self._cancelled_ids.get(job_id)
        return t is not None and time.monotonic() < t

    def submit(self, job: Job) -> None:
        """Accept ``job`` (it starts as soon as a slot is free).

        Raises:
            LimitExceeded: too many jobs or too much memory already accepted.
        """
        from ..limits import LimitExceeded

        with self._cv:
            if self._stop:
                raise RuntimeError("the daemon is stopping")
            if len(self._active) >= self.max_queued:
                raise LimitExceeded("max_queued_jobs", len(self._active) + 1, self.max_queued,
                                    f"the daemon has {len(self._active)} jobs queued or running (limit "
                                    f"{self.max_queued}); try again when some finish")
            held = sum(j.cost.bytes for j in self._active.values())
            if held + job.cost.bytes > self.max_inflight_bytes:
                raise LimitExceeded("max_inflight_bytes", held + job.cost.bytes, self.max_inflight_bytes,
                                    f"the jobs accepted hold about {held / 2**20:.0f} MiB; this one needs "
                                    f"{job.cost.bytes / 2**20:.0f} MiB more than the daemon allows "
                                    f"({self.max_inflight_bytes / 2**20:.0f} MiB); try again later")
            capacity = self.slots
            job.total_work = max(job.cost.work, 1e-9)
            if job.chunks_per_slot > 1 and job.cost.cpu_s > 0:  # CPUs: guided chunks, 10 ms .. MAX_CHUNK_S
                per_s = job.total_work / job.cost.cpu_s
                max_s = max(MAX_CHUNK_S, job.cost.cpu_s / MAX_CHUNKS)
                job.chunks = split_works(job.n, job.total_work, job.weights,
                                         guided_works(job.total_work, capacity, MIN_CHUNK_S * per_s, max_s * per_s))
            else:  # GPUs: one chunk per slot (of at least MIN_CHUNK_S)
                chunk_s = max(MIN_CHUNK_S, job.cost.cpu_s / (capacity * job.chunks_per_slot))
                chunk_work = job.total_work * chunk_s / job.cost.cpu_s if job.cost.cpu_s > 0 else job.total_work
                job.chunks = split(job.n, job.total_work, job.weights, chunk_work)
                if len(job.chunks) == capacity > 1 and job.chunks_per_slot == 1:
                    speed = {k: statistics.median(v) for k, v in self._speeds.items() if v}
                    works = slot_shares(job.total_work, capacity, speed.get("local"), speed.get("mpi"))
                    job.chunks = split_works(job.n, job.total_work, job.weights, works)
            job.pending = deque(range(len(job.chunks)))
            self._active[job.key] = job
            self._by_id.setdefault(job.id, []).append(job.key)
            self._queue.append(job)
            self._cv.notify()
        self._emit(job, False)

    def run_local(self, fn: Callable[..., Any], *args: Any, timeout: float = 300.0) -> Any:
        """Run ``fn(*args)`` on rank 0's pricing thread (the one that owns its GPU) and wait."""
        return self.submit_local(fn, *args).result(timeout=timeout)

    def submit_local(self, fn: Callable[..., Any], *args: Any) -> cf.Future:
        """Queue ``fn(*args)`` for rank 0's pricing thread; its future (cancel it to drop the
        work while it still waits)."""
        return self._local.submit(fn, *args)

    def add_finished(self, job: Job) -> None:
        """Keep a job that needed no pricing (a ``submit`` answered from the cache) for ``result``."""
        job.finished = time.monotonic()
        with self._cv:
            self.counts[job.state] = self.counts.get(job.state, 0) + 1
            self._finished[job.key] = job
            self._by_id.setdefault(job.id, []).append(job.key)

    def find(self, job_id: str) -> Job | None:
        """The newest job with this id (running or finished and kept)."""
        with self._cv:
            for key in reversed(self._by_id.get(job_id, ())):
                job = self._active.get(key) or self._finished.get(key)
                if job is not None:
                    return job
        return None

    def cancel(self, job_id: str, reason: str = "cancelled by request") -> list[Job]:
        """Cancel every unfinished job with this id; the id is remembered for
        :data:`CANCELLED_MEMORY_S` so that a request still on its way is refused too.

        Returns:
            The jobs cancelled (empty when none was running).
        """
        with self._cv:
            self._cancelled_ids[job_id] = time.monotonic() + CANCELLED_MEMORY_S
            if len(self._cancelled_ids) > 4096:
                now = time.monotonic()
                self._cancelled_ids = {k: t for k, t in self._cancelled_ids.items() if t > now}
            jobs = [self._active[k] for k in self._by_id.get(job_id, ()) if k in self._active]
            for job in jobs:
                job.cancel_reason = reason
            self._cv.notify()
        return jobs

    def cancel_all(self, reason: str, why: str = "request") -> None:
        """Cancel every unfinished job (``why``: as :attr:`Job.cancel_why`)."""
        with self._cv:
            for job in self._active.values():
                job.cancel_reason, job.cancel_why = reason, why
            self._cv.notify()

    def renew(self, job_id: str, client: str) -> bool:
        """Renew the lease of the unfinished jobs named ``job_id`` of session ``client`` (the
        client's heartbeat); whether there was one."""
        now = time.monotonic()
        with self._cv:
            jobs = [self._active[k] for k in self._by_id.get(job_id, ()) if k in self._active]
        mine = [j for j in jobs if j.client == client and j.state not in FINAL_STATES]
        for job in mine:
            job.renew(now)
        return bool(mine)

    def active(self) -> list[Job]:
        with self._cv:
            return list(self._active.values())

    def stats(self) -> dict[str, Any]:
        """``queued`` (not started), ``running``, ``queue_depth`` (both), finished ``counts``."""
        with self._cv:
            running = sum(1 for j in self._active.values() if j.state == "running")
            return {"queue_depth": len(self._active), "running": running, "queued": len(self._active) - running,
                    "counts": dict(self.counts), "chunk_reruns": self.chunk_reruns, "slots": self.slots,
                    "workers_lost": self.workers_lost}

    def close(self, reason: str = "the daemon is stopping") -> None:
        """Cancel what is left (``why`` ``stopping``), stop the thread and the local pricing slot."""
        self.cancel_all(reason, "stopping")
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=10)
        self._local.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the scheduler thread

    def _emit(self, job: Job, final: bool) -> None:
        try:
            self._on_event(job, final)
        except Exception:  # noqa: BLE001 (a reply or publish failure must not stop the scheduler)
            log.warning("job event handler failed", exc_info=True)

    def _run(self) -> None:
        while True:
            with self._cv:
                if self._stop and not self._active:
                    break
                if not self._queue and not self._local_queue and not self._inflight and not self._has_cancel():
                    self._cv.wait(0.25)
                    if self._stop and not self._active:
                        break
            try:
                self._sweep()
                self._dispatch()
                if self._inflight:
                    done, _ = cf.wait(list(self._inflight), timeout=0.05, return_when=cf.FIRST_COMPLETED)
                    for fut in done:
                        self._collect(fut)
                    self._check_hung()
                self._progress()
            except Exception:  # noqa: BLE001 (never let the scheduler die)
                log.error("job scheduler error", exc_info=True)
                time.sleep(0.05)
        self._local.shutdown(wait=False, cancel_futures=True)

    def _has_cancel(self) -> bool:
        return any(j.cancel_reason for j in self._active.values())

    def _sweep(self) -> None:
        """End jobs cancelled or past their deadline; forget old finished ones."""
        now = time.monotonic()
        for job in list(self._active.values()):
            if job.state in FINAL_STATES:
                continue
            if job.cancel_reason:
                self._finish(job, "cancelled", ("JobCancelled", f"job {job.id} {job.cancel_reason}",
                                                {"why": job.cancel_why}))
            elif now > job.lease_until:  # its client stopped renewing (killed, or gone): nobody will collect it
                log.info("job %s abandoned: its lease of %.3g s was not renewed; cancelled", job.id, job.lease_s)
                job.cancel_why = "lease"
                self._finish(job, "cancelled", ("JobCancelled", f"job {job.id} cancelled: its client stopped "
                                                                f"renewing its lease of {job.lease_s:g} s",
                                                {"why": "lease"}))
            elif now > job.deadline:
                self._finish(job, "deadline", ("DeadlineExceeded",
                                                f"job {job.id} passed its deadline after {now - job.submitted:.3g} s "
                                                f"({job.fraction:.0%} done); nothing returned", {}))
        if self._finished:
            with self._cv:
                old = [k for k, j in self._finished.items() if now - (j.finished or now) > KEEP_FINISHED_S]
                for k in old:
                    self._forget(k)
                held = sum(j.cost.bytes for j in self._finished.values())
                while self._finished and (len(self._finished) > KEEP_FINISHED
                                          or held > self.max_inflight_bytes // 2):
                    k = next(iter(self._finished))  # oldest first
                    held -= self._finished[k].cost.bytes
                    self._forget(k)

    def _forget(self, key: str) -> None:
        job = self._finished.pop(key, None)
        if job is not None:
            keys = self._by_id.get(job.id)
            if keys and key in keys:
                keys.remove(key)
                if not keys:
                    del self._by_id[job.id]

    def _next_chunk(self) -> tuple[Job, int] | None:
        while self._queue:
            job = self._queue[0]
            if job.state in FINAL_STATES or not job.pending:
                self._queue.popleft()
                continue
            return job, job.pending.popleft()
        return None

    def _task(self, job: Job, i: int) -> dict:
        a, b, _ = job.chunks[i]
        n = job.n
        task = {"op": job.op, "columns": _slice_columns(job.columns, a, b, n),
                "method": _slice_method(job.method, a, b, n)}
        if job.op == "implied_vol":
            p = job.prices
            task["prices"] = p[a:b] if isinstance(p, np.ndarray) and p.ndim == 1 and p.shape[0] == n else p
        return task

    def _pop_local(self) -> tuple[Job, int] | None:
        while self._local_queue:
            job, i = self._local_queue.popleft()
            if job.state not in FINAL_STATES:
                return job, i
        return None

    def _dispatch(self) -> None:
        """Give every free slot a chunk: the MPI workers first (their chunks must travel, and
        rank 0's own pricing thread would hold this process's interpreter lock while they
        are sent), then rank 0's thread, which first takes chunks to run again."""
        while True:
            progressed = False
            if self._executor is not None and self._mpi_inflight < self._mpi_capacity:
                with self._cv:
                    item = self._next_chunk()
                if item is not None:
                    self._submit_chunk(*item, "mpi")
                    progressed = True
                    continue
            if not self._local_busy:
                with self._cv:
                    item = self._pop_local() or self._next_chunk()
                if item is not None:
                    self._submit_chunk(*item, "local")
                    progressed = True
            if not progressed:
                return

    def _submit_chunk(self, job: Job, i: int, where: str) -> None:
        task = self._task(job, i)
        if job.state == "queued":
            job.state = "running"
            job.started = time.monotonic()
            self._emit(job, False)
        sent = time.perf_counter()  # before the submit: rank 0's thread may start at once
        try:
            if where == "mpi":
                fut = self._executor.submit(pool.run_chunk, task)
                self._mpi_inflight += 1
            else:
                fut = self._local.submit(self._run_controlled, job, i, task)
                self._local_busy = True
        except Exception as e:  # noqa: BLE001 (a broken pool: price the chunk here instead)
            if where == "mpi":
                self._mpi_broken(f"submitting to the MPI pool failed: {e}")
                job.pending.appendleft(i)
                return
            raise
        job._inflight += 1
        self._inflight[fut] = (job, i, where, time.monotonic())
        job.timeline[i] = [where, sent - job.t0, None, None]

    @staticmethod
    def _run_controlled(job: Job, i: int, task: dict) -> dict:
        """Price a chunk on rank 0's thread under a :class:`optiond.runctl.RunControl`: pricers
        that loop (MLMC's adaptive iterations) report their progress into the job and stop
        at their next safe point once it is cancelled (:class:`optiond.runctl.Cancelled`).
        Chunks on worker ranks run to the end; a cancelled job drops their results."""
        def on_progress(f: float) -> None:  # never backwards (MLMC's estimate can step back)
            job.partial[i] = max(f, job.partial.get(i, 0.0))

        with runctl.controlled(runctl.RunControl(on_progress, lambda: job.state in FINAL_STATES)):
            return pool.run_chunk(task)

    def _release(self, where: str) -> None:
        if where == "mpi":
            self._mpi_inflight -= 1
        else:
            self._local_busy = False

    def _mpi_broken(self, why: str) -> None:
        if self._mpi_capacity:
            log.error("MPI pool unusable (%s); pricing on rank 0 only", why)
        self.workers_lost += self._mpi_capacity
        self._mpi_capacity = 0

    def _collect(self, fut: cf.Future) -> None:
        job, i, where, t0 = self._inflight.pop(fut)
        self._release(where)
        job._inflight -= 1
        if job.state in FINAL_STATES:
            return  # cancelled or past its deadline meanwhile: the result is dropped
        try:
            part = fut.result()
        except cf.CancelledError:
            return
        except InvalidInputError as e:
            self._finish(job, "failed", ("InvalidInputError", str(e),
                                         {"field": e.field, "row": e.row, "value": e.value, "reason": e.reason}))
            return
        except Exception as e:  # noqa: BLE001
            if isinstance(e, cf.BrokenExecutor):
                self._mpi_broken(str(e))
            tries = job.retried.get(i, 0) + 1
            job.retried[i] = tries
            if tries <= MAX_CHUNK_TRIES and not isinstance(e, MemoryError):
                self.chunk_reruns += 1
                log.warning("chunk %d of job %s failed on %s (%s: %s); running it again on rank 0", i, job.id,
                            "a worker rank" if where == "mpi" else "rank 0", type(e).__name__, e)
                job.diagnostics["chunk_reruns"] = job.diagnostics.get("chunk_reruns", 0) + 1
                with self._cv:
                    self._local_queue.append((job, i))
                return
            self._finish(job, "failed", (type(e).__name__, f"pricing failed: {e}", {}))
            return
        self._store(job, i, part)

    def _store(self, job: Job, i: int, part: dict) -> None:
        a, b, work = job.chunks[i]
        job.partial.pop(i, None)
        tl = job.timeline.get(i)
        if tl is not None:
            tl[2], tl[3] = time.perf_counter() - job.t0, part.get("elapsed_s")
            clock = part.get("clock")
            if isinstance(clock, tuple) and len(clock) == 3 and clock[0] == pool.host():  # same clock
                tl.extend((clock[1] - job.t0, clock[2] - job.t0))
            seconds = part.get("elapsed_s")
            if job.chunks_per_slot == 1 and isinstance(seconds, float) and seconds >= MIN_CHUNK_S:
                span = max(tl[2] - tl[1], seconds)  # dispatch to result, at least the pricing
                self._speeds.setdefault(tl[0], deque(maxlen=SPEED_MEMORY)).append(work / span)
        r = job.result
        if r is None:
            n = job.n
            if job.op == "price":
                # prices only: the (1, n) row the reply carries, not 6 rows of which 5 stay NaN
                rows = 1 if wire.prices_only(job.method, job.columns) else len(wire.VALUE_FIELDS)
                r = job.result = {"values": np.full((rows, n), np.nan), "status": SparseColumn(),
                                  "error": SparseColumn()}
            else:
                r = job.result = {"vol": np.full(n, np.nan), "status": SparseColumn(), "error": SparseColumn()}
        if job.op == "price":
            v = part["values"]
            r["values"][:v.shape[0], a:b] = v  # (1, m): the prices alone; the Greeks stay NaN
            if part.get("std_error") is not None:
                if "std_error" not in r:
                    r["std_error"] = np.full(job.n, np.nan)
                r["std_error"][a:b] = part["std_error"]
        else:
            r["vol"][a:b] = part["vol"]
        r["status"].add(a, *part["status"])
        r["error"].add(a, *part["error"])
        dev = part.get("device", "cpu")
        job.devices[dev] = job.devices.get(dev, 0) + (b - a)
        if part.get("diagnostics"):
            job.part_diagnostics[i] = part["diagnostics"]
        job.pids.add(part.get("pid"))
        if part.get("gpu_memory"):
            job.diagnostics.setdefault("_gpu_memory", {})[part.get("pid")] = part["gpu_memory"]
        job.done_work += work
        job.done_rows += b - a
        job.chunks_done += 1
        if job.chunks_done >= len(job.chunks):
            self._finish(job, "done", None)

    def _check_hung(self) -> None:
        now = time.monotonic()
        for fut, (job, i, where, t0) in list(self._inflight.items()):
            if where != "mpi":
                continue
            est = job.cost.cpu_s * job.chunks[i][2] / job.total_work
            if now - t0 > max(HUNG_CHUNK_MIN_S, HUNG_CHUNK_FACTOR * est):
                log.error("chunk %d of job %s has not come back from a worker rank after %.0f s; counting the rank "
                          "as lost and running the chunk on rank 0", i, job.id, now - t0)
                del self._inflight[fut]
                self._mpi_inflight -= 1
                self._mpi_capacity = max(0, self._mpi_capacity - 1)
                self.workers_lost += 1
                job._inflight -= 1
                if job.state not in FINAL_STATES:
                    with self._cv:
                        self._local_queue.append((job, i))

    def _progress(self) -> None:
        now = time.monotonic()
        for job in list(self._active.values()):
            if job.state == "running" and now - job._last_progress >= PROGRESS_EVERY_S:
                job._last_progress = now
                self._emit(job, False)

    def _finish(self, job: Job, state: str, error: tuple[str, str, dict] | None) -> None:
        with job.lock:
            if job.state in FINAL_STATES:
                return
            job.state = state
            job.finished = time.monotonic()
            job.error = error
            if state != "done":
                job.result = None
        for fut, (j, *_rest) in list(self._inflight.items()):
            if j is job:
                fut.cancel()
        job.pending.clear()
        self._emit(job, True)  # answers its waiters: only then is the job no longer active
        with self._cv:
            self.counts[state] = self.counts.get(state, 0) + 1
            self._active.pop(job.key, None)
            if job.kind == "submit":
                self._finished[job.key] = job
            else:
                keys = self._by_id.get(job.id)
                if keys and job.key in keys:
                    keys.remove(job.key)
                    if not keys:
                        del self._by_id[job.id]


__all__ = ["Job", "JobManager", "Waiter", "split", "FINAL_STATES"]
