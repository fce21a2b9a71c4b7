"""The wire format of the daemon's result replies: the one place where a price result
(:class:`optiond.models.Result`) or an implied-volatility result
(:class:`optiond.models.ImpliedVol`) becomes a reply body and its buffers, and where a reply
body becomes one again.

The server's pricing pipeline (:mod:`optiond.daemon.pricing`: inline, coalesced, the short
path, a job's final reply), the pool's chunks (:mod:`optiond.daemon.pool`), the job manager
(:mod:`optiond.daemon.jobs`) and the client (:mod:`optiond.daemon.client`) all use it; no other
module builds or reads these bodies. The envelope (header, signature, buffers) is
:mod:`optiond.daemon.protocol`'s; the ``chain`` reply is :mod:`optiond.daemon.chain_op`'s. The
``surface_vol`` and ``surface_price`` replies are these bodies with the surface's ``handle``
(:mod:`optiond.daemon.surface_op`).

A ``price_reply`` (and a ``result_reply`` of a price job)::

    {"n": int,
     "values": array (7, n) float64: price, delta, gamma, theta, vega, rho, dividend_rho
               (VALUE_FIELDS), or (1, n): the prices alone when no Greeks were asked for
               (prices_only); one option always (7, 1). A daemon from before dividend_rho sends
               (6, n): read with a NaN dividend_rho,
     "row_status": sparse strings, default "ok",  "row_error": sparse strings, default "",
     "std_error": array (n,) float64 (methods with a standard error: MLMC),
     "device": str, "elapsed_s": float, "via": "daemon", "diagnostics": map (when any),
     "job_id": str, "cached": true (when answered from the cache), "status": "ok"}

An ``implied_vol_reply`` (and a ``result_reply`` of an implied-vol job)::

    {"n": int, "vol": array (n,) float64,
     "iv_status": sparse strings, default "ok": each row's status followed by ": <reason>"
                  where a reason is known (the form earlier clients read),
     "iv_error": sparse strings, default "": the reason alone,
     "device": str (what solved it), "elapsed_s": float, "via": "daemon", "job_id", "cached", "status"}

Sparse strings are :func:`optiond.daemon.protocol.encode_sparse_rows`: only the rows that
differ from the default travel.
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

import numpy as np

from ..models import GREEK_FIELDS, ImpliedVol, Result
from .protocol import ProtocolError, decode_array, decode_sparse_strings, encode_array, encode_sparse_rows

#: the rows of a reply's value block
VALUE_FIELDS = ("price",) + GREEK_FIELDS
#: a sparse string column with every row at its default ("ok" statuses, no errors)
ALL_OK = {"default": "ok", "rows": [], "values": []}
NO_ERRORS = {"default": "", "rows": [], "values": []}
#: one option's price and Greeks as the reply's value block (7 x 1 float64, little-endian)
ONE_VALUES = {"__nd__": ["<f8", [len(VALUE_FIELDS), 1], 0]}
#: the buffer of :data:`ONE_VALUES` from the seven numbers
pack_one = struct.Struct(f"<{len(VALUE_FIELDS)}d").pack
#: the reply fields a decoded result keeps in its diagnostics (``handle``: the version of the
#: named surface that answered a surface request, :mod:`optiond.daemon.surface_op`)
_REPLY_NOTES = ("job_id", "cached", "handle")


def plain(obj: Any, depth: int = 0) -> bool:
    """Whether msgpack can carry ``obj`` as is (diagnostics are forwarded only then)."""
    if depth > 8:
        return False
    if obj is None or isinstance(obj, (str, int, float, bool, bytes, np.generic)):
        return True
    if isinstance(obj, (list, tuple)):
        return all(plain(v, depth + 1) for v in obj)
    if isinstance(obj, dict):
        return all(isinstance(k, str) and plain(v, depth + 1) for k, v in obj.items())
    return False


def prices_only(method: Any, columns: dict) -> bool:
    """Whether a request's Greeks are all NaN by construction (no Greeks asked for, a method
    that then computes none, no per-row methods): its chunks send back, and its reply carries,
    the ``(1, n)`` price row alone."""
    return (not method.greeks and method.name in ("binomial", "black-scholes", "mlmc")
            and columns.get("method") is None)


def sparse(arr: np.ndarray, default: str) -> tuple[np.ndarray, list]:
    """A per-row string column as ``(rows, values)``: the rows (int64, ascending) whose value is
    not ``default``, and those values. A chunk's "ok" statuses then cost nothing to send
    between ranks or to gather at rank 0."""
    rows = np.flatnonzero(arr != default)
    return rows, arr[rows].tolist()


def value_block(res: Result, prices_only_: bool) -> np.ndarray:
    """A result's ``(7, n)`` price and Greeks, or its ``(1, n)`` prices alone."""
    n = len(res)
    if prices_only_:
        return res.price.reshape(1, n)
    values = np.empty((len(VALUE_FIELDS), n))
    for i, name in enumerate(VALUE_FIELDS):
        values[i] = getattr(res, name)
    return values


def _one(value: Any, default: str, all_default: dict) -> dict:
    return all_default if value == default else {"default": default, "rows": [0], "values": [str(value)]}


# ---------------------------------------------------------------------------- price replies


def one_option_body(device: str, elapsed_s: float, status: str = "ok", error: str = "",
                    diagnostics: dict | None = None, values: dict = ONE_VALUES) -> dict:
    """The body of a one-option price reply; ``values`` the spec of its (7, 1) float64 block,
    by default the message's first buffer: ``pack_one(price, delta, gamma, theta, vega, rho,
    dividend_rho)``."""
    content = {"n": 1, "values": values,
               "row_status": ALL_OK if status == "ok" else _one(status, "ok", ALL_OK),
               "row_error": NO_ERRORS if not error else _one(error, "", NO_ERRORS),
               "device": device, "elapsed_s": elapsed_s, "via": "daemon"}
    if diagnostics is not None:
        content["diagnostics"] = diagnostics
    return content


def price_body(n: int, values: np.ndarray, status: tuple[Any, Sequence], error: tuple[Any, Sequence], device: str,
               elapsed_s: float, buffers: list, *, std_error: np.ndarray | None = None,
               diagnostics: dict | None = None) -> dict:
    """The body of a price reply from its parts: ``values`` the (7, n) or (1, n) block,
    ``status`` and ``error`` as sparse ``(rows, values)`` pairs (:func:`sparse`); the buffers
    are appended to ``buffers``."""
    content = {"n": n, "values": encode_array(values, buffers),
               "row_status": encode_sparse_rows(*status, "ok", buffers),
               "row_error": encode_sparse_rows(*error, "", buffers), "device": device, "elapsed_s": elapsed_s,
               "via": "daemon"}
    if diagnostics is not None:
        content["diagnostics"] = diagnostics
    if std_error is not None:
        content["std_error"] = encode_array(np.asarray(std_error, dtype=np.float64), buffers)
    return content


def result_body(res: Result, buffers: list, prices_only_: bool = False) -> dict:
    """The body of a price reply of ``res`` (its diagnostics travel when msgpack can carry
    them); one option always carries its (7, 1) block."""
    diagnostics = res.diagnostics if res.diagnostics and plain(res.diagnostics) else None
    std_error = getattr(res, "std_error", None)
    if len(res) == 1:
        values = encode_array(np.array([[getattr(res, name)[0]] for name in VALUE_FIELDS]), buffers)
        content = one_option_body(res.device, res.elapsed_s, res.status[0], res.error[0], diagnostics, values)
        if std_error is not None:
            content["std_error"] = encode_array(np.asarray(std_error, dtype=np.float64), buffers)
        return content
    return price_body(len(res), value_block(res, prices_only_), sparse(res.status, "ok"), sparse(res.error, ""),
                      res.device, res.elapsed_s, buffers, std_error=std_error, diagnostics=diagnostics)


def decode_price(content: dict, buffers: Sequence) -> Result:
    """A price reply body as a :class:`optiond.models.Result` (``via="daemon"``; the reply's
    ``job_id`` and ``cached`` in its diagnostics).

    Raises:
        ProtocolError: a malformed body.
    """
    c, b = content, buffers
    try:
        n = c["n"]
        if type(n) is not int or n < 0:
            raise ProtocolError("bad row count")
        values = decode_array(c["values"], b)
        if values.dtype != np.float64 or values.shape not in ((len(VALUE_FIELDS), n), (len(VALUE_FIELDS) - 1, n),
                                                               (1, n)):
            raise ProtocolError("bad value block")
        if values.shape[0] == len(VALUE_FIELDS) - 1:  # a daemon from before dividend_rho: NaN there
            values = list(values) + [np.broadcast_to(np.nan, (n,))]
        elif values.shape[0] == 1:  # prices only (no Greeks were asked for): the Greeks are NaN,
            nan = np.broadcast_to(np.nan, (n,))  # one read-only column for all (no 5 n doubles to fill)
            values = [values[0]] + [nan] * len(GREEK_FIELDS)
        if n == 1 and c["row_status"] == ALL_OK and c["row_error"] == NO_ERRORS:  # one option, priced
            status, error = np.array(["ok"], dtype=object), np.array([""], dtype=object)
        else:
            status = decode_sparse_strings(c["row_status"], n, b)
            error = decode_sparse_strings(c["row_error"], n, b)
        std_error = None
        if "std_error" in c:  # MLMC prices
            std_error = decode_array(c["std_error"], b)
            if std_error.shape != (n,) or std_error.dtype != np.float64:
                raise ProtocolError("bad std_error")
    except KeyError as e:
        raise ProtocolError(f"missing {e}") from None
    return Result(*values, status=status, error=error, device=str(c.get("device", "unknown")), via="daemon",
                  elapsed_s=float(c.get("elapsed_s") or 0.0), diagnostics=_notes(c), std_error=std_error)


def _notes(c: dict) -> dict:
    diagnostics = c.get("diagnostics")
    diagnostics = dict(diagnostics) if isinstance(diagnostics, dict) else {}
    for k in _REPLY_NOTES:
        if k in c:
            diagnostics[k] = c[k]
    return diagnostics


# ---------------------------------------------------------------------------- implied-vol replies


def iv_body(n: int, vol: np.ndarray, status: tuple[Any, Sequence], error: tuple[Any, Sequence], device: str,
            elapsed_s: float, buffers: list) -> dict:
    """The body of an implied-vol reply from its parts: ``status`` and ``error`` as sparse
    ``(rows, values)`` pairs (:func:`sparse`)."""
    text = dict(zip(np.asarray(status[0]).tolist(), status[1]))
    for r, reason in zip(np.asarray(error[0]).tolist(), error[1]):
        text[r] = f"{text.get(r, 'ok')}: {reason}"
    rows = sorted(text)
    return {"n": n, "vol": encode_array(np.asarray(vol, dtype=np.float64), buffers),
            "iv_status": encode_sparse_rows(rows, [text[r] for r in rows], "ok", buffers),
            "iv_error": encode_sparse_rows(*error, "", buffers), "device": device, "elapsed_s": elapsed_s,
            "via": "daemon"}


def implied_vol_body(iv: ImpliedVol, elapsed_s: float, buffers: list) -> dict:
    """The body of an implied-vol reply of ``iv`` (its ``device`` says what solved it)."""
    return iv_body(len(iv), iv.vol, sparse(iv.status, "ok"), sparse(iv.error, ""), iv.device, elapsed_s, buffers)


def decode_implied_vol(content: dict, buffers: Sequence) -> ImpliedVol:
    """An implied-vol reply body as :class:`optiond.models.ImpliedVol` (``via="daemon"``).

    Raises:
        ProtocolError: a malformed body.
    """
    c, b = content, buffers
    try:
        n = c["n"]
        vol = decode_array(c["vol"], b)
        text = decode_sparse_strings(c["iv_status"], n, b)
        if vol.shape != (n,):
            raise ProtocolError("bad vol shape")
        if "iv_error" not in c:  # a daemon that sends the status text alone
            iv = ImpliedVol.from_status_text(vol, text, str(c.get("device", "unknown")))
        else:
            error = decode_sparse_strings(c["iv_error"], n, b)
            status = text.copy()
            for i in np.flatnonzero(error != "").tolist():
                suffix = f": {error[i]}"
                if str(text[i]).endswith(suffix):
                    status[i] = text[i][: -len(suffix)]
            iv = ImpliedVol(vol, status, error, device=str(c.get("device", "unknown")))
    except (KeyError, TypeError) as e:
        raise ProtocolError(f"malformed implied-vol reply: {e}") from None
    iv.via = "daemon"
    iv.diagnostics = _notes(c)
    return iv


def decode(content: dict, buffers: Sequence) -> Result | ImpliedVol:
    """A ``result_reply`` body (a job's): :func:`decode_implied_vol` or :func:`decode_price`."""
    return decode_implied_vol(content, buffers) if "vol" in content else decode_price(content, buffers)


__all__ = ["VALUE_FIELDS", "ALL_OK", "NO_ERRORS", "ONE_VALUES", "pack_one", "plain", "prices_only", "sparse",
           "value_block", "one_option_body", "price_body", "result_body", "decode_price",
           "iv_body", "implied_vol_body", "decode_implied_vol", "decode"]
