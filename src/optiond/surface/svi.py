"""Raw SVI: the total implied variance of one expiry and the quantities its no-arbitrage checks need.

Gatheral (2004), "A parsimonious arbitrage-free implied volatility parameterization";
Gatheral & Jacquier (2014), "Arbitrage-free SVI volatility surfaces", Quantitative Finance
14(1), §2-3. With log-moneyness ``k = ln(K / F_T)`` and total implied variance
``w = sigma_imp^2 T``::

    w(k) = a + b (rho (k - m) + sqrt((k - m)^2 + sigma^2))

parameters ``a`` (level), ``b >= 0`` (angle of the wings), ``|rho| < 1`` (rotation), ``m``
(translation), ``sigma > 0`` (ATM curvature). Its minimum ``a + b sigma sqrt(1 - rho^2)`` must
be >= 0 (a non-negative variance). The wings grow like ``b (1 +- rho) |k|``: Roger Lee's moment
formula (2004) bounds those slopes by 2, so ``b (1 + |rho|) <= 2``.

Butterfly arbitrage (a negative risk-neutral density) is absent exactly where Gatheral &
Jacquier's (2.1) function is non-negative::

    g(k) = (1 - k w' / (2 w))^2 - (w'^2 / 4) (1 / w + 1 / 4) + w'' / 2

All functions take NumPy arrays (or scalars) of ``k`` and broadcast.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class SVI(NamedTuple):
    """Raw SVI parameters of one expiry (total variance, see the module docstring)."""

    a: float
    b: float
    rho: float
    m: float
    sigma: float


def total_variance(p: SVI, k) -> np.ndarray:
    """``w(k)``, total implied variance at log-moneyness ``k`` (years x variance)."""
    d = np.asarray(k, dtype=np.float64) - p.m
    return p.a + p.b * (p.rho * d + np.sqrt(d * d + p.sigma * p.sigma))


def derivatives(p: SVI, k) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(w, w', w'')`` at ``k`` (exact, from the closed form)."""
    d = np.asarray(k, dtype=np.float64) - p.m
    r = np.sqrt(d * d + p.sigma * p.sigma)
    w = p.a + p.b * (p.rho * d + r)
    w1 = p.b * (p.rho + d / r)
    w2 = p.b * p.sigma * p.sigma / (r * r * r)
    return w, w1, w2


def density_g(p: SVI, k) -> np.ndarray:
    """Gatheral & Jacquier (2014) eq. (2.1): ``g(k)``; the slice is free of butterfly
    arbitrage where ``g >= 0`` (and ``w > 0``). NaN where ``w <= 0``."""
    w, w1, w2 = derivatives(p, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = (1.0 - k * w1 / (2.0 * w)) ** 2 - 0.25 * w1 * w1 * (1.0 / w + 0.25) + 0.5 * w2
    return np.where(w > 0, g, np.nan)


def min_variance(p: SVI) -> float:
    """The slice's smallest total variance, ``a + b sigma sqrt(1 - rho^2)`` (Gatheral 2004)."""
    return float(p.a + p.b * p.sigma * np.sqrt(max(1.0 - p.rho * p.rho, 0.0)))


def lee_slopes(p: SVI) -> tuple[float, float]:
    """The wings' asymptotic slopes ``dw/dk`` for ``k -> -inf`` and ``+inf`` in absolute value,
    ``b (1 - rho)`` and ``b (1 + rho)``; Lee's moment formula needs both <= 2."""
    return float(p.b * (1.0 - p.rho)), float(p.b * (1.0 + p.rho))


def implied_vol(p: SVI, k, T: float) -> np.ndarray:
    """Implied volatility ``sqrt(w(k) / T)`` (annualised decimal; NaN where ``w < 0``)."""
    w = total_variance(p, k)
    with np.errstate(invalid="ignore"):
        return np.sqrt(np.where(w >= 0, w, np.nan) / T)
