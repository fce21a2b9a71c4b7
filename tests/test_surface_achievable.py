"""The achievable-share MILP (optiond.surface.achievable) against a brute-force count: every
subset of the quotes, largest first, checked for an arbitrage-free call curve inside those
bands by an LP written here independently (the point (0, 1) as a fixed node)."""

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog

from optiond.surface.achievable import achievable
from optiond.surface.calls import black_call, implied_total_sd


def _feasible(x, lo, hi, subset):
    """An arbitrage-free call curve through nodes (0, 1), (x_i, c_i) with c_i in [lo_i, hi_i]
    for i in subset: consecutive slopes in [-1, 0] and non-decreasing, c >= 0."""
    n = x.size
    X = np.r_[0.0, x]
    A, b = [], []

    def row(coef, rhs):  # coef . c <= rhs, with c_{-1} = 1 folded into rhs
        A.append(coef[1:])
        b.append(rhs - coef[0])

    for j in range(n):  # slope between nodes j and j+1 of X
        h = X[j + 1] - X[j]
        e = np.zeros(n + 1)
        e[j + 1], e[j] = 1 / h, -1 / h
        row(e, 0.0)  # slope <= 0
        row(-e, 1.0)  # slope >= -1
    for j in range(n - 1):
        h1, h2 = X[j + 1] - X[j], X[j + 2] - X[j + 1]
        e = np.zeros(n + 1)
        e[j], e[j + 1], e[j + 2] = 1 / h1, -1 / h1 - 1 / h2, 1 / h2
        row(-e, 0.0)  # slope_{j+1} - slope_j >= 0
    bounds = [(lo[i], hi[i]) if i in subset else (0.0, 1.0) for i in range(n)]
    r = linprog(np.zeros(n), A_ub=np.array(A), b_ub=np.array(b), bounds=bounds, method="highs")
    return r.status == 0


def _brute(x, iv_bid, iv_ask, T):
    o = np.argsort(x)
    x, iv_bid, iv_ask = x[o], iv_bid[o], iv_ask[o]
    lo, hi = black_call(x, iv_bid * np.sqrt(T)), black_call(x, iv_ask * np.sqrt(T))
    n = x.size
    for size in range(n, -1, -1):
        for subset in itertools.combinations(range(n), size):
            if _feasible(x, lo, hi, set(subset)):
                return size
    return 0


@pytest.mark.parametrize("seed", range(6))
def test_milp_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 7
    x = np.sort(rng.uniform(0.85, 1.15, n))
    T = float(rng.uniform(0.02, 1.0))
    # a smile with noise larger than the spreads: some quotes cannot all be inside together
    mid = 0.25 + 0.8 * np.log(x) ** 2 - 0.2 * np.log(x) + rng.normal(0, 0.03, n)
    half = rng.uniform(0.002, 0.01, n)
    r = achievable(x, mid - half, mid + half, T)
    assert r.optimal
    assert r.count == _brute(x, mid - half, mid + half, T)
    assert r.count < n or seed > 0  # seed 0 is a case with a conflict (guards the test's own power)
    # the solution's curve lies inside the bands it counts
    s = implied_total_sd(x, r.calls) / np.sqrt(T)
    assert np.all((s[r.inside] >= mid[r.inside] - half[r.inside] - 1e-6) & (s[r.inside] <= mid[r.inside] + half[r.inside] + 1e-6))


def test_clean_smile_all_inside():
    x = np.linspace(0.8, 1.2, 8)
    T = 0.5
    iv = 0.2 + 0.3 * np.log(x) ** 2  # a convex, arbitrage-free smile
    r = achievable(x, iv - 0.001, iv + 0.001, T)
    assert r.count == 8 and r.optimal


def test_butterfly_arbitrage_in_quotes_is_counted():
    # a middle quote far above its neighbours' chord in price terms: at most 2 of the 3 inside
    x = np.array([0.95, 1.0, 1.05])
    T = 0.25
    iv = np.array([0.20, 0.45, 0.20])
    assert _brute(x, iv - 0.001, iv + 0.001, T) == 2
    assert achievable(x, iv - 0.001, iv + 0.001, T).count == 2


def test_smoothness_bound_can_only_lower_the_count():
    rng = np.random.default_rng(11)
    x = np.sort(rng.uniform(0.8, 1.2, 8))
    iv = 0.25 + 0.5 * np.log(x) ** 2 + rng.normal(0, 0.02, 8)
    free = achievable(x, iv - 0.005, iv + 0.005, 0.3)
    smooth = achievable(x, iv - 0.005, iv + 0.005, 0.3, lipschitz=5.0)
    assert smooth.count <= free.count


def test_bad_input():
    with pytest.raises(ValueError):
        achievable([1.0, 1.0], [0.2, 0.2], [0.3, 0.3], 0.5)
    with pytest.raises(ValueError):
        achievable([0.9, 1.0], [0.3, 0.2], [0.2, 0.3], 0.5)
    with pytest.raises(ValueError):
        achievable([0.9, 1.0], [0.2, 0.2], [0.3, 0.3], 0.0)
