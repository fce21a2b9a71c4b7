"""Converged tree prices: Broadie & Detemple's smoothing with two-point Richardson extrapolation
("BBSR", :func:`optiond.kernels.binomial.cpu.crr_batch` with ``extrapolate=True``) against
QuantLib's ``QdFpAmericanEngine`` at its high-precision setting (Andersen, Lake & Offengenden
2016; accurate to about 1e-10), which serves as the converged American price."""

from __future__ import annotations

import numpy as np
import pytest

from optiond import engine
from optiond.kernels.binomial.cpu import crr_batch, crr_implied_vol
from optiond.models import Method

from conftest import quantlib_option

ql = pytest.importorskip("QuantLib")


def quantlib_high_precision(kind, S, K, days, r, q, vol):
    _, opt, proc = quantlib_option(kind, S, K, days, r, q, vol, american=True)
    opt.setPricingEngine(ql.QdFpAmericanEngine(proc, ql.QdFpAmericanEngine.highPrecisionScheme()))
    return opt.NPV()


def grid(n=120, seed=0):
    """American puts and calls: moneyness 0.7-1.3, T 1 week to 5 years, sigma 0.05-1.0, r and q 0-10 %."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        rows.append((int(rng.integers(0, 2)), float(rng.uniform(70, 130)), int(rng.integers(7, 5 * 365)),
                     float(rng.uniform(0, 0.1)), float(rng.uniform(0, 0.1)), float(rng.uniform(0.05, 1.0))))
    return rows


def test_bbsr_at_1000_steps_is_within_the_stated_error_of_the_converged_price():
    # measured over this grid (seed 0, 120 options), the error over max(1, price / 10): median
    # 2.4e-5, 95th percentile 1.1e-4, worst 3.4e-4 (a 5-year put 17 % in the money at r = 8.3 %,
    # where the tree's early-exercise error is irregular in N: -4.7e-3, -1.0e-3, -3.9e-4 at
    # N = 1000, 2000, 4000, so two trees do not cancel it); the plain tree: worst 9.5e-3
    bbsr_err, plain_err = [], []
    for kind, K, days, r, q, vol in grid():
        ref = quantlib_high_precision(kind, 100.0, K, days, r, q, vol)
        T = days / 365.0
        scale = max(1.0, ref / 10.0)
        bbsr = crr_batch(kind, 1, 100.0, K, T, r, q, vol, 1000, greeks=False, extrapolate=True)[0, 0]
        plain = crr_batch(kind, 1, 100.0, K, T, r, q, vol, 1000, greeks=False)[0, 0]
        bbsr_err.append(abs(bbsr - ref) / scale)
        plain_err.append(abs(plain - ref) / scale)
    bbsr_err, plain_err = np.array(bbsr_err), np.array(plain_err)
    assert np.median(bbsr_err) <= 5e-5 and np.quantile(bbsr_err, 0.95) <= 2e-4 and bbsr_err.max() <= 5e-4
    assert np.median(plain_err) > 10 * np.median(bbsr_err)  # the point of extrapolating


def test_smoothed_tree_is_black_scholes_at_one_step_and_close_to_it_at_1000():
    from optiond.kernels.black_scholes import bs_price_one

    # N = 1: the smoothed tree's one level is Black-Scholes itself
    for kind in (0, 1):
        v = crr_batch(kind, 0, 100.0, 95.0, 0.7, 0.03, 0.01, 0.25, 1, greeks=False, extrapolate=True)[0, 0]
        assert v == pytest.approx(bs_price_one(kind == 1, 100.0, 95.0, 0.7, 0.03, 0.01, 0.25), rel=1e-14)
    # a European at N = 1000: within 1e-4 of the closed form (measured 4.4e-5; the plain tree 2.2e-3)
    for kind in (0, 1):
        ref = bs_price_one(kind == 1, 100.0, 105.0, 1.0, 0.05, 0.0, 0.3)
        v = crr_batch(kind, 0, 100.0, 105.0, 1.0, 0.05, 0.0, 0.3, 1000, greeks=False, extrapolate=True)[0, 0]
        plain = crr_batch(kind, 0, 100.0, 105.0, 1.0, 0.05, 0.0, 0.3, 1000, greeks=False)[0, 0]
        assert abs(v - ref) <= 1e-4 and abs(plain - ref) > 10 * abs(v - ref)


def test_extrapolated_implied_vol_round_trip_and_the_engine_flag():
    kind = np.array([0, 1, 0, 1])
    K = np.array([90.0, 95.0, 110.0, 120.0])
    vol = np.array([0.2, 0.35, 0.5, 0.25])
    px = crr_batch(kind, 1, 100.0, K, 1.5, 0.04, 0.02, vol, 600, greeks=False, extrapolate=True)[0]
    iv, code = crr_implied_vol(px, kind, 1, 100.0, K, 1.5, 0.04, 0.02, 600, extrapolate=True)
    assert (code == 0).all()
    np.testing.assert_allclose(iv, vol, atol=1e-10)
    res = engine.price_table(dict(kind=["put", "call", "put", "call"], style="american", spot=100.0, strike=K,
                                  expiry=1.5, rate=0.04, dividend_yield=0.02, volatility=vol),
                             Method(steps=600, extrapolate=True))
    np.testing.assert_allclose(res.price, px, rtol=1e-14)
    assert res.diagnostics.get("extrapolate") == "BBSR"
    iv2 = engine.implied_vol_table(px, dict(kind=["put", "call", "put", "call"], style="american", spot=100.0,
                                            strike=K, expiry=1.5, rate=0.04, dividend_yield=0.02),
                                   Method(steps=600, extrapolate=True))
    np.testing.assert_allclose(iv2.vol, vol, atol=1e-10)


@pytest.mark.parametrize("greeks", [False, True])
def test_one_contract_is_extrapolated_too(greeks):
    """The engine's one-contract path (scalar columns: an Excel cell, a single request) takes
    the flag as the batch path does."""
    want = crr_batch(np.array([0]), 1, 100.0, 95.0, 0.75, 0.05, 0.01, 0.3, 400, greeks=greeks, extrapolate=True)
    res = engine.price_table(dict(kind="put", style="american", spot=100.0, strike=95.0, expiry=0.75, rate=0.05,
                                  dividend_yield=0.01, volatility=0.3), Method(steps=400, greeks=greeks,
                                                                               extrapolate=True))
    assert res.price[0] == want[0, 0] and res.diagnostics.get("extrapolate") == "BBSR"
    plain = crr_batch(np.array([0]), 1, 100.0, 95.0, 0.75, 0.05, 0.01, 0.3, 400, greeks=False)[0, 0]
    assert res.price[0] != plain


def test_cli_price_extrapolate_and_accuracy_flags(tmp_path):
    import pandas as pd

    from optiond.cli import main as cli_main
    from optiond.kernels.spectral import cpu as spectral

    src, dst = tmp_path / "book.csv", tmp_path / "out.csv"
    pd.DataFrame({"kind": "put", "style": "american", "spot": 100.0, "strike": [95.0, 95.0], "expiry": 1.0,
                  "rate": 0.05, "dividend_yield": 0.02, "volatility": 0.25,
                  "method": ["binomial", "spectral"]}).to_csv(src, index=False)
    assert cli_main(["price", str(src), "-o", str(dst), "--no-daemon", "--steps", "400", "--extrapolate",
                     "--accuracy", "fast"]) == 0
    out = pd.read_csv(dst)
    bbsr = crr_batch(0, 1, 100.0, 95.0, 1.0, 0.05, 0.02, 0.25, 400, extrapolate=True)[:, 0]
    alo = spectral.alo_batch(np.array([0]), np.array([100.0]), 95.0, 1.0, 0.05, 0.02, 0.25, "fast", greeks=False)
    assert out.loc[0, "price"] == pytest.approx(bbsr[0], rel=1e-13)
    assert out.loc[0, "delta"] == pytest.approx(bbsr[1], rel=1e-12)
    assert out.loc[1, "price"] == pytest.approx(alo[0, 0], rel=1e-12)  # (6, n): price and the Greeks


def test_large_steps_keep_the_exercise_values_exact():
    # sigma sqrt(dt) = 1 (sigma 10, N = 100): the exercise recurrence X <- u X + c multiplies its
    # rounding by e per level, so it re-anchors every 8 levels, not 64; an American put then stays
    # between its bounds (K - S <= P <= K) and close to the finer tree, and the root find that
    # brackets up to sigma = 10 solves the extrapolated price at N = 200
    coarse = crr_batch(0, 1, 100.0, 110.0, 1.0, 0.05, 0.02, 10.0, 100, greeks=False)[0, 0]
    fine = crr_batch(0, 1, 100.0, 110.0, 1.0, 0.05, 0.02, 10.0, 4000, greeks=False)[0, 0]
    assert 10.0 <= coarse <= 110.0 and abs(coarse - fine) < 1.0
    px = crr_batch(0, 1, 100.0, 110.0, 1.0, 0.05, 0.02, 0.25, 200, greeks=False, extrapolate=True)[0]
    iv, code = crr_implied_vol(px, 0, 1, 100.0, 110.0, 1.0, 0.05, 0.02, 200, extrapolate=True)
    assert code[0] == 0 and abs(iv[0] - 0.25) < 1e-10
