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
import importlib
import logging
import time
from typing import Any, Callable, Mapping

import numpy as np

from . import costs
from .daemon import limits
from .kernels import binomial_cpu, black_scholes
from .kernels import gpu as kernel_gpu
from .kernels.gpu import GPUError
from .kernels.rootfind import IV_STATUS_NAMES
from .models import (AMERICAN, GREEK_FIELDS, Batch, InvalidInputError, Method, Result, RowError, object_full,
                     pd_numeric, scalar_row, validate_columns, validate_steps)


def select_device(batch: Batch | None, method: Method) -> str:
    """The device that will price this request: ``"cpu"``, or ``"gpu:<id> <name>"``.

    The GPU serves the binomial method only, when CuPy sees a device and either the request
    asks for it (``method.device="gpu"``) or, with ``"auto"``, the calibrated dispatch
    (:func:`optiond.kernels.dispatch.choose`) finds the request big enough to pay for the
    transfers. Without a batch (a table not yet split by method) it answers for ``"gpu"`` only.
    """
    if method.name != "binomial" or method.device == "cpu":
        return "cpu"
    from .kernels import binomial_gpu, dispatch

    if not binomial_gpu.available():
        return "cpu"
    if method.device == "auto":
        if batch is None:
            return "cpu"
        n = len(batch)
        if dispatch.choose(n, method.steps_for(n), greeks=method.greeks, gpu=True) == "cpu":
            return "cpu"
    try:
        return binomial_gpu.device_label()
    except binomial_gpu.GPUError:
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
    out = None
    if res.device.startswith("gpu"):
        # GPU batch kernel or single-option pipeline (calibrated choice); any GPU failure falls
        # back to the CPU below, and the result and the log say so
        import logging

        from .kernels import binomial_gpu, binomial_pipeline_gpu, dispatch

        path = dispatch.choose(len(sub), steps[good], greeks=method.greeks, gpu=True, force_gpu=True)
        precision = method.precision
        if precision == "fp32" and int(steps[good].max()) > binomial_gpu.FP32_MAX_STEPS:
            precision = "fp64"
            res.diagnostics["precision_note"] = f"fp32 is for N <= {binomial_gpu.FP32_MAX_STEPS}; priced in fp64"
        fn = binomial_pipeline_gpu.crr_pipeline_gpu if path == "gpu-pipeline" else binomial_gpu.crr_batch_gpu
        try:
            out = fn(sub.kind, sub.style, sub.spot, sub.strike, sub.expiry, sub.rate, sub.dividend_yield,
                     sub.volatility, steps[good], greeks=method.greeks, precision=precision)
            res.diagnostics.update(path=path, precision=precision)
        except Exception as e:  # noqa: BLE001 (CUDA error, out of memory, compile error: use the CPU)
            logging.getLogger(__name__).warning("GPU binomial pricing failed (%s: %s); priced on the CPU instead",
                                                type(e).__name__, e)
            res.device = "cpu"
            res.diagnostics["gpu_fallback"] = f"{type(e).__name__}: {e}"
            out = None
    if out is None:
        out = binomial_cpu.crr_batch(sub.kind, sub.style, sub.spot, sub.strike, sub.expiry, sub.rate, sub.dividend_yield,
                                     sub.volatility, steps[good], greeks=method.greeks, check=False)
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


def _gpu_or_cpu(run: Callable[[str], Result], device: str, what: str) -> Result:
    """``run(device)``; when ``device`` is ``"gpu"`` and that fails (:class:`GPUError`), log a
    warning, ``run("cpu")`` and record ``diagnostics["gpu_fallback"]`` (the failure's cause:
    the CUDA or CuPy error itself)."""
    if device != "gpu":
        return run("cpu")
    try:
        return run("gpu")
    except GPUError as e:
        cause = e.__cause__ if e.__cause__ is not None else e
        why = f"{type(cause).__name__}: {cause}"
        logging.getLogger(__name__).warning("GPU %s failed (%s); priced on the CPU instead", what, why)
        res = run("cpu")
        res.diagnostics["gpu_fallback"] = why
        return res


#: the methods priced through their kernel front door (:mod:`optiond.kernels.mlmc`,
#: :mod:`optiond.kernels.adi`), imported on first use
_FRONT_DOORS = {"mlmc": "optiond.kernels.mlmc", "adi": "optiond.kernels.adi"}


def _price_front_door(batch: Batch, method: Method) -> Result:
    """The method's front door on the GPU when ``method.device`` asks for it (``"auto"``: a GPU
    is there and the method wants it for this batch), else on the CPU."""
    door = importlib.import_module(_FRONT_DOORS[method.name])
    device = "gpu" if door.GPU and (method.device == "gpu" or (
        method.device == "auto" and kernel_gpu.available() and door.wants_gpu(batch, method))) else "cpu"
    return _gpu_or_cpu(lambda d: door.price(batch, method, d), device, method.name.upper())


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
    if n and method.name in _FRONT_DOORS:
        res = _price_front_door(batch, method)
    elif n:
        if method.name == "binomial":
            _price_binomial(batch, method, method.steps_for(n), res)
        else:
            _price_black_scholes(batch, method, res)
    res.elapsed_s = time.perf_counter() - t0
    return res


def _row_column(columns: Mapping[str, Any], name: str, n: int) -> np.ndarray | None:
    """An optional per-row column as an object array of length n (scalars broadcast).

    Raises:
        InvalidInputError: a column of another length or shape (a problem of the whole table).
    """
    raw = columns.get(name)
    if raw is None:
        return None
    raw = np.asarray(raw, dtype=object)
    if raw.ndim == 0:
        return object_full(n, raw.item())
    if raw.shape != (n,):
        raise InvalidInputError(name, None, f"shape {raw.shape}", f"expected a scalar or {n} values")
    return raw


def _method_column(columns: Mapping[str, Any], n: int, default: Method) -> tuple[np.ndarray, list[RowError]]:
    raw = _row_column(columns, "method", n)
    names = object_full(n, default.name)
    errors: list[RowError] = []
    if raw is None:
        return names, errors
    for i, v in enumerate(raw.tolist()):
        if v is None or (isinstance(v, float) and np.isnan(v)) or str(v).strip() == "":
            continue
        try:
            names[i] = Method(name=str(v), steps=1).name
        except InvalidInputError as e:
            errors.append(RowError(i, "method", v, e.reason))
    return names, errors


def price_one_values(row: tuple, method: Method) -> tuple | None:
    """Price and Greeks ``(price, delta, gamma, theta, vega, rho)`` of one valid contract on
    the CPU, without batch set-up (the batch path's kernels, the same bits; Greeks NaN when
    ``method.greeks`` is False for the closed form), or None when the general path must handle
    it (GPU requested, another method, p outside [0, 1], American under the closed form).

    Args:
        row: ``(kind, style, spot, strike, expiry, rate, dividend_yield, volatility)`` as
            :func:`optiond.models.scalar_row` returns it (kind 1 = call, style codes of
            :mod:`optiond.models`; expiry in years; rates and volatility annualised decimals).
        method: the pricing method.
    """
    kind, style, S, K, T, r, q, sigma = row
    if method.device == "gpu":
        return None
    if method.name == "binomial":
        N = method.steps
        if not isinstance(N, int) or float(costs.tree_work_rows(N, method.greeks)) > \
                limits.DEFAULT_LIMITS.max_tree_nodes:  # over the limit: the general path marks the row
            return None
        p = binomial_cpu.crr_probability(T, r, q, sigma, N)
        if not (0.0 <= p <= 1.0):
            return None
        return binomial_cpu.crr_one(kind == 1, style == AMERICAN, S, K, T, r, q, sigma, N, method.greeks)
    if method.name != "black-scholes" or style == AMERICAN:
        return None
    g = black_scholes.bs_price_greeks(kind, S, K, T, r, q, sigma)
    return tuple(float(g[f][0]) if (method.greeks or f == "price") else np.nan for f in ("price",) + GREEK_FIELDS)


def _price_scalar(row: tuple, method: Method, t0: float) -> Result | None:
    """:func:`price_one_values` as a one-row :class:`Result` (None: use the general path)."""
    vals = price_one_values(row, method)
    if vals is None:
        return None
    res = Result(*(np.array([v]) for v in vals), status=np.array(["ok"], dtype=object),
                 error=np.array([""], dtype=object), device="cpu")
    res.elapsed_s = time.perf_counter() - t0
    return res


def _mlmc_columns(columns: Mapping[str, Any], n: int, method: Method, names: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, list[RowError]]:
    """Per-row MLMC ``eps`` and ``payoff`` (blank = the method's), checked on mlmc rows only."""
    errors: list[RowError] = []
    eps = np.broadcast_to(np.asarray(method.eps, dtype=np.float64), (n,)).copy()
    payoff = object_full(n, method.payoff)
    for col, out in (("eps", eps), ("payoff", payoff)):
        raw = _row_column(columns, col, n)
        if raw is None:
            continue
        for i, v in enumerate(raw.tolist()):
            if v is None or v == "" or (isinstance(v, float) and np.isnan(v)):
                continue
            try:
                out[i] = Method(name="mlmc", **{col: v}).__getattribute__(col) if col == "payoff" else float(v)
                if col == "eps" and not (np.isfinite(out[i]) and out[i] > 0):
                    raise InvalidInputError(col, i, v, "MLMC target error must be a finite number > 0")
            except (InvalidInputError, TypeError, ValueError) as e:
                if names[i] == "mlmc":
                    errors.append(RowError(i, col, v, getattr(e, "reason", "not a number")))
    return eps, payoff, errors


def price_table(columns: Mapping[str, Any], method: Method | None = None) -> Result:
    """Price raw columns, marking invalid rows instead of raising.

    Args:
        columns: the eight batch columns (see :func:`optiond.models.validate_columns`), plus
            optional per-row ``method`` (``binomial`` / ``black-scholes``; blank = default)
            and ``steps`` columns. Scalars broadcast.
        method: the default method and settings (steps, device, greeks).

    Returns:
        :class:`optiond.models.Result`, one row per input row, in input order; rows with an
        invalid value have ``status="error"`` and a reason naming the field and value; so have
        rows whose own work is over a work limit
        (:func:`optiond.daemon.limits.row_limit_errors`: CRR tree nodes, MLMC path steps, ADI
        grid), the same rows on the daemon and in-process.

    Raises:
        InvalidInputError: only for problems of the whole table (a missing column, columns of
            different lengths).
    """
    method = method or Method()
    t0 = time.perf_counter()
    row = scalar_row(columns)
    if row is not None:  # one contract (an Excel cell, a single request): skip the batch set-up
        m, steps_raw = columns.get("method"), columns.get("steps")
        try:
            one = method if m in (None, "") and steps_raw is None else dataclasses.replace(
                method, name=method.name if m in (None, "") else str(m), steps=method.steps if steps_raw is None else steps_raw)
        except (InvalidInputError, TypeError, ValueError):
            one = None
        res = _price_scalar(row, one, t0) if one is not None else None
        if res is not None:
            return res
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
    eps, payoff, mc_err = _mlmc_columns(columns, n, method, names)
    res = Result.empty(n, device=select_device(None, method))
    if n == 0:  # a header without rows
        res.elapsed_s = time.perf_counter() - t0
        return res
    first: dict[int, str] = {}
    for e in errors + m_err + s_err + mc_err:
        first.setdefault(e.row, e.message)
    for i, reason in limits.row_limit_errors(names, steps, eps, method):  # rows over a work limit
        first.setdefault(i, reason)
    if first:
        res.mark_error(list(first), list(first.values()))
    # rows priced together share the method (and, for MLMC, the payoff family)
    if _row_column(columns, "method", n) is None and _row_column(columns, "payoff", n) is None:
        groups = object_full(n, names[0] if n else "")  # one method, one payoff: one group
        one_group = True
    else:
        groups = np.array([f"{a}|{b}" if a == "mlmc" else a for a, b in zip(names.tolist(), payoff.tolist())],
                          dtype=object)
        one_group = bool((groups == groups[0]).all()) if n else True
    valid = np.flatnonzero(res.ok)
    if valid.size == n and one_group:  # every row valid, one group: no split, no merge
        out = price(Batch._from_valid(arrays), dataclasses.replace(method, name=names[0], steps=steps, eps=eps,
                                                                   payoff=payoff[0]))
        out.elapsed_s = time.perf_counter() - t0
        return out
    if valid.size:
        batch = Batch._from_valid({k: v[valid] for k, v in arrays.items()})
        vgroups = groups[valid]
        for g in ([vgroups[0]] if (vgroups == vgroups[0]).all() else np.unique(vgroups)):
            sel = np.flatnonzero(vgroups == g)
            sub = batch if sel.size == len(batch) else batch.take(sel)
            rows = valid[sel]
            m = dataclasses.replace(method, name=names[rows[0]], steps=steps[rows], eps=eps[rows], payoff=payoff[rows[0]])
            part = price(sub, m)
            part.scatter(res, rows)
            res.device = part.device
    res.elapsed_s = time.perf_counter() - t0
    return res


#: optional columns of an implied-volatility table: a per-row volatility bracket known to be
#: near the root (annualised decimals), a hint that shortens the tree's root find
BRACKET_COLUMNS = ("iv_lo", "iv_hi")


def implied_vol(prices: Any, batch: Batch, method: Method | None = None,
                bracket: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Implied volatility of each option from its price.

    Binomial: a bracketed (Brent) root find on the CRR tree price with the row's exercise
    style; black-scholes: on the closed form (European rows only).

    Args:
        prices: option prices, shape (n,), currency units.
        batch: the contracts and market (its ``volatility`` column is ignored).
        method: binomial (steps) or black-scholes.
        bracket: ``(lo, hi)``, shape (n,) each: a volatility bracket per row that likely holds
            the root (e.g. around the root of a nearby price); the tree's root find starts
            there, and rows whose price falls outside it are solved again on the full bracket,
            so the answer is the same as without it (within the tolerance). NaN entries take
            the full bracket. The closed form ignores it.

    Returns:
        ``(vol, status)``: float64 annualised volatilities (NaN where none) and status strings
        (``ok``, ``below-intrinsic``, ``no-solution``, ``not-converged``, ``invalid``,
        ``american-not-supported``).
    """
    method = method or Method()
    n = len(batch)
    prices = np.broadcast_to(np.asarray(prices, dtype=np.float64), (n,))
    if method.name == "binomial":
        if bracket is not None:
            # a hint only narrows the full bracket: NaN or outside it takes the full bracket's end
            lo = np.clip(np.where(np.isfinite(bracket[0]), bracket[0], binomial_cpu.MIN_IV), binomial_cpu.MIN_IV,
                         binomial_cpu.MAX_IV)
            hi = np.clip(np.where(np.isfinite(bracket[1]), bracket[1], binomial_cpu.MAX_IV), binomial_cpu.MIN_IV,
                         binomial_cpu.MAX_IV)
            narrow = (lo > binomial_cpu.MIN_IV) | (hi < binomial_cpu.MAX_IV)
            vol, status = _tree_implied_vol(prices, batch, method, lo, hi)
            redo = np.flatnonzero(narrow & np.isin(status, ("below-intrinsic", "no-solution", "invalid")))
            if redo.size:  # the root lies outside the hint: the full bracket for those rows
                sub = batch.take(redo)
                m = method if np.ndim(method.steps) == 0 else dataclasses.replace(method, steps=method.steps_for(n)[redo])
                vol[redo], status[redo] = _tree_implied_vol(prices[redo], sub, m, binomial_cpu.MIN_IV, binomial_cpu.MAX_IV)
            return vol, status
        return _tree_implied_vol(prices, batch, method, binomial_cpu.MIN_IV, binomial_cpu.MAX_IV)
    vol, code = black_scholes.bs_implied_vol(prices, batch.kind, batch.spot, batch.strike, batch.expiry, batch.rate, batch.dividend_yield)
    status = np.asarray(IV_STATUS_NAMES, dtype=object)[code]
    am = batch.style == AMERICAN
    vol[am] = np.nan
    status[am] = "american-not-supported"
    return vol, status


def _tree_implied_vol(prices: np.ndarray, batch: Batch, method: Method, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """Tree implied volatilities in the bracket ``[lo, hi]`` (scalars or per row), on the GPU
    when the dispatch chooses it (any GPU failure: the CPU)."""
    n = len(batch)
    steps = method.steps_for(n)
    code = None
    if select_device(batch, method) != "cpu":  # the whole chain together (binomial_iv_gpu)
        import logging

        from .kernels import binomial_gpu, binomial_iv_gpu
        try:
            precision = method.precision if int(steps.max(initial=0)) <= binomial_gpu.FP32_MAX_STEPS else "fp64"
            vol, code = binomial_iv_gpu.crr_implied_vol_gpu(prices, batch.kind, batch.style, batch.spot, batch.strike,
                                                            batch.expiry, batch.rate, batch.dividend_yield, steps,
                                                            lo=lo, hi=hi, xtol=method.iv_tolerance, precision=precision)
        except Exception as e:  # noqa: BLE001 (any GPU failure: solve on the CPU)
            logging.getLogger(__name__).warning("GPU implied volatility failed (%s: %s); solved on the CPU instead",
                                                type(e).__name__, e)
            code = None
    if code is None:
        vol, code = binomial_cpu.crr_implied_vol(prices, batch.kind, batch.style, batch.spot, batch.strike,
                                                 batch.expiry, batch.rate, batch.dividend_yield, steps, lo=lo, hi=hi,
                                                 xtol=method.iv_tolerance)
    return vol, np.asarray(IV_STATUS_NAMES, dtype=object)[code]


def implied_vol_table(prices: Any, columns: Mapping[str, Any], method: Method | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`implied_vol` from raw columns (``volatility`` not needed), marking invalid rows.

    Args:
        prices: option prices, a scalar or shape (n,), currency units.
        columns: the batch columns, plus optional ``iv_lo``, ``iv_hi`` (:data:`BRACKET_COLUMNS`:
            a per-row bracket hint, see :func:`implied_vol`).
        method: binomial (steps) or black-scholes.

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
    status = object_full(n, "invalid")
    bad = {e.row: e for e in errors}
    steps = method.steps_for(n) if method.name == "binomial" else None
    for r, e in bad.items():
        status[r] = f"invalid: {e.message}"
    valid = np.array([i for i in range(n) if i not in bad], dtype=np.int64)
    if valid.size:
        batch = Batch._from_valid({k: v[valid] for k, v in arrays.items()})
        m = method if steps is None else dataclasses.replace(method, steps=steps[valid])
        vol[valid], status[valid] = implied_vol(prices[valid], batch, m, bracket=_bracket(columns, n, valid))
    return vol, status


def _bracket(columns: Mapping[str, Any], n: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The optional per-row bracket hint (:data:`BRACKET_COLUMNS`) of ``rows``, or None.
    Values that are not numbers, not positive or not ordered become NaN (no hint)."""
    if not any(c in columns for c in BRACKET_COLUMNS):
        return None
    lo, hi = (np.broadcast_to(pd_numeric(columns.get(c, np.nan)), (n,))[rows].astype(np.float64)
              for c in BRACKET_COLUMNS)
    with np.errstate(invalid="ignore"):
        bad = ~((lo > 0) & (hi > lo))
    lo[bad], hi[bad] = np.nan, np.nan
    return lo, hi
