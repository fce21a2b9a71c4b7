"""Dispatch: one call, :func:`price`, from a validated batch and a method to a result.

Every front end (CLI, daemon, Excel functions, panel) goes through this module, so a price is
the same whoever asks. The CPU kernels are the reference; the GPU backend plugs in behind
:func:`select_device` without changing the call.

* :func:`price` (``Batch``, ``Method``) -> ``Result``: rows the method cannot price (CRR
  probability outside [0, 1], American exercise under the closed form) are marked
  ``status="error"`` with a reason; the rest are priced.
* :func:`price_table`: the same from raw columns (CSV, Excel ranges, daemon requests), with
  optional per-row ``method`` and ``steps`` columns; invalid rows are marked, never raised.
* :func:`implied_vol`: implied volatilities from prices for a batch.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping

import numpy as np

from .kernels import binomial_cpu, black_scholes
from .kernels.rootfind import IV_STATUS_NAMES
from .models import (AMERICAN, GREEK_FIELDS, Batch, InvalidInputError, Method, Result, RowError, validate_columns,
                     validate_steps)


def select_device(batch: Batch | None, method: Method) -> str:
    """The device that will price this request. CPU only in this build of the engine."""
    return "cpu"


def _price_binomial(batch: Batch, method: Method, steps: np.ndarray, res: Result) -> None:
    bad = binomial_cpu.probability_errors(batch.expiry, batch.rate, batch.dividend_yield, batch.volatility, steps)
    if bad.size:
        p = binomial_cpu.probabilities(batch.expiry[bad], batch.rate[bad], batch.dividend_yield[bad], batch.volatility[bad], steps[bad])
        res.mark_error(bad, [binomial_cpu.probability_message(float(x)) for x in p])
    good = np.flatnonzero(res.ok)
    if good.size == 0:
        return
    sub = batch if good.size == len(batch) else batch.take(good)
    out = binomial_cpu.crr_batch(sub.kind, sub.style, sub.spot, sub.strike, sub.expiry, sub.rate, sub.dividend_yield,
                                 sub.volatility, steps[good], greeks=method.greeks)
    for k, name in enumerate(("price",) + GREEK_FIELDS):
        getattr(res, name)[good] = out[k]


def _price_black_scholes(batch: Batch, method: Method, res: Result) -> None:
    am = np.flatnonzero(batch.style == AMERICAN)
    if am.size:
        res.mark_error(am, "black-scholes prices European exercise only; use method=binomial for american")
    good = np.flatnonzero(res.ok)
    if good.size == 0:
        return
    sub = batch if good.size == len(batch) else batch.take(good)
    out = black_scholes.bs_price_greeks(sub.kind, sub.spot, sub.strike, sub.expiry, sub.rate, sub.dividend_yield, sub.volatility)
    for name in ("price",) + GREEK_FIELDS:
        getattr(res, name)[good] = out[name] if (method.greeks or name == "price") else np.nan


def price(batch: Batch, method: Method | None = None) -> Result:
    """Price a validated batch.

    Args:
        batch: n contracts with market inputs (:class:`optiond.models.Batch`).
        method: how (:class:`optiond.models.Method`); default CRR binomial, 1000 steps.

    Returns:
        :class:`optiond.models.Result` with price and Greeks (shape (n,)), per-row status
        and error, the device and the elapsed wall time.

    Raises:
        InvalidInputError: ``method.steps`` has the wrong length or an out-of-range value.
    """
    method = method or Method()
    t0 = time.perf_counter()
    n = len(batch)
    device = select_device(batch, method)
    res = Result.empty(n, device=device)
    if n:
        if method.name == "binomial":
            _price_binomial(batch, method, method.steps_for(n), res)
        else:
            _price_black_scholes(batch, method, res)
    res.elapsed_s = time.perf_counter() - t0
    return res


def _method_column(columns: Mapping[str, Any], n: int, default: Method) -> tuple[np.ndarray, list[RowError]]:
    raw = columns.get("method")
    names = np.full(n, default.name, dtype=object)
    errors: list[RowError] = []
    if raw is None:
        return names, errors
    raw = np.asarray(raw, dtype=object)
    if raw.ndim == 0:
        raw = np.full(n, raw.item(), dtype=object)
    for i, v in enumerate(raw.tolist()):
        if v is None or (isinstance(v, float) and np.isnan(v)) or str(v).strip() == "":
            continue
        try:
            names[i] = Method(name=str(v), steps=1).name
        except InvalidInputError as e:
            errors.append(RowError(i, "method", v, e.reason))
    return names, errors


def price_table(columns: Mapping[str, Any], method: Method | None = None) -> Result:
    """Price raw columns, marking invalid rows instead of raising.

    Args:
        columns: the eight batch columns (see :func:`optiond.models.validate_columns`), plus
            optional per-row ``method`` (``binomial`` / ``black-scholes``; blank = default)
            and ``steps`` columns. Scalars broadcast.
        method: the default method and settings (steps, device, greeks).

    Returns:
        :class:`optiond.models.Result`, one row per input row, in input order; rows with an
        invalid value have ``status="error"`` and a reason naming the field and value.

    Raises:
        InvalidInputError: only for problems of the whole table (a missing column, columns of
            different lengths).
    """
    method = method or Method()
    t0 = time.perf_counter()
    arrays, errors = validate_columns(columns)
    n = arrays["spot"].shape[0]
    names, m_err = _method_column(columns, n, method)
    steps_raw = columns.get("steps")
    if steps_raw is None or np.ndim(steps_raw) == 0:
        steps_raw = method.steps if steps_raw is None or (isinstance(steps_raw, float) and np.isnan(steps_raw)) else steps_raw
    else:  # blank cells take the method's default
        steps_raw = np.array([method.steps if v is None or (isinstance(v, (float, np.floating)) and np.isnan(v)) or v == "" else v
                              for v in np.asarray(steps_raw, dtype=object).tolist()], dtype=object)
    steps, s_err = validate_steps(steps_raw, n)
    s_err = [e for e in s_err if names[e.row] == "binomial"]  # steps only matter to the tree
    res = Result.empty(n, device=select_device(None, method))
    first: dict[int, RowError] = {}
    for e in errors + m_err + s_err:
        first.setdefault(e.row, e)
    if first:
        res.mark_error(list(first), [e.message for e in first.values()])
    valid = np.flatnonzero(res.ok)
    if valid.size:
        batch = Batch._from_valid({k: v[valid] for k, v in arrays.items()})
        for name in np.unique(names[valid]):
            sel = np.flatnonzero(names[valid] == name)
            sub = batch.take(sel)
            m = dataclasses.replace(method, name=name, steps=steps[valid][sel])
            part = price(sub, m)
            part.scatter(res, valid[sel])
            res.device = part.device
    res.elapsed_s = time.perf_counter() - t0
    return res


def implied_vol(prices: Any, batch: Batch, method: Method | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Implied volatility of each option from its price.

    Binomial: a bracketed (Brent) root find on the CRR tree price with the row's exercise
    style; black-scholes: on the closed form (European rows only).

    Args:
        prices: option prices, shape (n,), currency units.
        batch: the contracts and market (its ``volatility`` column is ignored).
        method: binomial (steps) or black-scholes.

    Returns:
        ``(vol, status)``: float64 annualised volatilities (NaN where none) and status strings
        (``ok``, ``below-intrinsic``, ``no-solution``, ``not-converged``, ``invalid``,
        ``american-not-supported``).
    """
    method = method or Method()
    n = len(batch)
    prices = np.broadcast_to(np.asarray(prices, dtype=np.float64), (n,))
    if method.name == "binomial":
        vol, code = binomial_cpu.crr_implied_vol(prices, batch.kind, batch.style, batch.spot, batch.strike, batch.expiry,
                                                 batch.rate, batch.dividend_yield, method.steps_for(n),
                                                 xtol=method.iv_tolerance)
        return vol, np.asarray(IV_STATUS_NAMES, dtype=object)[code]
    vol, code = black_scholes.bs_implied_vol(prices, batch.kind, batch.spot, batch.strike, batch.expiry, batch.rate, batch.dividend_yield)
    status = np.asarray(IV_STATUS_NAMES, dtype=object)[code]
    am = batch.style == AMERICAN
    vol[am] = np.nan
    status[am] = "american-not-supported"
    return vol, status


def implied_vol_table(prices: Any, columns: Mapping[str, Any], method: Method | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`implied_vol` from raw columns (``volatility`` not needed), marking invalid rows.

    Returns:
        ``(vol, status)`` as :func:`implied_vol`; a row with an invalid input gets NaN and
        status ``"invalid: <field>=<value>: <reason>"``.

    Raises:
        InvalidInputError: only for problems of the whole table.
    """
    method = method or Method()
    cols = dict(columns)
    cols.setdefault("volatility", 0.2)  # placeholder: not an input of the inversion
    arrays, errors = validate_columns(cols)
    n = arrays["spot"].shape[0]
    prices = np.asarray(prices, dtype=np.float64)
    prices = np.full(n, float(prices)) if prices.ndim == 0 else prices
    if prices.shape != (n,):
        raise InvalidInputError("price", None, f"length {prices.shape}", f"expected {n} prices")
    vol = np.full(n, np.nan)
    status = np.full(n, "invalid", dtype=object)
    bad = {e.row: e for e in errors}
    steps = method.steps_for(n) if method.name == "binomial" else None
    for r, e in bad.items():
        status[r] = f"invalid: {e.message}"
    valid = np.array([i for i in range(n) if i not in bad], dtype=np.int64)
    if valid.size:
        batch = Batch._from_valid({k: v[valid] for k, v in arrays.items()})
        m = method if steps is None else dataclasses.replace(method, steps=steps[valid])
        vol[valid], status[valid] = implied_vol(prices[valid], batch, m)
    return vol, status
