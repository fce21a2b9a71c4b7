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
import logging
import time
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from . import runctl
from .daemon import limits
from .kernels import binomial, black_scholes
from .kernels import gpu as gpus
from .kernels.binomial import cpu as binomial_cpu
from .models import (AMERICAN, GREEK_FIELDS, Batch, ImpliedVol, InvalidInputError, Method, Result, RowError,
                     object_full, pd_numeric, scalar_row, validate_columns, validate_steps)

R = TypeVar("R", Result, ImpliedVol)


def select_device(batch: Batch | None, method: Method) -> str:
    """The device that will price this request: ``"cpu"``, or ``"gpu:<id> <name>"``.

    The GPU serves the binomial method only, when CuPy sees a device and either the request
    asks for it (``method.device="gpu"``) or, with ``"auto"``, the method's front door
    (:func:`optiond.kernels.binomial.wants_gpu`: the calibrated dispatch) finds the request big
    enough to pay for the transfers. Without a batch (a table not yet split by method) it
    answers for ``"gpu"`` only.
    """
    if method.name != "binomial" or method.device == "cpu":
        return "cpu"
    if not gpus.available():
        return "cpu"
    if method.device == "auto":
        if batch is None:
            return "cpu"
        if not binomial.wants_gpu(batch, method):
            return "cpu"
    try:
        return gpus.device_label()
    except gpus.GPUError:
        return "cpu"


def _gpu_or_cpu(run: Callable[[str], R], device: str, what: str) -> R:
    """``run("gpu")`` when ``device`` is ``"gpu"``; on a GPU failure
    (:class:`optiond.kernels.gpu.GPUError`) a warning in the log, then ``run("cpu")`` with
    ``diagnostics["gpu_fallback"]`` saying why. ``what`` names the work in the log line
    (``"binomial pricing"``, ``"implied volatility"``)."""
    if device != "gpu":
        return run("cpu")
    try:
        return run("gpu")
    except gpus.GPUError as e:
        done = "solved" if what == "implied volatility" else "priced"
        logging.getLogger(__name__).warning("GPU %s failed (%s: %s); %s on the CPU instead", what,
                                            type(e).__name__, e, done)
        out = run("cpu")
        out.diagnostics["gpu_fallback"] = f"{type(e).__name__}: {e}"
        return out


def _price_binomial(batch: Batch, method: Method, device: str) -> Result:
    """The binomial front door on ``device`` (a label from :func:`select_device`), the CPU if the
    GPU fails."""
    return _gpu_or_cpu(lambda d: binomial.price(batch, method, d), "cpu" if device == "cpu" else "gpu",
                       "binomial pricing")


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


def _gpu_available() -> bool:
    return gpus.available()


def _mlmc_payoff(kind: int, payoff: str) -> str:
    side = "call" if kind == 1 else "put"
    return side if payoff == "vanilla" else f"{payoff}_{side}"


def _price_mlmc(batch: Batch, method: Method, res: Result) -> None:
    """Adaptive MLMC (Giles 2008), one run per option; price and its standard error."""
    from .kernels import mlmc

    n = len(batch)
    res.std_error = np.full(n, np.nan)
    am = np.flatnonzero(batch.style == AMERICAN)
    if am.size:
        res.mark_error(am, "mlmc prices European-style payoffs (vanilla, digital, asian); use method=binomial for american")
    eps = np.broadcast_to(np.asarray(method.eps, dtype=np.float64), (n,))
    device = "gpu" if method.device == "gpu" or (method.device == "auto" and _gpu_available()) else "cpu"
    levels, warnings = np.zeros(n, dtype=np.int64), {}
    todo = np.flatnonzero(res.ok).tolist()
    hooks: dict = {}
    for k, i in enumerate(todo):
        args = (_mlmc_payoff(int(batch.kind[i]), method.payoff), batch.spot[i], batch.strike[i], batch.expiry[i],
                batch.rate[i], batch.dividend_yield[i], batch.volatility[i], float(eps[i]))
        if runctl.active():  # a daemon job: progress per adaptive iteration, cancellation between them
            hooks = {"progress": lambda *_: runctl.check(),
                     "on_fraction": lambda f, k=k: runctl.report((k + f) / len(todo))}
        try:
            try:
                r = mlmc.mlmc_price(*args, seed=int(method.seed), device=device, **hooks)
            except (ImportError, RuntimeError) as e:  # GPU unusable: the CPU gives the same estimate
                if device != "gpu":
                    raise
                logging.getLogger(__name__).warning("GPU MLMC failed (%s); priced on the CPU instead", e)
                res.diagnostics["gpu_fallback"] = f"{type(e).__name__}: {e}"
                device = "cpu"
                r = mlmc.mlmc_price(*args, seed=int(method.seed), device=device, **hooks)
        except InvalidInputError as e:
            res.mark_error([i], str(e))
            continue
        res.price[i], res.std_error[i], levels[i] = r.price, r.std_error, r.levels
        if r.warnings:
            warnings[i] = "; ".join(r.warnings)
    res.device = "cpu" if device == "cpu" else (res.device if res.device.startswith("gpu") else "gpu")
    res.diagnostics.update(mlmc_levels=levels.tolist(), mlmc_warnings=warnings)


def _price_adi(batch: Batch, method: Method, res: Result) -> None:
    """Heston by ADI finite differences (in 't Hout & Foulon 2010), European or American
    (Ikonen–Toivanen); price, delta, gamma and theta at the spot, dV/dv0 in diagnostics."""
    from .kernels import adi_cpu

    if batch.v0 is None:
        res.mark_error(np.arange(len(batch)), "method=adi needs the Heston columns v0, kappa, theta, xi, rho")
        return
    device = method.device if method.device != "auto" or _gpu_available() else "cpu"
    out = adi_cpu.heston_price_batch(batch.kind, batch.style, batch.spot, batch.strike, batch.expiry, batch.rate,
                                     batch.dividend_yield, batch.v0, batch.kappa, batch.theta, batch.xi, batch.rho,
                                     scheme=method.scheme, grid=method.grid, time_steps=method.time_steps,
                                     rannacher=method.rannacher, device=device)
    for name in ("price", "delta", "gamma", "theta"):
        getattr(res, name)[:] = out[name]
    bad = np.flatnonzero(np.asarray(out["status"]) != "ok")
    if bad.size:
        res.mark_error(bad, [str(out["error"][i]) for i in bad])
    res.device = "cpu" if str(out.get("device", "cpu")).startswith("cpu") else str(out["device"])
    res.diagnostics.update(adi_dv0=np.asarray(out["dv0"]).tolist(), adi_scheme=method.scheme, adi_grid=list(method.grid),
                           adi_time_steps=method.time_steps)


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
    if n and method.name == "binomial":
        res = _price_binomial(batch, method, device)
    else:
        res = Result.empty(n, device=device)
    if n:
        if method.name == "mlmc":
            _price_mlmc(batch, method, res)
        elif method.name == "adi":
            _price_adi(batch, method, res)
        elif method.name == "black-scholes":
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
        if not isinstance(N, int) or float(limits.tree_work_rows(N, method.greeks)) > \
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
                bracket: tuple[np.ndarray, np.ndarray] | None = None) -> ImpliedVol:
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
        :class:`optiond.models.ImpliedVol`: float64 annualised volatilities (NaN where none),
        a status per row (``ok``, ``below-intrinsic``, ``no-solution``, ``not-converged``,
        ``invalid``, ``american-not-supported``) and the device that solved them. It unpacks
        as the earlier ``(vol, status)`` pair.
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
            iv = _tree_implied_vol(prices, batch, method, lo, hi)
            redo = np.flatnonzero(narrow & np.isin(iv.status, ("below-intrinsic", "no-solution", "invalid")))
            if redo.size:  # the root lies outside the hint: the full bracket for those rows
                sub = batch.take(redo)
                m = method if np.ndim(method.steps) == 0 else dataclasses.replace(method, steps=method.steps_for(n)[redo])
                _tree_implied_vol(prices[redo], sub, m, binomial_cpu.MIN_IV, binomial_cpu.MAX_IV).scatter(iv, redo)
            return iv
        return _tree_implied_vol(prices, batch, method, binomial_cpu.MIN_IV, binomial_cpu.MAX_IV)
    vol, code = black_scholes.bs_implied_vol(prices, batch.kind, batch.spot, batch.strike, batch.expiry, batch.rate, batch.dividend_yield)
    iv = ImpliedVol.from_codes(vol, code)
    am = batch.style == AMERICAN
    iv.vol[am] = np.nan
    iv.status[am] = "american-not-supported"
    return iv


def _tree_implied_vol(prices: np.ndarray, batch: Batch, method: Method, lo, hi) -> ImpliedVol:
    """Tree implied volatilities in the bracket ``[lo, hi]`` (scalars or per row), the whole
    chain together on the GPU when the dispatch chooses it (any GPU failure: the CPU)."""
    device = "cpu" if select_device(batch, method) == "cpu" else "gpu"
    return _gpu_or_cpu(lambda d: binomial.implied_vol(prices, batch, method, d, lo, hi), device, "implied volatility")


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
    steps = method.steps_for(n) if method.name == "binomial" else None
    for r, e in bad.items():
        out.error[r] = e.message
    valid = np.array([i for i in range(n) if i not in bad], dtype=np.int64)
    if valid.size:
        batch = Batch._from_valid({k: v[valid] for k, v in arrays.items()})
        m = method if steps is None else dataclasses.replace(method, steps=steps[valid])
        part = implied_vol(prices[valid], batch, m, bracket=_bracket(columns, n, valid))
        part.scatter(out, valid)
        out.device, out.diagnostics = part.device, part.diagnostics
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
