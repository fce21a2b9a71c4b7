"""The gold reference of the binomial method: the CRR pricer on the CPU (numba).

American and European, puts and calls, continuous dividend yield, and cash dividends on known
ex-dates (the spot model, :func:`crr_tree_div`: Vellekoop & Nieuwenhuis 2006); every GPU path of
:mod:`optiond.kernels.binomial` is tested against it.

The tree is Cox, Ross & Rubinstein (1979), "Option pricing: a simplified approach", J.
Financial Economics 7(3), §3: with ``dt = T/N``

    u = exp(sigma*sqrt(dt)),  d = 1/u,  p = (exp((r - q) dt) - d) / (u - d),
    V[t, j] = max(exercise[t, j], exp(-r dt) * (p V[t+1, j+1] + (1 - p) V[t+1, j]))

(the max only for American exercise), node ``j`` of level ``t`` at spot ``S u^(2j - t)``.

Implementation (the reference recurrence that the GPU kernels reproduce):

* O(N) memory: one value vector updated in place, ``V[j] <- pu V[j+1] + pd V[j]`` for
  ascending j (``pu = e^{-r dt} p``, ``pd = e^{-r dt} (1 - p)``);
* the exercise value is carried by a recurrence instead of a ``pow``/``exp`` per node: since
  ``S[t, j] = u S[t+1, j]``, the exercise vector obeys ``X[j] <- u X[j] + c`` with
  ``c = K(u - 1)`` for a call and ``K(1 - u)`` for a put: one FMA per node, no dependence
  between neighbouring j, so the inner loop vectorises. Every ``REANCHOR`` levels the
  vector is recomputed from ``exp`` so rounding cannot drift (relative drift < 64 eps; fewer
  levels where the step a is large, :func:`reanchor_period`);
* Greeks from the tree (Hull, *Options, Futures and Other Derivatives*, §21.1): delta and gamma
  from levels 1 and 2, theta from the level-2 centre node, ``(V[2,1] - V[0,0]) / (2 dt)``;
  vega, rho and the dividend rho by central differences of the tree price (bumps ``VEGA_BUMP``,
  ``RHO_BUMP`` on the rate, and ``RHO_BUMP`` on the dividend yield).

p must lie in [0, 1], i.e. ``sigma sqrt(dt) > |r - q| dt`` roughly; where it does not, the
public functions raise :class:`CRRProbabilityError` (or the engine marks the row) instead of
pricing with negative probabilities.
"""

from __future__ import annotations

import math
import threading

import numba as nb
import numpy as np

from ... import costs
from ...columns import as_columns
from ..black_scholes import bs_price_one
from ..rootfind import B, FB, IV_ABOVE, IV_BELOW, IV_INVALID, IV_NOT_CONVERGED, IV_OK, brent_init, brent_step
from ..warmup import announce_compiles, cache_variant

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

REANCHOR = 64
#: the largest growth e^(period a) of a rounding error through the exercise recurrence between
#: two re-anchorings (X <- u X + c multiplies it by u = e^a per level)
ANCHOR_GROWTH = 8.0
VEGA_BUMP = 1e-4
RHO_BUMP = 1e-4
MIN_IV, MAX_IV = 1e-4, 10.0


class CRRProbabilityError(ValueError):
    """The CRR up-probability p falls outside [0, 1] for these inputs and steps."""


@nb.njit(cache=True, nogil=True)
def crr_probability(T, r, q, sigma, N):
    """The CRR risk-neutral up-probability p for one option (scalar)."""
    dt = T / N
    a = sigma * math.sqrt(dt)
    u = math.exp(a)
    d = 1.0 / u
    return (math.exp((r - q) * dt) - d) / (u - d)


@nb.njit(cache=True, nogil=True)
def reanchor_period(a):
    """Levels between two re-anchorings of the exercise values for a tree of step ``a = sigma
    sqrt(dt)``: :data:`REANCHOR`, or fewer where ``e^(REANCHOR a)`` would exceed
    ``e^ANCHOR_GROWTH`` (a > 0.125: few steps and a high volatility, such as a root find's
    upper bracket, where 64 levels of the recurrence multiplied its rounding by up to e^64)."""
    return REANCHOR if REANCHOR * a <= ANCHOR_GROWTH else max(1, int(ANCHOR_GROWTH / a))


@nb.njit(cache=True, nogil=True)
def dividend_level(t_div, T, N):
    """The tree level a cash dividend paid at ``t_div`` (years, ``0 < t_div < T``) is applied on:
    the nearest level, at least 2 (the Greeks' levels 0 to 2 then lie before it) and at most N."""
    lev = int(math.floor(t_div / (T / N) + 0.5))
    return min(max(lev, 2), N)


@nb.njit(cache=True, nogil=True, fastmath=True)
def _apply_dividend(is_call, american, S, K, T, r, a, N, t, D, V, X, W):
    """Carry the level-``t`` values across a cash dividend ``D`` (Vellekoop & Nieuwenhuis 2006,
    §3): the value just before the ex-date at node ``S_j`` is the value just after it at
    ``S_j - D``, read from the level's ex-dividend values by quadratic interpolation in ``S``
    through the three nearest nodes (linear with two nodes); below the level's lowest node ``s0``
    (a drop wider than the lattice: an early or large dividend, a low volatility) by the line
    through the two lowest nodes, kept between the value at ``s0`` and the value at ``S = 0``
    (0 for a call, ``K`` for an American put, ``K e^{-r (T - t dt)}`` for a European put), as
    the value is monotone in ``S``; then the cum-dividend exercise value ``X`` (American).

    The level's nodes ``s0 u^(2i)`` come from one product chain (no exp per node) and the node
    at or below ``S_j - D`` from one forward walk (``S_j - D`` grows with ``j``): O(t) flops."""
    s0 = S * math.exp(-t * a)
    u2 = math.exp(2.0 * a)
    u = math.exp(a)
    if is_call:
        v0 = 0.0
    elif american:
        v0 = K
    else:
        v0 = K * math.exp(-r * (T - t * (T / N)))
    u4 = u2 * u2
    c0 = 1.0 / ((1.0 - u2) * (1.0 - u4))
    c1 = 1.0 / ((u2 - 1.0) * (u2 - u4))
    c2 = 1.0 / ((u4 - 1.0) * (u4 - u2))
    i = 0  # the node at or below x, its value and the one below (x grows with j)
    xi = s0
    xm = s0 / u2
    sj = s0  # node j of the level
    for j in range(t + 1):
        if j > 0:
            sj *= u2
        x = sj - D
        if x <= 0.0:
            W[j] = v0
            continue
        if x < s0:  # below the lattice: the lowest two nodes' line, between V[0] and v0
            e = V[0] + (V[1] - V[0]) * (x - s0) / (s0 * (u2 - 1.0))
            W[j] = min(max(e, min(V[0], v0)), max(V[0], v0))
            continue
        while i < t and xi * u2 <= x:
            i += 1
            xm = xi
            xi *= u2
        if t < 2:
            W[j] = V[i] if i == t else V[i] + (V[i + 1] - V[i]) * (x - xi) / (xi * (u2 - 1.0))
            continue
        # the three nearest nodes: i - 1, i, i + 1 when x is in node i's lower half
        if (x < xi * u and i > 0) or i == t - 1:
            j0, x0 = i - 1, xm
        else:
            j0, x0 = i, xi
        # Lagrange weights on the nodes x0, x0 u^2, x0 u^4 in e = x / x0 (one division)
        e = x / x0
        W[j] = (V[j0] * (e - u2) * (e - u4) * c0 + V[j0 + 1] * (e - 1.0) * (e - u4) * c1
                + V[j0 + 2] * (e - 1.0) * (e - u2) * c2)
    for j in range(t + 1):
        V[j] = max(W[j], X[j]) if american else W[j]


@nb.njit(cache=True, nogil=True, fastmath=True)
def crr_tree_div(is_call, american, S, K, T, r, q, sigma, N, V, X, W, levels, div_t, div_a, nd, smooth=False):
    """:func:`crr_tree` with cash dividends: the spot model (the stock drops by ``div_a[i]`` at
    ``div_t[i]``; QuantLib's ``CashDividendModel.Spot``) on the CRR lattice of the spot by the
    method of Vellekoop & Nieuwenhuis (2006), "Efficient pricing of derivatives on assets with
    discrete dividends", Applied Mathematical Finance 13(3): the lattice stays the
    dividend-free one, and at each ex-date's level (:func:`dividend_level`) the values are
    carried across the drop by interpolation (:func:`_apply_dividend`). A continuous yield
    ``q`` combines with the schedule.

    ``div_t``, ``div_a``: the first ``nd`` entries, times in ``(0, T)`` (years) ascending and
    cash amounts >= 0; ``W``: a third work vector of length >= N + 1. ``smooth``: the
    Broadie-Detemple smoothing (1996, "American option valuation: new bounds, approximations,
    and a comparison of existing methods", Rev. Financial Studies 9(4), §3, "BBS"): the values of
    level N - 1 are the Black-Scholes values of the last step (``tau = dt``; American: the max
    with exercise) instead of one step from the payoff (a dividend of the last step then applies
    at level N - 1); its error is smooth in 1/N, so two trees extrapolate (:func:`crr_batch`). Error: first order in
    1/N as the dividend-free tree (measured against QuantLib's finite differences in the
    tests; the interpolation adds O(1/N^1.5), the ex-date's rounding to a level O(1/N)).
    """
    dt = T / N
    a = sigma * math.sqrt(dt)
    u = math.exp(a)
    d = 1.0 / u
    disc = math.exp(-r * dt)
    p = (math.exp((r - q) * dt) - d) / (u - d)
    pu = disc * p
    pd = disc * (1.0 - p)
    sign = 1.0 if is_call else -1.0
    c = sign * K * (u - 1.0)
    anchor = reanchor_period(a)
    top = N - 1 if smooth else N  # the level the induction starts from
    for j in range(top + 1):
        sj = S * math.exp((2 * j - top) * a)
        x = sign * (sj - K)
        X[j] = x
        if smooth:
            e = bs_price_one(is_call, sj, K, dt, r, q, sigma)
            V[j] = max(e, x) if american else e
        else:
            V[j] = max(x, 0.0)
    for k in range(6):
        levels[k] = np.nan
    nxt = nd - 1  # the latest dividend not yet applied
    while nxt >= 0 and dividend_level(div_t[nxt], T, N) >= top:
        _apply_dividend(is_call, american, S, K, T, r, a, N, top, div_a[nxt], V, X, W)
        nxt -= 1
    if top == 2:
        levels[3] = V[0]
        levels[4] = V[1]
        levels[5] = V[2]
    elif top == 1:
        levels[1] = V[0]
        levels[2] = V[1]
    for t in range(top - 1, -1, -1):
        if american:
            if (N - t) % anchor == 0:
                for j in range(t + 1):
                    X[j] = sign * (S * math.exp((2 * j - t) * a) - K)
                for j in range(t + 1):
                    V[j] = max(pu * V[j + 1] + pd * V[j], X[j])
            else:
                for j in range(t + 1):
                    x = X[j] * u + c
                    X[j] = x
                    V[j] = max(pu * V[j + 1] + pd * V[j], x)
        else:
            for j in range(t + 1):
                V[j] = pu * V[j + 1] + pd * V[j]
        while nxt >= 0 and dividend_level(div_t[nxt], T, N) == t:
            _apply_dividend(is_call, american, S, K, T, r, a, N, t, div_a[nxt], V, X, W)
            nxt -= 1
        if t == 2:
            levels[3] = V[0]
            levels[4] = V[1]
            levels[5] = V[2]
        elif t == 1:
            levels[1] = V[0]
            levels[2] = V[1]
    levels[0] = V[0]
    return V[0]


#: an empty dividend schedule
_NO_DIVIDENDS = np.empty(0)


@nb.njit(cache=True, nogil=True, fastmath=True)
def crr_tree(is_call, american, S, K, T, r, q, sigma, N, V, X, levels):
    """Backward induction through one CRR tree; returns the price V[0, 0].

    ``V`` and ``X`` are work vectors of length >= N + 1. ``levels`` (length 6) receives the
    values of the first three levels, ``[V00, V10, V11, V20, V21, V22]`` (NaN where N < 2),
    for the tree Greeks. Assumes p in [0, 1] (checked by the callers).
    """
    return crr_tree_div(is_call, american, S, K, T, r, q, sigma, N, V, X, V, levels, _NO_DIVIDENDS, _NO_DIVIDENDS, 0)


@nb.njit(cache=True, nogil=True)
def _tree_greeks(S, T, sigma, N, lv):
    """delta, gamma, theta from the first tree levels (Hull §21.1)."""
    dt = T / N
    u = math.exp(sigma * math.sqrt(dt))
    d = 1.0 / u
    delta = (lv[2] - lv[1]) / (S * u - S * d)
    if N < 2:
        return delta, np.nan, np.nan
    su2, sd2 = S * u * u, S * d * d
    gamma = ((lv[5] - lv[4]) / (su2 - S) - (lv[4] - lv[3]) / (S - sd2)) / (0.5 * (su2 - sd2))
    theta = (lv[4] - lv[0]) / (2.0 * dt)
    return delta, gamma, theta


@nb.njit(cache=True, nogil=True)
def _p_ok(T, r, q, sigma, N):
    p = crr_probability(T, r, q, sigma, N)
    return p >= 0.0 and p <= 1.0


@nb.njit(cache=True, nogil=True)
def _tree(is_call, american, S, K, T, r, q, sigma, N, V, X, W, lv, div_t, div_a, nd, smooth):
    """The tree price: :func:`crr_tree` without dividends (``nd = 0``) and smoothing, else
    :func:`crr_tree_div`."""
    if nd == 0 and not smooth:
        return crr_tree(is_call, american, S, K, T, r, q, sigma, N, V, X, lv)
    return crr_tree_div(is_call, american, S, K, T, r, q, sigma, N, V, X, W, lv, div_t, div_a, nd, smooth)


@nb.njit(cache=True, nogil=True)
def _bumped_diff(is_call, american, S, K, T, r, q, sigma, N, V, X, W, lv, div_t, div_a, nd, smooth, base, which, h):
    """Central (or one-sided where p leaves [0, 1]) difference of the tree price in sigma
    (which=0), rate (which=1) or dividend yield (which=2)."""
    if which == 2:
        up_ok = _p_ok(T, r, q + h, sigma, N)
        dn_ok = _p_ok(T, r, q - h, sigma, N)
        up = _tree(is_call, american, S, K, T, r, q + h, sigma, N, V, X, W, lv, div_t, div_a, nd, smooth) if up_ok else base
        dn = _tree(is_call, american, S, K, T, r, q - h, sigma, N, V, X, W, lv, div_t, div_a, nd, smooth) if dn_ok else base
    elif which == 0:
        up_ok = _p_ok(T, r, q, sigma + h, N)
        dn_ok = sigma - h > 0.0 and _p_ok(T, r, q, sigma - h, N)
        up = _tree(is_call, american, S, K, T, r, q, sigma + h, N, V, X, W, lv, div_t, div_a, nd, smooth) if up_ok else base
        dn = _tree(is_call, american, S, K, T, r, q, sigma - h, N, V, X, W, lv, div_t, div_a, nd, smooth) if dn_ok else base
    else:
        up_ok = _p_ok(T, r + h, q, sigma, N)
        dn_ok = _p_ok(T, r - h, q, sigma, N)
        up = _tree(is_call, american, S, K, T, r + h, q, sigma, N, V, X, W, lv, div_t, div_a, nd, smooth) if up_ok else base
        dn = _tree(is_call, american, S, K, T, r - h, q, sigma, N, V, X, W, lv, div_t, div_a, nd, smooth) if dn_ok else base
    width = (h if up_ok else 0.0) + (h if dn_ok else 0.0)
    if width == 0.0:
        return np.nan
    return (up - dn) / width


@nb.njit(cache=True, nogil=True)
def crr_one(is_call, american, S, K, T, r, q, sigma, N, greeks):
    """One option (scalars) -> (price, delta, gamma, theta, vega, rho, dividend_rho): the batch
    loop's body, without array set-up, for single-contract requests (no dividends). Assumes p
    in [0, 1]."""
    V = np.empty(N + 1)
    X = np.empty(N + 1)
    lv = np.empty(6)
    price = crr_tree(is_call, american, S, K, T, r, q, sigma, N, V, X, lv)
    if not greeks:
        return price, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan
    delta, gamma, theta = _tree_greeks(S, T, sigma, N, lv)
    none = np.empty(0)
    vega = _bumped_diff(is_call, american, S, K, T, r, q, sigma, N, V, X, V, lv, none, none, 0, False, price, 0, VEGA_BUMP)
    rho = _bumped_diff(is_call, american, S, K, T, r, q, sigma, N, V, X, V, lv, none, none, 0, False, price, 1, RHO_BUMP)
    drho = _bumped_diff(is_call, american, S, K, T, r, q, sigma, N, V, X, V, lv, none, none, 0, False, price, 2, RHO_BUMP)
    return price, delta, gamma, theta, vega, rho, drho


def _batch_impl(kind, style, S, K, T, r, q, sigma, steps, greeks, div_t, div_a, nd, smooth):
    n = S.shape[0]
    out = np.full((7, n), np.nan)
    for i in nb.prange(n):
        N = steps[i]
        V = np.empty(N + 1)
        X = np.empty(N + 1)
        W = np.empty(N + 1 if nd[i] > 0 else 0)
        lv = np.empty(6)
        is_call = kind[i] == 1
        am = style[i] == 1
        dt_, da_, k = div_t[i], div_a[i], nd[i]
        price = _tree(is_call, am, S[i], K[i], T[i], r[i], q[i], sigma[i], N, V, X, W, lv, dt_, da_, k, smooth)
        out[0, i] = price
        if greeks:
            out[1, i], out[2, i], out[3, i] = _tree_greeks(S[i], T[i], sigma[i], N, lv)
            out[4, i] = _bumped_diff(is_call, am, S[i], K[i], T[i], r[i], q[i], sigma[i], N, V, X, W, lv, dt_, da_, k,
                                     smooth, price, 0, VEGA_BUMP)
            out[5, i] = _bumped_diff(is_call, am, S[i], K[i], T[i], r[i], q[i], sigma[i], N, V, X, W, lv, dt_, da_, k,
                                     smooth, price, 1, RHO_BUMP)
            out[6, i] = _bumped_diff(is_call, am, S[i], K[i], T[i], r[i], q[i], sigma[i], N, V, X, W, lv, dt_, da_, k,
                                     smooth, price, 2, RHO_BUMP)
    return out


# two names: numba's disk cache does not tell a threaded compilation from a serial one of one body
_batch_parallel = nb.njit(cache=True, nogil=True, parallel=True)(cache_variant(_batch_impl, "_batch_parallel"))
_batch_serial = nb.njit(cache=True, nogil=True)(cache_variant(_batch_impl, "_batch_serial"))

#: numba's default (workqueue) thread pool must not be entered from two threads at once
POOL_LOCK = threading.Lock()

#: below this many tree nodes in a batch the thread pool costs more than it saves
PARALLEL_MIN_NODES = 200_000


def probabilities(expiry, rate, dividend_yield, volatility, steps):
    """Vectorised CRR up-probability p, shape (n,)."""
    T, r, q, s, N = (np.asarray(a, dtype=np.float64) for a in (expiry, rate, dividend_yield, volatility, steps))
    dt = T / N
    a = s * np.sqrt(dt)
    u = np.exp(a)
    d = 1.0 / u
    return (np.exp((r - q) * dt) - d) / (u - d)


def probability_errors(expiry, rate, dividend_yield, volatility, steps) -> np.ndarray:
    """Indices of options whose CRR p is outside [0, 1] (they must not be priced)."""
    p = probabilities(expiry, rate, dividend_yield, volatility, steps)
    return np.flatnonzero(~((p >= 0.0) & (p <= 1.0)))


def probability_message(p: float) -> str:
    return (f"CRR probability p={p:.6g} outside [0,1]: too few steps for this rate, dividend "
            "yield and volatility (need sigma*sqrt(dt) > |r-q|*dt); raise steps")


#: the most cash dividends one option's schedule may hold
MAX_DIVIDENDS = 8


def cash_dividends(spot, expiry, times=None, amounts=None):
    """One option's cash dividends as the trees read them, for a batch.

    Args:
        spot (currency units), expiry (years): shape (n,).
        times (years from now), amounts (currency units): shape (n, m) or (m,) for one
            schedule for every option (None: no dividends); an entry with a NaN time or a zero
            amount is padding.

    Returns:
        ``(spot, times, amounts, count)``: the spot less the dividends paid now (``t = 0``:
        the option is priced on ``S - D``); per option the dividends paid before expiry
        (``0 < t < T``; later ones change nothing) first in time order, shape (n, m) with
        ``count`` (n,) entries used.
    """
    S = np.array(spot, dtype=np.float64)
    T = np.asarray(expiry, dtype=np.float64)
    n = S.shape[0]
    if times is None:
        return S, np.zeros((n, 0)), np.zeros((n, 0)), np.zeros(n, dtype=np.int64)
    t = np.broadcast_to(np.atleast_2d(np.asarray(times, dtype=np.float64)), (n, np.shape(times)[-1]))
    a = np.broadcast_to(np.atleast_2d(np.asarray(amounts, dtype=np.float64)), t.shape)
    used = np.isfinite(t) & np.isfinite(a) & (a != 0.0)
    S -= np.where(used & (t <= 0.0), a, 0.0).sum(axis=1)
    live = used & (t > 0.0) & (t < T[:, None])
    key = np.where(live, t, np.inf)
    o = np.argsort(key, axis=1, kind="stable")
    t_sorted = np.take_along_axis(np.where(live, t, 0.0), o, axis=1)
    a_sorted = np.take_along_axis(np.where(live, a, 0.0), o, axis=1)
    return S, np.ascontiguousarray(t_sorted), np.ascontiguousarray(a_sorted), live.sum(axis=1).astype(np.int64)


def crr_batch(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps, greeks=True, parallel=None,
              check=True, dividend_times=None, dividend_amounts=None, extrapolate=False):
    """Price arrays of options on CRR trees, in parallel over options (numba ``prange``).

    Args:
        kind: int codes (0 put, 1 call), shape (n,). style: int codes (0 european, 1 american).
        spot, strike (currency), expiry (years), rate, dividend_yield, volatility (annualised
            decimals): float arrays, shape (n,); scalars broadcast.
        steps: CRR time steps per option, int array shape (n,) or a scalar (1 ... 1e7).
        greeks: also return the tree Greeks (vega, rho and dividend rho cost six more trees).
        parallel: force the threaded (True) or serial (False) loop; default by problem size.
        check: verify p in [0, 1] (callers that already did, e.g. the engine, pass False).
        dividend_times, dividend_amounts: cash dividends (:func:`cash_dividends`: years from
            now and currency units, shape (n, m) or one schedule (m,) for all; the spot model,
            :func:`crr_tree_div`); a row without any prices as before, bit for bit.
        extrapolate: the converged value ("BBSR", Broadie & Detemple 1996, §3): smoothed trees
            (``crr_tree_div(smooth=True)``) of N and M = N // 2 steps, Richardson-extrapolated at
            first order, ``(N V_N - M V_M) / (N - M)``, for the price and every Greek (N = 1:
            the smoothed tree alone); a tree of N / 2 more steps' work. Not for cash dividends:
            their ex-dates round to the nearest level, an error that is not smooth in N, so the
            two trees do not cancel it (measured on the QuantLib cases of the tests: worst 4.6e-3
            at N = 1000 against 2.9e-3 without extrapolating).

    Returns:
        float64 array of shape (7, n): rows price, delta, gamma, theta, vega, rho, dividend_rho
        (NaN rows when ``greeks`` is False; gamma and theta are NaN for N < 2).

    Raises:
        CRRProbabilityError: p outside [0, 1] for some option (message names the first).
    """
    kind, style, S, K, T, r, q, s, N = as_columns((kind, np.int8), (style, np.int8), spot, strike, expiry, rate,
                                                  dividend_yield, volatility, (steps, np.int64))
    S, div_t, div_a, nd = cash_dividends(S, T, dividend_times, dividend_amounts)
    bad = probability_errors(T, r, q, s, N) if check else ()
    if len(bad):
        i = int(bad[0])
        p = float(probabilities(T[i], r[i], q[i], s[i], N[i]))
        raise CRRProbabilityError(f"option {i}: {probability_message(p)}")
    if parallel is None:
        nodes = costs.tree_nodes(N) * costs.trees(greeks)
        parallel = nodes >= PARALLEL_MIN_NODES and S.shape[0] > 1
    def run(steps_):
        if not parallel:
            return _batch_serial(kind, style, S, K, T, r, q, s, steps_, bool(greeks), div_t, div_a, nd, bool(extrapolate))
        with POOL_LOCK:
            return _batch_parallel(kind, style, S, K, T, r, q, s, steps_, bool(greeks), div_t, div_a, nd,
                                   bool(extrapolate))

    if not extrapolate:
        return run(N)
    M = coarse_steps(N)
    return richardson(run(N), run(M), N, M)


def coarse_steps(N):
    """The coarser tree of the BBSR pair: M = max(N // 2, 1) steps (shape of ``N``)."""
    return np.maximum(N // 2, 1)


def richardson(fine, coarse, N, M):
    """BBSR's first-order Richardson combination of ``crr_batch`` results (shape (6, n)) of
    smoothed trees of N and M = :func:`coarse_steps` steps: ``w fine + (1 - w) coarse`` with
    ``w = N / (N - M)`` (1 where N = M = 1), row by row; the GPU (``crr_batch_gpu``) combines
    its trees here too."""
    w = np.where(N > M, N / np.maximum(N - M, 1), 1.0)
    return w * fine + (1.0 - w) * coarse


def crr_price(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps):
    """CRR price of one option (scalars; kind/style as 'put'/'call', 'american'/'european'
    or 0/1 codes). See :func:`crr_batch` for units and errors."""
    k = {"put": 0, "call": 1}.get(kind, kind) if isinstance(kind, str) else kind
    st = {"european": 0, "american": 1}.get(style, style) if isinstance(style, str) else style
    return float(crr_batch(k, st, spot, strike, expiry, rate, dividend_yield, volatility, steps, greeks=False)[0, 0])


# --------------------------------------------------------------------------- implied volatility

@nb.njit(cache=True, nogil=True)
def _value(c, am, S, K, T, r, q, sigma, N, V, X, W, lv, dt_, da_, k, extrapolate):
    """The tree price the root find inverts: the plain tree, or (``extrapolate``) the BBSR value
    of :func:`crr_batch`."""
    if not extrapolate:
        return _tree(c, am, S, K, T, r, q, sigma, N, V, X, W, lv, dt_, da_, k, False)
    M = max(N // 2, 1)
    fine = _tree(c, am, S, K, T, r, q, sigma, N, V, X, W, lv, dt_, da_, k, True)
    if M == N:
        return fine
    coarse = _tree(c, am, S, K, T, r, q, sigma, M, V, X, W, lv, dt_, da_, k, True)
    return (N * fine - M * coarse) / (N - M)


def _iv_impl(target, kind, style, S, K, T, r, q, steps, lo, hi, xtol, div_t, div_a, nd, extrapolate):
    n = S.shape[0]
    vol = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int8)
    for i in nb.prange(n):
        N = steps[i]
        if not (np.isfinite(target[i]) and target[i] >= 0.0):
            status[i] = IV_INVALID
            continue
        # the lowest volatility at which p stays in [0, 1] (with a margin)
        # (extrapolating, the coarser tree of N // 2 steps has the larger step)
        dt = T[i] / (max(N // 2, 1) if extrapolate else N)
        lo_i = max(lo[i], 1.0001 * abs(r[i] - q[i]) * math.sqrt(dt) + 1e-12)
        hi_i = hi[i]
        if not (np.isfinite(lo_i) and np.isfinite(hi_i) and lo_i < hi_i):  # NaN-safe
            status[i] = IV_INVALID
            continue
        V = np.empty(N + 1)
        X = np.empty(N + 1)
        W = np.empty(N + 1 if nd[i] > 0 else 0)
        lv = np.empty(6)
        st = np.empty(8)
        c, am = kind[i] == 1, style[i] == 1
        dt_, da_, k = div_t[i], div_a[i], nd[i]
        flo = _value(c, am, S[i], K[i], T[i], r[i], q[i], lo_i, N, V, X, W, lv, dt_, da_, k, extrapolate) - target[i]
        fhi = _value(c, am, S[i], K[i], T[i], r[i], q[i], hi_i, N, V, X, W, lv, dt_, da_, k, extrapolate) - target[i]
        ftol = 1e-12 * max(1.0, target[i])
        if flo > ftol:
            status[i] = IV_BELOW
            continue
        if fhi < -ftol:
            status[i] = IV_ABOVE
            continue
        brent_init(st, lo_i, hi_i, flo, fhi)
        status[i] = IV_NOT_CONVERGED
        for _ in range(200):
            if brent_step(st, xtol, ftol):
                status[i] = IV_OK
                break
            st[FB] = _value(c, am, S[i], K[i], T[i], r[i], q[i], st[B], N, V, X, W, lv, dt_, da_, k, extrapolate) - target[i]
        vol[i] = st[B]
    return vol, status


_iv_parallel = nb.njit(cache=True, nogil=True, parallel=True)(cache_variant(_iv_impl, "_iv_parallel"))
_iv_serial = nb.njit(cache=True, nogil=True)(cache_variant(_iv_impl, "_iv_serial"))


def crr_implied_vol(price, kind, style, spot, strike, expiry, rate, dividend_yield, steps,
                    lo=MIN_IV, hi=MAX_IV, xtol=1e-12, parallel=None, dividend_times=None, dividend_amounts=None,
                    extrapolate=False):
    """Implied volatility from CRR tree prices (American or European) by Brent's bracketed
    root find on the tree price, one root find per option, in parallel over options.

    Args:
        price: market prices, shape (n,). Other arguments as :func:`crr_batch`.
        lo, hi: volatility bracket (annualised decimals), scalars or shape (n,) (a per-option
            bracket, e.g. around a known nearby root); ``lo`` is raised per option to the
            smallest volatility at which p stays in [0, 1].
        xtol: absolute tolerance on the volatility.
        dividend_times, dividend_amounts: cash dividends, as :func:`crr_batch` (a drop wider
            than the tree's lattice, at a low trial volatility, reads the value below the lattice
            as :func:`_apply_dividend` bounds it, so the search starts as without dividends).
        extrapolate: invert the BBSR value of :func:`crr_batch` instead of the plain tree's.

    Returns:
        ``(vol, status)``: float64 (NaN where none) and int8 codes from
        :mod:`optiond.kernels.rootfind` (``IV_BELOW``: the price is below the tree value at the
        lowest volatility, e.g. below intrinsic; ``IV_ABOVE``: above the value at ``hi``).
        Never raises for an unreachable price.
    """
    p, kind, style, S, K, T, r, q, N, lo, hi = as_columns(price, (kind, np.int8), (style, np.int8), spot, strike, expiry,
                                                          rate, dividend_yield, (steps, np.int64), lo, hi)
    S, div_t, div_a, nd = cash_dividends(S, T, dividend_times, dividend_amounts)
    if parallel is None:
        parallel = p.shape[0] > 1 and float(np.sum(N.astype(np.float64) ** 2)) * 6 >= PARALLEL_MIN_NODES
    if not parallel:
        return _iv_serial(p, kind, style, S, K, T, r, q, N, lo, hi, float(xtol), div_t, div_a, nd, bool(extrapolate))
    with POOL_LOCK:
        return _iv_parallel(p, kind, style, S, K, T, r, q, N, lo, hi, float(xtol), div_t, div_a, nd, bool(extrapolate))
