"""The gold reference of the spectral American engine: Andersen–Lake–Offengenden on the CPU (numba).

Source: L. Andersen, M. Lake and D. Offengenden (2016), "High-performance American option
pricing", *Journal of Computational Finance* 20(1), 39–87 (ALO below); the QD+ start from
M. Li (2005), "The adaptive quasi-analytic method for American options" / "Analytical
approximations for the critical stock prices of American options", *Quantitative Finance*
(the QD+ boundary equation). Everything is written for an American **put**; a call is the put
with spot and strike, and rate and dividend yield, swapped (McDonald & Schroder 1998, the
put–call symmetry ``C(S, K, r, q) = P(K, S, q, r)``).

The method, per option (put, strike K, rate r, dividend yield q, volatility sigma, expiry T):

1. The exercise boundary B(tau), tau the time to expiry, starts at ``X = B(0+)`` (Andersen &
   Lake 2021, table 2): ``K min(1, r/q)`` for r > 0 < q, ``K`` for r > 0 >= q or r = 0 > q.
2. The boundary is held as ``H(sqrt(tau)) = ln(B(tau)/X)^2`` (ALO's transformed boundary) on
   ``n + 1`` Chebyshev extreme points in ``xi = 2 sqrt(tau/T) - 1`` (collocation in sqrt(tau));
   between them it is the Chebyshev interpolant (Clenshaw's recurrence).
3. Start: at every node the QD+ critical price (Li 2005), by a safeguarded Newton root find.
4. Fixed point: the smooth-pasting system ``B(tau) = K N(tau, B) / D(tau, B)`` (ALO's FP-B
   form, normal densities in N and D)::

       N = e^{-r tau} phi(d-(tau, B/K)) / (sigma sqrt tau)
           + r int_0^tau e^{-r s} phi(d-(s, B(tau)/B(tau-s))) / (sigma sqrt s) ds
       D = e^{-q tau} [phi(d+(tau, B/K)) / (sigma sqrt tau) + Phi(d+(tau, B/K))]
           + q int_0^tau e^{-q s} [Phi(d+(s, .)) + phi(d+(s, .)) / (sigma sqrt s)] ds

   with ``d+-(s, z) = (ln z + (r - q +- sigma^2/2) s) / (sigma sqrt s)``. The integrals are
   taken in ``y`` with ``s = tau (1+y)^2 / 4`` (the 1/sqrt(s) kernel becomes regular), by a
   fixed quadrature rule on [-1, 1] (Gauss–Legendre or tanh-sinh). The first sweep is a
   Jacobi–Newton step (ALO's accelerated iteration, the derivative of the explicit terms of
   N/D in B(tau)); the ``m - 1`` others are plain fixed-point sweeps. All nodes are updated
   from the previous sweep's interpolant (Jacobi).
5. Price: the early-exercise premium representation (Kim 1990; ALO eq. for V) ::

       V(S) = p_E(S) + int_0^T [r K e^{-r s} Phi(-d-(s, S/B(T-s))) - q S e^{-q s} Phi(-d+(s, S/B(T-s)))] ds

   in ``z = sqrt(s)`` on [0, sqrt(T)] by the premium rule (p points). Delta and gamma are its
   S-derivatives with the boundary held (the boundary does not depend on S: exact); theta is
   from the Black–Scholes PDE in the continuation region (``theta = rV - (r-q) S delta -
   sigma^2 S^2 gamma / 2``; 0 in the exercise region, where V = K - S). Vega and rho are
   central differences of the whole solve (bumps :data:`VEGA_BUMP`, :data:`RHO_BUMP`).

Inputs are arrays of shape (n,): ``kind`` int8 (0 put, 1 call), spot and strike in currency
units, expiry in years, rate, dividend yield and volatility annualised continuously compounded
decimals. The kernels price only rows of the single-boundary regime (:func:`regime` 0); the
front door (:mod:`optiond.kernels.spectral`) sends the others elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba as nb
import numpy as np

from ..rootfind import IV_ABOVE, IV_BELOW, IV_INVALID, IV_NOT_CONVERGED, IV_OK

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

#: central-difference bumps of the whole solve: volatility (absolute, annualised decimal) and rate
VEGA_BUMP = 1e-4
RHO_BUMP = 1e-4
#: implied-volatility bracket (annualised decimals), as the tree's
MIN_IV, MAX_IV = 1e-4, 10.0

#: regimes of :func:`regime` (after the put–call symmetry, r and q those of the put)
SINGLE, EUROPEAN_EQUIVALENT, DOUBLE_BOUNDARY = 0, 1, 2


@dataclass(frozen=True)
class Accuracy:
    """One accuracy setting: ``n`` Chebyshev intervals (n + 1 collocation nodes in sqrt(tau)),
    the fixed-point quadrature (``rule``: ``"legendre"`` with ``l`` points, or ``"tanh-sinh"``
    with step ``1/l``), ``m`` fixed-point sweeps (one Jacobi–Newton, m - 1 plain), and the
    premium quadrature (``price_rule``: ``"legendre"`` with ``p`` points or ``"tanh-sinh"`` with
    step ``1/p``)."""

    name: str
    n: int
    l: int
    m: int
    p: int
    rule: str = "legendre"
    price_rule: str = "legendre"


#: The three settings (ALO's and QuantLib's fast / accurate / high precision, our node counts;
#: the errors measured against QuantLib's QdFpAmericanEngine high-precision scheme are in the
#: front door's docstring and ``bench/american.py``).
ACCURACY = {
    "fast": Accuracy("fast", n=10, l=16, m=3, p=32),
    "accurate": Accuracy("accurate", n=20, l=8, m=8, p=8, rule="tanh-sinh", price_rule="tanh-sinh"),
    "high-precision": Accuracy("high-precision", n=32, l=16, m=10, p=16, rule="tanh-sinh", price_rule="tanh-sinh"),
}
ACCURACY_NAMES = tuple(ACCURACY)


def rule_nodes(rule: str, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A quadrature rule on [-1, 1] as ``(1 + y, 1 - y, w)`` (each shape (k',)); the
    complements are computed without cancellation (tanh-sinh nodes crowd the ends).

    ``"legendre"``: k-point Gauss–Legendre. ``"tanh-sinh"``: the trapezoid rule of step
    h = 1/k in t after ``y = tanh(pi/2 sinh t)`` (Takahasi & Mori 1974), truncated where
    ``1 +- y`` falls below 1e-30 (the weights there are below 1e-28).

    Raises:
        ValueError: an unknown rule or k < 1.
    """
    if k < 1:
        raise ValueError(f"quadrature size {k} must be >= 1")
    if rule == "legendre":
        y, w = np.polynomial.legendre.leggauss(k)
        return 1.0 + y, 1.0 - y, w
    if rule != "tanh-sinh":
        raise ValueError(f"unknown quadrature rule {rule!r}")
    h = 1.0 / k
    t = np.arange(-int(6.0 / h), int(6.0 / h) + 1) * h
    u = 0.5 * np.pi * np.sinh(t)
    with np.errstate(over="ignore"):
        yp = 2.0 / (1.0 + np.exp(-2.0 * u))
        ym = 2.0 / (1.0 + np.exp(2.0 * u))
        w = h * 0.5 * np.pi * np.cosh(t) / np.cosh(u) ** 2
    keep = (yp > 1e-30) & (ym > 1e-30) & np.isfinite(w)
    return yp[keep], ym[keep], w[keep]


def chebyshev_matrix(n: int) -> np.ndarray:
    """The (n+1, n+1) matrix taking values at ``xi_j = cos(j pi / n)`` to the coefficients
    ``c_k`` of ``sum_k c_k T_k(xi)`` (the interpolant at the extreme points, halvings folded in)."""
    j = np.arange(n + 1)
    half = np.where((j == 0) | (j == n), 0.5, 1.0)
    return (2.0 / n) * half[:, None] * np.cos(np.outer(j, j) * np.pi / n) * half[None, :]


@dataclass(frozen=True)
class Plan:
    """The arrays a setting needs (built once per setting by :func:`plan`)."""

    accuracy: Accuracy
    xi: np.ndarray     # (n+1,) collocation points cos(j pi / n)
    cheb: np.ndarray   # (n+1, n+1) values -> coefficients
    fp: tuple          # fixed-point rule (1+y, 1-y, w)
    pr: tuple          # premium rule (1+y, 1-y, w)


_PLANS: dict[str, Plan] = {}


def plan(accuracy: str | Accuracy) -> Plan:
    """The :class:`Plan` of an accuracy setting (a name of :data:`ACCURACY` or an
    :class:`Accuracy`).

    Raises:
        KeyError: an unknown setting name.
    """
    acc = ACCURACY[accuracy] if isinstance(accuracy, str) else accuracy
    got = _PLANS.get(acc.name) if isinstance(accuracy, str) else None
    if got is None:
        got = Plan(acc, np.cos(np.arange(acc.n + 1) * np.pi / acc.n), chebyshev_matrix(acc.n),
                   rule_nodes(acc.rule, acc.l), rule_nodes(acc.price_rule, acc.p))
        if isinstance(accuracy, str):
            _PLANS[acc.name] = got
    return got


def regime(kind: np.ndarray, rate: np.ndarray, dividend_yield: np.ndarray) -> np.ndarray:
    """The exercise regime of each row (Andersen & Lake 2021, table 2; r, q the put's after the
    put–call symmetry: a call's are its (q, r)), int8 shape (n,):

    * :data:`SINGLE` (0): one boundary, the ALO method applies (r > 0; or r = 0 > q);
    * :data:`EUROPEAN_EQUIVALENT` (1): early exercise is never optimal (r <= 0 and q >= r, r = 0
      and q = 0 included): the American price is the European one;
    * :data:`DOUBLE_BOUNDARY` (2): q < r < 0, two boundaries (outside ALO's method).
    """
    call = np.asarray(kind) == 1
    r = np.where(call, dividend_yield, rate)
    q = np.where(call, rate, dividend_yield)
    out = np.zeros(r.shape, dtype=np.int8)
    out[(r <= 0) & (q >= r)] = EUROPEAN_EQUIVALENT
    out[(r < 0) & (q < r)] = DOUBLE_BOUNDARY
    return out


# ------------------------------------------------------------------------------- numba kernels

@nb.njit(cache=True, nogil=True, error_model="numpy")
def _Phi(x):
    return 0.5 * math.erfc(-x / _SQRT2)


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _phi(x):
    return _INV_SQRT_2PI * math.exp(-0.5 * x * x)


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _clenshaw(c, xi):
    """``sum_k c_k T_k(xi)`` by Clenshaw's recurrence."""
    b1 = 0.0
    b2 = 0.0
    for k in range(c.shape[0] - 1, 0, -1):
        b0 = c[k] + 2.0 * xi * b1 - b2
        b2 = b1
        b1 = b0
    return c[0] + xi * b1 - b2


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _boundary_at(c, X, tau, T):
    """B(tau) from the coefficients of H(xi) = ln(B/X)^2, xi = 2 sqrt(tau/T) - 1."""
    xi = 2.0 * math.sqrt(max(tau, 0.0) / T) - 1.0
    h = _clenshaw(c, xi)
    return X * math.exp(-math.sqrt(max(h, 0.0)))


@nb.njit(cache=True, nogil=True, error_model="numpy")
def x_max(K, r, q):
    """B(0+) of a put (Andersen & Lake 2021, table 2), single-boundary regime."""
    if r > 0.0 and q > 0.0:
        return K * min(1.0, r / q)
    return K


@nb.njit(cache=True, nogil=True, error_model="numpy")
def qdplus_boundary(K, r, q, sig, tau, X):
    """The QD+ critical price of a put at time to expiry ``tau`` > 0 (Li 2005): the root of
    ``F(S) = (1 - e^{-q tau} Phi(-d+)) S - beta (K - S - p_E(S)) + A theta_E(S)`` (the QD+
    smooth-pasting condition with Li's c0 written out; A = 2 / (sigma^2 (2 lambda + omega - 1))),
    by Newton from X kept in [1e-8 X, X]. NaN if it does not converge."""
    s2 = sig * sig
    v = sig * math.sqrt(tau)
    dr = math.exp(-r * tau)
    dq = math.exp(-q * tau)
    ddr = 1.0 / tau if r == 0.0 else r / (-math.expm1(-r * tau))  # r / (1 - e^{-r tau})
    om = 2.0 * (r - q) / s2
    disc = (om - 1.0) ** 2 + 8.0 * ddr / s2
    sq = math.sqrt(disc)
    lam = 0.5 * (-(om - 1.0) - sq)
    A = -2.0 / (s2 * sq)                       # 2 / (sigma^2 (2 lambda + omega - 1)), 2 lambda + omega - 1 = -sqrt(disc)
    beta = A * dr * ddr - A * dr * 2.0 * ddr * ddr / (s2 * disc) - lam
    lo = 1e-8 * X
    x = X
    for _ in range(100):
        dp = (math.log(x / K) + (r - q) * tau) / v + 0.5 * v
        dm = dp - v
        Pp = _Phi(-dp)
        Pm = _Phi(-dm)
        ph = _phi(dp)
        npv = dr * K * Pm - x * dq * Pp
        theta = r * K * dr * Pm - q * x * dq * Pp - 0.5 * s2 * x / v * dq * ph
        charm = dq * ph * ((q - r) / v + dm / (2.0 * tau)) - q * dq * Pp
        F = (1.0 - dq * Pp) * x - beta * (K - x - npv) + A * theta
        dF = (1.0 - dq * Pp) * (1.0 + beta) + dq * ph / v + A * charm
        if not (dF != 0.0 and math.isfinite(F) and math.isfinite(dF)):
            return np.nan
        xn = min(max(x - F / dF, lo), X)
        if abs(xn - x) < 1e-12 * X:
            return xn
        x = xn
    return np.nan


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _nd(tau, b, K, r, q, sig, c, X, T, yp, ym, w):
    """N, D (the FP-B numerator and denominator, the e^{-r tau}, e^{-q tau} forms) and their
    explicit-term derivatives in B(tau) = b."""
    st = math.sqrt(tau)
    stv = st / sig
    k12 = 0.0
    k3 = 0.0
    for k in range(yp.shape[0]):
        s = 0.25 * tau * yp[k] * yp[k]
        u = 0.25 * tau * ym[k] * (4.0 - ym[k])  # tau - s without cancellation
        bu = _boundary_at(c, X, u, T)
        vs = sig * math.sqrt(s)
        dp = (math.log(b / bu) + (r - q) * s) / vs + 0.5 * vs
        dm = dp - vs
        k12 += w[k] * math.exp(-q * s) * (0.5 * tau * yp[k] * _Phi(dp) + stv * _phi(dp))
        k3 += w[k] * math.exp(-r * s) * stv * _phi(dm)
    v = sig * st
    dp = (math.log(b / K) + (r - q) * tau) / v + 0.5 * v
    dm = dp - v
    er = math.exp(-r * tau)
    eq = math.exp(-q * tau)
    N = er * _phi(dm) / v + r * k3
    D = eq * (_phi(dp) / v + _Phi(dp)) + q * k12
    Nd = -er * _phi(dm) * dm / (b * v * v)
    Dd = eq * (-_phi(dp) * dp / (b * v * v) + _phi(dp) / (b * v))
    return N, D, Nd, Dd


@nb.njit(cache=True, nogil=True, error_model="numpy")
def put_boundary(K, T, r, q, sig, xi, cheb, m, yp, ym, w, c):
    """The boundary's Chebyshev coefficients (written to ``c``, shape (n+1,)) of an American put
    in the single-boundary regime; returns X = B(0+)."""
    n1 = xi.shape[0]
    X = x_max(K, r, q)
    H = np.empty(n1)
    Hn = np.empty(n1)
    prev = X
    for j in range(n1 - 1, -1, -1):  # xi_j = cos(j pi / n): j = n is tau = 0
        tau = 0.25 * T * (1.0 + xi[j]) ** 2
        if j == n1 - 1 or tau <= 0.0:
            H[j] = 0.0
            continue
        bq = qdplus_boundary(K, r, q, sig, tau, X)
        if not (bq > 0.0 and bq <= X):
            bq = prev
        prev = bq
        H[j] = math.log(bq / X) ** 2
    for k in range(n1):
        acc = 0.0
        for j in range(n1):
            acc += cheb[k, j] * H[j]
        c[k] = acc
    for it in range(m):
        for j in range(n1):
            tau = 0.25 * T * (1.0 + xi[j]) ** 2
            if j == n1 - 1 or tau <= 0.0:
                Hn[j] = 0.0
                continue
            b = X * math.exp(-math.sqrt(max(H[j], 0.0)))
            N, D, Nd, Dd = _nd(tau, b, K, r, q, sig, c, X, T, yp, ym, w)
            if not (D > 0.0 and N >= 0.0 and math.isfinite(N) and math.isfinite(D)):
                Hn[j] = H[j]  # the densities underflow (sigma sqrt(tau) tiny): keep the node
                continue
            fv = K * N / D
            if it == 0:  # Jacobi–Newton
                fd = K * (Nd / D - Dd * N / (D * D))
                bn = b + (fv - b) / (1.0 - fd)
                if not (bn > 0.0 and math.isfinite(bn)):
                    bn = fv
            else:
                bn = fv
            bn = min(max(bn, 1e-300), X)
            Hn[j] = math.log(bn / X) ** 2
        for j in range(n1):
            H[j] = Hn[j]
        for k in range(n1):
            acc = 0.0
            for j in range(n1):
                acc += cheb[k, j] * H[j]
            c[k] = acc
    return X


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _put_value(S, K, T, r, q, sig, c, X, yp, ym, w, greeks):
    """(price, delta, gamma, theta) of a put from its boundary (coefficients c, B(0+) = X)."""
    bT = _boundary_at(c, X, T, T)
    if S <= bT:
        return K - S, -1.0, 0.0, 0.0
    sT = math.sqrt(T)
    v = sig * sT
    dp = (math.log(S / K) + (r - q) * T) / v + 0.5 * v
    dm = dp - v
    er = math.exp(-r * T)
    eq = math.exp(-q * T)
    euro = K * er * _Phi(-dm) - S * eq * _Phi(-dp)
    de = -eq * _Phi(-dp)
    ge = eq * _phi(dp) / (S * v)
    prem = 0.0
    dprem = 0.0
    gprem = 0.0
    for k in range(yp.shape[0]):
        z = 0.5 * sT * yp[k]
        s = z * z
        tb = 0.25 * T * ym[k] * (4.0 - ym[k])  # T - s
        bt = _boundary_at(c, X, tb, T)
        if not bt > 0.0:  # a boundary at 0 (underflow): no early exercise at that time
            continue
        vs = sig * z
        ep = (math.log(S / bt) + (r - q) * s) / vs + 0.5 * vs
        em = ep - vs
        fq = math.exp(-q * s)
        fr = math.exp(-r * s)
        jw = w[k] * 0.5 * sT
        prem += jw * 2.0 * z * (r * K * fr * _Phi(-em) - q * S * fq * _Phi(-ep))
        if greeks:
            a = q - r * K / bt
            ph = _phi(ep)
            dprem += jw * (-2.0 * z * q * fq * _Phi(-ep) + 2.0 * fq * ph / sig * a)
            gprem += jw * 2.0 * fq * ph / (S * sig) * (q - a * ep / vs)
    price = max(euro, 0.0) + max(prem, 0.0)
    if not greeks:
        return price, np.nan, np.nan, np.nan
    delta = de + dprem
    gamma = ge + gprem
    theta = r * price - (r - q) * S * delta - 0.5 * sig * sig * S * S * gamma
    return price, delta, gamma, theta


@nb.njit(cache=True, nogil=True, error_model="numpy")
def alo_one(is_call, S, K, T, r, q, sig, xi, cheb, m, fyp, fym, fw, pyp, pym, pw, greeks):
    """(price, delta, gamma, theta) of one American option of the single-boundary regime
    (a call through the put–call symmetry; its delta and gamma by the put's homogeneity:
    dC/dS = (P - S' dP/dS') / K', d2C/dS2 = S'^2 / K'^2 d2P/dS'2 with S' = K, K' = S)."""
    c = np.empty(xi.shape[0])
    if is_call:
        X = put_boundary(S, T, q, r, sig, xi, cheb, m, fyp, fym, fw, c)
        p, d, g, th = _put_value(K, S, T, q, r, sig, c, X, pyp, pym, pw, greeks)
        if not greeks:
            return p, d, g, th
        return p, (p - K * d) / S, K * K * g / (S * S), th
    X = put_boundary(K, T, r, q, sig, xi, cheb, m, fyp, fym, fw, c)
    return _put_value(S, K, T, r, q, sig, c, X, pyp, pym, pw, greeks)


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _alo_price(is_call, S, K, T, r, q, sig, xi, cheb, m, fyp, fym, fw, pyp, pym, pw):
    return alo_one(is_call, S, K, T, r, q, sig, xi, cheb, m, fyp, fym, fw, pyp, pym, pw, False)[0]


@nb.njit(cache=True, parallel=True, error_model="numpy")
def alo_batch_kernel(kind, S, K, T, r, q, sig, xi, cheb, m, fyp, fym, fw, pyp, pym, pw, greeks):
    """(7, n): price, delta, gamma, theta, vega, rho, dividend rho (Greeks NaN without ``greeks``)."""
    n = S.shape[0]
    out = np.full((7, n), np.nan)
    for i in nb.prange(n):
        c = kind[i] == 1
        p, d, g, th = alo_one(c, S[i], K[i], T[i], r[i], q[i], sig[i], xi, cheb, m, fyp, fym, fw, pyp, pym, pw, greeks)
        out[0, i] = p
        if greeks:
            out[1, i] = d
            out[2, i] = g
            out[3, i] = th
            hv = min(VEGA_BUMP, 0.5 * sig[i])
            up = _alo_price(c, S[i], K[i], T[i], r[i], q[i], sig[i] + hv, xi, cheb, m, fyp, fym, fw, pyp, pym, pw)
            dn = _alo_price(c, S[i], K[i], T[i], r[i], q[i], sig[i] - hv, xi, cheb, m, fyp, fym, fw, pyp, pym, pw)
            out[4, i] = (up - dn) / (2.0 * hv)
            # rho: the bump keeps the row in its regime where it can (a one-sided difference at r' = 0)
            rp = r[i] + RHO_BUMP
            rm = r[i] - RHO_BUMP
            h2 = 2.0 * RHO_BUMP
            if (not c) and rm <= 0.0:
                rm = r[i]
                h2 = RHO_BUMP
            up = _alo_price(c, S[i], K[i], T[i], rp, q[i], sig[i], xi, cheb, m, fyp, fym, fw, pyp, pym, pw)
            dn = _alo_price(c, S[i], K[i], T[i], rm, q[i], sig[i], xi, cheb, m, fyp, fym, fw, pyp, pym, pw)
            out[5, i] = (up - dn) / h2
            # dividend rho: likewise a one-sided difference where a call's q' = q - h would leave
            # the single-boundary regime (a call's q plays the put's r under put-call symmetry)
            qp = q[i] + RHO_BUMP
            qm = q[i] - RHO_BUMP
            h2 = 2.0 * RHO_BUMP
            if c and qm <= 0.0:
                qm = q[i]
                h2 = RHO_BUMP
            up = _alo_price(c, S[i], K[i], T[i], r[i], qp, sig[i], xi, cheb, m, fyp, fym, fw, pyp, pym, pw)
            dn = _alo_price(c, S[i], K[i], T[i], r[i], qm, sig[i], xi, cheb, m, fyp, fym, fw, pyp, pym, pw)
            out[6, i] = (up - dn) / h2
    return out


def alo_batch(kind, spot, strike, expiry, rate, dividend_yield, volatility, accuracy="accurate", greeks=True):
    """ALO prices (and Greeks) of American options of the single-boundary regime
    (:func:`regime` == :data:`SINGLE`; other rows give meaningless numbers: the front door
    routes them elsewhere).

    Args:
        kind: int codes, shape (n,) (0 put, 1 call).
        spot, strike, expiry, rate, dividend_yield, volatility: float arrays, shape (n,)
            (currency units, years, annualised decimals).
        accuracy: a name of :data:`ACCURACY` or an :class:`Accuracy`.
        greeks: also delta, gamma, theta (the method's own), vega, rho and dividend rho (bumped).

    Returns:
        float64 array (7, n): price, delta, gamma, theta (per year), vega, rho, dividend rho
        (per 1.00).

    Raises:
        KeyError: an unknown accuracy name.
    """
    pl = plan(accuracy)
    cols = [np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype=np.float64), np.shape(spot)))
            for a in (spot, strike, expiry, rate, dividend_yield, volatility)]
    kind = np.ascontiguousarray(np.broadcast_to(np.asarray(kind, dtype=np.int8), np.shape(spot)))
    return alo_batch_kernel(kind, *cols, pl.xi, pl.cheb, pl.accuracy.m, *pl.fp, *pl.pr, bool(greeks))


@nb.njit(cache=True, parallel=True, error_model="numpy")
def alo_iv_kernel(target, kind, S, K, T, r, q, lo, hi, xtol, xi, cheb, m, fyp, fym, fw, pyp, pym, pw):
    """Implied volatilities: Newton on the engine's price with its bumped vega, kept inside
    the bracket that the signs of price - target keep; a step that leaves it, or a vega near
    0, is a bisection. Returns (vol, status codes of :mod:`optiond.kernels.rootfind`)."""
    n = S.shape[0]
    vol = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int8)
    for i in nb.prange(n):
        p = target[i]
        if not (math.isfinite(p) and p >= 0.0):
            status[i] = IV_INVALID
            continue
        c = kind[i] == 1
        a = lo[i]
        b = hi[i]
        ftol = 1e-13 * max(1.0, p)
        fa = _alo_price(c, S[i], K[i], T[i], r[i], q[i], a, xi, cheb, m, fyp, fym, fw, pyp, pym, pw) - p
        if fa > ftol:
            status[i] = IV_BELOW
            continue
        fb = _alo_price(c, S[i], K[i], T[i], r[i], q[i], b, xi, cheb, m, fyp, fym, fw, pyp, pym, pw) - p
        if fb < -ftol:
            status[i] = IV_ABOVE
            continue
        if abs(fa) <= ftol:
            vol[i] = a
            continue
        if abs(fb) <= ftol:
            vol[i] = b
            continue
        # start: Brenner & Subrahmanyam's at-the-money guess, inside the bracket
        x = math.sqrt(2.0 * math.pi / T[i]) * p / S[i]
        if not (x > a and x < b):
            x = 0.5 * (a + b) if b < 1.0 else math.sqrt(a * b)
        status[i] = IV_NOT_CONVERGED
        for _ in range(100):
            h = min(VEGA_BUMP, 0.25 * x)
            f = _alo_price(c, S[i], K[i], T[i], r[i], q[i], x, xi, cheb, m, fyp, fym, fw, pyp, pym, pw) - p
            if abs(f) <= ftol:
                status[i] = IV_OK
                break
            if f < 0.0:
                a = x
            else:
                b = x
            up = _alo_price(c, S[i], K[i], T[i], r[i], q[i], x + h, xi, cheb, m, fyp, fym, fw, pyp, pym, pw)
            dn = _alo_price(c, S[i], K[i], T[i], r[i], q[i], x - h, xi, cheb, m, fyp, fym, fw, pyp, pym, pw)
            vega = (up - dn) / (2.0 * h)
            xn = x - f / vega if vega > 1e-300 else np.nan
            if not (xn > a and xn < b):
                xn = 0.5 * (a + b)
            step = abs(xn - x)
            x = xn
            if step <= xtol or b - a <= xtol:
                status[i] = IV_OK
                break
        vol[i] = x
    return vol, status


def alo_implied_vol(price, kind, spot, strike, expiry, rate, dividend_yield, accuracy="accurate", lo=MIN_IV,
                    hi=MAX_IV, xtol=1e-12):
    """Implied volatilities of American options (single-boundary regime) on the ALO price.

    Args:
        price: option prices, shape (n,), currency units.
        kind, spot, strike, expiry, rate, dividend_yield: as :func:`alo_batch`.
        accuracy: the setting the prices are inverted with.
        lo, hi: the volatility bracket, scalars or shape (n,) (annualised decimals).
        xtol: absolute tolerance on the volatility.

    Returns:
        ``(vol, status)``: float64 (NaN where none) and int8 codes of
        :mod:`optiond.kernels.rootfind` (``IV_OK``; ``IV_BELOW``: under the value at ``lo``;
        ``IV_ABOVE``: over the value at ``hi``; ``IV_INVALID``: a negative or non-finite price).

    Raises:
        KeyError: an unknown accuracy name.
    """
    pl = plan(accuracy)
    shape = np.shape(spot)
    f = [np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype=np.float64), shape))
         for a in (price, spot, strike, expiry, rate, dividend_yield, lo, hi)]
    kind = np.ascontiguousarray(np.broadcast_to(np.asarray(kind, dtype=np.int8), shape))
    return alo_iv_kernel(f[0], kind, *f[1:6], f[6], f[7], float(xtol), pl.xi, pl.cheb, pl.accuracy.m, *pl.fp, *pl.pr)
