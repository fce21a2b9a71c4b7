"""Non-uniform 1-D grids for the ADI solvers.

All grids are strictly increasing float64 arrays. Sources:

* K. J. in 't Hout and S. Foulon (2010), "ADI finite difference schemes for option pricing in
  the Heston model with correlation", Int. J. Numer. Anal. Model. 7(2), 303-320, §2.2: the
  asset grid is uniform on ``[S_left, S_right]`` and sinh-stretched outside it, with
  ``c = K/5``, ``S_left = max(1/2, exp(-T/10)) K``, ``S_right = K`` and ``S_max = 8K``; the
  variance grid is ``v_j = d sinh(j dη)`` with ``d = V/500``, which concentrates nodes near
  ``v = 0`` where the Heston PDE degenerates.
* Haentjens and in 't Hout (2012), "Alternating direction implicit finite difference schemes
  for the Heston-Hull-White partial differential equation", J. Comput. Finance 16(1), §3: the
  short-rate grid is a sinh grid concentrated around a point of interest.

Every builder puts one chosen point (the strike, the current short rate) exactly on a node, so
the payoff kink (or the quote point) is resolved the same way whatever the node count.
"""

from __future__ import annotations

import functools
import math

import numpy as np


def _check_n(n: int, name: str = "n") -> int:
    n = int(n)
    if n < 5:
        raise ValueError(f"{name} = {n}: a grid needs at least 5 nodes")
    return n


def heston_s_grid(n: int, strike: float, s_max: float, s_left: float | None = None,
                  c: float | None = None) -> np.ndarray:
    """The asset-price grid of in 't Hout & Foulon (2010), §2.2, with the strike on a node.

    Uniform (spacing ``c dξ``) on ``[s_left, strike]`` and sinh-stretched on ``[0, s_left]`` and
    ``[strike, s_max]``. The uniform ξ-spacing is adjusted (by at most half a node) so that the
    strike falls exactly on a node; ``s_max`` moves by the same small amount.

    Args:
        n: number of nodes (>= 5), ``s_0 = 0``.
        strike: K > 0 (currency units).
        s_max: right end of the domain before adjustment (paper: 8K).
        s_left: left end of the uniform core (paper: ``max(1/2, exp(-T/10)) K``); default K/2.
        c: stretching parameter (paper: K/5); smaller concentrates more nodes near the core.

    Returns:
        float64 array, shape (n,), ``s[0] = 0``, ``s[k] = strike`` for one k.

    Raises:
        ValueError: n < 5, or not ``0 < s_left < strike < s_max``.
    """
    n = _check_n(n, "n_s")
    K = float(strike)
    c = K / 5.0 if c is None else float(c)
    s_left = 0.5 * K if s_left is None else float(s_left)
    if not (0.0 < s_left < K < s_max) or c <= 0.0:
        raise ValueError(f"need 0 < s_left ({s_left}) < strike ({K}) < s_max ({s_max}) and c > 0")
    xi_min = math.asinh(-s_left / c)
    xi_int = (K - s_left) / c
    xi_max = xi_int + math.asinh((s_max - K) / c)
    # the strike sits at ξ = xi_int: make xi_int - xi_min a whole number of steps
    k = int(round((xi_int - xi_min) / (xi_max - xi_min) * (n - 1)))
    k = min(max(k, 1), n - 3)
    dxi = (xi_int - xi_min) / k
    xi = xi_min + dxi * np.arange(n)
    s = np.where(xi < 0.0, s_left + c * np.sinh(xi),
                 np.where(xi <= xi_int, s_left + c * xi, K + c * np.sinh(xi - xi_int)))
    s[0] = 0.0
    s[k] = K
    return s


def sinh_grid(n: int, lo: float, hi: float, center: float, c: float) -> np.ndarray:
    """A grid ``x = center + c sinh(ξ)``, ξ uniform, on ``[lo, hi']`` with ``center`` on a node.

    The ξ-spacing is adjusted so that ``center`` is a node; ``hi`` moves slightly (``lo`` is
    kept exactly). Smaller ``c`` concentrates more nodes near ``center``.

    Args:
        n: number of nodes (>= 5).
        lo, hi: the interval, ``lo < center < hi`` (or ``center == lo``: then ``x_0 = center``).
        center: the point to concentrate nodes around (lands exactly on a node).
        c: stretching width (same units as x), > 0.

    Returns:
        float64 array, shape (n,).
    """
    n = _check_n(n)
    if not (lo <= center < hi) or c <= 0.0:
        raise ValueError(f"need lo ({lo}) <= center ({center}) < hi ({hi}) and c > 0")
    a = math.asinh((lo - center) / c)
    b = math.asinh((hi - center) / c)
    if center == lo:
        x = center + c * np.sinh(b * np.arange(n) / (n - 1))
        x[0] = lo
        return x
    k = int(round(-a / (b - a) * (n - 1)))
    k = min(max(k, 1), n - 3)
    dxi = -a / k
    xi = a + dxi * np.arange(n)
    x = center + c * np.sinh(xi)
    x[0] = lo
    x[k] = center
    return x


def heston_v_grid(n: int, v_max: float, d: float | None = None) -> np.ndarray:
    """The variance grid ``v_j = d sinh(j dη)``, ``dη = asinh(V/d)/(n-1)`` (in 't Hout &
    Foulon 2010, §2.2; paper: ``d = V/500``).

    Returns:
        float64 array, shape (n,), ``v[0] = 0``, ``v[-1] = v_max``.
    """
    n = _check_n(n, "n_v")
    d = v_max / 500.0 if d is None else float(d)
    if v_max <= 0.0 or d <= 0.0:
        raise ValueError("v_max and d must be > 0")
    eta = math.asinh(v_max / d) / (n - 1)
    v = d * np.sinh(eta * np.arange(n))
    v[0] = 0.0
    v[-1] = v_max
    return v


@functools.lru_cache(maxsize=4096)
def cir_quantile(v0: float, kappa: float, theta: float, xi: float, t: float, p: float) -> float:
    """The p-quantile of the CIR variance ``v_t`` given ``v_0`` (non-central chi-square law,
    Cox, Ingersoll & Ross 1985, eq. (18)). Used to size the variance domain."""
    from scipy.stats import ncx2

    if t <= 0.0:
        return v0
    if kappa <= 0.0:
        return v0 + xi * math.sqrt(v0 * t) * 10.0 + 1.0
    c = xi * xi * (1.0 - math.exp(-kappa * t)) / (4.0 * kappa)
    df = 4.0 * kappa * theta / (xi * xi)
    nc = v0 * math.exp(-kappa * t) / c
    return float(ncx2.ppf(p, df, nc) * c)
