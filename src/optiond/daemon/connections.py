"""The daemon's descriptor budget and per-transport connection caps.

Any local process can open TCP connections to the daemon's ports without the key, and every
accepted connection costs the daemon a file descriptor. Were the descriptor table to fill,
libzmq would refuse everyone on TCP, and abort the process when a client then came over the
Unix-domain socket (its IPC listener asserts on ``EMFILE``). So the daemon:

* raises its soft ``RLIMIT_NOFILE`` to the hard limit at start (:func:`raise_nofile_limit`;
  the systemd unit from ``optiond service unit`` raises the hard limit with ``LimitNOFILE``);
* keeps a *reserve* of descriptors for its own files, sockets, threads and libraries
  (:func:`reserve`: a quarter of the limit, at least :data:`RESERVE_MIN`): peers' connections
  may use the rest, the *budget*, all transports together;
* caps the connections of each transport (``shell``, ``control``, ``hb`` over TCP and their
  Unix-socket twins ``shell_ipc``, ``control_ipc``, ``hb_ipc``, and ``iopub``; by default an
  equal share of the budget each), so that a flood of one port, or of all of them, leaves
  every other its share;
* watches every listener with a ZeroMQ socket monitor (:class:`ConnectionGuard`): a connection
  accepted over its transport's cap or over the budget (with no unproven one to displace,
  below), or given a descriptor in the reserve, is *shed* at once (``shutdown(2)`` on its
  descriptor: libzmq sees the peer gone and closes it), counted and logged (at most one line
  a second). If an accept fails for want of descriptors all the same, unproven connections
  (below), else the newest of the fullest transport, are shed to make room;
* tells *proven* connections from *unproven* ones. A connection is proven once a correctly
  signed message has come over it (:meth:`ConnectionGuard.mark_signed`, called by the
  daemon's receiving threads with the message's ``SRCFD``; only a key holder can send one);
  ``hb`` and ``iopub`` carry no signed message (an echo, subscriptions), so theirs stay
  unproven. A proven connection is never shed to make room for an unproven one: a newcomer
  over its transport's cap, or over the budget, *displaces* the oldest unproven connection
  (of its transport; over the budget, of any), and is shed itself only when there is none
  (the cap full of proven ones). So key-less peers that connect, complete the ZeroMQ
  handshake and stay silent cannot keep a key holder out, however many they are: its new
  connection is accepted at once and has until ``cap`` newer connections have come to send
  its first signed message (milliseconds are enough), and a client connection of ``hb`` or
  ``iopub`` that was displaced is opened again by its ZeroMQ socket (``RECONNECT_IVL``) and
  displaces another in turn. (The unproven connections are not held to a pool smaller than
  the cap: ZeroMQ peers that lose their connection reconnect every 100 ms, so a smaller pool
  only makes them come back more often and leaves a newcomer less time to prove itself.)
  The listeners' accept queue is :data:`LISTEN_BACKLOG` deep, so that a key holder's
  connection request is not dropped while such peers reconnect by the thousand a second;
* closes the connection of a peer that sends a large message (over 64 KiB) without a valid
  signature (:meth:`ConnectionGuard.drop`; a client holding the key never does; small ones are
  only dropped and counted, they cost next to nothing): what libzmq queued on
  that connection is dropped with it, so one connection cannot hold up to ``RCVHWM`` messages of
  the largest size, and each further try costs the peer a new connection;
* drops a connection that has not completed the ZeroMQ handshake within
  :data:`HANDSHAKE_IVL_MS` (libzmq's default is 30 s), so idle sockets do not pile up.

On Windows (no ``RLIMIT_NOFILE``; sockets are handles) the budget is
:data:`WINDOWS_BUDGET` connections.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from typing import Any, Callable

import zmq
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger("optiond.daemon")

#: descriptors kept for the daemon's own use, at least (a quarter of the limit where larger)
RESERVE_MIN = 256
#: the connection budget where there is no RLIMIT_NOFILE (Windows)
WINDOWS_BUDGET = 8192
#: a connection must complete the ZeroMQ greeting within this (ms), else libzmq drops it
HANDSHAKE_IVL_MS = 10_000
#: the soft limit is raised at most to this (a hard limit of "unlimited" is not a number)
NOFILE_CEILING = 1 << 20
#: the listeners' accept queue (libzmq's default is 100): when peers reconnect by the
#: thousand a second, a key holder's connection request must not be dropped by a full queue
#: (its SYN would be sent again only after a second)
LISTEN_BACKLOG = 1024
#: a connection proven before its accept event was seen counts as proven if that event comes within this (s)
EARLY_MARK_S = 1.0

_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_ACCEPT_FAILED
_OUT_OF_FDS = {errno.EMFILE, errno.ENFILE}


def raise_nofile_limit() -> int | None:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (at most
    :data:`NOFILE_CEILING`). Returns the soft limit now in force, or None where there is no
    such limit (Windows). A refusal by the system is logged and the old limit kept."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_CEILING if hard == resource.RLIM_INFINITY else min(hard, NOFILE_CEILING)
    if soft != resource.RLIM_INFINITY and soft < target:
        error = None
        # where the kernel caps a process below the hard limit (macOS: kern.maxfilesperproc,
        # with a hard limit of "unlimited"), the lower candidates still raise it
        for want in sorted({target, min(target, 65536), min(target, 10240)}, reverse=True):
            if want <= soft:
                break
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                soft, error = want, None
                break
            except (ValueError, OSError) as e:
                error = e
        if error is not None:
            log.warning("could not raise the open-files limit above %d (%s)", soft, error)
    return NOFILE_CEILING if soft == resource.RLIM_INFINITY else int(soft)


def reserve(fd_limit: int) -> int:
    """Descriptors kept for the daemon itself under a limit of ``fd_limit``."""
    return max(RESERVE_MIN, fd_limit // 4)


def budget(fd_limit: int | None) -> int:
    """Peers' connections allowed in all (every transport and the HTTP port) under a soft
    limit of ``fd_limit`` descriptors (None: :data:`WINDOWS_BUDGET`); at least 16."""
    if fd_limit is None:
        return WINDOWS_BUDGET
    return max(16, fd_limit - reserve(fd_limit))


def _endpoint_key(endpoint: str) -> tuple[str, Any]:
    """``("tcp", port)`` or ``("ipc", path)`` of a ZeroMQ endpoint (what getsockname shows)."""
    scheme, _, rest = endpoint.partition("://")
    if scheme == "tcp":
        return "tcp", int(rest.rsplit(":", 1)[1])
    return scheme, rest


def shutdown_fd(fd: int, expected: tuple[str, Any] | list[tuple[str, Any]]) -> bool:
    """``shutdown(SHUT_RDWR)`` the connected socket ``fd`` if it is still one of the listener
    ``expected`` (``("tcp", port)`` / ``("ipc", path)``, or a list of them): libzmq then sees
    the peer gone and closes it itself. Never closes the descriptor (it is libzmq's). Returns
    whether it did."""
    if fd < 0:
        return False
    try:
        s = socket.socket(fileno=fd)
    except OSError:  # closed meanwhile, or no longer a socket
        return False
    try:
        name = s.getsockname()
        if isinstance(name, tuple):
            key: tuple[str, Any] = ("tcp", name[1])
        else:
            key = ("ipc", name.decode(errors="replace") if isinstance(name, bytes) else name)
        ok = key in expected if isinstance(expected, list) else key == expected
        if ok:
            s.shutdown(socket.SHUT_RDWR)
        return ok
    except OSError:
        return False
    finally:
        s.detach()


class ConnectionGuard:
    """Counts the connections of the daemon's ZeroMQ listeners, tells the proven from the
    unproven, and sheds or displaces those over the caps (see the module docstring), from a
    thread of its own.

    Args:
        ctx: the daemon's context (for the monitor sockets).
        listeners: ``(socket, {endpoint: transport name})`` for each ZeroMQ socket whose
            accepted connections are watched (its endpoints as ``last_endpoint`` gives them).
        fd_limit: the soft descriptor limit in force (None on Windows).
        max_connections: cap per transport (default: the budget shared equally among them).
        other_connections: returns the connections open elsewhere in the budget (the HTTP port).
        on_shed: called with the transport name of each connection shed (for the metrics).
    """

    def __init__(self, ctx: zmq.Context, listeners: list[tuple[zmq.Socket, dict[str, str]]], fd_limit: int | None,
                 max_connections: int | None = None, other_connections: Callable[[], int] = lambda: 0,
                 on_shed: Callable[[str], None] = lambda transport: None):
        self.fd_limit = fd_limit
        self.budget = budget(fd_limit)
        #: a descriptor at or above this is in the reserve: its connection is shed whatever the counts
        self.fd_line = fd_limit - reserve(fd_limit) // 2 if fd_limit is not None else None
        self._other = other_connections
        self._on_shed = on_shed
        self._stop = threading.Event()
        self._monitors: list[tuple[zmq.Socket, zmq.Socket, dict[str, str]]] = []
        #: every watched connection by descriptor: (transport, listener endpoint, accepted at)
        self._conns: dict[int, tuple[str, str, float]] = {}
        #: the descriptors of proven connections (read without the lock by the receiving threads)
        self.signed: set[int] = set()
        #: per transport, its unproven connections not yet shed, oldest first: {fd: accepted at}
        self._unproven: dict[str, dict[int, float]] = {}
        self._proven: dict[str, int] = {}
        self._early: dict[int, float] = {}
        self.open: dict[str, int] = {}
        self.shed: dict[str, int] = {}
        self._keys: dict[str, tuple[str, Any]] = {}
        self._logged_at = 0.0
        self._unlogged = 0
        self._lock = threading.Lock()  # the counts move on this thread and on the receiving ones
        for sock, endpoints in listeners:
            sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_IVL_MS)
            addr = f"inproc://optiond-monitor-{id(self)}-{len(self._monitors)}"
            sock.monitor(addr, _EVENTS)
            mon = ctx.socket(zmq.PAIR)
            mon.setsockopt(zmq.LINGER, 0)
            mon.setsockopt(zmq.RCVHWM, 0)  # an unbounded inproc pipe: no event is ever dropped
            mon.connect(addr)
            self._monitors.append((sock, mon, dict(endpoints)))
            for ep, transport in endpoints.items():
                self.open.setdefault(transport, 0)
                self.shed.setdefault(transport, 0)
                self._unproven.setdefault(transport, {})
                self._proven.setdefault(transport, 0)
                self._keys[ep] = _endpoint_key(ep)
        share = max(8, self.budget // max(1, len(self.open)))
        self.cap = max(1, int(max_connections)) if max_connections else share
        self.thread = threading.Thread(target=self._run, name="optiond-connections", daemon=True)
        self.thread.start()

    def stats(self) -> dict[str, Any]:
        """``{"open": {transport: n}, "shed": {transport: n}, "unproven": {transport: n},
        "proven": {transport: n}, "cap", "budget", "fd_limit"}`` (``open`` counts connections
        being shed until they are closed)."""
        with self._lock:
            unproven = {t: len(v) for t, v in self._unproven.items()}
        return {"open": dict(self.open), "shed": dict(self.shed), "unproven": unproven,
                "proven": dict(self._proven), "cap": self.cap, "budget": self.budget, "fd_limit": self.fd_limit}

    def _run(self) -> None:
        poller = zmq.Poller()
        for _, mon, _ in self._monitors:
            poller.register(mon, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(100))
            except zmq.ZMQError:
                return
            for entry in self._monitors:
                if entry[1] in ready:
                    try:
                        while True:
                            self._event(entry[2], parse_monitor_message(entry[1].recv_multipart(zmq.NOBLOCK)))
                    except zmq.Again:
                        pass
                    except zmq.ZMQError:
                        return
                    except Exception:  # noqa: BLE001 (the guard must outlive any odd event)
                        log.warning("connection monitor: unexpected event", exc_info=True)

    def mark_signed(self, fd: int) -> None:
        """The connection ``fd`` (a message's ``SRCFD``) brought a correctly signed message: it
        is proven from now on (any thread; callers skip it when ``fd in self.signed``)."""
        if fd < 0:
            return
        with self._lock:
            if fd in self.signed:
                return
            known = self._conns.get(fd)
            if known is None:  # its accept event is still queued: counted proven when it comes
                self._early[fd] = time.monotonic()
                return
            self._prove(fd, known[0])

    def _prove(self, fd: int, transport: str) -> None:  # under the lock
        if self._unproven[transport].pop(fd, None) is None:
            return  # already shed (a late message of a connection being closed): stays unproven
        self.signed.add(fd)
        self._proven[transport] += 1

    def _event(self, endpoints: dict[str, str], ev: dict) -> None:
        kind, value = ev["event"], ev["value"]
        endpoint = ev["endpoint"].decode(errors="replace") if isinstance(ev["endpoint"], bytes) else ev["endpoint"]
        if kind == zmq.EVENT_DISCONNECTED:
            with self._lock:
                gone = self._conns.get(value)
                if gone is not None and gone[1] in endpoints:  # (not a newer connection of another listener)
                    self._forget(value)
            return
        transport = endpoints.get(endpoint)
        if transport is None:
            return
        if kind == zmq.EVENT_ACCEPT_FAILED:
            if value in _OUT_OF_FDS:
                self._make_room()
            return
        # EVENT_ACCEPTED: value is the new connection's descriptor
        now = time.monotonic()
        why = victim = None
        with self._lock:
            if value in self._conns:  # its descriptor's last connection, of another listener, closed unseen
                self._forget(value)
            self._conns[value] = (transport, endpoint, now)
            self.open[transport] += 1
            self._unproven[transport][value] = now
            early = self._early.pop(value, None)
            if self._early:
                self._early = {fd: t for fd, t in self._early.items() if now - t < EARLY_MARK_S}
            if early is not None and now - early < EARLY_MARK_S:
                self._prove(value, transport)
            if self.fd_line is not None and value >= self.fd_line:
                why = "descriptor reserve reached"
                victim = self._oldest(list(self._unproven), value)
            else:
                live = self._proven[transport] + len(self._unproven[transport])
                total = sum(self._proven.values()) + sum(len(v) for v in self._unproven.values()) + self._other()
                if live > self.cap:
                    victim = self._oldest([transport], value)
                    why = None if victim is not None else f"over the {transport} cap of {self.cap}"
                elif total > self.budget:
                    victim = self._oldest(list(self._unproven), value)
                    why = None if victim is not None else f"over the budget of {self.budget} connections"
            if why is not None:
                self._unproven[transport].pop(value, None)
                if value in self.signed:  # proven early, but over the cap all the same
                    self.signed.discard(value)
                    self._proven[transport] -= 1
        if victim is not None:
            self._shed(victim[0], victim[1], victim[2], "displaced by a newer connection (the oldest unproven)")
        if why is not None:
            self._shed(transport, value, endpoint, why)

    def _forget(self, fd: int) -> None:  # under the lock
        transport = self._conns.pop(fd)[0]
        self.open[transport] -= 1
        if fd in self.signed:
            self.signed.discard(fd)
            self._proven[transport] -= 1
        else:
            self._unproven[transport].pop(fd, None)

    def _oldest(self, transports: list[str], newcomer: int) -> tuple[str, int, str] | None:
        """The oldest unproven connection of ``transports`` other than ``newcomer``, taken out
        of the unproven (under the lock): ``(transport, fd, endpoint)``, or None."""
        best = None
        for t in transports:
            for fd, t0 in self._unproven[t].items():  # oldest first
                if fd != newcomer:
                    if best is None or t0 < best[2]:
                        best = (t, fd, t0)
                    break
        if best is None:
            return None
        self._unproven[best[0]].pop(best[1], None)
        return best[0], best[1], self._conns[best[1]][1]

    def drop(self, fd: int) -> bool:
        """Close the peer connection ``fd`` (a message's ``SRCFD``) because it sent a message
        without a valid signature; any thread. Returns whether it was one of the watched
        listeners' connections and was closed."""
        with self._lock:
            known = self._conns.get(fd)
            if known is not None:
                self._unproven[known[0]].pop(fd, None)
        if known is not None:
            return self._shed(known[0], fd, known[1], "a message without a valid signature")
        # not counted in yet (its accept event still queued): any watched listener of ours
        for _, _, endpoints in list(self._monitors):
            for ep, transport in endpoints.items():
                if shutdown_fd(fd, self._keys[ep]):
                    self._count_shed(transport, "a message without a valid signature")
                    return True
        return False

    def _shed(self, transport: str, fd: int, endpoint: str, why: str) -> bool:
        if not shutdown_fd(fd, self._keys[endpoint]):
            return False
        self._count_shed(transport, why)
        return True

    def _count_shed(self, transport: str, why: str) -> None:
        with self._lock:
            self.shed[transport] += 1
            self._unlogged += 1
            now = time.monotonic()
            due = now - self._logged_at >= 1.0
            if due:
                unlogged, self._unlogged, self._logged_at = self._unlogged, 0, now
        self._on_shed(transport)
        if due:
            log.warning("shed %d connection(s) (%s; %s open, %d shed in all)", unlogged, why,
                        ", ".join(f"{k} {v}" for k, v in self.open.items()), sum(self.shed.values()),
                        extra={"event": "connections_shed", "shed": unlogged, "reason": why,
                               "open": dict(self.open)})

    def _make_room(self) -> None:
        """An accept failed for want of descriptors: shed unproven connections, oldest first (an
        eighth of them, at least 16), else the newest of the transport with the most."""
        with self._lock:
            unproven = sorted((t0, fd, t) for t, v in self._unproven.items() for fd, t0 in v.items())
            pick = [(t, fd) for _, fd, t in unproven[:max(16, len(unproven) // 8)]]
            if not pick:
                best = max(self.open.items(), key=lambda x: x[1], default=(None, 0))
                if best[0] is not None and best[1] > 0:
                    mine = sorted(((t0, fd) for fd, (t, _, t0) in self._conns.items() if t == best[0]), reverse=True)
                    pick = [(best[0], fd) for _, fd in mine[:max(16, len(mine) // 8)]]
            for t, fd in pick:
                self._unproven[t].pop(fd, None)
            pick = [(t, fd, self._conns[fd][1]) for t, fd in pick]
        if not pick:
            log.error("out of file descriptors with no peer connection to shed (fd limit %s)", self.fd_limit)
            return
        for t, fd, ep in pick:
            self._shed(t, fd, ep, "out of file descriptors")

    def close(self) -> None:
        """Stop the monitors and the thread (before the context is destroyed)."""
        self._stop.set()
        self.thread.join(timeout=2)
        for sock, mon, _ in self._monitors:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
            mon.close(linger=0)
        self._monitors.clear()
