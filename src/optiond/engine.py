"""Dispatch: one call, :func:`price`, from a validated batch and a method to a result.

Every front end (CLI, daemon, Excel functions, panel) goes through this module, so a price is
the same whoever asks. Each method is a front door in ``kernels/<method>`` (:data:`FRONT_DOORS`:
a :class:`~optiond.models.Result` or :class:`~optiond.models.ImpliedVol` back, its CPU path the
gold reference); this module picks the device once (:func:`_wants_gpu`) and falls back from a
failed GPU to the CPU in one place (:func:`_gpu_or_cpu`).

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
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from . import costs
from . import limits
from .kernels import black_scholes
from .kernels import gpu as gpus
from .kernels.binomial import cpu as binomial_cpu
from .columns import unknown_columns
from .models import (AMERICAN, AUTO, CONTRACT_FIELDS, DIVIDEND_FIELDS, EUROPEAN, GREEK_FIELDS, HESTON_FIELDS,
                     HESTON_RENAMED, MARKET_FIELDS, Batch, ImpliedVol, InvalidInputError, Method, Result, RowError,
                     auto_methods, object_full, pd_numeric, scalar_row, validate_columns, validate_steps)

R = TypeVar("R", Result, ImpliedVol)

#: the method table: each method's front door (``kernels/<method>``, imported on first use),
#: with ``GPU``, ``wants_gpu(batch, method)``, ``price(batch, method, device) -> Result`` and,
#: for the methods that invert prices, ``implied_vol(prices, batch, method, device, lo, hi)
#: -> ImpliedVol``; a GPU failure is raised as :class:`optiond.kernels.gpu.GPUError`
FRONT_DOORS = {"binomial": "optiond.kernels.binomial", "black-scholes": "optiond.kernels.black_scholes",
               "mlmc": "optiond.kernels.mlmc", "adi": "optiond.kernels.adi", "spectral": "optiond.kernels.spectral",
               "heston": "optiond.kernels.heston"}

#: methods that take cash-dividend rows (the spectral front door sends them to the tree, and so
#: does ``auto``)
CASH_DIVIDEND_METHODS = ("binomial", "spectral", AUTO)
#: methods with an implied-volatility inversion of their own (the rest invert the closed form)
IV_METHODS = ("binomial", "spectral")


def front_door(name: str):
    """The front door module of method ``name`` (a :data:`optiond.models.METHODS` name)."""
    return importlib.import_module(FRONT_DOORS[name])


def _wants_gpu(batch: Batch | None, method: Method) -> bool:
    """Whether ``method`` runs on the GPU: the method has a GPU path, a GPU is here, and the
    request asks for it (``device="gpu"``) or, with ``"auto"``, the front door finds this batch
    worth it (binomial: the calibrated dispatch; MLMC: always; ADI: from 8 options). A request
    for ``"gpu"`` is tried even where no GPU answers (unless ``OPTIOND_DISABLE_GPU`` hides it),
    so that the result's ``gpu_fallback`` says why it ran on the CPU. Without a batch (a table not yet split by method) it answers for
    ``"gpu"`` only; so it does for ``auto``, whose rows each go through their own method."""
    if method.name == AUTO:
        return method.device == "gpu" and not gpus.disabled()
    if method.device == "cpu" or not front_door(method.name).GPU:
        return False
    if method.device == "gpu":  # asked for: tried (unless switched off), a failure logged and noted
        return not gpus.disabled()
    return batch is not None and gpus.available() and bool(front_door(method.name).wants_gpu(batch, method))


def select_device(batch: Batch | None, method: Method) -> str:
    """The device that will price this request: ``"cpu"``, or ``"gpu:<id> <name>"`` (see
    :func:`_wants_gpu`; the result's own ``device`` says where it ran, after any fallback)."""
    if not _wants_gpu(batch, method):
        return "cpu"
    try:
        return gpus.device_label()
    except gpus.GPUError:
        return "cpu"


def _gpu_or_cpu(run: Callable[[str], R], device: str, what: str) -> R:
    """The one GPU-with-CPU-fallback: ``run("gpu")`` when ``device`` is not ``"cpu"``; on a GPU
    failure (:class:`optiond.kernels.gpu.GPUError`) a warning in the log, then ``run("cpu")``
    with ``diagnostics["gpu_fallback"]`` naming the failure's cause (the CUDA or CuPy error
    itself). ``what`` names the work in the log line (``"binomial pricing"``, ``"implied
    volatility"``)."""
    if device == "cpu":
        return run("cpu")
    try:
        return run("gpu")
    except gpus.GPUError as e:
        cause = e.__cause__ if e.__cause__ is not None else e
        why = f"{type(cause).__name__}: {cause}"
        done = "solved" if what == "implied volatility" else "priced"
        logging.getLogger(__name__).warning("GPU %s failed (%s); %s on the CPU instead", what, why, done)
        out = run("cpu")
        out.diagnostics["gpu_fallback"] = why
        return out


#: the columns :func:`price_table` reads; any other is refused (:func:`optiond.columns.unknown_columns`)
TABLE_COLUMNS = frozenset(CONTRACT_FIELDS + MARKET_FIELDS + ("method", "steps", "eps", "payoff") + HESTON_FIELDS
                          + tuple(HESTON_RENAMED) + DIVIDEND_FIELDS)


def check_table_columns(columns: Mapping[str, Any]) -> None:
    """Refuse a table with a column :func:`price_table` does not read (it would be dropped
    without a word: a ``dividends`` text column priced as if there were none).

    Raises:
        InvalidInputError: naming the first unknown column, listing them all and the columns read.
    """
    unknown = unknown_columns(columns, TABLE_COLUMNS)
    if unknown:
        hint = ("; cash dividends go as dividend_times and dividend_amounts (optiond.pricer.price_portfolio "
                "reads a 'dividends' text column)" if "dividends" in unknown else "")
        raise InvalidInputError(unknown[0], None, None,
                                f"unknown column{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))}, "
                                f"not read (the columns read: {', '.join(sorted(TABLE_COLUMNS))}){hint}")


#: a row with cash dividends and another method than the tree
CASH_DIVIDENDS_BINOMIAL = ("dividend_times: cash dividends are priced by the binomial method only "
                           "(the spot model on the CRR tree; method=spectral sends them there)")


#: a row with cash dividends priced with ``extrapolate`` (BBSR): refused, as documented
EXTRAPOLATE_CASH_DIVIDENDS = ("extrapolate=True: the extrapolated tree (BBSR) does not take cash dividends (its "
                              "smoothing does not cancel their rounding to the tree's levels); price these rows "
                              "without extrapolate")


def _refuse_extrapolated_cash(batch: Batch, method: Method) -> None:
    """Raise InvalidInputError (field ``extrapolate``) when ``method.extrapolate`` meets a
    row of ``batch`` with cash dividends."""
    if method.extrapolate and _cash_rows(batch.columns(), len(batch)).any():
        raise InvalidInputError("extrapolate", None, True, EXTRAPOLATE_CASH_DIVIDENDS.split(": ", 1)[1])


def _cash_rows(arrays: Mapping[str, np.ndarray], n: int) -> np.ndarray:
    """Rows whose validated columns carry a cash dividend (any ex-date), shape (n,), bool."""
    t = arrays.get("dividend_times")
    return np.zeros(n, dtype=bool) if t is None else (~np.isnan(t)).any(axis=1)


def _auto_groups(batch: Batch, method: Method) -> list[tuple[np.ndarray, Method]]:
    """The rows of each method ``auto`` gives a batch (:func:`optiond.models.auto_methods`),
    each with its method (``method`` renamed, its per-row steps taken for those rows)."""
    n = len(batch)
    names = auto_methods(batch.style, _cash_rows(batch.columns(), n))
    out = []
    for name in ("spectral", "binomial", "black-scholes"):
        rows = np.flatnonzero(names == name)
        if rows.size:
            steps = method.steps if np.ndim(method.steps) == 0 else np.asarray(method.steps)[rows]
            out.append((rows, dataclasses.replace(method, name=name, steps=steps)))
    return out


def row_methods(columns: Mapping[str, Any], method: Method | None = None) -> np.ndarray:
    """What prices each row of a table, as :func:`price_table` (and :func:`implied_vol_table`)
    price it: the row's method (its ``method`` cell, else ``method.name``), ``auto`` resolved
    (:func:`optiond.models.auto_methods`), and the spectral front door's own routing applied
    (:func:`optiond.kernels.spectral.route_rows`: its closed-form rows say ``black-scholes``, its
    tree rows ``binomial``).

    Args:
        columns: the table's columns as :func:`price_table` takes them; with ``volatility``
            the spectral door's drift-dominated rows say ``binomial`` (without it, for an
            implied volatility, the rows are reported by their rates alone).
        method: the default method.

    Returns:
        object array (n,): a name of :data:`optiond.models.METHODS` other than ``auto`` per row,
        ``""`` where a row's inputs or method cell are invalid (priced by nobody).

    Raises:
        InvalidInputError: only for problems of the whole table, as :func:`price_table`.
    """
    method = method or Method()
    cols = dict(columns)
    has_vol = "volatility" in cols
    cols.setdefault("volatility", 0.2)  # a placeholder: validation needs one
    arrays, errors = validate_columns(cols)
    n = arrays["spot"].shape[0]
    names, m_err = _method_column(columns, n, method)
    cash = _cash_rows(arrays, n)
    names = _resolve_auto(names, arrays["style"], cash)
    spectral = np.flatnonzero(names == "spectral")
    if spectral.size:
        door = front_door("spectral")
        where = door.route_rows(arrays["kind"][spectral], arrays["style"][spectral], arrays["rate"][spectral],
                                arrays["dividend_yield"][spectral], cash[spectral],
                                arrays["volatility"][spectral] if has_vol else None, arrays["expiry"][spectral])
        names[spectral] = np.asarray(door.ROUTE_METHODS, dtype=object)[where]
    for e in errors + m_err:
        names[e.row] = ""
    return names


def _resolve_auto(names: np.ndarray, style: np.ndarray, cash: np.ndarray) -> np.ndarray:
    """``names`` with each ``auto`` replaced by the method :func:`optiond.models.auto_methods`
    gives its row (a copy where any is)."""
    auto = names == AUTO
    if not auto.any():
        return names
    names = names.copy()
    names[auto] = auto_methods(style, cash)[auto]
    return names


def price(batch: Batch, method: Method | None = None) -> Result:
    """Price a validated batch through the method's front door (:data:`FRONT_DOORS`).

    Args:
        batch: n contracts with market inputs (:class:`optiond.models.Batch`).
        method: how (:class:`optiond.models.Method`); default CRR binomial, 1000 steps.
            ``auto``: each row by the method :func:`optiond.models.auto_methods` gives it
            (:func:`row_methods` says which priced it), the same numbers as that method alone.

    Returns:
        :class:`optiond.models.Result` with price and Greeks (shape (n,)), per-row status
        and error, the device and the elapsed wall time.

    Raises:
        InvalidInputError: ``method.steps`` has the wrong length or an out-of-range value, or
            cash dividends with another method than ``binomial`` or with ``method.extrapolate``.
    """
    method = method or Method()
    t0 = time.perf_counter()
    n = len(batch)
    if method.name not in CASH_DIVIDEND_METHODS and _cash_rows(batch.columns(), n).any():
        raise InvalidInputError("dividend_times", None, None, CASH_DIVIDENDS_BINOMIAL.split(": ", 1)[1])
    _refuse_extrapolated_cash(batch, method)
    if method.name == AUTO and n:
        res = Result.empty(n)
        for rows, m in _auto_groups(batch, method):
            price(batch if rows.size == n else batch.take(rows), m).scatter(res, rows)
    elif n:
        door = front_door(method.name)
        device = "gpu" if _wants_gpu(batch, method) else "cpu"
        what = "binomial pricing" if method.name == "binomial" else method.name.upper()
        res = _gpu_or_cpu(lambda d: door.price(batch, method, d), device, what)
    else:
        res = Result.empty(0, device=select_device(batch, method))
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
    it (GPU requested, another method, the extrapolated tree (BBSR), p outside [0, 1],
    American under the closed form).

    Args:
        row: ``(kind, style, spot, strike, expiry, rate, dividend_yield, volatility)`` as
            :func:`optiond.models.scalar_row` returns it (kind 1 = call, style codes of
            :mod:`optiond.models`; expiry in years; rates and volatility annualised decimals).
        method: the pricing method.
    """
    kind, style, S, K, T, r, q, sigma = row
    if method.device == "gpu" or method.extrapolate:  # BBSR: crr_one has no smoothed tree
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
    g = black_scholes.bs_one(kind == 1, S, K, T, r, q, sigma)
    return g if method.greeks else (g[0],) + (np.nan,) * len(GREEK_FIELDS)


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
            optional per-row ``method`` (a name of :data:`optiond.models.METHODS`, ``auto``
            among them; blank = the default) and ``steps`` columns. Scalars broadcast.
        method: the default method and settings (steps, device, greeks).

    Returns:
        :class:`optiond.models.Result`, one row per input row, in input order; rows with an
        invalid value have ``status="error"`` and a reason naming the field and value; so have
        rows whose own work is over a work limit
        (:func:`optiond.limits.row_limit_errors`: CRR tree nodes, MLMC path steps, ADI
        grid), the same rows on the daemon and in-process, and rows with cash dividends under
        ``method.extrapolate`` (:data:`EXTRAPOLATE_CASH_DIVIDENDS`).

    Raises:
        InvalidInputError: only for problems of the whole table (a missing column, a column
            it does not read (:func:`check_table_columns`), columns of different lengths).
    """
    method = method or Method()
    t0 = time.perf_counter()
    check_table_columns(columns)
    row = scalar_row(columns)
    if row is not None:  # one contract (an Excel cell, a single request): skip the batch set-up
        m, steps_raw = columns.get("method"), columns.get("steps")
        try:
            one = method if m in (None, "") and steps_raw is None else dataclasses.replace(
                method, name=method.name if m in (None, "") else str(m), steps=method.steps if steps_raw is None else steps_raw)
        except (InvalidInputError, TypeError, ValueError):
            one = None
        if one is not None and one.name == AUTO:  # no cash dividends on this path
            one = dataclasses.replace(one, name="black-scholes" if row[1] == EUROPEAN else "spectral")
        res = _price_scalar(row, one, t0) if one is not None else None
        if res is not None:
            return res
    arrays, errors = validate_columns(columns)
    n = arrays["spot"].shape[0]
    names, m_err = _method_column(columns, n, method)
    names = _resolve_auto(names, arrays["style"], _cash_rows(arrays, n))
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
    for i in np.flatnonzero(_cash_rows(arrays, n) & ~np.isin(names, CASH_DIVIDEND_METHODS)).tolist():
        first.setdefault(i, CASH_DIVIDENDS_BINOMIAL)
    if method.extrapolate:
        for i in np.flatnonzero(_cash_rows(arrays, n)).tolist():
            first.setdefault(i, EXTRAPOLATE_CASH_DIVIDENDS)
    if first:
        res.mark_error(list(first), list(first.values()))
    # rows priced together share the method (and, for MLMC, the payoff family)
    if _row_column(columns, "method", n) is None and _row_column(columns, "payoff", n) is None and method.name != AUTO:
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
    res.elapsed_s = time.perf_counter() - t0
    return res


#: optional columns of an implied-volatility table: a per-row volatility bracket known to be
#: near the root (annualised decimals), a hint that shortens the tree's root find
BRACKET_COLUMNS = ("iv_lo", "iv_hi")


def implied_vol(prices: Any, batch: Batch, method: Method | None = None,
                bracket: tuple[np.ndarray, np.ndarray] | None = None) -> ImpliedVol:
    """Implied volatility of each option from its price.

    Binomial: a bracketed (Brent) root find on the CRR tree price with the row's exercise
    style; spectral: a safeguarded secant search on the ALO price (:mod:`optiond.kernels.spectral`);
    black-scholes: on the closed form (European rows only); auto: each row by the method
    :func:`optiond.models.auto_methods` gives it.

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
        :class:`optiond.models.ImpliedVol`: float64 annualised volatilities (NaN where none),
        a status per row (``ok``, ``below-intrinsic``, ``no-solution``, ``not-converged``,
        ``invalid``, ``american-not-supported``) and the device that solved them. It unpacks
        as the earlier ``(vol, status)`` pair.

    Raises:
        InvalidInputError: cash dividends with ``method.extrapolate`` (field ``extrapolate``).
    """
    method = method or Method()
    n = len(batch)
    _refuse_extrapolated_cash(batch, method)
    prices = np.broadcast_to(np.asarray(prices, dtype=np.float64), (n,))
    if method.name == AUTO:  # each row by its own method, on its own rows' prices and bracket
        iv = ImpliedVol.empty(n, status="ok")
        for rows, m in _auto_groups(batch, method):
            hint = None if bracket is None else tuple(np.broadcast_to(b, (n,))[rows] for b in bracket)
            implied_vol(prices[rows], batch if rows.size == n else batch.take(rows), m, hint).scatter(iv, rows)
        return iv
    if method.name not in IV_METHODS:  # the closed form (the other methods have no inversion of their own)
        return _implied_vol(prices, batch, method, black_scholes.MIN_IV, black_scholes.MAX_IV)
    lo_full, hi_full = binomial_cpu.MIN_IV, binomial_cpu.MAX_IV
    if bracket is None:
        return _implied_vol(prices, batch, method, lo_full, hi_full)
    # a hint only narrows the full bracket: NaN or outside it takes the full bracket's end
    lo = np.clip(np.where(np.isfinite(bracket[0]), bracket[0], lo_full), lo_full, hi_full)
    hi = np.clip(np.where(np.isfinite(bracket[1]), bracket[1], hi_full), lo_full, hi_full)
    narrow = (lo > lo_full) | (hi < hi_full)
    iv = _implied_vol(prices, batch, method, lo, hi)
    redo = np.flatnonzero(narrow & np.isin(iv.status, ("below-intrinsic", "no-solution", "invalid")))
    if redo.size:  # the root lies outside the hint: the full bracket for those rows
        sub = batch.take(redo)
        m = method if np.ndim(method.steps) == 0 else dataclasses.replace(method, steps=method.steps_for(n)[redo])
        _implied_vol(prices[redo], sub, m, lo_full, hi_full).scatter(iv, redo)
    return iv


def _implied_vol(prices: np.ndarray, batch: Batch, method: Method, lo, hi) -> ImpliedVol:
    """The front door's implied volatilities in the bracket ``[lo, hi]`` (scalars or per row):
    the tree's on the GPU when the dispatch chooses it (any GPU failure: the CPU), else the
    closed form's."""
    door = front_door(method.name if method.name in IV_METHODS else "black-scholes")
    device = "gpu" if door.GPU and _wants_gpu(batch, method) else "cpu"
    return _gpu_or_cpu(lambda d: door.implied_vol(prices, batch, method, d, lo, hi), device, "implied volatility")


def implied_vol_table(prices: Any, columns: Mapping[str, Any], method: Method | None = None) -> ImpliedVol:
    """:func:`implied_vol` from raw columns (``volatility`` not needed), marking invalid rows.

    Args:
        prices: option prices, a scalar or shape (n,), currency units.
        columns: the batch columns, plus optional ``iv_lo``, ``iv_hi`` (:data:`BRACKET_COLUMNS`:
            a per-row bracket hint, see :func:`implied_vol`).
        method: binomial (steps) or black-scholes.

    Returns:
        :class:`optiond.models.ImpliedVol` as :func:`implied_vol`; a row with an invalid input
        gets NaN, status ``"invalid"`` and the reason ``"<field>=<value>: <reason>"`` as its
        error (``status_text()``, and the unpacked pair, give ``"invalid: <field>=<value>:
        <reason>"``).

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
    out = ImpliedVol.empty(n, status="invalid")
    bad = {e.row: e for e in errors}
    if method.name not in CASH_DIVIDEND_METHODS:
        for i in np.flatnonzero(_cash_rows(arrays, n)).tolist():
            bad.setdefault(i, RowError(i, "dividend_times", float("nan"), CASH_DIVIDENDS_BINOMIAL.split(": ", 1)[1]))
    if method.extrapolate:
        for i in np.flatnonzero(_cash_rows(arrays, n)).tolist():
            bad.setdefault(i, RowError(i, "extrapolate", True, EXTRAPOLATE_CASH_DIVIDENDS.split(": ", 1)[1]))
    steps = method.steps_for(n) if method.name in CASH_DIVIDEND_METHODS else None
    for r, e in bad.items():
        out.error[r] = e.message
    valid = np.array([i for i in range(n) if i not in bad], dtype=np.int64)
    if valid.size:
        batch = Batch._from_valid({k: v[valid] for k, v in arrays.items()})
        m = method if steps is None else dataclasses.replace(method, steps=steps[valid])
        part = implied_vol(prices[valid], batch, m, bracket=_bracket(columns, n, valid))
        part.scatter(out, valid)
    return out


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
