"""Level 0 of the MLMC estimator: the payoff codes, the level-0 payoff (one Milstein step of
length T) and its normals, shared with the samplers, and its exact mean ``E[P_0]`` on the host.

The level-0 payoff and normals are those of the CPU sampler (:mod:`optiond.kernels.mlmc.cpu`;
``mlmc.cu`` repeats the arithmetic on the GPU), so the exact mean is that of the sampled level.

Exact level 0 (:func:`level0_mean`): the level-0 payoff is a function of one or two standard
normals through one Milstein step, so its expectation is computed on the host in FP64 instead
of being sampled (the driver's default, ``exact_level0=True`` in :mod:`optiond.kernels.mlmc`).
With ``A = 1 + mu T - sigma^2 T/2``, ``B = sigma sqrt(T)``, ``C = sigma^2 T/2`` the one-step
value is ``S_1 = S0 (A + B Z + C Z^2)``, ``Z ~ N(0, 1)``:

* call/put: ``S_1 - K = S0 C (Z - z1)(Z - z2)`` with ``D = A - K/S0`` and discriminant
  ``B^2 - 4 C D = sigma^2 T (1 - 2 D)``. If it is <= 0 (``K <= S0 (1/2 + mu T - sigma^2 T/2)``,
  deep in the money) the call payoff is the quadratic itself, ``E = disc S0 (C + D) = disc (S0
  (1 + mu T) - K)``, and the put is 0. Otherwise, with the real roots ``z1 < z2`` (computed in
  the cancellation-free form ``q = -(B + sqrt(disc))/2``, ``z1 = q/C``, ``z2 = D/q``), the call
  pays outside ``[z1, z2]`` and the put inside, and the normal partial moments
  ``E[(C Z^2 + B Z + D) 1{Z > t}] = (C + D) Phi(-t) + (C t + B) phi(t)`` (from
  ``E[Z 1{Z>t}] = phi(t)``, ``E[Z^2 1{Z>t}] = Phi(-t) + t phi(t)``) give

      call = disc S0 [ (C + D) (Phi(z1) + Phi(-z2)) - (C z1 + B) phi(z1) + (C z2 + B) phi(z2) ]
      put  = disc S0 [ (C z2 + B) phi(z2) - (C z1 + B) phi(z1) - (C + D) (Phi(z2) - Phi(z1)) ]

  (closed form: call - put = disc (S0 (1 + mu T) - K), parity of the one-step scheme).
* digital: level 0 is already the deterministic ``payout * Phi(+-zz) * disc`` (above).
* Asian: ``A_T = (S0 + S_1)/2 + sigma S0 sqrt(T/12) Z_I`` with ``Z_I`` independent of ``Z``
  and entering linearly, so conditionally on ``Z`` the average is normal with mean
  ``m(Z) = (S0 + S_1(Z))/2 - K`` (after subtracting K) and sd ``s = sigma S0 sqrt(T/12)``:
  ``E[(A_T - K)^+ | Z] = m Phi(m/s) + s phi(m/s)`` and ``E[(K - A_T)^+ | Z] = -m Phi(-m/s) + s
  phi(m/s)``, smooth in Z (no kink, s > 0). The remaining 1-D integral against ``phi(Z)`` has
  no closed form (the argument m/s is quadratic in Z); it is computed by composite 20-point
  Gauss–Legendre on ``|Z| <= 14`` (the neglected tails are < 1e-40 S0) with breakpoints at 0
  and at the real roots of ``m``, panels graded geometrically towards each root down to a
  quarter of the transition width ``s / |m'(root)|`` and at most 0.25 wide elsewhere.
  Accuracy: against ``scipy.integrate.quad`` (epsrel 1e-13, split at the same roots) the
  difference is <= 2e-13 relative and <= 1e-15 S0 absolute for calls and puts with sigma sqrt(T)
  from 0.005 to 16 and K/S0 from 0.3 to 3 (tests/test_mlmc.py checks a set of them), i.e. far
  below any eps the driver is used with (~2000 integrand values per option).

The expectations are those of the *discretised* level-0 payoff (one Milstein step), not of
Black–Scholes, so the telescoping sum ``E[P_L] = E[P_0] + sum_{l>=1} E[P_l - P_{l-1}]`` is
unchanged and the estimator stays consistent with the sampled one. This is the classical
control variate with a known expectation (Glasserman 2004, "Monte Carlo Methods in Financial
Engineering", §4.1) applied to the coarsest level of the multilevel telescoping sum, which
Giles presents as a recursive control variate (Giles 2015, Acta Numerica 24, §1: "control
variates and two-level MLMC", where ``E[P_0]`` is estimated because it is usually unknown).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .philox import _MASK, _S32, box_muller_r, box_muller_theta, philox4x32_10
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

CALL, PUT, DIGITAL_CALL, DIGITAL_PUT, ASIAN_CALL, ASIAN_PUT = 0, 1, 2, 3, 4, 5
PAYOFF_CODES = {
    "call": CALL,
    "put": PUT,
    "digital_call": DIGITAL_CALL,
    "digital_put": DIGITAL_PUT,
    "asian_call": ASIAN_CALL,
    "asian_put": ASIAN_PUT,
}
PAYOFF_NAMES = {v: k for k, v in PAYOFF_CODES.items()}

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@nb.njit(cache=True, nogil=True, inline="always")
def _ncdf(x):
    return 0.5 * math.erfc(-x * _INV_SQRT2)


@nb.njit(cache=True, nogil=True, inline="always")
def level0_normals(payoff, n, k0, k1):
    """The level-0 normals ``(z, z_I)`` of sample ``n`` (``z_I`` only for the Asian).

    Level 0 shares Philox blocks between neighbouring samples so no word is wasted: for
    call/put/digital block ``(0, q mod 2^32, q div 2^32, 0)`` with ``q = n // 4`` gives samples
    ``4q .. 4q+3`` the normals cos/sin of words (0, 1) and cos/sin of words (2, 3); for the
    Asian ``q = n // 2`` and sample ``2q`` (``2q+1``) takes the cos (sin) normal of words (0, 1)
    as ``z`` and of words (2, 3) as ``z_I``.
    """
    s = np.uint64(n)
    if payoff == ASIAN_CALL or payoff == ASIAN_PUT:
        q = s >> np.uint64(1)
        x0, x1, x2, x3 = philox4x32_10(np.uint64(0), q & _MASK, q >> _S32, np.uint64(0), k0, k1)
        if (n & 1) == 0:
            return box_muller_r(x0) * math.cos(box_muller_theta(x1)), box_muller_r(x2) * math.cos(box_muller_theta(x3))
        return box_muller_r(x0) * math.sin(box_muller_theta(x1)), box_muller_r(x2) * math.sin(box_muller_theta(x3))
    q = s >> np.uint64(2)
    x0, x1, x2, x3 = philox4x32_10(np.uint64(0), q & _MASK, q >> _S32, np.uint64(0), k0, k1)
    if (n & 2) == 0:
        a, b = x0, x1
    else:
        a, b = x2, x3
    if (n & 1) == 0:
        return box_muller_r(a) * math.cos(box_muller_theta(b)), 0.0
    return box_muller_r(a) * math.sin(box_muller_theta(b)), 0.0


@nb.njit(cache=True, nogil=True, inline="always")
def level0_payoff(payoff, z, zi, S0, K, T, mu, sig, disc, payout):
    """Discounted level-0 payoff (one Milstein step of length T) from its normals."""
    h = T
    sqh = math.sqrt(h)
    sig2h = 0.5 * sig * sig
    if payoff == DIGITAL_CALL or payoff == DIGITAL_PUT:
        zz = (S0 + mu * S0 * h - K) / (sig * S0 * sqh)
        pf = payout * _ncdf(zz) if payoff == DIGITAL_CALL else payout * _ncdf(-zz)
        return pf * disc
    dw = sqh * z
    a = 1.0 + mu * h - sig2h * h
    xf = S0 * (a + dw * (sig + sig2h * dw))
    if payoff == ASIAN_CALL or payoff == ASIAN_PUT:
        sdi = h * math.sqrt(h / 12.0)
        di = sdi * zi
        af = 0.5 * h * S0
        af += h * xf + sig * S0 * di
        af -= 0.5 * h * xf
        avg = af / T
        pf = max(avg - K, 0.0) if payoff == ASIAN_CALL else max(K - avg, 0.0)
    else:
        pf = max(xf - K, 0.0) if payoff == CALL else max(K - xf, 0.0)
    return pf * disc


# --------------------------------------------------------------------------------------------
# exact level 0 (host, FP64; module docstring "Exact level 0")

_SQRT_2PI = math.sqrt(2.0 * math.pi)
#: Gauss–Legendre rule of the Asian level-0 quadrature (nodes and weights on [-1, 1])
_GL_X, _GL_W = np.polynomial.legendre.leggauss(20)
_ASIAN_ZMAX = 14.0
_ASIAN_PANEL = 0.25


def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / _SQRT_2PI


def _cdf(x: float) -> float:
    return 0.5 * math.erfc(-x * _INV_SQRT2)


def _vanilla_level0(put: bool, A: float, B: float, C: float, D: float) -> float:
    """E[(C Z^2 + B Z + D)^+] (call) or E[(C Z^2 + B Z + D)^-] (put) for Z ~ N(0, 1), C, B > 0."""
    disc = B * B - 4.0 * C * D
    if disc <= 0.0:  # the quadratic never falls below 0
        return 0.0 if put else C + D
    q = -0.5 * (B + math.sqrt(disc))
    z1, z2 = q / C, D / q  # z1 < z2 (q < 0)
    t1 = (C * z1 + B) * _phi(z1)
    t2 = (C * z2 + B) * _phi(z2)
    if put:
        # Phi(z2) - Phi(z1) without cancellation in either tail
        if z1 >= 0.0:
            mass = _cdf(-z1) - _cdf(-z2)
        elif z2 <= 0.0:
            mass = _cdf(z2) - _cdf(z1)
        else:
            mass = 1.0 - _cdf(z1) - _cdf(-z2)
        return t2 - t1 - (C + D) * mass
    return (C + D) * (_cdf(z1) + _cdf(-z2)) - t1 + t2


def _asian_breakpoints(roots, widths):
    pts = {-_ASIAN_ZMAX, 0.0, _ASIAN_ZMAX}
    for r, w in zip(roots, widths):
        if not -_ASIAN_ZMAX < r < _ASIAN_ZMAX:
            continue
        pts.add(r)
        d = 0.25 * w
        while d < 2.0 * _ASIAN_PANEL:
            for x in (r - d, r + d):
                if -_ASIAN_ZMAX < x < _ASIAN_ZMAX:
                    pts.add(x)
            d *= 2.0
    pts = sorted(pts)
    out = [pts[0]]
    for b in pts[1:]:
        a = out[-1]
        k = max(1, math.ceil((b - a) / _ASIAN_PANEL))
        out.extend(a + (b - a) * (i / k) for i in range(1, k))
        out.append(b)
    return np.array(out)


def _asian_level0(put: bool, A: float, B: float, C: float, k: float, sd: float) -> float:
    """E[(m(Z) + sd Z_I)^+] (call) or E[(m(Z) + sd Z_I)^-] (put), m(z) = (1 + A + B z + C z^2)/2 - k,
    Z, Z_I independent standard normals (all in units of S0)."""
    from scipy.special import ndtr  # scipy is a dependency; imported on first use

    c2, c1, c0 = 0.5 * C, 0.5 * B, 0.5 * (1.0 + A) - k
    roots, widths = [], []
    disc = c1 * c1 - 4.0 * c2 * c0
    if disc > 0.0:
        q = -0.5 * (c1 + math.sqrt(disc))
        for r in (q / c2, c0 / q):
            roots.append(r)
            widths.append(sd / max(abs(2.0 * c2 * r + c1), 1e-300))
    elif disc == 0.0:
        r = -c1 / (2.0 * c2)
        roots.append(r)
        widths.append(math.sqrt(sd / c2))  # m ~ c2 (z - r)^2 near a double root
    edges = _asian_breakpoints(roots, widths)
    a, b = edges[:-1, None], edges[1:, None]
    z = (0.5 * (b - a) * _GL_X + 0.5 * (a + b)).ravel()
    w = (0.5 * (b - a) * _GL_W).ravel()
    m = (c2 * z + c1) * z + c0
    u = m / sd
    dens = np.exp(-0.5 * z * z) / _SQRT_2PI
    tail = sd * np.exp(-0.5 * u * u) / _SQRT_2PI
    g = tail - m * ndtr(-u) if put else m * ndtr(u) + tail
    return float(math.fsum(w * g * dens))


def level0_mean(payoff, S0, K, T, mu, sig, disc, payout=1.0) -> float:
    """The exact expectation ``E[P_0]`` of the discounted level-0 payoff (:func:`level0_payoff`:
    one Milstein step of length T), computed in FP64 on the host (module docstring "Exact
    level 0"): closed form for call/put, the deterministic value for the digitals, 1-D
    quadrature of a closed-form conditional expectation for the Asian (relative error ~1e-13).
    Arguments as :func:`level0_payoff` (``mu = r - q``, ``disc = exp(-r T)``)."""
    payoff = int(payoff)
    S0, K, T, mu, sig, disc = float(S0), float(K), float(T), float(mu), float(sig), float(disc)
    if payoff == DIGITAL_CALL or payoff == DIGITAL_PUT:
        return float(level0_payoff(payoff, 0.0, 0.0, S0, K, T, mu, sig, disc, float(payout)))
    C = 0.5 * sig * sig * T
    A = 1.0 + mu * T - C
    B = sig * math.sqrt(T)
    if payoff == CALL or payoff == PUT:
        return disc * S0 * _vanilla_level0(payoff == PUT, A, B, C, A - K / S0)
    if payoff == ASIAN_CALL or payoff == ASIAN_PUT:
        return disc * S0 * _asian_level0(payoff == ASIAN_PUT, A, B, C, K / S0, sig * math.sqrt(T / 12.0))
    raise ValueError(f"unknown payoff code {payoff}")
