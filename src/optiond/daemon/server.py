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
* ``control`` (ROUTER): ``ping``, ``status``, ``jobs``, ``cancel``, ``renew`` (a client's
  lease heartbeat for its jobs and chain requests), ``drain``, ``resume`` and ``shutdown`` on
  a thread of its own, so a daemon busy with a long batch still answers;
* ``iopub`` (XPUB): signed events, CURVE-encrypted where libzmq has CURVE (a subscriber must
  know the public key derived from the connection file's key, so a peer without the key can
  neither subscribe nor read; the connection file then says ``"iopub_security": "curve"``),
  the first frame a topic: ``heartbeat`` (every
  :data:`HEARTBEAT_S`, with the queue depth), ``status`` (state changes; one is sent to every
  new subscriber) and ``progress.<job_id>`` (job id, request msg_id, state, fraction done,
  ETA in seconds, rows done, chunks);
* ``hb`` (ROUTER echo, as Jupyter's heartbeat): answered by a C-level proxy thread that needs
  no Python lock, so a client can tell a busy daemon from a dead one in well under 2 s.

Operations (``msg_type`` ``<op>_request``, answered by ``<op>_reply``): ``ping``, ``status``,
``price``, ``implied_vol``, ``submit``, ``result``, ``cancel``, ``renew``, ``jobs``, ``drain``,
``resume``, ``shutdown``, ``chain`` (a whole option chain: market and pricing on rank 0's
pricing thread in one round trip, :mod:`optiond.daemon.chain_op`), and the named, versioned
market objects the daemon keeps (:mod:`optiond.daemon.objects`): ``surface_fit``,
``surface_put``, ``surface_vol``, ``surface_price``, ``heston_fit``, ``objects``, ``object_put``, ``object_get``,
``object_drop`` (:mod:`optiond.daemon.surface_op`, :mod:`optiond.daemon.heston_op`). Every reply has ``status`` ``"ok"`` or ``"error"`` (with a
short ``error`` text and ``ename``). Messages whose signature is missing or wrong are dropped without
a reply, counted (``auth_failures``) and logged, rate-limited, as "authentication failure";
every other bad message gets an error reply. Only a signed ``shutdown`` (or SIGTERM/SIGINT)
stops the daemon; ``drain`` stops it taking new work (``readyz`` says 503) and, with
``shutdown: true``, stops it once the work accepted is done.

Pricing requests (``price``, ``implied_vol``, ``submit``) are decoded, costed, checked against
the limits and answered from a bounded cache when they can be: see
:mod:`optiond.daemon.pricing`; their replies' format is :mod:`optiond.daemon.wire`'s.

A request resent by a client's retry (same session and ``msg_id``) is answered from the reply
it already got, or attached to its job still running, never priced twice.

For IT: Prometheus metrics and ``/healthz``/``/readyz`` on 127.0.0.1
(:mod:`optiond.daemon.metrics`), a JSON-lines log with rotation (:mod:`optiond.daemon.logs`),
and under systemd (``Type=notify``) ``READY=1`` once it serves, ``WATCHDOG=1`` from the
control thread and ``STOPPING=1`` on the way out (:mod:`optiond.daemon.sdnotify`).

Where the code is: this module holds the sockets, the threads, the life cycle
(:meth:`Server.start`, :meth:`Server.serve_forever`, :meth:`Server.close`), the request
loops and the dispatch of each message to its operation. The operations are mixins that
:class:`Server` inherits: :class:`~optiond.daemon.pricing.PricingOps` (the pricing
pipeline: warm-up, decoding, costing, cache, inline pricing and coalescing, jobs, the chain
request), :class:`~optiond.daemon.object_ops.ObjectOps` (the named objects) and
:class:`~optiond.daemon.control_ops.ControlOps` (the control operations, status and health);
:mod:`optiond.daemon.server_parts` holds what they share (with the replies kept for retried
and replayed requests, :class:`~optiond.daemon.server_parts.ReplyMemory`).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from concurrent import futures as cf
from pathlib import Path
from typing import Any, Callable, Sequence

import zmq

from .. import __version__, costs
from ..kernels import gpu
from ..models import InvalidInputError, Method
from . import connections, paths, pool, sdnotify
from .cache import ReplyCache
from .control_ops import ControlOps, devices
from .jobs import Job, JobManager, Lease, Waiter
from ..limits import LimitExceeded, Limits
from .metrics import HTTP_MAX_CONNECTIONS, HttpEndpoint, Metrics
from .object_ops import ObjectOps
from .objects import ObjectError, ObjectStore
from .pricing import CHAIN_RUNNERS, COALESCE_MIN, PricingOps
from .protocol import (IOPUB_CURVE, PROTOCOL_VERSION, REPLAY_WINDOW_S, SIGNATURE_SCHEME, AuthenticationError,
                       Message, ProtocolError, Session, date_in_window, iopub_curve_keys, packb, readable, send_frames,
                       spin_seconds, spin_until_readable, unpackb, utcnow)
from .server_parts import ReplyMemory, answer
from .server_parts import _Counters, _invalid_details, _nbytes, _Refused, _Req, _short

log = logging.getLogger("optiond.daemon")

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
#: operations that change the daemon's state: each (session, msg_id) acts once; a copy
#: (a retry, or a replay within the replay window) gets the first reply again
ONCE_OPS = frozenset({"shutdown", "drain", "resume", "cancel", "surface_fit", "surface_put", "heston_fit",
                      "object_put", "object_drop"})
#: requests whose large content the shell loop leaves undecoded (:attr:`protocol.Message.lazy`)
LAZY_REQUESTS = frozenset({"surface_put_request", "object_put_request"})
#: the daemon process's interpreter switch interval (seconds; Python's default is 0.005)
SWITCH_INTERVAL_S = 0.0005
#: seconds between two checks that the connection file, its lock and pid file are still this daemon's
GUARD_S = 1.0

Handler = Callable[[Message, float], "tuple[dict, list] | _Req | None"]


class Server(PricingOps, ObjectOps, ControlOps):
    """The daemon. ``start()`` binds and writes the connection file, ``serve_forever()`` runs
    the request loop, ``close()`` cleans up; :func:`serve` does all three with signal handling.

    Args:
        connection_file: where to write the connection file (default: see
            :func:`optiond.daemon.paths.connection_file`).
        ip: the address to bind; loopback only by design.
        warmup: before serving, load (a cold cache: compile) every kernel of the warm-up list
            (:data:`optiond.kernels.warmup.TARGETS`) and time the CPU kernel for the cost model,
            so no request pays for it; a list of names: those targets only
            (:func:`optiond.kernels.warmup.select`); False: none.
        max_bytes: largest message accepted (bytes); larger ones get an error reply.
        limits: per-request limits (:class:`optiond.limits.Limits`).
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
        ipc: also bind the shell, control and heartbeat channels to Unix-domain sockets (POSIX
            only; see :func:`optiond.daemon.paths.ipc_socket_path`): local clients then skip
            the TCP stack (about 50 us less per round trip on a 2-core machine), and key-less
            peers flooding the TCP ports cannot reach them. The socket files are mode 0600 in
            a per-user 0700 directory; messages are signed as on TCP.
        max_connections: peer connections per transport at most (default: the descriptor
            budget shared equally, see :mod:`optiond.daemon.connections`); those over it are shed.
        replay_window_s: a request whose signed ``date`` is older than this (seconds) is
            refused with ``StaleMessage``; within it, a copy of a state-changing request
            (:data:`ONCE_OPS`) gets the first reply again and a copy of a pricing request the
            reply remembered for retries, so a captured message replayed has no new effect.
        objects_dir: where the named objects are kept across restarts (default
            :func:`optiond.daemon.paths.objects_dir`); ``persist_objects=False`` keeps them in
            memory only (:meth:`optiond.daemon.objects.ObjectStore.open`).
    """

    def __init__(self, connection_file: str | os.PathLike | None = None, *, ip: str = "127.0.0.1",
                 warmup: bool | Sequence[str] = True, max_bytes: int | None = None, limits: Limits | None = None,
                 cache_entries: int = 4096, cache_bytes: int = 256 << 20, coalesce: bool | str = "auto",
                 metrics_port: int | None = 0, log_dir: str | os.PathLike | None = None, json_log: bool = True,
                 access_log: bool = True, executor: Any = None, ranks: list[dict] | None = None,
                 inline_max_s: float = INLINE_MAX_S, ipc: bool = True, max_connections: int | None = None,
                 replay_window_s: float = REPLAY_WINDOW_S, objects_dir: str | os.PathLike | None = None,
                 persist_objects: bool = True):
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
        self.objects = ObjectStore(self.limits)
        self._objects_dir = paths.objects_dir(objects_dir) if persist_objects else None
        self.cache = ReplyCache(cache_entries, cache_bytes)
        self.coalesce_mode = {True: "always", False: "never"}.get(coalesce, coalesce)  # type: ignore[call-overload]
        if self.coalesce_mode not in ("auto", "always", "never"):
            raise ValueError(f"coalesce must be 'auto', 'always' or 'never', not {coalesce!r}")
        self.coalesce = self.coalesce_mode == "always"  # 'auto' is decided in start(), once the GPU is known
        self.inline_max_s = inline_max_s
        #: after answering, the shell thread polls for the next request this long before it
        #: sleeps (``OPTIOND_SPIN_US``; :func:`optiond.daemon.protocol.spin_seconds`)
        self.spin_s = spin_seconds()
        self.ns_per_node = costs.DEFAULT_NS_PER_NODE
        self._metrics_port = metrics_port
        self._log_dir = log_dir
        self._json_log_on = json_log
        self._access_on = access_log
        self._ipc_on = ipc and os.name == "posix"
        self._ipc_paths: list[Path] = []
        self._max_connections = max_connections
        self.replay_window_s = float(replay_window_s)
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
        self._replies = ReplyMemory(self.replay_window_s)
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
            "cancel": self._op_cancel, "renew": self._op_renew, "shutdown": self._op_shutdown, "chain": self._op_chain,
            "surface_fit": self._op_surface_fit, "surface_put": self._op_surface_put,
            "surface_vol": self._op_surface_vol, "surface_price": self._op_surface_price,
            "heston_fit": self._op_heston_fit, "objects": self._op_objects, "object_drop": self._op_object_drop,
            "object_put": self._op_object_put, "object_get": self._op_object_get}
        # chain and surface requests wait here for rank 0's pricing thread (their replies leave from here)
        self._chain_runner = cf.ThreadPoolExecutor(CHAIN_RUNNERS, thread_name_prefix="optiond-chain")
        self._chain_pending = 0
        self._chain_lock = threading.Lock()
        self._aside_leases: dict[str, Lease] = {}  # leased chain requests by job id (PricingOps._op_renew)
        self._control_ops: dict[str, Handler] = {
            "ping": self._op_ping, "status": self._op_status, "shutdown": self._op_shutdown,
            "cancel": self._op_cancel, "renew": self._op_renew, "jobs": self._op_jobs, "drain": self._op_drain,
            "resume": self._op_resume}

    # ------------------------------------------------------------------ life cycle

    def start(self) -> dict[str, Any]:
        """Bind the sockets, start the threads (heartbeat, control, events, jobs, metrics) and
        write the connection file. Returns the connection info (as written, key included).

        Raises:
            paths.DaemonRunning: another daemon holds the connection file's lock (a RuntimeError).
            OSError / zmq.ZMQError: the file or a socket cannot be created.
        """
        self._refuse_if_running()
        if self._objects_dir is not None:
            self.objects.open(self._objects_dir)  # the objects of the last run, and where the next go
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
        iopub_curve = zmq.has("curve")
        if iopub_curve:  # events readable by key holders only (see protocol.iopub_curve_keys)
            self._iopub.curve_server = True
            self._iopub.curve_secretkey = iopub_curve_keys(self.key.encode("ascii"))[1]
        else:
            log.warning("this libzmq has no CURVE: the signed events on the PUB port are readable by any local peer")
        self._hb = ctx.socket(zmq.ROUTER)
        self._hb.setsockopt(zmq.LINGER, 0)
        self._hb.setsockopt(zmq.MAXMSGSIZE, 1024)
        for sock in (self._shell, self._control, self._iopub, self._hb):  # before binding
            sock.setsockopt(zmq.BACKLOG, connections.LISTEN_BACKLOG)
        ports = {name: sock.bind_to_random_port(url) for name, sock in
                 (("shell_port", self._shell), ("control_port", self._control), ("iopub_port", self._iopub),
                  ("hb_port", self._hb))}
        # the shell, control and heartbeat channels on Unix sockets too (POSIX): see _bind_ipc
        ipc = {ch: self._bind_ipc(sock, ch) if self._ipc_on else None
               for ch, sock in (("shell", self._shell), ("control", self._control), ("hb", self._hb))}
        eps = {ch: {f"{url}:{ports[ch + '_port']}": ch, **({ipc[ch]: ch + "_ipc"} if ipc[ch] else {})}
               for ch in ("shell", "control", "hb")}
        self.guard = connections.ConnectionGuard(
            ctx, [(self._shell, eps["shell"]), (self._control, eps["control"]),
                  (self._iopub, {f"{url}:{ports['iopub_port']}": "iopub"}), (self._hb, eps["hb"])],
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
        self._gpu = gpu.available()
        self.coalesce = self.coalesce_mode == "always" or (self.coalesce_mode == "auto" and self._gpu)
        if self._gpu:
            try:
                from ..kernels.binomial import plan

                self._gpu_min_nodes = float(plan.current()["gpu_min_nodes"])
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
        if iopub_curve:
            self.info["iopub_security"] = IOPUB_CURVE
        for ch, ep in ipc.items():
            if ep:
                self.info[f"{ch}_ipc"] = ep
        if self.http is not None:
            self.info["metrics_port"] = self.http.port
        paths.write_connection_file(self.connection_file, self.info)
        self._set_state("starting")
        log.info("daemon %s (pid %d) bound on %s; %d MPI rank(s); metrics %s; log %s", __version__, self.pid,
                 paths.endpoint(self.info), len(self.ranks), self.http.url if self.http else "off",
                 self.json_log.path if self.json_log else "off")
        return self.info

    def _bind_ipc(self, sock: zmq.Socket, channel: str) -> str | None:
        """Bind ``sock`` (the ``channel`` socket: shell, control or hb) to a Unix-domain
        socket too; its ``ipc://`` URL, or None where that cannot be done (the channel is then
        served over TCP only). Local clients use it first: only this user can open it, so
        key-less peers flooding the TCP ports do not reach it."""
        try:
            path = paths.ipc_socket_path(self.connection_file, self.pid, channel)
            sock.bind(f"ipc://{path}")
            os.chmod(path, 0o600)
        except (OSError, zmq.ZMQError) as e:
            log.warning("no Unix-domain socket for the %s channel (%s); serving it over TCP only", channel, e)
            return None
        self._ipc_paths.append(path)
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
        for path in self._ipc_paths:
            paths.remove_ipc_socket(path)
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
        self.objects.close()
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
        guard = self.guard
        try:
            msg = session.recv(sock, flags, guard is not None)
            if msg.srcfd >= 0 and msg.srcfd not in guard.signed:  # a key holder's: never shed for key-less peers
                guard.mark_signed(msg.srcfd)
            return msg
        except zmq.ZMQError:
            raise
        except AuthenticationError as e:
            counters.auth_failure(str(e))
            if self.guard is not None and e.srcfd >= 0:  # a key holder never sends one: close its connection
                self.guard.drop(e.srcfd)
        except ProtocolError as e:
            counters.malformed += 1
            self._reply_error(session, sock, counters, e.identities, e.header, "ProtocolError", str(e))
        except Exception:  # never let a peer kill the loop
            counters.malformed += 1
            log.warning("unexpected error reading a message", exc_info=True)
        return None

    def _shell_loop(self) -> None:
        """The shell socket's loop: read every waiting message, answer or queue each, price
        the small ones (coalesced), forward finished jobs' replies. Never raises."""
        session = Session(self.key.encode("ascii"), self.session.session, **self._session_args)
        session.lazy_types = LAZY_REQUESTS  # large puts: decoded off this loop (ObjectOps)
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
            if (self._drain_shutdown and self.jobs is not None and not self.jobs.active()
                    and self._chain_pending == 0):  # chain requests accepted are work accepted too
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
                     extra: dict | None = None, op: str = "-", outcome: str = "protocol_error",
                     t0: float | None = None, model: str = "-") -> float:
        """Answer with an error (counted and observed first, see :func:`answer`); returns the
        latency observed. A message without a return address is only counted."""
        counters.errors += 1
        content = {"status": "error", "ename": ename, "error": _short(error), **(extra or {})}
        t0 = time.perf_counter() if t0 is None else t0
        try:
            frames = [*identities, *session.serialize(session.header(reply_type), content, parent or {})]
        except TypeError:
            log.debug("could not encode an error reply", exc_info=True)
            frames = []
        try:
            return answer(sock if identities and frames else None, frames, self.metrics, counters, op, model, "-",
                          outcome, t0)
        except zmq.ZMQError:
            log.debug("could not send an error reply", exc_info=True)
            return time.perf_counter() - t0

    def _handle(self, session: Session, sock: zmq.Socket, msg: Message, ops: dict[str, Handler],
                counters: _Counters, t0: float) -> _Req | None:
        """Answer ``msg`` now, or return the pricing request to price inline with the batch."""
        msg_type = msg.msg_type
        op = msg_type[:-8] if msg_type.endswith("_request") else ""
        handler = ops.get(op)
        if handler is None:
            known = ", ".join(f"{o}_request" for o in ops)
            self._reply_error(session, sock, counters, msg.identities, msg.raw_header, "ProtocolError",
                              f"unknown msg_type {msg_type[:40]!r}; expected one of {known}")
            return None
        reply_type = op + "_reply"
        if msg.header["version"].split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
            self._reply_error(session, sock, counters, msg.identities, msg.raw_header, "ProtocolError",
                              f"protocol version {msg.header['version'][:20]!r} not supported (daemon speaks "
                              f"{PROTOCOL_VERSION})", reply_type, op=op, t0=t0)
            return None
        if not date_in_window(msg.header.get("date"), self.replay_window_s):
            self._reply_error(session, sock, counters, msg.identities, msg.raw_header, "StaleMessage",
                              f"message dated {str(msg.header.get('date'))[:40]!r} is outside the daemon's "
                              f"{self.replay_window_s:g} s replay window (a replay, or a clock far off); "
                              f"send it again", reply_type, op=op, outcome="stale", t0=t0)
            return None
        if op in ONCE_OPS:
            first = self._replies.once((msg.header["session"], msg.header["msg_id"]))
            if first is not None:  # a retry or a replay: answered as the first time, not acted on
                counters.replayed += 1
                send_frames(sock, [*msg.identities, *first])
                return None
        pricing = op in ("price", "implied_vol", "submit")
        if pricing:
            rkey = (msg.header["session"], msg.header["msg_id"])
            cached = self._replies.priced(rkey)
            if cached is not None:  # a client's retry of a request already answered
                counters.replayed += 1
                send_frames(sock, [*msg.identities, *cached])
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
            self._fail(session, sock, counters, msg, op, reply_type, "InvalidInputError", str(e), "invalid", t0,
                       _invalid_details(e))
            return None
        except LimitExceeded as e:
            self._fail(session, sock, counters, msg, op, reply_type, "LimitExceeded", str(e), "refused", t0,
                       {"limit": e.limit})
            return None
        except _Refused as e:
            self._fail(session, sock, counters, msg, op, reply_type, e.ename, str(e), e.outcome, t0, e.extra)
            return None
        except ObjectError as e:
            self._fail(session, sock, counters, msg, op, reply_type, e.ename, str(e), "invalid", t0)
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
        if op in ONCE_OPS:
            self._replies.keep_once((msg.header["session"], msg.header["msg_id"]), frames)
        if pricing:  # a submit: the job is accepted
            self._replies.keep(rkey, frames, _nbytes(buffers))
        dt = answer(sock, [*msg.identities, *frames], self.metrics, counters, op, model, device, "ok", t0)
        if pricing:
            self._access(msg.header, op, "-", "-", int(content.get("n", 0)), dt, "accepted", content.get("job_id"))
        return None

    def _fail(self, session: Session, sock: zmq.Socket, counters: _Counters, msg: Message, op: str, reply_type: str,
              ename: str, error: str, outcome: str, t0: float, extra: dict | None = None, model: str = "-",
              n: int = 0) -> None:
        dt = self._reply_error(session, sock, counters, msg.identities, msg.raw_header, ename, error, reply_type, extra,
                               op, outcome, t0, model)
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
