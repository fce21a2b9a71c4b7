"""Brent's bracketed root finder in reverse communication, in plain Python.

The algorithm of :mod:`optiond.kernels.rootfind` (R. P. Brent, *Algorithms for Minimization
without Derivatives*, 1973, ch. 4, ``zeroin``), without numba: :mod:`.rootfind` compiles these
same functions for the pricers' kernels, and callers that run a handful of searches in Python
(the chain's carry solve) use them as they are, without importing numba.

A state vector ``st = [a, fa, b, fb, c, fc, d, e]`` (a float64 array of 8) is started by
:func:`brent_init`; the caller then loops ``while not brent_step(st, xtol, ftol): st[FB] =
f(st[B])``.
"""

from __future__ import annotations

import sys

import numpy as np

_EPS = sys.float_info.epsilon
A, FA, B, FB, C, FC, D, E = range(8)


def brent_init(st, a, b, fa, fb):
    """Start a search on [a, b] with f(a) = fa, f(b) = fb of opposite signs."""
    st[A], st[FA], st[B], st[FB] = a, fa, b, fb
    st[C], st[FC] = a, fa
    st[D] = b - a
    st[E] = b - a


def brent_step(st, xtol, ftol):
    """Advance the search given ``st[FB] = f(st[B])``.

    Returns True when ``st[B]`` is the root (bracket narrower than ``xtol`` plus rounding, or
    ``|f| <= ftol``); otherwise moves ``st[B]`` to the next point to evaluate and returns False.
    """
    a, fa, b, fb, c, fc, d, e = st[A], st[FA], st[B], st[FB], st[C], st[FC], st[D], st[E]
    if (fb > 0.0) == (fc > 0.0):
        c, fc = a, fa
        d = b - a
        e = d
    if abs(fc) < abs(fb):
        a, fa = b, fb
        b, fb = c, fc
        c, fc = a, fa
    tol = 2.0 * _EPS * abs(b) + 0.5 * xtol
    m = 0.5 * (c - b)
    if abs(m) <= tol or abs(fb) <= ftol:
        st[A], st[FA], st[B], st[FB], st[C], st[FC], st[D], st[E] = a, fa, b, fb, c, fc, d, e
        return True
    if abs(e) >= tol and abs(fa) > abs(fb):
        s = fb / fa
        if a == c:
            p = 2.0 * m * s
            q = 1.0 - s
        else:
            qq = fa / fc
            rr = fb / fc
            p = s * (2.0 * m * qq * (qq - rr) - (b - a) * (rr - 1.0))
            q = (qq - 1.0) * (rr - 1.0) * (s - 1.0)
        if p > 0.0:
            q = -q
        else:
            p = -p
        if 2.0 * p < min(3.0 * m * q - abs(tol * q), abs(e * q)):
            e = d
            d = p / q
        else:
            d = m
            e = m
    else:
        d = m
        e = m
    a, fa = b, fb
    if abs(d) > tol:
        b += d
    else:
        b += tol if m > 0.0 else -tol
    st[A], st[FA], st[B], st[FB], st[C], st[FC], st[D], st[E] = a, fa, b, np.nan, c, fc, d, e
    return False


