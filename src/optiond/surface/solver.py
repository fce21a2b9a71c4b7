"""The slice fit's solver: a box-bounded Levenberg-Marquardt for one raw-SVI slice, compiled.

The problem (:mod:`optiond.surface.fit` states it in full) has five parameters, in implied
variance units ``x = (v / T, b / T, rho, m, sigma)`` with ``v = a + b sigma sqrt(1 - rho^2)`` the
slice's minimum total variance, and a least-squares objective ``sum r_i^2`` whose rows are

* per quote, in implied volatility ``f = sqrt(w(k) / T)``, weighted ``1 / sqrt(n)``: the distance
  outside ``[iv_bid, iv_ask]`` and ``mid_pull`` times the distance to the mid;
* per point of the butterfly grid (``G`` points), ``penalty * min(g(k) - g_margin, 0) / sqrt(G)``
  with ``g`` Gatheral & Jacquier's (2014, eq. 2.1) density function;
* Lee's bound, ``penalty * min(lee_max - b (1 + |rho|), 0)``;
* with an earlier slice, per point of the calendar grid (``C`` points),
  ``penalty * min(w(k) - w_prev(k) - cal_margin T, 0) / (T sqrt(C))``.

Summed over a grid, the squares are the mean square of the violations that
:mod:`optiond.surface.fit` describes, with one Gauss-Newton row per point.

The method is Levenberg-Marquardt with Marquardt's diagonal scaling (Nocedal & Wright 2006,
"Numerical Optimization", §10.3), steps projected onto the box and the variables at an active
bound (at the bound with the gradient pushing out) held fixed in the step (the
projected-Newton rule of Bertsekas 1982, "Projected Newton methods for optimization problems
with simple constraints", SIAM J. Control Optim. 20(2)). It stops when a step lowers the
objective by less than ``tol`` relative, when the projected gradient vanishes, or after
``max_iter`` accepted steps. The Jacobian is analytic (closed forms of raw SVI and of ``g``);
the objective never increases from one iterate to the next.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..kernels.warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

#: the damping's start, its factors on success and failure, and where it gives up
_LAM0, _LAM_DOWN, _LAM_UP, _LAM_MAX = 1e-3, 0.3, 10.0, 1e12


@njit(cache=True)
def _w(x, k):
    """``w(k)`` at the unscaled parameters ``(v, b, rho, m, sigma)`` (no gradient)."""
    d = k - x[3]
    return x[0] + x[1] * (x[2] * d + math.sqrt(d * d + x[4] * x[4]) - x[4] * math.sqrt(1.0 - x[2] * x[2]))


@njit(cache=True)
def _w_grad(x, T, k, out):
    """``w(k)`` at the unscaled parameters ``(v, b, rho, m, sigma)``; ``out`` gets ``dw/dx`` in the
    scaled variables (``v / T``, ``b / T``, ...)."""
    v, b, r, m, s = x[0], x[1], x[2], x[3], x[4]
    c = math.sqrt(1.0 - r * r)
    d = k - m
    R = math.sqrt(d * d + s * s)
    out[0] = T
    out[1] = (r * d + R - s * c) * T
    out[2] = b * (d + s * r / c)
    out[3] = -b * (r + d / R)
    out[4] = b * (s / R - c)
    return v + b * (r * d + R - s * c)


@njit(cache=True)
def _g(x, k):
    """Gatheral & Jacquier's ``g(k)`` at the unscaled parameters (no gradient)."""
    v, b, r, m, s = x[0], x[1], x[2], x[3], x[4]
    d = k - m
    R = math.sqrt(d * d + s * s)
    w = v + b * (r * d + R - s * math.sqrt(1.0 - r * r))
    w1 = b * (r + d / R)
    u = 1.0 - k * w1 / (2.0 * w)
    return u * u - 0.25 * w1 * w1 * (1.0 / w + 0.25) + 0.5 * b * s * s / (R * R * R)


@njit(cache=True)
def _g_grad(x, T, k, out):
    """Gatheral & Jacquier's ``g(k)``; ``out`` gets ``dg/dx`` in the scaled variables."""
    v, b, r, m, s = x[0], x[1], x[2], x[3], x[4]
    c = math.sqrt(1.0 - r * r)
    d = k - m
    R = math.sqrt(d * d + s * s)
    R3 = R * R * R
    R5 = R3 * R * R
    w = v + b * (r * d + R - s * c)
    w1 = b * (r + d / R)
    w2 = b * s * s / R3
    u = 1.0 - k * w1 / (2.0 * w)
    g = u * u - 0.25 * w1 * w1 * (1.0 / w + 0.25) + 0.5 * w2
    gw = u * k * w1 / (w * w) + 0.25 * w1 * w1 / (w * w)
    gw1 = -u * k / w - 0.5 * w1 * (1.0 / w + 0.25)
    # (dw, dw', dw'') / d(v, b, rho, m, sigma), then the scale of v and b
    out[0] = gw * T
    out[1] = (gw * (r * d + R - s * c) + gw1 * (r + d / R) + 0.5 * s * s / R3) * T
    out[2] = gw * b * (d + s * r / c) + gw1 * b
    out[3] = gw * (-b * (r + d / R)) + gw1 * (-b * s * s / R3) + 0.5 * 3.0 * b * s * s * d / R5
    out[4] = gw * b * (s / R - c) + gw1 * (-b * d * s / R3) + 0.5 * b * (2.0 * s / R3 - 3.0 * s * s * s / R5)
    return g


@njit(cache=True)
def _unscale(xs, T, x):
    x[0] = xs[0] * T
    x[1] = xs[1] * T
    x[2] = xs[2]
    x[3] = xs[3]
    x[4] = xs[4]


@njit(cache=True)
def _accumulate(A, gvec, row, scale, gsum, q2):
    """Rows that are multiples of one gradient ``u = scale * row``, with ``sum c_j r_j = gsum`` and
    ``sum c_j^2 = q2``: ``A += q2 u u^T`` (upper triangle; :func:`lm` mirrors it), ``gvec += gsum u``."""
    for a in range(5):
        ua = scale * row[a]
        gvec[a] += gsum * ua
        for b in range(a, 5):
            A[a, b] += q2 * ua * scale * row[b]


@njit(cache=True)
def _system(xs, T, k, lo, hi, mid, grid, cgrid, w_prev, penalty, mid_pull, g_margin, cal_margin, lee_max,
            want, A, gvec):
    """The objective at ``xs``; with ``want`` also ``A = J^T J`` and ``gvec = J^T r``."""
    x = np.empty(5)
    _unscale(xs, T, x)
    row = np.empty(5)
    if want:
        A[:, :] = 0.0
        gvec[:] = 0.0
    cost = 0.0
    n = k.size
    wq = 1.0 / math.sqrt(n)
    pull = mid_pull * wq
    for i in range(n):
        w = _w_grad(x, T, k[i], row) if want else _w(x, k[i])
        f = math.sqrt(w / T)
        # the mid's row and the band's are multiples of one gradient, d f / d x
        res = pull * (f - mid[i])
        cost += res * res
        gsum, q2 = pull * res, pull * pull
        if f < lo[i] or f > hi[i]:
            sgn = -wq if f < lo[i] else wq
            res = sgn * (f - (lo[i] if f < lo[i] else hi[i]))
            cost += res * res
            gsum += sgn * res
            q2 += wq * wq
        if want:
            _accumulate(A, gvec, row, 1.0 / (2.0 * f * T), gsum, q2)
    G = grid.size
    scale_g = penalty / math.sqrt(G) if G > 0 else 0.0  # no grid (the fit alone): no butterfly rows
    for i in range(G):
        viol = _g(x, grid[i]) - g_margin
        if viol < 0.0:
            res = scale_g * viol
            cost += res * res
            if want:
                _g_grad(x, T, grid[i], row)
                _accumulate(A, gvec, row, scale_g, res, 1.0)
    lee = lee_max - x[1] * (1.0 + abs(x[2]))
    if lee < 0.0:
        res = penalty * lee
        cost += res * res
        if want:
            row[:] = 0.0
            row[1] = -penalty * (1.0 + abs(x[2])) * T
            row[2] = -penalty * x[1] * (1.0 if x[2] >= 0.0 else -1.0)
            _accumulate(A, gvec, row, 1.0, res, 1.0)
    C = cgrid.size
    if C > 0:
        scale_c = penalty / (T * math.sqrt(C))
        for i in range(C):
            viol = _w(x, cgrid[i]) - w_prev[i] - cal_margin * T
            if viol < 0.0:
                res = scale_c * viol
                cost += res * res
                if want:
                    _w_grad(x, T, cgrid[i], row)
                    _accumulate(A, gvec, row, scale_c, res, 1.0)
    if want:
        for a in range(5):
            for b in range(a):
                A[a, b] = A[b, a]
    return cost


@njit(cache=True)
def lm(x0, lo_x, hi_x, T, k, lo, hi, mid, grid, cgrid, w_prev, penalty, mid_pull, g_margin, cal_margin, lee_max,
       max_iter, tol):
    """Fit one slice from ``x0`` (scaled variables, shape (5,), inside ``[lo_x, hi_x]``).

    Args:
        k, lo, hi, mid: the quotes' log-moneyness and band and mid in implied volatility,
            shape (n,) (``lo = 0``, ``hi = inf`` where a side is open).
        grid: the butterfly grid, shape (G,); cgrid, w_prev: the calendar grid and the earlier
            slice's total variance on it, shape (C,) (C = 0: no calendar rows).
        penalty, mid_pull, g_margin, cal_margin, lee_max: the objective's weights and margins
            (module docstring).
        max_iter: accepted steps at most; tol: the relative decrease that stops it.

    Returns:
        ``(x, cost, evaluations)``: the last iterate (scaled), the objective there (sum of
        squares) and the number of objective evaluations.
    """
    x = x0.copy()
    A = np.empty((5, 5))
    gv = np.empty(5)
    cost = _system(x, T, k, lo, hi, mid, grid, cgrid, w_prev, penalty, mid_pull, g_margin, cal_margin, lee_max,
                   True, A, gv)
    nev = 1
    lam = _LAM0
    M = np.empty((5, 5))
    rhs = np.empty(5)
    xn = np.empty(5)
    accepted = 0
    while accepted < max_iter and lam < _LAM_MAX:
        # the variables at an active bound stay where they are in this step
        free = np.ones(5, dtype=np.bool_)
        pg = 0.0
        for a in range(5):
            if (x[a] <= lo_x[a] and gv[a] > 0.0) or (x[a] >= hi_x[a] and gv[a] < 0.0):
                free[a] = False
            else:
                pg = max(pg, abs(gv[a]) * max(hi_x[a] - lo_x[a], 1.0))
        if pg <= 1e-300:  # every variable pinned at a bound, or a stationary point
            break
        for a in range(5):
            for bb in range(5):
                M[a, bb] = A[a, bb] if (free[a] and free[bb]) else 0.0
            d = A[a, a] if A[a, a] > 1e-300 else 1e-300
            M[a, a] = (A[a, a] + lam * d) if free[a] else 1.0
            rhs[a] = -gv[a] if free[a] else 0.0
        step = np.linalg.solve(M, rhs)
        for a in range(5):
            xn[a] = min(max(x[a] + step[a], lo_x[a]), hi_x[a])
        cn = _system(xn, T, k, lo, hi, mid, grid, cgrid, w_prev, penalty, mid_pull, g_margin, cal_margin,
                     lee_max, False, A, gv)
        nev += 1
        if cn < cost:
            rel = (cost - cn) / max(cost, 1e-300)
            x[:] = xn
            cost = _system(x, T, k, lo, hi, mid, grid, cgrid, w_prev, penalty, mid_pull, g_margin, cal_margin,
                           lee_max, True, A, gv)
            nev += 1
            accepted += 1
            lam = max(lam * _LAM_DOWN, 1e-12)
            if rel < tol:
                break
        else:
            lam *= _LAM_UP
    return x, cost, nev


@njit(cache=True)
def objective(xs, T, k, lo, hi, mid, grid, cgrid, w_prev, penalty, mid_pull, g_margin, cal_margin, lee_max):
    """The objective (sum of squares) at the scaled parameters ``xs``; arguments as :func:`lm`."""
    A = np.empty((5, 5))
    gv = np.empty(5)
    return _system(xs, T, k, lo, hi, mid, grid, cgrid, w_prev, penalty, mid_pull, g_margin, cal_margin, lee_max,
                   False, A, gv)


@njit(cache=True)
def qe_inner(k, w, sw, m, s):
    """Zeliade's (2009) inner problem for a batch of ``(m, sigma)`` (shape (G,) each): with
    ``y = (k - m) / sigma`` and ``z = sqrt(y^2 + 1)`` the weighted least squares of
    ``w ~ a + d y + c z`` (weights ``sw^2``, shape (n,)) by its 3 x 3 normal equations (Cramer's
    rule), then clipped to the domain ``0 <= c <= 2 sigma``, ``|d| <= min(c, 2 sigma - c)`` (Lee's
    bound and ``|rho| <= 1``) with ``a`` re-solved for the clipped ``(d, c)``; the objective from
    the same weighted sums. Returns ``(params (G, 3) as (a, d, c), objective (G,))``."""
    G, n = m.size, k.size
    P = np.empty((G, 3))
    f = np.empty(G)
    for g in range(G):
        S1 = Sy = Sz = Syy = Syz = Szz = Sw = Swy = Swz = Sww = 0.0
        for i in range(n):
            q = sw[i] * sw[i]
            y = (k[i] - m[g]) / s[g]
            z = math.sqrt(y * y + 1.0)
            S1 += q
            Sy += q * y
            Sz += q * z
            Syy += q * y * y
            Syz += q * y * z
            Szz += q * z * z
            Sw += q * w[i]
            Swy += q * w[i] * y
            Swz += q * w[i] * z
            Sww += q * w[i] * w[i]
        # [[S1, Sy, Sz], [Sy, Syy, Syz], [Sz, Syz, Szz]] (a, d, c) = (Sw, Swy, Swz)
        e = 1e-14
        a11, a22, a33 = S1 + e, Syy + e, Szz + e
        c11 = a22 * a33 - Syz * Syz
        c12 = Sz * Syz - Sy * a33
        c13 = Sy * Syz - a22 * Sz
        det = a11 * c11 + Sy * c12 + Sz * c13
        d = (Sw * c12 + Swy * (a11 * a33 - Sz * Sz) + Swz * (Sy * Sz - a11 * Syz)) / det
        c = (Sw * c13 + Swy * (Sz * Sy - a11 * Syz) + Swz * (a11 * a22 - Sy * Sy)) / det
        c = min(max(c, 0.0), 2.0 * s[g])
        lim = min(c, 2.0 * s[g] - c)
        d = min(max(d, -lim), lim)
        a0 = (Sw - d * Sy - c * Sz) / S1
        # sum q (a0 + d y + c z - w)^2 from the sums
        cost = (a0 * a0 * S1 + d * d * Syy + c * c * Szz + Sww + 2.0 * a0 * d * Sy + 2.0 * a0 * c * Sz
                + 2.0 * d * c * Syz - 2.0 * a0 * Sw - 2.0 * d * Swy - 2.0 * c * Swz)
        P[g, 0], P[g, 1], P[g, 2] = a0, d, c
        f[g] = max(cost, 0.0)
    return P, f


__all__ = ["lm", "objective", "qe_inner"]
