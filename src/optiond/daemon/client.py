"""Client of the pricing daemon, used by the Excel functions, the panel and the CLI.

One :class:`Client` serves any number of threads: each thread gets its own persistent DEALER
socket (ZeroMQ sockets are not thread-safe), reused across calls. Requests follow the Lazy
Pirate pattern: wait ``timeout`` seconds for the reply whose ``parent_header.msg_id`` is the
request's (other replies are discarded), then close the socket, open a fresh one and resend,
at most ``retries`` times; then :class:`DaemonUnavailable`. A daemon that cannot be reached at
all (no connection file, nothing listening, heartbeat silent) fails fast, and is remembered as
down for ``down_s`` seconds so a sheet of 10,000 cells does not wait 10,000 times. While a
reply takes longer than half a second the client also watches the daemon's heartbeat: a daemon
that dies in the middle of a batch is reported (:class:`DaemonUnavailable`) within 2 s, not
at the end of ``timeout``; one that restarted (a new connection file) is asked again.

A pricing request estimated to take longer than :data:`JOB_AFTER_S` on one core (or any call
with ``as_job=True``) is submitted as a job with a lease and followed: asked for every
:data:`JOB_POLL_S`, with progress events relayed, for as long as the daemon's heartbeat answers
and the job moves; it is cancelled on Ctrl-C, on any error, after :data:`JOB_STALL_S` without
progress, and by the daemon itself once its lease (:data:`JOB_LEASE_S`, or
``$OPTIOND_JOB_LEASE_S``) lapses. The lease is renewed by a heartbeat thread of the client
(:class:`~optiond.daemon.client_jobs.LeaseHeartbeat`) while the process lives, so a process
paused for a few seconds keeps its job and a killed one leaves none behind; a chain request is
leased the same way. A blocking request this client gives up on (no reply in time from a live
daemon) is cancelled too: the daemon never keeps pricing for nobody.

With ``fallback=True`` (the default) the pricing calls then run the same engine function in
this process and say so in ``Result.via = "in-process"``; so they do when the daemon took the
work and lost it (it stopped or died before answering: :class:`DaemonLost`, and
``diagnostics["daemon_lost"]`` says why). A daemon's answer is always whole:
a batch it could not finish raises, it never comes back as a partial result. Errors the daemon
reports are raised: :class:`optiond.models.InvalidInputError` for invalid input of the whole
table (invalid rows are marked in the result, as in-process); :class:`DaemonError` for
anything else, with the subclasses :class:`RequestRefused` (over a limit, daemon draining,
unknown job), :class:`JobCancelled` and :class:`DeadlineExceeded`.

The client is four modules. This one holds :class:`Client` itself (the connection file,
the sockets, the Lazy Pirate request machinery and the heartbeat watch, the encoding of
requests, the pricing calls ``price_table``, ``implied_vol`` and ``price_chain``, the control
calls ``ping``, ``status``, ``shutdown``, ``drain``, ``resume``) and :func:`get_client`;
:mod:`optiond.daemon.client_jobs` the job API (``submit_*``, ``result``, ``cancel``, ``jobs``,
``subscribe``, following a job) as the mixin :class:`Client` inherits, with :class:`Event` and
:class:`Subscription`; :mod:`optiond.daemon.client_objects` the calls on the daemon's named
objects (``fit_surface``, ``put_surface``, ``surface_vol``, ``surface_price``, ``objects``,
``drop_object``), a mixin too; :mod:`optiond.daemon.client_replies` the exception classes and
the decoding of replies. Every public name is importable from this module.

API (all methods thread-safe):

==========================================================  ===========================================
``get_client()``                                             the process-wide shared client
``Client(connection_file, timeout, retries, ...)``           a client of its own
``ping()``, ``status()``, ``shutdown()``                     see each method; ``status()`` has the queue
                                                             depth, cache hit ratio, MPI workers alive,
                                                             devices and GPU memory, requests by outcome
``price_table(columns, method, *, fallback, timeout,``      price; ``job_id`` names the work (for
``job_id, force, deadline_s, on_progress)``                  ``cancel``), ``force`` skips the daemon's
                                                             cache, ``deadline_s`` bounds its time,
                                                             ``on_progress(Event)`` sees its progress
``implied_vol(prices, columns, method, *, ...)``             the same for implied volatilities
``submit_table(columns, method, ...) -> job_id``,            start a batch and return at once
``submit_implied_vol(prices, columns, method, ...)``
``result(job_id, timeout) -> Result | (vol, status)``        wait for a submitted batch
                                                             (:class:`JobPending` after ``timeout``)
``cancel(job_id)``                                           stop a job (its waiter gets
                                                             :class:`JobCancelled`)
``jobs()``                                                   the jobs queued or running
``drain(shutdown=False)``, ``resume()``                      stop taking work (and stop when done) / undo
``subscribe(callback=None) -> Subscription``                 progress, status and heartbeat events from
                                                             the daemon's PUB socket, in a thread
``fit_surface(name, df, **market) -> dict``,                 a surface kept in the daemon by name: fit a
``put_surface(name, surface)``                               chain there, or keep a fitted one; the reply's
                                                             ``handle`` is ``NAME#0003``
``surface_vol(name, K, T) -> ImpliedVol``,                   vols, and prices at those vols, on a named
``surface_price(name, K, T, kind, american) -> Result``      surface (a name: the latest; a handle: that
                                                             version, else StaleHandle)
``objects()``, ``drop_object(name)``                         the live objects / forget one
==========================================================  ===========================================

Example::

    from optiond.daemon.client import get_client
    res = get_client().price_table({"kind": "put", "style": "american", "spot": 100.0,
                                    "strike": [90.0, 100.0], "expiry": 1.0, "rate": 0.05,
                                    "volatility": 0.2}, Method(steps=500))
    res.price, res.via, res.device

    c = get_client()
    with c.subscribe(lambda ev: print(ev.job_id, ev.fraction, ev.eta_s) if ev.kind == "progress" else None):
        job = c.submit_table(big_columns, Method(steps=1000))
        res = c.result(job, timeout=600)      # or c.cancel(job) from another thread
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import zmq

from . import paths
# the other two modules of the client; their public names are re-exported from here
from .client_jobs import (JOB_LEASE_S, JOB_POLL_S, JOB_STALL_S, RESULT_POLL_S, Event, JobsMixin, LeaseHeartbeat,
                          Subscription, job_lease_s)
from .client_objects import ObjectsMixin
from .client_replies import (DaemonError, DaemonLost, DaemonUnavailable, DeadlineExceeded, JobCancelled, JobPending,
                             RequestRefused, _DaemonDied, _raise_reply_error, _Unsendable, decode_iv, decode_job_result,
                             decode_result, lost_or_raise)
from .protocol import (Message, ProtocolError, Session, encode_column, new_id, send_frames, spin_seconds,
                       spin_until_readable)

# numpy and the schema (optiond.models) load with the first pricing request: a client that only
# asks for the status or a shutdown (``optiond status``, ``optiond stop``) loads no numerical library
if TYPE_CHECKING:
    from ..models import ImpliedVol, Method, Result

log = logging.getLogger("optiond.client")

_SCALARS = (str, int, float, bool, type(None))
_NOBLOCK = int(zmq.NOBLOCK)
_POLLIN = int(zmq.POLLIN)
#: "no prices" for :meth:`Client._content` (None is a value a caller may pass)
_NO_PRICES = object()
#: a reply slower than this starts the heartbeat watch (seconds)
HB_WATCH_AFTER_S = 0.5
#: heartbeat pings while watching (seconds apart)
HB_INTERVAL_S = 0.4
#: no heartbeat echo for this long: the daemon is dead (detection within 2 s of its death)
HB_DEAD_S = 1.2
#: the connection file is checked for a restarted daemon at most this often (seconds)
STAT_EVERY_S = 0.25
#: a pricing request estimated to take longer than this on one core (seconds) runs as a job:
#: submitted, followed (progress, heartbeat) for as long as it moves, cancelled if abandoned
JOB_AFTER_S = 2.0
#: seconds a chain request waits for its reply by default (a chain of ten thousand contracts
#: prices in seconds on a 2-core CPU daemon; the daemon's own deadline refuses larger work)
CHAIN_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class _Connection:
    signature: tuple            # (path, mtime_ns, size, inode) of the file it was read from
    generation: int
    path: Path
    info: dict
    session: Session

    def endpoint(self, channel: str) -> str:
        if channel in ("shell", "control", "hb"):  # the Unix socket where there is one
            return paths.shell_endpoint(self.info, channel)
        return paths.endpoint(self.info, f"{channel}_port")


class Client(JobsMixin, ObjectsMixin):
    """A connection to the local pricing daemon.

    Args:
        connection_file: the daemon's connection file; default ``$OPTIOND_CONNECTION_FILE`` or
            the per-user default (:func:`optiond.daemon.paths.connection_file`), looked up on
            every call so a restarted daemon is found.
        timeout: seconds to wait for each reply (per attempt). Pass a larger ``timeout`` to a
            single call for long batches.
        retries: resends after a timeout before giving up.
        down_s: how long a daemon that did not answer is assumed down (calls with
            ``fallback=True`` then go in-process at once), unless its connection file changes.
        connect_timeout: seconds to wait for the TCP connection to come up.

    The thread waiting for a reply first polls its socket for ``spin_s`` seconds
    (:func:`optiond.daemon.protocol.spin_seconds`: ``OPTIOND_SPIN_US``) before it sleeps.

    Raises:
        ValueError: ``timeout`` or ``retries`` out of range.
    """

    def __init__(self, connection_file: str | os.PathLike | None = None, timeout: float = 5.0, retries: int = 2, *,
                 down_s: float = 2.0, connect_timeout: float = 1.0):
        if timeout <= 0 or retries < 0:
            raise ValueError("timeout must be > 0 and retries >= 0")
        self._path = connection_file
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.down_s = float(down_s)
        self.connect_timeout = float(connect_timeout)
        self.session_id = new_id()
        self._ctx = zmq.Context()
        self._ctx.setsockopt(zmq.LINGER, 0)  # a request to a dead daemon never blocks term()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._generation = 0
        self._down: tuple[tuple, float, str] | None = None
        self._sockets: "weakref.WeakSet[zmq.Socket]" = weakref.WeakSet()
        self._pid = os.getpid()
        self._fixed_path = str(paths.connection_file(connection_file)) if connection_file else None
        self._env_seen: tuple[str | None, str] | None = None
        self._checked = 0.0
        self._methods: dict[int, tuple[Method, dict]] = {}
        self.spin_s = spin_seconds()
        self._leases = LeaseHeartbeat(self)

    # ------------------------------------------------------------------ plumbing

    @property
    def connection_file(self) -> Path:
        """The connection file this client reads (resolved now)."""
        return Path(self._resolve())

    def _resolve(self) -> str:
        if self._fixed_path is not None:
            return self._fixed_path
        env = os.environ.get(paths.ENV_VAR)
        seen = self._env_seen
        if seen is None or seen[0] != env:  # resolve once per value of the environment variable
            seen = self._env_seen = (env, str(paths.connection_file()))
        return seen[1]

    def _connection(self, force: bool = False) -> _Connection:
        """The connection info, re-read when the file changed (checked at most every
        :data:`STAT_EVERY_S` on the hot path; always when ``force``)."""
        conn = self._conn
        now = time.monotonic()
        # the cached info serves only the file the environment names now (a caller that resolved
        # the new name first must not leave the old daemon's info in place)
        if conn is not None and not force and now - self._checked < STAT_EVERY_S and str(conn.path) == self._resolve():
            return conn
        path = self._resolve()
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise DaemonUnavailable(f"no daemon running (no connection file {path}); start one with "
                                    f"'optiond serve --detach'") from None
        except OSError as e:
            raise DaemonUnavailable(f"cannot read connection file {path}: {e}") from None
        sig = (path, st.st_mtime_ns, st.st_size, st.st_ino)
        if conn is not None and conn.signature == sig:
            self._checked = now
            return conn
        with self._lock:
            if self._conn is not None and self._conn.signature == sig:
                self._checked = now
                return self._conn
            try:
                info = paths.read_connection_file(path)
            except FileNotFoundError:
                raise DaemonUnavailable(f"no daemon running (no connection file {path})") from None
            except paths.ConnectionFileError as e:
                raise DaemonUnavailable(str(e)) from None
            self._generation += 1
            self._conn = _Connection(sig, self._generation, Path(path), info,
                                     Session(info["key"].encode("ascii"), self.session_id))
            self._checked = now
            return self._conn

    def _socket(self, conn: _Connection, channel: str) -> zmq.Socket:
        loc = self._local
        cached = getattr(loc, channel, None)
        if cached is not None:
            if cached[0] == conn.generation:
                return cached[1]
            cached[1].close(linger=0)
        s = self._ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.IMMEDIATE, 1)  # queue only on a live connection: no daemon -> no send
        s.setsockopt(zmq.MAXMSGSIZE, conn.session.max_bytes)
        s.connect(conn.endpoint(channel))
        setattr(loc, channel, (conn.generation, s))
        self._sockets.add(s)
        return s

    def _drop_socket(self, channel: str) -> None:
        cached = getattr(self._local, channel, None)
        if cached is not None:
            cached[1].close(linger=0)
            setattr(self._local, channel, None)

    def _heartbeat(self, conn: _Connection, timeout: float = 0.5) -> bool:
        """Whether the daemon's heartbeat echoes within ``timeout`` seconds (alive, maybe busy)."""
        s = self._ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        try:
            s.connect(conn.endpoint("hb"))
            s.send(b"ping")
            return bool(s.poll(int(timeout * 1000))) and s.recv() == b"ping"
        except zmq.ZMQError:
            return False
        finally:
            s.close(linger=0)

    def _wait(self, sock: zmq.Socket, conn: _Connection, msg_id: str, timeout: float) -> Message | None:
        """The reply to ``msg_id`` within ``timeout`` s, or None. After
        :data:`HB_WATCH_AFTER_S` the daemon's heartbeat is watched as well.

        Raises:
            _DaemonDied: the heartbeat fell silent for :data:`HB_DEAD_S`.
        """
        start = time.monotonic()
        deadline = start + timeout
        watch_at = start + HB_WATCH_AFTER_S
        hb: zmq.Socket | None = None
        turned = start  # when this loop last ran: a longer gap is this process paused, not the daemon silent
        # a quick reply is read without sleeping first (see protocol.spin_seconds), and then
        # without a poll (pyzmq builds a Poller for each)
        ready = bool(self.spin_s) and spin_until_readable(sock, min(self.spin_s, timeout))
        try:
            while True:
                if not ready:
                    now = time.monotonic()
                    if hb is not None and now - turned > HB_DEAD_S / 2:  # stopped (Ctrl-Z) or starved
                        last_echo, next_ping = now, now
                    turned = now
                    remaining = deadline - now
                    if remaining <= 0:
                        if not sock.poll(0, _POLLIN):  # a reply that came while this process was paused counts
                            return None
                        ready = True
                        continue
                    if hb is None and now >= watch_at:
                        hb = self._ctx.socket(zmq.DEALER)
                        hb.setsockopt(zmq.LINGER, 0)
                        hb.connect(conn.endpoint("hb"))
                        last_echo = now
                        next_ping = now
                        poller = zmq.Poller()
                        poller.register(sock, zmq.POLLIN)
                        poller.register(hb, zmq.POLLIN)
                    if hb is None:
                        ready = sock.poll(int(min(remaining, watch_at - now) * 1000) + 1, _POLLIN)
                    else:
                        if now >= next_ping:
                            try:
                                hb.send(b"ping", zmq.NOBLOCK)
                            except zmq.Again:
                                pass
                            next_ping = now + HB_INTERVAL_S
                        events = dict(poller.poll(int(min(remaining, max(next_ping - now, 0.0)) * 1000) + 1))
                        ready = sock in events
                        if hb in events:
                            while hb.poll(0):
                                hb.recv()
                            last_echo = time.monotonic()
                        elif not ready and time.monotonic() - last_echo > HB_DEAD_S:
                            raise _DaemonDied(f"the daemon's heartbeat has been silent for {HB_DEAD_S:g} s (it died?)")
                    if not ready:
                        continue
                ready = False
                try:
                    msg = conn.session.recv(sock, _NOBLOCK)
                except zmq.Again:
                    continue
                except ProtocolError as e:
                    log.debug("discarding a reply: %s", e)
                    continue
                if msg.parent_header.get("msg_id") == msg_id:
                    return msg
                log.debug("discarding a stale reply")
        finally:
            if hb is not None:
                hb.close(linger=0)

    def _request(self, op: str, content: dict, buffers: list | tuple = (), *, timeout: float | None = None,
                 channel: str = "shell", use_down_cache: bool = True, retries: int | None = None,
                 msg_id: str | None = None, metadata: dict | None = None, abandon: str | None = None) -> Message:
        """Send ``<op>_request``, return the matching reply (status ok). ``abandon``: a job id
        to cancel when this gives up on a daemon that is alive but did not answer in time.

        Raises:
            DaemonUnavailable: no reply after the retries, the daemon died meanwhile, or it is
                known to be down.
            InvalidInputError, DaemonError: the daemon answered with an error.
        """
        if os.getpid() != self._pid:
            raise DaemonUnavailable("this client was created in another process; use get_client() after a fork")
        timeout = self.timeout if timeout is None else float(timeout)
        retries = self.retries if retries is None else retries
        conn = self._connection()
        down = self._down
        if use_down_cache and down is not None:
            if down[0] == conn.signature and time.monotonic() < down[1]:
                conn = self._connection(force=True)  # a restarted daemon clears the mark at once
                if down[0] == conn.signature:
                    raise DaemonUnavailable(f"{down[2]} (daemon marked down; retried after {self.down_s:g} s "
                                            f"or when its connection file changes)")
            self._down = None
        limit = conn.info.get("max_message_bytes")
        if buffers and isinstance(limit, int):
            size = sum(b.nbytes if type(b) is memoryview else len(b) for b in buffers)
            if size > limit:  # the daemon would drop the connection without a word: say why here
                raise RequestRefused(f"request of {size / 2**20:.0f} MiB is over the daemon's message limit of "
                                     f"{limit / 2**20:.0f} MiB; split it", "LimitExceeded",
                                     {"limit": "max_message_bytes"})
        msg_id = msg_id or conn.session.next_id()
        reason = "no attempt made"
        alive = False  # the last attempt timed out on a daemon whose heartbeat answered
        for attempt in range(retries + 1):
            try:
                frames = conn.session.serialize(conn.session.header(op + "_request", msg_id), content, None, metadata,
                                                buffers)
            except TypeError as e:
                raise _Unsendable(str(e)) from None
            sock = self._socket(conn, channel)
            try:
                send_frames(sock, frames, _NOBLOCK)
            except zmq.Again:  # not connected (yet): give the connection a moment to come up
                if not sock.poll(int(self.connect_timeout * 1000), zmq.POLLOUT):
                    self._drop_socket(channel)
                    reason = f"cannot connect to the daemon at {conn.endpoint(channel)} (not running?)"
                    new = self._recheck(conn)
                    if new is not None and attempt < retries:
                        conn = new
                        continue
                    break
                send_frames(sock, frames)
            try:
                msg = self._wait(sock, conn, msg_id, timeout)
            except _DaemonDied as e:
                self._drop_socket(channel)
                reason = f"{e} while waiting for the reply to {op} from {conn.endpoint(channel)}"
                new = self._recheck(conn)
                if new is not None and attempt < retries:
                    conn = new  # a restarted daemon: ask it
                    continue
                break
            if msg is not None:
                if msg.content.get("status") != "ok":
                    _raise_reply_error(msg.content)
                return msg
            reason = f"no reply from the daemon at {conn.endpoint(channel)} within {timeout:g} s"
            self._drop_socket(channel)  # Lazy Pirate: a fresh socket for the next attempt
            alive = True
            if attempt == retries:
                break
            try:
                new = self._connection(force=True)
            except DaemonUnavailable as e:
                reason, alive = str(e), False
                break
            if new is not conn:
                conn, alive = new, False  # the daemon restarted: retry against the new one
            elif not self._heartbeat(conn, min(timeout, 0.5)):
                reason, alive = reason + " and its heartbeat is silent", False
                break
        if abandon is not None and alive:
            self._abandon(abandon)  # it may still be working on the request: nobody will collect it
        self._down = (conn.signature, time.monotonic() + self.down_s, reason)
        raise DaemonUnavailable(reason)

    def _recheck(self, conn: _Connection) -> _Connection | None:
        """A new connection (the daemon restarted) or None."""
        try:
            new = self._connection(force=True)
        except DaemonUnavailable:
            return None
        return new if new is not conn else None

    # ------------------------------------------------------------------ encoding

    @staticmethod
    def _encode_columns(columns: Mapping[str, Any], buffers: list) -> dict:
        """Columns in sorted order (the daemon's cache key is the content as sent)."""
        import numpy as np

        from ..models import DIVIDEND_FIELDS, InvalidInputError

        out = {}
        for name in columns:
            if not isinstance(name, str):
                raise TypeError(f"column names must be strings, got {name!r}")
        for name, v in sorted(columns.items()):
            if isinstance(v, _SCALARS):
                out[name] = v
                continue
            arr = np.asarray(v)
            if arr.ndim > (2 if name in DIVIDEND_FIELDS else 1):  # a cash-dividend schedule per row: (n, m)
                raise InvalidInputError(name, None, f"array of shape {arr.shape}", "columns must be one-dimensional")
            out[name] = encode_column(arr, buffers)
        return out

    def _encode_method(self, method: Method | None, buffers: list) -> dict | None:
        """Every field of ``method``; the encoding of a method without arrays is kept (by
        identity: a Method is immutable) for the next request with the same object."""
        if method is None:
            return None
        from ..models import Method

        if not isinstance(method, Method):
            raise TypeError(f"method must be an optiond.models.Method or None, not {type(method).__name__}")
        hit = self._methods.get(id(method))
        if hit is not None and hit[0] is method:
            return hit[1]
        n_buffers = len(buffers)
        out = {}
        for f in dataclasses.fields(Method):
            v = getattr(method, f.name)
            if type(v) is tuple and len(v) <= 8 and all(isinstance(x, _SCALARS) for x in v):
                out[f.name] = list(v)  # e.g. the ADI grid: a short list, not an array buffer
            else:
                out[f.name] = encode_column(v, buffers)
        if len(buffers) == n_buffers:  # no arrays: safe to reuse
            if len(self._methods) > 256:
                self._methods.clear()
            self._methods[id(method)] = (method, out)
        return out

    _decode_result = staticmethod(decode_result)
    _decode_iv = staticmethod(decode_iv)
    _decode_job_result = staticmethod(decode_job_result)

    def _content(self, columns: Mapping[str, Any], method: Method | None, buffers: list, *, prices: Any = _NO_PRICES,
                 op: str | None = None) -> dict:
        """A pricing request's content: ``op`` (a submit's), ``prices`` (implied volatility),
        ``columns``, ``method``, in that order (the daemon's cache key is the content as sent)."""
        content: dict = {}
        if op is not None:
            content["op"] = op
        if prices is not _NO_PRICES:
            content["prices"] = self._encode_columns({"prices": prices}, buffers)["prices"]
        content["columns"] = self._encode_columns(columns, buffers)
        m = self._encode_method(method, buffers)
        if m is not None:
            content["method"] = m
        return content

    def _call(self, op: str, content: dict, buffers: list, fallback: bool, timeout: float | None,
              job_id: str | None, force: bool, deadline_s: float | None,
              on_progress: Callable[[Event], None] | None, retries: int | None = None,
              lease_s: float | None = None) -> Message | Exception:
        """Send a pricing request and wait for its reply (relaying progress events to
        ``on_progress``); with ``fallback``, the reason no daemon answered (or why the daemon
        lost the request, :class:`DaemonLost`) instead of raising it. ``retries``: sends again
        after a timeout (None: the client's own); ``lease_s``: the request's lease (a chain's)."""
        if job_id is None and (on_progress is not None or buffers):  # a name to cancel it by if given up
            job_id = f"progress-{uuid.uuid4().hex}"
        meta = self._options(job_id, force, deadline_s)
        if lease_s is not None:
            meta = dict(meta or {}, lease_s=lease_s)
        try:
            with self._progress(on_progress, job_id):
                return self._request(op, content, buffers, timeout=timeout, metadata=meta, abandon=job_id,
                                     retries=retries)
        except (DaemonUnavailable, _Unsendable) as e:
            if not fallback:
                raise
            return e
        except JobCancelled as e:  # the daemon stopped with the request: lost, not refused
            return lost_or_raise(e, fallback)
        except KeyboardInterrupt:
            if job_id is not None:
                self._abandon(job_id)
            raise

    def _abandon(self, job_id: str) -> None:
        """Cancel ``job_id`` on a daemon that still answers its heartbeat (best effort, within
        about a second): work this client gave up on is not left running."""
        try:
            conn = self._connection()
            if self._heartbeat(conn, 0.3):
                self._request("cancel", {"job_id": job_id}, timeout=0.5, channel="control", use_down_cache=False,
                              retries=0)
        except Exception:  # noqa: BLE001 (a daemon gone meanwhile: nothing left to cancel)
            log.debug("could not cancel abandoned job %s", job_id, exc_info=True)

    def _estimated_s(self, op: str, columns: Mapping[str, Any], method: Method | None) -> float:
        """Single-core seconds a pricing request should take (the daemon's cost model with its
        default speed); 0 when it cannot be costed (the daemon then says what is wrong)."""
        import numpy as np

        from .. import costs, limits
        from ..models import Method

        m = method or Method()
        if (m.name == "binomial" and type(m.steps) is int and "steps" not in columns and "method" not in columns
                and all(isinstance(v, _SCALARS) for v in columns.values())):  # one option: no table to cost
            return costs.one_tree_cost(m.steps, m.greeks, op, caps=limits.DEFAULT_LIMITS).cpu_s
        if all(isinstance(v, _SCALARS) for v in columns.values()):  # one option of another method: a cell
            return 0.0
        try:
            n = max((len(v) for v in columns.values() if np.ndim(v) == 1), default=1)
            return limits.estimate(op, columns, m, n).cpu_s
        except Exception:  # noqa: BLE001 (an invalid table: the daemon's answer names the problem)
            return 0.0

    @staticmethod
    def _options(job_id: str | None, force: bool, deadline_s: float | None) -> dict | None:
        """The run options, sent in the metadata (outside the daemon's cache key)."""
        meta = {}
        if job_id is not None:
            if not isinstance(job_id, str) or not job_id:
                raise TypeError("job_id must be a non-empty string")
            meta["job_id"] = job_id
        if force:
            meta["force"] = True
        if deadline_s is not None:
            meta["deadline_s"] = float(deadline_s)
        return meta or None

    # ------------------------------------------------------------------ public API

    def ping(self, timeout: float | None = None) -> dict:
        """Round trip to the daemon.

        Returns:
            ``{"status": "ok", "pid": int, "version": str, "time": float (epoch s),
            "round_trip_s": float}``.

        Raises:
            DaemonUnavailable: no daemon answered.
        """
        t0 = time.perf_counter()
        msg = self._request("ping", {}, timeout=timeout, use_down_cache=False)
        return {**msg.content, "round_trip_s": time.perf_counter() - t0}

    def status(self, timeout: float | None = None) -> dict:
        """The daemon's state (on the control channel, so it answers while the daemon prices).

        Returns:
            A map with (among others):

            * ``version``, ``protocol_version``, ``pid``, ``state`` (``starting``, ``serving``,
              ``draining``, ``stopping``), ``started`` (ISO 8601), ``uptime_s``;
            * ``devices``: ``["cpu", "gpu:0 <name>", ...]``; ``gpu_memory``: one
              ``{"device", "rank", "used", "total", "pool_used"}`` (bytes) per GPU in use;
              ``cuda_version``, ``cupy_version`` with a GPU; ``cpu_threads``; ``methods``;
            * ``requests_served``, ``by_op`` ({op: count}), ``requests_by_outcome``
              ({``ok``, ``cached``, ``invalid``, ``refused``, ``cancelled``, ``deadline``,
              ``protocol_error``, ``failed``: count}), ``errors``, ``auth_failures``,
              ``malformed``, ``replayed``;
            * ``queue_depth`` (jobs queued + running), ``jobs_running``, ``jobs_queued``,
              ``jobs_by_outcome``;
            * ``cache_hit_ratio`` (0..1) and ``cache`` (``entries``, ``bytes``, ``hits``,
              ``misses``, ``hit_ratio``); ``coalesced_requests``; ``gpu_fallbacks``;
            * ``mpi_ranks``, ``mpi_workers``, ``mpi_workers_alive`` and ``mpi`` (with
              ``rank_info``: each rank's pid, host, device, threads);
            * ``limits``, ``endpoint``, ``connection_file``, ``metrics_url``, ``log_file``;
            * ``objects``: the named objects it keeps (``objects``, ``bytes``, ``max_objects``,
              ``max_objects_bytes``; :meth:`objects` lists them).

        Raises:
            DaemonUnavailable: no daemon answered.
        """
        return dict(self._request("status", {}, timeout=timeout, channel="control", use_down_cache=False).content)

    def shutdown(self, timeout: float | None = None) -> dict:
        """Ask the daemon to stop (a signed ``shutdown`` request on its control channel). The
        daemon answers, finishes the request it is pricing, removes its connection file and exits.

        Returns:
            ``{"status": "ok", "pid": int, "stopping": True}``.

        Raises:
            DaemonUnavailable: no daemon answered.
        """
        return dict(self._request("shutdown", {}, timeout=timeout, channel="control", use_down_cache=False,
                                  retries=0).content)

    def drain(self, shutdown: bool = False, timeout: float | None = None) -> dict:
        """Stop the daemon taking new work (requests get :class:`RequestRefused`, ``/readyz``
        says 503); the work accepted goes on. With ``shutdown`` it stops once that is done.

        Returns:
            ``{"status": "ok", "state": "draining", "queue_depth": int, "shutdown": bool}``.
        """
        return dict(self._request("drain", {"shutdown": bool(shutdown)}, timeout=timeout, channel="control",
                                  use_down_cache=False, retries=0).content)

    def resume(self, timeout: float | None = None) -> dict:
        """Undo :meth:`drain` (not after a drain with ``shutdown``). Returns ``{"state": "serving"}``."""
        return dict(self._request("resume", {}, timeout=timeout, channel="control", use_down_cache=False).content)

    def price_table(self, columns: Mapping[str, Any], method: Method | None = None, *, fallback: bool = True,
                    timeout: float | None = None, job_id: str | None = None, force: bool = False,
                    deadline_s: float | None = None, on_progress: Callable[[Event], None] | None = None,
                    as_job: bool | None = None, stall_s: float = JOB_STALL_S) -> Result:
        """Price raw columns on the daemon, as :func:`optiond.engine.price_table` does in-process.

        Args:
            columns: ``kind, style, spot, strike, expiry, rate, dividend_yield, volatility``
                (and optional per-row ``method``, ``steps``); each a scalar or a 1-D sequence
                of one length n. Units: expiry in years, rates and volatility as decimals.
            method: default method and settings (:class:`optiond.models.Method`); ``None``:
                the engine default (binomial, 1000 steps, Greeks).
            fallback: price in this process when no daemon answers, or when it dies before it
                answers (``Result.via == "in-process"``, ``diagnostics["fallback_reason"]``);
                ``False``: raise :class:`DaemonUnavailable` instead.
            timeout: seconds per attempt for this call (default: the client's). A dead daemon is
                noticed within 2 s whatever the timeout, so a long batch may use a long one.
            job_id: a name for this work (1-64 of ``A-Za-z0-9-_.:``), for :meth:`cancel` and in
                progress events; several requests may share one.
            force: price even if the daemon has this exact request in its cache.
            deadline_s: seconds the daemon may spend (refused at once if it estimates more;
                stopped with :class:`DeadlineExceeded` if it runs over).
            on_progress: called (in another thread) with each progress :class:`Event` of this
                request when the daemon runs it as a job (large batches).
            as_job: run it as a followed job: submitted, then asked for every
                :data:`JOB_POLL_S` for as long as the daemon's heartbeat answers and the job
                moves (no ``timeout`` applies to the whole), cancelled on Ctrl-C or any error,
                and cancelled by the daemon once its lease (:data:`JOB_LEASE_S`) lapses unrenewed
                (the client killed). None (default): when the estimated single-core time is over
                :data:`JOB_AFTER_S`. A request not run as a job that this client gives up on
                (no reply in time) is cancelled too.
            stall_s: a followed job whose progress stands still this long while running is
                given up (cancelled; :class:`DaemonUnavailable`).

        Returns:
            :class:`optiond.models.Result` of n rows (invalid rows marked ``status="error"``),
            ``via`` ``"daemon"`` or ``"in-process"``, ``device`` what priced it;
            ``diagnostics`` may hold ``job_id``, ``cached`` (answered from the daemon's cache),
            ``chunks``/``workers`` (a job), ``coalesced`` (priced in a batch with others),
            ``gpu_fallback`` (the GPU failed; the CPU priced it).

        Raises:
            InvalidInputError: a problem of the whole table (missing column, lengths differ).
            DaemonUnavailable: no daemon answered (or it died) and ``fallback`` is False;
                :class:`DaemonLost` when it took the work and then stopped or died.
            RequestRefused: over one of the daemon's limits, or the daemon is draining (raised
                even with ``fallback``: the request is refused, not lost).
            JobCancelled, DeadlineExceeded: the work was stopped; nothing is returned.
            DaemonError: the daemon failed for another reason.
        """
        buffers: list = []
        content = self._content(columns, method, buffers)
        if as_job or (as_job is None and self._estimated_s("price", columns, method) > JOB_AFTER_S):
            msg = self._run_job("price", content, buffers, fallback, timeout, job_id, force, deadline_s, on_progress,
                                stall_s)
        else:
            msg = self._call("price", content, buffers, fallback, timeout, job_id, force, deadline_s, on_progress)
        if isinstance(msg, Exception):  # no daemon, or it lost the work: priced here
            from .. import engine

            res = engine.price_table(columns, method)
            res.via = "in-process"
            res.diagnostics["fallback_reason"] = str(msg)
            if isinstance(msg, DaemonLost):
                res.diagnostics["daemon_lost"] = str(msg)
            return res
        return self._decode_result(msg)

    def implied_vol(self, prices: Any, columns: Mapping[str, Any], method: Method | None = None, *,
                    fallback: bool = True, timeout: float | None = None, job_id: str | None = None,
                    force: bool = False, deadline_s: float | None = None,
                    on_progress: Callable[[Event], None] | None = None, as_job: bool | None = None,
                    stall_s: float = JOB_STALL_S) -> ImpliedVol:
        """Implied volatilities on the daemon, as :func:`optiond.engine.implied_vol_table`.

        Args:
            prices: option prices (currency units), a scalar or shape (n,).
            columns: the batch columns (``volatility`` not needed), scalars broadcast.
            method: binomial (steps; American or European) or black-scholes (European).
            fallback, timeout, job_id, force, deadline_s, on_progress, as_job, stall_s: as
                :meth:`price_table`.

        Returns:
            :class:`optiond.models.ImpliedVol`: ``vol`` float64 (n,) annualised volatility (NaN
            where none), ``status`` per row (``ok``, ``below-intrinsic``, ``no-solution``,
            ``not-converged``, ``american-not-supported``, ``invalid``), ``error`` the reason
            where one is known, ``device`` what solved it, ``via`` ``"daemon"`` or
            ``"in-process"``. It unpacks as the earlier ``(vol, status)`` pair, the status
            then ``"invalid: <reason>"`` where a reason is known.

        Raises:
            InvalidInputError, DaemonUnavailable, DaemonError (and its subclasses): as
                :meth:`price_table`.
        """
        buffers: list = []
        content = self._content(columns, method, buffers, prices=prices)
        if as_job or (as_job is None and self._estimated_s("implied_vol", {**columns, "price": prices}, method)
                                         > JOB_AFTER_S):  # the prices: the spectral door's drift split
            msg = self._run_job("implied_vol", content, buffers, fallback, timeout, job_id, force, deadline_s,
                                on_progress, stall_s)
        else:
            msg = self._call("implied_vol", content, buffers, fallback, timeout, job_id, force, deadline_s,
                             on_progress)
        if isinstance(msg, Exception):  # no daemon: solved here
            from .. import engine
            from ..models import Method

            iv = engine.implied_vol_table(prices, columns, method or Method())
            iv.via = "in-process"
            iv.diagnostics["fallback_reason"] = str(msg)
            if isinstance(msg, DaemonLost):
                iv.diagnostics["daemon_lost"] = str(msg)
            return iv
        return self._decode_iv(msg)

    def price_chain(self, df: Any, *, fallback: bool = True, timeout: float | None = None, force: bool = False,
                    deadline_s: float | None = None, **market: Any) -> tuple[Any, Any]:
        """The chain job (:func:`optiond.chain.price_chain`) on the daemon in one request
        (:mod:`optiond.daemon.chain_op`): the market solve and the pricing run next to its GPU.

        Args:
            df: the chain (:func:`optiond.chain.read_chain`).
            market: ``rate``, ``dividend_yield``, ``steps``, ``carry``, ``spot_mode``,
                ``quote_time``, ``settlement``, ``curve``, ``method``, ``accuracy`` as
                :func:`optiond.chain.price_chain`.
            fallback: price in this process when no daemon answers, or when the daemon stops
                before it answers (``summary.extra["daemon_lost"]`` then says why).
            timeout: seconds to wait for the reply (default: :data:`CHAIN_TIMEOUT_S`).
            force, deadline_s: as :meth:`price_table`.

        The request holds a lease, as a followed job does (:func:`job_lease_s`, renewed by
        this client's heartbeat thread): the daemon stops pricing a chain whose client is gone.

        Returns:
            ``(out, summary)`` as :func:`optiond.chain.price_chain`; ``summary.elapsed_s`` is
            the round trip, ``summary.extra["server_s"]`` the daemon's part.

        Raises:
            ValueError: an unknown market field (before anything is sent).
            InvalidInputError, DaemonUnavailable, DaemonError: as :meth:`price_table`.
        """
        from . import chain_op

        t0 = time.perf_counter()
        buffers: list = []
        content = chain_op.encode_request(df, market, buffers)
        job_id, lease = f"chain-{uuid.uuid4().hex}", job_lease_s()
        # not sent again on a timeout: the daemon prices a chain request each time it gets one
        with self._leases.hold(job_id, lease):
            msg = self._call("chain", content, buffers, fallback, CHAIN_TIMEOUT_S if timeout is None else timeout,
                             job_id, force, deadline_s, None, retries=0, lease_s=lease)
        if isinstance(msg, Exception):  # no daemon, or it lost the request: priced here
            from .. import chain

            out, summary = chain.price_chain(df, **market)  # the in-process pricer by default
            if isinstance(msg, DaemonLost):
                summary.extra["daemon_lost"] = str(msg)
            return out, summary
        return chain_op.decode_reply(msg.content, list(msg.buffers), df, time.perf_counter() - t0)

    def close(self) -> None:
        """Close every socket of this client (call when no thread uses it any more)."""
        for s in list(self._sockets):
            s.close(linger=0)
        self._ctx.destroy(linger=0)  # also the sockets of threads that did not close theirs

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_shared: Client | None = None
_shared_lock = threading.Lock()


def get_client() -> Client:
    """The process-wide shared :class:`Client` (default connection file, 5 s timeout, 2
    retries). It re-reads the connection file whenever it changes, so it follows a daemon
    restart; a new one is made after a fork."""
    global _shared
    c = _shared
    if c is None or c._pid != os.getpid():
        with _shared_lock:
            if _shared is None or _shared._pid != os.getpid():
                _shared = Client()
                atexit.register(_close_shared, _shared)
            c = _shared
    return c


def _close_shared(client: Client) -> None:
    """At exit: close the shared client's sockets (in the process that made it)."""
    if client._pid == os.getpid():
        try:
            client.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown: nothing to report to)
            pass


__all__ = ["Client", "DaemonError", "DaemonLost", "DaemonUnavailable", "DeadlineExceeded", "Event", "JobCancelled",
           "JobPending", "RequestRefused", "Subscription", "get_client"]
