"""The daemon's pricing pipeline: :class:`PricingOps`, the part of :class:`optiond.daemon.server.Server`
that answers ``price``, ``implied_vol``, ``submit``, ``result`` and ``chain``.

A pricing request is decoded (columns, method), costed and checked here; it is then answered
from the reply cache, priced by the shell thread at once (one-option requests read together
coalesced into one batch, the one-option CPU ones by a short path), or handed to the pricing
thread(s) as a job whose reply is built here when it ends. Every result reply's body is
:mod:`optiond.daemon.wire`'s. A chain request, and a surface fit or price of
:mod:`optiond.daemon.object_ops`, runs on rank 0's pricing thread through a runner thread that
sends its reply (:meth:`PricingOps._aside`). The warm-up at start (and the timing of the CPU kernel, the
cost model's unit) is here too. The socket loops, the dispatch of each message to its
operation, the threads and the life cycle are in :mod:`optiond.daemon.server`; the control
operations, status and health in :mod:`optiond.daemon.control_ops`.

Pricing requests (``price``, ``implied_vol``, ``submit``) take, beside ``columns`` and
``method``: ``force`` (skip the reply cache), ``deadline_s`` (seconds the client allows) and
``job_id`` (the client's name for the work, which ``cancel`` then accepts). Each is costed
and checked against the limits (:mod:`optiond.limits`) before anything is priced, and
refused with ``ename`` ``LimitExceeded`` (or ``DaemonDraining``, ``JobCancelled``) when over.
Identical requests are answered from a bounded cache (:mod:`optiond.daemon.cache`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from concurrent import futures as cf
from typing import Any, Callable

import numpy as np
import zmq

from .. import costs, engine, runctl
from ..models import DIVIDEND_FIELDS, Batch, InvalidInputError, Method, per_row, scalar_row
from .. import limits as limits_mod
from . import chain_op, pool, wire
from .cache import Entry, request_key
from .control_ops import devices
from .jobs import FINAL_STATES, Job, Lease, Waiter
from .objects import ObjectError
from ..limits import LimitExceeded
from .protocol import (PROTOCOL_VERSION, Message, ProtocolError, Session, date_in_window, decode_column,
                       is_array_spec)
from .server_parts import _Counters, _invalid_details, _nbytes, _Refused, _Req, _short, answer

log = logging.getLogger("optiond.daemon")

METHOD_FIELDS = frozenset(f.name for f in dataclasses.fields(Method))
_METHOD_STRINGS = ("name", "precision", "device")
MAX_COLUMNS = 64
#: jobs of at most this many chunks report their timeline in the reply's diagnostics
TIMELINE_CHUNKS = 64
#: fewest one-option requests priced together (fewer are priced one by one: same bits, and on
#: a CPU a batch of two costs more set-up than it saves)
COALESCE_MIN = 4
#: runner threads that hand chain (and surface fit and price) requests to rank 0's pricing
#: thread, and such requests accepted and unanswered at most (more are refused with
#: LimitExceeded): :meth:`PricingOps._aside`
CHAIN_RUNNERS, CHAIN_QUEUE = 2, 16
JOB_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
#: the columns the engine cannot price without (a table lacking one is handed to the engine
#: whole, so its error is the engine's own)
_REQUIRED = ("kind", "spot", "strike", "expiry", "rate")
_MAIN_COLUMNS = ("kind", "style", "spot", "strike", "expiry", "rate", "dividend_yield", "volatility")
#: per-row settings the engine reads by row index (their length is checked here)
_ROW_COLUMNS = ("method", "eps", "payoff")
_MAIN_SET = frozenset(_MAIN_COLUMNS)
_FAST_CONTENT = frozenset({"columns", "method"})
#: bytes of one option's value block
_ONE_BYTES = len(wire.VALUE_FIELDS) * 8


def _serial_nodes() -> float:
    """Tree nodes below which the CPU kernel prices a batch on one thread (no thread pool)."""
    from ..kernels.binomial import cpu as binomial_cpu

    return float(getattr(binomial_cpu, "PARALLEL_MIN_NODES", 200_000)) - 1.0


def _device_label(device: str) -> str:
    """Short device label for metrics: ``cpu``, ``gpu:0``, or ``mixed``."""
    if "," in device:
        return "mixed"
    return device.split(" ", 1)[0] or "cpu"


class PricingOps:
    """The pricing operations of :class:`optiond.daemon.server.Server` (a mixin: it is no server
    on its own). They use the server's state (``limits``, ``cache``, ``jobs``, ``metrics``, the
    sockets and counters) and its replies (``_fail``, ``_access``, ``_replies``, ``_publish``,
    ``_thread_socket``), all set up by :class:`~optiond.daemon.server.Server`."""

    # ------------------------------------------------------------------ decoding requests

    def _columns(self, content: dict, buffers: list[bytes]) -> dict[str, Any]:
        cols = content.get("columns")
        if not isinstance(cols, dict):
            raise ProtocolError("'columns' must be a map of column name to values")
        if len(cols) > MAX_COLUMNS:
            raise ProtocolError(f"too many columns ({len(cols)} > {MAX_COLUMNS})")
        out = {}
        for name, value in cols.items():
            if not isinstance(name, str) or len(name) > 64:
                raise ProtocolError("column names must be strings of at most 64 characters")
            out[name] = decode_column(value, buffers)
        return out

    def _method(self, spec: Any, buffers: list[bytes]) -> Method:
        if not spec:
            return self._default_method
        if not isinstance(spec, dict):
            raise ProtocolError("'method' must be a map")
        unknown = set(spec) - METHOD_FIELDS
        if unknown:
            raise ProtocolError(f"unknown method field(s) {sorted(unknown)[:5]}; expected {sorted(METHOD_FIELDS)}")
        for k in _METHOD_STRINGS:
            if k in spec and not isinstance(spec[k], str):
                raise ProtocolError(f"method.{k} must be a string")
        if "greeks" in spec and not isinstance(spec["greeks"], bool):
            raise ProtocolError("method.greeks must be true or false")
        try:  # scalar fields and short lists (the ADI grid) only: such Method objects are reused
            key = tuple(sorted((k, tuple(v) if type(v) is list and len(v) <= 8 else v) for k, v in spec.items()))
            m = self._methods.get(key)
        except TypeError:  # an unhashable value (an array spec: per-option steps or eps)
            key = m = None
        if m is not None:
            return m
        if key is not None and all(isinstance(v, (int, float, str, bool, tuple)) or v is None for _, v in key):
            m = Method(**dict(key))
            if len(self._methods) > 1024:
                self._methods.clear()
            self._methods[key] = m
            return m
        return Method(**{k: decode_column(v, buffers) for k, v in spec.items()})

    @staticmethod
    def _all_scalar(content: dict) -> bool:
        """No list in the columns (arrays come with buffers): one row, nothing to size."""
        cols = content.get("columns")
        return isinstance(cols, dict) and not any(type(v) is list for v in cols.values())

    @staticmethod
    def _declared_rows(content: dict) -> int:
        """Rows the request declares (array shapes, list lengths), read before decoding."""
        n = 1
        for part in (content.get("columns"), content.get("method")):
            if isinstance(part, dict):
                for v in part.values():
                    if is_array_spec(v):
                        d = v.get("__nd__")
                        if isinstance(d, list) and len(d) == 3 and isinstance(d[1], list) and d[1]:
                            first = d[1][0]
                            if type(first) is int:
                                n = max(n, first)
                    elif isinstance(v, list):
                        n = max(n, len(v))
        p = content.get("prices")
        if is_array_spec(p):
            d = p.get("__nd__")
            if isinstance(d, list) and len(d) == 3 and isinstance(d[1], list) and d[1] and type(d[1][0]) is int:
                n = max(n, d[1][0])
        elif isinstance(p, list):
            n = max(n, len(p))
        return n

    @staticmethod
    def _option(msg: Message, name: str) -> Any:
        """A run option (``force``, ``deadline_s``, ``job_id``): from the metadata (where the
        client puts them, outside the cache key) or the content."""
        v = msg.metadata.get(name) if msg.metadata else None
        return msg.content.get(name) if v is None else v

    def _job_label(self, msg: Message) -> str | None:
        jid = self._option(msg, "job_id")
        if jid is None:
            return None
        if not isinstance(jid, str) or not 0 < len(jid) <= 64 or not set(jid) <= JOB_ID_CHARS:
            raise ProtocolError("job_id must be 1 to 64 characters of letters, digits and -_.:")
        if self.jobs.is_cancelled_id(jid):
            raise _Refused("JobCancelled", f"job {jid} was cancelled", "cancelled", {"job_id": jid})
        return jid

    def _prepare(self, msg: Message, op: str, t0: float, lookup: bool = True) -> _Req | None:
        """Decode, cost, check and look up a pricing request (``op`` price or implied_vol).

        Returns:
            The request to price, or None when it was answered (from the cache).

        Raises:
            ProtocolError, InvalidInputError, LimitExceeded, _Refused: answered by the caller.
        """
        if self._state == "draining" or self._stop.is_set():
            raise _Refused("DaemonDraining", "the daemon is draining: it finishes the work it has and takes no new "
                                             "work; try again after its restart")
        content, buffers = msg.content, msg.buffers
        job_id = self._job_label(msg)
        if buffers or not self._all_scalar(content):
            self.limits.check_rows(self._declared_rows(content))
        columns = self._columns(content, buffers)
        method = self._method(content.get("method"), buffers)
        if any(isinstance(columns.get(k), np.ndarray) for k in _ROW_COLUMNS):
            self._check_row_columns(columns)
        prices = None
        if op == "implied_vol":
            if "prices" not in content:
                raise ProtocolError("implied_vol needs 'prices'")
            prices = decode_column(content["prices"], buffers)
        row = None
        if (len(columns) <= 8 and method.name == "binomial" and type(method.steps) is int
                and "steps" not in columns and "method" not in columns):
            row = scalar_row(columns) if not any(isinstance(v, np.ndarray) for v in columns.values()) else None
        if row is not None and prices is None:  # one option: cost it without the general model
            cost = costs.one_tree_cost(method.steps, method.greeks, "price", self.ns_per_node,
                                       limits_mod.DEFAULT_LIMITS)  # work 0 over the per-row limit
            n = 1
        else:
            n = 1
            for k, v in columns.items():
                if isinstance(v, np.ndarray) and v.ndim >= 1 and (k not in DIVIDEND_FIELDS or v.ndim == 2):
                    n = max(n, v.shape[0])
            if isinstance(prices, np.ndarray) and prices.ndim == 1:
                n = max(n, prices.shape[0])
            msg_bytes = sum(len(b) for b in buffers)
            costed = columns if prices is None else {**columns, "price": prices}  # the spectral IV split reads them
            cost = limits_mod.estimate(op, costed, method, n, msg_bytes, self.ns_per_node)
        deadline = self.limits.check(cost, self._option(msg, "deadline_s"), self.jobs.slots if self.jobs else 1)
        key = None
        if self.cache.max_entries > 0:
            key = request_key(op, content, buffers, msg.raw_content)
            if lookup and key is not None and self._option(msg, "force") is not True:
                entry = self.cache.get(key)
                if entry is not None:
                    self._reply_cached(msg, op, entry, t0, job_id)
                    return None
        return _Req(msg, op, t0, columns, method, n, cost, time.monotonic() + deadline, prices, key, row, job_id)

    def _reply_cached(self, msg: Message, op: str, entry: Entry, t0: float, job_id: str | None) -> None:
        session = self._shell_session
        content = dict(entry.content, cached=True)
        if job_id:
            content["job_id"] = job_id
        frames = session.serialize(session.header(op + "_reply"), content, msg.raw_header, None, entry.buffers)
        dt = answer(self._shell, [*msg.identities, *frames], self.metrics, self._shell_counters, op, entry.model,
                    _device_label(entry.device), "cached", t0)
        self._access(msg.header, op, entry.model, entry.device, int(entry.content.get("n", 0)), dt, "cached", job_id)

    @staticmethod
    def _check_row_columns(columns: dict) -> None:
        """Per-row ``method``, ``eps`` and ``payoff`` columns must have the table's length
        (the engine indexes them by row without checking).

        Raises:
            InvalidInputError: worded as the engine's own length errors.
        """
        n = None
        for k in _MAIN_COLUMNS:
            v = columns.get(k)
            if isinstance(v, np.ndarray) and v.ndim == 1:
                n = v.shape[0] if n is None else n
        n = 1 if n is None else n
        for k in _ROW_COLUMNS:
            v = columns.get(k)
            if isinstance(v, np.ndarray) and v.ndim >= 1 and (v.ndim > 1 or v.shape[0] != n):
                raise InvalidInputError(k, None, f"length {v.shape[0]}" if v.ndim == 1 else f"array of shape {v.shape}",
                                        f"column lengths differ (expected {n})" if v.ndim == 1 else
                                        "columns must be one-dimensional")

    def _whole_table_ok(self, req: _Req) -> bool:
        """Whether a table can be split into chunks without changing what the engine says
        about it (required columns present, every array of one length)."""
        cols = req.columns
        required = _REQUIRED + (() if req.op == "implied_vol" else ("volatility",))
        if any(k not in cols for k in required):
            return False
        for k, v in cols.items():
            if isinstance(v, np.ndarray) and not per_row(k, v, req.n) and not (k in DIVIDEND_FIELDS and v.ndim == 1):
                return False
        if req.op == "implied_vol" and isinstance(req.prices, np.ndarray) and (
                req.prices.ndim > 1 or (req.prices.ndim == 1 and req.prices.shape[0] != req.n)):
            return False
        steps = req.method.steps
        return not (np.ndim(steps) > 1 or (np.ndim(steps) == 1 and np.shape(steps)[0] != req.n))

    def _on_gpu(self, req: _Req, gpu: bool) -> bool:
        """Whether the engine will price ``req`` on a GPU (given that one is there): the trees
        from the calibrated crossover ``gpu_min_nodes``; the spectral method's rows (``spectral``,
        and ``auto``'s American rows) from its own crossover in the same work units
        (:func:`optiond.kernels.spectral.plan.gpu_min_work`), while the method has a GPU path."""
        m = req.method
        if not gpu or m.device == "cpu" or m.name not in ("binomial", "spectral", "auto"):
            return False
        if m.name == "binomial":
            return m.device == "gpu" or req.cost.work >= self._gpu_min_nodes
        if not engine.front_door("spectral").GPU:
            return False
        from ..kernels.spectral import plan as spectral_plan

        return m.device == "gpu" or req.cost.work >= spectral_plan.gpu_min_work(m.accuracy)

    def _goes_inline(self, req: _Req) -> bool:
        """Small CPU work is priced by the shell thread at once; GPU work and large work go to
        the pricing thread(s) as a job (one thread owns the CUDA context). A table the engine
        will reject as a whole is handed to it whole, so the error is the engine's own."""
        small = req.cost.cpu_s <= self.inline_max_s and not self._on_gpu(req, self._gpu)
        return small or not self._whole_table_ok(req)

    # ------------------------------------------------------------------ warm-up and the cost model's unit

    def _warm_up(self) -> None:
        """Load (or, on a cold cache, compile) every kernel of :data:`optiond.kernels.warmup.TARGETS`
        before the daemon says it serves: the CPU ones here, the GPU ones on the pricing thread
        that owns the GPU; then time the CPU kernel for the cost model."""
        from ..kernels import warmup

        t0 = time.perf_counter()
        outcomes: list = []
        try:
            chosen = warmup.select(None if self.warmup is True else self.warmup)
            cpu_targets = [t for t in chosen if t.name != "gpu"]
            outcomes = warmup.warm(cpu_targets)
            self.ns_per_node = self._time_cpu_kernel()
            gpu_targets = [t for t in chosen if t.name == "gpu"]
            if self._gpu and gpu_targets and self.jobs is not None:  # load the GPU kernels where they will run
                outcomes += self.jobs.run_local(warmup.warm, gpu_targets)
            if len(self.ranks) == 1 and self.jobs is not None:  # what the pricing thread uses
                self.ranks[0].update({k: v for k, v in self.jobs.run_local(pool.rank_info).items()
                                      if k in ("device", "threads")})
        except Exception:
            log.warning("warm-up failed (requests will still be served)", exc_info=True)
        for o in outcomes:
            if o.error:
                log.warning("warm-up of %s failed (requests will still be served): %s", o.name, o.error)
        log.info("warm-up done in %.2f s (%d kernel signatures compiled, %d loaded from the cache); devices %s; "
                 "CRR %.3g ns/node on one core", time.perf_counter() - t0, sum(o.compiled for o in outcomes),
                 sum(o.cached for o in outcomes), ", ".join(devices()), self.ns_per_node)

    @staticmethod
    def _time_cpu_kernel() -> float:
        """Single-core CRR speed, ns per tree node (the cost model's unit): the best of 7 runs of
        about 0.7 ms (shorter runs scatter more, and a high figure makes the limits refuse
        requests they should take), clamped to [0.05, 10]."""
        from ..kernels.binomial import cpu as binomial_cpu

        n, N = 8, 800
        args = (np.zeros(n, np.int8), np.ones(n, np.int8), np.full(n, 100.0), np.full(n, 100.0), np.full(n, 1.0),
                np.full(n, 0.03), np.zeros(n), np.full(n, 0.2), np.full(n, N, np.int64))
        best = float("inf")
        for _ in range(7):
            t = time.perf_counter()
            binomial_cpu.crr_batch(*args, greeks=False, parallel=False, check=False)
            best = min(best, time.perf_counter() - t)
        nodes = n * float(costs.tree_nodes_rows(N))
        return float(min(max(best / nodes * 1e9, 0.05), 10.0))

    # ------------------------------------------------------------------ operations

    def _op_price(self, msg: Message, t0: float) -> _Req | None:
        return self._pricing(msg, "price", t0)

    def _op_implied_vol(self, msg: Message, t0: float) -> _Req | None:
        return self._pricing(msg, "implied_vol", t0)

    def _pricing(self, msg: Message, op: str, t0: float) -> _Req | None:
        req = self._prepare(msg, op, t0)
        if req is None:
            return None
        if self._goes_inline(req):
            return req
        self._start_job(req, "request")
        return None

    def _op_chain(self, msg: Message, t0: float) -> None:
        """A whole option chain (:mod:`optiond.daemon.chain_op`): checked and costed here, then
        priced on rank 0's pricing thread (the GPU's) by a runner thread, which sends the
        reply. A copy resent by a client is priced again (the client sends a chain once).
        With a ``lease_s`` (and ``job_id``) run option the request is leased like a job: its
        client renews it (``renew``), and once it lapses the pricing stops at its next pricing
        call and the reply is ``JobCancelled`` (``why`` ``lease``)."""
        df, market, deadline = self._chain_request(msg)
        lease_s, jid = self._lease(msg), self._job_label(msg)
        if lease_s is not None and jid is None:
            raise ProtocolError("chain: a lease_s needs a job_id (the name its client renews it by)")
        lease = None if lease_s is None else Lease(msg.header["session"], lease_s)
        # a stopping daemon renews nothing (its loops are done) but finishes the chain it prices
        wanted = None if lease is None else (lambda: self._stop.is_set() or not lease.lapsed())
        self._aside(msg, "chain", "chain", functools.partial(chain_op.run, df, market, wanted), len(df), t0, deadline,
                    lease=(jid, lease) if lease is not None else None)

    def _op_renew(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        """The client's lease heartbeat: renew the leases of its jobs and chain requests named
        in ``job_ids`` (those of other sessions are left alone). Replies ``{"renewed": [id, ...]}``,
        the ids that named work still running."""
        ids = msg.content.get("job_ids")
        if not isinstance(ids, list) or len(ids) > 1024 or not all(isinstance(i, str) and 0 < len(i) <= 64
                                                                   for i in ids):
            raise ProtocolError("renew needs 'job_ids': a list of at most 1024 strings of at most 64 characters")
        client = msg.header["session"]
        renewed = []
        for jid in ids:
            ok = self.jobs.renew(jid, client)
            lease = self._aside_leases.get(jid)
            if lease is not None and lease.client == client:
                lease.renew()
                ok = True
            if ok:
                renewed.append(jid)
        return {"renewed": renewed}, []

    def _chain_request(self, msg: Message) -> tuple[Any, dict, float]:
        """The chain of a ``chain`` (or ``surface_fit``) request, price_chain's keyword
        arguments and the deadline (seconds): decoded, costed and checked against the limits.

        Raises:
            ProtocolError, InvalidInputError, LimitExceeded: as
                :func:`optiond.daemon.chain_op.decode_request` and :meth:`Limits.check`.
        """
        df, market = chain_op.decode_request(msg.content, msg.buffers, self.limits.max_options)
        cost = chain_op.cost(df, market, _nbytes(list(msg.buffers)), self.ns_per_node)
        deadline = self.limits.check(cost, self._option(msg, "deadline_s"), self.jobs.slots if self.jobs else 1)
        return df, market, deadline

    def _aside(self, msg: Message, op: str, model: str, work: Callable[[], tuple[dict, list]], n: int, t0: float,
               deadline_s: float, pricing_thread: bool = True, once: bool = False, claim: Any = None,
               lease: tuple[str, Lease] | None = None) -> None:
        """Answer ``msg`` off the request loop: ``work()`` (returning the reply's content and
        buffers) runs on rank 0's pricing thread (the GPU's), or with ``pricing_thread`` False
        on the runner thread itself; the runner sends the reply (:meth:`_run_aside`).
        ``once``: the reply is kept for copies of the request (a state-changing one).
        ``claim``: the :class:`optiond.daemon.objects.Claim` the work takes before it keeps an
        object: its deadline is the request's, and the runner cancels it before it answers
        with an error, so an object is kept only when the client gets the work's own reply.
        ``lease``: ``(job_id, lease)``, renewed by ``renew`` under that id until the reply.

        Raises:
            _Refused: the daemon is draining or stopping.
            LimitExceeded: :data:`CHAIN_QUEUE` requests are waiting already.
        """
        if self._state == "draining" or self._stop.is_set():
            raise _Refused("DaemonDraining", "the daemon is draining: it finishes the work it has and takes no new "
                                             "work; try again after its restart")
        with self._chain_lock:
            if self._chain_pending >= CHAIN_QUEUE:
                raise LimitExceeded("max_queued_jobs", self._chain_pending + 1, CHAIN_QUEUE,
                                    f"the daemon has {self._chain_pending} chain or surface requests waiting (limit "
                                    f"{CHAIN_QUEUE}); try again when some finish")
            self._chain_pending += 1
            if lease is not None:
                self._aside_leases[lease[0]] = lease[1]
        try:
            self._chain_runner.submit(self._run_aside, msg, op, model, work, n, t0, deadline_s, pricing_thread, once,
                                      claim, lease)
        except RuntimeError:  # shut down meanwhile
            with self._chain_lock:
                self._chain_pending -= 1
                if lease is not None:
                    self._aside_leases.pop(lease[0], None)
            raise _Refused("DaemonDraining", "the daemon is stopping") from None

    def _run_aside(self, msg: Message, op: str, model: str, work: Callable[[], tuple[dict, list]], n: int, t0: float,
                   deadline_s: float, pricing_thread: bool, once: bool, claim: Any = None,
                   lease: tuple[str, Lease] | None = None) -> None:
        """Runner thread: run ``work`` (see :meth:`_aside`) and send its reply, or the error,
        through the outbox. Never raises."""
        outcome, device, error = "ok", "-", None
        try:
            try:
                if claim is not None:
                    claim.deadline = time.monotonic() + deadline_s
                if self.jobs is not None and pricing_thread:
                    fut = self.jobs.submit_local(work)
                    try:
                        content, buffers = fut.result(timeout=deadline_s)
                    except cf.TimeoutError:
                        if claim is not None and not claim.cancel("deadline"):
                            content, buffers = fut.result()  # its object is kept: the client gets that reply
                        else:
                            fut.cancel()  # one still queued behind other work never runs (a running one ends)
                            raise
                    except cf.CancelledError:
                        if claim is not None:
                            claim.cancel("the daemon is stopping")
                        raise
                else:
                    content, buffers = work()
                device = str(content.get("device", "-"))
                content["status"] = "ok"
            except InvalidInputError as e:
                outcome, error = "invalid", str(e)
                content, buffers = {"status": "error", "ename": "InvalidInputError", "error": _short(str(e)),
                                    **_invalid_details(e)}, []
            except LimitExceeded as e:
                outcome, error = "refused", str(e)
                content, buffers = {"status": "error", "ename": "LimitExceeded", "error": _short(error),
                                    "limit": e.limit}, []
            except ObjectError as e:
                outcome, error = "invalid", str(e)
                content, buffers = {"status": "error", "ename": e.ename, "error": _short(error)}, []
            except (cf.TimeoutError, TimeoutError):
                outcome, error = "deadline", f"the {op} request took longer than its deadline of {deadline_s:.3g} s"
                content, buffers = {"status": "error", "ename": "DeadlineExceeded", "error": error}, []
            except cf.CancelledError:
                outcome, error = "cancelled", f"the {op} request was cancelled: the daemon is stopping"
                content, buffers = {"status": "error", "ename": "JobCancelled", "error": error, "why": "stopping"}, []
            except runctl.Cancelled:  # its lease lapsed: the client is gone (or paused longer than the lease)
                seconds = lease[1].seconds if lease is not None else 0.0
                outcome, error = "cancelled", (f"the {op} request was cancelled: its client stopped renewing its "
                                               f"lease of {seconds:g} s")
                log.info("%s request %s abandoned: %s", op, lease[0] if lease else "-", error)
                content, buffers = {"status": "error", "ename": "JobCancelled", "error": error, "why": "lease"}, []
            except Exception as e:  # noqa: BLE001 (the client gets the reason; the daemon goes on)
                log.warning("%s request failed: %s", op, e, exc_info=log.isEnabledFor(logging.DEBUG))
                outcome, error = "failed", str(e) or repr(e)
                content, buffers = {"status": "error", "ename": type(e).__name__, "error": _short(error)}, []
            session = Session(self.key.encode("ascii"), self.session.session, **self._session_args)
            frames = session.serialize(session.header(op + "_reply"), content, msg.raw_header, None, buffers)
            if once:
                self._replies.keep_once((msg.header["session"], msg.header["msg_id"]), frames)
            dt = answer(self._thread_socket("outbox", self._outbox_url), [*msg.identities, *frames], self.metrics,
                        None, op, model, _device_label(device), outcome, t0)
            self._access(msg.header, op, model, device, n, dt, outcome, None, None if error is None else _short(error))
        except Exception:  # noqa: BLE001 (a socket closed by a stopping daemon: nobody to answer)
            log.debug("%s reply not sent", op, exc_info=True)
        finally:
            with self._chain_lock:
                self._chain_pending -= 1
                if lease is not None and self._aside_leases.get(lease[0]) is lease[1]:
                    del self._aside_leases[lease[0]]

    def _op_submit(self, msg: Message, t0: float) -> tuple[dict, list]:
        op = msg.content.get("op", "price")
        if op not in ("price", "implied_vol"):
            raise ProtocolError("submit: 'op' must be 'price' or 'implied_vol'")
        req = self._prepare(msg, op, t0, lookup=False)
        entry = None
        if req.key is not None and self._option(msg, "force") is not True:
            entry = self.cache.get(req.key)
        if entry is not None:  # already priced: a finished job holding the cached reply
            job = Job(req.job_id or self.jobs.new_id(), op, "submit", {}, req.method, req.cost, req.deadline,
                      client=msg.header["session"], msg_id=msg.header["msg_id"])
            job.state = "done"
            job.reply = (dict(entry.content, job_id=job.id, cached=True, status="ok"), list(entry.buffers))
            self.jobs.add_finished(job)
            self._shell_counters.outcomes["cached"] += 1
        else:
            job = self._start_job(req, "submit", self._lease(msg))
        return {"job_id": job.id, "state": job.state, "n": job.n, "estimated_s": round(
            job.cost.cpu_s / max(self.jobs.slots, 1), 6), "chunks": len(job.chunks)}, []

    def _lease(self, msg: Message) -> float | None:
        """The ``lease_s`` run option of a submit (or chain): the work is cancelled when its
        client has not renewed it (``renew``, or a ``result`` ask) for that long (seconds, 0.1
        to 3600; None: no lease)."""
        lease = self._option(msg, "lease_s")
        if lease is None:
            return None
        if not isinstance(lease, (int, float)) or isinstance(lease, bool) or not 0.1 <= lease <= 3600:
            raise ProtocolError("lease_s must be a number of seconds in [0.1, 3600]")
        return float(lease)

    def _op_result(self, msg: Message, t0: float = 0.0) -> tuple[dict, list] | None:
        c = msg.content
        jid = c.get("job_id")
        wait = c.get("wait_s", 0.0)
        if not isinstance(jid, str) or not 0 < len(jid) <= 64:
            raise ProtocolError("result needs 'job_id' (a string of at most 64 characters)")
        if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 <= wait <= 3600:
            raise ProtocolError("result: 'wait_s' must be a number of seconds in [0, 3600]")
        job = self.jobs.find(jid)
        if job is None:
            raise _Refused("UnknownJob", f"no job {jid} here (never submitted, already collected long ago, or "
                                         f"submitted to a daemon that has since restarted)", "refused")
        waiter = Waiter(msg.identities, msg.raw_header, "result_reply", msg.header["session"], msg.header["msg_id"],
                        time.perf_counter(), time.monotonic() + float(wait))
        job.renew(waiter.expires)
        with job.lock:
            if job.state not in FINAL_STATES:
                if wait > 0:
                    job.waiters.append(waiter)
                    self._parked.append((waiter.expires, job, waiter))
                    return None
                raise _Refused("JobPending", f"job {jid} is {job.state} ({job.fraction:.0%} done)", "pending",
                               {"job_id": jid, "state": job.state, "fraction": job.fraction,
                                "eta_s": job.eta_s(self.jobs.slots)})
        content, buffers = self._final_reply(job)
        if content.get("status") != "ok":
            extra = {k: v for k, v in content.items() if k not in ("status", "ename", "error")}
            raise _Refused(str(content.get("ename")), str(content.get("error")), job.state, extra)
        return dict(content), list(buffers)

    def _expire_parked(self, session: Session) -> None:
        now = time.monotonic()
        keep = []
        for expires, job, waiter in self._parked:
            if expires > now:
                keep.append((expires, job, waiter))
                continue
            with job.lock:
                if waiter not in job.waiters:
                    continue  # answered meanwhile
                job.waiters.remove(waiter)
                content = {"status": "error", "ename": "JobPending", "job_id": job.id, "state": job.state,
                           "fraction": job.fraction, "eta_s": job.eta_s(self.jobs.slots),
                           "error": f"job {job.id} is {job.state} ({job.fraction:.0%} done)"}
            frames = session.serialize(session.header(waiter.reply_type), content, waiter.parent)
            self._shell_counters.errors += 1
            answer(self._shell, [*waiter.identities, *frames], self.metrics, self._shell_counters, "result", "-", "-",
                   "pending", waiter.received)
        self._parked = keep

    # ------------------------------------------------------------------ jobs

    def _start_job(self, req: _Req, kind: str, lease_s: float | None = None) -> Job:
        msg = req.msg
        jid = req.job_id or self.jobs.new_id()
        weights = costs.row_weights(req.columns, req.method, req.n) if req.n > 1 else None
        job = Job(jid, req.op, kind, req.columns, req.method, req.cost, req.deadline, req.prices,
                  client=msg.header["session"], msg_id=msg.header["msg_id"], cache_key=req.key, weights=weights)
        if lease_s is not None:
            job.lease_s = lease_s
            job.renew(time.monotonic())
        if self._on_gpu(req, any(str(r.get("device", "")).startswith("gpu") for r in self.ranks) or self._gpu):
            job.chunks_per_slot = 1
        if kind == "request":
            job.waiters.append(Waiter(msg.identities, msg.raw_header, req.op + "_reply", msg.header["session"],
                                      msg.header["msg_id"], req.t0))
            self._inflight_reqs[(msg.header["session"], msg.header["msg_id"])] = job
        try:
            self.jobs.submit(job)
        except Exception:
            self._inflight_reqs.pop((msg.header["session"], msg.header["msg_id"]), None)
            raise
        return job

    def _reattach(self, job: Job, msg: Message, reply_type: str, t0: float) -> bool:
        """A retried request whose job still runs: its reply goes to the new socket."""
        with job.lock:
            if job.state in FINAL_STATES:
                return False
            job.waiters = [w for w in job.waiters if (w.session, w.msg_id) != (msg.header["session"],
                                                                                msg.header["msg_id"])]
            job.waiters.append(Waiter(msg.identities, msg.raw_header, reply_type, msg.header["session"],
                                      msg.header["msg_id"], t0))
        return True

    @staticmethod
    def _timeline(job: Job) -> dict:
        """Where a job's time went, seconds from its submission: when the request was read
        (``received``, negative: decoding, checks, costing), each chunk's rank-0 slot or MPI
        worker with its dispatch, collection and pricing time (the rest of a chunk's span is
        transfer and waiting; where the chunk ran on rank 0's host, also when its pricing began and
        ended there), and when the reply was built (``reply``)."""
        received = min((w.received for w in job.waiters), default=job.t0) - job.t0
        chunks = [[i, tl[0], *(None if x is None else round(float(x), 6) for x in tl[1:])]
                  for i, tl in sorted(job.timeline.items())]
        return {"received": round(received, 6), "chunks": chunks,
                "reply": round(time.perf_counter() - job.t0, 6)}

    def _final_reply(self, job: Job) -> tuple[dict, list]:
        """The reply content and buffers of a finished job (built once)."""
        if job.reply is not None:
            return job.reply
        if job.state != "done":
            ename, error, extra = job.error or ("JobFailed", f"job {job.id} {job.state}", {})
            job.reply = ({"status": "error", "ename": ename, "error": _short(error), "job_id": job.id,
                          "state": job.state, **extra}, [])
            return job.reply
        r = job.result
        out: list = []
        device = ", ".join(sorted(job.devices)) or "cpu"
        merged = {**job.merged_diagnostics(), **job.diagnostics}
        diagnostics = {k: v for k, v in merged.items() if not k.startswith("_") and wire.plain(v)}
        diagnostics.update(chunks=len(job.chunks), workers=len(job.pids))
        if len(job.timeline) <= TIMELINE_CHUNKS:
            diagnostics["timeline"] = self._timeline(job)
        elapsed = (job.finished or time.monotonic()) - (job.started or job.submitted)
        status, error = r["status"].rows_values(), r["error"].rows_values()
        if job.op == "price":
            values = r["values"][:1] if wire.prices_only(job.method, job.columns) else r["values"]
            content = wire.price_body(job.n, values, status, error, device, elapsed, out, std_error=r.get("std_error"),
                                      diagnostics=diagnostics)
        else:
            content = wire.iv_body(job.n, r["vol"], status, error, device, elapsed, out)
        content["job_id"] = job.id
        content["status"] = "ok"
        job.reply = (content, out)
        job.result = None  # the reply's buffers hold the numbers now
        return job.reply

    def _on_job_event(self, job: Job, final: bool) -> None:
        """Job thread: publish progress; when the job ends, answer its waiters."""
        self._publish(f"progress.{job.id}", "progress", job.summary(self.jobs.slots if self.jobs else 1))
        if not final:
            return
        counters = self._job_counters
        mem = job.diagnostics.get("_gpu_memory")
        if mem:
            by_rank = {r.get("pid"): r.get("rank") for r in self.ranks}
            for pid, m in mem.items():
                if pid != self.pid and pid in by_rank:
                    self._worker_gpu_memory[by_rank[pid]] = m
        if any("gpu_fallback" in d for d in job.part_diagnostics.values()):
            counters.gpu_fallbacks += 1
            self.metrics.gpu_fallbacks.inc()
        content, buffers = self._final_reply(job)
        outcome = {"done": "ok", "failed": "invalid" if content.get("ename") == "InvalidInputError" else "failed",
                   "cancelled": "cancelled", "deadline": "deadline"}[job.state]
        self.metrics.jobs.labels(job.state).inc()
        if job.state == "done" and job.cache_key is not None:
            self.cache.put(job.cache_key, Entry({k: v for k, v in content.items() if k != "job_id"}, buffers,
                                                job.cost.model, content.get("device", "")))
        with job.lock:
            waiters, job.waiters = job.waiters, []
        session = Session(self.key.encode("ascii"), self.session.session, **self._session_args)
        out = self._thread_socket("outbox", self._outbox_url)
        device = content.get("device", "-")
        for w in waiters:
            frames = session.serialize(session.header(w.reply_type), content, w.parent, None, buffers)
            if job.state == "done" and w.reply_type != "result_reply":
                self._replies.keep((w.session, w.msg_id), [*frames], _nbytes(buffers))
            if job.state != "done":
                counters.errors += 1
            try:
                dt = answer(out, [*w.identities, *frames], self.metrics, counters,
                            job.op if w.reply_type != "result_reply" else "result", job.cost.model,
                            _device_label(device), outcome, w.received)
            except zmq.ZMQError:
                log.debug("could not queue a job reply", exc_info=True)
                dt = time.perf_counter() - w.received
            self._access({"msg_id": w.msg_id, "session": w.session}, job.op, job.cost.model, device, job.n, dt,
                         outcome, job.id, None if job.state == "done" else _short(content.get("error", "")))
        self._inflight_reqs.pop((job.client, job.msg_id), None)
        log.info("job %s %s: %d rows, %d chunks on %d rank(s) in %.3f s", job.id, job.state, job.n, len(job.chunks),
                 len(job.pids), (job.finished or 0) - (job.started or job.submitted),
                 extra={"event": "job", "job_id": job.id, "state": job.state, "rows": job.n, "model": job.cost.model,
                        "device": device})

    # ------------------------------------------------------------------ inline pricing

    def _price_inline(self, session: Session, sock: zmq.Socket, batch: list[_Req]) -> None:
        """Price the small requests read together: one-option binomial requests with the same
        method in one batch (when there are at least :data:`COALESCE_MIN`), the rest one by one.

        Without a GPU a batch stays under the CPU kernel's threading threshold (it is priced by
        one thread: the numba thread pool may be busy with a job's chunk, and waiting for it
        would hold up every small request)."""
        groups: dict[int, list[_Req]] = {}
        singles: list[_Req] = []
        for req in batch:
            if (self.coalesce and req.row is not None and req.op == "price" and req.method.device != "gpu"
                    and "method" not in req.columns and "steps" not in req.columns):
                groups.setdefault(id(req.method), []).append(req)
            else:
                singles.append(req)
        cap = float("inf") if self._gpu else _serial_nodes()
        for group in groups.values():
            parts, part, work = [], [], 0.0
            for req in group:
                if part and work + req.cost.work > cap:
                    parts.append(part)
                    part, work = [], 0.0
                part.append(req)
                work += req.cost.work
            parts.append(part)
            for part in parts:
                if len(part) >= COALESCE_MIN:
                    try:
                        self._price_group(session, sock, part)
                        continue
                    except Exception:
                        log.warning("coalesced pricing failed; pricing one by one", exc_info=True)
                singles.extend(part)
        for req in singles:
            self._price_one(session, sock, req)

    def _price_group(self, session: Session, sock: zmq.Socket, group: list[_Req]) -> None:
        method = group[0].method
        rows = np.array([r.row for r in group], dtype=np.float64)
        cols = {"kind": rows[:, 0].astype(np.int8), "style": rows[:, 1].astype(np.int8)}
        for j, name in enumerate(("spot", "strike", "expiry", "rate", "dividend_yield", "volatility"), start=2):
            cols[name] = np.ascontiguousarray(rows[:, j])
        res = engine.price(Batch._from_valid(cols), method)
        k = len(group)
        rows_t = np.empty((k, len(wire.VALUE_FIELDS)))  # row i: that option's price and Greeks, contiguous
        for j, name in enumerate(wire.VALUE_FIELDS):
            rows_t[:, j] = getattr(res, name)
        self._shell_counters.coalesced += k
        self.metrics.coalesced.inc(k)
        diag = dict(res.diagnostics) if res.diagnostics and wire.plain(res.diagnostics) else {}
        diag["coalesced"] = k
        fallback = "gpu_fallback" in diag
        status, error = res.status, res.error
        for i, req in enumerate(group):
            content = wire.one_option_body(res.device, res.elapsed_s, status[i], error[i], diag)
            self._send_priced(session, sock, req, content, [memoryview(rows_t[i]).cast("B")], res.device, fallback)

    def _price_one(self, session: Session, sock: zmq.Socket, req: _Req) -> None:
        msg = req.msg
        try:
            out: list = []
            if req.op == "price":
                res = engine.price_table(req.columns, req.method)
                content = wire.result_body(res, out, wire.prices_only(req.method, req.columns))
                fallback = "gpu_fallback" in res.diagnostics
                device = res.device
            else:
                t = time.perf_counter()
                iv = engine.implied_vol_table(req.prices, req.columns, req.method)
                content = wire.implied_vol_body(iv, time.perf_counter() - t, out)
                device = iv.device
                fallback = "gpu_fallback" in iv.diagnostics
        except InvalidInputError as e:
            self._fail(session, sock, self._shell_counters, msg, req.op, req.op + "_reply", "InvalidInputError",
                       str(e), "invalid", req.t0, _invalid_details(e), req.cost.model, req.n)
            return
        except Exception as e:
            log.warning("%s failed: %s", msg.msg_type, e, exc_info=log.isEnabledFor(logging.DEBUG))
            self._fail(session, sock, self._shell_counters, msg, req.op, req.op + "_reply", type(e).__name__,
                       str(e) or repr(e), "failed", req.t0, None, req.cost.model, req.n)
            return
        self._send_priced(session, sock, req, content, out, device, fallback)

    def _send_priced(self, session: Session, sock: zmq.Socket, req: _Req, content: dict, buffers: list,
                     device: str, gpu_fallback: bool) -> None:
        msg = req.msg
        if req.job_id:
            content["job_id"] = req.job_id
        content["status"] = "ok"
        try:
            frames = session.serialize(session.header(req.op + "_reply"), content, msg.raw_header, None, buffers)
        except (TypeError, ValueError) as e:
            self._fail(session, sock, self._shell_counters, msg, req.op, req.op + "_reply", "ProtocolError",
                       f"reply could not be encoded: {e}", "failed", req.t0)
            return
        c = self._shell_counters
        if gpu_fallback:
            c.gpu_fallbacks += 1
            self.metrics.gpu_fallbacks.inc()
        size = _nbytes(buffers) if buffers else 0
        self._replies.keep((msg.header["session"], msg.header["msg_id"]), frames, size)
        if req.key is not None:
            cached = content if not req.job_id else {k: v for k, v in content.items() if k != "job_id"}
            self.cache.put(req.key, Entry(cached, buffers, req.cost.model, device, size + 512))
        dt = answer(sock, [*msg.identities, *frames], self.metrics, c, req.op, req.cost.model, _device_label(device),
                    "ok", req.t0)
        self._access(msg.header, req.op, req.cost.model, device, req.n, dt, "ok", req.job_id)

    def _fast_price(self, session: Session, sock: zmq.Socket, msg: Message, counters: _Counters, t0: float) -> bool:
        """Answer a one-option CRR price request priced on this thread's CPU with the least
        work: the same checks (limits, replay, cache), the same bits, the same reply, cache
        entry, metrics and access line as the general path (:meth:`_prepare`,
        :meth:`_price_one`), without building a table. Returns False, having done nothing,
        for anything else (options in the metadata, arrays, other columns or methods, GPU
        work, work over the inline limit, a retried or refused request, a row error): the
        general path then answers it."""
        content = msg.content
        if msg.metadata or msg.buffers or len(content) != 2 or not _FAST_CONTENT.issuperset(content):
            return False
        cols, spec = content["columns"], content["method"]
        if type(cols) is not dict or type(spec) is not dict or not _MAIN_SET.issuperset(cols):
            return False
        if (self._state == "draining" or self._stop.is_set() or msg.header["version"] != PROTOCOL_VERSION
                or not date_in_window(msg.header.get("date"), self.replay_window_s)):
            return False
        try:
            # the value's type is part of the key: 1 == True and 1.0 == 1 hash alike, and the
            # general path refuses greeks=1 and steps=100.0
            mkey = tuple((k, type(v), tuple(v) if type(v) is list else v) for k, v in spec.items())
            method = self._fast_methods.get(mkey)
        except TypeError:  # an unhashable field
            return False
        if method is None:
            try:
                method = self._method(spec, [])
            except (ProtocolError, InvalidInputError, TypeError, ValueError):
                return False
            if len(self._fast_methods) > 1024:
                self._fast_methods.clear()
            self._fast_methods[mkey] = method
        N = method.steps
        if method.name != "binomial" or method.device == "gpu" or type(N) is not int:
            return False
        row = scalar_row(cols)
        if row is None:
            return False
        cost = costs.one_tree_cost(N, method.greeks, "price", self.ns_per_node, limits_mod.DEFAULT_LIMITS)
        work, cpu_s = cost.work, cost.cpu_s
        if work == 0 or cpu_s > self.inline_max_s or (self._gpu and work >= self._gpu_min_nodes):
            return False  # (work 0: over the per-row limit, a row error the general path writes)
        header = msg.header
        rkey = (header["session"], header["msg_id"])
        if rkey in self._replies or rkey in self._inflight_reqs:
            return False  # a client's retry: the general path replays the first answer
        try:
            self.limits.check(cost, None, self.jobs.slots if self.jobs else 1)
        except LimitExceeded:
            return False
        key = None
        if self.cache.max_entries > 0:
            key = request_key("price", content, (), msg.raw_content)
            entry = self.cache.get(key) if key is not None else None
            if entry is not None:
                counters.by_op["price"] += 1
                self._reply_cached(msg, "price", entry, t0, None)
                return True
        vals = engine.price_one_values(row, method)
        if vals is None:
            return False
        counters.by_op["price"] += 1
        buffers = [wire.pack_one(*vals)]
        out = wire.one_option_body("cpu", time.perf_counter() - t0)
        out["status"] = "ok"
        frames = session.serialize(session.header("price_reply"), out, msg.raw_header, None, buffers)
        self._replies.keep(rkey, frames, _ONE_BYTES)
        if key is not None:
            self.cache.put(key, Entry(out, buffers, "binomial", "cpu", _ONE_BYTES + 512))
        dt = answer(sock, [*msg.identities, *frames], self.metrics, counters, "price", "binomial", "cpu", "ok", t0)
        self._access(header, "price", "binomial", "cpu", 1, dt, "ok")
        return True
