"""The pricing daemon: a ZeroMQ service around :mod:`optiond.engine`.

Sockets (all bound on ``tcp://127.0.0.1``, free ports, written to the connection file):

* ``shell`` (ROUTER): the requests, served one at a time by the thread that runs
  :meth:`Server.serve_forever` (the process's main thread under ``optiond serve``);
* ``control`` (ROUTER): ``ping``, ``status`` and ``shutdown`` on a thread of its own, so a
  daemon busy with a long batch still answers them;
* ``iopub`` (PUB): daemon state changes now, progress of long batches later;
* ``hb`` (ROUTER echo, as Jupyter's heartbeat): answered by a C-level proxy thread that needs
  no Python lock, so a client can tell a busy daemon from a dead one.

Under systemd (``Type=notify``) the daemon reports ``READY=1`` once it serves, ``WATCHDOG=1``
from the control thread, and ``STOPPING=1`` on the way out (:mod:`optiond.daemon.sdnotify`).

Operations (``msg_type`` ``<op>_request``, answered by ``<op>_reply``): ``ping``, ``status``,
``price``, ``implied_vol``, ``shutdown``. Every reply has ``status`` ``"ok"`` or ``"error"``
(with a short ``error`` text and ``ename``). Messages whose signature is missing or wrong are
dropped without a reply and counted (``auth_failures``; logged, rate-limited, as
"authentication failure"); every other bad message gets an error reply. Only a signed
``shutdown`` request (or SIGTERM/SIGINT) stops the daemon.

A request resent by a client's retry (same session and ``msg_id``) after its first copy was
answered gets the cached reply again instead of being priced twice.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import secrets
import signal
import threading
import time
from collections import Counter, OrderedDict
from typing import Any, Callable

import numpy as np
import zmq

from .. import __version__, engine
from ..models import GREEK_FIELDS, InvalidInputError, Method
from . import paths, sdnotify
from .protocol import (PROTOCOL_VERSION, AuthenticationError, Message, ProtocolError, Session, decode_column,
                       encode_array, encode_sparse_strings, send_frames, utcnow)

log = logging.getLogger("optiond.daemon")

VALUE_FIELDS = ("price",) + GREEK_FIELDS
METHOD_FIELDS = frozenset(f.name for f in dataclasses.fields(Method))
_METHOD_STRINGS = ("name", "precision", "device")
MAX_COLUMNS = 64
MAX_ERROR_CHARS = 240
REPLY_CACHE_ENTRIES = 256
REPLY_CACHE_BYTES = 64 * 1024 * 1024
POLL_MS = 100

Handler = Callable[[Message], "tuple[dict, list]"]


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


class _Counters:
    """Per-channel counters (each channel's thread owns its own; status adds them up)."""

    def __init__(self) -> None:
        self.by_op: Counter[str] = Counter()
        self.errors = 0
        self.auth_failures = 0
        self.malformed = 0
        self.replayed = 0
        self._auth_logged_at = 0.0
        self._auth_unlogged = 0

    def auth_failure(self, reason: str) -> None:
        self.auth_failures += 1
        self._auth_unlogged += 1
        now = time.monotonic()
        if now - self._auth_logged_at >= 1.0:  # at most one line a second, whatever a peer sends
            log.warning("authentication failure: dropped %d message(s) (%s; %d in all)", self._auth_unlogged, reason,
                        self.auth_failures)
            self._auth_logged_at = now
            self._auth_unlogged = 0


class Server:
    """The daemon. ``start()`` binds and writes the connection file, ``serve_forever()`` runs
    the request loop, ``close()`` cleans up; :func:`serve` does all three with signal handling.

    Args:
        connection_file: where to write the connection file (default: see
            :func:`optiond.daemon.paths.connection_file`).
        ip: the address to bind; loopback only by design.
        warmup: price a few tiny batches at start so the first real request does not pay for
            loading the compiled kernels.
        max_bytes: largest message accepted (bytes); larger ones get an error reply.
    """

    def __init__(self, connection_file: str | os.PathLike | None = None, *, ip: str = "127.0.0.1",
                 warmup: bool = True, max_bytes: int | None = None):
        if not ipaddress.ip_address(ip).is_loopback:
            raise ValueError(f"the daemon binds loopback addresses only, not {ip}")
        self.connection_file = paths.connection_file(connection_file)
        self.ip = ip
        self.warmup = warmup
        self.key = secrets.token_hex(32)
        self._session_args = {"max_bytes": max_bytes} if max_bytes else {}
        self.session = Session(self.key.encode("ascii"), **self._session_args)
        self.pid = os.getpid()
        self.started = time.time()
        self.started_iso = utcnow()
        self.info: dict[str, Any] = {}
        self._stop = threading.Event()
        self._ctx: zmq.Context | None = None
        self._threads: list[threading.Thread] = []
        self._shell_counters = _Counters()
        self._control_counters = _Counters()
        self._replies: OrderedDict[tuple[str, str], list] = OrderedDict()
        self._reply_bytes = 0
        self._methods: dict[tuple, Method] = {}
        self._default_method = Method()
        self._shell_ops: dict[str, Handler] = {"ping": self._op_ping, "status": self._op_status,
                                               "price": self._op_price, "implied_vol": self._op_implied_vol,
                                               "shutdown": self._op_shutdown}
        self._control_ops: dict[str, Handler] = {"ping": self._op_ping, "status": self._op_status,
                                                 "shutdown": self._op_shutdown}

    # ------------------------------------------------------------------ life cycle

    def start(self) -> dict[str, Any]:
        """Bind the sockets, start the heartbeat and control threads and write the connection
        file. Returns the connection info (as written, key included).

        Raises:
            RuntimeError: another daemon answers on the connection file already.
            OSError / zmq.ZMQError: the file or a socket cannot be created.
        """
        self._refuse_if_running()
        ctx = self._ctx = zmq.Context()
        url = f"tcp://{self.ip}"
        max_msg = self.session.max_bytes

        def router() -> zmq.Socket:
            s = ctx.socket(zmq.ROUTER)
            s.setsockopt(zmq.LINGER, 1000)       # let the last replies (e.g. to shutdown) go out
            s.setsockopt(zmq.MAXMSGSIZE, max_msg)  # libzmq drops a peer that sends a larger frame
            return s

        self._shell = router()
        self._control = router()
        self._iopub = ctx.socket(zmq.PUB)
        self._iopub.setsockopt(zmq.LINGER, 0)
        self._hb = ctx.socket(zmq.ROUTER)
        self._hb.setsockopt(zmq.LINGER, 0)
        self._hb.setsockopt(zmq.MAXMSGSIZE, 1024)
        ports = {name: sock.bind_to_random_port(url) for name, sock in
                 (("shell_port", self._shell), ("control_port", self._control), ("iopub_port", self._iopub),
                  ("hb_port", self._hb))}
        self._hb_ctl = ctx.socket(zmq.PAIR)
        self._hb_ctl.bind(f"inproc://optiond-hb-{id(self)}")
        hb_ctl_peer = ctx.socket(zmq.PAIR)
        hb_ctl_peer.connect(f"inproc://optiond-hb-{id(self)}")
        self._threads = [
            threading.Thread(target=self._heartbeat, args=(hb_ctl_peer,), name="optiond-heartbeat", daemon=True),
            threading.Thread(target=self._channel, args=(self._control, self._control_ops, self._control_counters,
                                                         self._watchdog_tick()),
                             name="optiond-control", daemon=True),
        ]
        for t in self._threads:
            t.start()
        self.info = {"transport": "tcp", "ip": self.ip, **ports, "signature_scheme": "hmac-sha256", "key": self.key,
                     "pid": self.pid, "version": __version__, "protocol_version": PROTOCOL_VERSION,
                     "started": self.started_iso}
        paths.write_connection_file(self.connection_file, self.info)
        self._publish("starting")
        return self.info

    def _refuse_if_running(self) -> None:
        try:
            old = paths.read_connection_file(self.connection_file)
        except (FileNotFoundError, paths.ConnectionFileError):
            return
        from .client import Client, DaemonUnavailable  # local import: client imports nothing from here

        client = Client(self.connection_file, timeout=1.0, retries=0)
        try:
            client.status()  # the control channel answers even while the other daemon prices
        except DaemonUnavailable:
            return  # a stale file left by a daemon that died: ours replaces it
        finally:
            client.close()
        raise RuntimeError(f"a daemon already runs (pid {old.get('pid')}) with connection file {self.connection_file}; "
                           f"stop it first (optiond stop)")

    def stop(self) -> None:
        """Ask the loops to finish (thread- and signal-safe); :meth:`serve_forever` returns."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def serve_forever(self) -> None:
        """Serve shell requests in the calling thread until :meth:`stop` or a ``shutdown`` request."""
        if self.warmup:
            self._warm_up()
        self._publish("idle")
        sdnotify.notify("READY=1")
        self._channel(self._shell, self._shell_ops, self._shell_counters)

    def close(self) -> None:
        """Stop the threads, close the sockets and remove the connection file (if still ours)."""
        self._stop.set()
        if self._ctx is None:
            return
        sdnotify.notify("STOPPING=1")
        if getattr(self, "_iopub", None) is not None:
            self._publish("stopping")
        if getattr(self, "_hb_ctl", None) is not None:
            try:
                self._hb_ctl.send(b"TERMINATE")
            except zmq.ZMQError:
                pass
        for t in self._threads:
            t.join(timeout=5)
        paths.remove_connection_file(self.connection_file, key=self.key)
        for name in ("_shell", "_control", "_iopub", "_hb", "_hb_ctl"):
            sock = getattr(self, name, None)
            if sock is not None:
                sock.close()
        self._ctx.term()
        self._ctx = None

    # ------------------------------------------------------------------ threads

    def _heartbeat(self, ctl: zmq.Socket) -> None:
        try:
            zmq.proxy_steerable(self._hb, self._hb, None, ctl)  # echo every frame back to its sender
        except zmq.ZMQError:
            pass
        finally:
            ctl.close()

    def _publish(self, state: str) -> None:
        try:
            self.session.send(self._iopub, "status", {"state": state, "pid": self.pid})
        except zmq.ZMQError:
            pass

    def _warm_up(self) -> None:
        t0 = time.perf_counter()
        cols = {"kind": ["put", "call"], "style": ["american", "european"], "spot": 100.0, "strike": 100.0,
                "expiry": 0.5, "rate": 0.03, "dividend_yield": 0.01, "volatility": 0.2}
        try:
            for name in ("binomial", "black-scholes"):
                m = Method(name=name, steps=16)
                res = engine.price_table(cols, m)
                engine.implied_vol_table(np.nan_to_num(res.price, nan=5.0), cols, m)
        except Exception:
            log.warning("warm-up failed (requests will still be served)", exc_info=True)
        log.info("warm-up done in %.2f s; devices %s", time.perf_counter() - t0, ", ".join(devices()))

    def _watchdog_tick(self) -> Callable[[], None] | None:
        """A function that sends systemd's ``WATCHDOG=1`` when due; None when no watchdog is set."""
        interval = sdnotify.watchdog_interval()
        if interval is None:
            return None
        last = [0.0]

        def tick() -> None:
            now = time.monotonic()
            if now - last[0] >= interval:
                sdnotify.notify("WATCHDOG=1")
                last[0] = now

        return tick

    def _channel(self, sock: zmq.Socket, ops: dict[str, Handler], counters: _Counters,
                 tick: Callable[[], None] | None = None) -> None:
        """One socket's loop: receive, authenticate, dispatch, reply. Never raises. ``tick`` is
        called at least every ``POLL_MS`` (the control loop's systemd watchdog)."""
        session = Session(self.key.encode("ascii"), self.session.session, **self._session_args)
        stop = self._stop
        sock.setsockopt(zmq.RCVTIMEO, POLL_MS)  # a blocking receive that wakes up to check ``stop``
        while not stop.is_set():
            if tick is not None:
                tick()
            try:
                msg = session.recv(sock)
            except zmq.Again:
                continue
            except AuthenticationError as e:
                counters.auth_failure(str(e))
                continue
            except ProtocolError as e:
                counters.malformed += 1
                self._reply_error(session, sock, counters, e.identities, e.header, "ProtocolError", str(e))
                continue
            except zmq.ZMQError as e:
                if stop.is_set() or e.errno == zmq.ETERM:
                    break
                log.warning("receive failed: %s", e)
                continue
            except Exception:  # never let a peer kill the loop
                counters.malformed += 1
                log.warning("unexpected error reading a message", exc_info=True)
                continue
            try:
                self._handle(session, sock, msg, ops, counters)
            except Exception:
                log.warning("unexpected error answering %s", msg.msg_type, exc_info=True)

    # ------------------------------------------------------------------ dispatch

    def _reply_error(self, session: Session, sock: zmq.Socket, counters: _Counters, identities: list[bytes],
                     parent: dict | None, ename: str, error: str, reply_type: str = "error_reply",
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
                counters: _Counters) -> None:
        msg_type = msg.msg_type
        op = msg_type[:-8] if msg_type.endswith("_request") else ""
        handler = ops.get(op)
        if handler is None:
            known = ", ".join(f"{o}_request" for o in ops)
            self._reply_error(session, sock, counters, msg.identities, msg.header, "ProtocolError",
                              f"unknown msg_type {msg_type[:40]!r}; expected one of {known}")
            return
        reply_type = op + "_reply"
        if msg.header["version"].split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
            self._reply_error(session, sock, counters, msg.identities, msg.header, "ProtocolError",
                              f"protocol version {msg.header['version'][:20]!r} not supported (daemon speaks "
                              f"{PROTOCOL_VERSION})", reply_type)
            return
        cache_key = (msg.header["session"], msg.header["msg_id"])
        cached = self._replies.get(cache_key) if op in ("price", "implied_vol") else None
        if cached is not None:  # a client's retry of a request already answered
            counters.replayed += 1
            send_frames(sock, [*msg.identities, *cached])
            return
        counters.by_op[op] += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s from %s", msg_type, msg.header["session"][:8])
        try:
            content, buffers = handler(msg)
        except InvalidInputError as e:
            value = e.value if isinstance(e.value, (int, float, bool, type(None))) else _short(e.value)
            self._reply_error(session, sock, counters, msg.identities, msg.header, "InvalidInputError", str(e),
                              reply_type, {"field": _short(e.field), "row": e.row, "value": value,
                                           "reason": _short(e.reason)})
            return
        except ProtocolError as e:
            self._reply_error(session, sock, counters, msg.identities, msg.header, "ProtocolError", str(e), reply_type)
            return
        except Exception as e:
            log.warning("%s failed: %s", msg_type, e, exc_info=log.isEnabledFor(logging.DEBUG))
            self._reply_error(session, sock, counters, msg.identities, msg.header, type(e).__name__, str(e) or repr(e),
                              reply_type)
            return
        content.setdefault("status", "ok")
        try:
            frames = session.serialize(session.header(reply_type), content, msg.header, None, buffers)
        except (TypeError, ValueError) as e:
            self._reply_error(session, sock, counters, msg.identities, msg.header, "ProtocolError",
                              f"reply could not be encoded: {e}", reply_type)
            return
        send_frames(sock, [*msg.identities, *frames])
        if op in ("price", "implied_vol"):
            self._remember(cache_key, frames)

    def _remember(self, key: tuple[str, str], frames: list) -> None:
        size = sum(len(f) if isinstance(f, bytes) else memoryview(f).nbytes for f in frames)
        if size > REPLY_CACHE_BYTES // 4:
            return
        self._replies[key] = frames
        self._reply_bytes += size
        while len(self._replies) > REPLY_CACHE_ENTRIES or self._reply_bytes > REPLY_CACHE_BYTES:
            _, old = self._replies.popitem(last=False)
            self._reply_bytes -= sum(len(f) if isinstance(f, bytes) else memoryview(f).nbytes for f in old)

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
        if all(isinstance(v, (int, float, str, bool)) or v is None for v in spec.values()):
            key = tuple(sorted(spec.items()))  # scalar fields only: Method objects are reused
            m = self._methods.get(key)
            if m is None:
                m = Method(**spec)
                if len(self._methods) > 1024:
                    self._methods.clear()
                self._methods[key] = m
            return m
        return Method(**{k: decode_column(v, buffers) for k, v in spec.items()})

    # ------------------------------------------------------------------ operations

    def _op_ping(self, msg: Message) -> tuple[dict, list]:
        return {"pid": self.pid, "version": __version__, "time": time.time()}, []

    def status(self) -> dict[str, Any]:
        """The numbers ``optiond status`` shows."""
        by_op = self._shell_counters.by_op + self._control_counters.by_op
        both = (self._shell_counters, self._control_counters)
        return {
            "version": __version__, "protocol_version": PROTOCOL_VERSION, "pid": self.pid,
            "started": self.started_iso, "uptime_s": time.time() - self.started, "devices": devices(),
            "requests_served": sum(by_op.values()), "by_op": dict(by_op),
            "errors": sum(c.errors for c in both), "auth_failures": sum(c.auth_failures for c in both),
            "malformed": sum(c.malformed for c in both), "replayed": sum(c.replayed for c in both),
            "endpoint": paths.endpoint(self.info) if self.info else None,
            "connection_file": str(self.connection_file),
        }

    def _op_status(self, msg: Message) -> tuple[dict, list]:
        return self.status(), []

    def _op_shutdown(self, msg: Message) -> tuple[dict, list]:
        log.info("shutdown requested by session %s", msg.header["session"][:8])
        self._stop.set()
        return {"pid": self.pid, "stopping": True}, []

    def _op_price(self, msg: Message) -> tuple[dict, list]:
        content, buffers = msg.content, msg.buffers
        res = engine.price_table(self._columns(content, buffers), self._method(content.get("method"), buffers))
        n = len(res)
        values = np.empty((len(VALUE_FIELDS), n))
        for i, name in enumerate(VALUE_FIELDS):
            values[i] = getattr(res, name)
        out: list = []
        reply = {"n": n, "values": encode_array(values, out),
                 "row_status": encode_sparse_strings(res.status, "ok", out),
                 "row_error": encode_sparse_strings(res.error, "", out), "device": res.device,
                 "elapsed_s": res.elapsed_s, "via": "daemon"}
        if res.diagnostics and _plain(res.diagnostics):
            reply["diagnostics"] = res.diagnostics
        return reply, out

    def _op_implied_vol(self, msg: Message) -> tuple[dict, list]:
        content, buffers = msg.content, msg.buffers
        if "prices" not in content:
            raise ProtocolError("implied_vol needs 'prices'")
        prices = decode_column(content["prices"], buffers)
        method = self._method(content.get("method"), buffers)
        t0 = time.perf_counter()
        vol, status = engine.implied_vol_table(prices, self._columns(content, buffers), method)
        out: list = []
        reply = {"n": int(vol.shape[0]), "vol": encode_array(np.asarray(vol, dtype=np.float64), out),
                 "iv_status": encode_sparse_strings(np.asarray(status, dtype=object), "ok", out),
                 "device": engine.select_device(None, method), "elapsed_s": time.perf_counter() - t0, "via": "daemon"}
        return reply, out


def serve(connection_file: str | os.PathLike | None = None, *, warmup: bool = True,
          on_ready: Callable[[Server], None] | None = None) -> int:
    """Run a daemon in this process until it is stopped. Returns an exit code (0)."""
    server = Server(connection_file, warmup=warmup)
    previous = {}
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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


__all__ = ["Server", "serve", "devices"]
