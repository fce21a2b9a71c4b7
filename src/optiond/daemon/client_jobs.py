"""The daemon client's job API and its event subscriptions.

Part of the client of :mod:`optiond.daemon.client` (which re-exports every public name here,
so import them from there). :class:`JobsMixin` holds the methods of
:class:`optiond.daemon.client.Client` that deal with jobs: ``submit_table``,
``submit_implied_vol``, ``result``, ``cancel``, ``jobs``, ``subscribe``, and the following of a
pricing request run as a job (``_run_job``, ``_follow``: asked for every :data:`JOB_POLL_S`,
given up after :data:`JOB_STALL_S` without progress; each ask one
:meth:`JobsMixin._ask_result`, as :meth:`JobsMixin.result`'s).

``Client`` inherits it; its methods use the request machinery of ``Client``
(``_request``, ``_connection``, ``_content``, ``_options``, ``_abandon``,
``_decode_job_result``, ``_ctx``, ``timeout``), so the mixin is no client by itself.

Work followed by this client (a job, a chain request) holds a lease of :func:`job_lease_s`
seconds on the daemon, renewed by :class:`LeaseHeartbeat`, a thread of the client that sends
``renew`` on the control channel every lease / :data:`RENEWALS_PER_LEASE` for as long as the
process lives: a process paused (Ctrl-Z, SIGSTOP) for less than about three quarters of the
lease keeps its work, and one killed outright leaves none behind after the lease.

:class:`Event` is one event of the daemon's PUB socket and :class:`Subscription` the thread
that receives them (:meth:`JobsMixin.subscribe`). This module does not import
:mod:`optiond.daemon.client`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import queue
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any, Callable, Mapping

import zmq

from .client_replies import (DaemonError, DaemonLost, DaemonUnavailable, JobCancelled, JobPending, _Unsendable,
                             lost_or_raise)
from .protocol import IOPUB_CURVE, Message, ProtocolError, iopub_curve_keys

if TYPE_CHECKING:
    from ..models import ImpliedVol, Method, Result

log = logging.getLogger("optiond.client")

_NOBLOCK = int(zmq.NOBLOCK)
#: longest ``wait_s`` of one ``result`` request (longer waits are several requests)
RESULT_POLL_S = 10.0
#: how long each ``result`` ask of a followed job waits on the daemon (seconds)
JOB_POLL_S = 0.2
#: the lease of followed work (seconds; the environment's ``OPTIOND_JOB_LEASE_S`` overrides
#: it, :func:`job_lease_s`): the daemon cancels a job or chain request whose client has not
#: renewed it for this long, so a client killed outright leaves no work behind after it; the
#: client's heartbeat renews it while the process lives, so a pause shorter than about three
#: quarters of it (Ctrl-Z, SIGSTOP) loses nothing
JOB_LEASE_S = 30.0
#: renewals the heartbeat sends per lease
RENEWALS_PER_LEASE = 4
#: the environment variable that sets the lease, and the range the daemon accepts (seconds)
LEASE_ENV = "OPTIOND_JOB_LEASE_S"
LEASE_RANGE = (0.1, 3600.0)
#: a followed job whose progress has not moved for this long (seconds, while running) is
#: given up and cancelled
JOB_STALL_S = 300.0


def job_lease_s() -> float:
    """The lease of followed work, seconds: ``$OPTIOND_JOB_LEASE_S`` when it is a number in
    :data:`LEASE_RANGE`, else :data:`JOB_LEASE_S` (a bad value is logged and ignored)."""
    text = os.environ.get(LEASE_ENV, "").strip()
    if not text:
        return JOB_LEASE_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not LEASE_RANGE[0] <= value <= LEASE_RANGE[1]:
        log.warning("%s=%r is not a number of seconds in [%g, %g]; using %g", LEASE_ENV, text, *LEASE_RANGE,
                    JOB_LEASE_S)
        return JOB_LEASE_S
    return value


class LeaseHeartbeat:
    """The thread of a client that renews the leases of the work it follows (see the module
    docstring). :meth:`hold` a job id for as long as the work is followed; the thread runs
    while something is held and sends one ``renew`` (every id held) on the control channel
    every lease / :data:`RENEWALS_PER_LEASE`. A renewal that fails is logged (debug) and
    tried again at the next beat: the following itself notices a daemon gone."""

    def __init__(self, client: "JobsMixin"):
        # weakly: a client that references its heartbeat and back would be freed by the cycle
        # collector only, whose order of finalizers lets the client's context wait on open sockets
        self._client = weakref.ref(client)
        self._held: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: renewals sent (each a ``renew`` request, answered or not)
        self.beats = 0

    @contextlib.contextmanager
    def hold(self, job_id: str, lease_s: float):
        """Renew ``job_id``'s lease of ``lease_s`` seconds until the block ends."""
        with self._lock:
            self._held.setdefault(job_id, []).append(lease_s)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="optiond-lease", daemon=True)
                self._thread.start()
            self._wake.set()  # a shorter lease: beat sooner
        try:
            yield
        finally:
            with self._lock:
                leases = self._held.get(job_id)
                if leases is not None:
                    leases.remove(lease_s)
                    if not leases:
                        del self._held[job_id]
                self._wake.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                client = self._client()
                if not self._held or client is None:
                    self._thread = None
                    if client is not None:
                        try:
                            client._drop_socket("control")  # this thread's socket
                        except zmq.ZMQError:
                            pass
                    return
                ids = sorted(self._held)
                interval = min(min(v) for v in self._held.values()) / RENEWALS_PER_LEASE
                self._wake.clear()
            try:
                self.beats += 1
                client._request("renew", {"job_ids": ids}, timeout=max(interval, 1.0), channel="control",
                                use_down_cache=False, retries=0)
            except Exception:  # noqa: BLE001 (a daemon gone or busy: the next beat tries again)
                log.debug("lease renewal of %s failed", ids, exc_info=True)
            del client
            self._wake.wait(interval)


@dataclasses.dataclass(frozen=True)
class Event:
    """One event from the daemon's PUB socket (see :meth:`Client.subscribe`).

    Attributes:
        kind: ``"progress"`` (a job's progress), ``"status"`` (the daemon's state changed, or
            sent on subscribing), ``"heartbeat"`` (every 0.5 s), or ``"lost"`` (no event for
            1.5 s: the daemon is gone; events resume when it, or its successor, is back).
        data: the event's fields. progress: ``job_id``, ``msg_id`` (the request's), ``state``
            (``queued``, ``running``, ``done``, ``failed``, ``cancelled``, ``deadline``),
            ``fraction`` (0..1 of the work), ``eta_s``, ``elapsed_s``, ``n``, ``done_rows``,
            ``chunks``, ``chunks_done``, ``op``, ``model``, ``client``, ``error``. status and
            heartbeat: ``state`` (``starting``, ``serving``, ``draining``, ``stopping``),
            ``pid``, ``queue_depth``, ``jobs_running``, ``time``.
        received: ``time.monotonic()`` when it arrived.
    """

    kind: str
    data: dict
    received: float

    @property
    def job_id(self) -> str | None:
        return self.data.get("job_id")

    @property
    def fraction(self) -> float | None:
        return self.data.get("fraction")

    @property
    def eta_s(self) -> float | None:
        return self.data.get("eta_s")

    @property
    def state(self) -> str | None:
        return self.data.get("state")


class JobsMixin:
    """The job API of :class:`optiond.daemon.client.Client` (see the module docstring): a
    pricing request followed as a job, the submit/result/cancel calls, the event
    subscriptions."""

    # ------------------------------------------------------------------ following a job

    def _run_job(self, op: str, content: dict, buffers: list, fallback: bool, timeout: float | None,
                 job_id: str | None, force: bool, deadline_s: float | None,
                 on_progress: Callable[[Event], None] | None, stall_s: float) -> Message | Exception:
        """Submit a pricing request as a job and follow it to its end (see :meth:`follow`),
        its lease (:func:`job_lease_s`) renewed by the client's :class:`LeaseHeartbeat`; with
        ``fallback``, the reason no daemon took it, or why the daemon lost it
        (:class:`DaemonLost`: it stopped or died meanwhile), instead of raising it. A job given
        up (the daemon died, it stalled, Ctrl-C, any error) is cancelled; a client killed
        outright stops renewing the job's lease and the daemon cancels it.

        Raises:
            DaemonLost: the daemon stopped or died with the job (without ``fallback``).
        """
        job_id = job_id or f"progress-{uuid.uuid4().hex}"
        lease = job_lease_s()
        meta = dict(self._options(job_id, force, deadline_s) or {}, lease_s=lease)
        content = {"op": op, **content}
        accepted = False
        try:
            with self._progress(on_progress, job_id), self._leases.hold(job_id, lease):
                try:
                    self._request("submit", content, buffers, timeout=timeout, metadata=meta)
                except (DaemonUnavailable, _Unsendable) as e:
                    if not fallback:
                        raise
                    return e
                accepted = True
                return self._follow(job_id, stall_s)
        except DaemonUnavailable as e:  # it died, or the job stalled (cancelled by _follow)
            if accepted and not isinstance(e, DaemonLost):
                e = DaemonLost(f"the daemon lost the job: {e}")
            if not fallback:
                raise e from None
            return e
        except JobCancelled as e:
            return lost_or_raise(e, fallback)

    def _follow(self, job_id: str, stall_s: float) -> Message:
        """Ask for a submitted job's reply every :data:`JOB_POLL_S` until it ends; cancel it if
        this gives up for any reason.

        Raises:
            DaemonUnavailable: the daemon died, or the job's progress stood still for ``stall_s``
                seconds while it ran (it is cancelled).
            JobCancelled, DeadlineExceeded, InvalidInputError, DaemonError: the job ended without
                a result.
        """
        done = False
        best, moved = -1.0, time.monotonic()
        try:
            while True:
                try:
                    got = self._ask_result(job_id, JOB_POLL_S)
                except DaemonError:
                    done = True  # the job ended (failed, cancelled, deadline): nothing to cancel
                    raise
                if isinstance(got, Message):
                    done = True
                    return got
                now = time.monotonic()
                fraction = float(got.get("fraction") or 0.0)
                if fraction > best or got.get("state") == "queued":
                    best, moved = max(best, fraction), now
                elif now - moved > stall_s:
                    raise DaemonUnavailable(f"job {job_id} made no progress for {stall_s:g} s (at {best:.0%}); "
                                            f"cancelled it")
        finally:
            if not done:
                self._abandon(job_id)

    def _ask_result(self, job_id: str, wait: float) -> Message | dict:
        """One ``result`` request waiting up to ``wait`` s on the daemon: the job's reply, or,
        while it runs, where it stands (the JobPending error's ``state``, ``fraction``, ``eta_s``).

        Raises:
            DaemonError (and the errors it maps to): the job ended without a result, or no such job.
            DaemonUnavailable: no daemon answered, or it died.
        """
        try:
            return self._request("result", {"job_id": job_id, "wait_s": wait}, timeout=wait + self.timeout,
                                 use_down_cache=False)
        except DaemonError as e:
            if e.ename != "JobPending":
                raise
            return e.details

    # ------------------------------------------------------------------ jobs

    def submit_table(self, columns: Mapping[str, Any], method: Method | None = None, *, job_id: str | None = None,
                     force: bool = False, deadline_s: float | None = None, timeout: float | None = None) -> str:
        """Start pricing a batch on the daemon and return at once (no in-process fall-back).

        Args:
            columns, method, force, deadline_s: as :meth:`price_table`.
            job_id: the job's name (default: one the daemon makes up).
            timeout: seconds to wait for the daemon to accept it.

        Returns:
            The job id, for :meth:`result`, :meth:`cancel` and the progress events.

        Raises:
            InvalidInputError, RequestRefused, DaemonUnavailable, DaemonError.
            TypeError: a value that cannot be sent (e.g. a datetime in a column).
        """
        buffers: list = []
        content = self._content(columns, method, buffers, op="price")
        meta = self._options(job_id, force, deadline_s)
        return str(self._request("submit", content, buffers, timeout=timeout, metadata=meta).content["job_id"])

    def submit_implied_vol(self, prices: Any, columns: Mapping[str, Any], method: Method | None = None, *,
                           job_id: str | None = None, force: bool = False, deadline_s: float | None = None,
                           timeout: float | None = None) -> str:
        """:meth:`submit_table` for implied volatilities (see :meth:`implied_vol`). Returns the job id."""
        buffers: list = []
        content = self._content(columns, method, buffers, prices=prices, op="implied_vol")
        meta = self._options(job_id, force, deadline_s)
        return str(self._request("submit", content, buffers, timeout=timeout, metadata=meta).content["job_id"])

    def result(self, job_id: str, timeout: float | None = None) -> Result | ImpliedVol:
        """Wait for a submitted job and return its whole result.

        Args:
            job_id: from :meth:`submit_table` / :meth:`submit_implied_vol`.
            timeout: seconds to wait (None: until it ends). A dead daemon is noticed within 2 s.

        Returns:
            A :class:`optiond.models.Result` (price jobs) or an :class:`optiond.models.ImpliedVol`
            (implied-vol jobs; it unpacks as the earlier ``(vol, status)`` pair).

        Raises:
            JobPending: still running after ``timeout`` (call again later; it goes on).
            JobCancelled, DeadlineExceeded, InvalidInputError, DaemonError: the job ended without
                a result.
            RequestRefused: no such job (``ename`` ``UnknownJob``).
            DaemonUnavailable: no daemon answered, or it died.
        """
        end = None if timeout is None else time.monotonic() + float(timeout)
        while True:
            wait = RESULT_POLL_S if end is None else max(0.0, min(RESULT_POLL_S, end - time.monotonic()))
            got = self._ask_result(job_id, wait)
            if isinstance(got, Message):
                return self._decode_job_result(got)
            if end is not None and time.monotonic() >= end:
                raise JobPending(f"job {job_id} is still {got.get('state', 'running')} "
                                 f"({100 * float(got.get('fraction') or 0):.0f}% done)", job_id,
                                 str(got.get("state", "running")), float(got.get("fraction") or 0.0),
                                 got.get("eta_s"))

    def cancel(self, job_id: str, timeout: float | None = None) -> dict:
        """Cancel the work named ``job_id`` (on the control channel, so it is heard even while
        the daemon prices). The job's requester gets :class:`JobCancelled`; a request with this
        id that arrives in the next 30 s is refused too.

        Returns:
            ``{"status": "ok", "job_id": str, "cancelled": int (jobs stopped; 0 if none was
            running), "states": [str, ...]}``.

        Raises:
            DaemonUnavailable: no daemon answered.
        """
        return dict(self._request("cancel", {"job_id": str(job_id)}, timeout=timeout, channel="control",
                                  use_down_cache=False).content)

    def jobs(self, timeout: float | None = None) -> list[dict]:
        """The jobs queued or running, each ``{job_id, msg_id, client, op, kind, state, n,
        model, fraction, eta_s, elapsed_s, done_rows, chunks, chunks_done, error}``."""
        return list(self._request("jobs", {}, timeout=timeout, channel="control", use_down_cache=False)
                    .content.get("jobs", []))

    # ------------------------------------------------------------------ events

    def subscribe(self, callback: Callable[[Event], None] | None = None, *, lost_after: float = 1.5,
                  wait_connected: float = 1.0) -> "Subscription":
        """Listen to the daemon's events (progress, status, heartbeat) in a background thread.

        Args:
            callback: called with each :class:`Event` in the subscription's thread (a GUI
                should hand it to its own thread, e.g. with a Qt signal); without one, read
                them with :meth:`Subscription.get`.
            lost_after: seconds without any event before a ``"lost"`` event (the daemon sends
                a heartbeat every 0.5 s, so the default notices a dead daemon within 2 s).
            wait_connected: seconds to wait for the daemon's first event before returning (so
                that the events of a request sent next are not missed).

        Returns:
            A running :class:`Subscription` (close it, or use it as a context manager).

        Raises:
            DaemonUnavailable: no connection file.
        """
        sub = Subscription(self, callback, lost_after=lost_after)
        sub.wait_connected(wait_connected)
        return sub

    def _progress(self, on_progress: Callable[[Event], None] | None, job_id: str | None):
        if on_progress is None:
            return _NullContext()

        def relay(ev: Event) -> None:
            if ev.kind == "progress" and ev.data.get("job_id") == job_id:
                on_progress(ev)

        try:
            return self.subscribe(relay)
        except DaemonUnavailable:
            return _NullContext()


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class Subscription:
    """The daemon's events, received in a thread of their own (see :meth:`Client.subscribe`).

    Every event is signed by the daemon and checked here (forged ones are dropped), and where
    the connection file says ``"iopub_security": "curve"`` it comes encrypted over a CURVE
    connection (:func:`optiond.daemon.protocol.iopub_curve_keys`). When no
    event arrives for ``lost_after`` seconds a ``"lost"`` :class:`Event` is delivered once;
    the subscription then follows the connection file, so events resume from a restarted
    daemon. Events are passed to ``callback`` and also queued for :meth:`get` (the 10,000
    newest are kept).
    """

    def __init__(self, client: JobsMixin, callback: Callable[[Event], None] | None = None, *, lost_after: float = 1.5):
        self._client = client
        self._callback = callback
        self.lost_after = float(lost_after)
        self._queue: queue.Queue = queue.Queue(maxsize=10_000)
        self._stop = threading.Event()
        self._connected = threading.Event()
        self.alive = False
        self.last_event: float | None = None
        client._connection(force=True)  # raise DaemonUnavailable now if there is no daemon file
        self._thread = threading.Thread(target=self._run, name="optiond-subscription", daemon=True)
        self._thread.start()

    def wait_connected(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the first event; whether one came."""
        return self._connected.wait(timeout)

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None after ``timeout`` seconds."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _deliver(self, ev: Event) -> None:
        if self._queue.full():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                pass
        self._queue.put_nowait(ev)
        if self._callback is not None:
            try:
                self._callback(ev)
            except Exception:  # noqa: BLE001 (a faulty callback must not end the subscription)
                log.warning("subscription callback failed", exc_info=True)

    def _run(self) -> None:
        sock = None
        conn = None
        last = time.monotonic()
        lost = False
        try:
            while not self._stop.is_set():
                if sock is None:
                    try:
                        conn = self._client._connection(force=True)
                    except DaemonUnavailable:
                        conn = None
                    if conn is not None:
                        sock = self._client._ctx.socket(zmq.SUB)
                        sock.setsockopt(zmq.LINGER, 0)
                        sock.setsockopt(zmq.SUBSCRIBE, b"")
                        if conn.info.get("iopub_security") == IOPUB_CURVE:  # encrypted: name the daemon's key
                            sock.curve_serverkey = iopub_curve_keys(conn.info["key"].encode("ascii"))[0]
                            sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
                        sock.connect(conn.endpoint("iopub"))
                if sock is None or not sock.poll(100):
                    now = time.monotonic()
                    if now - last > self.lost_after and not lost:
                        lost, self.alive = True, False
                        self._deliver(Event("lost", {"silent_s": now - last}, now))
                    if lost and sock is not None and now - last > self.lost_after:
                        try:  # a restarted daemon has a new connection file: follow it
                            new = self._client._connection(force=True)
                        except DaemonUnavailable:
                            new = None
                        if new is not None and new is not conn:
                            sock.close(linger=0)
                            sock = None
                        elif new is None:
                            time.sleep(0.2)
                    elif sock is None:
                        time.sleep(0.2)
                    continue
                try:
                    msg = conn.session.recv(sock, _NOBLOCK)
                except (zmq.Again, ProtocolError):
                    continue
                now = time.monotonic()
                last, lost = now, False
                self.alive, self.last_event = True, now
                self._connected.set()
                kind = msg.header.get("msg_type", "")
                self._deliver(Event(kind, dict(msg.content), now))
        except zmq.ZMQError:
            pass  # the client's context was closed
        finally:
            if sock is not None:
                sock.close(linger=0)

    def close(self) -> None:
        """Stop listening (waits for the thread, at most a second)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
