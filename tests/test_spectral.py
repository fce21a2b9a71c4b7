"""The spectral American engine (Andersen, Lake & Offengenden 2016) against QuantLib's
QdFpAmericanEngine, the ALO paper's example, the put–call symmetry and the engine's routing."""

from __future__ import annotations

import numpy as np
import pytest

from optiond import engine
from optiond.kernels.binomial import cpu as crr
from optiond.kernels.black_scholes import bs_price_greeks
from optiond.kernels.spectral import MEASURED_ERROR, cpu
from optiond.models import Method

from conftest import quantlib_option

ql = pytest.importorskip("QuantLib")


def ql_american(kind, S, K, days, r, q, sigma, scheme=None):
    """QuantLib 1.44 QdFpAmericanEngine on the smooth-pasting equation (FP_A, the equation our
    engine iterates), high-precision tanh-sinh scheme unless ``scheme`` is given; T = days/365."""
    _, opt, proc = quantlib_option(kind, S, K, int(days), r, q, sigma, american=True)
    opt.setPricingEngine(ql.QdFpAmericanEngine(proc, scheme or ql.QdFpAmericanEngine.highPrecisionScheme(),
                                               ql.QdFpAmericanEngine.FP_A))
    return opt.NPV()


@pytest.mark.parametrize("r", [0.05, 0.075])
def test_alo_high_precision_example(r):
    """ALO (2016)'s high-precision example, S = K = 100, q = 5 %, sigma = 25 %, T = 1: the
    early-exercise premium to 1e-10 at the high-precision setting, against QuantLib's
    high-precision QdFp engine; at r = 5 % also against the premium QuantLib's test-suite quotes
    (americanoption.cpp, testAndersenLakeHighPrecisionExample, (l, m, n) = (65, 8, 32), FP-A).
    Its r = 7.5 % value (0.3671112309062572) carries the 65-point Gauss–Legendre error of that
    scheme (about 9e-8: QuantLib's own tanh-sinh schemes give 0.36711114...), so it is checked
    to 1e-7 only."""
    out = cpu.alo_batch(np.array([0]), np.array([100.0]), 100.0, 1.0, r, 0.05, 0.25, "high-precision", greeks=False)
    euro = bs_price_greeks(np.array([0]), 100.0, 100.0, 1.0, r, 0.05, 0.25)["price"][0]
    premium = out[0, 0] - euro
    ref = ql_american(0, 100.0, 100.0, 365, r, 0.05, 0.25) - euro
    assert abs(premium - ref) < 1e-10
    quoted = {0.05: (0.1069527028247546, 1e-10), 0.075: (0.3671112309062572, 1e-7)}[r]
    assert abs(premium - quoted[0]) < quoted[1]


def _grid(n=240, seed=7):
    rng = np.random.default_rng(seed)
    kind = np.tile([0, 1], n // 2).astype(np.int8)
    S = 100.0 * rng.uniform(0.7, 1.3, n)
    days = np.round(np.exp(rng.uniform(np.log(7), np.log(5 * 365), n))).astype(int)
    sig, r, q = rng.uniform(0.05, 1.0, n), rng.uniform(0.0, 0.1, n), rng.uniform(0.0, 0.1, n)
    return kind, S, days, r, q, sig


@pytest.fixture(scope="module")
def grid():
    kind, S, days, r, q, sig = _grid()
    ref = np.array([ql_american(kind[i], S[i], 100.0, days[i], r[i], q[i], sig[i]) for i in range(len(S))])
    return kind, S, days / 365.0, r, q, sig, ref


@pytest.mark.parametrize("accuracy", cpu.ACCURACY_NAMES)
def test_grid_against_quantlib_and_put_call_symmetry(grid, accuracy):
    """240 American puts and calls (S/K 0.7–1.3, T 1 week–5 years, sigma 0.05–1, r, q 0–10 %):
    within each setting's measured error of QuantLib's high-precision QdFp engine; a call equals
    the put with (S, K) and (r, q) swapped."""
    kind, S, T, r, q, sig, ref = grid
    out = cpu.alo_batch(kind, S, 100.0, T, r, q, sig, accuracy, greeks=False)[0]
    assert np.abs(out - ref).max() <= 1.05 * MEASURED_ERROR[accuracy]
    sym = cpu.alo_batch(1 - kind, np.full(len(S), 100.0), S, T, q, r, sig, accuracy, greeks=False)[0]
    np.testing.assert_allclose(sym, out, rtol=0, atol=1e-12)


def test_implied_vol_round_trip():
    kind, S, days, r, q, sig = _grid(40, seed=3)
    T = days / 365.0
    price = cpu.alo_batch(kind, S, 100.0, T, r, q, sig, "accurate", greeks=False)[0]
    vol, code = cpu.alo_implied_vol(price, kind, S, 100.0, T, r, q, "accurate")
    ok = price > np.maximum(np.where(kind == 1, S - 100.0, 100.0 - S), 0.0) + 1e-6  # a vega to invert
    assert (code[ok] == 0).all()
    np.testing.assert_allclose(vol[ok], sig[ok], rtol=0, atol=1e-10)


def test_greeks_against_differences_of_the_price():
    """Delta, gamma and theta (the method's own) against central differences of the price."""
    kind = np.array([0, 1, 0, 1], dtype=np.int8)
    S, K, T = np.array([95.0, 105.0, 110.0, 90.0]), 100.0, np.array([0.5, 1.0, 2.0, 0.25])
    r, q, sig = np.array([0.05, 0.02, 0.08, 0.06]), np.array([0.02, 0.06, 0.0, 0.09]), np.array([0.3, 0.25, 0.4, 0.2])
    g = cpu.alo_batch(kind, S, K, T, r, q, sig, "high-precision")
    p = lambda **kw: cpu.alo_batch(kind, kw.get("S", S), K, kw.get("T", T), kw.get("r", r), q, kw.get("sig", sig),  # noqa: E731
                                   "high-precision", greeks=False)[0]
    h = 1e-4 * S
    np.testing.assert_allclose(g[1], (p(S=S + h) - p(S=S - h)) / (2 * h), atol=1e-6)
    h = 1e-3 * S
    np.testing.assert_allclose(g[2], (p(S=S + h) - 2 * g[0] + p(S=S - h)) / h**2, atol=1e-5)
    np.testing.assert_allclose(g[3], -(p(T=T + 1e-4) - p(T=T - 1e-4)) / 2e-4, atol=1e-5)
    np.testing.assert_allclose(g[4], (p(sig=sig + 1e-3) - p(sig=sig - 1e-3)) / 2e-3, rtol=5e-5)
    np.testing.assert_allclose(g[5], (p(r=r + 1e-3) - p(r=r - 1e-3)) / 2e-3, rtol=5e-5)


def test_engine_routes_rows():
    """Through the engine: American single-boundary rows by ALO, European and no-early-exercise
    rows by the closed form, the double-boundary regime on the tree (with a note)."""
    cols = dict(kind=["put", "put", "call", "put", "call"], style=["american", "european", "american", "american", "american"],
                spot=100.0, strike=100.0, expiry=1.0, rate=[0.05, 0.05, 0.03, -0.01, -0.02],
                dividend_yield=[0.05, 0.05, 0.0, -0.03, -0.01], volatility=0.25)
    res = engine.price_table(cols, Method(name="spectral", accuracy="high"))
    assert res.status.tolist() == ["ok"] * 5
    assert abs(res.price[0] - ql_american(0, 100.0, 100.0, 365, 0.05, 0.05, 0.25)) < 1e-8
    bs = bs_price_greeks(np.array([0, 1]), 100.0, 100.0, 1.0, np.array([0.05, 0.03]), np.array([0.05, 0.0]), 0.25)
    assert res.price[1] == bs["price"][0] and res.price[2] == bs["price"][1]  # a call without dividends: European
    assert res.diagnostics["spectral_tree_rows"] == [3, 4]
    tree = crr.crr_batch(np.array([0, 1], dtype=np.int8), np.array([1, 1], dtype=np.int8), np.full(2, 100.0),
                         np.full(2, 100.0), np.ones(2), np.array([-0.01, -0.02]), np.array([-0.03, -0.01]),
                         np.full(2, 0.25), np.full(2, 1000), greeks=False)[0]
    np.testing.assert_allclose(res.price[3:], tree, rtol=0, atol=1e-12)
    iv = engine.implied_vol_table(res.price, {k: v for k, v in cols.items() if k != "volatility"},
                                  Method(name="spectral", accuracy="high"))
    assert iv.status.tolist() == ["ok"] * 5
    np.testing.assert_allclose(iv.vol, 0.25, atol=1e-8)
