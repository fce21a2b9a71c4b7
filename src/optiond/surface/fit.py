"""The fit of a priced chain: one raw-SVI slice per expiry, without static arbitrage.

Per expiry (:func:`fit_slice`), on the out-of-the-money quote of each strike (the call for
``K >= F_T``, the put below) whose mid implied volatility solved:

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
   ``(m, sigma)`` at once (3 x 3 normal equations) and the best point refined by Nelder-Mead
   (``scipy.optimize.minimize``). Irregular short smiles (SPY 2026-02-17: 41 % at k = -0.12,
   11 % at +0.02, 18 % at +0.05) have several basins, so the next best grid points (one per
   ``sigma``) and a fixed seed are starts too; each gets a short run of the final fit and
   the best of them is run to convergence.
3. **Fit** (``scipy.optimize.least_squares``, trust-region reflective with bounds, analytic
   Jacobian) in implied-variance units ``x = (v / T, b / T, rho, m, sigma)`` where ``v = a +
   b sigma sqrt(1 - rho^2)`` is the slice's minimum total variance: the bound
   ``v / T >= V_MIN`` keeps ``w > 0`` everywhere by construction, so ``g`` is finite everywhere.
   Residuals in implied volatility (each quote's term weighted ``1 / n``): zero inside
   ``[iv_bid, iv_ask]`` and the distance to the band outside, plus :data:`MID_PULL` times the
   distance to the mid; and :data:`PENALTY` times the root mean square of the violations, on
   the checks' own grid (:func:`optiond.surface.arbitrage.check_grid`, 2001 points), of
   Gatheral & Jacquier's ``g(k) >= G_MARGIN`` (butterfly), Lee's ``b (1 + |rho|) <= LEE_MAX``
   and, for every slice after the first, ``w(k, t_i) - w(k, t_{i-1}) >= CAL_MARGIN T_i``
   (calendar, against the slice fitted before it, on the grid of both slices' quoted ranges:
   the grid :func:`~optiond.surface.arbitrage.check_surface` checks). A slice that still fails
   a check is fitted again with ten times the penalty (at most :data:`RETRIES` times), the
   second best start is tried, and a violation left after that is removed by SLSQP
   (``scipy.optimize.minimize``) with the same conditions as inequality constraints.

Measured on the bundled chains (the chain job's output; two-sided out-of-the-money quotes
with ``|k| < 0.1``): every slice passes every check of
:func:`~optiond.surface.arbitrage.check_surface` at tolerance 0 (butterfly, Lee, minimum
variance, calendar); inside the fitted bid/ask SPX 2025-10-01 62.6 % (13 expiries, median RMS
error over the fitted range 0.040 vol points), QQQ 2026-02-13 46.7 % (29 expiries, 0.127) and
SPY 2026-02-13 20.2 % (32 expiries, 0.117). The fit is deterministic: two fits of one chain
give the same parameters to the bit.

Why per-expiry SVI with the calendar as a constraint, not SSVI (Gatheral & Jacquier 2014, §4):
SSVI ties every expiry's skew and curvature to one function of the ATM total variance, and
the bundled chains' short expiries (SPY and QQQ from 4 days) do not follow one such function;
per-expiry slices keep each expiry's own shape and the calendar condition is imposed where it
binds.

What the bundled chains allow (priced by the chain job; measured): the quotes of SPY and QQQ
2026-02-13 carry butterfly arbitrage themselves, 12.2 % and 5.0 % of consecutive-strike
triplets cost less than nothing at bid/ask (SPX 2025-10-01: none), so no arbitrage-free smile
lies inside every spread there; an unconstrained band fit reaches about SPX 75 %, QQQ 55 % and
SPY 22 % on its best range. Statistics per expiry (:func:`fit_surface`) say how close the fit
comes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, minimize

from ..chain import labels
from . import arbitrage
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
#: starts of the final fit (the quasi-explicit one and the next best of its grid) and the
#: optimiser's evaluation budget per start
STARTS = 4
MAX_NFEV = 400
SCOUT_NFEV = 40
TOL = 1e-8
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
    """Zeliade's inner problem for a batch of ``(m, sigma)``: the weighted least squares in
    ``(a, d, c)`` clipped to the domain; returns ``(params (G, 3), objective (G,))``."""
    y = (k[None, :] - m[:, None]) / s[:, None]
    X = np.stack([np.ones_like(y), y, np.sqrt(y * y + 1.0)], axis=2) * sw[None, :, None]
    t = w * sw
    sol = np.linalg.solve(np.einsum("gni,gnj->gij", X, X) + 1e-14 * np.eye(3),
                          np.einsum("gni,n->gi", X, t)[:, :, None])[:, :, 0]
    c = np.clip(sol[:, 2], 0.0, 2.0 * s)
    e = np.minimum(c, 2.0 * s - c)
    d = np.clip(sol[:, 1], -e, e)
    a = np.einsum("gn,n->g", t[None, :] - (X[:, :, 1] * d[:, None] + X[:, :, 2] * c[:, None]), sw) / (sw @ sw)
    p = np.stack([a, d, c], 1)
    r = np.einsum("gni,gi->gn", X, p) - t[None, :]
    return p, np.einsum("gn,gn->g", r, r)


def _qe_grid(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mg, sg = np.meshgrid(np.linspace(k.min(), k.max(), 12), np.geomspace(1e-3, 1.0, 12))
    return mg.ravel(), sg.ravel()


def _to_svi(m: float, s: float, adc: np.ndarray) -> SVI:
    a, d, c = map(float, adc)
    return SVI(a, c / s, d / c if c > 0 else 0.0, float(m), float(s))


def quasi_explicit(k: np.ndarray, w: np.ndarray, weights: np.ndarray | None = None) -> SVI:
    """Zeliade's quasi-explicit start: for each ``(m, sigma)`` the weighted least squares in
    ``(a, d, c)`` (clipped to ``0 <= c <= 2 sigma``, ``|d| <= min(c, 2 sigma - c)``: Lee and
    ``|rho| <= 1``), the best ``(m, sigma)`` of a 12 x 12 grid refined by Nelder-Mead.

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
    mg, sg = _qe_grid(k)
    _, f = _inner(k, w, sw, mg, sg)
    j = int(np.argmin(f))
    x0 = np.array([mg[j], math.log(sg[j])])
    res = minimize(lambda x: float(_inner(k, w, sw, np.array([x[0]]), np.array([math.exp(x[1])]))[1][0]), x0,
                   method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-16, "maxiter": 800})
    m, s = float(res.x[0]), math.exp(float(res.x[1]))
    return _to_svi(m, s, _inner(k, w, sw, np.array([m]), np.array([s]))[0][0])


def _starts(k: np.ndarray, w: np.ndarray, n: int) -> list[SVI]:
    """Starts of the final fit: the quasi-explicit solution and the inner solutions of the
    next best ``(m, sigma)`` of its grid (at most one per ``sigma`` row), plus a fixed symmetric
    seed; irregular short smiles have several basins."""
    sw = np.ones_like(k)
    out = [quasi_explicit(k, w)]
    mg, sg = _qe_grid(k)
    P, f = _inner(k, w, sw, mg, sg)
    seen: set[float] = set()
    for j in np.argsort(f, kind="stable"):
        if len(out) >= n:
            break
        if sg[j] in seen:
            continue
        seen.add(sg[j])
        out.append(_to_svi(mg[j], sg[j], P[j]))
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


def _w_jac(x: np.ndarray, k: np.ndarray, second: bool = False):
    """``w`` and its gradient in ``x = (v, b, rho, m, sigma)``, shape (n, 5); with ``second``
    also ``w'``, ``w''`` (in ``k``) and their gradients (closed forms of raw SVI)."""
    v, b, r, m, s = x
    d = k - m
    R = np.sqrt(d * d + s * s)
    c = math.sqrt(1.0 - r * r)
    w = v + b * (r * d + R - s * c)
    one = np.ones_like(k)
    J = np.stack([one, r * d + R - s * c, b * (d + s * r / c) * one, -b * (r + d / R), b * (s / R - c)], axis=1)
    if not second:
        return w, J
    R3 = R * R * R
    w1 = b * (r + d / R)
    w2 = b * s * s / R3
    J1 = np.stack([0.0 * one, r + d / R, b * one, -b * s * s / R3, -b * d * s / R3], axis=1)
    J2 = np.stack([0.0 * one, s * s / R3, 0.0 * one, 3.0 * b * s * s * d / (R3 * R * R),
                   b * (2.0 * s / R3 - 3.0 * s ** 3 / (R3 * R * R))], axis=1)
    return w, J, w1, J1, w2, J2


def _g_jac(x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gatheral & Jacquier's ``g`` and its gradient in ``x``, shape (n, 5) (chain rule through
    ``w``, ``w'``, ``w''``)."""
    w, J, w1, J1, w2, J2 = _w_jac(x, k, True)
    u = 1.0 - k * w1 / (2.0 * w)
    g = u * u - 0.25 * w1 * w1 * (1.0 / w + 0.25) + 0.5 * w2
    dg_dw = u * k * w1 / (w * w) + 0.25 * w1 * w1 / (w * w)
    dg_dw1 = -u * k / w - 0.5 * w1 * (1.0 / w + 0.25)
    return g, dg_dw[:, None] * J + dg_dw1[:, None] * J1 + 0.5 * J2


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
        against ``prev``), ``nfev``, the final penalty weight and ``ok`` (every check passes).

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
    grid = arbitrage.check_grid(k_min, k_max)
    if prev is not None:
        pk = prev_k_grid if prev_k_grid is not None else (k_min, k_max)
        cgrid = arbitrage.check_grid(min(k_min, pk[0]), max(k_max, pk[1]))  # the check's own grid
        w_prev = total_variance(prev, cgrid)
    # the optimiser works in implied variance (v / T, b / T, rho, m, sigma): one scale for a
    # 4-day and a 3-year slice; v >= V_MIN keeps w > 0 everywhere, so g is finite everywhere
    scale = np.array([T, T, 1.0, 1.0, 1.0])
    lo_x = np.array([V_MIN, 0.0, -RHO_MAX, -2.0, SIGMA_MIN])
    hi_x = np.array([5.0, 2.0 / T, RHO_MAX, 2.0, 3.0])
    wq = np.sqrt(1.0 / k.size)  # the quotes' terms as a mean, the penalties' as a mean over the grid

    def residuals(x: np.ndarray, penalty: float) -> np.ndarray:
        q = x * scale
        f = np.sqrt(_w(q, k) / T)
        band = np.maximum(lo - f, 0.0) + np.maximum(f - hi, 0.0)
        # each condition's violations as one residual, the root of their mean square: the same
        # objective as one residual per grid point, a short vector
        pen = [math.sqrt(float(np.mean(np.minimum(_g(q, grid) - G_MARGIN, 0.0) ** 2))),
               min(0.0, LEE_MAX - q[1] * (1.0 + abs(q[2])))]
        if prev is not None:
            pen.append(math.sqrt(float(np.mean(np.minimum(_w(q, cgrid) - w_prev - CAL_MARGIN * T, 0.0) ** 2))) / T)
        return np.concatenate([band * wq, MID_PULL * wq * (f - mid), penalty * np.array(pen)])

    def jacobian(x: np.ndarray, penalty: float) -> np.ndarray:
        q = x * scale
        w, Jw = _w_jac(q, k)
        f = np.sqrt(w / T)
        Jf = Jw / (2.0 * f * T)[:, None]
        sgn = np.where(lo > f, -1.0, 0.0) + np.where(f > hi, 1.0, 0.0)
        rows = [sgn[:, None] * Jf * wq, MID_PULL * wq * Jf]
        g, Jg = _g_jac(q, grid)
        viol = np.minimum(g - G_MARGIN, 0.0)
        rg = math.sqrt(float(np.mean(viol ** 2)))
        rows.append((viol @ Jg / (grid.size * rg) if rg > 0 else np.zeros(5))[None, :] * penalty)
        lee_row = np.zeros(5)
        if LEE_MAX - q[1] * (1.0 + abs(q[2])) < 0:
            lee_row[1], lee_row[2] = -(1.0 + abs(q[2])), -q[1] * math.copysign(1.0, q[2])
        rows.append(lee_row[None, :] * penalty)
        if prev is not None:
            wc, Jc = _w_jac(q, cgrid)
            vc = np.minimum(wc - w_prev - CAL_MARGIN * T, 0.0)
            rc = math.sqrt(float(np.mean(vc ** 2)))
            rows.append((vc @ Jc / (cgrid.size * rc * T) if rc > 0 else np.zeros(5))[None, :] * penalty)
        return np.concatenate(rows) * scale[None, :]

    def checks_of(p: SVI) -> dict:
        c = arbitrage.check_slice(p, k_min, k_max)
        if prev is not None:
            c["calendar"] = arbitrage.calendar(prev, p, min(k_min, pk[0]), max(k_max, pk[1]))
        return c

    nfev = 0

    def run(x0: np.ndarray, penalty: float, max_nfev: int):
        nonlocal nfev
        r = least_squares(residuals, x0, jac=jacobian, bounds=(lo_x, hi_x), args=(penalty,), x_scale="jac",
                          xtol=TOL, ftol=TOL, gtol=TOL, max_nfev=max_nfev)
        nfev += int(r.nfev)
        return r

    # a short run from each start, the rest from the best of them
    tries = []
    for p0 in _starts(k, mid * mid * T, STARTS):
        x0 = np.clip(_x_of(p0) / scale, lo_x, hi_x)
        x0 = np.clip(x0, lo_x + 1e-9 * (hi_x - lo_x), hi_x - 1e-9 * (hi_x - lo_x))
        r = run(x0, PENALTY, SCOUT_NFEV)
        tries.append((float(r.cost), len(tries), r.x))
    tries.sort(key=lambda t: t[:2])
    best = None
    for _, _, x0 in tries[:2]:
        penalty = PENALTY
        for attempt in range(RETRIES + 1):
            r = run(x0, penalty, MAX_NFEV)
            p = _svi_of(r.x * scale)
            checks = checks_of(p)
            good = all(c.ok for c in checks.values())
            if good:
                break
            x0, penalty = r.x, penalty * 10.0
        fit = float(np.sum(residuals(r.x, 0.0) ** 2))
        key = (not good, fit)
        if best is None or key < best[0]:
            best = (key, p, checks, penalty)
        if good:
            break
    (_, _), p, checks, penalty = best
    if not all(c.ok for c in checks.values()):
        # the penalties left a violation: the constraints as such (SLSQP) from the best point
        def cons(x: np.ndarray) -> np.ndarray:
            q = x * scale
            out = [_g(q, grid) - G_MARGIN, [LEE_MAX - q[1] * (1.0 + abs(q[2]))]]
            if prev is not None:
                out.append((_w(q, cgrid) - w_prev) / T - CAL_MARGIN)
            return np.concatenate(out)

        x0 = np.clip(_x_of(p) / scale, lo_x, hi_x)
        r = minimize(lambda x: float(np.sum(residuals(x, 0.0) ** 2)), x0, method="SLSQP",
                     bounds=list(zip(lo_x, hi_x)), constraints=[{"type": "ineq", "fun": cons}],
                     options={"maxiter": 200, "ftol": 1e-14})
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
    med = np.median(s[others], axis=1)
    sp = np.zeros(n) if spread is None else np.nan_to_num(np.asarray(spread, dtype=np.float64)[o], nan=0.0)
    bad = (np.abs(s - med) > OUTLIER_REL * med) & (np.abs(s - med) > OUTLIER_SPREADS * sp)
    out = np.zeros(n, dtype=bool)
    out[o] = bad
    return out


def otm_mask(rows: pd.DataFrame, forward: float) -> np.ndarray:
    """Which rows of the chain job's output are out of the money on the expiry's ``forward``:
    puts with ``K < F``, calls with ``K >= F`` (the ``type`` labels as the chain job reads them,
    :func:`optiond.chain.labels`); shape (len(rows),), bool."""
    kind = labels(rows["type"])
    K = pd.to_numeric(rows["strike"], errors="coerce").to_numpy(dtype=np.float64)
    return np.where(K >= forward, kind == "call", (kind == "put") & (K < forward))


def _otm_quotes(g: pd.DataFrame, F: float) -> pd.DataFrame:
    ok = (g["status"].to_numpy() == "ok") & np.isfinite(g["iv"].to_numpy(dtype=np.float64))
    return g[otm_mask(g, F) & ok]


def _slice_stats(p: SVI, T: float, k: np.ndarray, mid: np.ndarray, bid: np.ndarray, ask: np.ndarray,
                 fitted: np.ndarray, info: dict, k_min: float, k_max: float) -> dict[str, Any]:
    f = np.sqrt(np.maximum(total_variance(p, k), 0.0) / T)
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
    confidence = (0.0 if not np.isfinite(inside_fit) else inside_fit) * min(1.0, n / 10.0) * (1.0 if ok else 0.5)
    return {"quotes": int(k.size), "fitted_quotes": n, "k_min": k_min, "k_max": k_max,
            "fit_k_range": [float(k[fitted].min()), float(k[fitted].max())],
            "rms_vol_pts": rms(fitted), "max_vol_pts": float(np.max(np.abs(err[fitted]))),
            "rms_vol_pts_near": rms(near), "rms_vol_pts_all": rms(np.ones_like(fitted)),
            "inside_share": inside_fit, "inside_share_near": share(near), "confidence": confidence,
            "near_two_sided": int((near & two).sum()), "near_inside": int(inside[near].sum()),
            "arbitrage_free": ok, "checks": {name: c.to_dict() for name, c in checks.items()}, "nfev": info["nfev"]}


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
        left out, the
        fitted range, RMS and max error in vol points, the share of two-sided quotes inside
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
    prev: SVI | None = None
    prev_range: tuple[float, float] | None = None
    order = chain_out.groupby("expiry", sort=False)["expiry_years"].first().sort_values()
    for expiry, T in order.items():
        g = chain_out[chain_out["expiry"] == expiry]
        T = float(T)
        F = float(g["forward"].iloc[0])
        q = _otm_quotes(g, F)
        k = np.log(q["strike"].to_numpy(dtype=np.float64) / F)
        mid = q["iv"].to_numpy(dtype=np.float64)
        bid = q["iv_bid"].to_numpy(dtype=np.float64)
        ask = q["iv_ask"].to_numpy(dtype=np.float64)
        if not (T > 0) or k.size < MIN_QUOTES:
            skipped.append(str(expiry))
            continue
        o = np.argsort(k)
        atm = float(np.interp(0.0, k[o], mid[o]))
        out = outliers(k, mid, ask - bid)
        fitted = (np.abs(k) <= max(RANGE_SD * atm * math.sqrt(T), RANGE_MIN)) & ~out
        if fitted.sum() < MIN_QUOTES:
            fitted = np.argsort(np.argsort(np.abs(k))) < MIN_QUOTES  # the nearest quotes
        k_min, k_max = float(k.min()), float(k.max())
        p, info = fit_slice(k[fitted], mid[fitted], bid[fitted], ask[fitted], T, prev=prev, k_grid=(k_min, k_max),
                            prev_k_grid=prev_range)
        stats = _slice_stats(p, T, k, mid, bid, ask, fitted, info, k_min, k_max)
        stats["outliers"] = int(out.sum())
        slices.append(Slice(str(expiry), T, F, float(g["rate"].iloc[0]), p, stats))
        prev, prev_range = p, (k_min, k_max)
    if not slices:
        raise ValueError("no expiry has enough quotes to fit")
    und = underlying or (str(chain_out["underlying"].iloc[0]) if "underlying" in chain_out.columns else "")
    qt = quote_time or (str(chain_out["quote_date"].iloc[0]) if "quote_date" in chain_out.columns else "")
    surface = Surface(und, qt, slices, "svi")
    chk = arbitrage.check_surface(surface)
    two = sum(s.stats["near_two_sided"] for s in slices)
    surface.stats = {"expiries": len(slices), "skipped": skipped, "arbitrage_free": bool(chk["ok"]),
                     "calendar_ok": all(c.ok for c in chk["calendar"]),
                     "inside_share_near": sum(s.stats["near_inside"] for s in slices) / two if two else float("nan"),
                     "rms_vol_pts": float(np.median([s.stats["rms_vol_pts"] for s in slices]))}
    return surface


__all__ = ["COLUMNS", "fit_slice", "fit_surface", "outliers", "quasi_explicit"]
