"""Bracketed root finding for implied volatilities, compiled with numba.

Brent's method (R. P. Brent, *Algorithms for Minimization without Derivatives*, 1973, ch. 4,
the ``zeroin`` algorithm): inverse quadratic interpolation or secant steps, falling back to
bisection whenever a step would leave the bracket or converge too slowly, so it keeps the
guaranteed convergence of bisection on any continuous function with a sign change.

It is written in *reverse communication*: the caller owns the function evaluations. A state
vector ``st = [a, fa, b, fb, c, fc, d, e]`` is started by :func:`brent_init`; the caller then
loops ``while not brent_step(st, xtol, ftol): st[FB] = f(st[B])``. Scalar pricers call it
inside their own loop; a batch pricer (GPU) keeps one state row per option and evaluates all
the pending ``st[:, B]`` in one launch per iteration (:func:`brent_step_rows`). The algorithm
itself is written once, in plain Python, in :mod:`optiond.kernels.brent`; this module compiles it.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ..models import IV_STATUS_NAMES  # noqa: F401 (the codes' names, owned by the schema; re-exported)
from . import brent as _brent
from .brent import A, B, C, D, E, FA, FB, FC  # noqa: F401 (the state layout, re-exported)
from .warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

#: implied-volatility status codes shared by every pricer (``IV_STATUS_NAMES[code]`` names them)
IV_OK, IV_BELOW, IV_ABOVE, IV_NOT_CONVERGED, IV_INVALID = 0, 1, 2, 3, 4
assert IV_STATUS_NAMES[IV_INVALID] == "invalid" and len(IV_STATUS_NAMES) == IV_INVALID + 1


#: :func:`optiond.kernels.brent.brent_init` and ``brent_step``, compiled for the kernels
brent_init = nb.njit(cache=True, nogil=True)(_brent.brent_init)
brent_step = nb.njit(cache=True, nogil=True)(_brent.brent_step)


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
