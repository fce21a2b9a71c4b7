"""Theo values on a surface: iv_fit, the model price and Greeks there, and the edge."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from optiond.chain import DEFAULT_ACCURACY, DEFAULT_STEPS
from optiond.models import GREEK_FIELDS, Method
from optiond.pricer import LocalPricer
from optiond.surface import SVI, Slice, Surface
from optiond.surface.theo import THEO_COLUMNS, apply_surface, fitted_vol

S, R, Q = 100.0, 0.03, 0.01
T1, T2 = 0.25, 1.0
P1 = SVI(0.01, 0.05, -0.4, 0.0, 0.2)
P2 = SVI(0.03, 0.10, -0.5, 0.05, 0.3)


def fwd(T: float) -> float:
    return S * math.exp((R - Q) * T)


def svi_vol(p: SVI, k: float, T: float) -> float:
    """Raw SVI written out (Gatheral 2004), independent of optiond.surface.svi."""
    w = p.a + p.b * (p.rho * (k - p.m) + math.sqrt((k - p.m) ** 2 + p.sigma ** 2))
    return math.sqrt(w / T)


def bs(kind: str, K: float, T: float, vol: float) -> float:
    """Black-Scholes-Merton with a dividend yield (Merton 1973)."""
    d1 = (math.log(S / K) + (R - Q + 0.5 * vol * vol) * T) / (vol * math.sqrt(T))
    d2 = d1 - vol * math.sqrt(T)
    if kind == "call":
        return S * math.exp(-Q * T) * norm.cdf(d1) - K * math.exp(-R * T) * norm.cdf(d2)
    return K * math.exp(-R * T) * norm.cdf(-d2) - S * math.exp(-Q * T) * norm.cdf(-d1)


@pytest.fixture(scope="module")
def surface():
    return Surface("TEST", "2026-01-02T10:00", [Slice("2026-04-03", T1, fwd(T1), R, P1),
                                                 Slice("2027-01-02", T2, fwd(T2), R, P2)])


def chain_rows() -> pd.DataFrame:
    rows = []
    for expiry, T, style in (("2026-04-03", T1, "american"), ("2027-01-02", T2, "european")):
        for K in (80.0, 90.0, 100.0, 110.0, 120.0):
            for kind in ("call", "put"):
                rows.append(dict(expiry=expiry, expiry_years=T, style=style, type=kind, strike=K))
    rows += [dict(expiry="2028-01-02", expiry_years=2.0, style="european", type="call", strike=100.0),  # after
             dict(expiry="2026-02-02", expiry_years=0.1, style="european", type="call", strike=100.0),  # before
             dict(expiry="2026-04-03", expiry_years=T1, style="american", type="put", strike=np.nan)]   # no strike
    df = pd.DataFrame(rows)
    df["spot"], df["rate"], df["dividend_yield"], df["mid"] = S, R, Q, 1.0
    return df


def test_iv_fit_is_the_slices_vol_at_the_forward_moneyness(surface):
    df = chain_rows()
    iv = fitted_vol(df, surface)
    for i, r in df.iloc[:20].iterrows():
        P = P1 if r.expiry_years == T1 else P2
        assert iv[i] == pytest.approx(svi_vol(P, math.log(r.strike / fwd(r.expiry_years)), r.expiry_years), rel=1e-13)
    assert np.isnan(iv[20:]).all()  # T after the last slice, before the first, no strike


@pytest.mark.parametrize("american", ["auto", "binomial"])
def test_theo_is_the_engine_price_at_iv_fit_to_the_bit(surface, american):
    df = chain_rows()
    out = apply_surface(df, surface, method=american)
    assert list(out.columns[-len(THEO_COLUMNS):]) == list(THEO_COLUMNS)
    pd.testing.assert_frame_equal(out[df.columns], df)
    # auto: American rows by the spectral engine at the chain's accuracy (no cash dividends here)
    for style, name in (("american", "spectral" if american == "auto" else "binomial"), ("european", "black-scholes")):
        r = np.flatnonzero((df["style"] == style).to_numpy() & np.isfinite(out["iv_fit"].to_numpy()))
        assert r.size == 10
        cols = dict(kind=df["type"].to_numpy(object)[r], style=df["style"].to_numpy(object)[r],
                    spot=df["spot"].to_numpy()[r], strike=df["strike"].to_numpy()[r],
                    expiry=df["expiry_years"].to_numpy()[r], rate=df["rate"].to_numpy()[r],
                    dividend_yield=df["dividend_yield"].to_numpy()[r], volatility=out["iv_fit"].to_numpy()[r])
        ref = LocalPricer().price_table(cols, Method(name=name, steps=DEFAULT_STEPS, accuracy=DEFAULT_ACCURACY))
        np.testing.assert_array_equal(out["theo"].to_numpy()[r], ref.price)
        for g in GREEK_FIELDS:
            np.testing.assert_array_equal(out[f"theo_{g}"].to_numpy()[r], getattr(ref, g))
    # the European rows against the closed form written out here
    eu = out[(out["style"] == "european") & out["iv_fit"].notna()]
    for r in eu.itertuples():
        assert r.theo == pytest.approx(bs(r.type, r.strike, r.expiry_years, r.iv_fit), rel=1e-12, abs=1e-12)
    # the American put is worth at least the European one at the same vol (early exercise)
    am_put = out[(out["style"] == "american") & (out["type"] == "put") & out["iv_fit"].notna()]
    for r in am_put.itertuples():
        assert r.theo >= bs("put", r.strike, T1, r.iv_fit) - 1e-3
    assert out.iloc[20:][list(THEO_COLUMNS)].isna().all().all()


def test_edge_is_mid_minus_theo_with_its_sign(surface):
    df = chain_rows().iloc[10:14].reset_index(drop=True)  # European, T2: K 80 call/put, 90 call/put
    theo = np.array([bs(t, k, T2, svi_vol(P2, math.log(k / fwd(T2)), T2)) for t, k in zip(df.type, df.strike)])
    df["mid"] = theo + np.array([0.25, -0.25, 0.0, np.nan])
    out = apply_surface(df, surface)
    np.testing.assert_allclose(out["edge"].to_numpy()[:3], [0.25, -0.25, 0.0], atol=1e-9)
    assert out["edge"].iloc[0] > 0 > out["edge"].iloc[1]  # bid rich, offered cheap
    assert np.isnan(out["edge"].iloc[3]) and np.isfinite(out["theo"].iloc[3])


def test_between_slices_iv_fit_interpolates_total_variance_linearly_in_T(surface):
    T = 0.5
    F = fwd(T)  # the slices' forwards are log-linear in T, so the surface's forward is exact here
    df = pd.DataFrame(dict(expiry=["x"], expiry_years=[T], style=["european"], type=["call"], strike=[105.0],
                           spot=[S], rate=[R], dividend_yield=[Q], mid=[1.0]))
    k = math.log(105.0 / F)
    t = (T - T1) / (T2 - T1)
    w = (1 - t) * svi_vol(P1, k, T1) ** 2 * T1 + t * svi_vol(P2, k, T2) ** 2 * T2
    assert fitted_vol(df, surface)[0] == pytest.approx(math.sqrt(w / T), rel=1e-12)


def test_theo_with_a_cash_dividend_is_the_tree_at_iv_fit(surface):
    """With a cash dividend the theo is the CRR tree's price and Greeks at ``iv_fit`` with the
    row's schedule (the engine the chain job prices dividend rows with), American and European
    alike; the edge in half-spreads is the edge over half the quoted spread."""
    df = chain_rows()
    n = len(df)
    t = np.where(df["expiry_years"].to_numpy() > 0.1, 0.1, np.nan)[:, None]  # one dividend, ex in 0.1 y
    a = np.where(np.isfinite(t), 1.5, 0.0)
    df["bid"], df["ask"] = 0.9, 1.3
    out = apply_surface(df, surface, dividends=(t, a))
    plain = apply_surface(df, surface)
    r = np.flatnonzero(np.isfinite(out["iv_fit"].to_numpy()))
    assert r.size == 20
    cols = dict(kind=df["type"].to_numpy(object)[r], style=df["style"].to_numpy(object)[r],
                spot=df["spot"].to_numpy()[r], strike=df["strike"].to_numpy()[r],
                expiry=df["expiry_years"].to_numpy()[r], rate=df["rate"].to_numpy()[r],
                dividend_yield=df["dividend_yield"].to_numpy()[r], volatility=out["iv_fit"].to_numpy()[r],
                dividend_times=t[r], dividend_amounts=a[r])
    ref = LocalPricer().price_table(cols, Method(name="binomial", steps=DEFAULT_STEPS))
    assert (np.asarray(ref.status) == "ok").all()
    np.testing.assert_array_equal(out["theo"].to_numpy()[r], ref.price)
    for g in GREEK_FIELDS:
        np.testing.assert_array_equal(out[f"theo_{g}"].to_numpy()[r], getattr(ref, g))
    # the dividend lowers every call and raises every put against the continuous carry alone
    call = (df["type"] == "call").to_numpy()[r]
    d = out["theo"].to_numpy()[r] - plain["theo"].to_numpy()[r]
    assert (d[call] < -0.1).all() and (d[~call] > 0.1).all()
    np.testing.assert_allclose(out["edge"].to_numpy()[r], 1.0 - ref.price, rtol=1e-15)
    np.testing.assert_allclose(out["edge_half_spreads"].to_numpy()[r], (1.0 - ref.price) / 0.2, rtol=1e-12)
    with pytest.raises(ValueError, match="dividends"):
        apply_surface(df, surface, dividends=(t[:-1], a[:-1]))
    assert n == len(out)
