"""The rows a worksheet function does not send: per-row checks the engine does not make
before it works (implied-volatility prices and N; MLMC sigma, eps and seed) and the per-call
work limits (tree nodes, of SURFACE_PRICE's American rows too; MLMC path steps, ADI grid-cell
updates, the spectral method's work in tree-node units, each row by the engine that prices it;
the constants are in :mod:`optiond.addin.table`, the estimates are the work model's,
:mod:`optiond.costs`).
:func:`_pre_checks` gives each refused row its cell text."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .. import costs
from ..models import MAX_STEPS, Method, validate_steps
from . import table
from .cells import _row_text, _show, error_text
from .table import Function


def _iv_checks(spec: Function, cols: Mapping[str, np.ndarray]) -> dict[int, str]:
    """What the implied-volatility engine does not check per row: the price (finite, > 0),
    a price with no time value (:func:`_no_time_value`) and N (:func:`optiond.models.validate_steps`; a bad N fails the whole engine call)."""
    out: dict[int, str] = {}
    name = {a.field: a.name for a in spec.args}
    p = cols["price"]
    for i in np.flatnonzero(~(np.isfinite(p) & (p > 0))).tolist():
        out[i] = error_text(f"{name['price']} must be {'> 0' if np.isfinite(p[i]) else 'a finite number'}, "
                            f"got {_show(p[i])}")
    if "steps" in cols:
        for e in validate_steps(cols["steps"], p.shape[0])[1]:
            out.setdefault(e.row, _row_text(spec, e.message))
    _no_time_value(spec, cols, out)
    return out


#: how close to its lowest model value a price may come and still be given a volatility (relative)
NO_TIME_VALUE_REL = 1e-9


def _column(spec: Function, cols: Mapping[str, np.ndarray], f: str, n: int) -> np.ndarray | None:
    v = cols.get(f, spec.fixed.get(f))
    return None if v is None else np.broadcast_to(np.asarray(v), (n,))


def _no_time_value(spec: Function, cols: Mapping[str, np.ndarray], out: dict[int, str]) -> None:
    """Prices with no time value: at (or within :data:`NO_TIME_VALUE_REL` of) the option's lowest
    model value, its value at volatility 0 (European: the discounted forward intrinsic value
    ``max(s(S e^{-qT} - K e^{-rT}), 0)``, s = 1 for a call, -1 for a put; American: the larger of
    that and the exercise value ``max(s(S - K), 0)``), where every volatility up to some level
    gives the price and so none is implied: an error, never a floored volatility. Rows with a
    cash-dividend schedule or a handle in r or q are left to the engine."""
    p = cols["price"]
    n = p.shape[0]
    if any(f in cols for f in ("dividend_times", "dividend_amounts")):
        return
    S, K, T, r, q = (_column(spec, cols, f, n) for f in ("spot", "strike", "expiry", "rate", "dividend_yield"))
    kind, style = _column(spec, cols, "kind", n), _column(spec, cols, "style", n)
    if any(x is None or x.dtype != np.float64 for x in (S, K, T, r, q)) or kind is None:
        return
    name = {a.field: a.name for a in spec.args}
    sign = np.where(kind == "put", -1.0, 1.0)
    american = np.zeros(n, dtype=bool) if style is None else (style == "american")
    with np.errstate(invalid="ignore", over="ignore"):
        floor = np.maximum(sign * (S * np.exp(-q * T) - K * np.exp(-r * T)), 0.0)
        floor = np.where(american, np.maximum(floor, np.maximum(sign * (S - K), 0.0)), floor)
        flat = np.isfinite(floor) & np.isfinite(p) & (p > 0) & \
            (np.abs(p - floor) <= NO_TIME_VALUE_REL * np.maximum(floor, 1e-300))
    for i in np.flatnonzero(flat).tolist():
        out.setdefault(i, error_text(f"{name['price']}={_show(p[i])} has no time value over the lowest model value "
                                     f"{floor[i]:.6g} (volatility 0): no implied volatility"))


#: Excel numbers hold whole numbers exactly up to 2^53: the largest seed a cell can carry
_MAX_SEED = float(2 ** 53)


def _mlmc_checks(spec: Function, cols: Mapping[str, np.ndarray], out: dict[int, str]) -> None:
    """Per-row MLMC checks the engine does not make before it works: sigma within the kernel's
    range, eps finite and > 0 and not below the worksheet floor, a whole seed >= 0."""
    name = {a.field: a.name for a in spec.args}
    S, sig, eps, seed = cols["spot"], cols["volatility"], cols["eps"], cols["seed"]
    digital = _payoffs(spec, cols, S.shape[0]) == "digital"
    with np.errstate(invalid="ignore"):
        for i in np.flatnonzero(np.isfinite(sig) & (sig > table.MLMC_MAX_VOLATILITY)).tolist():
            out.setdefault(i, error_text(f"{name['volatility']} must be <= {table.MLMC_MAX_VOLATILITY:g} for MLMC, "
                                         f"got {_show(sig[i])}"))
        for i in np.flatnonzero(~(np.isfinite(eps) & (eps > 0))).tolist():
            out.setdefault(i, error_text(f"{name['eps']} must be {'> 0' if np.isfinite(eps[i]) else 'a finite number'}"
                                         f", got {_show(eps[i])}"))
        scale = np.where(digital, 1.0, S)
        floor = table.MLMC_MIN_EPS_REL * scale
        low = np.isfinite(eps) & (eps > 0) & np.isfinite(scale) & (scale > 0) & (eps < floor)
        for i in np.flatnonzero(low).tolist():
            what = f"{table.MLMC_MIN_EPS_REL:g} for a digital paying 1" if digital[i] else \
                f"{table.MLMC_MIN_EPS_REL:g} x S = {floor[i]:.4g}"
            out.setdefault(i, error_text(f"{name['eps']}={_show(eps[i])} is below the worksheet floor of {what}; for "
                                         f"a smaller error {table.OVER_LIMIT_ADVICE}"))
        bad = ~(np.isfinite(seed) & (seed >= 0) & (seed <= _MAX_SEED) & (seed == np.floor(seed)))
    for i in np.flatnonzero(bad).tolist():
        out.setdefault(i, error_text(f"{name['seed']} must be a whole number >= 0, got {_show(seed[i])}"))


def _payoffs(spec: Function, cols: Mapping[str, np.ndarray], n: int) -> np.ndarray:
    """The MLMC payoff family of each row (object array of n)."""
    p = cols.get("payoff", spec.fixed.get("payoff", "vanilla"))
    return np.broadcast_to(np.asarray(p, dtype=object), (n,))


def _work(spec: Function, cols: Mapping[str, np.ndarray], n: int) -> tuple[np.ndarray, float, str] | None:
    """``(work per row, limit, unit)`` of the call's method (0 for rows the engine will reject
    as invalid anyway), or None for a method without a work limit."""
    if spec.method == "binomial":
        N = cols["steps"]
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(N) & (N >= 1) & (N <= MAX_STEPS) & (N == np.floor(N))
        return np.where(ok, table.bopm_tree_nodes(np.where(ok, N, 0.0), spec.op), 0.0), table.BOPM_MAX_TREE_NODES, \
            "tree nodes"
    if spec.method == "mlmc":
        S, T, r, q, sig, eps = (cols[f] for f in ("spot", "expiry", "rate", "dividend_yield", "volatility", "eps"))
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(S + T + r + q + sig) & (S > 0) & (T > 0) & (sig > 0) & np.isfinite(eps) & (eps > 0)
            w = costs.mlmc_path_steps_bound(_payoffs(spec, cols, n), S, T, r, q, sig, np.where(ok, eps, 1.0))
        return np.where(ok, w, 0.0), table.MLMC_MAX_PATH_STEPS, "path steps"
    if spec.method == "adi":  # American rows only: the European ones take the semi-analytic engine
        return (np.where(cols["style"] == "american", table.heston_grid_work(1), 0.0), table.HESTON_MAX_GRID_WORK,
                "grid-cell updates")
    if spec.method == "spectral":  # each row by the engine the spectral front door gives it (trees included)
        op = "implied_vol" if spec.op == "iv" else "price"
        work = costs.spectral_work_rows({**spec.fixed, **cols}, Method(name="spectral", greeks=spec.op == "greeks"),
                                        n, op)[0]
        return work, table.AMERICAN_MAX_WORK, "tree-node units of work"
    if spec.method == "surface" and spec.op == "price":  # American rows: a tree with Greeks each
        tree = float(table.bopm_tree_nodes(table.SURFACE_PRICE_STEPS, "greeks"))
        return np.where(cols["style"] == "american", tree, 0.0), table.BOPM_MAX_TREE_NODES, "tree nodes"
    return None


def _over_limit(spec: Function, cols: Mapping[str, np.ndarray], out: dict[int, str]) -> None:
    """The per-call work limit: rows over it on their own get their own text; when the other
    rows together are over it, each of them gets the call's text."""
    n = next(iter(cols.values())).shape[0]
    w = _work(spec, cols, n)
    if w is None:
        return
    work, limit, unit = w
    alive = np.ones(n, dtype=bool)
    if out:
        alive[list(out)] = False
    name = {a.field: a.name for a in spec.args}
    fix = {"binomial": "lower N, ", "mlmc": "raise eps, ", "spectral": 'try accuracy "fast", '}.get(spec.method, "")
    for i in np.flatnonzero(alive & (work > limit)).tolist():
        which = (f"{name['steps']}={_show(cols['steps'][i])}" if spec.method == "binomial" else
                 f"{name['eps']}={_show(cols['eps'][i])}" if spec.method == "mlmc" else "one option")
        out[i] = error_text(f"{which} needs about {work[i]:.2g} {unit}, over the worksheet limit of {limit:.2g} per "
                            f"call; {fix}or {table.OVER_LIMIT_ADVICE}")
        alive[i] = False
    total = float(work[alive].sum())
    if total > limit:
        k = int(alive.sum())
        text = error_text(f"this call needs about {total:.2g} {unit} for {k} options, over the worksheet limit of "
                          f"{limit:.2g}; {fix}split the range, or {table.OVER_LIMIT_ADVICE}")
        for i in np.flatnonzero(alive).tolist():
            out[i] = text


def _pre_checks(spec: Function, cols: Mapping[str, np.ndarray]) -> dict[int, str]:
    """Rows that are not sent, with their cell text: checks the engine does not make per row
    (implied-volatility prices and N, MLMC eps and seed) and the work limits."""
    out = _iv_checks(spec, cols) if spec.op == "iv" else {}
    if spec.method == "mlmc":
        _mlmc_checks(spec, cols, out)
    _over_limit(spec, cols, out)
    return out
