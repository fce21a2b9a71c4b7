"""Undiscounted call prices over the forward: Black's formula on ``x = K / F_T`` with total
standard deviation ``s = sigma sqrt(T)``, and its inverse.

``c(x, s) = N(d1) - x N(d2)``, ``d1 = -ln x / s + s / 2``, ``d2 = d1 - s`` (Black 1976); the
call price over ``F_T`` undiscounted (a put's is ``c - 1 + x`` by put-call parity). Its
inverse is the closed form's implied volatility
(:func:`optiond.kernels.black_scholes.bs_implied_vol`, on spot 1, zero rate and carry).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from ..kernels.black_scholes import bs_implied_vol
from ..kernels.rootfind import IV_OK


def black_call(x, s) -> np.ndarray:
    """``c(x, s)``: undiscounted call over the forward at ``x = K / F`` (> 0) and total
    standard deviation ``s = sigma sqrt(T)`` (>= 0); arrays broadcast."""
    x, s = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(s, dtype=np.float64))
    out = np.maximum(1.0 - x, 0.0)
    pos = s > 0
    if np.any(pos):
        xp, sp = x[pos], s[pos]
        d1 = -np.log(xp) / sp + 0.5 * sp
        out = out.copy()
        out[pos] = ndtr(d1) - xp * ndtr(d1 - sp)
    return out


def implied_total_sd(x, c) -> np.ndarray:
    """The ``s = sigma sqrt(T)`` with ``black_call(x, s) == c`` (shape of ``x``), NaN where
    ``c`` lies outside ``(max(1 - x, 0), 1)``."""
    x, c = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(c, dtype=np.float64))
    shape = x.shape
    x, c = x.ravel(), c.ravel()
    n = x.size
    one = np.ones(n)
    vol, status = bs_implied_vol(c, np.ones(n, dtype=np.int8), one, x, one, np.zeros(n), np.zeros(n), lo=1e-8, hi=50.0)
    vol = np.where(status == IV_OK, vol, np.nan)
    return vol.reshape(shape)


__all__ = ["black_call", "implied_total_sd"]
