"""The worksheet functions on volatility surfaces the daemon keeps by name: ``SURFACE_FIT``,
``SURFACE_VOL`` and ``SURFACE_PRICE`` (the table's functions of method ``surface``).

* ``SURFACE_FIT(name, chain_range, [quote_time], [rate], [settlement])`` sends the pasted chain
  (its header row names the chain CSV's columns) to the daemon, which runs the chain job and
  the fit there and keeps the surface as the next version of ``name``
  (:meth:`optiond.daemon.client.Client.fit_surface`); the cell shows the handle,
  ``SPY#0002``.
* ``SURFACE_VOL(name, K, T)`` and ``SURFACE_PRICE(name, K, T, kind, [american])`` read it:
  ``name`` is one cell holding a handle (that version, which must be the live one: an older
  one is an error that names the live handle) or a bare name (the live version). ``K``, ``T``,
  ``kind`` and ``american`` broadcast as in the other functions, and the whole range is ONE
  daemon request; a bad row (a strike not > 0, a T outside the surface's expiries) shows its
  reason in its own cell. American prices count against the tree-node limit of the
  ``BOPM_*`` functions (:mod:`optiond.addin.checks`).

Recalculation: a cell that gives the ``SURFACE_FIT`` cell as ``name`` receives a new handle
after each refit, so Excel recalculates it; one that gives a bare name does not know of the
refit until it recalculates for another reason. These functions are never answered from the
add-in's cache (a bare name's answer changes with each refit) and never computed in Excel's
process: without a daemon the cells say that surfaces live in the daemon and how to start it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import numpy as np

from . import pricing
from .cells import _chain_fit, _read_ranges, _row_text, _single
from .table import SURFACE_PRICE_STEPS, Function


def evaluate(spec: Function, values: Sequence[Any]) -> Any:
    """The body of a surface function (``spec.method == "surface"``) on its argument values,
    as :func:`optiond.addin.functions.evaluate` returns it: the handle text (``SURFACE_FIT``),
    else a value or a list of rows of values and ``#optiond:`` texts.

    Raises:
        optiond.addin.cells._Problem: a problem of the whole call (its text becomes the result).
    """
    if spec.op == "fit":
        return _fit(spec, values)
    ref = _single(spec.args[0], values[0])
    points = dataclasses.replace(spec, args=spec.args[1:])
    shape, cols, cell_err = _read_ranges(points, values[1:])
    send = functools.partial(_send, ref)
    result, _ = pricing._compute(points, shape, cols, cell_err, functools.partial(pricing._ask, send=send))
    return result


def _send(ref: str, spec: Function, cols: dict[str, np.ndarray], n: int) -> tuple[np.ndarray, list]:
    """ONE daemon request for the n rows ``cols`` the pre-checks let through (the work limit of
    American prices): ``(values (n, 1), cell texts or None)``."""
    client = pricing._client()
    if spec.op == "vol":
        iv = client.surface_vol(ref, cols["strike"], cols["expiry"])
        values, status, error = iv.vol, iv.status, iv.error
    else:
        res = client.surface_price(ref, cols["strike"], cols["expiry"], cols["kind"], style=cols["style"],
                                   steps=SURFACE_PRICE_STEPS)
        values, status, error = res.price, res.status, res.error
    errs = [None if s == "ok" else _row_text(spec, e or s) for s, e in zip(np.asarray(status).tolist(),
                                                                          np.asarray(error).tolist())]
    return np.asarray(values, dtype=np.float64).reshape(-1, 1), errs


def _fit(spec: Function, values: Sequence[Any]) -> str:
    """SURFACE_FIT: the handle of the surface the daemon fitted, or the reason it did not."""
    name, df, market = _chain_fit(spec, values)
    try:
        reply = pricing._client().fit_surface(name, df, **market)
    except Exception as e:  # the reason, as the cell's text
        return pricing._failure_text(e, spec)
    return str(reply["handle"])


__all__ = ["evaluate"]
