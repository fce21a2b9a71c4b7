"""Black–Scholes–Merton closed forms against QuantLib's AnalyticEuropeanEngine, parity and the
implied-volatility inversion."""

from __future__ import annotations

import numpy as np
import pytest

from optiond.kernels.black_scholes import bs_implied_vol, bs_price_greeks
from optiond.kernels.rootfind import IV_ABOVE, IV_BELOW, IV_OK

from conftest import quantlib_option

ql = pytest.importorskip("QuantLib")


def quantlib_european(kind, S, K, days, r, q, sigma):
    _, opt, proc = quantlib_option(kind, S, K, days, r, q, sigma)
    opt.setPricingEngine(ql.AnalyticEuropeanEngine(proc))
    return dict(price=opt.NPV(), delta=opt.delta(), gamma=opt.gamma(), theta=opt.theta(), vega=opt.vega(), rho=opt.rho())


@pytest.mark.parametrize("kind", [0, 1])
@pytest.mark.parametrize("S,days,r,q,sigma", [(100, 365, 0.05, 0.0, 0.2), (80, 30, 0.01, 0.03, 0.6),
                                               (130, 1000, 0.08, 0.02, 0.35), (100, 7, 0.0, 0.0, 0.1)])
def test_against_quantlib(kind, S, days, r, q, sigma):
    ref = quantlib_european(kind, float(S), 100.0, days, r, q, sigma)
    got = bs_price_greeks(kind, S, 100.0, days / 365.0, r, q, sigma)
    for k in ("price", "delta", "gamma", "theta", "vega", "rho"):
        assert got[k][0] == pytest.approx(ref[k], rel=1e-9, abs=1e-10), k


def test_put_call_parity():
    rng = np.random.default_rng(1)
    S, K, T = rng.uniform(50, 150, 50), rng.uniform(50, 150, 50), rng.uniform(0.01, 5, 50)
    r, q, s = rng.uniform(-0.01, 0.1, 50), rng.uniform(0, 0.05, 50), rng.uniform(0.05, 2, 50)
    c = bs_price_greeks(1, S, K, T, r, q, s)["price"]
    p = bs_price_greeks(0, S, K, T, r, q, s)["price"]
    np.testing.assert_allclose(c - p, S * np.exp(-q * T) - K * np.exp(-r * T), atol=1e-10)


def test_implied_vol_round_trip_and_statuses():
    rng = np.random.default_rng(2)
    n = 200
    kind = rng.integers(0, 2, n)
    S, T = rng.uniform(60, 140, n), rng.uniform(0.02, 3, n)
    r, q, s = rng.uniform(0, 0.08, n), rng.uniform(0, 0.04, n), rng.uniform(0.05, 3.0, n)
    price = bs_price_greeks(kind, S, 100.0, T, r, q, s)["price"]
    vega = bs_price_greeks(kind, S, 100.0, T, r, q, s)["vega"]
    vol, status = bs_implied_vol(price, kind, S, 100.0, T, r, q)
    informative = vega > 1e-4
    assert np.all(status[informative] == IV_OK)
    back = bs_price_greeks(kind, S, 100.0, T, r, q, np.where(status == IV_OK, vol, 0.2))["price"]
    np.testing.assert_allclose(back[status == IV_OK], price[status == IV_OK], rtol=0, atol=1e-8)
    # below the discounted intrinsic value, and above the spot (call) bound
    v, st = bs_implied_vol([5.0, 111.0], 1, 110.0, 100.0, 1.0, 0.05, 0.0)
    assert st.tolist() == [IV_BELOW, IV_ABOVE] and np.isnan(v).all()
