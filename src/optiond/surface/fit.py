"""The fit of a priced chain: per expiry a raw-SVI prior without static arbitrage, then its
arbitrage-free correction towards every quote (:mod:`optiond.surface.correction`).

:func:`fit_surface` fits the priors in order of T (below), each under the calendar condition
against the one before; an expiry quoted less than :data:`SPARSE_SD` ATM standard deviations
from the money on a side fits its prior with the nearest expiry's quotes on that side too
(:func:`_borrowed`: its wing's shape borrowed, not extrapolated from a few quotes near the
money). Then, in order of T, each expiry's correction towards every quote but the outliers
(:func:`optiond.surface.correction.correct_slice`: above the earlier expiry's curve, its
unquoted wings under the bids of the next expiry quoted there). The slice's statistics are
the corrected curve's; ``prior_inside_share_near`` is the prior's own share.

The prior of one expiry (:func:`fit_slice`), on the out-of-the-money quote of each strike (the
call for ``K >= F_T``, the put below) whose mid implied volatility solved:

1. **The range fitted**: ``|k| <= max(RANGE_SD * sigma_atm * sqrt(T), RANGE_MIN)`` with
   ``sigma_atm`` the mid IV interpolated at ``k = 0``, less the outliers (:func:`outliers`: a
   quote more than 25 % and more than 3 spreads away from the median of its 4 neighbours, such
   as QQQ 2026-06-18's 136 % among 29 %). Raw SVI has five parameters and cannot follow a whole
   index smile from the deep wings to the money at the spreads' precision (measured on SPX
   2026-09-18: 0.31 vol points RMS over every quote against 0.033 over ``|k| < 0.25``); the
   wings beyond the range are the constrained extrapolation.
2. **Starts, quasi-explicit** (Zeliade Systems 2009, "Quasi-explicit calibration of Gatheral's
   SVI model"; De Marco & Martini 2009): with ``y = (k - m) / sigma`` the slice is
   ``w = a + d y + c sqrt(y^2 + 1)`` (``c = b sigma``, ``d = rho c``), linear in ``(a, d, c)``
   for fixed ``(m, sigma)``; the weighted least squares is solved for a 12 x 12 grid of
   ``(m, sigma)`` at once (3 x 3 normal equations, :func:`optiond.surface.solver.qe_inner`) and
   the best point refined by three rounds of a finer 7 x 7 grid around it. Irregular short
   smiles (SPY 2026-02-17: 41 % at k = -0.12, 11 % at +0.02, 18 % at +0.05) have several
   basins, so the next best grid points (one per ``sigma``) and a fixed seed are starts too.
3. **Fit** (:func:`optiond.surface.solver.lm`: Levenberg-Marquardt with bounds, analytic
   Jacobian, compiled) in implied-variance units ``x = (v / T, b / T, rho, m, sigma)`` where
   ``v = a + b sigma sqrt(1 - rho^2)`` is the slice's minimum total variance: the bound
   ``v / T >= V_MIN`` keeps ``w > 0`` everywhere by construction, so ``g`` is finite everywhere.
   Residuals in implied volatility (each quote's term weighted ``1 / n``): zero inside
   ``[iv_bid, iv_ask]`` and the distance to the band outside, plus :data:`MID_PULL` times the
   distance to the mid; and a penalty on the mean square of the violations, over a grid, of
   Gatheral & Jacquier's ``g(k) >= G_MARGIN`` (butterfly), Lee's ``b (1 + |rho|) <= LEE_MAX``
   and, for every slice after the first, ``w(k, t_i) - w(k, t_{i-1}) >= CAL_MARGIN T_i``
   (calendar, against the slice fitted before it, over both slices' quoted ranges: the range
   :func:`~optiond.surface.arbitrage.check_surface` checks). The solver's grids have
   :data:`SOLVE_POINTS` points over the quoted range and :data:`SOLVE_WINGS` over each of the
   checks' extensions beyond it. The penalty weight rises through :data:`CONTINUATION` (1, 10,
   100, then :data:`PENALTY`), each stage from the last one's end: a stiff penalty from the
   start makes a narrow curved valley that the solver crawls along (measured on SPY
   2026-02-17: about 1,270 evaluations to converge at the final weight from a start, 95 through
   the continuation, to the same optimum). Every start gets the first stage's
   :data:`SCREEN_ITER` steps, and the best goes on.
4. **Checks** on the checks' own grid (:func:`optiond.surface.arbitrage.check_grid`, 2001
   points): a violation between the solver's points adds the checks' points where the condition
   is within twice its margin to the solver's grids and the fit goes on from where it stopped;
   with nothing to add, the penalty is ten times larger (at most :data:`RETRIES` rounds). A
   violation left after that is removed by SLSQP (``scipy.optimize.minimize``) with the same
   conditions as inequality constraints.

Measured on the bundled chains (the chain job's output; two-sided out-of-the-money quotes
with ``|k| < 0.1``; bench/surface.py): the priors alone lie inside the fitted bid/ask for SPX
2025-10-01 62.6 %, QQQ 2026-02-13 47.3 % and SPY 2026-02-13 21.6 %; the corrected surface
for 100 %, 90.5 % and 71.4 %. The fit is deterministic: two fits of one chain give the same
parameters to the bit.

Why per-expiry SVI with the calendar as a constraint, not SSVI (Gatheral & Jacquier 2014, §4):
SSVI ties every expiry's skew and curvature to one function of the ATM total variance, and
the bundled chains' short expiries (SPY and QQQ from 4 days) do not follow one such function;
per-expiry slices keep each expiry's own shape and the calendar condition is imposed where it
binds.

What the bundled chains allow (priced by the chain job; measured): the quotes of SPY and QQQ
2026-02-13 carry butterfly arbitrage themselves, 12.2 % and 5.0 % of consecutive-strike
triplets cost less than nothing at bid/ask (SPX 2025-10-01: none), so no arbitrage-free smile
lies inside every spread there: the most any arbitrage-free smile reaches near the money
(:mod:`optiond.surface.achievable`) is 77.3 % on SPY and 92.2 % on QQQ. Statistics per
expiry (:func:`fit_surface`, :mod:`optiond.surface.report`) say how close the fit comes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from ..chain import labels
from . import arbitrage, report, solver
from .correction import Curve, bid_calls, correct_slice
from .model import Slice, Surface
from .svi import SVI, density_g, min_variance, total_variance

#: the fitted range in ATM standard deviations, and its smallest half-width (log-moneyness)
RANGE_SD = 2.5
RANGE_MIN = 0.12
#: weight of the pull to the mid against the distance outside the band (both in vol)
MID_PULL = 0.1
#: weight of the no-arbitrage penalties (residual units: vol per unit of violation)
PENALTY = 1e3
#: refits with ten times the penalty when a check still fails
RETRIES = 3
#: margins the penalties keep: g >= G_MARGIN, w_i - w_{i-1} >= CAL_MARGIN * T_i (implied variance)
G_MARGIN = 1e-4
CAL_MARGIN = 1e-7
#: the smallest minimum implied variance (v / T; a 1 % volatility), the wings' largest slope
V_MIN = 1e-4
LEE_MAX = 1.99
#: bounds of rho and sigma
RHO_MAX = 0.995
SIGMA_MIN = 1e-3
#: the quasi-explicit grid's points per axis and its refinement rounds
QE_GRID = 12
QE_ZOOMS = 3
#: starts of the final fit (the quasi-explicit one and the next best of its grid), the
#: penalty's continuation from each, the solver's accepted steps per stage and its tolerance
STARTS = 2
CONTINUATION = (1.0, 10.0, 100.0, PENALTY)
#: the solver's accepted steps in the first stage from each start (the best goes on)
SCREEN_ITER = 10
MAX_ITER = 200
TOL = 1e-8
#: points of the solver's butterfly and calendar grids over the quoted range and over each
#: extension beyond it (the checks' span; the checks use arbitrage.GRID_POINTS, and a slice
#: that fails them is refitted on the checks' grid)
SOLVE_POINTS = 101
SOLVE_WINGS = 41
#: a side quoted less than this many ATM standard deviations from the money borrows its
#: prior's shape from the nearest expiry quoted there (:func:`_borrowed`)
SPARSE_SD = 1.0
#: fewest quotes a slice needs
MIN_QUOTES = 5
#: an outlier's distance to the median of its neighbours: relative, and in spreads
OUTLIER_REL = 0.25
OUTLIER_SPREADS = 3.0
#: near the money for the statistics (log-moneyness)
NEAR_K = 0.1
#: the chain output's columns the fit reads
COLUMNS = ("expiry", "type", "strike", "expiry_years", "forward", "rate", "iv", "iv_bid", "iv_ask", "status")



def _inner(k: np.ndarray, w: np.ndarray, sw: np.ndarray, m: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zeliade's inner problem for a batch of ``(m, sigma)`` (:func:`optiond.surface.solver.qe_inner`)."""
    return solver.qe_inner(k, w, sw, np.ascontiguousarray(m, dtype=np.float64), np.ascontiguousarray(s, dtype=np.float64))


#: the solver's grid on unit intervals: a wing without its inner end, the quoted range, the
#: other wing without its inner end
_WING = np.linspace(0.0, 1.0, SOLVE_WINGS, endpoint=False)
_MIDDLE = np.linspace(0.0, 1.0, SOLVE_POINTS)
_WING_HI = np.linspace(0.0, 1.0, SOLVE_WINGS)[1:]
#: the quasi-explicit grid's ``sigma`` values and a zoom round's offsets (unit widths)
_QE_SIGMA = np.geomspace(1e-3, 1.0, QE_GRID)
_ZOOM = np.linspace(-1.0, 1.0, 7)
_ZOOM_M, _ZOOM_S = (a.ravel() for a in np.meshgrid(_ZOOM, _ZOOM))


def _qe_grid(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = np.linspace(k.min(), k.max(), QE_GRID)
    return np.tile(m, QE_GRID), np.repeat(_QE_SIGMA, QE_GRID)


def _to_svi(m: float, s: float, adc: np.ndarray) -> SVI:
    a, d, c = map(float, adc)
    return SVI(a, c / s, d / c if c > 0 else 0.0, float(m), float(s))


def _zoom(k: np.ndarray, w: np.ndarray, sw: np.ndarray, m: float, s: float, dm: float, ls: float
          ) -> tuple[float, float, float]:
    """:data:`QE_ZOOMS` rounds of a 7 x 7 grid of ``(m, ln sigma)`` centred on the best point so far,
    each a third the width of the last; returns ``(m, sigma, objective)``."""
    f = float("inf")
    for _ in range(QE_ZOOMS):
        mg, sg = m + dm * _ZOOM_M, np.exp(math.log(s) + ls * _ZOOM_S)
        _, fz = _inner(k, w, sw, mg, sg)
        j = int(np.argmin(fz))
        if fz[j] < f:
            m, s, f = float(mg[j]), float(sg[j]), float(fz[j])
        dm, ls = dm / 3.0, ls / 3.0
    return m, s, f


def quasi_explicit(k: np.ndarray, w: np.ndarray, weights: np.ndarray | None = None) -> SVI:
    """Zeliade's quasi-explicit start: for each ``(m, sigma)`` the weighted least squares in
    ``(a, d, c)`` (clipped to ``0 <= c <= 2 sigma``, ``|d| <= min(c, 2 sigma - c)``: Lee and
    ``|rho| <= 1``); the outer problem in ``(m, sigma)`` by a :data:`QE_GRID` x :data:`QE_GRID`
    grid (``m`` over the quotes' range, ``sigma`` from 1e-3 to 1, geometric) and
    :data:`QE_ZOOMS` rounds of a finer grid around its best point (every round one batch of
    3 x 3 normal equations; the final fit refines it).

    Args:
        k: log-moneyness, shape (n,); w: total implied variance, shape (n,);
        weights: per-quote weights, shape (n,) (default 1).

    Raises:
        ValueError: fewer than :data:`MIN_QUOTES` quotes.
    """
    k, w = np.asarray(k, dtype=np.float64), np.asarray(w, dtype=np.float64)
    if k.size < MIN_QUOTES:
        raise ValueError(f"a slice needs at least {MIN_QUOTES} quotes, got {k.size}")
    sw = np.sqrt(np.ones_like(k) if weights is None else np.asarray(weights, dtype=np.float64))
    return _starts(k, w, sw, 1)[0]


def _starts(k: np.ndarray, w: np.ndarray, sw: np.ndarray, n: int) -> list[SVI]:
    """Starts of the final fit: the quasi-explicit solution (:func:`quasi_explicit`), the inner
    solutions of the next best ``(m, sigma)`` of its grid (at most one per ``sigma`` row) up to
    ``n`` in all, and a fixed symmetric seed; irregular short smiles have several basins."""
    mg, sg = _qe_grid(k)
    P, f = _inner(k, w, sw, mg, sg)
    j = int(np.argmin(f))
    dm = (float(k.max()) - float(k.min())) / (QE_GRID - 1)
    m, s, _ = _zoom(k, w, sw, float(mg[j]), float(sg[j]), dm, math.log(1e3) / (QE_GRID - 1))
    out = [_to_svi(m, s, _inner(k, w, sw, np.array([m]), np.array([s]))[0][0])]
    seen: set[float] = set()
    for j in np.argsort(f, kind="stable"):
        if len(out) >= n:
            break
        if sg[j] in seen:
            continue
        seen.add(sg[j])
        out.append(_to_svi(mg[j], sg[j], P[j]))
    if n > 1:
        atm = float(np.interp(0.0, k, w)) if k.min() < 0 < k.max() else float(np.median(w))
        out.append(SVI(0.5 * atm, 0.2 * atm / 0.1 + 1e-6, -0.3, 0.0, 0.1))
    return out


def _w(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Total variance in the fit's parameters ``x = (v, b, rho, m, sigma)`` (``v`` the slice's
    minimum total variance; :func:`_svi_of` gives the raw parameters)."""
    return total_variance(_svi_of(x), k)


def _g(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Gatheral & Jacquier's ``g`` in the fit's parameters (``w > 0`` by construction)."""
    return density_g(_svi_of(x), k)


def _svi_of(x: np.ndarray) -> SVI:
    v, b, r, m, s = map(float, x)
    return SVI(v - b * s * math.sqrt(1.0 - r * r), b, r, m, s)


def _x_of(p: SVI) -> np.ndarray:
    return np.array([min_variance(p), p.b, p.rho, p.m, p.sigma])


def fit_slice(k, iv_mid, iv_bid=None, iv_ask=None, T: float = 1.0, *, prev: SVI | None = None,
              k_grid: tuple[float, float] | None = None, prev_k_grid: tuple[float, float] | None = None
              ) -> tuple[SVI, dict]:
    """Fit one expiry's raw SVI slice to quotes (see the module docstring).

    Args:
        k: log-moneyness ``ln(K / F_T)`` of the quotes, shape (n,).
        iv_mid: mid implied volatilities (annualised decimals), shape (n,).
        iv_bid, iv_ask: the band, shape (n,); NaN or None: open on that side (default: the mid,
            a zero-width band).
        T: time to expiry, years (> 0).
        prev: the earlier expiry's fitted slice, for the calendar condition.
        k_grid: the quoted ``(k_min, k_max)`` the checks' grid extends (default: ``k``'s).
        prev_k_grid: ``prev``'s quoted range (default: ``k_grid``); the calendar is imposed on
            the grid of both ranges together, the one :func:`~optiond.surface.arbitrage.check_surface`
            checks.

    Returns:
        ``(SVI, info)``; ``info`` holds the checks (``arbitrage.Check`` per name, ``calendar``
        against ``prev``), ``nfev`` (objective evaluations), the final penalty weight and ``ok``
        (every check passes).

    Raises:
        ValueError: fewer than :data:`MIN_QUOTES` finite quotes, ``T <= 0``, or a band that
            does not contain its mid.
    """
    k = np.asarray(k, dtype=np.float64)
    mid = np.asarray(iv_mid, dtype=np.float64)
    bid = mid if iv_bid is None else np.asarray(iv_bid, dtype=np.float64)
    ask = mid if iv_ask is None else np.asarray(iv_ask, dtype=np.float64)
    if not (T > 0):
        raise ValueError(f"time to expiry must be > 0, got {T}")
    if not (k.shape == mid.shape == bid.shape == ask.shape and k.ndim == 1):
        raise ValueError("k, iv_mid, iv_bid and iv_ask must be 1-D arrays of one length")
    ok = np.isfinite(k) & np.isfinite(mid) & (mid > 0)
    k, mid, bid, ask = k[ok], mid[ok], bid[ok], ask[ok]
    if k.size < MIN_QUOTES:
        raise ValueError(f"a slice needs at least {MIN_QUOTES} quotes, got {k.size}")
    o = np.argsort(k, kind="stable")
    k, mid, bid, ask = k[o], mid[o], bid[o], ask[o]
    lo = np.where(np.isfinite(bid), bid, 0.0)
    hi = np.where(np.isfinite(ask), ask, np.inf)
    if np.any((lo > mid + 1e-12) | (hi < mid - 1e-12)):
        raise ValueError("each band [iv_bid, iv_ask] must contain its mid")
    k_min, k_max = k_grid if k_grid is not None else (float(k.min()), float(k.max()))
    pk = prev_k_grid if prev_k_grid is not None else (k_min, k_max)
    c_min, c_max = min(k_min, pk[0]), max(k_max, pk[1])
    # the optimiser works in implied variance (v / T, b / T, rho, m, sigma): one scale for a
    # 4-day and a 3-year slice; v >= V_MIN keeps w > 0 everywhere, so g is finite everywhere
    scale = np.array([T, T, 1.0, 1.0, 1.0])
    lo_x = np.array([V_MIN, 0.0, -RHO_MAX, -2.0, SIGMA_MIN])
    hi_x = np.array([5.0, 2.0 / T, RHO_MAX, 2.0, 3.0])
    inner = 1e-9 * (hi_x - lo_x)

    def grid(a: float, b: float) -> np.ndarray:
        """The solver's grid: :data:`SOLVE_POINTS` over ``[a, b]`` and :data:`SOLVE_WINGS` over
        each of the checks' extensions beyond it (the checks' span)."""
        lo, hi = arbitrage.check_span(a, b)
        return np.concatenate([lo + (a - lo) * _WING, a + (b - a) * _MIDDLE, b + (hi - b) * _WING_HI])

    where = [grid(k_min, k_max), np.empty(0), np.empty(0)]
    if prev is not None:
        where[1] = grid(c_min, c_max)
        where[2] = total_variance(prev, where[1])
    nfev = 0

    def run(x0: np.ndarray, penalty: float, max_iter: int) -> tuple[np.ndarray, float]:
        nonlocal nfev
        x, cost, nev = solver.lm(x0, lo_x, hi_x, T, k, lo, hi, mid, *where, penalty, MID_PULL, G_MARGIN,
                                 CAL_MARGIN, LEE_MAX, max_iter, TOL)
        nfev += int(nev)
        return x, cost

    def fit_cost(x: np.ndarray) -> float:
        none = np.empty(0)  # the fit alone: no penalty rows, no grid to walk
        return float(solver.objective(x, T, k, lo, hi, mid, none, none, none, 0.0, MID_PULL, G_MARGIN, CAL_MARGIN,
                                      LEE_MAX))

    def checks_of(p: SVI) -> dict:
        c = arbitrage.check_slice(p, k_min, k_max)
        if prev is not None:
            c["calendar"] = arbitrage.calendar(prev, p, c_min, c_max)
        return c

    def refine(p: SVI) -> bool:
        """The checks' grid points where a condition is within twice its margin join the
        solver's grids (a violation between the solver's points); False when none is new."""
        fine = arbitrage.check_grid(k_min, k_max)
        add = fine[~(density_g(p, fine) >= 2.0 * G_MARGIN)]
        new = np.setdiff1d(add, where[0]).size > 0
        where[0] = np.union1d(where[0], add)
        if prev is not None:
            cfine = arbitrage.check_grid(c_min, c_max)
            w_prev = total_variance(prev, cfine)
            bind = ~(total_variance(p, cfine) - w_prev >= 2.0 * CAL_MARGIN * T)
            new |= np.setdiff1d(cfine[bind], where[1]).size > 0
            where[1], i = np.unique(np.concatenate([where[1], cfine[bind]]), return_index=True)
            where[2] = np.concatenate([where[2], w_prev[bind]])[i]
        return new

    # from each start the first stage of the penalty's continuation (CONTINUATION, up to
    # PENALTY), the rest from the best of them: a stiff penalty from the start makes a narrow
    # curved valley the solver crawls along
    tries = []
    for p0 in _starts(k, mid * mid * T, np.ones_like(k), STARTS):
        x = np.clip(np.clip(_x_of(p0) / scale, lo_x, hi_x), lo_x + inner, hi_x - inner)
        cost = run(x, CONTINUATION[0], SCREEN_ITER)
        tries.append((cost[1], len(tries), cost[0]))
    x = min(tries)[2]
    for penalty in CONTINUATION[1:]:
        x, _ = run(x, penalty, MAX_ITER)
    # checked on the checks' grids; a violation there refines the solver's grids where the
    # condition binds, or (nothing new to add) raises the penalty ten times
    for attempt in range(RETRIES + 1):
        p = _svi_of(x * scale)
        checks = checks_of(p)
        if all(c.ok for c in checks.values()) or attempt == RETRIES:
            break
        if not refine(p):
            penalty *= 10.0
        x, _ = run(x, penalty, MAX_ITER)
    if not all(c.ok for c in checks.values()):
        # the penalties left a violation: the constraints as such (SLSQP) from the best point

        def cons(x: np.ndarray) -> np.ndarray:
            q = x * scale
            out = [_g(q, grid) - G_MARGIN, [LEE_MAX - q[1] * (1.0 + abs(q[2]))]]
            if prev is not None:
                out.append((_w(q, cgrid) - w_prev) / T - CAL_MARGIN)
            return np.concatenate(out)

        x0 = np.clip(_x_of(p) / scale, lo_x, hi_x)
        grid, cgrid, w_prev = arbitrage.check_grid(k_min, k_max), arbitrage.check_grid(c_min, c_max), None
        if prev is not None:
            w_prev = total_variance(prev, cgrid)
        r = minimize(fit_cost, x0, method="SLSQP", bounds=list(zip(lo_x, hi_x)),
                     constraints=[{"type": "ineq", "fun": cons}], options={"maxiter": 200, "ftol": 1e-14})
        nfev += int(r.nfev)
        q = _svi_of(r.x * scale)
        c2 = checks_of(q)
        if all(c.ok for c in c2.values()):
            p, checks = q, c2
    return p, {"checks": checks, "nfev": nfev, "penalty": penalty, "ok": all(c.ok for c in checks.values())}


def outliers(k: np.ndarray, iv: np.ndarray, spread: np.ndarray | None = None) -> np.ndarray:
    """Quotes far from their neighbours: ``|iv - median of the 5 nearest in k| > OUTLIER_REL x
    that median`` and more than :data:`OUTLIER_SPREADS` spreads (the 4 nearest other quotes in
    ``k``, 2 on each side away from the ends) (a stale or mistyped quote, such
    as a 136 % IV among 29 % neighbours). Shape (n,) booleans, in the order of ``k``."""
    k, iv = np.asarray(k, dtype=np.float64), np.asarray(iv, dtype=np.float64)
    n = k.size
    if n < 5:
        return np.zeros(n, dtype=bool)
    o = np.argsort(k, kind="stable")
    s = iv[o]
    i = np.arange(n)
    win = np.clip(i - 2, 0, n - 5)[:, None] + np.arange(5)[None, :]  # 5 consecutive, holding i
    others = np.sort(np.where(win == i[:, None], n, win), axis=1)[:, :4]  # the 4 others
    four = np.sort(s[others], axis=1)
    med = 0.5 * (four[:, 1] + four[:, 2])  # the median of four
    sp = np.zeros(n) if spread is None else np.nan_to_num(np.asarray(spread, dtype=np.float64)[o], nan=0.0)
    bad = (np.abs(s - med) > OUTLIER_REL * med) & (np.abs(s - med) > OUTLIER_SPREADS * sp)
    out = np.zeros(n, dtype=bool)
    out[o] = bad
    return out


def otm_mask(rows: pd.DataFrame, forward, kind: np.ndarray | None = None) -> np.ndarray:
    """Which rows of the chain job's output are out of the money on the expiry's ``forward``
    (a number, or one per row): puts with ``K < F``, calls with ``K >= F`` (the ``type`` labels as
    the chain job reads them, :func:`optiond.chain.labels`, or ``kind`` where the caller has
    them); shape (len(rows),), bool."""
    kind = labels(rows["type"]) if kind is None else kind
    K = pd.to_numeric(rows["strike"], errors="coerce").to_numpy(dtype=np.float64)
    return np.where(K >= forward, kind == "call", (kind == "put") & (K < forward))


def _slice_stats(w_of, T: float, k: np.ndarray, mid: np.ndarray, bid: np.ndarray, ask: np.ndarray,
                 fitted: np.ndarray, info: dict, k_min: float, k_max: float, k_itm: np.ndarray,
                 mid_itm: np.ndarray) -> dict[str, Any]:
    f = np.sqrt(np.maximum(w_of(k), 0.0) / T)
    lo_k, hi_k = float(k[fitted].min()), float(k[fitted].max())
    # the in-the-money contracts' own mid IVs over the fitted range (the fit never saw them)
    in_range = (k_itm >= lo_k) & (k_itm <= hi_k)
    err_itm = (np.sqrt(np.maximum(w_of(k_itm[in_range]), 0.0) / T) - mid_itm[in_range]) * 100.0
    err = (f - mid) * 100.0
    two = np.isfinite(bid) & np.isfinite(ask)
    inside = two & (f >= bid - 1e-12) & (f <= ask + 1e-12)
    near = np.abs(k) < NEAR_K

    def share(sel: np.ndarray) -> float:
        return float(inside[sel & two].sum() / max(int((sel & two).sum()), 1)) if (sel & two).any() else float("nan")

    def rms(sel: np.ndarray) -> float:
        return float(np.sqrt(np.mean(err[sel] ** 2))) if sel.any() else float("nan")

    checks = info["checks"]
    ok = all(c.ok for c in checks.values())
    n = int(fitted.sum())
    inside_fit = share(fitted)
    atm = float(np.sqrt(max(float(w_of(np.zeros(1))[0]), 0.0) / T))
    conf, parts = report.confidence(T, atm, k[fitted], bid[fitted], ask[fitted], f[fitted])
    return {"quotes": int(k.size), "fitted_quotes": n, "k_min": k_min, "k_max": k_max,
            "fit_k_range": [lo_k, hi_k], "wing_sd": report.wing_cover(T, atm, lo_k, hi_k),
            "confidence_parts": parts,
            "rms_vol_pts": rms(fitted), "max_vol_pts": float(np.max(np.abs(err[fitted]))),
            "itm_quotes": int(in_range.sum()),
            "rms_vol_pts_itm": float(np.sqrt(np.mean(err_itm ** 2))) if err_itm.size else float("nan"),
            "rms_vol_pts_near": rms(near), "rms_vol_pts_all": rms(np.ones_like(fitted)),
            "inside_share": inside_fit, "inside_share_near": share(near), "confidence": conf,
            "near_two_sided": int((near & two).sum()), "near_inside": int(inside[near].sum()),
            "arbitrage_free": ok, "checks": {name: c.to_dict() for name, c in checks.items()}, "nfev": info["nfev"]}


def _borrowed(work: list[dict], i: int) -> tuple[np.ndarray, ...] | None:
    """Quotes a sparse expiry's prior borrows: where expiry ``i`` is quoted less than
    :data:`SPARSE_SD` ATM standard deviations from the money on a side, the nearest expiry
    (the next one first) quoted beyond that, its quotes there up to the prior's fitted range
    (``RANGE_SD`` standard deviations), at their implied volatilities (a flat term structure
    at fixed ``k``); ``(k, mid, bid, ask)`` or None."""
    w = work[i]
    sd = w["atm"] * math.sqrt(w["T"])
    if not (sd > 0):
        return None
    used = ~w["out"]
    lo, hi = float(w["k"][used].min()), float(w["k"][used].max())
    reach = max(RANGE_SD * sd, RANGE_MIN)
    sides = [(-reach, lo) if lo > -SPARSE_SD * sd else None, (hi, reach) if hi < SPARSE_SD * sd else None]
    if sides == [None, None]:
        return None
    out = []
    for side in sides:
        if side is None:
            continue
        for j in sorted(range(len(work)), key=lambda j: (abs(j - i), -j)):
            if j == i:
                continue
            v = work[j]
            sel = ~v["out"] & (v["k"] > side[0]) & (v["k"] < side[1])
            if sel.sum() >= 2:
                out.append([v["k"][sel], v["mid"][sel], v["bid"][sel], v["ask"][sel]])
                break
    if not out:
        return None
    return tuple(np.concatenate([o[m] for o in out]) for m in range(4))


def _prior_share(p: SVI, T: float, k: np.ndarray, bid: np.ndarray, ask: np.ndarray) -> float:
    """The SVI prior's share of two-sided quotes with ``|k| < NEAR_K`` inside their band."""
    near = (np.abs(k) < NEAR_K) & np.isfinite(bid) & np.isfinite(ask)
    if not near.any():
        return float("nan")
    f = np.sqrt(np.maximum(total_variance(p, k[near]), 0.0) / T)
    return float(np.mean((f >= bid[near] - 1e-12) & (f <= ask[near] + 1e-12)))


def fit_surface(chain_out: pd.DataFrame, *, underlying: str | None = None, quote_time: str | None = None) -> Surface:
    """Fit every expiry of a priced chain (:func:`optiond.chain.price_chain`'s output) in order
    of T, each slice under the calendar condition against the one before.

    Args:
        chain_out: the chain job's rows; columns :data:`COLUMNS` (``expiry_years`` is T in
            years, ``forward`` F_T, ``rate`` the expiry's zero rate, ``iv``/``iv_bid``/``iv_ask``
            annualised decimals).
        underlying, quote_time: labels kept in the surface (default: the frame's
            ``underlying`` and ``quote_date``).

    Returns:
        :class:`~optiond.surface.model.Surface`; each slice's ``stats`` (quotes used, outliers
        left out, the fitted range, RMS and max error in vol points over it out of the money
        (``rms_vol_pts``: the quotes fitted) and in the money (``rms_vol_pts_itm``: the
        in-the-money contracts' own mid IVs over the fitted range, which the fit does not
        see), the share of two-sided quotes inside
        the fitted bid/ask overall and near the money, a confidence in [0, 1] = that share x
        min(1, quotes / 10) x 1/2 when a check fails, the checks) and the surface's ``stats``
        (the same overall, ``arbitrage_free``). Expiries with fewer than :data:`MIN_QUOTES`
        usable quotes are left out (``stats["skipped"]``).

    Raises:
        ValueError: a missing column, or no expiry with enough quotes.
    """
    missing = [c for c in COLUMNS if c not in chain_out.columns]
    if missing:
        raise ValueError(f"the chain output is missing columns {missing}")
    slices: list[Slice] = []
    skipped: list[str] = []
    calendar_ok = True
    prev: SVI | None = None
    prev_range: tuple[float, float] | None = None
    work: list[dict] = []

    def col(name: str) -> np.ndarray:
        return pd.to_numeric(chain_out[name], errors="coerce").to_numpy(dtype=np.float64)

    code, names = pd.factorize(chain_out["expiry"], sort=False)
    T_all, F_all, rate_all = col("expiry_years"), col("forward"), col("rate")
    K_all, mid_all, bid_all, ask_all = col("strike"), col("iv"), col("iv_bid"), col("iv_ask")
    solved = (chain_out["status"].to_numpy() == "ok") & np.isfinite(mid_all)
    kind = labels(chain_out["type"])
    otm = otm_mask(chain_out, F_all, kind)
    usable = solved & otm
    itm = solved & ~otm & ((kind == "call") | (kind == "put"))
    rows = np.argsort(code, kind="stable")
    starts = np.searchsorted(code[rows], np.arange(len(names) + 1))
    first = rows[starts[:-1]]  # each expiry's first row: its T, F and rate
    for e in sorted(range(len(names)), key=lambda e: (T_all[first[e]], e)):
        g = rows[starts[e]:starts[e + 1]]
        T, F = float(T_all[first[e]]), float(F_all[first[e]])
        q = g[usable[g]]
        k = np.log(K_all[q] / F)
        mid, bid, ask = mid_all[q], bid_all[q], ask_all[q]
        if not (T > 0) or k.size < MIN_QUOTES:
            skipped.append(str(names[e]))
            continue
        o = np.argsort(k)
        atm = float(np.interp(0.0, k[o], mid[o]))
        out = outliers(k, mid, ask - bid)
        fitted = (np.abs(k) <= max(RANGE_SD * atm * math.sqrt(T), RANGE_MIN)) & ~out
        if fitted.sum() < MIN_QUOTES:
            fitted = np.argsort(np.argsort(np.abs(k))) < MIN_QUOTES  # the nearest quotes
        k_min, k_max = float(k.min()), float(k.max())
        qi = g[itm[g]]
        work.append(dict(e=e, T=T, F=F, k=k, mid=mid, bid=bid, ask=ask, out=out, fitted=fitted, atm=atm,
                         k_min=k_min, k_max=k_max, k_itm=np.log(K_all[qi] / F), mid_itm=mid_all[qi]))
    for i, w in enumerate(work):
        k, fitted = w["k"], w["fitted"]
        kf, mf, bf, af = k[fitted], w["mid"][fitted], w["bid"][fitted], w["ask"][fitted]
        extra = _borrowed(work, i)
        if extra is not None:  # a sparse expiry's prior borrows its wings' shape from a neighbour
            kf, mf, bf, af = (np.r_[a, b] for a, b in zip((kf, mf, bf, af), extra))
        p, info = fit_slice(kf, mf, bf, af, w["T"], prev=prev, k_grid=(w["k_min"], w["k_max"]), prev_k_grid=prev_range)
        info["borrowed"] = 0 if extra is None else int(extra[0].size)
        w["p"], w["info"] = p, info
        prev, prev_range = p, (w["k_min"], w["k_max"])
    # the corrections towards every quote but the outliers, in order of T: each above the one
    # before (the calendar), its unquoted wings below the bids of the next expiry quoted there
    for w in work:
        used = ~w["out"]
        w["used"] = used
        w["range"] = (float(w["k"][used].min()), float(w["k"][used].max()))
        w["bids"] = bid_calls(w["k"][used], w["bid"][used], w["mid"][used], w["T"])
    prev_curve: Curve | None = None
    for i, w in enumerate(work):
        used, k, T, p, info = w["used"], w["k"], w["T"], w["p"], w["info"]
        caps = [(work[j]["bids"], work[j]["range"]) for j in range(i + 1, len(work))]
        curve, cinfo = correct_slice(p, T, np.exp(k[used]), w["bid"][used], w["ask"][used], w["mid"][used],
                                     prev=prev_curve, caps=caps)
        info["checks"] = dict(info["checks"])
        info["checks"]["butterfly_curve"] = arbitrage.curve_butterfly(curve)
        if prev_curve is not None:  # the curve never goes below the earlier one (its floor): by construction
            info["checks"]["calendar"] = arbitrage.Check("calendar", curve.floor is prev_curve, 0.0)
        stats = _slice_stats(curve.total_variance, T, k, w["mid"], w["bid"], w["ask"], used, info, w["k_min"],
                             w["k_max"], w["k_itm"], w["mid_itm"])
        stats["outliers"] = int(w["out"].sum())
        stats["prior_k_range"] = [float(k[w["fitted"]].min()), float(k[w["fitted"]].max())]
        stats["prior_inside_share_near"] = _prior_share(p, T, k, w["bid"], w["ask"])
        stats["correction"] = cinfo
        if "calendar" in info["checks"]:
            calendar_ok &= info["checks"]["calendar"].ok
        e = w["e"]
        slices.append(Slice(str(names[e]), T, w["F"], float(rate_all[first[e]]), p, stats, curve=curve))
        prev_curve = curve
    if not slices:
        raise ValueError("no expiry has enough quotes to fit")
    und = underlying or (str(chain_out["underlying"].iloc[0]) if "underlying" in chain_out.columns else "")
    qt = quote_time or (str(chain_out["quote_date"].iloc[0]) if "quote_date" in chain_out.columns else "")
    # the SVI prior with the arbitrage-free correction towards the quotes where a slice has one
    surface = Surface(und, qt, slices, "svi+correction" if any(s.curve is not None for s in slices) else "svi")
    # every check of arbitrage.check_surface was made by the fit, on its grids (each slice's
    # own, the calendar's against the slice before), and is in the slices' stats
    two = sum(s.stats["near_two_sided"] for s in slices)
    surface.stats = {"expiries": len(slices), "skipped": skipped,
                     "arbitrage_free": all(s.stats["arbitrage_free"] for s in slices), "calendar_ok": calendar_ok,
                     "inside_share_near": sum(s.stats["near_inside"] for s in slices) / two if two else float("nan"),
                     "rms_vol_pts": float(np.median([s.stats["rms_vol_pts"] for s in slices]))}
    surface.stats["warnings"] = report.warning_lines(surface)
    return surface


__all__ = ["COLUMNS", "fit_slice", "fit_surface", "outliers", "quasi_explicit"]
