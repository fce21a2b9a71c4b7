"""The ADI pricer's default discretisation (``optiond.kernels.adi.defaults``, ``Method``'s
defaults): its error against an independent engine and published values, and its step rule.

* European: against the semi-analytic engine (``optiond.kernels.heston``, Lewis's integral;
  an independent method, checked against QuantLib and Lewis's published values in
  ``tests/test_heston_analytic.py``) on the hard sets of issue #24: T = 10 with xi = 1 and
  T = 0.5 with xi = 1.5, rho = -0.9, deep in and out of the money: within 1e-3.
* American: Ikonen & Toivanen (2009), "Operator splitting methods for pricing American options
  under stochastic volatility", Numer. Math. 113, 299-324, reference values for K = 10, T =
  0.25, r = 0.1, q = 0, kappa = 5, theta = 0.16, xi = 0.9, rho = 0.1, v0 = 0.0625 (also in
  their 2007 report, to within 1e-5, as used by QuantLib's ``testFdmHestonIkonenToivanen``):
  within 2e-4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from optiond import engine
from optiond.kernels import adi as A
from optiond.kernels.adi import defaults
from optiond.kernels.heston import cpu as analytic
from optiond.models import InvalidInputError, Method

HARD = [(T, xi, kappa, K, kind)
        for T, xi, kappa, Ks in ((10.0, 1.0, 1.5, (50.0, 100.0, 200.0)), (0.5, 1.5, 2.0, (70.0, 100.0, 130.0)))
        for K in Ks for kind in ("put", "call")]
IT_SPOTS = (8.0, 9.0, 10.0, 11.0, 12.0)
IT_V0_0625 = (2.000000, 1.107621, 0.520030, 0.213677, 0.082044)


def _hard_columns():
    T, xi, kappa, K, kind = (np.array(c) for c in zip(*HARD))
    return dict(kind=kind, style="european", spot=100.0, strike=K, expiry=T, rate=0.03, dividend_yield=0.01, v0=0.04,
                kappa=kappa, long_run_variance=0.04, xi=xi, correlation=-0.9, method="adi")


def test_default_european_hard_sets_vs_analytic():
    cols = _hard_columns()
    res = engine.price_table(cols, Method(name="adi", device="cpu"))
    assert res.status.tolist() == ["ok"] * len(HARD)
    n = len(HARD)
    ref = analytic.heston_batch((cols["kind"] == "call").astype(np.int8), np.full(n, 100.0), cols["strike"],
                                cols["expiry"], np.full(n, 0.03), np.full(n, 0.01), np.full(n, 0.04), cols["kappa"],
                                np.full(n, 0.04), cols["xi"], np.full(n, -0.9), greeks=False)[0]
    err = np.abs(res.price - ref)
    assert err.max() <= 1e-3, dict(zip(HARD, err))
    # the T = 10 rows got the 800 steps of the ladder, the T = 0.5 rows the least count
    assert res.diagnostics["adi_time_steps"] == [800] * 6 + [50] * 6 and res.diagnostics["adi_richardson"]


#: (kappa, xi, rho, T, K, kind): the worst of the 648-option grid of hard sets in
#: optiond.kernels.adi.defaults (spot domain, 6.14e-3), the worst discretisation case (4.2e-3),
#: and the vol-of-vol 1.5 sets of kappa 1 and 2
HARD_GRID_WORST = [(0.5, 1.5, 0.0, 2.0, 100.0, "call"), (0.5, 0.5, -0.9, 2.0, 120.0, "call"),
                   (1.0, 1.5, -0.9, 1.0, 80.0, "put"), (2.0, 1.5, -0.9, 2.0, 120.0, "call")]


def test_default_european_bound_holds_and_is_the_measured_worst():
    """The bound the docstrings state (defaults.EUROPEAN_BOUND, over kappa 0.5-2, xi 0.5-1.5,
    rho -0.9-0, T 0.25-2, K/S 0.8-1.2) holds on the worst sets of its grid, and is their
    measured worst, not a figure from easier sets (the earlier docstrings said 6.3e-4 while
    these rows erred up to 6.1e-3): lower it when the default improves."""
    kappa, xi, rho, T, K, kind = (np.array(c) for c in zip(*HARD_GRID_WORST))
    n = len(HARD_GRID_WORST)
    cols = dict(kind=kind, style="european", spot=100.0, strike=K, expiry=T, rate=0.03, dividend_yield=0.01, v0=0.04,
                kappa=kappa, long_run_variance=0.04, xi=xi, correlation=rho, method="adi")
    res = engine.price_table(cols, Method(name="adi", device="cpu"))
    ref = analytic.heston_batch((kind == "call").astype(np.int8), np.full(n, 100.0), K, T, np.full(n, 0.03),
                                np.full(n, 0.01), np.full(n, 0.04), kappa, np.full(n, 0.04), xi, rho, greeks=False)[0]
    err = np.abs(res.price - ref)
    assert err.max() <= defaults.EUROPEAN_BOUND, dict(zip(HARD_GRID_WORST, err))
    assert err[0] > 0.9 * defaults.EUROPEAN_BOUND, err  # the stated bound is the measured worst


def test_single_grid_earlier_default_misses_the_hard_sets():
    """The same rows on one 200 x 100 grid with 100 steps (the earlier default) err by more than
    10x the tolerance at T = 10, K = 200: the tests above can fail."""
    ref = analytic.heston_batch(np.array([1], np.int8), np.array([100.0]), np.array([200.0]), np.array([10.0]),
                                np.array([0.03]), np.array([0.01]), np.array([0.04]), np.array([1.5]), np.array([0.04]),
                                np.array([1.0]), np.array([-0.9]), greeks=False)[0][0]
    old = A.heston_price("call", "european", 100.0, 200.0, 10.0, 0.03, 0.01, 0.04, 1.5, 0.04, 1.0, -0.9,
                         grid=(200, 100), time_steps=100)["price"]
    assert abs(old - ref) > 1e-2


@pytest.mark.parametrize("spot,ref", list(zip(IT_SPOTS, IT_V0_0625)))
def test_default_american_vs_ikonen_toivanen(spot, ref):
    out = A.heston_price("put", "american", spot, 10.0, 0.25, 0.1, 0.0, 0.0625, 5.0, 0.16, 0.9, 0.1,
                         grid=defaults.GRID, time_steps=defaults.MIN_TIME_STEPS, steps_per_year=defaults.STEPS_PER_YEAR,
                         richardson=True)
    assert abs(out["price"] - ref) <= 2e-4, (spot, out["price"], ref)


def test_batch_default_equals_single_option_default():
    """The batch front door (rows grouped by step count, one solve per group and grid) gives each
    row what the single-option path gives it, Greeks included."""
    K = np.array([90.0, 100.0, 110.0])
    T = np.array([0.3, 1.2, 2.5])
    kw = dict(grid=(40, 20), time_steps=10, steps_per_year=16.0, richardson=True)
    b = A.heston_price_batch("put", "american", 100.0, K, T, 0.03, 0.01, 0.04, 2.0, 0.05, 0.6, -0.6, **kw, threads=1)
    assert b["time_steps"].tolist() == [10, 20, 40]
    for i in range(3):
        one = A.heston_price("put", "american", 100.0, K[i], T[i], 0.03, 0.01, 0.04, 2.0, 0.05, 0.6, -0.6, **kw)
        for k in ("price", "delta", "gamma", "theta", "dv0"):
            assert b[k][i] == pytest.approx(one[k], rel=1e-12, abs=1e-12), (i, k)


def test_richardson_is_the_two_grid_combination():
    args = ("call", "european", 100.0, 105.0, 0.7, 0.02, 0.0, 0.05, 1.5, 0.05, 0.5, -0.7)
    fine = A.heston_price(*args, grid=(40, 20), time_steps=12)["price"]
    coarse = A.heston_price(*args, grid=(20, 10), time_steps=6)["price"]
    both = A.heston_price(*args, grid=(40, 20), time_steps=12, richardson=True)["price"]
    assert both == pytest.approx((4 * fine - coarse) / 3, rel=1e-14)


@pytest.mark.parametrize("T", [0.0, 0.01, 0.3, 0.625, 0.7, 1.0, 2.84, 10.0, 37.0])
def test_step_ladder(T):
    n = int(defaults.steps_for(T))
    need = max(defaults.MIN_TIME_STEPS, math.ceil(defaults.STEPS_PER_YEAR * T))
    assert n >= need and n % 2 == 0
    assert n == defaults.MIN_TIME_STEPS or n <= math.sqrt(2) * need + 2
    assert int(defaults.steps_for(T, 50, 0.0)) == 50


def test_method_settings_validated():
    assert Method().richardson is True and Method().grid == defaults.GRID
    with pytest.raises(InvalidInputError) as e:
        Method(steps_per_year=-1.0)
    assert e.value.field == "steps_per_year"
    with pytest.raises(InvalidInputError) as e:
        Method(richardson="yes")
    assert e.value.field == "richardson"
    with pytest.raises(InvalidInputError) as e:
        A.heston_price_batch("put", "european", 100.0, 100.0, 1.0, 0.0, 0.0, 0.04, 1.0, 0.04, 0.3, -0.5, grid=(8, 8),
                             time_steps=4, richardson=True)
    assert e.value.field == "grid"
