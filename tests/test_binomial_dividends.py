"""Cash dividends on the CRR tree (the spot model by Vellekoop & Nieuwenhuis 2006;
:func:`optiond.kernels.binomial.cpu.crr_tree_div`) against QuantLib, closed forms and invariants.

QuantLib references: ``FdBlackScholesVanillaEngine`` with a ``DividendVector`` and
``CashDividendModel.Spot`` (QuantLib 1.44, Douglas scheme, 20 damping steps), on 4000 x 4000
and 8000 x 8000 grids, Richardson-extrapolated to first order (the FD values converge to first
order in the grid here: successive differences halve); S = 100, r = 5 %, sigma = 30 %, T = 365
days (Actual/365), ex-dates in days. Each row: schedule, kind, strike, q, American, the
extrapolated value, the 8000 x 8000 value (the extrapolation moves it by at most 1.5e-4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from optiond import engine
from optiond.kernels.binomial.cpu import cash_dividends, crr_batch, crr_implied_vol
from optiond.models import Batch, InvalidInputError, Method

SCHEDULES = {"start": [(5, 2.0)], "middle": [(180, 3.0)], "before_expiry": [(360, 3.0)],
             "quarterly": [(45, 1.0), (136, 1.0), (227, 1.0), (318, 1.0)], "two": [(100, 2.0), (280, 2.0)]}
QUANTLIB = [
    ("start", "put", 90.0, 0.0, True, 6.1136279527, 6.1135415519),
    ("start", "put", 90.0, 0.02, True, 6.5781241254, 6.5780572531),
    ("start", "put", 110.0, 0.0, True, 16.7556669552, 16.7555198446),
    ("start", "put", 110.0, 0.02, True, 17.4522557127, 17.4521461631),
    ("start", "call", 90.0, 0.0, True, 18.2271557161, 18.2271616931),
    ("start", "call", 90.0, 0.02, True, 16.8399822748, 16.8399874095),
    ("start", "call", 110.0, 0.0, True, 9.0516145386, 9.0516169820),
    ("start", "call", 110.0, 0.02, True, 8.1594874729, 8.1594901360),
    ("middle", "put", 90.0, 0.0, True, 6.5360537352, 6.5359714058),
    ("middle", "put", 90.0, 0.02, True, 7.0284205073, 7.0283557138),
    ("middle", "put", 110.0, 0.0, True, 17.2722339185, 17.2721215532),
    ("middle", "put", 110.0, 0.02, True, 18.0754927864, 18.0754035583),
    ("middle", "call", 90.0, 0.0, True, 17.7842236833, 17.7842262365),
    ("middle", "call", 90.0, 0.02, True, 16.6879881854, 16.6879887368),
    ("middle", "call", 110.0, 0.0, True, 8.7874806653, 8.7874832473),
    ("middle", "call", 110.0, 0.02, True, 7.9534358224, 7.9534370490),
    ("before_expiry", "put", 90.0, 0.0, True, 6.4003192372, 6.4002620578),
    ("before_expiry", "put", 90.0, 0.02, True, 6.9881766103, 6.9881327808),
    ("before_expiry", "put", 110.0, 0.0, True, 16.5434082402, 16.5433226804),
    ("before_expiry", "put", 110.0, 0.02, True, 17.5838748183, 17.5838204955),
    ("before_expiry", "call", 90.0, 0.0, True, 19.5996975338, 19.5997157850),
    ("before_expiry", "call", 90.0, 0.02, True, 18.1597482084, 18.1597653001),
    ("before_expiry", "call", 110.0, 0.0, True, 9.9220121142, 9.9220337186),
    ("before_expiry", "call", 110.0, 0.02, True, 8.9748707091, 8.9748911068),
    ("quarterly", "put", 90.0, 0.0, True, 6.7258240628, 6.7257595069),
    ("quarterly", "put", 90.0, 0.02, True, 7.2874408428, 7.2873909508),
    ("quarterly", "put", 110.0, 0.0, True, 17.3558922682, 17.3558037069),
    ("quarterly", "put", 110.0, 0.02, True, 18.2795221425, 18.2794603542),
    ("quarterly", "call", 90.0, 0.0, True, 17.2135621312, 17.2135641952),
    ("quarterly", "call", 90.0, 0.02, True, 16.0994107174, 16.0994122916),
    ("quarterly", "call", 110.0, 0.0, True, 8.4313885904, 8.4313927714),
    ("quarterly", "call", 110.0, 0.02, True, 7.6470341274, 7.6470373628),
    ("two", "put", 90.0, 0.0, True, 6.8022141333, 6.8021425434),
    ("two", "put", 90.0, 0.02, True, 7.3467379168, 7.3466813849),
    ("two", "put", 110.0, 0.0, True, 17.5148840743, 17.5147877670),
    ("two", "put", 110.0, 0.02, True, 18.4366556810, 18.4365851008),
    ("two", "call", 90.0, 0.0, True, 17.3644071413, 17.3644080011),
    ("two", "call", 90.0, 0.02, True, 16.2560011773, 16.2560013007),
    ("two", "call", 110.0, 0.0, True, 8.4708930536, 8.4708951728),
    ("two", "call", 110.0, 0.02, True, 7.6984767174, 7.6984782563),
    ("middle", "put", 100.0, 0.0, False, 10.6814207154, 10.6814222803),
    ("middle", "call", 100.0, 0.0, False, 12.6315446451, 12.6315487013),
    ("quarterly", "put", 100.0, 0.0, False, 11.1491413894, 11.1491467427),
    ("quarterly", "call", 100.0, 0.0, False, 12.1240443840, 12.1240519584),
]
S, R, VOL, T = 100.0, 0.05, 0.3, 1.0


def schedule(name):
    return (np.array([d for d, _ in SCHEDULES[name]]) / 365.0, np.array([a for _, a in SCHEDULES[name]]))


def tree(kind, K, q, american, name, N, **kw):
    t, a = schedule(name) if name else (None, None)
    return crr_batch(1 if kind == "call" else 0, int(american), kw.get("S", S), K, kw.get("T", T), R, q, VOL, N,
                     greeks=False, dividend_times=t, dividend_amounts=a)[0, 0]


def black_scholes(kind, K):
    d1 = (math.log(S / K) + (R + VOL * VOL / 2) * T) / (VOL * math.sqrt(T))
    d2 = d1 - VOL * math.sqrt(T)
    c = S * norm.cdf(d1) - K * math.exp(-R * T) * norm.cdf(d2)
    return c if kind == "call" else c - S + K * math.exp(-R * T)


@pytest.mark.parametrize("N", [1000, 4000])
def test_quantlib_spot_model_within_the_dividend_free_trees_own_error(N):
    # The tree's error is CRR's: first order in 1/N, oscillating with N (Leisen & Reimer 1996).
    # The bound is the dividend-free tree's own worst error at this N over the same strikes,
    # against Black-Scholes (European, q = 0): 2.95e-3 at N = 1000, 7.4e-4 at N = 4000 (measured);
    # the cash dividends add less than 5 % to it.
    bound = max(abs(tree(kind, K, 0.0, False, None, N) - black_scholes(kind, K)) for kind in ("put", "call")
                for K in (90.0, 100.0, 110.0))
    errs = [tree(kind, K, q, am, name, N) - ref for name, kind, K, q, am, ref, _ in QUANTLIB]
    worst = max(abs(e) for e in errs)
    assert worst <= 1.05 * bound, (worst, bound)
    assert bound < (3.0e-3 if N == 1000 else 8.0e-4)


def test_error_falls_at_first_order():
    # the worst error over the QuantLib grid, N = 500 ... 8000: slope -1 in log-log (measured -1.07)
    Ns = np.array([500, 1000, 2000, 4000, 8000])
    worst = [max(abs(tree(kind, K, q, am, name, N) - ref) for name, kind, K, q, am, ref, _ in QUANTLIB[::4]) for N in Ns]
    slope = np.polyfit(np.log(Ns), np.log(worst), 1)[0]
    assert -1.4 < slope < -0.8


def test_no_dividends_is_the_dividend_free_tree_bit_for_bit():
    kind, style = np.array([0, 1, 0, 1]), np.array([1, 1, 0, 0])
    plain = crr_batch(kind, style, S, 100.0, T, R, 0.01, VOL, 800)
    pad = np.full((4, 8), np.nan)
    assert np.array_equal(crr_batch(kind, style, S, 100.0, T, R, 0.01, VOL, 800, dividend_times=pad,
                                    dividend_amounts=pad), plain, equal_nan=True)
    zero = crr_batch(kind, style, S, 100.0, T, R, 0.01, VOL, 800, dividend_times=np.array([0.3, 0.6]),
                     dividend_amounts=np.zeros(2))
    assert np.array_equal(zero, plain, equal_nan=True)


def test_a_dividend_now_prices_on_spot_less_the_dividend_and_one_after_expiry_changes_nothing():
    for kind in (0, 1):
        now = crr_batch(kind, 1, S, 100.0, T, R, 0.0, VOL, 500, dividend_times=np.array([0.0]),
                        dividend_amounts=np.array([3.0]))
        assert np.array_equal(now, crr_batch(kind, 1, S - 3.0, 100.0, T, R, 0.0, VOL, 500), equal_nan=True)
        later = crr_batch(kind, 1, S, 100.0, T, R, 0.0, VOL, 500, dividend_times=np.array([1.5]),
                          dividend_amounts=np.array([3.0]))
        assert np.array_equal(later, crr_batch(kind, 1, S, 100.0, T, R, 0.0, VOL, 500), equal_nan=True)


def test_american_call_exercises_before_a_large_dividend():
    t_ex, D, N = 0.49, 10.0, 2000
    am = crr_batch(1, 1, S, 100.0, 0.5, R, 0.0, VOL, N, greeks=False, dividend_times=[t_ex],
                   dividend_amounts=[D])[0, 0]
    eu = crr_batch(1, 0, S, 100.0, 0.5, R, 0.0, VOL, N, greeks=False, dividend_times=[t_ex],
                   dividend_amounts=[D])[0, 0]
    # exercising just before the ex-date: at least the European call expiring then (closed form)
    d1 = (math.log(S / 100.0) + (R + VOL ** 2 / 2) * t_ex) / (VOL * math.sqrt(t_ex))
    before = S * norm.cdf(d1) - 100.0 * math.exp(-R * t_ex) * norm.cdf(d1 - VOL * math.sqrt(t_ex))
    assert am >= before - 2e-3 and am > eu + 1.0  # the early-exercise premium of a 10 % dividend
    # without the dividend and with q = 0 the American call is the European one, to the bit
    assert crr_batch(1, 1, S, 100.0, 0.5, R, 0.0, VOL, N, greeks=False)[0, 0] == \
        crr_batch(1, 0, S, 100.0, 0.5, R, 0.0, VOL, N, greeks=False)[0, 0]


def test_implied_vol_round_trip_with_dividends():
    t, a = schedule("quarterly")
    kind = np.array([0, 1, 0, 1, 0, 1])
    style = np.array([1, 1, 1, 1, 0, 0])
    K = np.array([90.0, 90.0, 110.0, 110.0, 100.0, 100.0])
    vol = np.array([0.15, 0.25, 0.35, 0.45, 0.3, 0.2])
    px = crr_batch(kind, style, S, K, T, R, 0.01, vol, 600, greeks=False, dividend_times=t, dividend_amounts=a)[0]
    iv, code = crr_implied_vol(px, kind, style, S, K, T, R, 0.01, 600, dividend_times=t, dividend_amounts=a)
    assert (code == 0).all()
    np.testing.assert_allclose(iv, vol, rtol=0, atol=1e-8)


def test_greeks_with_dividends_against_quantlib():
    # QuantLib 1.44 FdBlackScholesVanillaEngine (spot model, 4000 x 4000, Douglas, 20 damping
    # steps): the American put of schedule "two" at K = 100: delta, gamma, theta (per year)
    t, a = schedule("two")
    out = crr_batch(0, 1, S, 100.0, T, R, 0.0, VOL, 2000, dividend_times=t, dividend_amounts=a)[:, 0]
    assert out[0] == pytest.approx(11.519213546, abs=5e-4)
    assert out[1] == pytest.approx(-0.442286256, abs=1e-4)
    assert out[2] == pytest.approx(0.0137869678, abs=1e-5)
    assert out[3] == pytest.approx(-3.420967568, abs=5e-3)
    # vega and rho: central differences of the tree price, as without dividends
    up, dn = (crr_batch(0, 1, S, 100.0, T, R, 0.0, VOL + x, 2000, greeks=False, dividend_times=t,
                        dividend_amounts=a)[0, 0] for x in (1e-4, -1e-4))
    assert out[4] == pytest.approx((up - dn) / 2e-4, rel=1e-9)


def test_schedule_checks_name_the_row_and_the_field_and_the_rest_prices():
    bad = {"negative amount": ([0.2, 0.4], [1.0, -1.0], "dividend_amounts", "must be a finite amount >= 0"),
           "after expiry": ([0.2, 1.5], [1.0, 1.0], "dividend_times", "after the expiry"),
           "unsorted": ([0.4, 0.2], [1.0, 1.0], "dividend_times", "ascending"),
           "above the spot": ([0.2, 0.4], [60.0, 50.0], "dividend_amounts", "not below the spot"),
           "before now": ([-0.1, 0.4], [1.0, 1.0], "dividend_times", "before the valuation")}
    good = ([0.25, 0.5], [1.0, 1.0])
    times = [good[0]] + [b[0] for b in bad.values()] + [good[0]]
    amounts = [good[1]] + [b[1] for b in bad.values()] + [good[1]]
    res = engine.price_table(dict(kind="put", style="american", spot=S, strike=100.0, expiry=T, rate=R, volatility=VOL,
                                  dividend_times=times, dividend_amounts=amounts), Method(steps=300))
    assert res.status[0] == res.status[-1] == "ok" and res.price[0] == res.price[-1]
    for i, (field, _, _, why) in enumerate(((b[2], 0, 0, b[3]) for b in bad.values()), start=1):
        assert res.status[i] == "error" and res.error[i].startswith(field) and why in res.error[i], res.error[i]
    nine = np.linspace(0.05, 0.9, 9)
    res = engine.price_table(dict(kind="put", spot=S, strike=100.0, expiry=T, rate=R, volatility=VOL,
                                  dividend_times=[nine], dividend_amounts=[np.full(9, 0.5)]), Method(steps=100))
    assert res.status[0] == "error" and "at most 8" in res.error[0]
    with pytest.raises(InvalidInputError, match="both"):
        Batch.from_columns(kind="put", spot=S, strike=100.0, expiry=T, rate=R, volatility=VOL, dividend_times=[0.2])


def test_other_methods_refuse_cash_dividends_by_row():
    res = engine.price_table(dict(kind="put", style="european", spot=S, strike=100.0, expiry=T, rate=R, volatility=VOL,
                                  method=["black-scholes", "binomial"], dividend_times=[[0.5], [0.5]],
                                  dividend_amounts=[[2.0], [2.0]]), Method(steps=500))
    assert res.status.tolist() == ["error", "ok"] and "binomial method only" in res.error[0]
    alone = crr_batch(0, 0, S, 100.0, T, R, 0.0, VOL, 500, dividend_times=[0.5], dividend_amounts=[2.0])[:, 0]
    assert res.price[1] == alone[0] and res.delta[1] == alone[1]


def test_cash_dividends_orders_and_drops():
    S2, t, a, n = cash_dividends(np.array([100.0, 100.0]), np.array([1.0, 0.5]),
                                 np.array([[0.7, 0.0, 0.2, np.nan], [0.7, 0.0, 0.2, np.nan]]),
                                 np.array([[1.0, 2.0, 3.0, 0.0], [1.0, 2.0, 3.0, 0.0]]))
    assert S2.tolist() == [98.0, 98.0] and n.tolist() == [2, 1]
    assert t[0, :2].tolist() == [0.2, 0.7] and a[0, :2].tolist() == [3.0, 1.0] and t[1, 0] == 0.2


def test_a_drop_wider_than_the_lattice_keeps_the_low_volatility_limit():
    # sigma -> 0 with r = q = 0: the put is worth max(K - (S - D), 0) (the stock only drops by D);
    # at sigma = 0.5 % the lattice at the ex-date spans about +-0.6 %, less than the 2 % drop, so
    # every node reads below the lattice (the two lowest nodes' line, bounded by the values there)
    for style in (0, 1):
        px = crr_batch([0, 0], style, S, [90.0, 100.0], 0.5, 0.0, 0.0, 0.005, 500, greeks=False,
                       dividend_times=[0.25], dividend_amounts=[2.0])[0]
        assert abs(px[0]) < 1e-9 and abs(px[1] - 2.0) < 1e-6
