"""The daemon client's exception classes and the decoding of the daemon's replies.

Part of the client of :mod:`optiond.daemon.client` (which re-exports every public name here,
so import them from there): the errors a :class:`optiond.daemon.client.Client` call raises
(:class:`DaemonUnavailable`; :class:`DaemonError` with its subclasses :class:`RequestRefused`,
:class:`JobCancelled` and :class:`DeadlineExceeded`; :class:`JobPending`), the translation of an
error reply into them (:func:`_raise_reply_error`), and the decoding of a pricing reply
(by :mod:`optiond.daemon.wire`, the owner of the reply format) into an
:class:`optiond.models.Result` (:func:`decode_result`) or :class:`optiond.models.ImpliedVol`
(:func:`decode_iv`), a malformed one raising :class:`DaemonError`. Nothing here sends or
receives; this module imports no other part of the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .protocol import Message, ProtocolError

if TYPE_CHECKING:  # the schema and the wire decoders load with the first reply that needs them
    from ..models import ImpliedVol, Result


class DaemonUnavailable(RuntimeError):
    """No daemon answered: none running, unreachable, wrong key, no reply in time, or it died
    while working on the request."""


class DaemonLost(DaemonUnavailable):
    """The daemon took the work and then lost it: it stopped (``optiond stop``, a signal, an MPI
    rank that died and took the job down with it) or died before answering, or it cancelled the
    work because this client stopped renewing its lease. Nothing of the work came back; with
    ``fallback`` the calls price it in this process instead (``diagnostics["daemon_lost"]``)."""


def lost_work(e: "DaemonError", fallback: bool) -> DaemonLost | None:
    """The :class:`DaemonLost` that a :class:`JobCancelled` reply ``e`` means, or None: the daemon
    stopping (its ``why`` is ``stopping``) always; a lapsed lease (``why`` ``lease``: the client
    was paused longer than its lease) only where the caller falls back, since without a fall-back
    the daemon's own words say it best."""
    if not isinstance(e, JobCancelled):
        return None
    why = e.details.get("why")
    if why == "stopping":
        return DaemonLost(f"the daemon stopped before it answered ({e})")
    if why == "lease" and fallback:
        return DaemonLost(f"the daemon dropped the work ({e})")
    return None


def lost_or_raise(e: "DaemonError", fallback: bool) -> DaemonLost:
    """The :class:`DaemonLost` a caller that falls back returns for the cancelled reply ``e``
    (:func:`lost_work`). Raises ``e`` itself where it means no lost work, and the
    :class:`DaemonLost` where the caller does not fall back."""
    lost = lost_work(e, fallback)
    if lost is None:
        raise e
    if not fallback:
        raise lost from None
    return lost


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
        from ..models import InvalidInputError

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
    """A price reply as an :class:`optiond.models.Result` (``via="daemon"``; :func:`optiond.daemon.wire.decode_price`)."""
    from . import wire

    return _decoded(wire.decode_price, msg)


def decode_iv(msg: Message) -> ImpliedVol:
    """An implied-volatility reply as :class:`optiond.models.ImpliedVol` (``via="daemon"``; it
    unpacks as the earlier ``(vol, status)`` pair; :func:`optiond.daemon.wire.decode_implied_vol`)."""
    from . import wire

    return _decoded(wire.decode_implied_vol, msg)


def decode_job_result(msg: Message) -> Result | ImpliedVol:
    """A ``result_reply``: :func:`decode_iv` or :func:`decode_result` by its body."""
    from . import wire

    return _decoded(wire.decode, msg)


def _decoded(decode: Any, msg: Message) -> Any:
    try:
        return decode(msg.content, msg.buffers)
    except ProtocolError as e:
        raise DaemonError(f"malformed reply from the daemon: {e}", "ProtocolError") from None
