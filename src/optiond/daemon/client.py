"""Client of the pricing daemon, used by the Excel functions, the panel and the CLI.

One :class:`Client` serves any number of threads: each thread gets its own persistent DEALER
socket (ZeroMQ sockets are not thread-safe), reused across calls. Requests follow the Lazy
Pirate pattern: wait ``timeout`` seconds for the reply whose ``parent_header.msg_id`` is the
request's (other replies are discarded), then close the socket, open a fresh one and resend,
at most ``retries`` times; then :class:`DaemonUnavailable`. A daemon that cannot be reached at
all (no connection file, nothing listening, heartbeat silent) fails fast, and is remembered as
down for ``down_s`` seconds so a sheet of 10,000 cells does not wait 10,000 times.

With ``fallback=True`` (the default) the pricing calls then run the same engine function in
this process and say so in ``Result.via = "in-process"``. Errors the daemon reports are raised:
:class:`optiond.models.InvalidInputError` for invalid input of the whole table (invalid rows
are marked in the result, as in-process), :class:`DaemonError` for anything else.

Example::

    from optiond.daemon.client import get_client
    res = get_client().price_table({"kind": "put", "style": "american", "spot": 100.0,
                                    "strike": [90.0, 100.0], "expiry": 1.0, "rate": 0.05,
                                    "volatility": 0.2}, Method(steps=500))
    res.price, res.via, res.device
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import zmq

from ..models import GREEK_FIELDS, InvalidInputError, Method, Result
from . import paths
from .protocol import (Message, ProtocolError, Session, decode_array, decode_sparse_strings, encode_column, new_id,
                       send_frames)

log = logging.getLogger("optiond.client")

_SCALARS = (str, int, float, bool, type(None))
_NOBLOCK = int(zmq.NOBLOCK)
_METHOD_FIELDS = dataclasses.fields(Method)
_POLLIN = int(zmq.POLLIN)


class DaemonUnavailable(RuntimeError):
    """No daemon answered: none running, unreachable, wrong key, or no reply in time."""


class _Unsendable(TypeError):
    """A value msgpack cannot carry (e.g. a datetime in a column): price it in-process."""


class DaemonError(RuntimeError):
    """The daemon answered with an error. ``ename`` names its kind (e.g. ``ProtocolError``)."""

    def __init__(self, message: str, ename: str = "DaemonError"):
        super().__init__(message)
        self.ename = ename


@dataclasses.dataclass(frozen=True)
class _Connection:
    signature: tuple            # (path, mtime_ns, size, inode) of the file it was read from
    generation: int
    path: Path
    info: dict
    session: Session

    def endpoint(self, channel: str) -> str:
        return paths.endpoint(self.info, f"{channel}_port")


def _raise_reply_error(content: dict) -> None:
    text = str(content.get("error") or "the daemon reported an error")
    ename = str(content.get("ename") or "DaemonError")
    if ename == "InvalidInputError":
        row = content.get("row")
        e = InvalidInputError(str(content.get("field") or "input"), row if type(row) is int else None,
                              content.get("value"), str(content.get("reason") or text))
        e.args = (text,)  # the daemon's message, word for word
        raise e
    raise DaemonError(text, ename)


class Client:
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
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._generation = 0
        self._down: tuple[tuple, float, str] | None = None
        self._sockets: "weakref.WeakSet[zmq.Socket]" = weakref.WeakSet()
        self._pid = os.getpid()
        self._fixed_path = str(paths.connection_file(connection_file)) if connection_file else None
        self._env_seen: tuple[str | None, str] | None = None

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

    def _connection(self) -> _Connection:
        path = self._resolve()
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise DaemonUnavailable(f"no daemon running (no connection file {path}); start one with "
                                    f"'optiond serve --detach'") from None
        except OSError as e:
            raise DaemonUnavailable(f"cannot read connection file {path}: {e}") from None
        sig = (path, st.st_mtime_ns, st.st_size, st.st_ino)
        conn = self._conn
        if conn is not None and conn.signature == sig:
            return conn
        with self._lock:
            if self._conn is not None and self._conn.signature == sig:
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
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not sock.poll(int(remaining * 1000) + 1, _POLLIN):
                continue
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

    def _request(self, op: str, content: dict, buffers: list | tuple = (), *, timeout: float | None = None,
                 channel: str = "shell", use_down_cache: bool = True, retries: int | None = None) -> Message:
        """Send ``<op>_request``, return the matching reply (status ok).

        Raises:
            DaemonUnavailable: no reply after the retries (or the daemon is known to be down).
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
                raise DaemonUnavailable(f"{down[2]} (daemon marked down; retried after {self.down_s:g} s "
                                        f"or when its connection file changes)")
            self._down = None
        msg_id = new_id()
        reason = "no attempt made"
        for attempt in range(retries + 1):
            try:
                frames = conn.session.serialize(conn.session.header(op + "_request", msg_id), content, None, None,
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
                    break
                send_frames(sock, frames)
            msg = self._wait(sock, conn, msg_id, timeout)
            if msg is not None:
                if msg.content.get("status") != "ok":
                    _raise_reply_error(msg.content)
                return msg
            reason = f"no reply from the daemon at {conn.endpoint(channel)} within {timeout:g} s"
            self._drop_socket(channel)  # Lazy Pirate: a fresh socket for the next attempt
            if attempt == retries:
                break
            try:
                new = self._connection()
            except DaemonUnavailable as e:
                reason = str(e)
                break
            if new is not conn:
                conn = new  # the daemon restarted: retry against the new one
            elif not self._heartbeat(conn, min(timeout, 0.5)):
                reason += " and its heartbeat is silent"
                break
        self._down = (conn.signature, time.monotonic() + self.down_s, reason)
        raise DaemonUnavailable(reason)

    # ------------------------------------------------------------------ encoding

    @staticmethod
    def _encode_columns(columns: Mapping[str, Any], buffers: list) -> dict:
        out = {}
        for name, v in columns.items():
            if not isinstance(name, str):
                raise TypeError(f"column names must be strings, got {name!r}")
            if isinstance(v, _SCALARS):
                out[name] = v
                continue
            arr = np.asarray(v)
            if arr.ndim > 1:
                raise InvalidInputError(name, None, f"array of shape {arr.shape}", "columns must be one-dimensional")
            out[name] = encode_column(arr, buffers)
        return out

    @staticmethod
    def _encode_method(method: Method | None, buffers: list) -> dict | None:
        if method is None:
            return None
        if not isinstance(method, Method):
            raise TypeError(f"method must be an optiond.models.Method or None, not {type(method).__name__}")
        return {f.name: encode_column(getattr(method, f.name), buffers) for f in _METHOD_FIELDS}

    @staticmethod
    def _decode_result(msg: Message) -> Result:
        c, b = msg.content, msg.buffers
        try:
            n = c["n"]
            if type(n) is not int or n < 0:
                raise ProtocolError("bad row count")
            values = decode_array(c["values"], b)
            if values.shape != (1 + len(GREEK_FIELDS), n) or values.dtype != np.float64:
                raise ProtocolError("bad value block")
            status = decode_sparse_strings(c["row_status"], n, b)
            error = decode_sparse_strings(c["row_error"], n, b)
        except (KeyError, ProtocolError) as e:
            raise DaemonError(f"malformed reply from the daemon: {e}", "ProtocolError") from None
        diagnostics = c.get("diagnostics")
        return Result(*values, status=status, error=error, device=str(c.get("device", "unknown")), via="daemon",
                      elapsed_s=float(c.get("elapsed_s") or 0.0),
                      diagnostics=dict(diagnostics) if isinstance(diagnostics, dict) else {})

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
        """The daemon's state: ``version``, ``pid``, ``uptime_s``, ``devices`` (list of str),
        ``requests_served``, ``by_op`` ({op: count}), ``errors``, ``auth_failures``,
        ``malformed``, ``endpoint``, ``connection_file``.

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

    def price_table(self, columns: Mapping[str, Any], method: Method | None = None, *, fallback: bool = True,
                    timeout: float | None = None) -> Result:
        """Price raw columns on the daemon, as :func:`optiond.engine.price_table` does in-process.

        Args:
            columns: ``kind, style, spot, strike, expiry, rate, dividend_yield, volatility``
                (and optional per-row ``method``, ``steps``); each a scalar or a 1-D sequence
                of one length n. Units: expiry in years, rates and volatility as decimals.
            method: default method and settings (:class:`optiond.models.Method`); ``None``:
                the engine default (binomial, 1000 steps, Greeks).
            fallback: price in this process when no daemon answers (``Result.via ==
                "in-process"``); ``False``: raise :class:`DaemonUnavailable` instead.
            timeout: seconds per attempt for this call (default: the client's).

        Returns:
            :class:`optiond.models.Result` of n rows (invalid rows marked ``status="error"``),
            ``via`` ``"daemon"`` or ``"in-process"``, ``device`` what priced it.

        Raises:
            InvalidInputError: a problem of the whole table (missing column, lengths differ).
            DaemonUnavailable: no daemon answered and ``fallback`` is False.
            DaemonError: the daemon failed for another reason.
        """
        buffers: list = []
        content = {"columns": self._encode_columns(columns, buffers)}
        m = self._encode_method(method, buffers)
        if m is not None:
            content["method"] = m
        try:
            msg = self._request("price", content, buffers, timeout=timeout)
        except (DaemonUnavailable, _Unsendable) as e:
            if not fallback:
                raise
            from .. import engine

            res = engine.price_table(columns, method)
            res.via = "in-process"
            res.diagnostics["fallback_reason"] = str(e)
            return res
        return self._decode_result(msg)

    def implied_vol(self, prices: Any, columns: Mapping[str, Any], method: Method | None = None, *,
                    fallback: bool = True, timeout: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Implied volatilities on the daemon, as :func:`optiond.engine.implied_vol_table`.

        Args:
            prices: option prices (currency units), a scalar or shape (n,).
            columns: the batch columns (``volatility`` not needed), scalars broadcast.
            method: binomial (steps; American or European) or black-scholes (European).
            fallback, timeout: as :meth:`price_table`.

        Returns:
            ``(vol, status)``: float64 (n,) annualised volatility (NaN where none) and object
            (n,) status strings (``ok``, ``below-intrinsic``, ``no-solution``,
            ``not-converged``, ``american-not-supported``, ``invalid: <reason>``).

        Raises:
            InvalidInputError, DaemonUnavailable, DaemonError: as :meth:`price_table`.
        """
        buffers: list = []
        content = {"prices": self._encode_columns({"prices": prices}, buffers)["prices"],
                   "columns": self._encode_columns(columns, buffers)}
        m = self._encode_method(method, buffers)
        if m is not None:
            content["method"] = m
        try:
            msg = self._request("implied_vol", content, buffers, timeout=timeout)
        except (DaemonUnavailable, _Unsendable):
            if not fallback:
                raise
            from .. import engine

            return engine.implied_vol_table(prices, columns, method)
        c, b = msg.content, msg.buffers
        try:
            n = c["n"]
            vol = decode_array(c["vol"], b)
            status = decode_sparse_strings(c["iv_status"], n, b)
            if vol.shape != (n,):
                raise ProtocolError("bad vol shape")
        except (KeyError, TypeError, ProtocolError) as e:
            raise DaemonError(f"malformed reply from the daemon: {e}", "ProtocolError") from None
        return vol, status

    def close(self) -> None:
        """Close every socket of this client (call when no thread uses it any more)."""
        for s in list(self._sockets):
            s.close(linger=0)
        self._ctx.term()

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
            c = _shared
    return c


__all__ = ["Client", "DaemonError", "DaemonUnavailable", "get_client"]
