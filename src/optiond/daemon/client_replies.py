"""The daemon client's exception classes and the decoding of the daemon's replies.

Part of the client of :mod:`optiond.daemon.client` (which re-exports every public name here,
so import them from there): the errors a :class:`optiond.daemon.client.Client` call raises
(:class:`DaemonUnavailable`; :class:`DaemonError` with its subclasses :class:`RequestRefused`,
:class:`JobCancelled` and :class:`DeadlineExceeded`; :class:`JobPending`), the translation of an
error reply into them (:func:`_raise_reply_error`), and the decoding of a pricing reply into an
:class:`optiond.models.Result` (:func:`decode_result`) or ``(vol, status)`` (:func:`decode_iv`).
Nothing here sends or receives; this module imports no other part of the client.
"""

from __future__ import annotations

import numpy as np

from ..models import GREEK_FIELDS, InvalidInputError, Result
from .protocol import Message, ProtocolError, decode_array, decode_sparse_strings

_ALL_OK = {"default": "ok", "rows": [], "values": []}
_NO_ERROR = {"default": "", "rows": [], "values": []}


class DaemonUnavailable(RuntimeError):
    """No daemon answered: none running, unreachable, wrong key, no reply in time, or it died
    while working on the request."""


class _Unsendable(TypeError):
    """A value msgpack cannot carry (e.g. a datetime in a column): price it in-process."""


class DaemonError(RuntimeError):
    """The daemon answered with an error. ``ename`` names its kind (e.g. ``ProtocolError``);
    ``details`` holds the reply's other fields (e.g. ``limit``, ``job_id``)."""

    def __init__(self, message: str, ename: str = "DaemonError", details: dict | None = None):
        super().__init__(message)
        self.ename = ename
        self.details = dict(details or {})


class RequestRefused(DaemonError):
    """The daemon refused the request before doing any work: over a limit (``ename``
    ``LimitExceeded``, ``details["limit"]`` names it), draining (``DaemonDraining``), an
    unknown job (``UnknownJob``)."""


class JobCancelled(DaemonError):
    """The work was cancelled (:meth:`Client.cancel`, or the daemon stopped) before it finished."""


class DeadlineExceeded(DaemonError):
    """The work ran past its ``deadline_s``; nothing is returned."""


class JobPending(TimeoutError):
    """:meth:`Client.result` timed out; the job goes on. ``job_id``, ``state``, ``fraction``
    (0..1) and ``eta_s`` say where it stands."""

    def __init__(self, message: str, job_id: str, state: str = "running", fraction: float = 0.0,
                 eta_s: float | None = None):
        super().__init__(message)
        self.job_id, self.state, self.fraction, self.eta_s = job_id, state, fraction, eta_s


_ERRORS: dict[str, type[DaemonError]] = {
    "LimitExceeded": RequestRefused, "DaemonDraining": RequestRefused, "UnknownJob": RequestRefused,
    "DaemonStopping": RequestRefused, "JobCancelled": JobCancelled, "DeadlineExceeded": DeadlineExceeded}


def _raise_reply_error(content: dict) -> None:
    text = str(content.get("error") or "the daemon reported an error")
    ename = str(content.get("ename") or "DaemonError")
    if ename == "InvalidInputError":
        row = content.get("row")
        e = InvalidInputError(str(content.get("field") or "input"), row if type(row) is int else None,
                              content.get("value"), str(content.get("reason") or text))
        e.args = (text,)  # the daemon's message, word for word
        raise e
    details = {k: v for k, v in content.items() if k not in ("status", "ename", "error")}
    raise _ERRORS.get(ename, DaemonError)(text, ename, details)


class _DaemonDied(Exception):
    """The heartbeat stopped while waiting for a reply."""


def decode_result(msg: Message) -> Result:
    """A price reply as an :class:`optiond.models.Result` (``via="daemon"``)."""
    c, b = msg.content, msg.buffers
    try:
        n = c["n"]
        if type(n) is not int or n < 0:
            raise ProtocolError("bad row count")
        values = decode_array(c["values"], b)
        if values.dtype != np.float64 or values.shape not in ((1 + len(GREEK_FIELDS), n), (1, n)):
            raise ProtocolError("bad value block")
        if values.shape[0] == 1:  # prices only (no Greeks were asked for): the Greeks are NaN,
            nan = np.broadcast_to(np.nan, (n,))  # one read-only column for all (no 5 n doubles to fill)
            values = [values[0]] + [nan] * len(GREEK_FIELDS)
        if n == 1 and c["row_status"] == _ALL_OK and c["row_error"] == _NO_ERROR:  # one option, priced
            status, error = np.array(["ok"], dtype=object), np.array([""], dtype=object)
        else:
            status = decode_sparse_strings(c["row_status"], n, b)
            error = decode_sparse_strings(c["row_error"], n, b)
        std_error = None
        if "std_error" in c:  # MLMC prices
            std_error = decode_array(c["std_error"], b)
            if std_error.shape != (n,) or std_error.dtype != np.float64:
                raise ProtocolError("bad std_error")
    except (KeyError, ProtocolError) as e:
        raise DaemonError(f"malformed reply from the daemon: {e}", "ProtocolError") from None
    diagnostics = c.get("diagnostics")
    diagnostics = dict(diagnostics) if isinstance(diagnostics, dict) else {}
    for k in ("job_id", "cached"):
        if k in c:
            diagnostics[k] = c[k]
    return Result(*values, status=status, error=error, device=str(c.get("device", "unknown")), via="daemon",
                  elapsed_s=float(c.get("elapsed_s") or 0.0), diagnostics=diagnostics, std_error=std_error)


def decode_iv(msg: Message) -> tuple[np.ndarray, np.ndarray]:
    """An implied-volatility reply as ``(vol, status)``."""
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
