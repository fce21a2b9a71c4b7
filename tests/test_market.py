"""Market conventions of the chain job: time to expiry, the rate curve, parity forwards and the
American residual carry, each against an independent reference."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from optiond import chain
from optiond.kernels.binomial.cpu import crr_batch
from optiond.kernels.black_scholes import bs_price_greeks
from optiond.market import clock
from optiond.market.curve import CurveError, ZeroCurve
from optiond.market.forwards import ExpiryPairs, cboe_forward, huber_regression, parity_fit, weighted_median

# ----------------------------------------------------------------------------- clock


def test_vix_white_paper_times_and_forwards():
    """Cboe, "VIX White Paper" (2019 edition, Step 1): quotes at 9:46 a.m. Chicago time, the
    near term an AM-settled standard expiry 25 days out, the next term a PM-settled weekly 32
    days out: T1 = (854 + 510 + 34,560) / 525,600, T2 = (854 + 900 + 44,640) / 525,600; with
    R1 = 0.000305, R2 = 0.000286 and the quotes at K* (1965: call 21.05, put 23.15; 1960:
    call 27.30, put 24.90) the forwards are 1962.89996 and 1962.40006."""
    quote = clock.quote_instant("2026-01-05", "10:46")  # 9:46 Central = 10:46 New York
    t1 = clock.years_between(quote, clock.settlement_instant("2026-01-30", "am"))
    t2 = clock.years_between(quote, clock.settlement_instant("2026-02-06", "pm"))
    assert t1 == pytest.approx((854 + 510 + 34_560) / 525_600, rel=1e-14)
    assert t2 == pytest.approx((854 + 900 + 44_640) / 525_600, rel=1e-14)
    f1, k1 = cboe_forward([1965.0], [21.05], [23.15], t1, 0.000305)
    f2, k2 = cboe_forward([1960.0], [27.30], [24.90], t2, 0.000286)
    assert (k1, k2) == (1965.0, 1960.0)
    assert abs(f1 - 1962.89996) < 1e-5 and abs(f2 - 1962.40006) < 1e-5


def test_zero_dte_and_am_settlement():
    """A quote at 10:50 New York on the expiry day: 310 minutes to a PM settlement; an AM-settled
    contract of the same date settles 6.5 hours earlier (here: already settled)."""
    T, stamps, err = clock.expiry_years(["2026-02-13"] * 3, ["2026-02-13", "2026-02-13", "2026-02-20"], "10:50",
                                        ["pm", "am", "am"])
    assert err == ["", "", ""]
    assert T[0] == pytest.approx(310 / 525_600, rel=1e-14)
    assert T[1] == pytest.approx(T[0] - 6.5 * 60 / 525_600, rel=1e-12)
    pm_week = clock.years_between(clock.quote_instant("2026-02-13", "10:50"), clock.settlement_instant("2026-02-20", "pm"))
    assert pm_week - T[2] == pytest.approx(6.5 * 60 / 525_600, rel=1e-12)
    assert stamps[0] == "2026-02-13T15:50:00+00:00"  # EST is UTC-5


def test_quote_time_forms_and_errors():
    a = clock.quote_instant("2026-02-13", "10:50")
    assert clock.quote_instant("2026-02-13", "2026-02-13T10:50:00-05:00") == a
    assert clock.quote_instant("2026-02-13", "2026-02-13T15:50:00Z") == a
    assert clock.quote_instant("2026-02-13", "2026-02-13 10:50") == a  # no offset: exchange time
    assert clock.quote_instant("2026-02-13", None) == clock.quote_instant("2026-02-13", "16:00")
    # summer time: 10:50 EDT is 14:50 UTC
    assert clock.quote_instant("2026-07-13", "10:50").hour == 14
    for bad in ("25:00", "10:61", "noon", "2026-02-14T10:50:00-05:00"):
        with pytest.raises(ValueError):
            clock.quote_instant("2026-02-13", bad)
    with pytest.raises(ValueError):
        clock.settlement_instant("2026-02-13", "noon")
    T, _, err = clock.expiry_years(["2026-02-13", "not a date", "2026-02-13"], ["2026-03-20"] * 3,
                                   ["10:50", "10:50", "half past ten"])
    assert np.isfinite(T[0]) and np.isnan(T[1]) and np.isnan(T[2])
    assert err[0] == "" and "not a date" in err[1] and "half past ten" in err[2]


def test_zero_dte_contract_priced_in_a_chain():
    """A 0DTE contract is priced, not marked expired; a contract settled earlier today is."""
    df = pd.DataFrame(dict(underlying="X", quote_date="2026-02-13", expiry=["2026-02-13", "2026-02-13"],
                           type=["put", "put"], strike=[100.0, 100.0], bid=[0.40, 0.40], ask=[0.44, 0.44], last=np.nan,
                           implied_vol=np.nan, underlying_price=100.0, style="american", settlement=["pm", "am"]))
    out, _ = chain.price_chain(df, quote_time="10:50", carry="flat", steps=200)
    assert out.expiry_years[0] == pytest.approx(310 / 525_600, rel=1e-14)
    assert out.status.tolist() == ["ok", "expired"]
    assert 0.05 < out.iv[0] < 2.0


# ----------------------------------------------------------------------------- curve


def test_zero_curve_interpolates_log_discount_and_is_flat_beyond_the_ends():
    c = ZeroCurve.from_points([30, 365, 730], [0.04, 0.035, 0.03])
    t1, t2 = 30 / 365, 1.0
    t = 0.5
    expected = (0.04 * t1 + (0.035 * t2 - 0.04 * t1) * (t - t1) / (t2 - t1)) / t
    assert c.zero_rate(t) == pytest.approx(expected, rel=1e-14)
    assert c.zero_rate(1 / 365) == pytest.approx(0.04) and c.zero_rate(5.0) == pytest.approx(0.03)
    assert c.zero_rate(2.0) == pytest.approx(0.03, rel=1e-14)
    assert c.discount(t) == pytest.approx(math.exp(-expected * t), rel=1e-14)
    # the forward rate between two points is constant: log D is linear in t between them
    ts = np.linspace(0.2, 0.9, 8)
    assert np.allclose(np.diff(np.log(c.discount(ts)), 2), 0.0, atol=1e-15)


@pytest.mark.parametrize("days, rates, words", [
    ([30, "", 365], [0.04, 0.04, 0.04], "days"),
    ([30, 60], [0.04, None], "rate"),
    ([-1, 30], [0.04, 0.04], "negative"),
    ([30, 30], [0.04, 0.05], "twice"),
    ([30, 60], [4.3, 4.2], "annual decimal"),
    ([], [], "no points"),
])
def test_zero_curve_refuses_bad_points(days, rates, words):
    with pytest.raises(CurveError, match=words):
        ZeroCurve.from_points(days, rates)


def test_zero_curve_file(tmp_path):
    f = tmp_path / "curve.csv"
    f.write_text("days,rate\n30,0.042\n365,0.038\n")
    c = ZeroCurve.from_csv(str(f))
    assert c.zero_rate(1.0) == pytest.approx(0.038)
    (tmp_path / "bad.csv").write_text("tenor,yield\n30,0.04\n")
    with pytest.raises(CurveError, match="days,rate"):
        ZeroCurve.from_csv(str(tmp_path / "bad.csv"))
    (tmp_path / "gap.csv").write_text("days,rate\n30,0.04\n90,\n")
    with pytest.raises(CurveError, match="row 2"):
        ZeroCurve.from_csv(str(tmp_path / "gap.csv"))


# ----------------------------------------------------------------------------- parity


def _european_pairs(S, T, r, q, strikes, vols):
    k = np.asarray(strikes, dtype=float)
    c = bs_price_greeks(1, S, k, T, r, q, vols)["price"]
    p = bs_price_greeks(0, S, k, T, r, q, vols)["price"]
    return ExpiryPairs(k, c, p, np.full(k.size, 0.2), np.full(k.size, 0.2))


def test_parity_fit_recovers_forward_and_discount_exactly():
    S, T, r, q = 5000.0, 0.75, 0.043, 0.012
    strikes = np.arange(4500, 5600, 25.0)
    vols = 0.18 - 0.1 * np.log(strikes / S)
    fit = parity_fit(_european_pairs(S, T, r, q, strikes, vols), T)
    assert fit.forward == pytest.approx(S * math.exp((r - q) * T), rel=1e-9)
    assert fit.discount == pytest.approx(math.exp(-r * T), rel=1e-9)
    given = parity_fit(_european_pairs(S, T, r, q, strikes, vols), T, discount=math.exp(-r * T))
    assert given.forward == pytest.approx(S * math.exp((r - q) * T), rel=1e-9) and not given.implied_discount


def test_parity_fit_with_noise_and_an_outlier_stays_within_the_spread():
    rng = np.random.default_rng(7)
    S, T, r, q = 5000.0, 0.5, 0.04, 0.013
    strikes = np.arange(4700, 5300, 10.0)
    pairs = _european_pairs(S, T, r, q, strikes, 0.2)
    half = 0.5 * pairs.call_spread
    pairs.call_mid = pairs.call_mid + rng.uniform(-1, 1, strikes.size) * half
    pairs.put_mid = pairs.put_mid + rng.uniform(-1, 1, strikes.size) * half
    pairs.call_mid[30] += 25.0  # a stale quote 250 half-spreads off
    fit = parity_fit(pairs, T)
    F = S * math.exp((r - q) * T)
    # F within the quote spread (0.2); D to the precision 20 strikes of +-0.1 noise allow (~5e-4)
    assert abs(fit.forward - F) < 0.2 and abs(fit.discount - math.exp(-r * T)) < 1e-3


@pytest.mark.parametrize("seed", range(6))
def test_huber_regression_equals_scipy_least_squares(seed):
    """The exact Huber minimiser against scipy's trust-region least squares with Huber loss
    (the same objective: 0.5 sum rho(r^2), rho(z) = z for z <= 1, 2 sqrt(z) - 1 beyond), on
    noisy lines with a fifth of the points far off."""
    from scipy.optimize import least_squares

    rng = np.random.default_rng(seed)
    m, p = int(rng.integers(5, 40)), int(rng.integers(1, 3))
    A = np.column_stack([np.ones(m), rng.uniform(-3, 3, (m, p - 1))]) if p > 1 else rng.uniform(0.5, 2, (m, 1))
    b = A @ rng.normal(0, 5, p) + rng.normal(0, 0.8, m)
    out = rng.random(m) < 0.2
    b[out] += rng.choice([-1, 1], out.sum()) * rng.uniform(5, 50, out.sum())
    x, r = huber_regression(A, b)
    ref = least_squares(lambda v: A @ v - b, np.zeros(p), loss="huber", f_scale=1.0, xtol=1e-15, ftol=1e-15,
                        gtol=1e-15)
    np.testing.assert_allclose(x, ref.x, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(r, A @ x - b)

    def cost(v):
        z = np.abs(A @ v - b)
        return float(np.sum(np.where(z <= 1, 0.5 * z * z, z - 0.5)))

    assert cost(x) <= cost(ref.x) + 1e-12  # exact: never worse than the iterative optimum


def test_huber_regression_needs_independent_rows():
    with pytest.raises(ValueError, match="independent"):
        huber_regression(np.ones((4, 2)), np.arange(4.0))


def test_parity_fit_needs_pairs():
    p = _european_pairs(100.0, 0.5, 0.04, 0.0, [100.0, 105.0], 0.2)
    with pytest.raises(ValueError, match="needs 3"):
        parity_fit(p, 0.5)
    assert parity_fit(p, 0.5, discount=math.exp(-0.02)).pairs == 2


def test_weighted_median():
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 6, 31):  # equal weights: the ordinary median
        v = rng.normal(size=n)
        assert weighted_median(v, np.full(n, 2.5)) == pytest.approx(float(np.median(v)), rel=1e-14)
    # blocks [0,1] [1,2] [2,7] with middles 0.5, 1.5, 4.5: half the weight (3.5) is 2/3 of the way from 2 to 10
    assert weighted_median(np.array([2.0, 1.0, 10.0]), np.array([1.0, 1.0, 5.0])) == pytest.approx(2 + 8 * 2 / 3)
    # continuous when two values swap order
    assert weighted_median(np.array([1.0, 1.0 + 1e-12, 3.0]), np.array([1.0, 3.0, 1.0])) == pytest.approx(
        weighted_median(np.array([1.0 + 1e-12, 1.0, 3.0]), np.array([1.0, 3.0, 1.0])), abs=1e-11)
    # and as a weight passes another's: 0 and 10 with (nearly) equal weights give 5 either way (a
    # step median jumps from one value to the other, which a root find on it cannot cross)
    for w in ([1.0, 1.0 + 1e-9], [1.0 + 1e-9, 1.0]):
        assert weighted_median(np.array([0.0, 10.0]), np.array(w)) == pytest.approx(5.0, abs=1e-6)
    assert math.isnan(weighted_median(np.array([np.nan]), np.ones(1)))


# ----------------------------------------------------------------------------- chains


def _synthetic_chain(S, quote_date, expiries, r, q, style, steps, noise=0.0, seed=0):
    """A chain priced by the project's own reference pricers with a skewed smile."""
    rng = np.random.default_rng(seed)
    rows = []
    for e, (exp, T) in enumerate(expiries):
        strikes = np.round(S * np.exp(np.linspace(-0.12, 0.12, 25) * math.sqrt(T / 0.25)), 1)
        vols = 0.22 - 0.15 * np.log(strikes / S) / math.sqrt(T)
        for kind in (1, 0):
            if style == "european":
                px = bs_price_greeks(kind, S, strikes, T, r[e], q[e], vols)["price"]
            else:
                px = crr_batch(kind, 1, S, strikes, T, r[e], q[e], vols, steps, greeks=False)[0]
            half = noise * np.maximum(0.01, 0.02 * px)
            mid = px + rng.uniform(-0.5, 0.5, px.size) * half
            for k, m, h in zip(strikes, mid, half):
                rows.append(dict(underlying="SYN", quote_date=quote_date, expiry=exp, type="call" if kind else "put",
                                 strike=k, bid=m - h if noise else m, ask=m + h if noise else m, last=np.nan,
                                 implied_vol=np.nan, underlying_price=S, style=style))
    return pd.DataFrame(rows)


def test_european_chain_gives_back_forward_and_discount():
    qd = "2026-03-02"
    exps = ["2026-04-17", "2026-09-18", "2027-12-17"]
    T = np.array([clock.years_between(clock.quote_instant(qd, None), clock.settlement_instant(x, "pm")) for x in exps])
    r, q = np.array([0.042, 0.039, 0.035]), np.array([0.011, 0.014, 0.016])
    df = _synthetic_chain(6000.0, qd, list(zip(exps, T)), r, q, "european", 0)
    m = chain.solve_market(df)
    np.testing.assert_allclose(m.table["forward"], 6000.0 * np.exp((r - q) * T), rtol=1e-9)
    np.testing.assert_allclose(m.table["discount_factor"], np.exp(-r * T), rtol=1e-9)
    np.testing.assert_allclose(m.table["rate"], r, atol=1e-8)
    # with a curve, only F is fitted and the curve's rate is reported
    curve = ZeroCurve.from_points([0, 3650], [0.04, 0.04])
    mc = chain.solve_market(df, curve=curve)
    np.testing.assert_allclose(mc.table["rate"], 0.04, rtol=1e-14)
    assert mc.table["method"].str.contains("curve").all()


def test_american_chain_gives_back_the_carry():
    qd, steps = "2026-03-02", 200
    exps = ["2026-03-20", "2026-06-18", "2027-01-15"]
    T = np.array([clock.years_between(clock.quote_instant(qd, "11:00"), clock.settlement_instant(x, "pm")) for x in exps])
    r, q = np.full(3, 0.04), np.array([0.031, 0.018, 0.012])
    df = _synthetic_chain(250.0, qd, list(zip(exps, T)), r, q, "american", steps)
    # quotes from trees of 200 steps: the tree's solve gives the carry back exactly
    m = chain.solve_market(df, quote_time="11:00", rate=0.04, steps=steps, spot_mode="print", method="binomial")
    assert m.table["method"].str.startswith("carry solve").all()
    np.testing.assert_allclose(m.table["carry"], q, atol=1e-6)
    # the default (the spectral engine's converged prices) within the 200-step tree's own error
    ma = chain.solve_market(df, quote_time="11:00", rate=0.04, steps=steps, spot_mode="print")
    np.testing.assert_allclose(ma.table["carry"], q, atol=1e-4)
    # a print 0.3 % stale against the option quotes: the implied spot finds the quotes' spot
    # (the front expiry's carry given), and the carries come back as before
    stale = df.assign(underlying_price=250.0 * 1.003)
    mi = chain.solve_market(stale, quote_time="11:00", rate=0.04, steps=steps, dividend_yield=q[0], method="binomial")
    np.testing.assert_allclose(mi.table["spot"], 250.0, rtol=1e-6)
    np.testing.assert_allclose(mi.table["carry"], q, atol=1e-5)
    assert "implied by the 18" in mi.table["note"].iloc[0]
    # an expiry with no put quoted: no pair, its carry interpolated, priced on the same implied spot
    no_puts = stale[~((stale.expiry == exps[1]) & (stale.type == "put"))]
    mn = chain.solve_market(no_puts, quote_time="11:00", rate=0.04, steps=steps, dividend_yield=q[0], method="binomial")
    row = mn.table.set_index("expiry").loc[exps[1]]
    assert row["method"] == "interpolated" and row["spot"] == pytest.approx(250.0, rel=1e-6)
    assert row["carry"] == pytest.approx(np.interp(T[1], T[[0, 2]], q[[0, 2]]), abs=1e-5)
    # its note keeps both: the chain's spot, and why its own carry is interpolated
    assert row["note"].startswith("spot 250.0000 implied") and "too few pairs: carry interpolated" in row["note"]
    out, summary = chain.price_chain(df, market=m, steps=steps, method="binomial")
    assert (out.status == "ok").all()
    np.testing.assert_allclose(out.dividend_yield, np.repeat(q, 50), atol=1e-6)
    assert summary.forwards["call_minus_put_iv_pts"].abs().max() < 1e-4


def test_noisy_american_chain_carry_within_the_spread_and_bid_ask_ivs_ordered():
    qd, steps = "2026-03-02", 150
    exps = ["2026-04-17", "2026-09-18"]
    T = np.array([clock.years_between(clock.quote_instant(qd, "11:00"), clock.settlement_instant(x, "pm")) for x in exps])
    r, q = np.full(2, 0.04), np.array([0.025, 0.015])
    df = _synthetic_chain(100.0, qd, list(zip(exps, T)), r, q, "american", steps, noise=1.0, seed=3)
    out, summary = chain.price_chain(df, quote_time="11:00", rate=0.04, steps=steps, dividend_yield=q[0])
    # a 1 % half-spread moves an ATM IV by ~0.5 vol pt; the carry that balances it is ~1e-2 / (2.5 sqrt(T))
    assert np.all(np.abs(summary.forwards["carry"] - q) < 0.01)
    ok = out[out.status == "ok"]
    assert not (ok.iv_bid > ok.iv + 1e-8).any() and not (ok.iv > ok.iv_ask + 1e-8).any()
    assert ok.iv_ask.notna().all() and ok.iv_bid.notna().mean() > 0.9  # an empty iv_bid: bid under the model bound
    # iv_otm: the call's IV at or above the forward, the put's below, on both rows of a strike
    for (_, k), g in ok.groupby(["expiry", "strike"]):
        if len(g) == 2:
            side = "call" if k >= g.forward.iloc[0] else "put"
            assert g.iv_otm.nunique() == 1 and g.iv_otm.iloc[0] == g[g.type == side].iv.iloc[0]


def test_bad_market_rows_and_expiries_still_price():
    qd = "2026-03-02"
    exps = ["2026-04-17", "2026-09-18", "2027-12-17"]
    T = np.array([clock.years_between(clock.quote_instant(qd, None), clock.settlement_instant(x, "pm")) for x in exps])
    df = _synthetic_chain(6000.0, qd, list(zip(exps, T)), [0.04] * 3, [0.012] * 3, "european", 0)
    # the middle expiry keeps one strike pair: too few for a fit, its carry is interpolated
    mid = df[df.expiry == exps[1]]
    df = pd.concat([df[df.expiry != exps[1]], mid[mid.strike == mid.strike.median()]], ignore_index=True)
    df["quote_time"] = ""
    df.loc[0, "quote_time"] = "not a time"
    out, s = chain.price_chain(df)
    assert out.status[0] == "invalid" and "not a time" in out.error[0]
    assert (out.status[1:] == "ok").all()
    row = s.forwards.set_index("expiry").loc[exps[1]]
    assert row["method"] == "interpolated" and "too few" in row["note"]
    assert row["carry"] == pytest.approx(0.012, abs=1e-6)
    # a single expiry with a single strike: no pair to fit, the flat carry is used and said
    one = df[(df.expiry == exps[1])]
    out1, s1 = chain.price_chain(one, dividend_yield=0.01)
    assert (out1.status == "ok").all() and s1.forwards["method"].iloc[0] == "flat (no pair solved)"
    with pytest.raises(ValueError, match="carry"):
        chain.price_chain(df, carry="guess")
    # distinct neighbours: the interpolated carry is linear in T between them
    qs = [0.010, 0.012, 0.016]
    full = _synthetic_chain(6000.0, qd, list(zip(exps, T)), [0.04] * 3, qs, "european", 0)
    mid = full[full.expiry == exps[1]]
    thin = pd.concat([full[full.expiry != exps[1]], mid[mid.strike == mid.strike.median()]], ignore_index=True)
    row = chain.solve_market(thin).table.set_index("expiry").loc[exps[1]]
    assert row["method"] == "interpolated"
    assert row["carry"] == pytest.approx(np.interp(T[1], T[[0, 2]], np.array(qs)[[0, 2]]), abs=1e-9)


def test_bad_prints_and_expiry_spellings_still_price():
    """A blank, zero or negative underlying print marks nothing but itself (the expiry's spot
    is the median of its good prints), and one expiry written two ways is one expiry."""
    qd = "2026-03-02"
    exps = ["2026-04-17", "2026-09-18"]
    T = np.array([clock.years_between(clock.quote_instant(qd, None), clock.settlement_instant(x, "pm")) for x in exps])
    df = _synthetic_chain(6000.0, qd, list(zip(exps, T)), [0.04] * 2, [0.012] * 2, "european", 0)
    ref = chain.solve_market(df).table
    bad = df.copy()
    bad.loc[[0, 3], "underlying_price"] = [-5.0, 0.0]
    bad.loc[5, "underlying_price"] = np.nan
    bad.loc[bad.expiry == exps[0], "expiry"] = ["2026-4-17", "2026-04-17"] * int((bad.expiry == exps[0]).sum() // 2)
    out, s = chain.price_chain(bad)
    assert len(s.forwards) == 2 and list(s.forwards.expiry) == exps
    np.testing.assert_allclose(s.forwards.forward, ref.forward, rtol=1e-12)
    assert (out.status == "ok").all() and (out.spot == 6000.0).all()
    # every print of an American expiry bad: its rows are priced on the spot the others imply or
    # marked, never a traceback
    am = _synthetic_chain(100.0, qd, list(zip(exps, T)), [0.04] * 2, [0.01] * 2, "american", 100)
    am.loc[am.expiry == exps[1], "underlying_price"] = 0.0
    out_am, s_am = chain.price_chain(am, steps=100, dividend_yield=0.01)
    assert "no underlying price" in s_am.forwards.set_index("expiry").loc[exps[1], "note"]
    assert (out_am.loc[out_am.expiry == exps[0], "status"] == "ok").all()


# ----------------------------------------------------------------------------- the command line


def _small_chain(tmp_path, rows=None):
    qd = "2026-03-02"
    exps = ["2026-04-17", "2026-09-18"]
    T = [clock.years_between(clock.quote_instant(qd, None), clock.settlement_instant(x, "pm")) for x in exps]
    df = _synthetic_chain(6000.0, qd, list(zip(exps, T)), [0.04] * 2, [0.012] * 2, "european", 0)
    if rows is not None:
        df = df.iloc[rows]
    f = tmp_path / "chain.csv"
    df.to_csv(f, index=False)
    return f


@pytest.mark.parametrize("extra, words", [
    (["--rates", "{gap}"], "row 2"),
    (["--rates", "{neg}"], "negative"),
    (["--rates", "{missing}"], "cannot read"),
    (["--quote-time", "25:61"], "out of range"),
    (["--quote-time", "yesterday-ish"], "quote time"),
])
def test_chain_cli_bad_market_options_one_line(tmp_path, capsys, extra, words):
    from optiond.cli import main as cli_main

    src = _small_chain(tmp_path)
    (tmp_path / "gap.csv").write_text("days,rate\n30,0.04\n90,\n")
    (tmp_path / "neg.csv").write_text("days,rate\n-5,0.04\n90,0.04\n")
    args = [a.format(gap=tmp_path / "gap.csv", neg=tmp_path / "neg.csv", missing=tmp_path / "none.csv") for a in extra]
    rc = cli_main(["chain", str(src), "--no-daemon", "-o", str(tmp_path / "out.csv")] + args)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and words in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "out.csv").exists()


def test_chain_cli_curve_single_strike_and_forwards_file(tmp_path, capsys):
    from optiond.cli import main as cli_main

    src = _small_chain(tmp_path, rows=[12, 37])  # one expiry, one strike: a call and a put
    (tmp_path / "curve.csv").write_text("days,rate\n30,0.041\n365,0.037\n")
    out = tmp_path / "out.csv"
    rc = cli_main(["chain", str(src), "--no-daemon", "-o", str(out), "--rates", str(tmp_path / "curve.csv")])
    printed = capsys.readouterr().out
    assert rc == 0 and "forwards and carry per expiry" in printed
    res = pd.read_csv(out)
    assert (res.status == "ok").all()
    fwd = pd.read_csv(tmp_path / "out.forwards.csv", keep_default_na=False)
    assert len(fwd) == 1 and fwd.method[0] == "parity fit (F; D from curve)" and fwd.pairs[0] == 1
    curve = ZeroCurve.from_csv(str(tmp_path / "curve.csv"))
    assert fwd.rate[0] == pytest.approx(float(curve.zero_rate(fwd["T"][0])), rel=1e-12)
    # one pair and the curve's D (not the 4 % the quotes were priced with): F = K + (C - P) / D is
    # off the true forward by (C - P) (1/D_curve - 1/D_true)
    T, K = fwd["T"][0], res.strike[0]
    true_f = 6000.0 * math.exp((0.04 - 0.012) * T)
    c_minus_p = (true_f - K) * math.exp(-0.04 * T)
    assert abs(fwd.forward[0] - true_f) <= abs(c_minus_p) * abs(math.exp(fwd.rate[0] * T) - math.exp(0.04 * T)) + 1e-9
