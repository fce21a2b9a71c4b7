"""The slice fit's compiled solver (:mod:`optiond.surface.solver`) against independent references:
the gradient of its objective by central differences, the quasi-explicit inner problem by
NumPy's least squares, and the minimum it reaches by SciPy's bounded least squares on the
same residuals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import least_squares

from optiond.surface import solver

T = 0.25
K = np.linspace(-0.2, 0.15, 31)
GRID = np.linspace(-1.5, 1.5, 61)
MID_PULL, G_MARGIN, CAL_MARGIN, LEE_MAX = 0.1, 1e-4, 1e-7, 1.99
LO_X = np.array([1e-4, 0.0, -0.995, -2.0, 1e-3])
HI_X = np.array([5.0, 2.0 / T, 0.995, 2.0, 3.0])


def svi_w(v, b, rho, m, s, k):
    """Raw SVI in (minimum variance, b, rho, m, sigma), written out (Gatheral 2004)."""
    return v - b * s * math.sqrt(1 - rho * rho) + b * (rho * (k - m) + np.sqrt((k - m) ** 2 + s * s))


def quotes():
    rng = np.random.default_rng(7)
    mid = np.sqrt(svi_w(0.01, 0.08, -0.6, 0.02, 0.08, K) / T) + 0.003 * rng.standard_normal(K.size)
    half = 0.002 + 0.002 * rng.random(K.size)
    return mid - half, mid + half, mid


def args(penalty, prev=None):
    lo, hi, mid = quotes()
    cgrid = GRID if prev is not None else np.empty(0)
    w_prev = prev if prev is not None else np.empty(0)
    return (T, K, lo, hi, mid, GRID, cgrid, w_prev, penalty, MID_PULL, G_MARGIN, CAL_MARGIN, LEE_MAX)


@pytest.mark.parametrize("x", [np.array([0.04, 0.3, -0.5, 0.0, 0.1]),      # inside the band mostly
                               np.array([0.02, 1.5, 0.9, 0.3, 0.02]),       # g < 0 and Lee violated
                               np.array([0.03, 0.8, -0.2, -0.1, 0.05])])
def test_gradient_is_half_the_central_difference_of_the_objective(x):
    # cost = sum r^2, so grad cost = 2 J^T r; A = J^T J is symmetric positive semi-definite
    prev = svi_w(0.036 * T, 0.35 * T, -0.4, 0.0, 0.12, GRID)  # an earlier slice that binds somewhere
    a = args(1e3, prev)
    A, gv = np.empty((5, 5)), np.empty(5)
    solver._system(x, *a, True, A, gv)
    num = np.empty(5)
    for j in range(5):
        h = 1e-7 * max(abs(x[j]), 1e-2)
        e = np.zeros(5)
        e[j] = h
        num[j] = (solver.objective(x + e, *a) - solver.objective(x - e, *a)) / (2 * h)
    np.testing.assert_allclose(2 * gv, num, rtol=2e-5, atol=1e-9 * max(1.0, np.abs(num).max()))
    assert np.allclose(A, A.T) and np.linalg.eigvalsh(A).min() > -1e-12 * np.abs(A).max()


def test_quasi_explicit_inner_problem_equals_numpy_least_squares():
    rng = np.random.default_rng(3)
    k = np.sort(rng.uniform(-0.3, 0.3, 40))
    w = svi_w(0.02, 0.1, -0.4, 0.01, 0.1, k) + 1e-4 * rng.standard_normal(40)
    sw = rng.uniform(0.5, 1.5, 40)
    m, s = np.array([0.01, -0.05]), np.array([0.1, 0.2])
    P, f = solver.qe_inner(k, w, sw, m, s)
    for g in range(2):
        y = (k - m[g]) / s[g]
        X = np.stack([np.ones_like(y), y, np.sqrt(y * y + 1)], 1) * sw[:, None]
        ref, *_ = np.linalg.lstsq(X, w * sw, rcond=None)
        a, d, c = ref
        assert 0 <= c <= 2 * s[g] and abs(d) <= min(c, 2 * s[g] - c)  # inside the domain: no clipping
        np.testing.assert_allclose(P[g], ref, rtol=1e-7, atol=1e-10)
        assert f[g] == pytest.approx(float(np.sum((X @ ref - w * sw) ** 2)), rel=1e-6)


def test_lm_reaches_scipys_minimum_of_the_same_residuals():
    lo, hi, mid = quotes()
    a = args(10.0)
    x0 = np.array([0.03, 0.5, -0.3, 0.0, 0.1])
    x, cost, nev = solver.lm(x0, LO_X, HI_X, *a, 500, 1e-12)
    assert nev > 1 and cost <= solver.objective(x0, *a)

    def residuals(z):  # the module docstring's rows, written out with NumPy
        v, b, rho, m, s = z[0] * T, z[1] * T, z[2], z[3], z[4]
        f = np.sqrt(svi_w(v, b, rho, m, s, K) / T)
        wq = 1 / math.sqrt(K.size)
        band = (np.maximum(lo - f, 0) + np.maximum(f - hi, 0)) * wq
        d = GRID - m
        R = np.sqrt(d * d + s * s)
        w = svi_w(v, b, rho, m, s, GRID)
        w1 = b * (rho + d / R)
        w2 = b * s * s / R ** 3
        g = (1 - GRID * w1 / (2 * w)) ** 2 - w1 * w1 / 4 * (1 / w + 0.25) + w2 / 2
        pen = 10.0 * np.minimum(g - G_MARGIN, 0) / math.sqrt(GRID.size)
        lee = 10.0 * min(LEE_MAX - b * (1 + abs(rho)), 0.0)
        return np.concatenate([band, MID_PULL * wq * (f - mid), pen, [lee]])

    ref = least_squares(residuals, x0, bounds=(LO_X, HI_X), xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=20000)
    assert cost == pytest.approx(float(np.sum(residuals(x) ** 2)), rel=1e-10)  # one objective
    assert cost <= 2 * ref.cost * (1 + 1e-6)  # scipy's cost is half the sum of squares
