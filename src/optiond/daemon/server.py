"""The pricing daemon: a ZeroMQ service around :mod:`optiond.engine`.

Sockets (all bound on ``tcp://127.0.0.1``, free ports, written to the connection file):

* ``shell`` (ROUTER): requests, read by the thread that runs :meth:`Server.serve_forever`
  (the process's main thread under ``optiond serve``). Small requests are priced there at
  once; every message waiting when the thread looks is read in one go, and one-option
  binomial requests with the same method among them are priced together in one batch
  (*coalescing*: the engine's batch kernel gives the same bits, and on a GPU 100 options cost
  what one costs). Large requests become chunked jobs (:mod:`optiond.daemon.jobs`) priced by
  rank 0's pricing thread and the MPI workers; their replies come back through an in-process
  queue, so the shell thread keeps answering small requests meanwhile;
* ``control`` (ROUTER): ``ping``, ``status``, ``jobs``, ``cancel``, ``drain``, ``resume``
  and ``shutdown`` on a thread of its own, so a daemon busy with a long batch still answers;
* ``iopub`` (XPUB): signed events, the first frame a topic: ``heartbeat`` (every
  :data:`HEARTBEAT_S`, with the queue depth), ``status`` (state changes; one is sent to every
  new subscriber) and ``progress.<job_id>`` (job id, request msg_id, state, fraction done,
  ETA in seconds, rows done, chunks);
* ``hb`` (ROUTER echo, as Jupyter's heartbeat): answered by a C-level proxy thread that needs
  no Python lock, so a client can tell a busy daemon from a dead one in well under 2 s.

Operations (``msg_type`` ``<op>_request``, answered by ``<op>_reply``): ``ping``, ``status``,
``price``, ``implied_vol``, ``submit``, ``result``, ``cancel``, ``jobs``, ``drain``,
``resume``, ``shutdown``, and ``chain`` (a whole option chain: market and pricing on rank 0's
pricing thread in one round trip, :mod:`optiond.daemon.chain_op`). Every reply has ``status`` ``"ok"`` or ``"error"`` (with a short
``error`` text and ``ename``). Messages whose signature is missing or wrong are dropped without
a reply, counted (``auth_failures``) and logged, rate-limited, as "authentication failure";
every other bad message gets an error reply. Only a signed ``shutdown`` (or SIGTERM/SIGINT)
stops the daemon; ``drain`` stops it taking new work (``readyz`` says 503) and, with
``shutdown: true``, stops it once the work accepted is done.

Pricing requests (``price``, ``implied_vol``, ``submit``) take, beside ``columns`` and
``method``: ``force`` (skip the reply cache), ``deadline_s`` (seconds the client allows) and
``job_id`` (the client's name for the work, which ``cancel`` then accepts). Each is costed
and checked against the limits (:mod:`optiond.daemon.limits`) before anything is priced, and
refused with ``ename`` ``LimitExceeded`` (or ``DaemonDraining``, ``JobCancelled``) when over.
Identical requests are answered from a bounded cache (:mod:`optiond.daemon.cache`).

A request resent by a client's retry (same session and ``msg_id``) is answered from the reply
it already got, or attached to its job still running, never priced twice.

For IT: Prometheus metrics and ``/healthz``/``/readyz`` on 127.0.0.1
(:mod:`optiond.daemon.metrics`), a JSON-lines log with rotation (:mod:`optiond.daemon.logs`),
and under systemd (``Type=notify``) ``READY=1`` once it serves, ``WATCHDOG=1`` from the
control thread and ``STOPPING=1`` on the way out (:mod:`optiond.daemon.sdnotify`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import secrets
import signal
import socket
import struct
import sys
import threading
import time
from collections import Counter, OrderedDict
from concurrent import futures as cf
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zmq

from .. import __version__, engine
from ..models import (GREEK_FIELDS, METHODS, Batch, InvalidInputError, Method, scalar_row)
from . import limits as limits_mod
from . import chain_op, connections, paths, pool, sdnotify
from .cache import Entry, ReplyCache, request_key
from .jobs import FINAL_STATES, Job, JobManager, Waiter
from .limits import GREEK_TREES, LimitExceeded, Limits
from .metrics import HTTP_MAX_CONNECTIONS, HttpEndpoint, Metrics, gpu_memory_here
from .protocol import (FUTURE_SLACK_S, PROTOCOL_VERSION, REPLAY_WINDOW_S, SIGNATURE_SCHEME, AuthenticationError,
                       Message, ProtocolError, Session, date_in_window, decode_column, encode_array, encode_sparse_rows,
                       encode_sparse_strings, is_array_spec, packb, readable, send_frames, spin_seconds,
                       spin_until_readable, unpackb, utcnow)

log = logging.getLogger("optiond.daemon")

VALUE_FIELDS = ("price",) + GREEK_FIELDS
METHOD_FIELDS = frozenset(f.name for f in dataclasses.fields(Method))
_METHOD_STRINGS = ("name", "precision", "device")
MAX_COLUMNS = 64
MAX_ERROR_CHARS = 240
REPLY_CACHE_ENTRIES = 256
REPLY_CACHE_BYTES = 64 * 1024 * 1024
#: largest message the daemon accepts (bytes): a million options with a dozen columns as arrays
DEFAULT_MAX_BYTES = 128 * 1024 * 1024
#: messages queued per peer before ZeroMQ stops reading its connection (bounds what any local
#: process, signed or not, can make the daemon hold: RCVHWM x DEFAULT_MAX_BYTES a connection)
RECV_HWM = 32
POLL_MS = 100
HEARTBEAT_S = 0.5
#: requests estimated under this many seconds of single-core work are priced by the shell
#: thread at once; larger ones become jobs
INLINE_MAX_S = 0.002
#: messages read in one go by the shell thread (the pool from which requests are coalesced)
BATCH_READ = 128
#: jobs of at most this many chunks report their timeline in the reply's diagnostics
TIMELINE_CHUNKS = 64
#: fewest one-option requests priced together (fewer are priced one by one: same bits, and on
#: a CPU a batch of two costs more set-up than it saves)
COALESCE_MIN = 4
#: operations that change the daemon's state: each (session, msg_id) acts once; a copy
#: (a retry, or a replay within the replay window) gets the first reply again
ONCE_OPS = frozenset({"shutdown", "drain", "resume", "cancel"})
#: threads that hand chain requests to rank 0's pricing thread, and chain requests accepted
#: and unanswered at most (more are refused with LimitExceeded)
CHAIN_RUNNERS, CHAIN_QUEUE = 2, 16
#: the daemon process's interpreter switch interval (seconds; Python's default is 0.005)
SWITCH_INTERVAL_S = 0.0005
#: seconds between two checks that the connection file, its lock and pid file are still this daemon's
GUARD_S = 1.0
JOB_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
#: the columns the engine cannot price without (a table lacking one is handed to the engine
#: whole, so its error is the engine's own)
_REQUIRED = ("kind", "spot", "strike", "expiry", "rate")
_MAIN_COLUMNS = ("kind", "style", "spot", "strike", "expiry", "rate", "dividend_yield", "volatility")
#: per-row settings the engine reads by row index (their length is checked here)
_ROW_COLUMNS = ("method", "eps", "payoff")
_OK_STRINGS = {"default": "ok", "rows": [], "values": []}
_NO_ERRORS = {"default": "", "rows": [], "values": []}
_MAIN_SET = frozenset(_MAIN_COLUMNS)
_FAST_CONTENT = frozenset({"columns", "method"})
#: one option's price and Greeks as the reply's value block (6 x 1 float64, little-endian)
_ONE_VALUES = {"__nd__": ["<f8", [len(VALUE_FIELDS), 1], 0]}
_pack_values = struct.Struct(f"<{len(VALUE_FIELDS)}d").pack

Handler = Callable[[Message, float], "tuple[dict, list] | _Req | None"]


def devices() -> list[str]:
    """Devices the engine can price on: ``["cpu"]``, plus ``"gpu:<id> <name>"`` when the GPU
    backend sees one. An engine that exposes ``available_devices()`` is asked instead."""
    try:
        hook = getattr(engine, "available_devices", None)
        if callable(hook):
            return [str(d) for d in hook()]
        from ..kernels import binomial_gpu  # imports CuPy lazily; the probe is cached per process

        if binomial_gpu.available():
            return ["cpu", binomial_gpu.device_label()]
    except Exception:  # a broken GPU probe must not take the daemon down
        log.warning("device probe failed", exc_info=True)
    return ["cpu"]


def _gpu_available() -> bool:
    try:
        from ..kernels import binomial_gpu

        return binomial_gpu.available()
    except Exception:  # noqa: BLE001
        return False


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _plain(obj: Any, depth: int = 0) -> bool:
    """Whether msgpack can carry ``obj`` as is (diagnostics are forwarded only then)."""
    if depth > 8:
        return False
    if obj is None or isinstance(obj, (str, int, float, bool, bytes, np.generic)):
        return True
    if isinstance(obj, (list, tuple)):
        return all(_plain(v, depth + 1) for v in obj)
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in obj.items())
    return False


def _serial_nodes() -> float:
    """Tree nodes below which the CPU kernel prices a batch on one thread (no thread pool)."""
    from ..kernels import binomial_cpu

    return float(getattr(binomial_cpu, "PARALLEL_MIN_NODES", 200_000)) - 1.0


def _value_block(values: np.ndarray, method: Method, columns: dict) -> np.ndarray:
    """A job's ``(6, n)`` values, or their price row alone when :func:`pool.prices_only`."""
    return values[:1] if pool.prices_only(method, columns) else values


def _nbytes(buffers: list) -> int:
    return sum(len(b) if isinstance(b, bytes) else memoryview(b).nbytes for b in buffers)


def _device_label(device: str) -> str:
    """Short device label for metrics: ``cpu``, ``gpu:0``, or ``mixed``."""
    if "," in device:
        return "mixed"
    return device.split(" ", 1)[0] or "cpu"


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
    cost: limits_mod.Cost
    deadline: float
    prices: Any = None
    key: bytes | None = None
    row: tuple | None = None
    job_id: str | None = None


class Server:
    """The daemon. ``start()`` binds and writes the connection file, ``serve_forever()`` runs
    the request loop, ``close()`` cleans up; :func:`serve` does all three with signal handling.

    Args:
        connection_file: where to write the connection file (default: see
            :func:`optiond.daemon.paths.connection_file`).
        ip: the address to bind; loopback only by design.
        warmup: price a few tiny batches at start (and time the CPU kernel for the cost model)
            so the first real request does not pay for loading the compiled kernels.
        max_bytes: largest message accepted (bytes); larger ones get an error reply.
        limits: per-request limits (:class:`optiond.daemon.limits.Limits`).
        cache_entries, cache_bytes: size of the reply cache (0 entries: no cache).
        coalesce: price concurrent one-option requests together: ``"auto"`` where a GPU is
            present (a batch of them can go to the GPU in one launch), ``"always"`` (True),
            ``"never"`` (False). On a CPU coalescing costs more than it saves: each request is
            then answered by the short path (8 clients on 2 cores: 5,400 against 3,900
            requests/s coalesced).
        metrics_port: port of ``/metrics``, ``/healthz``, ``/readyz`` (0: a free one; None: off).
        log_dir: directory of the JSON-lines log (default: see :func:`optiond.daemon.logs.log_dir`);
            ``json_log=False`` writes none; ``access_log=False`` logs errors only, not every request.
        executor, ranks: the MPI pool (an ``MPIPoolExecutor`` at rank 0 and every rank's info
            from :func:`optiond.daemon.pool.bootstrap`), or None for this process alone.
        ipc: also bind the shell channel to a Unix-domain socket (POSIX only; see
            :func:`optiond.daemon.paths.ipc_socket_path`): local clients then skip the TCP
            stack (about 50 us less per round trip on a 2-core machine). The socket file is
            mode 0600 in a per-user 0700 directory; messages are signed as on TCP.
        max_connections: peer connections per transport at most (default: the descriptor
            budget shared equally, see :mod:`optiond.daemon.connections`); those over it are shed.
        replay_window_s: a request whose signed ``date`` is older than this (seconds) is
            refused with ``StaleMessage``; within it, a copy of a state-changing request
            (:data:`ONCE_OPS`) gets the first reply again and a copy of a pricing request the
            reply remembered for retries, so a captured message replayed has no new effect.
    """

    def __init__(self, connection_file: str | os.PathLike | None = None, *, ip: str = "127.0.0.1",
                 warmup: bool = True, max_bytes: int | None = None, limits: Limits | None = None,
                 cache_entries: int = 4096, cache_bytes: int = 256 << 20, coalesce: bool | str = "auto",
                 metrics_port: int | None = 0, log_dir: str | os.PathLike | None = None, json_log: bool = True,
                 access_log: bool = True, executor: Any = None, ranks: list[dict] | None = None,
                 inline_max_s: float = INLINE_MAX_S, ipc: bool = True, max_connections: int | None = None,
                 replay_window_s: float = REPLAY_WINDOW_S):
        if not ipaddress.ip_address(ip).is_loopback:
            raise ValueError(f"the daemon binds loopback addresses only, not {ip}")
        self.connection_file = paths.connection_file(connection_file)
        self.ip = ip
        self.warmup = warmup
        self.key = secrets.token_hex(32)
        self._session_args = {"max_bytes": max_bytes or DEFAULT_MAX_BYTES}
        self.session = Session(self.key.encode("ascii"), **self._session_args)
        self.pid = os.getpid()
        self.started = time.time()
        self.started_iso = utcnow()
        self.info: dict[str, Any] = {}
        self.limits = limits or Limits()
        self.cache = ReplyCache(cache_entries, cache_bytes)
        self.coalesce_mode = {True: "always", False: "never"}.get(coalesce, coalesce)  # type: ignore[call-overload]
        if self.coalesce_mode not in ("auto", "always", "never"):
            raise ValueError(f"coalesce must be 'auto', 'always' or 'never', not {coalesce!r}")
        self.coalesce = self.coalesce_mode == "always"  # 'auto' is decided in start(), once the GPU is known
        self.inline_max_s = inline_max_s
        #: after answering, the shell thread polls for the next request this long before it
        #: sleeps (``OPTIOND_SPIN_US``; :func:`optiond.daemon.protocol.spin_seconds`)
        self.spin_s = spin_seconds()
        self.ns_per_node = limits_mod.DEFAULT_NS_PER_NODE
        self._metrics_port = metrics_port
        self._log_dir = log_dir
        self._json_log_on = json_log
        self._access_on = access_log
        self._ipc_on = ipc and os.name == "posix"
        self._ipc_path: Path | None = None
        self._max_connections = max_connections
        self.replay_window_s = float(replay_window_s)
        self._once: OrderedDict[tuple[str, str], tuple[float, list]] = OrderedDict()
        self.guard: connections.ConnectionGuard | None = None
        self.fd_limit: int | None = None
        self._executor = executor
        self.ranks = list(ranks or [{"rank": 0, "pid": self.pid, "host": socket.gethostname(), "device": "cpu",
                                      "threads": None}])
        self._stop = threading.Event()
        self._state = "starting"
        self._drain_shutdown = False
        self._ctx: zmq.Context | None = None
        self._threads: list[threading.Thread] = []
        self._shell_counters = _Counters()
        self._control_counters = _Counters()
        self._job_counters = _Counters()
        self._replies: OrderedDict[tuple[str, str], list] = OrderedDict()
        self._reply_bytes = 0
        self._replies_lock = threading.Lock()
        self._inflight_reqs: dict[tuple[str, str], Job] = {}
        self._parked: list[tuple[float, Job, Waiter]] = []
        self._methods: dict[tuple, Method] = {}
        self._fast_methods: dict[tuple, Method] = {}
        self._default_method = Method()
        self._local = threading.local()
        self._thread_sockets: list[zmq.Socket] = []
        self._sockets_lock = threading.Lock()
        self._loop_tick = time.monotonic()
        self._control_tick = time.monotonic()
        self._gpu = False
        self._gpu_min_nodes = float("inf")
        self._worker_gpu_memory: dict[int, list] = {}
        self.jobs: JobManager | None = None
        self.metrics: Metrics | None = None
        self.http: HttpEndpoint | None = None
        self.json_log = None
        self._lock = paths.DaemonLock(self.connection_file)
        self._shell_ops: dict[str, Handler] = {
            "ping": self._op_ping, "status": self._op_status, "price": self._op_price,
            "implied_vol": self._op_implied_vol, "submit": self._op_submit, "result": self._op_result,
            "cancel": self._op_cancel, "shutdown": self._op_shutdown, "chain": self._op_chain}
        # chain requests wait here for rank 0's pricing thread (their replies leave from here)
        self._chain_runner = cf.ThreadPoolExecutor(CHAIN_RUNNERS, thread_name_prefix="optiond-chain")
        self._chain_pending = 0
        self._chain_lock = threading.Lock()
        self._control_ops: dict[str, Handler] = {
            "ping": self._op_ping, "status": self._op_status, "shutdown": self._op_shutdown,
            "cancel": self._op_cancel, "jobs": self._op_jobs, "drain": self._op_drain, "resume": self._op_resume}

    # ------------------------------------------------------------------ life cycle

    def start(self) -> dict[str, Any]:
        """Bind the sockets, start the threads (heartbeat, control, events, jobs, metrics) and
        write the connection file. Returns the connection info (as written, key included).

        Raises:
            paths.DaemonRunning: another daemon holds the connection file's lock (a RuntimeError).
            OSError / zmq.ZMQError: the file or a socket cannot be created.
        """
        self._refuse_if_running()
        self.fd_limit = connections.raise_nofile_limit()
        if self._json_log_on:
            from .logs import JsonLog

            self.json_log = JsonLog(self._log_dir, secret=self.key, access=self._access_on)
        ctx = self._ctx = zmq.Context()
        # every socket defaults to no linger: a context dropped after a failed start (or any
        # unclosed socket) can never block the process in term(); the shell and control
        # sockets set their own short linger below so the last replies still go out
        ctx.setsockopt(zmq.LINGER, 0)
        url = f"tcp://{self.ip}"
        max_msg = self.session.max_bytes

        def router() -> zmq.Socket:
            s = ctx.socket(zmq.ROUTER)
            s.setsockopt(zmq.LINGER, 1000)       # let the last replies (e.g. to shutdown) go out
            s.setsockopt(zmq.MAXMSGSIZE, max_msg)  # libzmq drops a peer that sends a larger frame
            s.setsockopt(zmq.RCVHWM, RECV_HWM)
            s.setsockopt(zmq.ROUTER_MANDATORY, 0)
            return s

        self._shell = router()
        self._control = router()
        self._iopub = ctx.socket(zmq.XPUB)
        self._iopub.setsockopt(zmq.LINGER, 0)
        self._iopub.setsockopt(zmq.XPUB_VERBOSE, 1)  # hear every subscription: each gets a status
        self._iopub.setsockopt(zmq.SNDHWM, 10_000)
        self._hb = ctx.socket(zmq.ROUTER)
        self._hb.setsockopt(zmq.LINGER, 0)
        self._hb.setsockopt(zmq.MAXMSGSIZE, 1024)
        ports = {name: sock.bind_to_random_port(url) for name, sock in
                 (("shell_port", self._shell), ("control_port", self._control), ("iopub_port", self._iopub),
                  ("hb_port", self._hb))}
        shell_ipc = self._bind_ipc() if self._ipc_on else None
        shell_eps = {f"{url}:{ports['shell_port']}": "shell"}
        if shell_ipc:
            shell_eps[shell_ipc] = "shell_ipc"
        self.guard = connections.ConnectionGuard(
            ctx, [(self._shell, shell_eps), (self._control, {f"{url}:{ports['control_port']}": "control"}),
                  (self._iopub, {f"{url}:{ports['iopub_port']}": "iopub"}),
                  (self._hb, {f"{url}:{ports['hb_port']}": "hb"})],
            self.fd_limit, self._max_connections, other_connections=lambda: self.http.connections if self.http else 0)
        tag = f"{id(self)}-{secrets.token_hex(4)}"
        self._outbox_url = f"inproc://optiond-out-{tag}"
        self._events_url = f"inproc://optiond-events-{tag}"
        self._outbox = ctx.socket(zmq.PULL)
        self._outbox.bind(self._outbox_url)
        self._events = ctx.socket(zmq.PULL)
        self._events.bind(self._events_url)
        self._hb_ctl = ctx.socket(zmq.PAIR)
        self._hb_ctl.bind(f"inproc://optiond-hb-{tag}")
        hb_ctl_peer = ctx.socket(zmq.PAIR)
        hb_ctl_peer.connect(f"inproc://optiond-hb-{tag}")
        self._gpu = _gpu_available()
        self.coalesce = self.coalesce_mode == "always" or (self.coalesce_mode == "auto" and self._gpu)
        if self._gpu:
            try:
                from ..kernels import dispatch

                self._gpu_min_nodes = float(dispatch.current()["gpu_min_nodes"])
            except Exception:  # noqa: BLE001
                self._gpu_min_nodes = 2e6
        local = next((r for r in self.ranks if r.get("rank") == 0), {})
        self.jobs = JobManager(self._on_job_event, executor=self._executor, workers=self.ranks[1:],
                               local_rank=int(local.get("local_rank", 0)), local_size=int(local.get("local_size", 1)),
                               max_queued=self.limits.max_queued_jobs,
                               max_inflight_bytes=self.limits.max_inflight_bytes)
        self.metrics = Metrics(self._metrics_state, __version__, PROTOCOL_VERSION,
                               log_stats=self.json_log.stats if self.json_log is not None else None)
        if self._metrics_port is not None:
            http_cap = max(8, min(HTTP_MAX_CONNECTIONS, self.guard.budget // 8))
            try:
                self.http = HttpEndpoint(self.metrics, self._health, self._ready, self.ip, int(self._metrics_port),
                                         http_cap)
            except OSError as e:  # the port is taken (another user's daemon): any free one
                log.warning("metrics port %s unavailable (%s); using a free port", self._metrics_port, e)
                self.http = HttpEndpoint(self.metrics, self._health, self._ready, self.ip, 0, http_cap)
        self._threads = [
            threading.Thread(target=self._heartbeat, args=(hb_ctl_peer,), name="optiond-heartbeat", daemon=True),
            threading.Thread(target=self._publisher, name="optiond-events", daemon=True),
            threading.Thread(target=self._guard, name="optiond-guard", daemon=True),
            threading.Thread(target=self._channel, args=(self._control, self._control_ops, self._control_counters,
                                                         self._control_tick_fn()),
                             name="optiond-control", daemon=True),
        ]
        for t in self._threads:
            t.start()
        self.info = {"transport": "tcp", "ip": self.ip, **ports, "signature_scheme": SIGNATURE_SCHEME, "key": self.key,
                     "pid": self.pid, "version": __version__, "protocol_version": PROTOCOL_VERSION,
                     "started": self.started_iso}
        self.info["max_message_bytes"] = self.session.max_bytes
        if shell_ipc:
            self.info["shell_ipc"] = shell_ipc
        if self.http is not None:
            self.info["metrics_port"] = self.http.port
        paths.write_connection_file(self.connection_file, self.info)
        self._set_state("starting")
        log.info("daemon %s (pid %d) bound on %s; %d MPI rank(s); metrics %s; log %s", __version__, self.pid,
                 paths.endpoint(self.info), len(self.ranks), self.http.url if self.http else "off",
                 self.json_log.path if self.json_log else "off")
        return self.info

    def _bind_ipc(self) -> str | None:
        """Bind the shell socket to a Unix-domain socket too; its ``ipc://`` URL, or None
        where that cannot be done (the daemon then serves TCP only)."""
        try:
            path = paths.ipc_socket_path(self.connection_file, self.pid)
            self._shell.bind(f"ipc://{path}")
            os.chmod(path, 0o600)
        except (OSError, zmq.ZMQError) as e:
            log.warning("no Unix-domain socket for local clients (%s); serving TCP only", e)
            return None
        self._ipc_path = path
        return f"ipc://{path}"

    def _refuse_if_running(self) -> None:
        """Take the connection file's lock for this daemon's life (:class:`paths.DaemonLock`),
        or raise :class:`paths.DaemonRunning` naming the daemon that holds it."""
        self._lock.acquire()

    def _guard(self) -> None:
        """Every :data:`GUARD_S`: keep the connection file, the lock and the pid file this
        daemon's. A connection file deleted or overwritten is written again (logged as a
        warning); a lock file deleted is taken again, and if another daemon has taken it
        meanwhile this one stops (logged as an error): the connection file is then the other's."""
        while not self._stop.wait(GUARD_S):
            try:
                if not self._lock.still_held():
                    log.warning("the lock or pid file of %s was removed; taking it again", self.connection_file)
                    self._lock.renew()
                try:
                    ours = paths.read_connection_file(self.connection_file).get("key") == self.key
                except (FileNotFoundError, paths.ConnectionFileError):
                    ours = False
                if not ours and not self._stop.is_set():
                    log.warning("connection file %s was removed or changed; writing it again (pid %d)",
                                self.connection_file, self.pid)
                    paths.write_connection_file(self.connection_file, self.info)
            except paths.DaemonRunning as e:
                log.error("daemon (pid %d) stops: %s took connection file %s after its lock file was deleted",
                          self.pid, f"pid {e.pid}" if e.pid else "another daemon", self.connection_file)
                self.stop()
            except OSError as e:
                log.warning("cannot check connection file %s: %s", self.connection_file, e)

    def stop(self) -> None:
        """Ask the loops to finish (thread- and signal-safe); :meth:`serve_forever` returns."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def state(self) -> str:
        """``starting``, ``serving``, ``draining`` or ``stopping``."""
        return self._state

    def serve_forever(self) -> None:
        """Serve shell requests in the calling thread until :meth:`stop` or a ``shutdown``."""
        if self.warmup:
            self._warm_up()
        if not self._stop.is_set():
            self._set_state("serving")
        sdnotify.notify("READY=1")
        self._shell_loop()

    def close(self) -> None:
        """Cancel what is left (its clients get a ``JobCancelled`` error), stop the threads,
        close the sockets and remove the connection file (if still ours)."""
        self._stop.set()
        if self._ctx is None:
            self._lock.release()
            return
        sdnotify.notify("STOPPING=1")
        self._set_state("stopping")
        if self.jobs is not None:
            self.jobs.close("was cancelled: the daemon is stopping")
            self._chain_runner.shutdown(wait=True, cancel_futures=True)  # their error replies go out below
            self._flush_outbox(deadline=time.monotonic() + 1.0)
        if getattr(self, "_hb_ctl", None) is not None:
            try:
                self._hb_ctl.send(b"TERMINATE")
            except zmq.ZMQError:
                pass
        for t in self._threads:
            t.join(timeout=5)
        if self.guard is not None:
            self.guard.close()
        if self.http is not None:
            self.http.close()
        paths.remove_connection_file(self.connection_file, key=self.key)
        if self._ipc_path is not None:
            paths.remove_ipc_socket(self._ipc_path)
        with self._sockets_lock:
            for s in self._thread_sockets:
                s.close(linger=0)
            self._thread_sockets.clear()
        for name in ("_shell", "_control", "_iopub", "_hb", "_hb_ctl", "_outbox", "_events"):
            sock = getattr(self, name, None)
            if sock is not None:
                sock.close()
        self._ctx.destroy(linger=0)  # closes any socket a thread left open, then terms
        self._ctx = None
        self._lock.release()  # after the connection file is gone: a new daemon starts clean
        log.info("daemon (pid %d) stopped", self.pid)
        if self.json_log is not None:
            self.json_log.close()
            self.json_log = None

    # ------------------------------------------------------------------ threads

    def _heartbeat(self, ctl: zmq.Socket) -> None:
        try:
            zmq.proxy_steerable(self._hb, self._hb, None, ctl)  # echo every frame back to its sender
        except zmq.ZMQError:
            pass
        finally:
            ctl.close()

    def _thread_socket(self, kind: str, url: str) -> zmq.Socket:
        """This thread's PUSH socket to the shell thread's outbox or to the event publisher."""
        s = getattr(self._local, kind, None)
        if s is None:
            s = self._ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 0)  # never drop a reply between two threads of this process
            s.connect(url)
            setattr(self._local, kind, s)
            with self._sockets_lock:
                self._thread_sockets.append(s)
        return s

    def _publish(self, topic: str, msg_type: str, content: dict) -> None:
        """Queue a signed event for the iopub socket (any thread)."""
        if self._ctx is None:
            return
        try:
            self._thread_socket("events", self._events_url).send_multipart(
                [topic.encode(), msg_type.encode(), packb(content)], zmq.NOBLOCK)
        except (zmq.ZMQError, TypeError):
            log.debug("event dropped", exc_info=True)

    def _set_state(self, state: str) -> None:
        self._state = state
        self._publish("status", "status", self._status_event())

    def _status_event(self) -> dict:
        st = self.jobs.stats() if self.jobs is not None else {"queue_depth": 0, "running": 0}
        return {"state": self._state, "pid": self.pid, "queue_depth": st["queue_depth"],
                "jobs_running": st["running"], "time": time.time()}

    def _publisher(self) -> None:
        """Owns the XPUB socket: signs and sends queued events, the heartbeat, and a status to
        each new subscriber."""
        session = Session(self.key.encode("ascii"), self.session.session, **self._session_args)
        poller = zmq.Poller()
        poller.register(self._events, zmq.POLLIN)
        poller.register(self._iopub, zmq.POLLIN)
        next_beat = time.monotonic()

        def send(topic: bytes, msg_type: str, content: dict) -> None:
            try:
                send_frames(self._iopub, [topic, *session.serialize(session.header(msg_type), content)], zmq.NOBLOCK)
            except (zmq.ZMQError, TypeError):
                pass

        while True:
            now = time.monotonic()
            if now >= next_beat:
                if not self._stop.is_set():
                    send(b"heartbeat", "heartbeat", {**self._status_event(), "uptime_s": time.time() - self.started})
                next_beat = now + HEARTBEAT_S
            try:
                events = dict(poller.poll(max(1, int((next_beat - now) * 1000))))
            except zmq.ZMQError:
                return
            if self._iopub in events:
                try:
                    while True:
                        sub = self._iopub.recv(zmq.NOBLOCK)
                        if sub[:1] == b"\x01":
                            send(b"status", "status", self._status_event())
                except zmq.Again:
                    pass
                except zmq.ZMQError:
                    return
            if self._events in events:
                try:
                    while True:
                        topic, msg_type, body = self._events.recv_multipart(zmq.NOBLOCK)
                        send(topic, msg_type.decode(), unpackb(body))
                except zmq.Again:
                    pass
                except zmq.ZMQError:
                    return
                except ProtocolError:
                    pass
            if self._stop.is_set() and self._state == "stopping" and self._ctx is not None:
                if not self._events.poll(0):
                    return

    def _warm_up(self) -> None:
        t0 = time.perf_counter()
        cols = {"kind": ["put", "call"], "style": ["american", "european"], "spot": 100.0, "strike": 100.0,
                "expiry": 0.5, "rate": 0.03, "dividend_yield": 0.01, "volatility": 0.2}
        try:
            for name in ("binomial", "black-scholes"):
                m = Method(name=name, steps=16)
                res = engine.price_table(cols, m)
                engine.implied_vol_table(np.nan_to_num(res.price, nan=5.0), cols, m)
            engine.price_table({**cols, "kind": "put", "style": "american"}, Method(steps=16))  # one-option path
            self.ns_per_node = self._time_cpu_kernel()
            if self._gpu and self.jobs is not None:  # load the GPU kernels where they will run
                self.jobs.run_local(pool.run_chunk, {"op": "price", "columns": cols,
                                                     "method": Method(steps=16, device="gpu")})
            if len(self.ranks) == 1 and self.jobs is not None:  # what the pricing thread uses
                self.ranks[0].update({k: v for k, v in self.jobs.run_local(pool.rank_info).items()
                                      if k in ("device", "threads")})
        except Exception:
            log.warning("warm-up failed (requests will still be served)", exc_info=True)
        log.info("warm-up done in %.2f s; devices %s; CRR %.3g ns/node on one core", time.perf_counter() - t0,
                 ", ".join(devices()), self.ns_per_node)

    @staticmethod
    def _time_cpu_kernel() -> float:
        """Single-core CRR speed, ns per tree node (the cost model's unit): the best of 7 runs of
        about 0.7 ms (runs of 0.2 ms, best of 3, measured 0.26-0.47 ns/node over 25 starts of
        one idle machine, and a high figure makes the limits refuse requests they should take)."""
        from ..kernels import binomial_cpu

        n, N = 8, 800
        args = (np.zeros(n, np.int8), np.ones(n, np.int8), np.full(n, 100.0), np.full(n, 100.0), np.full(n, 1.0),
                np.full(n, 0.03), np.zeros(n), np.full(n, 0.2), np.full(n, N, np.int64))
        best = float("inf")
        for _ in range(7):
            t = time.perf_counter()
            binomial_cpu.crr_batch(*args, greeks=False, parallel=False, check=False)
            best = min(best, time.perf_counter() - t)
        nodes = n * (N + 1) * (N + 2) / 2
        return float(min(max(best / nodes * 1e9, 0.05), 10.0))

    def _control_tick_fn(self) -> Callable[[], None]:
        """Marks the control loop alive (``/healthz``) and sends systemd's ``WATCHDOG=1`` when due."""
        interval = sdnotify.watchdog_interval()
        last = [0.0]

        def tick() -> None:
            now = time.monotonic()
            self._control_tick = now
            if interval is not None and now - last[0] >= interval and (
                    self._state == "starting" or now - self._loop_tick < 10.0):
                sdnotify.notify("WATCHDOG=1")  # only while the request loop turns too (once it runs)
                last[0] = now

        return tick

    def _channel(self, sock: zmq.Socket, ops: dict[str, Handler], counters: _Counters,
                 tick: Callable[[], None] | None = None) -> None:
        """The control socket's loop: receive, authenticate, dispatch, reply. Never raises."""
        session = Session(self.key.encode("ascii"), self.session.session, **self._session_args)
        stop = self._stop
        sock.setsockopt(zmq.RCVTIMEO, POLL_MS)  # a blocking receive that wakes up to check ``stop``
        while not stop.is_set():
            if tick is not None:
                tick()
            try:
                msg = self._receive(session, sock, counters)
            except zmq.Again:
                continue
            except zmq.ZMQError as e:
                if stop.is_set() or e.errno == zmq.ETERM:
                    break
                log.warning("receive failed: %s", e)
                continue
            if msg is None:
                continue
            try:
                self._handle(session, sock, msg, ops, counters, time.perf_counter())
            except Exception:
                log.warning("unexpected error answering %s", msg.msg_type, exc_info=True)

    def _receive(self, session: Session, sock: zmq.Socket, counters: _Counters, flags: int = 0) -> Message | None:
        """One authenticated, decoded message from ``sock``; None when it was dropped (no valid
        signature: counted, never answered) or answered with a ProtocolError (counted). Never
        lets a peer's bytes raise; ``zmq.Again`` and ``zmq.ZMQError`` are the caller's."""
        try:
            return session.recv(sock, flags)
        except zmq.ZMQError:
            raise
        except AuthenticationError as e:
            counters.auth_failure(str(e))
            if self.guard is not None and e.srcfd >= 0:  # a key holder never sends one: close its connection
                self.guard.drop(e.srcfd)
        except ProtocolError as e:
            counters.malformed += 1
            counters.outcomes["protocol_error"] += 1
            self._reply_error(session, sock, counters, e.identities, e.header, "ProtocolError", str(e))
        except Exception:  # never let a peer kill the loop
            counters.malformed += 1
            log.warning("unexpected error reading a message", exc_info=True)
        return None

    def _shell_loop(self) -> None:
        """The shell socket's loop: read every waiting message, answer or queue each, price
        the small ones (coalesced), forward finished jobs' replies. Never raises."""
        session = Session(self.key.encode("ascii"), self.session.session, **self._session_args)
        self._shell_session = session
        sock, outbox, stop = self._shell, self._outbox, self._stop
        counters = self._shell_counters
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(outbox, zmq.POLLIN)
        noblock = zmq.NOBLOCK
        spin, busy = self.spin_s, False
        while not stop.is_set():
            self._loop_tick = time.monotonic()
            try:
                # a client working through cells sends its next request within microseconds of
                # the last reply: poll for it before sleeping (see protocol.spin_seconds)
                if busy and spin_until_readable(sock, spin):
                    ready = {sock: zmq.POLLIN, outbox: zmq.POLLIN} if readable(outbox) else {sock: zmq.POLLIN}
                else:
                    ready = dict(poller.poll(POLL_MS))
            except zmq.ZMQError:
                break
            busy = False
            if self._parked:
                self._expire_parked(session)
            if self._drain_shutdown and self.jobs is not None and not self.jobs.active():
                log.info("drained: shutting down")
                self._flush_outbox()
                stop.set()
            if outbox in ready:
                self._flush_outbox()
            if sock not in ready:
                continue
            t0 = time.perf_counter()
            batch: list[_Req] = []
            msgs: list[Message] = []
            for i in range(BATCH_READ):
                if i and not readable(sock):  # cheaper than the zmq.Again of an empty read
                    break
                try:
                    msg = self._receive(session, sock, counters, noblock)
                except zmq.Again:
                    break
                except zmq.ZMQError as e:
                    if stop.is_set() or e.errno == zmq.ETERM:
                        return
                    log.warning("receive failed: %s", e)
                    break
                if msg is not None:
                    msgs.append(msg)
            busy = spin > 0 and bool(msgs)
            # a few requests: each one-option CPU price is answered at once by the short path;
            # many together: the general path, which coalesces them into batches
            fast = len(msgs) < COALESCE_MIN or not self.coalesce
            for msg in msgs:
                try:
                    if fast and msg.header["msg_type"] == "price_request" and self._fast_price(session, sock, msg,
                                                                                               counters, t0):
                        continue
                    req = self._handle(session, sock, msg, self._shell_ops, counters, t0)
                    if req is not None:
                        batch.append(req)
                except Exception:
                    log.warning("unexpected error answering %s", msg.msg_type, exc_info=True)
            if batch:
                try:
                    self._price_inline(session, sock, batch)
                except Exception:
                    log.error("unexpected error pricing a batch", exc_info=True)

    def _flush_outbox(self, deadline: float | None = None) -> None:
        """Send the replies the job thread queued (the shell socket is this thread's)."""
        while True:
            try:
                frames = self._outbox.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                if deadline is None or time.monotonic() >= deadline or not self._outbox.poll(50):
                    return
                continue
            except zmq.ZMQError:
                return
            try:
                self._shell.send_multipart(frames, copy=False)
            except zmq.ZMQError:
                log.debug("could not send a job reply", exc_info=True)

    # ------------------------------------------------------------------ dispatch

    def _reply_error(self, session: Session, sock: zmq.Socket, counters: _Counters, identities: list[bytes],
                     parent: Any, ename: str, error: str, reply_type: str = "error_reply",
                     extra: dict | None = None) -> None:
        counters.errors += 1
        content = {"status": "error", "ename": ename, "error": _short(error), **(extra or {})}
        if not identities:
            return
        try:
            send_frames(sock, [*identities, *session.serialize(session.header(reply_type), content, parent or {})])
        except (zmq.ZMQError, TypeError):
            log.debug("could not send an error reply", exc_info=True)

    def _handle(self, session: Session, sock: zmq.Socket, msg: Message, ops: dict[str, Handler],
                counters: _Counters, t0: float) -> _Req | None:
        """Answer ``msg`` now, or return the pricing request to price inline with the batch."""
        msg_type = msg.msg_type
        op = msg_type[:-8] if msg_type.endswith("_request") else ""
        handler = ops.get(op)
        if handler is None:
            known = ", ".join(f"{o}_request" for o in ops)
            counters.outcomes["protocol_error"] += 1
            self._reply_error(session, sock, counters, msg.identities, msg.raw_header, "ProtocolError",
                              f"unknown msg_type {msg_type[:40]!r}; expected one of {known}")
            return None
        reply_type = op + "_reply"
        if msg.header["version"].split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
            counters.outcomes["protocol_error"] += 1
            self._reply_error(session, sock, counters, msg.identities, msg.raw_header, "ProtocolError",
                              f"protocol version {msg.header['version'][:20]!r} not supported (daemon speaks "
                              f"{PROTOCOL_VERSION})", reply_type)
            return None
        if not date_in_window(msg.header.get("date"), self.replay_window_s):
            counters.outcomes["stale"] += 1
            self._reply_error(session, sock, counters, msg.identities, msg.raw_header, "StaleMessage",
                              f"message dated {str(msg.header.get('date'))[:40]!r} is outside the daemon's "
                              f"{self.replay_window_s:g} s replay window (a replay, or a clock far off); "
                              f"send it again", reply_type)
            return None
        if op in ONCE_OPS:
            okey = (msg.header["session"], msg.header["msg_id"])
            with self._replies_lock:
                first = self._once.get(okey)
            if first is not None:  # a retry or a replay: answered as the first time, not acted on
                counters.replayed += 1
                send_frames(sock, [*msg.identities, *first[1]])
                return None
        pricing = op in ("price", "implied_vol", "submit")
        if pricing:
            rkey = (msg.header["session"], msg.header["msg_id"])
            with self._replies_lock:
                cached = self._replies.get(rkey)
            if cached is not None:  # a client's retry of a request already answered
                counters.replayed += 1
                send_frames(sock, [*msg.identities, *cached[0]])
                return None
            job = self._inflight_reqs.get(rkey)
            if job is not None and self._reattach(job, msg, reply_type, t0):
                counters.replayed += 1
                return None
        counters.by_op[op] += 1
        model = device = "-"
        try:
            out = handler(msg, t0)
            if out is None or isinstance(out, _Req):  # answered already, or to price with the batch
                return out
            content, buffers = out
        except InvalidInputError as e:
            value = e.value if isinstance(e.value, (int, float, bool, type(None))) else _short(e.value)
            self._fail(session, sock, counters, msg, op, reply_type, "InvalidInputError", str(e), "invalid", t0,
                       {"field": _short(e.field), "row": e.row, "value": value, "reason": _short(e.reason)})
            return None
        except LimitExceeded as e:
            self._fail(session, sock, counters, msg, op, reply_type, "LimitExceeded", str(e), "refused", t0,
                       {"limit": e.limit})
            return None
        except _Refused as e:
            self._fail(session, sock, counters, msg, op, reply_type, e.ename, str(e), e.outcome, t0, e.extra)
            return None
        except ProtocolError as e:
            self._fail(session, sock, counters, msg, op, reply_type, "ProtocolError", str(e), "protocol_error", t0)
            return None
        except Exception as e:
            log.warning("%s failed: %s", msg_type, e, exc_info=log.isEnabledFor(logging.DEBUG))
            self._fail(session, sock, counters, msg, op, reply_type, type(e).__name__, str(e) or repr(e), "failed", t0)
            return None
        content.setdefault("status", "ok")
        try:
            frames = session.serialize(session.header(reply_type), content, msg.raw_header, None, buffers)
        except (TypeError, ValueError) as e:
            self._fail(session, sock, counters, msg, op, reply_type, "ProtocolError",
                       f"reply could not be encoded: {e}", "failed", t0)
            return None
        send_frames(sock, [*msg.identities, *frames])
        counters.outcomes["ok"] += 1
        dt = time.perf_counter() - t0
        if op in ONCE_OPS:
            self._remember_once((msg.header["session"], msg.header["msg_id"]), frames)
        if pricing:  # a submit: the job is accepted
            self._remember(rkey, frames, _nbytes(buffers))
            self._access(msg.header, op, "-", "-", int(content.get("n", 0)), dt, "accepted", content.get("job_id"))
        self.metrics.observe(op, model, device, "ok", dt)
        return None

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
        work = (N + 1.0) * (N + 2.0) * 0.5 * (GREEK_TREES if method.greeks else 1)
        cpu_s = work * self.ns_per_node * 1e-9
        if cpu_s > self.inline_max_s or (self._gpu and work >= self._gpu_min_nodes):
            return False
        header = msg.header
        rkey = (header["session"], header["msg_id"])
        if rkey in self._replies or rkey in self._inflight_reqs:
            return False  # a client's retry: the general path replays the first answer
        try:
            self.limits.check(limits_mod.Cost(1, "binomial", work, cpu_s, limits_mod.BYTES_PER_OPTION + 16 * (N + 1),
                                              N), None, self.jobs.slots if self.jobs else 1)
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
        buffers = [_pack_values(*vals)]
        out = {"n": 1, "values": _ONE_VALUES, "row_status": _OK_STRINGS, "row_error": _NO_ERRORS, "device": "cpu",
               "elapsed_s": time.perf_counter() - t0, "via": "daemon", "status": "ok"}
        frames = session.serialize(session.header("price_reply"), out, msg.raw_header, None, buffers)
        send_frames(sock, [*msg.identities, *frames])
        counters.outcomes["ok"] += 1
        self._remember(rkey, frames, len(VALUE_FIELDS) * 8)
        if key is not None:
            self.cache.put(key, Entry(out, buffers, "binomial", "cpu", len(VALUE_FIELDS) * 8 + 512))
        dt = time.perf_counter() - t0
        self.metrics.observe("price", "binomial", "cpu", "ok", dt)
        self._access(header, "price", "binomial", "cpu", 1, dt, "ok")
        return True

    def _fail(self, session: Session, sock: zmq.Socket, counters: _Counters, msg: Message, op: str, reply_type: str,
              ename: str, error: str, outcome: str, t0: float, extra: dict | None = None, model: str = "-",
              n: int = 0) -> None:
        self._reply_error(session, sock, counters, msg.identities, msg.raw_header, ename, error, reply_type, extra)
        counters.outcomes[outcome] += 1
        dt = time.perf_counter() - t0
        self.metrics.observe(op, model, "-", outcome, dt)
        self._access(msg.header, op, model, "-", n, dt, outcome, error=_short(error))

    def _access(self, h: dict, op: str, model: str, device: str, n: int, seconds: float, outcome: str,
                job_id: str | None = None, error: str | None = None) -> None:
        """One line of the JSON access log (``optiond.access``): message id, client (its
        session id), op, model, device, rows, duration, outcome; never the key."""
        jl = self.json_log
        if jl is None:
            return
        ok = outcome in ("ok", "cached", "accepted")
        if ok and not jl.access_enabled:
            return
        fields = {"event": "request", "msg_id": h["msg_id"], "client": h["session"], "op": op, "model": model,
                  "device": device, "rows": n, "duration_ms": round(seconds * 1e3, 3), "outcome": outcome}
        if job_id:
            fields["job_id"] = job_id
        if error:
            fields["error"] = error
        jl.access(fields, warning=not ok)

    def _remember_once(self, key: tuple[str, str], frames: list) -> None:
        """Keep the reply of a state-changing request for the replay window (its copies get it
        again); older ones are forgotten (their copies are refused as stale by then: a date
        may be at most FUTURE_SLACK_S ahead of the clock)."""
        now = time.monotonic()
        with self._replies_lock:
            self._once[key] = (now, frames)
            while self._once and (len(self._once) > REPLY_CACHE_ENTRIES * 64
                                  or next(iter(self._once.values()))[0] < now - self.replay_window_s - FUTURE_SLACK_S - 2.0):
                self._once.popitem(last=False)

    def _remember(self, key: tuple[str, str], frames: list, size: int = 0) -> None:
        """Keep a reply for a retry of its request (same session and msg_id); ``size`` is its
        buffers' bytes (the other frames are small)."""
        if size > REPLY_CACHE_BYTES // 4:
            return
        size += 1024
        with self._replies_lock:
            self._replies[key] = (frames, size)
            self._reply_bytes += size
            while len(self._replies) > REPLY_CACHE_ENTRIES or self._reply_bytes > REPLY_CACHE_BYTES:
                _, (_, old) = self._replies.popitem(last=False)
                self._reply_bytes -= old

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
            N = method.steps
            work = (N + 1.0) * (N + 2.0) * 0.5 * (GREEK_TREES if method.greeks else 1)
            cost = limits_mod.Cost(1, "binomial", work, work * self.ns_per_node * 1e-9,
                                   limits_mod.BYTES_PER_OPTION + 16 * (N + 1), N)
            n = 1
        else:
            n = 1
            for v in columns.values():
                if isinstance(v, np.ndarray) and v.ndim >= 1:
                    n = max(n, v.shape[0])
            if isinstance(prices, np.ndarray) and prices.ndim == 1:
                n = max(n, prices.shape[0])
            msg_bytes = sum(len(b) for b in buffers)
            cost = limits_mod.estimate(op, columns, method, n, msg_bytes, self.ns_per_node)
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
        send_frames(self._shell, [*msg.identities, *frames])
        self._shell_counters.outcomes["cached"] += 1
        dt = time.perf_counter() - t0
        self.metrics.observe(op, entry.model, _device_label(entry.device), "cached", dt)
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
        for v in cols.values():
            if isinstance(v, np.ndarray) and (v.ndim != 1 or v.shape[0] != req.n):
                return False
        if req.op == "implied_vol" and isinstance(req.prices, np.ndarray) and (
                req.prices.ndim > 1 or (req.prices.ndim == 1 and req.prices.shape[0] != req.n)):
            return False
        steps = req.method.steps
        return not (np.ndim(steps) > 1 or (np.ndim(steps) == 1 and np.shape(steps)[0] != req.n))

    def _on_gpu(self, req: _Req, gpu: bool) -> bool:
        """Whether the engine will price ``req`` on a GPU (given that one is there)."""
        return (gpu and req.method.name == "binomial" and req.method.device != "cpu"
                and (req.method.device == "gpu" or req.cost.work >= self._gpu_min_nodes))

    def _goes_inline(self, req: _Req) -> bool:
        """Small CPU work is priced by the shell thread at once; GPU work and large work go to
        the pricing thread(s) as a job (one thread owns the CUDA context). A table the engine
        will reject as a whole is handed to it whole, so the error is the engine's own."""
        small = req.cost.cpu_s <= self.inline_max_s and not self._on_gpu(req, self._gpu)
        return small or not self._whole_table_ok(req)

    # ------------------------------------------------------------------ operations

    def _op_ping(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        return {"pid": self.pid, "version": __version__, "time": time.time()}, []

    def _alive_workers(self) -> int:
        here = self.ranks[0].get("host") if self.ranks else None
        alive = 0
        for r in self.ranks[1:]:
            if r.get("host") == here and isinstance(r.get("pid"), int):
                try:
                    os.kill(r["pid"], 0)
                except ProcessLookupError:
                    continue
                except PermissionError:
                    pass
            alive += 1
        if self.jobs is not None:
            alive = min(alive, self.jobs.slots - 1)
        return alive

    def _gpu_memory(self) -> list[dict]:
        out = [dict(m, rank=0) for m in gpu_memory_here()]
        seen = {m["device"] for m in out}
        for r, mem in sorted(self._worker_gpu_memory.items()):
            for m in mem:
                if (r, m.get("device")) not in seen:
                    out.append(dict(m, rank=r))
        return out

    def _cpu_threads(self) -> int | None:
        """Pricing threads of rank 0 (numba's, as :func:`optiond.daemon.pool.configure_rank` set them)."""
        threads = self.ranks[0].get("threads") if self.ranks else None
        if threads:
            return int(threads)
        try:
            import numba

            return int(numba.get_num_threads())
        except Exception:  # noqa: BLE001
            return None

    def status(self) -> dict[str, Any]:
        """The numbers ``optiond status`` and the panel show (see :meth:`Client.status`)."""
        counters = (self._shell_counters, self._control_counters, self._job_counters)
        by_op: Counter[str] = Counter()
        outcomes: Counter[str] = Counter()
        for c in counters:
            by_op.update(c.by_op)
            outcomes.update(c.outcomes)
        jobs = self.jobs.stats() if self.jobs is not None else {"queue_depth": 0, "running": 0, "queued": 0,
                                                                  "counts": {}, "slots": 1, "workers_lost": 0}
        cache = self.cache.stats()
        gpu_mem = self._gpu_memory()
        workers = len(self.ranks) - 1
        alive = self._alive_workers()
        out = {
            "version": __version__, "protocol_version": PROTOCOL_VERSION, "pid": self.pid, "state": self._state,
            "started": self.started_iso, "uptime_s": time.time() - self.started, "devices": devices(),
            "requests_served": sum(by_op.values()), "by_op": dict(by_op), "requests_by_outcome": dict(outcomes),
            "errors": sum(c.errors for c in counters), "auth_failures": sum(c.auth_failures for c in counters),
            "malformed": sum(c.malformed for c in counters), "replayed": sum(c.replayed for c in counters),
            "queue_depth": jobs["queue_depth"], "jobs_running": jobs["running"], "jobs_queued": jobs["queued"],
            "jobs_by_outcome": jobs["counts"],
            "cache_hit_ratio": cache["hit_ratio"], "cache": cache,
            "coalesced_requests": sum(c.coalesced for c in counters),
            "coalescing": self.coalesce, "coalesce_mode": self.coalesce_mode,
            "gpu_fallbacks": sum(c.gpu_fallbacks for c in counters),
            "gpu_memory": gpu_mem,
            "mpi_ranks": len(self.ranks), "mpi_workers": workers, "mpi_workers_alive": alive,
            "mpi": {"ranks": len(self.ranks), "workers": workers, "alive": alive, "total": workers,
                    "lost": jobs["workers_lost"], "slots": jobs["slots"],
                    "rank_info": [{k: r.get(k) for k in ("rank", "pid", "host", "device", "threads")}
                                  for r in self.ranks]},
            "cpu_threads": self._cpu_threads(), "methods": list(METHODS),
            "limits": self.limits.as_dict(), "ns_per_node": self.ns_per_node,
            "endpoint": paths.endpoint(self.info) if self.info else None,
            "connection_file": str(self.connection_file),
            "metrics_url": self.http.url if self.http else None,
            "log_file": str(self.json_log.path) if self.json_log else None,
            "connections": self._connections(),
        }
        if self._gpu:
            try:
                import cupy

                out["cupy_version"] = cupy.__version__
                out["cuda_version"] = str(cupy.cuda.runtime.runtimeGetVersion())
            except Exception:  # noqa: BLE001
                pass
        return out

    def _metrics_state(self) -> dict[str, Any]:
        jobs = self.jobs.stats() if self.jobs is not None else {"queue_depth": 0, "running": 0}
        counters = (self._shell_counters, self._control_counters, self._job_counters)
        return {"queue_depth": jobs["queue_depth"], "jobs_running": jobs["running"], "cache": self.cache.stats(),
                "gpu_memory": self._gpu_memory(), "mpi": {"ranks": len(self.ranks),
                                                         "workers_alive": self._alive_workers()},
                "auth_failures": sum(c.auth_failures for c in counters),
                "malformed": sum(c.malformed for c in counters), "uptime_s": time.time() - self.started,
                "ready": self._ready()[0], "connections": self._connections()}

    def _connections(self) -> dict[str, Any]:
        """Peer connections open and shed by transport (``http`` included), the per-transport
        cap, the descriptor budget and limit (see :mod:`optiond.daemon.connections`)."""
        st = self.guard.stats() if self.guard is not None else {"open": {}, "shed": {}, "cap": None,
                                                                 "budget": None, "fd_limit": self.fd_limit}
        if self.http is not None:
            st["open"]["http"] = self.http.connections
            st["shed"]["http"] = self.http.shed
        return st

    def _health(self) -> tuple[bool, dict]:
        now = time.monotonic()
        loop_age, control_age = now - self._loop_tick, now - self._control_tick
        ok = not self._stop.is_set() and control_age < 2.0 and (self._state == "starting" or loop_age < 2.0)
        return ok, {"state": self._state, "loop_age_s": round(loop_age, 3), "control_age_s": round(control_age, 3)}

    def _ready(self) -> tuple[bool, dict]:
        healthy, detail = self._health()
        reasons = []
        if not healthy:
            reasons.append("not healthy")
        if self._state != "serving":
            reasons.append(f"state {self._state}")
        if len(self.ranks) > 1 and self._alive_workers() < len(self.ranks) - 1:
            reasons.append("MPI workers lost")
        return not reasons, {**detail, "reasons": reasons}

    def _op_status(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        return self.status(), []

    def _op_shutdown(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        log.info("shutdown requested by session %s", msg.header["session"][:8])
        self._stop.set()
        return {"pid": self.pid, "stopping": True}, []

    def _op_drain(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        shutdown = msg.content.get("shutdown", False)
        if not isinstance(shutdown, bool):
            raise ProtocolError("drain: 'shutdown' must be true or false")
        log.info("drain requested by session %s (shutdown when done: %s)", msg.header["session"][:8], shutdown)
        self._drain_shutdown = shutdown
        self._set_state("draining")
        st = self.jobs.stats()
        return {"state": "draining", "queue_depth": st["queue_depth"], "shutdown": shutdown}, []

    def _op_resume(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        if self._stop.is_set():
            raise _Refused("DaemonStopping", "the daemon is stopping")
        self._drain_shutdown = False
        self._set_state("serving")
        return {"state": "serving"}, []

    def _op_jobs(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        slots = self.jobs.slots
        return {"jobs": [j.summary(slots) for j in self.jobs.active()]}, []

    def _op_cancel(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        jid = msg.content.get("job_id")
        if not isinstance(jid, str) or not 0 < len(jid) <= 64:
            raise ProtocolError("cancel needs 'job_id' (a string of at most 64 characters)")
        jobs = self.jobs.cancel(jid)
        log.info("cancel of job %s requested by session %s: %d running", jid, msg.header["session"][:8], len(jobs))
        return {"job_id": jid, "cancelled": len(jobs), "states": [j.state for j in jobs]}, []

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
        priced on rank 0's pricing thread (the GPU's) by a chain runner thread, which sends the
        reply. A client's retry of it is priced again (it changes nothing)."""
        if self._state == "draining" or self._stop.is_set():
            raise _Refused("DaemonDraining", "the daemon is draining: it finishes the work it has and takes no new "
                                             "work; try again after its restart")
        df, market = chain_op.decode_request(msg.content, msg.buffers, self.limits.max_options)
        cost = chain_op.cost(df, market, _nbytes(list(msg.buffers)), self.ns_per_node)
        deadline = self.limits.check(cost, self._option(msg, "deadline_s"), self.jobs.slots if self.jobs else 1)
        with self._chain_lock:
            if self._chain_pending >= CHAIN_QUEUE:
                raise LimitExceeded("max_queued_jobs", self._chain_pending + 1, CHAIN_QUEUE,
                                    f"the daemon has {self._chain_pending} chain requests waiting (limit "
                                    f"{CHAIN_QUEUE}); try again when some finish")
            self._chain_pending += 1
        try:
            self._chain_runner.submit(self._run_chain, msg, df, market, t0, deadline)
        except RuntimeError:  # shut down meanwhile
            with self._chain_lock:
                self._chain_pending -= 1
            raise _Refused("DaemonDraining", "the daemon is stopping") from None
        return None

    def _run_chain(self, msg: Message, df: Any, market: dict, t0: float, deadline_s: float) -> None:
        """Chain runner thread: price the chain on rank 0's pricing thread and send the reply
        (or the error) through the outbox. Never raises."""
        outcome, device, error = "ok", "-", None
        try:
            try:
                if self.jobs is not None:
                    content, buffers = self.jobs.run_local(chain_op.run, df, market, timeout=deadline_s)
                else:
                    content, buffers = chain_op.run(df, market)
                device = str(content.get("device", "-"))
                content["status"] = "ok"
            except InvalidInputError as e:
                outcome, error = "invalid", str(e)
                content, buffers = {"status": "error", "ename": "InvalidInputError", "error": _short(str(e)),
                                    "field": _short(e.field), "row": e.row, "value": _short(str(e.value)),
                                    "reason": _short(e.reason)}, []
            except (cf.TimeoutError, TimeoutError):
                outcome, error = "deadline", f"the chain took longer than its deadline of {deadline_s:.3g} s"
                content, buffers = {"status": "error", "ename": "DeadlineExceeded", "error": error}, []
            except cf.CancelledError:
                outcome, error = "cancelled", "the chain was cancelled: the daemon is stopping"
                content, buffers = {"status": "error", "ename": "JobCancelled", "error": error}, []
            except Exception as e:  # noqa: BLE001 (the client gets the reason; the daemon goes on)
                log.warning("chain request failed: %s", e, exc_info=log.isEnabledFor(logging.DEBUG))
                outcome, error = "failed", str(e) or repr(e)
                content, buffers = {"status": "error", "ename": type(e).__name__, "error": _short(error)}, []
            session = Session(self.key.encode("ascii"), self.session.session, **self._session_args)
            frames = session.serialize(session.header("chain_reply"), content, msg.raw_header, None, buffers)
            self._thread_socket("outbox", self._outbox_url).send_multipart([*msg.identities, *frames],
                                                                           copy=len(buffers) == 0)
            dt = time.perf_counter() - t0
            self.metrics.observe("chain", "chain", _device_label(device), outcome, dt)
            self._access(msg.header, "chain", "chain", device, len(df), dt, outcome, None,
                         None if error is None else _short(error))
        except Exception:  # noqa: BLE001 (a socket closed by a stopping daemon: nobody to answer)
            log.debug("chain reply not sent", exc_info=True)
        finally:
            with self._chain_lock:
                self._chain_pending -= 1

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
        """The ``lease_s`` run option of a submit: the job is cancelled when its client has not
        asked for it (``result``) for that long (seconds, 0.1 to 3600; None: no lease)."""
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
            send_frames(self._shell, [*waiter.identities, *frames])
        self._parked = keep

    # ------------------------------------------------------------------ jobs

    def _start_job(self, req: _Req, kind: str, lease_s: float | None = None) -> Job:
        msg = req.msg
        jid = req.job_id or self.jobs.new_id()
        weights = limits_mod.row_weights(req.columns, req.method, req.n) if req.n > 1 else None
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
        diagnostics = {k: v for k, v in merged.items() if not k.startswith("_") and _plain(v)}
        diagnostics.update(chunks=len(job.chunks), workers=len(job.pids))
        if len(job.timeline) <= TIMELINE_CHUNKS:
            diagnostics["timeline"] = self._timeline(job)
        elapsed = (job.finished or time.monotonic()) - (job.started or job.submitted)
        if job.op == "price":
            content = {"n": job.n, "values": encode_array(_value_block(r["values"], job.method, job.columns), out),
                       "row_status": encode_sparse_rows(*r["status"].rows_values(), "ok", out),
                       "row_error": encode_sparse_rows(*r["error"].rows_values(), "", out), "device": device,
                       "elapsed_s": elapsed, "via": "daemon", "diagnostics": diagnostics}
            if "std_error" in r:
                content["std_error"] = encode_array(r["std_error"], out)
        else:
            content = {"n": job.n, "vol": encode_array(r["vol"], out),
                       "iv_status": encode_sparse_rows(*r["status"].rows_values(), "ok", out), "device": device,
                       "elapsed_s": elapsed, "via": "daemon"}
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
            try:
                out.send_multipart([*w.identities, *frames], copy=len(buffers) == 0)
            except zmq.ZMQError:
                log.debug("could not queue a job reply", exc_info=True)
            if job.state == "done" and w.reply_type != "result_reply":
                self._remember((w.session, w.msg_id), [*frames], _nbytes(buffers))
            counters.outcomes[outcome] += 1
            if job.state != "done":
                counters.errors += 1
            dt = time.perf_counter() - w.received
            self.metrics.observe(job.op if w.reply_type != "result_reply" else "result", job.cost.model,
                                 _device_label(device), outcome, dt)
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
        rows_t = np.empty((k, len(VALUE_FIELDS)))  # row i: that option's price and Greeks, contiguous
        for j, name in enumerate(VALUE_FIELDS):
            rows_t[:, j] = getattr(res, name)
        self._shell_counters.coalesced += k
        self.metrics.coalesced.inc(k)
        diag = dict(res.diagnostics) if res.diagnostics and _plain(res.diagnostics) else {}
        diag["coalesced"] = k
        fallback = "gpu_fallback" in diag
        spec = {"__nd__": ["<f8", [len(VALUE_FIELDS), 1], 0]}
        status, error = res.status, res.error
        for i, req in enumerate(group):
            st, er = status[i], error[i]
            content = {"n": 1, "values": spec,
                       "row_status": _OK_STRINGS if st == "ok" else {"default": "ok", "rows": [0], "values": [str(st)]},
                       "row_error": _NO_ERRORS if not er else {"default": "", "rows": [0], "values": [str(er)]},
                       "device": res.device, "elapsed_s": res.elapsed_s, "via": "daemon", "diagnostics": diag}
            self._send_priced(session, sock, req, content, [memoryview(rows_t[i]).cast("B")], res.device, fallback)

    def _price_one(self, session: Session, sock: zmq.Socket, req: _Req) -> None:
        msg = req.msg
        try:
            if req.op == "price":
                res = engine.price_table(req.columns, req.method)
                n = len(res)
                out: list = []
                if n == 1:
                    values = np.array([[res.price[0]], [res.delta[0]], [res.gamma[0]], [res.theta[0]], [res.vega[0]],
                                       [res.rho[0]]])
                    st, er = res.status[0], res.error[0]
                    row_status = _OK_STRINGS if st == "ok" else {"default": "ok", "rows": [0], "values": [str(st)]}
                    row_error = _NO_ERRORS if not er else {"default": "", "rows": [0], "values": [str(er)]}
                else:
                    if pool.prices_only(req.method, req.columns):
                        values = res.price.reshape(1, n)
                    else:
                        values = np.empty((len(VALUE_FIELDS), n))
                        for i, name in enumerate(VALUE_FIELDS):
                            values[i] = getattr(res, name)
                    row_status = encode_sparse_strings(res.status, "ok", out)
                    row_error = encode_sparse_strings(res.error, "", out)
                content = {"n": n, "values": encode_array(values, out), "row_status": row_status,
                           "row_error": row_error, "device": res.device, "elapsed_s": res.elapsed_s, "via": "daemon"}
                if getattr(res, "std_error", None) is not None:
                    content["std_error"] = encode_array(np.asarray(res.std_error, dtype=np.float64), out)
                if res.diagnostics and _plain(res.diagnostics):
                    content["diagnostics"] = res.diagnostics
                fallback = "gpu_fallback" in res.diagnostics
                device = res.device
            else:
                t = time.perf_counter()
                vol, status = engine.implied_vol_table(req.prices, req.columns, req.method)
                out = []
                device = engine.select_device(None, req.method)
                content = {"n": int(vol.shape[0]), "vol": encode_array(np.asarray(vol, dtype=np.float64), out),
                           "iv_status": encode_sparse_strings(np.asarray(status, dtype=object), "ok", out),
                           "device": device, "elapsed_s": time.perf_counter() - t, "via": "daemon"}
                fallback = False
        except InvalidInputError as e:
            value = e.value if isinstance(e.value, (int, float, bool, type(None))) else _short(e.value)
            self._fail(session, sock, self._shell_counters, msg, req.op, req.op + "_reply", "InvalidInputError",
                       str(e), "invalid", req.t0, {"field": _short(e.field), "row": e.row, "value": value,
                                                   "reason": _short(e.reason)}, req.cost.model, req.n)
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
        send_frames(sock, [*msg.identities, *frames])
        c = self._shell_counters
        c.outcomes["ok"] += 1
        if gpu_fallback:
            c.gpu_fallbacks += 1
            self.metrics.gpu_fallbacks.inc()
        size = _nbytes(buffers) if buffers else 0
        self._remember((msg.header["session"], msg.header["msg_id"]), frames, size)
        if req.key is not None:
            cached = content if not req.job_id else {k: v for k, v in content.items() if k != "job_id"}
            self.cache.put(req.key, Entry(cached, buffers, req.cost.model, device, size + 512))
        dt = time.perf_counter() - req.t0
        self.metrics.observe(req.op, req.cost.model, _device_label(device), "ok", dt)
        self._access(msg.header, req.op, req.cost.model, device, req.n, dt, "ok", req.job_id)


def serve(connection_file: str | os.PathLike | None = None, *, warmup: bool = True,
          on_ready: Callable[[Server], None] | None = None, mpi: bool | None = None, **server_kw: Any) -> int:
    """Run a daemon in this process until it is stopped. Returns an exit code (0).

    Args:
        connection_file, warmup, server_kw: passed to :class:`Server`.
        on_ready: called with the server once its sockets are bound.
        mpi: run as one rank of an MPI job (rank 0 serves, the others are workers); default:
            when started by ``mpiexec`` with more than one rank.
    """
    if mpi is None:
        mpi = pool.launched_by_mpi()
    if not mpi:
        return _serve(Server(connection_file, warmup=warmup, **server_kw), on_ready)
    MPI = pool._import_mpi()
    comm = MPI.COMM_WORLD
    infos = pool.bootstrap(comm)
    if comm.Get_size() == 1:
        return _serve(Server(connection_file, warmup=warmup, ranks=infos, **server_kw), on_ready)
    from mpi4py.futures import MPICommExecutor

    if comm.Get_rank() != 0:
        pool.worker_loop(comm, infos)
        return 0
    with MPICommExecutor(comm, root=0) as executor:
        return _serve(Server(connection_file, warmup=warmup, executor=executor, ranks=infos, **server_kw), on_ready)


def _serve(server: Server, on_ready: Callable[[Server], None] | None) -> int:
    previous = {}
    switch = sys.getswitchinterval()
    # the daemon's threads (requests, jobs, rank 0's pricing, the MPI pool's transfers) take
    # the interpreter lock from one another within SWITCH_INTERVAL_S, not Python's 5 ms: a
    # worker's chunk or result then waits that much less for a busy rank 0
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if threading.current_thread() is threading.main_thread():
        def on_signal(signum, frame):
            server.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        server.start()
        if on_ready is not None:
            on_ready(server)
        server.serve_forever()
    finally:
        server.close()
        sys.setswitchinterval(switch)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


__all__ = ["Server", "serve", "devices"]
