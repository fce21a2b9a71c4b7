"""The rules behind the GPU pipeline's pruned windows (binomial.cu, "Pruned windows";
``binomial.plan.window_sides``), checked node by node on whole CRR trees built here with NumPy:

* zero side: a node whose two successors hold exactly 0 and whose exercise value is <= 0 holds 0;
* exercise side: a node whose two successors are exercised (V = X > 0) and that lies at least
  four steps inside S* (``2j - t < Ls - 4``; put below, call above) is exercised, and without
  that bound the rule fails where S* lies inside the tree (so the bound is needed, not decoration).

CPU only; the GPU kernel's results are compared with the CPU tree in tests/test_binomial_gpu.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from optiond.kernels.binomial import cpu as bc
from optiond.kernels.binomial import plan as bp
from optiond.kernels.binomial import variants


def tree_levels(is_call, american, S, K, T, r, q, sigma, N):
    """Every level of the CRR tree (V and X per node, level t has t + 1 nodes), with the
    CPU reference's parameters and the exercise values from exp."""
    dt = T / N
    a = sigma * math.sqrt(dt)
    disc = math.exp(-r * dt)
    p = bc.crr_probability(T, r, q, sigma, N)
    pu, pd = disc * p, disc * (1.0 - p)
    sign = 1.0 if is_call else -1.0
    X = sign * (S * np.exp((2.0 * np.arange(N + 1) - N) * a) - K)
    V = np.maximum(X, 0.0)
    levels = [(V, X)]
    for t in range(N - 1, -1, -1):
        X = sign * (S * np.exp((2.0 * np.arange(t + 1) - t) * a) - K)
        cont = pd * V[:-1] + pu * V[1:]
        V = np.maximum(cont, X) if american else cont
        levels.append((V, X))
    levels.reverse()
    assert abs(levels[0][0][0] - bc.crr_batch(int(is_call), int(american), S, K, T, r, q, sigma, N,
                                              greeks=False)[0, 0]) <= 1e-12 * max(levels[0][0][0], 1e-300)
    return levels, a


CASES = list(itertools.product((False, True), (80.0, 100.0, 130.0), ((0.05, 0.0), (0.02, 0.1), (0.1, 0.02),
                                                                     (0.0, 0.05), (0.06, 0.06)), (0.15, 0.5)))


@pytest.mark.parametrize("is_call, K, rq, sigma", CASES)
def test_rules_hold_on_every_node(is_call, K, rq, sigma):
    r, q = rq
    S, T, N = 100.0, 1.0, 300
    kinds, Ls = bp.window_sides(is_call, True, S, K, T, r, q, sigma, N)
    low, high = kinds & 3, kinds >> 2
    levels, _ = tree_levels(is_call, True, S, K, T, r, q, sigma, N)
    exercise_checked = 0
    for t in range(N):
        V, X = levels[t]
        Vn, Xn = levels[t + 1]
        pos = 2.0 * np.arange(t + 1) - t  # ln(S_tj / S) / a
        # zero side (put above the strike, call below)
        zero_kids = (Vn[:-1] == 0.0) & (Vn[1:] == 0.0) & (X <= 0.0)
        assert np.all(V[zero_kids] == 0.0)
        side = (high if not is_call else low)
        assert side == bp.SIDE_ZERO
        # exercise side
        ex = (Vn == Xn) & (Xn > 0.0)
        both = ex[:-1] & ex[1:]
        ex_side = low if not is_call else high
        if ex_side == bp.SIDE_EXERCISE:
            inside = pos < Ls - 4.0 if not is_call else pos > Ls + 4.0
            sel = both & inside
            exercise_checked += int(sel.sum())
            assert np.all(V[sel] == X[sel]), f"level {t}: exercised successors, parent not exercised"
    if (low if not is_call else high) == bp.SIDE_EXERCISE:
        assert exercise_checked > 0  # the rule applied somewhere in this tree
    else:
        assert (not is_call and r == 0) or (is_call and q == 0)


@pytest.mark.parametrize("is_call, r, q", [(False, 0.02, 0.1), (True, 0.1, 0.02)])
def test_bound_is_needed_where_s_star_is_inside_the_tree(is_call, r, q):
    """At the level before expiry every in-the-money leaf is 'exercised' (V = X), yet a parent
    between the strike and S* is not: the margin bound of window_sides is what excludes it."""
    S, K, T, sigma, N = 100.0, 100.0, 1.0, 0.3, 300
    kinds, Ls = bp.window_sides(is_call, True, S, K, T, r, q, sigma, N)
    assert bp.SIDE_EXERCISE in (kinds & 3, kinds >> 2) and abs(Ls) < 1e6  # S* is finite
    levels, _ = tree_levels(is_call, True, S, K, T, r, q, sigma, N)
    V, X = levels[N - 1]
    Vn, Xn = levels[N]
    ex = (Vn == Xn) & (Xn > 0.0)
    both = ex[:-1] & ex[1:]
    pos = 2.0 * np.arange(N) - (N - 1)
    outside = pos >= Ls + 4.0 if not is_call else pos <= Ls - 4.0
    assert np.any(both & outside & (V != X)), "expected exercised successors with a continuing parent beyond S*"


def test_window_sides_by_option():
    S, K, T, sigma, N = 100.0, 100.0, 1.0, 0.2, 1000
    a = sigma * math.sqrt(T / N)
    # put, no dividend: exercise side below, S* unbounded
    kinds, Ls = bp.window_sides(False, True, S, K, T, 0.05, 0.0, sigma, N)
    assert kinds == bp.SIDE_EXERCISE | bp.SIDE_ZERO << 2 and Ls >= 1e300
    # put with q > 0: S* = K (1 - e^{-r dt}) / (1 - e^{-q dt}) ~ K r / q
    kinds, Ls = bp.window_sides(False, True, S, K, T, 0.02, 0.08, sigma, N)
    assert kinds == bp.SIDE_EXERCISE | bp.SIDE_ZERO << 2
    assert math.exp(Ls * a) * S == pytest.approx(K * 0.02 / 0.08, rel=1e-3)
    # put with r = 0, European put: zero side only
    assert bp.window_sides(False, True, S, K, T, 0.0, 0.02, sigma, N)[0] == bp.SIDE_ZERO << 2
    assert bp.window_sides(False, False, S, K, T, 0.05, 0.0, sigma, N)[0] == bp.SIDE_ZERO << 2
    # call: zero side below; exercise side above only with a dividend yield
    assert bp.window_sides(True, True, S, K, T, 0.05, 0.0, sigma, N)[0] == bp.SIDE_ZERO
    kinds, Ls = bp.window_sides(True, True, S, K, T, 0.05, 0.03, sigma, N)
    assert kinds == bp.SIDE_ZERO | bp.SIDE_EXERCISE << 2
    assert math.exp(Ls * a) * S == pytest.approx(K * 0.05 / 0.03, rel=1e-3)
    assert bp.window_sides(True, True, S, K, T, 0.0, 0.03, sigma, N)[1] <= -1e300
    # a margin below rounding: no exercise side
    assert bp.window_sides(False, True, S, K, T, 1e-12, 0.0, sigma, N)[0] == bp.SIDE_ZERO << 2


def test_pipeline_plan_routes_large_fp64_trees_to_the_pruned_kernel():
    plan = bp.PipelinePlan(cluster_levels=0)
    (v, coop, t_hi, t_lo), = bp.pipeline_phases(100_000, "fp64", plan)
    assert v.prune and coop and (t_hi, t_lo) == (100_000, 0)
    assert v.name == "crr_pipe_grid<double, 4, 1, false, true>" and v.name in variants.coop_names()
    (v, _, _, t_lo), = bp.pipeline_phases(100_000, "fp64", bp.PipelinePlan(cpu_tail=40))
    assert v.prune and t_lo == 40
    assert not any(p[0].prune for p in bp.pipeline_phases(100_000, "fp32", plan))
    assert not any(p[0].prune for p in bp.pipeline_phases(plan.prune_steps - 1, "fp64", plan))
    assert not any(p[0].prune for p in bp.pipeline_phases(100_000, "fp64", bp.PipelinePlan(prune=False)))
    # the expected window: ~24 sqrt(levels) nodes, never more than the level
    assert bp.pruned_width(10**6, 10**6, 0) == pytest.approx(24_000, rel=0.02)
    assert bp.pruned_width(100, 100, 0) <= 101
