"""The default discretisation of the Heston ADI pricer and its error: one place.

The default (:data:`GRID`, :data:`MIN_TIME_STEPS`, :data:`STEPS_PER_YEAR`, Richardson on) is a
two-grid Richardson extrapolation (Richardson 1911; the error of the MCS scheme with a
Rannacher start is second order in the node spacings and the time step, in 't Hout & Foulon
2010, §5): each option is priced on ``(n_s, n_v)`` nodes with ``N`` steps and on
``(n_s // 2, n_v // 2)`` nodes with ``N // 2`` steps, and ``(4 V_fine - V_coarse) / 3``
cancels the leading error term of both (prices and Greeks alike). ``N`` grows with the expiry
(the time error of a fixed step count grows with T): ``N`` is the smallest step count of the
ladder ``MIN_TIME_STEPS * sqrt(2)^k`` (rounded to even numbers) at least ``STEPS_PER_YEAR * T``,
so a batch has few distinct step counts (each is one batched solve) and no option gets more
than ``sqrt(2)`` times the steps it needs.

Measured error of the default (CPU, against the semi-analytic engine
:mod:`optiond.kernels.heston` for Europeans, against published values for Americans):

* European puts and calls, S = 100, r = 3 %, q = 1 %, v0 = theta = 0.04, over the grid of
  hard sets kappa = 0.5, 1, 2; xi = 0.5, 1, 1.5; rho = -0.9, -0.5, 0; T = 0.25, 0.5, 1, 2;
  K = 80, 100, 120 (648 options): at most :data:`EUROPEAN_BOUND` = 6.2e-3 (measured 6.14e-3
  at kappa = 0.5, xi = 1.5, rho = 0, T = 2, K = 100); by expiry at most 3.4e-4 (T = 0.25),
  1.8e-3 (T = 0.5), 3.9e-3 (T = 1), 6.1e-3 (T = 2); median 3.7e-5. Two causes: at rho = 0
  with kappa = 0.5 and xi = 1.5 the truncation of the spot domain (``S_max`` of
  :func:`optiond.kernels.adi.heston.heston_grids` is sized from ``max(v0, theta)``, not from
  the fat tails a large vol-of-vol gives): finer grids keep the error (6.1e-3 on 2x and 4x
  the nodes and steps; 1.0e-3 with ``s_max = 16 K``); at rho = -0.9, T = 2, out of the
  money (4.2e-3 at kappa = 0.5, xi = 0.5): discretisation, 4.4e-4 on 2x the nodes and steps
  (about 8x the cost), 3.0e-5 on 4x.
* the earlier hard sets, rho = -0.9: T = 10 with xi = 1, kappa = 1.5, K = 50, 100, 200; T =
  0.5 with xi = 1.5, kappa = 2, K = 70, 100, 130: at most 6.3e-4 (T = 10, K = 200); the
  single 200 x 100 grid with 100 steps (the earlier default) errs up to 3.6e-2 there.
* American puts of Ikonen & Toivanen (2009), K = 10, T = 0.25, r = 10 %, kappa = 5, theta =
  0.16, xi = 0.9, rho = 0.1, v0 = 0.0625, S = 8 ... 12 (reference values 2.000000, 1.107621,
  0.520030, 0.213677, 0.082044): at most 8.5e-5 (earlier default: 1.3e-4).

Cost of one option: ``1.125 x 160 x 80 x N`` grid-cell updates, ``N = 50`` up to T = 0.625
years: 0.36 of the earlier default's ``200 x 100 x 100``.
"""

from __future__ import annotations

import math

import numpy as np

#: the fine grid of the default (the coarse one is half of it)
GRID = (160, 80)
#: the fewest time steps of the fine grid (the bottom of the step ladder)
MIN_TIME_STEPS = 50
#: fine-grid time steps per year of expiry (the ladder's step count is at least this times T)
STEPS_PER_YEAR = 80.0
#: extrapolate over the fine and the half grid by default
RICHARDSON = True
#: the default's measured worst European error over the hard sets of the module docstring
#: (kappa 0.5-2, xi 0.5-1.5, rho -0.9-0, T 0.25-2, K/S 0.8-1.2, v0 = theta = 0.04), currency
#: units on S = 100
EUROPEAN_BOUND = 6.2e-3


def steps_for(expiry, time_steps: int = MIN_TIME_STEPS, steps_per_year: float = STEPS_PER_YEAR) -> np.ndarray:
    """The fine-grid time steps per option: the smallest of ``time_steps * sqrt(2)^k`` (k >= 0,
    rounded up to an even number) that is at least ``steps_per_year * expiry``; with
    ``steps_per_year <= 0`` simply ``time_steps``.

    Args:
        expiry: years, a scalar or an array (NaN or non-positive entries get ``time_steps``).
        time_steps: the least step count (>= 1). steps_per_year: >= 0.

    Returns:
        int64 array of the shape of ``expiry``.
    """
    T = np.nan_to_num(np.asarray(expiry, dtype=np.float64), nan=0.0)
    base = int(time_steps)
    if steps_per_year <= 0:
        return np.full(T.shape, base, dtype=np.int64)
    need = np.maximum(np.ceil(steps_per_year * np.maximum(T, 0.0)), base)
    k = np.ceil(np.log(need / base) / math.log(math.sqrt(2.0)) - 1e-9)
    k = np.maximum(k, 0)
    n = np.ceil(base * np.power(math.sqrt(2.0), k) - 1e-6)
    n = np.where(k == 0, base, n + (n % 2))
    return n.astype(np.int64)


def coarse_grid(grid) -> tuple[int, int]:
    """The Richardson partner of ``grid``: half the nodes in each direction (at least 5).

    Raises:
        ValueError: a grid with fewer than 10 nodes in a direction.
    """
    g = tuple(int(x) for x in grid)
    if min(g) < 10:
        raise ValueError(f"grid {g}: Richardson extrapolation needs at least 10 nodes a direction")
    return tuple(x // 2 for x in g)


def extrapolate(fine, coarse):
    """``(4 fine - coarse) / 3``: Richardson's second-order extrapolation over a halving."""
    return (4.0 * np.asarray(fine, dtype=np.float64) - np.asarray(coarse, dtype=np.float64)) / 3.0
