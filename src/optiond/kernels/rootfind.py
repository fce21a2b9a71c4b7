"""Bracketed root finding for implied volatilities, compiled with numba.

Brent's method (R. P. Brent, *Algorithms for Minimization without Derivatives*, 1973, ch. 4,
the ``zeroin`` algorithm): inverse quadratic interpolation or secant steps, falling back to
bisection whenever a step would leave the bracket or converge too slowly, so it keeps the
guaranteed convergence of bisection on any continuous function with a sign change.

It is written in *reverse communication*: the caller owns the function evaluations. A state
vector ``st = [a, fa, b, fb, c, fc, d, e]`` is started by :func:`brent_init`; the caller then
loops ``while not brent_step(st, xtol, ftol): st[FB] = f(st[B])``. Scalar pricers call it
inside their own loop; a batch pricer (GPU) keeps one state row per option and evaluates all
the pending ``st[:, B]`` in one launch per iteration (:func:`brent_step_rows`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

_EPS = float(np.finfo(np.float64).eps)
A, FA, B, FB, C, FC, D, E = range(8)

#: implied-volatility status codes shared by every pricer
IV_OK, IV_BELOW, IV_ABOVE, IV_NOT_CONVERGED, IV_INVALID = 0, 1, 2, 3, 4
IV_STATUS_NAMES = ("ok", "below-intrinsic", "no-solution", "not-converged", "invalid")


@nb.njit(cache=True, nogil=True)
def brent_init(st, a, b, fa, fb):
    """Start a search on [a, b] with f(a) = fa, f(b) = fb of opposite signs."""
    st[A], st[FA], st[B], st[FB] = a, fa, b, fb
    st[C], st[FC] = a, fa
    st[D] = b - a
    st[E] = b - a


@nb.njit(cache=True, nogil=True)
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


@nb.njit(cache=True, nogil=True)
def brent_step_rows(states, active, xtol, ftol):
    """:func:`brent_step` on every active row of ``states`` (shape (n, 8)); rows that
    converge are cleared from ``active``. Returns the number still active."""
    left = 0
    for i in range(states.shape[0]):
        if active[i]:
            if brent_step(states[i], xtol, ftol[i]):
                active[i] = False
            else:
                left += 1
    return left
