"""The gold reference of the spectral American engine: Andersen–Lake–Offengenden on the CPU (numba).

Source: L. Andersen, M. Lake and D. Offengenden (2016), "High-performance American option
pricing", *Journal of Computational Finance* 20(1), 39–87 (ALO below); the QD+ start from
M. Li (2005), "Analytical approximations for the critical stock prices of American options",
*Quantitative Finance* 10(2) (the QD+ boundary equation). Everything is written for an American
**put**; a call is the put with spot and strike, and rate and dividend yield, swapped
(McDonald & Schroder 1998, the put–call symmetry ``C(S, K, r, q) = P(K, S, q, r)``).

The formulation, per option (put, strike K, rate r, dividend yield q, volatility sigma,
expiry T; X = B(0+) = ``K min(1, r/q)`` for r > 0 < q, else K: Andersen & Lake 2021, table 2):

Plan tables (one setting: n, l, m, p and the two quadrature rules; built once by :func:`plan`,
independent of the option; ``Plan.tables = (ft, fa, fwa, fwb, fmt, pa, pw, pmt)``):

* nodes ``xi_j = cos(j pi / n)``, j = 0..n-1 (j = n is tau = 0, where H = 0 and is not
  stored); ``ft_j = (1 + xi_j) / 2 = sqrt(tau_j / T)``;
* fixed-point rule y_k, w_k (k < l) on [-1, 1] through ``theta_k = pi/4 (1 + y_k)``: the
  elapsed time ``s = tau sin^2 theta`` and the time left ``u = tau - s = tau cos^2 theta``.
  Both sqrt(s) (the 1/sqrt(s) kernel) and sqrt(u) (the boundary is smooth in sqrt(u), with
  B'(0+) infinite) are then smooth in theta, so Gauss–Legendre converges geometrically (in
  ALO's ``s = tau (1 + y)^2 / 4`` the integrand has a sqrt(1 - y) end point and Gauss–Legendre
  error falls like l^-3). ``fa_k = sin theta_k``, ``fwa_k = pi/2 w_k sin theta_k cos theta_k``
  (ds / tau), ``fwb_k = pi/2 w_k cos theta_k`` (ds / sqrt(s tau));
* ``fmt`` (n, n l): ``H(u_jk) = sum_c fmt[c, j l + k] H_c`` with ``xi(u_jk) = 2 ft_j cos theta_k
  - 1``: the Chebyshev interpolant at every fixed-point abscissa is one mat-vec, since
  u_jk / T does not depend on the option;
* premium rule on ``theta = pi/2 a^2``, ``a = (1 + y) / 2``, ``s = T sin^2 theta``: the points
  crowd s -> 0, where the integrand has a layer of width about (ln(S / B(T)) / sigma)^2 when
  the spot is just above the boundary and sigma is low; ``pa_k = sin theta_k`` (sqrt(s / T)),
  ``pw_k = pi w_k a_k sin theta_k cos theta_k`` (ds / T) and ``pmt`` (n, p): H at T - s,
  ``xi = 2 cos theta_k - 1``.

Per option (:func:`put_boundary`, :func:`put_value`; flat scratch arrays, no allocation):

1. QD+ (Li 2005) at each node, each root find (Halley) started from the Barone-Adesi & Whaley
   seed (:func:`.qdplus.qdplus_seed`), so the nodes are independent: on the CPU the root finds of a
   chunk of options run side by side in vector passes (:func:`.qdplus.qdplus_nodes`), on the GPU a
   lane or a loop each. The start is kept tight (steps to ``QDPLUS_TOL`` X = 1e-6 X): a start
   1e-3 off at one short node left the damped iteration of step 4 stalled 1e-6 from the fixed
   point on a short call at the high-precision setting. ``H_j = ln(B_j / X)^2``.
2. Option constants at every abscissa i = j l + k: ``sqrt(s) = sqrt(T) ft_j fa_k``,
   ``ivs_i = 1 / (sigma sqrt(s)) = (1 / (sigma sqrt(tau_j))) (1 / fa_k)``, ``cc_i = ((r - q)/sigma + sigma/2) sqrt(s)``,
   ``ea_i = e^{-q s} fwa_k tau_j``, ``eb_i = e^{-q s} fwb_k sqrt(tau_j) / (sigma sqrt(2 pi))``;
   per node ``e^{-q tau_j}`` and ``v_j = sigma sqrt(tau_j)``.
3. Each of m sweeps (Jacobi: all nodes from the same interpolant): ``Hu = fmt^T H``;
   ``sh_j = sqrt(H_j) = ln(X / B_j)``; per abscissa (no logarithm: ln(B_j / B(u)) is a
   difference of square roots)::

       L = sqrt(max(Hu_i, 0)) - sh_j          # ln(B(tau_j) / B(u))
       d = L ivs_i + cc_i                     # d+(s, B(tau_j) / B(u))
       K12_j += ea_i Phi(d) + eb_i e^{-d^2/2}
       K3_j  += eb_i e^{L - d^2/2}            # e^{-r s} phi(d-) = e^{-q s} phi(d+) e^L

4. The smooth-pasting (density) form of the boundary equation, ALO's FP-B (QuantLib's
   ``FP_A``): ``B_j = K N / D`` with ``d+ = (ln(X/K) - sh_j + (r - q) tau_j) / v_j + v_j / 2``::

       N = e^{-q tau} phi(d+) (B_j / K) / v_j + r K3_j     # e^{-r tau} phi(d-) / v
       D = e^{-q tau} (phi(d+) / v_j + Phi(d+)) + q K12_j

   The first sweep is a Jacobi–Newton step (ALO: the derivative of N/D's explicit terms in
   B_j), the others plain; the new ``H_j = ln(min(B_j / X, 1))^2``, taken whole unless a sweep
   (the third on) moved some node more than the sweep before did: then every later step is
   halved, ``H_j += w (H_j' - H_j)``, w = 1/2, 1/4, ... (on long low-volatility contracts with r
   well above q the plain iteration oscillates and grows; where it converges its largest update
   shrinks about 10x a sweep, so the rule never fires there). (ALO's cumulative form,
   QuantLib's ``FP_B``, contracts several times slower per sweep on long, volatile
   contracts; a Gauss–Seidel order and a full local Newton step did not help.)
5. Price (Kim 1990; ALO's premium): ``V = p_E(S) + T sum_k pw_k [r K e^{-r s} Phi(-d-) - q S
   e^{-q s} Phi(-d+)]`` with ``d+- = (ln(S/X) + sqrt(H(T - s)) + (r - q) s) / (sigma sqrt s)
   +- sigma sqrt(s) / 2``; V = K - S where S <= B(T). Delta and gamma are its S-derivatives
   with the boundary held (it does not depend on S); theta from the Black–Scholes PDE in the
   continuation region (``theta = rV - (r - q) S delta - sigma^2 S^2 gamma / 2``); vega and rho
   central differences of the whole solve (:data:`VEGA_BUMP`, :data:`RHO_BUMP`).

On the CPU the exp / log / Phi of steps 1-5 run in passes over arrays with branch-free
polynomial forms (:mod:`.vmath`) that the compiler vectorises; the
GPU kernels (``spectral.cu``) take the same recurrences with the device's exp and log and the
same rational Phi.

Errors: against a converged reference (our n = 96 and QuantLib's tanh-sinh scheme with 64
nodes agree to 4e-10 on the 240-option grid of ``tests/test_spectral.py``), the error of a
setting is the sum of the Chebyshev interpolation error in n (algebraic: the boundary's
``tau ln tau`` start and, for r just below q, a layer at small tau; n = 12: 6e-6, 24: 1e-7,
48: 3e-9 worst on the grid), the fixed-point contraction (about 10x per sweep on the worst
contracts: T of years with sigma near 1; slower where sigma is low and |r - q| high), and the
two quadratures (geometric in l and p). On 2,000 of ``bench/american.py``'s 100,000 random
contracts (same ranges) against our n = 96 solve the worst errors are 8.7e-5 (fast), 3.5e-5
(accurate) and 7.2e-7 (high precision), all on long low-volatility contracts with |r - q| of
5-8 %, where the fixed point contracts slowly (a call, T 3.4, sigma 8.8 %, r 0.4 %, q 5.7 %);
99 % of them are under 5.1e-6, 9.2e-8 and 1.5e-9.

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

from ...columns import kernel_column
from ..rootfind import IV_ABOVE, IV_BELOW, IV_INVALID, IV_NOT_CONVERGED, IV_OK
from .qdplus import QDPLUS_TOL, qdplus_nodes
from .vmath import _INV_SQRT_2PI, PAD, _Phi, ncdf_e, vexp, vlog, vncdf
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)


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


#: The three settings (ALO's and QuantLib's fast / accurate / high precision; our node counts,
#: the cheapest found meeting 1e-5 / 2e-7 / 5e-9 worst absolute error on the 240-option grid
#: of ``tests/test_spectral.py`` against a converged reference: the front door's
#: ``MEASURED_ERROR``; times in ``bench/american.py``).
ACCURACY = {
    "fast": Accuracy("fast", n=11, l=8, m=4, p=20),
    "accurate": Accuracy("accurate", n=24, l=16, m=6, p=40),
    "high-precision": Accuracy("high-precision", n=48, l=32, m=12, p=64),
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


def interpolation_matrix(n: int, xi: np.ndarray) -> np.ndarray:
    """The (len(xi), n) matrix taking the values ``H_j`` at the Chebyshev extreme points
    ``cos(j pi / n)``, j = 0..n-1, to the degree-n interpolant's values at ``xi`` (the node
    j = n, tau = 0, where H = 0, is left out)."""
    k = np.arange(n + 1)
    tk = np.cos(np.outer(np.arccos(np.clip(xi, -1.0, 1.0)), k))  # T_k(xi)
    return (tk @ chebyshev_matrix(n))[:, :n]


@dataclass(frozen=True)
class Plan:
    """The arrays a setting needs (built once per setting by :func:`plan`); ``tables`` is what
    the kernels take, ``(ft, fa, fwa, fwb, fmt, pa, pw, pmt)`` (module docstring)."""

    accuracy: Accuracy
    xi: np.ndarray     # (n+1,) collocation points cos(j pi / n)
    cheb: np.ndarray   # (n+1, n+1) values -> coefficients
    tables: tuple      # (ft (n,), fa, fwa, fwb (l,), fmt (n, n l), pa, pw (p,), pmt (n, p))


_PLANS: dict[Accuracy, Plan] = {}


def _tables(acc: Accuracy) -> tuple:
    n = acc.n
    xi = np.cos(np.arange(n + 1) * np.pi / n)
    ft = 0.5 * (1.0 + xi[:n])                          # sqrt(tau_j / T)
    yp, ym, w = rule_nodes(acc.rule, acc.l)
    fa = np.sin(0.25 * np.pi * yp)                     # sin(theta_k): sqrt(s / tau), theta = pi/4 (1 + y)
    fc = np.sin(0.25 * np.pi * ym)                     # cos(theta_k): sqrt(u / tau), u = tau - s
    fwa = 0.5 * np.pi * w * fa * fc                    # ds / tau = 2 sin cos dtheta, dtheta = pi/4 dy
    fwb = 0.5 * np.pi * w * fc                         # ds / (sqrt(s) sqrt(tau))
    fmt = interpolation_matrix(n, (2.0 * np.outer(ft, fc) - 1.0).ravel()).T  # xi(u_jk) = 2 sqrt(u_jk / T) - 1
    yp, ym, w = rule_nodes(acc.price_rule, acc.p)
    a = 0.5 * yp
    th = 0.5 * np.pi * a * a                           # theta = pi/2 a^2: points crowd s -> 0
    pa = np.sin(th)                                    # sqrt(s / T)
    pc = np.sin(0.5 * np.pi * 0.25 * ym * (4.0 - ym))  # cos(theta) = sin(pi/2 (1 - a^2))
    pw = np.pi * w * a * pa * pc                       # ds / T = 2 sin cos dtheta, dtheta = pi a da, da = dy / 2
    pmt = interpolation_matrix(n, 2.0 * pc - 1.0).T
    return tuple(np.ascontiguousarray(a, dtype=np.float64) for a in (ft, fa, fwa, fwb, fmt, pa, pw, pmt))


def plan(accuracy: str | Accuracy) -> Plan:
    """The :class:`Plan` of an accuracy setting (a name of :data:`ACCURACY` or an
    :class:`Accuracy`).

    Raises:
        KeyError: an unknown setting name.
        ValueError: a setting with n < 1, m < 1, or an unknown or empty rule.
    """
    acc = ACCURACY[accuracy] if isinstance(accuracy, str) else accuracy
    got = _PLANS.get(acc)
    if got is None:
        if acc.n < 1 or acc.m < 1:
            raise ValueError(f"accuracy setting {acc}: n and m must be >= 1")
        got = Plan(acc, np.cos(np.arange(acc.n + 1) * np.pi / acc.n), chebyshev_matrix(acc.n), _tables(acc))
        _PLANS[acc] = got
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


#: where the drift dominates: kappa = |r - q| sqrt(T) / sigma above this, the integrands of the
#: boundary equation and of the premium concentrate in a layer s <~ (sigma / (r - q))^2 that no
#: setting's fixed rule resolves (measured against BBSR trees of 6,000 steps at the money: worst
#: 3e-7 at kappa 1.0 and 1.2 at high precision, 6e-5 to 3e-4 at 1.4, 5e-4 to 2e-2 at 1.6-1.8, and
#: prices under the exercise value beyond); the front door prices those rows on the tree
DRIFT_LIMIT = 1.0


def drift_volatility(rate, dividend_yield, expiry):
    """The volatility under which a row is drift-dominated (:data:`DRIFT_LIMIT`):
    ``|r - q| sqrt(T) / DRIFT_LIMIT``, shape of the broadcast inputs (annualised decimals, years)."""
    return np.abs(np.asarray(rate, dtype=np.float64) - np.asarray(dividend_yield, dtype=np.float64)) * \
        np.sqrt(np.asarray(expiry, dtype=np.float64)) / DRIFT_LIMIT


# ------------------------------------------------------------------------------- numba kernels

@nb.njit(cache=True, nogil=True, error_model="numpy")
def x_max(K, r, q):
    """B(0+) of a put (Andersen & Lake 2021, table 2), single-boundary regime."""
    if r > 0.0 and q > 0.0:
        return K * min(1.0, r / q)
    return K


@nb.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def interpolate(tab, H, out):
    """``out = tab^T H``: the boundary's interpolant at a plan's abscissae (``tab`` (n, k) of
    :func:`interpolation_matrix`, transposed; column-major loops that vectorise)."""
    k = tab.shape[1]
    for i in range(k):
        out[i] = 0.0
    for c in range(tab.shape[0]):
        h = H[c]
        for i in range(k):
            out[i] += tab[c, i] * h


@nb.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def put_boundary(K, T, r, q, sig, m, ft, fa, fwa, fwb, fmt, H, sn, Hu, ivs, cc, ea, eb, va, vb, vc, vd, kb, nw, opt,
                 start):
    """The exercise boundary of an American put (single-boundary regime): writes
    ``H_j = ln(B(tau_j) / X)^2`` at the n collocation nodes with tau > 0 to ``H`` (shape (n,))
    and returns X = B(0+). Plan tables ``ft, fa, fwa, fwb, fmt``; scratch ``sn`` (n,),
    ``Hu, ivs, cc, ea, eb`` (n l,), ``va, vb, kb`` (>= 2 n l), ``vc, vd`` (>= n l), ``nw``
    (6 n,); steps 1-4
    of the module docstring."""
    n = ft.shape[0]
    l = fa.shape[0]
    nl = n * l
    X = x_max(K, r, q)
    sT = math.sqrt(T)
    # 1. QD+ at every node, each from its own seed (``start``: the caller's, in H already)
    if not start:
        opt[0, 0] = K
        opt[1, 0] = T
        opt[2, 0] = r
        opt[3, 0] = q
        opt[4, 0] = sig
        opt[5, 0] = X
        qdplus_nodes(opt, 1, ft, H, nw, va, vb, vc, vd, kb, QDPLUS_TOL)
    # 2. the option's constant tables at the fixed-point abscissae (i = j l + k)
    mu = (r - q) / sig + 0.5 * sig
    for k in range(l):
        vd[k] = 1.0 / fa[k]
    for j in range(n):
        st = sT * ft[j]
        ist = 1.0 / (sig * st)
        for k in range(l):
            i = j * l + k
            zs = st * fa[k]                                  # sqrt(s_jk)
            ivs[i] = ist * vd[k]                             # 1 / (sigma sqrt(s_jk))
            cc[i] = mu * zs
            va[i] = -q * zs * zs
    vexp(va, vb, kb, nl)                                     # e^{-q s_jk}
    for j in range(n):
        st = sT * ft[j]
        c1 = st / sig * _INV_SQRT_2PI
        tau = st * st
        for k in range(l):
            i = j * l + k
            ea[i] = vb[i] * fwa[k] * tau
            eb[i] = vb[i] * fwb[k] * c1
    lxk = math.log(X / K)
    ik = 1.0 / K
    ix = 1.0 / X
    for j in range(n):
        v = sig * sT * ft[j]                                # sigma sqrt(tau_j)
        nw[5 * n + j] = v
        nw[6 * n + j] = 1.0 / v
        nw[7 * n + j] = lxk + (r - q) * T * ft[j] * ft[j]   # ln(X / K) + (r - q) tau_j
        va[j] = -q * T * ft[j] * ft[j]
    vexp(va, nw[4 * n:5 * n], kb, n)                        # e^{-q tau_j}
    step = 1.0
    last = np.inf
    for it in range(m):
        # 3. the boundary at every abscissa u_jk = tau_j - s_jk: one mat-vec with the plan's table
        interpolate(fmt, H, Hu)
        for j in range(n):
            sn[j] = math.sqrt(max(H[j], 0.0))               # ln(X / B(tau_j))
        # 4. the integrands at every abscissa, in passes that vectorise
        for j in range(n):
            sh = sn[j]
            for k in range(l):
                i = j * l + k
                L = math.sqrt(max(Hu[i], 0.0)) - sh         # ln(B(tau_j) / B(u_jk))
                d = L * ivs[i] + cc[i]                      # d+(s_jk, B(tau_j) / B(u_jk))
                g = -0.5 * d * d
                vc[i] = d
                va[i] = g
                va[nl + i] = g + L
        vexp(va, vb, kb, 2 * nl)                            # phi(d+) sqrt(2 pi); e^{-r s} phi(d-) sqrt(2 pi) / e^{-q s}
        vncdf(vc, vb, vd, nl)                               # Phi(d+)
        # 5. the fixed-point map at each node (Jacobi: every node from the same interpolant),
        #    again in passes over the nodes: nw = [K12 | K3 | - | - | e^{-q tau} | sigma sqrt(tau)
        #    | 1 / (sigma sqrt(tau)) | ln(X / K) + (r - q) tau], d+ in vc, Phi(d+) in vd
        for j in range(n):
            k12 = 0.0
            k3 = 0.0
            for k in range(l):
                i = j * l + k
                k12 += ea[i] * vd[i] + eb[i] * vb[i]
                k3 += eb[i] * vb[nl + i]                    # e^{-r s} phi(d-) = e^{-q s} phi(d+) e^L
            nw[j] = k12
            nw[n + j] = k3
        for j in range(n):
            dp = (nw[7 * n + j] - sn[j]) * nw[6 * n + j] + 0.5 * nw[5 * n + j]
            vc[j] = dp
            va[j] = -sn[j]
            va[n + j] = -0.5 * dp * dp
        vexp(va, vb, kb, 2 * n)                             # B(tau_j) / X, sqrt(2 pi) phi(d+)
        vncdf(vc, vb[n:], vd, n)                            # Phi(d+)
        for j in range(n):
            v = nw[5 * n + j]
            iv = nw[6 * n + j]
            eq = nw[4 * n + j]
            bx = vb[j]
            b = X * bx
            php = _INV_SQRT_2PI * vb[n + j]
            N = eq * php * b * ik * iv + r * nw[n + j]     # e^{-r tau} phi(d-) = e^{-q tau} phi(d+) b / K
            D = eq * (php * iv + vd[j]) + q * nw[j]
            fv = K * N / D
            bn = fv
            if it == 0:
                # Jacobi-Newton on the first sweep (ALO 2016: the derivative of the explicit terms)
                dp = vc[j]
                Nd = -eq * php * (dp - v) * ik * iv * iv
                Dd = eq * php * iv * (1.0 - dp * iv) / b
                fd = K * (Nd - Dd * N / D) / D
                bn = b + (fv - b) / (1.0 - fd)
                bn = bn if (bn > 0.0 and bn < 1e300) else fv
            ok = D > 0.0 and N >= 0.0 and fv < 1e300          # else the densities underflow: keep the node
            va[j] = min(max(bn * ix, 1e-300), 1.0) if ok else bx
        vlog(va, vc, kb, n)
        # a sweep whose largest update outgrows the previous sweep's halves the step from then on:
        # the plain iteration oscillates and grows on long, low-volatility, high-drift contracts
        # (where it converges, the largest update shrinks about 10x a sweep)
        big = 0.0
        for j in range(n):
            big = max(big, abs(vc[j] * vc[j] - H[j]))
        if it > 1 and big > last:
            step *= 0.5
        last = big
        for j in range(n):
            H[j] += step * (vc[j] * vc[j] - H[j])
    return X


@nb.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def put_value(S, K, T, r, q, sig, X, H, pa, pw, pmt, hp, va, vb, vc, vd, kb, greeks):
    """(price, delta, gamma, theta) of an American put from its boundary (``H``, ``X`` of
    :func:`put_boundary`): the early-exercise premium by the premium rule (step 6). Scratch
    ``hp`` (p,), ``va, vb, kb`` (>= 4 p), ``vc, vd`` (>= 2 p)."""
    n = H.shape[0]
    p = pa.shape[0]
    bT = X * math.exp(-math.sqrt(max(H[0], 0.0)))
    if S <= bT:
        return K - S, -1.0, 0.0, 0.0
    sT = math.sqrt(T)
    v = sig * sT
    dp = (math.log(S / K) + (r - q) * T) / v + 0.5 * v
    dm = dp - v
    er = math.exp(-r * T)
    eq = math.exp(-q * T)
    ep = math.exp(-0.5 * dp * dp)
    Pp = ncdf_e(-dp, ep)
    euro = K * er * _Phi(-dm) - S * eq * Pp
    de = -eq * Pp
    ge = eq * _INV_SQRT_2PI * ep / (S * v)
    interpolate(pmt, H, hp)
    lsx = math.log(S / X)
    for k in range(p):
        z = sT * pa[k]                                     # sqrt(s)
        s = z * z
        sh = math.sqrt(max(hp[k], 0.0))                    # ln(X / B(T - s))
        hp[k] = sh
        vs = sig * z
        e1 = (lsx + sh + (r - q) * s) / vs + 0.5 * vs      # d+(s, S / B(T - s))
        e2 = e1 - vs
        vc[k] = -e1
        vc[p + k] = -e2
        va[k] = -0.5 * e1 * e1
        va[p + k] = -0.5 * e2 * e2
        va[2 * p + k] = -q * s
        va[3 * p + k] = -r * s
    vexp(va, vb, kb, 4 * p)
    vncdf(vc, vb, vd, 2 * p)                               # Phi(-d+), Phi(-d-)
    kx = K / X
    prem = 0.0
    dprem = 0.0
    gprem = 0.0
    for k in range(p):
        fq = vb[2 * p + k]
        ws = pw[k] * T
        prem += ws * (r * K * vb[3 * p + k] * vd[p + k] - q * S * fq * vd[k])
        if greeks and hp[k] < 700.0:
            z = sT * pa[k]
            vs = sig * z
            a = q - r * kx * math.exp(hp[k])               # q - r K / B(T - s)
            ph = _INV_SQRT_2PI * vb[k]
            dprem += ws * fq * (ph * a / vs - q * vd[k])
            gprem += ws * fq * ph / (S * vs) * (q + a * vc[k] / vs)
    price = max(euro, 0.0) + max(prem, 0.0)
    if not greeks:
        return price, np.nan, np.nan, np.nan
    delta = de + dprem
    gamma = ge + gprem
    theta = r * price - (r - q) * S * delta - 0.5 * sig * sig * S * S * gamma
    return price, delta, gamma, theta


@nb.njit(cache=True, nogil=True, error_model="numpy")
def alo_one(is_call, S, K, T, r, q, sig, m, tabs, work, greeks, start):
    """(price, delta, gamma, theta) of one American option of the single-boundary regime
    (a call through the put-call symmetry; its delta and gamma by the put's homogeneity:
    dC/dS = (P - S' dP/dS') / K', d2C/dS2 = S'^2 / K'^2 d2P/dS'2 with S' = K, K' = S).
    ``tabs``: the plan's tables ``(ft, fa, fwa, fwb, fmt, pa, pw, pmt)``; ``work``: the scratch
    of :func:`scratch`."""
    ft, fa, fwa, fwb, fmt, pa, pw, pmt = tabs
    H, sn, Hu, ivs, cc, ea, eb, hp, va, vb, vc, vd, kb, nw, opt = work
    if is_call:
        X = put_boundary(S, T, q, r, sig, m, ft, fa, fwa, fwb, fmt, H, sn, Hu, ivs, cc, ea, eb, va, vb, vc, vd, kb, nw,
                         opt, start)
        p, d, g, th = put_value(K, S, T, q, r, sig, X, H, pa, pw, pmt, hp, va, vb, vc, vd, kb, greeks)
        if not greeks:
            return p, d, g, th
        return p, (p - K * d) / S, K * K * g / (S * S), th
    X = put_boundary(K, T, r, q, sig, m, ft, fa, fwa, fwb, fmt, H, sn, Hu, ivs, cc, ea, eb, va, vb, vc, vd, kb, nw, opt,
                     start)
    return put_value(S, K, T, r, q, sig, X, H, pa, pw, pmt, hp, va, vb, vc, vd, kb, greeks)


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _alo_price(is_call, S, K, T, r, q, sig, m, tabs, work):
    return alo_one(is_call, S, K, T, r, q, sig, m, tabs, work, False, False)[0]


@nb.njit(cache=True, nogil=True)
def scratch(tabs):
    """The per-option scratch of :func:`alo_one` for the plan tables ``tabs``, ``(H, sn, Hu,
    ivs, cc, ea, eb, hp, va, vb, vc, vd, kb, nw, opt)`` (reused across the options one thread
    prices)."""
    n = tabs[0].shape[0]
    nl = n * tabs[1].shape[0]
    p = tabs[5].shape[0]
    big = max(2 * nl, 4 * p)
    mid = max(nl, 2 * p)
    return (np.empty(n), np.empty(n), np.empty(nl), np.empty(nl), np.empty(nl), np.empty(nl), np.empty(nl),
            np.empty(p), np.empty(big), np.empty(big), np.empty(mid), np.empty(mid), np.empty(big, dtype=np.int64),
            np.empty(17 * ((n + PAD - 1) // PAD * PAD)), np.empty((6, 1)))


#: options a thread takes at a time (its scratch is allocated once per chunk)
_CHUNK = 16


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _chunk_starts(lo, hi, kind, S, K, T, r, q, sig, ft):
    """The QD+ starts of rows ``lo:hi`` solved together (:func:`qdplus_nodes`: longer vector
    passes than one option's n nodes), flat (rows x n); each row as its put (a call's spot and
    strike, rate and dividend yield swapped)."""
    c = hi - lo
    n = ft.shape[0]
    w = (c * n + PAD - 1) // PAD * PAD
    opt = np.empty((6, c))
    for i in range(lo, hi):
        call = kind[i] == 1
        kp = S[i] if call else K[i]
        rp = q[i] if call else r[i]
        qp = r[i] if call else q[i]
        k = i - lo
        opt[0, k] = kp
        opt[1, k] = T[i]
        opt[2, k] = rp
        opt[3, k] = qp
        opt[4, k] = sig[i]
        opt[5, k] = x_max(kp, rp, qp)
    H = np.empty(w)
    qdplus_nodes(opt, c, ft, H, np.empty(17 * w), np.empty(3 * w), np.empty(3 * w), np.empty(3 * w), np.empty(3 * w),
                 np.empty(3 * w, dtype=np.int64), QDPLUS_TOL)
    return H


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _batch_rows(lo, hi, kind, S, K, T, r, q, sig, m, tabs, greeks, out):
    """Rows ``lo:hi`` of :func:`alo_batch_kernel` on one thread (one scratch for them all; the
    rows' QD+ starts solved together, :func:`_chunk_starts`)."""
    work = scratch(tabs)
    H = work[0]
    n = H.shape[0]
    starts = _chunk_starts(lo, hi, kind, S, K, T, r, q, sig, tabs[0])
    for i in range(lo, hi):
        c = kind[i] == 1
        H[:] = starts[(i - lo) * n:(i - lo + 1) * n]
        p, d, g, th = alo_one(c, S[i], K[i], T[i], r[i], q[i], sig[i], m, tabs, work, greeks, True)
        out[0, i] = p
        if not greeks:
            continue
        out[1, i] = d
        out[2, i] = g
        out[3, i] = th
        hv = min(VEGA_BUMP, 0.5 * sig[i])
        up = _alo_price(c, S[i], K[i], T[i], r[i], q[i], sig[i] + hv, m, tabs, work)
        dn = _alo_price(c, S[i], K[i], T[i], r[i], q[i], sig[i] - hv, m, tabs, work)
        out[4, i] = (up - dn) / (2.0 * hv)
        # rho: the bump keeps the row in its regime where it can (a one-sided difference at r' = 0)
        rp = r[i] + RHO_BUMP
        rm = r[i] - RHO_BUMP
        h2 = 2.0 * RHO_BUMP
        if (not c) and rm <= 0.0:
            rm = r[i]
            h2 = RHO_BUMP
        up = _alo_price(c, S[i], K[i], T[i], rp, q[i], sig[i], m, tabs, work)
        dn = _alo_price(c, S[i], K[i], T[i], rm, q[i], sig[i], m, tabs, work)
        out[5, i] = (up - dn) / h2
        # dividend rho: likewise a one-sided difference where a call's q' = q - h would leave
        # the single-boundary regime (a call's q plays the put's r under put-call symmetry)
        qp = q[i] + RHO_BUMP
        qm = q[i] - RHO_BUMP
        h2 = 2.0 * RHO_BUMP
        if c and qm <= 0.0:
            qm = q[i]
            h2 = RHO_BUMP
        up = _alo_price(c, S[i], K[i], T[i], r[i], qp, sig[i], m, tabs, work)
        dn = _alo_price(c, S[i], K[i], T[i], r[i], qm, sig[i], m, tabs, work)
        out[6, i] = (up - dn) / h2


@nb.njit(cache=True, parallel=True, error_model="numpy")
def alo_batch_kernel(kind, S, K, T, r, q, sig, m, tabs, greeks):
    """(7, n): price, delta, gamma, theta, vega, rho, dividend rho (Greeks NaN without ``greeks``); chunks of
    rows over the threads (``prange``)."""
    n = S.shape[0]
    out = np.full((7, n), np.nan)
    nch = (n + _CHUNK - 1) // _CHUNK
    for ch in nb.prange(nch):
        _batch_rows(ch * _CHUNK, min(n, (ch + 1) * _CHUNK), kind, S, K, T, r, q, sig, m, tabs, greeks, out)
    return out


def flat_columns(shape: tuple, kind, *arrays) -> tuple[np.ndarray, list[np.ndarray]]:
    """``kind`` as int8 and ``arrays`` as float64, each broadcast to ``shape``, contiguous and
    flat (shape (n,)): the kernels' inputs (CPU and GPU)."""
    kd = kernel_column(np.broadcast_to(np.asarray(kind, dtype=np.int8), shape), np.int8).reshape(-1)
    return kd, [kernel_column(np.broadcast_to(np.asarray(a, dtype=np.float64), shape), np.float64).reshape(-1)
                for a in arrays]


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
    kind, cols = flat_columns(np.shape(spot), kind, spot, strike, expiry, rate, dividend_yield, volatility)
    return alo_batch_kernel(kind, *cols, pl.accuracy.m, pl.tables, bool(greeks))


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _euro_vega(S, T, q, sig, lsk, mu_t):
    """Black-Scholes vega (a call's and a put's) S e^{-qT} phi(d+) sqrt(T),
    d+ = (ln(S/K) + mu_t) / (sig sqrt T) + sig sqrt(T) / 2."""
    v = sig * math.sqrt(T)
    d = (lsk + mu_t) / v + 0.5 * v
    return S * math.exp(-q * T) * _INV_SQRT_2PI * math.exp(-0.5 * d * d) * math.sqrt(T)


@nb.njit(cache=True, parallel=True, error_model="numpy")
def alo_iv_kernel(target, kind, S, K, T, r, q, lo, hi, xtol, m, tabs):
    """Implied volatilities on the engine's price: one solve per step. The first step from the
    at-the-money guess is Newton with the European vega (the American one's leading part), the
    others secant steps through the last two iterates; every step is kept inside the bracket
    that the signs of price - target give (a step that leaves it is a bisection, and so is a step
    over half the one before last once both ends are priced: Brent 1973's safeguard, without which
    secant steps crawl along a convex price from one side). The bracket
    ends ``lo``, ``hi`` are priced only if the search reaches them (no solution there:
    ``IV_BELOW`` / ``IV_ABOVE``). Returns (vol, status codes of :mod:`optiond.kernels.rootfind`)."""
    n = S.shape[0]
    vol = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int8)
    nch = (n + _CHUNK - 1) // _CHUNK
    for ch in nb.prange(nch):
        work = scratch(tabs)
        for i in range(ch * _CHUNK, min(n, (ch + 1) * _CHUNK)):
            p = target[i]
            if not (math.isfinite(p) and p >= 0.0):
                status[i] = IV_INVALID
                continue
            c = kind[i] == 1
            a = lo[i]
            b = hi[i]
            a_known = False  # the sign of f at a bracket end is known only once priced there
            b_known = False
            ftol = 1e-13 * max(1.0, p)
            # start: Brenner & Subrahmanyam's at-the-money guess, inside the bracket
            x = math.sqrt(2.0 * math.pi / T[i]) * p / S[i]
            if not (x > a and x < b):
                x = 0.5 * (a + b) if b < 1.0 else math.sqrt(a * b)
            status[i] = IV_NOT_CONVERGED
            xp = np.nan
            fp = np.nan
            e1 = np.inf  # the last two steps (Brent's safeguard)
            e2 = np.inf
            lsk = math.log(S[i] / K[i])
            mu_t = (r[i] - q[i]) * T[i]
            for _ in range(100):
                f = _alo_price(c, S[i], K[i], T[i], r[i], q[i], x, m, tabs, work) - p
                if abs(f) <= ftol:
                    status[i] = IV_OK
                    break
                if f < 0.0:
                    a = x
                    a_known = True
                else:
                    b = x
                    b_known = True
                if math.isfinite(fp) and f != fp:
                    xn = x - f * (x - xp) / (f - fp)
                else:
                    vg = _euro_vega(S[i], T[i], q[i], x, lsk, mu_t)
                    xn = x - f / vg if vg > 1e-300 else np.nan
                xp = x
                fp = f
                if not (xn > a and xn < b):
                    # the step leaves the bracket: price an end not yet priced, else bisect
                    if xn <= a and not a_known:
                        xn = a
                    elif xn >= b and not b_known:
                        xn = b
                    else:
                        xn = 0.5 * (a + b)
                        fp = np.nan  # the next step is Newton again
                elif a_known and b_known and abs(xn - x) > 0.5 * e2:
                    # a step not under half the one before last: secant steps that crawl along a
                    # convex price (all on one side of the root) give way to bisection
                    xn = 0.5 * (a + b)
                    fp = np.nan
                if (xn == a and not a_known) or (xn == b and not b_known):
                    fe = _alo_price(c, S[i], K[i], T[i], r[i], q[i], xn, m, tabs, work) - p
                    if xn == a:
                        a_known = True
                        if fe > ftol:
                            status[i] = IV_BELOW
                            break
                    else:
                        b_known = True
                        if fe < -ftol:
                            status[i] = IV_ABOVE
                            break
                    if abs(fe) <= ftol:
                        x = xn
                        status[i] = IV_OK
                        break
                    xn = 0.5 * (a + b)
                    fp = np.nan
                step = abs(xn - x)
                e2 = e1
                e1 = step
                x = xn
                if step <= xtol or (a_known and b_known and b - a <= xtol):
                    status[i] = IV_OK
                    break
            if status[i] == IV_OK:
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
    kind, f = flat_columns(np.shape(spot), kind, price, spot, strike, expiry, rate, dividend_yield, lo, hi)
    return alo_iv_kernel(f[0], kind, *f[1:6], f[6], f[7], float(xtol), pl.accuracy.m, pl.tables)
