"""The gold reference of the semi-analytic European Heston engine (numba, CPU).

Model (Heston 1993): under the risk-neutral measure ``dS = (r - q) S dt + sqrt(v) S dW1``,
``dv = kappa (theta - v) dt + xi sqrt(v) dW2``, ``d<W1, W2> = rho dt``; ``v0`` the variance
today, ``theta`` the long-run variance (both annualised), ``kappa`` the mean-reversion speed
(per year), ``xi`` the volatility of variance, ``rho`` the correlation.

**Characteristic function.** ``X = ln(S_T / F)`` with ``F = S e^{(r-q)T}``; its characteristic
function ``phi(z) = E[e^{izX}] = exp(C(z, T) + D(z, T) v0)`` in the "little trap" form of
Albrecher, Mayer, Schoutens & Tistaert (2007), "The little Heston trap", *Wilmott Magazine*
(Jan.), 83–92, eq. (2) — the branch of the complex logarithm never crosses the cut — taken at
``z = u - i/2`` (the Lewis line), where ``z^2 + iz = u^2 + 1/4 =: s`` is real::

    beta = kappa - rho xi i z = kappa - rho xi / 2 - i rho xi u,   d = sqrt(beta^2 + xi^2 s)
    g = (beta - d) / (beta + d),   e = exp(-d T)
    D = -s / (beta + d) * (1 - e) / (1 - g e)
    C = kappa theta [ -s T / (beta + d) - 2 log(1 + w) / xi^2 ],  w = g (1 - e) / (1 - g)

written with ``beta - d = -xi^2 s / (beta + d)`` so that nothing is divided by ``xi^2`` before
it cancels (``log(1 + w) / xi^2`` is taken as ``(log(1 + w) / w) (w / xi^2)``): the Black–
Scholes limit ``xi -> 0`` is reached smoothly. ``Re d^2 = (kappa - rho xi/2)^2 + xi^2 (1 -
rho^2) u^2 + xi^2 / 4 > 0``, so ``d`` (principal root) never vanishes.

**Price** (Lewis 2000, *Option Valuation under Stochastic Volatility*, ch. 2, eq. (2.10), the
single-integral formula), ``k = ln(F/K)``, ``Df = e^{-rT}``::

    call = Df [ F - sqrt(F K) / pi * I0 ],   I0 = int_0^inf Re[e^{iuk} phi(u - i/2)] / s du

and the put by parity, ``put = call - Df (F - K)``.

**Greeks**, each an integral of the same integrand times a factor (no bumps):
``I1 = int Re[iu psi]/s`` (``psi = e^{iuk} phi``), ``G = int Re psi``, ``Iv = int Re[D psi]/s``,
``IT = int Re[(dlog phi/dT) psi]/s`` with ``dlog phi/dT = kappa theta D + v0 D'`` and ``D'``
from the Riccati equation ``D' = -s/2 - beta D + xi^2 D^2 / 2``. Then (calls; puts by parity)::

    delta = e^{-qT} [1 - sqrt(K/F) (I0/2 + I1) / pi]
    gamma = e^{-qT} sqrt(K/F) G / (pi S)
    dV/dv0 = -Df sqrt(F K) Iv / pi
    rho   = T (S delta - V)                     (r moves F and Df; q held)
    theta = -dV/dT = r V - (r - q) S delta + Df sqrt(F K) IT / pi

**Quadrature and its error rule.** All contracts of one chunk (same T and parameters, up to
:data:`CHUNK` strikes) share the characteristic-function evaluations.

1. Truncation: ``U`` doubles from 4 until ``|phi(U - i/2)| <= tol * U``; since ``|phi|``
   decreases along the Lewis line (it is the Laplace transform of a positive measure at
   fixed real part) the neglected tail of ``I0`` is below ``int_U^inf |phi| / u^2 <= tol``.
2. ``[0, U]`` starts as the graded panels ``[0, 1], [1, 2], [2, 4], ..., [U/2, U]`` and each
   panel is integrated by the 7/15-point Gauss–Kronrod pair (Piessens et al. 1983, QUADPACK
   ``qk15``); a panel whose Kronrod–Gauss difference in ``I0`` or ``I1`` for any strike of the
   chunk exceeds ``tol * width / U + NOISE * A`` (``A`` the panel's integral of ``|f0| +
   |f1|``, :data:`NOISE` = 64 machine epsilons: the rounding floor) is halved (depth at most
   :data:`MAX_DEPTH`), else its Kronrod sums are kept. The Kronrod–Gauss difference
   over-estimates the Kronrod rule's own error by orders of magnitude for analytic integrands
   (QUADPACK's rule), so the absolute error of ``I0`` is below ``2 tol + NOISE int |f0|``
   (``int |f0| <= int 1/s = pi``, so about ``2 tol + 5e-14``) and a price's below that times
   ``Df sqrt(F K) / pi``. With the
   default ``tol = 1e-13`` a price at S = K = 100 is within 1e-11 (measured against Lewis's
   published 45-digit values: 2e-13; against QuantLib's adaptive Gauss–Lobatto at 1e-14 on
   the test grid: see ``tests/test_heston_analytic.py``). Greeks ride on the same nodes (their
   integrands are smooth multiples of the price integrand); their measured error is below
   1e-8 of the price scale.

Inputs are arrays of shape (n,): ``kind`` int8 (0 put, 1 call), spot and strike in currency
units, expiry in years, rate and dividend yield annualised continuously compounded decimals,
``v0`` and ``theta`` annualised variances, ``kappa`` per year, ``xi`` (annualised), ``rho``
in [-1, 1]. Validation is the schema's (:mod:`optiond.models`).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

from ...columns import kernel_column

#: default absolute tolerance of the price integral I0 (see the module docstring)
TOL = 1e-13
#: most strikes priced on one set of characteristic-function evaluations
CHUNK = 32
#: most halvings of an initial panel
MAX_DEPTH = 24
#: the panel stack's size (the GPU kernel's too)
STACK = 128
#: the largest truncation point tried (u); the Gaussian regime of the shortest expiries ends
#: well below it
U_MAX = 2.0 ** 20
#: a panel's Kronrod–Gauss difference below this many units of rounding (of the panel's sum of
#: |integrand|) is accepted: the adaptive rule stops at the noise floor of double precision
NOISE = 64.0 * 2.220446049250313e-16
#: integrals per contract: I0, I1, G, Iv, IT
N_INT = 5

# QUADPACK qk15: Kronrod abscissae (descending, the last is 0), Kronrod weights, and the
# weights of the embedded 7-point Gauss rule (at the odd Kronrod abscissae 1, 3, 5, 7)
XGK = np.array([0.991455371120812639206854697526329, 0.949107912342758524526189684047851,
                0.864864423359769072789712788640926, 0.741531185599394439863864773280788,
                0.586087235467691130294144845693013, 0.405845151377397166906606412076961,
                0.207784955007898467600689403773245, 0.0])
WGK = np.array([0.022935322010529224963732008058970, 0.063092092629978553290700663189204,
                0.104790010322250183839876322541518, 0.140653259715525918745189590510238,
                0.169004726639267902826583426598550, 0.190350578064785409913256402421014,
                0.204432940075298892414161999234649, 0.209482141084727828012999174891714])
WG = np.array([0.129484966168869693270611432679082, 0.279705391489276667901467771423780,
               0.381830050505118944950369775488975, 0.417959183673469387755102040816327])
#: the 15 Kronrod nodes on [-1, 1] in the order the kernels use, their Kronrod weights, and the
#: Gauss weight of each (0 where the node is Kronrod only)
NODES = np.concatenate([-XGK[:7], XGK[7:], XGK[6::-1]])
W_K = np.concatenate([WGK[:7], WGK[7:], WGK[6::-1]])
W_G = np.zeros(15)
for _j, _i in enumerate((1, 3, 5)):
    W_G[_i] = WG[_j]
    W_G[14 - _i] = WG[_j]
W_G[7] = WG[3]
del _j, _i


@nb.njit(cache=True, nogil=True)
def cf_parts(u, T, v0, kappa, theta, xi, rho):
    """``(log phi, D, dlog phi / dT)`` at ``z = u - i/2`` (complex, see the module docstring)."""
    s = u * u + 0.25
    beta = complex(kappa - 0.5 * rho * xi, -rho * xi * u)
    d = np.sqrt(beta * beta + xi * xi * s)
    bpd = beta + d
    g = -(xi * xi * s) / (bpd * bpd)          # (beta - d) / (beta + d)
    e = np.exp(-d * T)
    one_e = 1.0 - e
    den = 1.0 - g * e
    D = -s / bpd * one_e / den
    w = g * one_e / (1.0 - g)
    w_xi2 = -s * one_e / (bpd * bpd * (1.0 - g))  # w / xi^2
    if abs(w) < 1e-4:
        ratio = 1.0 - w / 2.0 + w * w / 3.0 - w * w * w / 4.0
    else:
        ratio = np.log(1.0 + w) / w
    C = kappa * theta * (-s * T / bpd - 2.0 * ratio * w_xi2)
    dD = -0.5 * s - beta * D + 0.5 * xi * xi * D * D
    return C + v0 * D, D, kappa * theta * D + v0 * dD


@nb.njit(cache=True, nogil=True)
def truncation(T, v0, kappa, theta, xi, rho, tol):
    """The truncation point U of the quadrature rule (module docstring, step 1)."""
    U = 4.0
    while U < U_MAX:
        lp, _, _ = cf_parts(U, T, v0, kappa, theta, xi, rho)
        if lp.real <= math.log(tol * U):
            break
        U *= 2.0
    return U


@nb.njit(cache=True, nogil=True)
def _panel(a, b, T, v0, kappa, theta, xi, rho, ks, m, greeks, acc_k, g0, g1, err):
    """The Kronrod sums of the integrals over [a, b] into ``acc_k`` (m, 5); the largest
    Kronrod–Gauss difference of I0 and I1 over the strikes into ``err[0]``, and the largest
    Kronrod sum of |f0| and |f1| (the scale of the rounding noise) into ``err[1]``."""
    c = 0.5 * (a + b)
    h = 0.5 * (b - a)
    for j in range(m):
        for t in range(N_INT):
            acc_k[j, t] = 0.0
    e_max = 0.0
    a_max = 0.0
    for j in range(m):
        g0[j] = 0.0
        g1[j] = 0.0
    for n in range(15):
        u = c + h * NODES[n]
        lp, D, dT = cf_parts(u, T, v0, kappa, theta, xi, rho)
        s = u * u + 0.25
        wk = h * W_K[n]
        wg = h * W_G[n]
        amp = math.exp(lp.real)
        for j in range(m):
            ph = lp.imag + u * ks[j]
            psi = complex(amp * math.cos(ph), amp * math.sin(ph))
            f0 = psi.real / s
            f1 = -u * psi.imag / s
            acc_k[j, 0] += wk * f0
            acc_k[j, 1] += wk * f1
            a_max = max(a_max, wk * (abs(f0) + abs(f1)))
            g0[j] += wg * f0
            g1[j] += wg * f1
            if greeks:
                acc_k[j, 2] += wk * psi.real
                acc_k[j, 3] += wk * (D * psi).real / s
                acc_k[j, 4] += wk * (dT * psi).real / s
    for j in range(m):
        e_max = max(e_max, abs(acc_k[j, 0] - g0[j]), abs(acc_k[j, 1] - g1[j]))
    err[0] = e_max
    err[1] = 15.0 * a_max


@nb.njit(cache=True, nogil=True)
def chunk_integrals(T, v0, kappa, theta, xi, rho, ks, greeks, tol, out):
    """The five integrals (I0, I1, G, Iv, IT) of the strikes ``ks`` (log-moneyness ln(F/K),
    shape (m,)) of one chunk into ``out`` (m, 5), by the rule of the module docstring.
    Returns the number of characteristic-function evaluations."""
    m = ks.shape[0]
    U = truncation(T, v0, kappa, theta, xi, rho, tol)
    for j in range(m):
        for t in range(N_INT):
            out[j, t] = 0.0
    acc = np.empty((m, N_INT))
    g0 = np.empty(m)
    g1 = np.empty(m)
    err = np.zeros(2)
    # the stack of panels still to do: (a, b, depth); depth first, so it holds at most the
    # initial panels (<= 22) and one more per level (<= MAX_DEPTH + 1)
    cap = STACK
    sa = np.empty(cap)
    sb = np.empty(cap)
    sd = np.empty(cap, dtype=np.int64)
    top = 0
    # initial graded panels, pushed so that the first popped is [0, 1]
    b = U
    while b > 1.0:
        sa[top] = 0.5 * b if 0.5 * b >= 1.0 else 1.0
        sb[top] = b
        sd[top] = 0
        top += 1
        b = 0.5 * b
    sa[top] = 0.0
    sb[top] = 1.0
    sd[top] = 0
    top += 1
    evals = 0
    while top > 0:
        top -= 1
        a = sa[top]
        bb = sb[top]
        depth = sd[top]
        _panel(a, bb, T, v0, kappa, theta, xi, rho, ks, m, greeks, acc, g0, g1, err)
        evals += 15
        if err[0] > tol * (bb - a) / U + NOISE * err[1] and depth < MAX_DEPTH and top + 2 <= cap:
            mid = 0.5 * (a + bb)
            sa[top] = mid
            sb[top] = bb
            sd[top] = depth + 1
            top += 1
            sa[top] = a
            sb[top] = mid
            sd[top] = depth + 1
            top += 1
            continue
        for j in range(m):
            for t in range(N_INT):
                out[j, t] += acc[j, t]
    return evals


@nb.njit(cache=True, nogil=True)
def contract_values(is_call, S, K, T, r, q, v0, ints, greeks, out, i):
    """Price and Greeks of one contract from its integrals ``ints`` (5,) into ``out[:, i]``
    (rows price, delta, gamma, theta, vega, rho, dV/dv0). Vega is dV/d sqrt(v0) = 2 sqrt(v0)
    dV/dv0 (per 1.00 of the instantaneous volatility)."""
    dfr = math.exp(-r * T)
    dfq = math.exp(-q * T)
    F = S * math.exp((r - q) * T)
    sfk = math.sqrt(F * K)
    fwd_val = dfr * (F - K)
    # floored at the no-arbitrage bound max(Df (F - K), 0): lifts only values within the
    # quadrature's error of it
    call = max(dfr * (F - sfk * ints[0] / math.pi), fwd_val, 0.0)
    V = call if is_call else call - fwd_val
    out[0, i] = V
    if not greeks:
        for t in range(1, 7):
            out[t, i] = np.nan
        return
    dcall = dfq * (1.0 - math.sqrt(K / F) * (0.5 * ints[0] + ints[1]) / math.pi)
    delta = dcall if is_call else dcall - dfq
    gamma = dfq * math.sqrt(K / F) * ints[2] / (math.pi * S)
    dv0 = -dfr * sfk * ints[3] / math.pi
    # theta of the call; the put's by parity (P = C - S e^{-qT} + K e^{-rT})
    theta_c = r * call - (r - q) * S * dcall + dfr * sfk * ints[4] / math.pi
    theta = theta_c if is_call else theta_c + r * K * dfr - q * S * dfq
    out[1, i] = delta
    out[2, i] = gamma
    out[3, i] = theta
    out[4, i] = 2.0 * math.sqrt(v0) * dv0
    out[5, i] = T * (S * delta - V)
    out[6, i] = dv0


@nb.njit(cache=True, nogil=True)
def _one_chunk(c, kind, S, K, T, r, q, v0, kappa, theta, xi, rho, order, starts, greeks, tol, out, evals):
    a = starts[c]
    m = starts[c + 1] - a
    i0 = order[a]
    ks = np.empty(m)
    for j in range(m):
        i = order[a + j]
        ks[j] = math.log(S[i] * math.exp((r[i] - q[i]) * T[i]) / K[i])
    ints = np.empty((m, N_INT))
    evals[c] = chunk_integrals(T[i0], v0[i0], kappa[i0], theta[i0], xi[i0], rho[i0], ks, greeks, tol, ints)
    for j in range(m):
        i = order[a + j]
        contract_values(kind[i] == 1, S[i], K[i], T[i], r[i], q[i], v0[i], ints[j], greeks, out, i)


@nb.njit(cache=True, nogil=True, parallel=True)
def _chunks_parallel(kind, S, K, T, r, q, v0, kappa, theta, xi, rho, order, starts, greeks, tol, out, evals):
    for c in nb.prange(starts.shape[0] - 1):
        _one_chunk(c, kind, S, K, T, r, q, v0, kappa, theta, xi, rho, order, starts, greeks, tol, out, evals)


@nb.njit(cache=True, nogil=True)
def _chunks_serial(kind, S, K, T, r, q, v0, kappa, theta, xi, rho, order, starts, greeks, tol, out, evals):
    for c in range(starts.shape[0] - 1):
        _one_chunk(c, kind, S, K, T, r, q, v0, kappa, theta, xi, rho, order, starts, greeks, tol, out, evals)


#: fewer chunks than this are priced on one thread (a parallel region costs more than it saves)
PARALLEL_MIN_CHUNKS = 32


def price_chunks(kind, S, K, T, r, q, v0, kappa, theta, xi, rho, order, starts, greeks, tol):
    """Price the contracts in chunks: ``order`` (n,) lists the rows chunk by chunk, chunk c is
    ``order[starts[c]:starts[c+1]]`` (rows of one expiry and parameter set), the chunks in
    parallel threads (numba ``prange``) from :data:`PARALLEL_MIN_CHUNKS` chunks. Columns as
    :func:`heston_batch` (contiguous float64, ``kind`` int8). Returns ``(values (7, n), evals
    (n_chunks,))``: rows price, delta, gamma, theta, vega, rho, dV/dv0 (NaN Greeks when
    ``greeks`` is False) and the characteristic-function evaluations of each chunk."""
    n = S.shape[0]
    out = np.empty((7, n))
    evals = np.zeros(starts.shape[0] - 1, dtype=np.int64)
    run = _chunks_parallel if starts.shape[0] - 1 >= PARALLEL_MIN_CHUNKS else _chunks_serial
    run(kind, S, K, T, r, q, v0, kappa, theta, xi, rho, order, starts, bool(greeks), float(tol), out, evals)
    return out, evals


def plan_chunks(expiry, v0, kappa, theta, xi, rho, chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """Group rows of equal (expiry, v0, kappa, theta, xi, rho) and cut each group into chunks
    of at most ``chunk`` rows: ``(order (n,), starts (n_chunks + 1,))`` int64 (rows in input
    order within a chunk). The GPU kernel takes the same plan, so both sum the same panels."""
    n = len(expiry)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(1, np.int64)
    keys = np.stack([np.asarray(a, dtype=np.float64) for a in (expiry, v0, kappa, theta, xi, rho)], axis=1)
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable").astype(np.int64)
    g = inv[order]
    bounds = np.flatnonzero(np.diff(g)) + 1
    starts = [0]
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, n]):
        for s in range(int(lo) + chunk, int(hi), chunk):
            starts.append(s)
        starts.append(int(hi))
    return order, np.asarray(starts, dtype=np.int64)


def heston_batch(kind, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho,
                 greeks: bool = True, tol: float = TOL, chunk: int = CHUNK) -> np.ndarray:
    """European Heston prices and Greeks of a batch (columns of shape (n,), validated).

    Args:
        kind: int8, 0 put, 1 call. spot, strike: currency units. expiry: years.
        rate, dividend_yield: annualised continuously compounded decimals.
        v0, theta: annualised variances; kappa: per year; xi: vol of variance; rho: -1..1.
        greeks: also delta, gamma, theta, vega (dV/d sqrt(v0)), rho and dV/dv0.
        tol: absolute tolerance of the price integral (module docstring; price error below
            ``2 tol Df sqrt(F K) / pi``).
        chunk: most strikes per shared set of characteristic-function evaluations.

    Returns:
        float64 (7, n): price, delta, gamma, theta, vega, rho, dV/dv0 (NaN Greeks without
        ``greeks``).
    """
    cols = [np.ascontiguousarray(np.asarray(a, dtype=np.float64).reshape(-1)) for a in
            (spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho)]
    n = max(c.shape[0] for c in cols)
    cols = [kernel_column(np.broadcast_to(c, (n,)), np.float64) for c in cols]
    kind = kernel_column(np.broadcast_to(np.asarray(kind, dtype=np.int8).reshape(-1), (n,)), np.int8)
    S, K, T, r, q, a0, ka, th, x, ro = cols
    order, starts = plan_chunks(T, a0, ka, th, x, ro, chunk)
    out, _ = price_chunks(kind, S, K, T, r, q, a0, ka, th, x, ro, order, starts, bool(greeks), float(tol))
    return out
