"""Exercise values by shifting (binomial.cu, ``run_levels_shift``), replayed in NumPy.

In a CRR tree node j at level t - 2 has the exercise value of node j + 1 at level t
(2j - (t - 2) == 2 (j + 1) - t, since u d = 1). The GPU's single-option kernels keep the exercise
values of two consecutive levels and shift the older set one node down after each level instead
of running the recurrence X <- X u + c; at a slab's first level the second set is one step of
that recurrence. This replays that scheme slab by slab with the kernel's update (the same order
of operations as the CPU reference's node update) and checks two things: every shifted value is
within a few ulps of sign (S e^{(2j - t) a} - K), and the price equals the CPU reference tree
(``binomial.cpu.crr_batch``, recurrence with re-anchoring every 64 levels) to 1e-12 relative.

CPU only; the GPU kernels are compared with the CPU tree in tests/test_binomial_gpu.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from optiond.kernels.binomial import cpu as bc


def shifted_replay(is_call, S, K, T, r, q, sigma, N, slab):
    """(price, worst error of an exercise value in ulps) of an American option's CRR tree with
    exercise values by shifting, slabs of ``slab`` levels. The error of X at a node is
    |X - sign (S e - K)| / (eps (S e + K) (1 + |x|)), e = exp(x), x = (2j - t) a: the exp of a
    rounded argument x is itself only good to about |x| ulps, at the leaves as here."""
    dt = T / N
    a = sigma * math.sqrt(dt)
    u = math.exp(a)
    disc = math.exp(-r * dt)
    p = bc.crr_probability(T, r, q, sigma, N)
    pu, pd = disc * p, disc * (1.0 - p)
    sign = 1.0 if is_call else -1.0
    c = sign * K * (u - 1.0)
    XP = sign * (S * np.exp((2.0 * np.arange(N + 1) - N) * a) - K)  # leaves: exercise values of level N
    V = np.maximum(XP, 0.0)
    t = N
    worst = 0.0
    eps = np.finfo(float).eps
    while t > 0:
        XP = XP[: t + 1]  # what a slab loads: X of its input level
        XQ = XP * u + c  # X of the level below, one recurrence step, once per slab
        for _ in range(min(slab, t)):  # level t -> t - 1
            Xm = XQ[:t]
            V = np.maximum(pd * V[:-1] + pu * V[1:], Xm)
            x = (2.0 * np.arange(t) - (t - 1)) * a
            e = S * np.exp(x)
            worst = max(worst, float(np.max(np.abs(Xm - sign * (e - K)) / (eps * (e + K) * (1.0 + np.abs(x))))))
            XP, XQ = XQ, XP[1:]  # now level t - 1: X_{t-1}; X_{t-2}[j] = X_t[j + 1]
            t -= 1
    return float(V[0]), worst


CASES = list(itertools.product((False, True), (80.0, 100.0, 130.0), ((0.05, 0.0), (0.02, 0.1), (0.1, 0.02)),
                               (0.15, 0.5)))


@pytest.mark.parametrize("is_call, K, rq, sigma", CASES)
def test_shifted_exercise_values_equal_exp_and_the_cpu_tree(is_call, K, rq, sigma):
    r, q = rq
    S, T, N = 100.0, 1.5, 2000
    price, worst = shifted_replay(is_call, S, K, T, r, q, sigma, N, slab=112)
    assert worst <= 4.0, worst  # a few ulps of exp, at every level
    ref = bc.crr_batch(int(is_call), 1, S, K, T, r, q, sigma, N, greeks=False)[0, 0]
    assert abs(price - ref) <= 1e-12 * ref, (price, ref)

