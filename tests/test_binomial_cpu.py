"""CRR binomial pricer on the CPU against independent references.

* an exact CRR recurrence written here in plain NumPy (pow-based node prices, full
  re-computation of exercise values: nothing shared with the kernel);
* the invariants of the seed's Table 1 as hypothesis properties;
* Black–Scholes for European exercise; QuantLib's finite-difference engine for American puts.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optiond.kernels.binomial import cpu as bc
from optiond.kernels.black_scholes import bs_price_greeks


def exact_crr(is_call, american, S, K, T, r, q, sigma, N):
    """Textbook CRR (Cox, Ross & Rubinstein 1979) with explicit node prices S u^j d^(t-j)."""
    dt = T / N
    u = math.exp(sigma * math.sqrt(dt))
    d = 1.0 / u
    p = (math.exp((r - q) * dt) - d) / (u - d)
    disc = math.exp(-r * dt)
    j = np.arange(N + 1, dtype=np.float64)
    ST = S * u ** j * d ** (N - j)
    V = np.maximum(ST - K, 0.0) if is_call else np.maximum(K - ST, 0.0)
    for t in range(N - 1, -1, -1):
        V = disc * (p * V[1:] + (1.0 - p) * V[:-1])
        if american:
            jt = np.arange(t + 1, dtype=np.float64)
            St = S * u ** jt * d ** (t - jt)
            V = np.maximum(V, St - K if is_call else K - St)
    return float(V[0])


def crr(kind, style, S, K, T, r, q, sigma, N, greeks=False):
    return bc.crr_batch(kind, style, S, K, T, r, q, sigma, N, greeks=greeks)


GRID = list(itertools.product(
    (0, 1),                   # put, call
    (0, 1),                   # european, american
    (60.0, 100.0, 160.0),     # deep ITM/OTM either side, ATM (K = 100)
    (0.0, 0.05),              # rate (r = 0 included)
    (0.0, 0.03),              # dividend yield
))


@pytest.mark.parametrize("N", [1, 2, 3, 10, 1000])
def test_matches_exact_recurrence(N):
    rows = [(k, s, S, 100.0, 0.75, r, q, 0.3) for k, s, S, r, q in GRID]
    arr = np.array(rows, dtype=np.float64)
    out = crr(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], arr[:, 5], arr[:, 6], arr[:, 7], N)
    for i, row in enumerate(rows):
        ref = exact_crr(bool(row[0]), bool(row[1]), *row[2:], N)
        got = out[0, i]
        # relative 1e-12; an absolute floor of 1e-12 * strike for prices that are zero or tiny
        assert abs(got - ref) <= 1e-12 * abs(ref) + 1e-12 * 100.0, (row, N, got, ref)


def test_matches_exact_recurrence_long_dated_reanchoring():
    # N > REANCHOR * several: exercises the periodic exact re-anchoring of the exercise vector
    for kind in (0, 1):
        got = crr(kind, 1, 95.0, 100.0, 3.0, 0.07, 0.04, 0.25, 700)[0, 0]
        ref = exact_crr(bool(kind), True, 95.0, 100.0, 3.0, 0.07, 0.04, 0.25, 700)
        assert got == pytest.approx(ref, rel=1e-12)


def test_probability_outside_unit_interval_raises():
    # sigma sqrt(dt) = 0.05 sqrt(5) = 0.11 < (r - q) dt = 0.5: p > 1
    with pytest.raises(bc.CRRProbabilityError, match="outside"):
        crr(0, 1, 100.0, 100.0, 5.0, 0.1, 0.0, 0.05, 1)
    assert bc.probability_errors([5.0, 1.0], [0.1, 0.1], [0.0, 0.0], [0.05, 0.2], [1, 100]).tolist() == [0]


def test_european_converges_to_black_scholes():
    cases = [(k, S, T, r, q, s) for k in (0, 1) for S in (80.0, 100.0, 125.0) for T in (0.25, 2.0)
             for r, q in ((0.05, 0.0), (0.03, 0.02)) for s in (0.15, 0.4)]
    a = np.array(cases)
    bs = bs_price_greeks(a[:, 0], a[:, 1], 100.0, a[:, 2], a[:, 3], a[:, 4], a[:, 5])["price"]
    p2000 = crr(a[:, 0], 0, a[:, 1], 100.0, a[:, 2], a[:, 3], a[:, 4], a[:, 5], 2000)[0]
    p250 = crr(a[:, 0], 0, a[:, 1], 100.0, a[:, 2], a[:, 3], a[:, 4], a[:, 5], 250)[0]
    # CRR's error is O(1/N) with an odd/even oscillation: relative 1e-3 at N = 2000 ...
    assert np.all(np.abs(p2000 - bs) <= 1e-3 * np.maximum(bs, 1.0))
    # ... and eight times the steps gives a several times smaller worst error
    assert np.max(np.abs(p2000 - bs)) < 0.25 * np.max(np.abs(p250 - bs))


def test_tree_greeks_match_black_scholes_for_european():
    a = dict(S=np.array([90.0, 100.0, 110.0]), T=1.0, r=0.05, q=0.02, s=0.25)
    for kind in (0, 1):
        out = crr(kind, 0, a["S"], 100.0, a["T"], a["r"], a["q"], a["s"], 4000, greeks=True)
        bs = bs_price_greeks(kind, a["S"], 100.0, a["T"], a["r"], a["q"], a["s"])
        np.testing.assert_allclose(out[1], bs["delta"], atol=2e-3)
        np.testing.assert_allclose(out[2], bs["gamma"], rtol=1e-2)
        np.testing.assert_allclose(out[3], bs["theta"], rtol=1e-2, atol=1e-2)
        np.testing.assert_allclose(out[4], bs["vega"], rtol=1e-2)
        np.testing.assert_allclose(out[5], bs["rho"], rtol=1e-2)


def test_american_put_against_quantlib_fd():
    ql = pytest.importorskip("QuantLib")
    today = ql.Date(2, 1, 2026)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    rng = np.random.default_rng(7)
    cases = [(float(rng.uniform(80, 120)), int(rng.integers(60, 730)), float(rng.uniform(0.0, 0.08)),
              float(rng.uniform(0.0, 0.04)), float(rng.uniform(0.12, 0.5))) for _ in range(20)]
    for S, days, r, q, sigma in cases:
        T = days / 365.0
        spot = ql.SimpleQuote(S)
        proc = ql.BlackScholesMertonProcess(
            ql.QuoteHandle(spot), ql.YieldTermStructureHandle(ql.FlatForward(today, q, dc)),
            ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc)),
            ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), sigma, dc)))
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put, 100.0), ql.AmericanExercise(today, today + days))
        opt.setPricingEngine(ql.FdBlackScholesVanillaEngine(proc, 800, 800, 0))
        ref = opt.NPV()
        got = crr(0, 1, S, 100.0, T, r, q, sigma, 1000)[0, 0]
        assert abs(got - ref) <= 5e-3, (S, days, r, q, sigma, got, ref)


@pytest.mark.parametrize("style", [0, 1])
def test_implied_vol_round_trip(style):
    rng = np.random.default_rng(3)
    n = 40
    kind = rng.integers(0, 2, n)
    S = rng.uniform(70, 130, n)
    T = rng.uniform(0.05, 2.0, n)
    r = rng.uniform(0.0, 0.06, n)
    q = rng.uniform(0.0, 0.03, n)
    sigma = rng.uniform(0.08, 0.9, n)
    N = 300
    price = crr(kind, style, S, 100.0, T, r, q, sigma, N)[0]
    vol, status = bc.crr_implied_vol(price, kind, style, S, 100.0, T, r, q, N)
    ok = status == 0
    # options worth (almost) only their intrinsic value have no well-defined vol: skip those
    intrinsic = np.where(kind == 1, np.maximum(S - 100.0, 0), np.maximum(100.0 - S, 0))
    informative = price - intrinsic > 1e-3
    assert np.all(ok[informative])
    back = crr(kind, style, S, 100.0, T, r, q, np.where(ok, vol, 0.2), N)[0]
    np.testing.assert_allclose(back[ok], price[ok], rtol=0, atol=1e-8)


def test_implied_vol_statuses():
    # below intrinsic (American put worth at least K - S = 20), and above any attainable value
    vol, status = bc.crr_implied_vol([19.0, 150.0, -1.0], 0, 1, 80.0, 100.0, 1.0, 0.05, 0.0, 200)
    assert status.tolist() == [1, 2, 4]
    assert np.isnan(vol).all()


# ----------------------------------------------------------------------- seed Table 1 invariants

params = st.fixed_dictionaries(dict(
    S=st.floats(50, 150), K=st.floats(50, 150), T=st.floats(0.1, 3.0), r=st.floats(0.0, 0.1),
    q=st.floats(0.0, 0.05), sigma=st.floats(0.1, 0.8)))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
N_PROP = 200


def put(style, p, N=N_PROP, **over):
    v = dict(p, **over)
    return crr(0, style, v["S"], v["K"], v["T"], v["r"], v["q"], v["sigma"], N)[0, 0]


def rounding(p):
    """Rounding allowance: the exercise value is carried by a recurrence, so prices are exact
    to a few ulps of the strike or spot, not of the (possibly much smaller) difference."""
    return 1e-12 * max(p["K"], p["S"])


@SETTINGS
@given(params)
def test_bounds_and_american_premium(p):
    am, eu, tol = put(1, p), put(0, p), rounding(p)
    assert am >= 0.0 and eu >= 0.0                       # positivity
    assert am <= p["K"] + tol                            # upper bound
    assert am >= max(p["K"] - p["S"], 0.0) - tol         # intrinsic lower bound
    assert am >= eu - tol                                # American premium
    call = crr(1, 1, p["S"], p["K"], p["T"], p["r"], p["q"], p["sigma"], N_PROP)[0, 0]
    assert max(p["S"] - p["K"], 0.0) - tol <= call <= p["S"] + tol


@SETTINGS
@given(params, st.floats(1.0, 20.0))
def test_monotonicity(p, h):
    tol = rounding(dict(p, S=p["S"] + h, K=p["K"] + h))
    assert put(1, p, S=p["S"] + h) <= put(1, p) + tol              # decreasing in spot
    assert put(1, p, K=p["K"] + h) >= put(1, p) - tol              # increasing in strike
    assert put(1, p, sigma=p["sigma"] + h / 100) >= put(1, p) - tol  # increasing in volatility
    # increasing in expiry: with the same dt the longer tree contains the shorter one
    dt = p["T"] / N_PROP
    extra = max(1, int(h))
    assert put(1, p, T=p["T"] + extra * dt, N=N_PROP + extra) >= put(1, p) - tol


@SETTINGS
@given(params)
def test_convergence_n_vs_2n(p):
    v = [put(1, p, N=n) for n in (100, 200, 400, 800)]
    scale = max(p["K"], p["S"])
    # Cauchy: successive refinements agree ever more closely (O(1/N) with oscillation)
    assert abs(v[2] - v[3]) <= 2.5e-3 * scale
    assert abs(v[2] - v[3]) <= abs(v[0] - v[1]) + 1e-3 * scale


@pytest.mark.parametrize("N", [1, 2, 3])
def test_tree_greeks_on_the_shortest_trees(N):
    # exact hand values of the CRR tree Greeks (Hull §21.1) from the exact recurrence's levels
    S, K, T, r, q, s = 100.0, 100.0, 0.5, 0.05, 0.01, 0.3
    out = crr(0, 1, S, K, T, r, q, s, N, greeks=True)[:, 0]
    dt = T / N
    u = math.exp(s * math.sqrt(dt))
    d = 1 / u

    def node(t, j):  # value at level t, node j: a tree of N - t steps from that node's spot and time
        St = S * u ** j * d ** (t - j)
        if t == N:
            return max(K - St, 0.0)
        return max(exact_crr(False, True, St, K, T - t * dt, r, q, s, N - t),  # same dt, so the same u, d, p
                   K - St)

    delta = (node(1, 1) - node(1, 0)) / (S * u - S * d)
    assert out[1] == pytest.approx(delta, rel=1e-12)
    if N >= 2:
        g = ((node(2, 2) - node(2, 1)) / (S * u * u - S) - (node(2, 1) - node(2, 0)) / (S - S * d * d)) / (0.5 * (S * u * u - S * d * d))
        assert out[2] == pytest.approx(g, rel=1e-10)
        assert out[3] == pytest.approx((node(2, 1) - out[0]) / (2 * dt), rel=1e-10)
    else:
        assert np.isnan(out[2]) and np.isnan(out[3])


def test_one_contract_path_and_batch_kernels_agree_bit_for_bit():
    """A contract gets the same bits from the one-contract path (crr_one: a single Excel cell,
    the daemon's short path), the serial batch kernel and the parallel one (the daemon's
    replies are matched to their requests by these bits in the load test)."""
    rng = np.random.default_rng(2026)
    n = 400
    cols = [rng.integers(0, 2, n), rng.integers(0, 2, n), rng.uniform(50, 150, n), rng.uniform(50, 150, n),
            rng.uniform(0.05, 3, n), rng.choice([0.0, 0.03, 0.08], n), rng.uniform(0, 0.05, n),
            rng.uniform(0.08, 0.7, n), rng.integers(1, 700, n)]
    ok = np.ones(n, bool)
    ok[bc.probability_errors(cols[4], cols[5], cols[6], cols[7], cols[8])] = False
    cols = [c[ok] for c in cols]
    par = bc.crr_batch(*cols, greeks=True, parallel=True)
    ser = bc.crr_batch(*cols, greeks=True, parallel=False)
    one = np.array([bc.crr_one(k == 1, s == 1, S, K, T, r, q, v, int(N), True)
                    for k, s, S, K, T, r, q, v, N in zip(*cols)]).T
    np.testing.assert_array_equal(par, ser)
    np.testing.assert_array_equal(one, par)


def test_the_gpu_paths_dividend_rho_rule_is_the_cpu_kernels():
    """binomial._with_dividend_rho (the GPU paths' dividend rho: two more launches without
    Greeks) on a stand-in kernel that returns the CPU's six rows: the same central (or one-sided,
    where a bump takes p outside [0, 1]) difference as the CPU kernel's seventh row, to the bit."""
    from optiond.kernels import binomial
    from optiond.models import Batch

    n = 6
    cols = dict(kind=np.array([0, 1, 0, 1, 0, 1], dtype=np.int8), style=np.array([1, 1, 0, 0, 1, 1], dtype=np.int8),
                spot=np.full(n, 100.0), strike=np.array([90.0, 100.0, 110.0, 95.0, 100.0, 105.0]),
                expiry=np.array([0.5, 1.0, 2.0, 0.25, 1.0, 3.0]), rate=np.full(n, 0.05),
                dividend_yield=np.array([0.0, 0.02, 0.01, 0.03, 0.0, 0.01]),
                volatility=np.array([0.2, 0.3, 0.25, 0.4, 0.0051, 0.2]))
    b = Batch.from_columns(cols)
    steps = np.full(n, 100, dtype=np.int64)

    def run(q, greeks):
        return bc.crr_batch(b.kind, b.style, b.spot, b.strike, b.expiry, b.rate, q, b.volatility, steps, greeks=greeks,
                         check=False)[:6]

    got = binomial._with_dividend_rho(run, b, steps, True)
    want = bc.crr_batch(b.kind, b.style, b.spot, b.strike, b.expiry, b.rate, b.dividend_yield, b.volatility, steps,
                     check=False)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(binomial._with_dividend_rho(run, b, steps, False)[1:]).all()
