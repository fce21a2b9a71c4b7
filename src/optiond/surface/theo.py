"""Theo values on a fitted surface: the model price and Greeks of every contract of a priced
chain at the surface's volatility, and the edge of the market's mid against it.

For each row of the chain job's output (:func:`optiond.chain.price_chain`) at strike ``K`` and
time to expiry ``T`` (``expiry_years``), ``iv_fit`` is :meth:`Surface.vol` (``k = ln(K / F_T)``
with the surface's forward, total variance interpolated between slices as
:mod:`optiond.surface.model` says). The theo is priced at ``iv_fit`` in the same market and by
the same method as the chain job's model price of that row (:func:`optiond.chain.row_methods`):
on the row's own ``spot``, ``rate`` and ``dividend_yield`` (the per-expiry carry the chain
solved) and, with a dividend file, the row's cash dividend schedule (the chain's
``summary.dividends``), American exercise for every row whose ``style`` is not ``european``:
the spectral engine (Andersen, Lake & Offengenden 2016) for American rows with a continuous
carry only, the CRR tree (Cox, Ross & Rubinstein 1979) for rows with cash dividends (European
ones too) and for every American row with ``method="binomial"``, the closed form (Black &
Scholes 1973, Merton 1973) for European rows without cash dividends; one batched pricer call
per method.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import pricer as _pricer
from ..chain import DEFAULT_ACCURACY, DEFAULT_METHOD, DEFAULT_STEPS, american_method, labels, row_methods
from ..models import GREEK_FIELDS, Method
from .model import Surface

#: the Greeks at ``iv_fit``, named ``theo_<greek>`` (units of :class:`optiond.models.Result`)
THEO_GREEKS = tuple(f"theo_{g}" for g in GREEK_FIELDS)
#: the columns :func:`apply_surface` appends, in order
THEO_COLUMNS = ("iv_fit", "extrapolated", "theo", "edge", "edge_half_spreads") + THEO_GREEKS
#: relative slack on the surface's time range: a row's ``T`` this close to the first or last
#: slice's counts as inside (the chain's clock and the surface's are the same numbers)
T_SLACK = 1e-9


def time_range(surface: Surface) -> tuple[float, float]:
    """The times to expiry the surface answers for, years: ``[T_first, T_last]`` of its slices
    widened by :data:`T_SLACK` (no extrapolation in time beyond them)."""
    return surface.slices[0].T * (1 - T_SLACK), surface.slices[-1].T * (1 + T_SLACK)


def fitted_vol(out: pd.DataFrame, surface: Surface, deadline: float | None = None) -> np.ndarray:
    """``iv_fit`` per row, shape ``(n,)``, annualised decimal (:meth:`Surface.vols`: each slice
    evaluated once for all the rows, O(n log n) in the rows whatever the number of expiries).

    NaN where the row's strike or ``expiry_years`` is missing or not positive, where ``T`` lies
    outside ``[T_first, T_last]`` of the surface's slices (no extrapolation in time), or where
    the surface's total variance is negative.

    Args:
        deadline: a :func:`time.monotonic` instant to stop at (None: none).

    Raises:
        KeyError: ``out`` lacks ``strike`` or ``expiry_years``.
        TimeoutError: ``deadline`` passed first.
    """
    K, T, rows = _rows_on_surface(out, surface)
    vol = np.full(len(out), np.nan)
    vol[rows] = surface.vols(K[rows], T[rows], deadline)
    return vol


def _rows_on_surface(out: pd.DataFrame, surface: Surface) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(K, T, rows)``: the strike and ``expiry_years`` columns as float64 and the indices of
    the rows the surface covers (a strike > 0, ``T`` > 0 inside the slices' range; none when the
    surface has no slice)."""
    K = pd.to_numeric(out["strike"], errors="coerce").to_numpy(dtype=np.float64)
    T = pd.to_numeric(out["expiry_years"], errors="coerce").to_numpy(dtype=np.float64)
    if not surface.slices:
        return K, T, np.empty(0, dtype=np.intp)
    t_lo, t_hi = time_range(surface)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(K) & (K > 0) & np.isfinite(T) & (T >= t_lo) & (T <= t_hi) & (T > 0)
    return K, T, np.flatnonzero(ok)


def extrapolated_rows(out: pd.DataFrame, surface: Surface) -> np.ndarray:
    """Per row, whether ``iv_fit`` is the surface's extrapolation beyond the quotes it was fitted
    on (:meth:`Surface.extrapolated` at the row's strike and ``expiry_years``); False where
    ``iv_fit`` is NaN (:func:`fitted_vol`'s rule). Shape ``(n,)``, bool.

    Raises:
        KeyError: ``out`` lacks ``strike`` or ``expiry_years``.
    """
    K, T, rows = _rows_on_surface(out, surface)
    flag = np.zeros(len(out), dtype=bool)
    ts, group = np.unique(T[rows], return_inverse=True)
    order = np.argsort(group, kind="stable")  # the rows of each distinct T together: one pass, not one scan a T
    bounds = np.searchsorted(group[order], np.arange(len(ts) + 1))
    for i, t in enumerate(ts):
        r = rows[order[bounds[i]:bounds[i + 1]]]
        flag[r] = surface.extrapolated(K[r], float(t))
    return flag


def apply_surface(out: pd.DataFrame, surface: Surface, pricer: _pricer.Pricer | None = None,
                  steps: int = DEFAULT_STEPS, method: str = DEFAULT_METHOD,
                  accuracy: str = DEFAULT_ACCURACY,
                  dividends: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """``out`` with :data:`THEO_COLUMNS` appended (a copy; every row kept, in order).

    Args:
        out: the chain job's output (:func:`optiond.chain.price_chain`): reads ``type``,
            ``style``, ``strike``, ``expiry_years``, ``spot``, ``rate``, ``dividend_yield``,
            ``mid``, and ``bid`` and ``ask`` where present.
        surface: the fitted surface.
        pricer: in-process engine (default) or a daemon client; one ``price_table`` call per
            method (:func:`optiond.chain.row_methods`, as the chain job).
        steps: CRR steps for American rows on the tree (the chain job's default).
        method, accuracy: the chain's American method and spectral accuracy setting
            (:func:`optiond.chain.american_method`; defaults the chain job's).
        dividends: the rows' cash dividend schedules ``(dividend_times, dividend_amounts)``,
            (n, m) NaN-padded, years from the quote and currency units: the chain job's
            ``summary.dividends``; None: no cash dividends.

    Returns:
        the frame with ``iv_fit`` (annualised decimal, :func:`fitted_vol`), ``extrapolated``
        (:func:`extrapolated_rows`: ``iv_fit`` lies beyond the quotes fitted; pandas' nullable
        boolean, NA where ``iv_fit`` is NaN), ``theo`` (the model
        price at ``iv_fit``, currency units), ``edge = mid - theo`` (currency units),
        ``edge_half_spreads`` (the edge over half the quoted spread ``(ask - bid) / 2``; NaN
        without a two-sided quote of positive width) and ``theo_delta``,
        ``theo_gamma``, ``theo_theta``, ``theo_vega``, ``theo_rho`` (the Greeks at ``iv_fit``,
        units of :class:`optiond.models.Result`). NaN where ``iv_fit`` is NaN, where the row has
        no call/put type or no finite spot, rate or dividend yield, or where the pricer marks
        the row as an error; ``edge`` is NaN where ``mid`` is. ``attrs["device"]`` names what
        priced the theo values (the last pricer call's device; absent when nothing was priced).

    Raises:
        KeyError: a column above is missing.
        ValueError: an unknown ``method`` or ``accuracy``, or ``dividends`` not of ``n`` rows.
    """
    pricer = pricer or _pricer.LocalPricer()
    m_american = american_method(method, steps, accuracy)
    n = len(out)
    iv_fit = fitted_vol(out, surface)
    cols = {c: np.full(n, np.nan) for c in ("theo",) + THEO_GREEKS}
    device = None
    kind, style = labels(out["type"]), labels(out["style"])
    num = {c: pd.to_numeric(out[c], errors="coerce").to_numpy(dtype=np.float64)
           for c in ("strike", "expiry_years", "spot", "rate", "dividend_yield", "mid")}
    with np.errstate(invalid="ignore"):
        usable = (np.isfinite(iv_fit) & (iv_fit > 0) & np.isin(kind, ("call", "put")) & (num["spot"] > 0)
                  & np.isfinite(num["rate"]) & np.isfinite(num["dividend_yield"]))
    div_t = div_a = None
    if dividends is not None:
        div_t, div_a = (np.atleast_2d(np.asarray(a, dtype=np.float64)) for a in dividends)
        if div_t.shape != div_a.shape or div_t.shape[0] != n:
            raise ValueError(f"dividends: times {div_t.shape} and amounts {div_a.shape} must be ({n}, m)")
    method_name = row_methods(style, div_t, m_american)
    exercise = np.where(style == "european", "european", "american").astype(object)
    for name in ("spectral", "binomial", "black-scholes"):
        r = np.flatnonzero(usable & (method_name == name))
        if r.size == 0:
            continue
        cols_r = dict(kind=kind[r], style=exercise[r], spot=num["spot"][r], strike=num["strike"][r],
                      expiry=num["expiry_years"][r], rate=num["rate"][r], dividend_yield=num["dividend_yield"][r],
                      volatility=iv_fit[r])
        if div_t is not None:
            cols_r.update(dividend_times=div_t[r], dividend_amounts=div_a[r])
        res = pricer.price_table(cols_r, Method(name=name, steps=steps, accuracy=m_american.accuracy))
        ok = np.asarray(res.status) == "ok"
        device = res.device
        cols["theo"][r[ok]] = np.asarray(res.price)[ok]
        for g in GREEK_FIELDS:
            cols[f"theo_{g}"][r[ok]] = np.asarray(getattr(res, g))[ok]
    result = out.copy()
    result["iv_fit"] = iv_fit
    flag = pd.array(extrapolated_rows(out, surface), dtype="boolean")
    flag[~np.isfinite(iv_fit)] = pd.NA
    result["extrapolated"] = flag
    result["theo"] = cols["theo"]
    result["edge"] = num["mid"] - cols["theo"]
    bid, ask = (pd.to_numeric(out[c], errors="coerce").to_numpy(dtype=np.float64) if c in out.columns
                else np.full(n, np.nan) for c in ("bid", "ask"))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = 0.5 * (ask - bid)
        result["edge_half_spreads"] = np.where((bid >= 0) & (half > 0), result["edge"].to_numpy() / half, np.nan)
    for g in THEO_GREEKS:
        result[g] = cols[g]
    if device is not None:
        result.attrs["device"] = device
    return result


__all__ = ["THEO_COLUMNS", "THEO_GREEKS", "apply_surface", "extrapolated_rows", "fitted_vol", "time_range"]
