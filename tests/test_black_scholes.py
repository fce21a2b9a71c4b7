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
    return dict(price=opt.NPV(), delta=opt.delta(), gamma=opt.gamma(), theta=opt.theta(), vega=opt.vega(), rho=opt.rho(),
                dividend_rho=opt.dividendRho())


@pytest.mark.parametrize("kind", [0, 1])
@pytest.mark.parametrize("S,days,r,q,sigma", [(100, 365, 0.05, 0.0, 0.2), (80, 30, 0.01, 0.03, 0.6),
                                               (130, 1000, 0.08, 0.02, 0.35), (100, 7, 0.0, 0.0, 0.1)])
def test_against_quantlib(kind, S, days, r, q, sigma):
    ref = quantlib_european(kind, float(S), 100.0, days, r, q, sigma)
    got = bs_price_greeks(kind, S, 100.0, days / 365.0, r, q, sigma)
    for k in ("price", "delta", "gamma", "theta", "vega", "rho", "dividend_rho"):
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


#: the round-trip grid: moneyness K/S 0.5 to 2, T from one day to 10 years, volatility 10 % to
#: 150 % (at 5 % and one day the closed form's own rounding, d1 and d2 of ~36 cancelling in a
#: price of 1e-290, moves the volatility by up to 2e-12: a limit of the price, not of the solver)
_M = np.array([0.5, 0.6, 0.75, 0.9, 0.97, 1.0, 1.03, 1.1, 1.3, 1.6, 2.0])
_T = np.array([1 / 365, 7 / 365, 30 / 365, 0.25, 1.0, 3.0, 10.0])
_SIG = np.array([0.1, 0.2, 0.4, 0.8, 1.5])


@pytest.mark.parametrize("r,q", [(0.0, 0.0), (0.05, 0.02), (-0.01, 0.03)])
@pytest.mark.parametrize("kind", [0, 1])
def test_implied_vol_round_trip_to_1e_12_out_of_the_money(kind, r, q):
    """The volatility of a closed-form price comes back to 1e-12 relative on every out-of-the-
    money option of the grid whose price is a normal double (deep out of the money included:
    prices down to 1e-300), and on the in-the-money ones whose time value is at least 1e-3 of
    the price (below that the price's rounding, not the solver, is the limit)."""
    K, T, s = (a.ravel() for a in np.meshgrid(_M * 100.0, _T, _SIG, indexing="ij"))
    price = bs_price_greeks(kind, 100.0, K, T, r, q, s)["price"]
    F = 100.0 * np.exp((r - q) * T)
    otm = (K >= F) if kind == 1 else (K <= F)
    intrinsic = np.maximum((F - K) if kind == 1 else (K - F), 0.0) * np.exp(-r * T)
    keep = (price > 1e-300) & (otm | (price - intrinsic >= 1e-3 * price))
    assert keep.sum() > 0.7 * keep.size and (keep & otm & (price < 1e-100)).any()  # deep OTM is in
    vol, status = bs_implied_vol(price[keep], kind, 100.0, K[keep], T[keep], r, q)
    assert (status == IV_OK).all()
    np.testing.assert_allclose(vol, s[keep], rtol=1e-12, atol=0)
