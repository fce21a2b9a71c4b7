"""Dates for T, Greek units, BS_IV and BS_GREEKS, and the dividend rho in the worksheet
functions.

References: the chain's clock recomputed here from zoneinfo (minutes between the valuation and
the 16:00 New York close of the expiry date, over 525,600); QuantLib's AnalyticEuropeanEngine
(Greeks, dividendRho); the unit rule (theta / 365, vega, rho and dividend rho / 100)."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from optiond.addin import dates
from optiond.addin import functions as F
from optiond.addin import table

from addin_support import _fresh_cache, client, col, is_error  # noqa: F401
from conftest import quantlib_option

NY = ZoneInfo("America/New_York")
DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
S, K, r, q, sigma = 100.0, 105.0, 0.04, 0.015, 0.3


def serial(t: dt.datetime | dt.date) -> float:
    """An Excel serial (1900 date system), computed here."""
    if isinstance(t, dt.datetime):
        return (t - dt.datetime(1899, 12, 30)).total_seconds() / 86400.0
    return float((t - dt.date(1899, 12, 30)).days)


def years_ref(valuation_ny: dt.datetime, expiry: dt.date) -> float:
    """Minutes from a New York wall-clock valuation to the 16:00 New York close of the expiry
    date, over 525,600."""
    start = valuation_ny.replace(tzinfo=NY).astimezone(dt.timezone.utc)
    end = dt.datetime.combine(expiry, dt.time(16, 0), tzinfo=NY).astimezone(dt.timezone.utc)
    return (end - start).total_seconds() / 60.0 / 525_600.0


VAL = dt.datetime(2026, 2, 13, 10, 50)
EXPIRY = dt.date(2026, 9, 18)
T_REF = years_ref(VAL, EXPIRY)


@pytest.mark.parametrize("expiry", [dt.datetime(2026, 9, 18), dt.date(2026, 9, 18), serial(EXPIRY), 46283,
                                    "2026-09-18"])
@pytest.mark.parametrize("valuation", [VAL, serial(VAL), "2026-02-13T10:50"])
def test_a_date_T_is_the_year_fraction_to_the_last_bit(client, expiry, valuation):
    assert serial(EXPIRY) == 46283.0
    assert F.BS_CALL(S, K, expiry, r, sigma, q, valuation) == F.BS_CALL(S, K, T_REF, r, sigma, q)
    assert F.BOPM_PUT(S, K, expiry, r, sigma, 200, q, True, None, None, None, valuation) == \
        F.BOPM_PUT(S, K, T_REF, r, sigma, 200, q, True)
    assert F.BS_GREEKS(S, K, expiry, r, sigma, q, "put", valuation) == F.BS_GREEKS(S, K, T_REF, r, sigma, q, "put")


def test_a_date_alone_is_valued_at_its_close_and_daylight_saving_counts_its_hour(client):
    # valuation 2026-03-06 (16:00 EST) to expiry 2026-03-13 (16:00 EDT): 7 days less the hour
    T = (7 * 1440 - 60) / 525_600.0
    assert F.BS_PUT(S, K, dt.date(2026, 3, 13), r, sigma, q, dt.date(2026, 3, 6)) == F.BS_PUT(S, K, T, r, sigma, q)


def test_a_range_mixes_dates_and_year_fractions_and_a_bad_row_marks_its_row(client):
    Ts = [0.5, dt.date(2026, 9, 18), dt.date(2026, 1, 2), 46000.0]  # 46000 = 2025-12-09: before the valuation
    out = F.BS_CALL(S, K, col(Ts), r, sigma, q, VAL)
    assert out[0][0] == F.BS_CALL(S, K, 0.5, r, sigma, q)
    assert out[1][0] == F.BS_CALL(S, K, T_REF, r, sigma, q)
    for row in (2, 3):
        assert is_error(out[row][0]) and "is not before the expiry" in out[row][0]
    assert out[3][0] == "#optiond: valuation 2026-02-13 10:50 is not before the expiry 2025-12-09 16:00 New York time"
    assert client.calls[0] == ("price_table", 2)  # the good rows priced, in one request


def test_a_valuation_after_the_expiry_is_a_short_cell_error(client):
    got = F.BS_CALL(S, K, dt.date(2026, 3, 20), r, sigma, q, dt.datetime(2026, 3, 21, 9, 30))
    assert got == "#optiond: valuation 2026-03-21 09:30 is not before the expiry 2026-03-20 16:00 New York time"
    assert F.BS_CALL(S, K, dt.date(2026, 3, 20), r, sigma, q, dt.date(2026, 3, 20)).startswith(
        "#optiond: valuation 2026-03-20 16:00 is not before")  # expiry day, no time: its close, T = 0
    assert F.BS_CALL(S, K, 0.5, r, sigma, q, "soon") == \
        '#optiond: valuation must be a date, a date and time or empty (now), got "soon"'


def test_an_empty_valuation_is_now_to_the_minute(client, monkeypatch):
    now = dt.datetime(2026, 5, 4, 11, 7)
    monkeypatch.setattr(dates, "now_serial", lambda: serial(now))
    want = F.BS_CALL(S, K, years_ref(now, EXPIRY), r, sigma, q)
    assert F.BS_CALL(S, K, EXPIRY, r, sigma, q) == want
    assert F.BS_CALL(S, K, col([EXPIRY, 0.25]), r, sigma, q) == [[want], [F.BS_CALL(S, K, 0.25, r, sigma, q)]]
    monkeypatch.setattr(dates, "now_serial", lambda: serial(dt.datetime(2026, 9, 19, 8, 0)))
    got = F.BS_CALL(S, K, EXPIRY, r, sigma, q)  # the cached answer of the earlier minute is not reused
    assert got == "#optiond: valuation 2026-09-19 08:00 (now) is not before the expiry 2026-09-18 16:00 New York time"
    assert dates.DATE_MIN_SERIAL == 1000 and F.BS_CALL(S, K, 999.0, r, sigma, q) == F.BS_CALL(S, K, 999.0, r, sigma, q)


def test_parity_forward_takes_a_date_T(client):
    strikes, calls, puts = [[90.0, 100.0, 110.0]], [[13.0, 6.0, 2.0]], [[2.5, 5.4, 11.3]]
    assert F.PARITY_FORWARD(strikes, calls, puts, EXPIRY, 0.04, VAL) == F.PARITY_FORWARD(strikes, calls, puts, T_REF,
                                                                                         0.04)


# ---- Greek units ------------------------------------------------------------------------------

DIVISORS = (1.0, 1.0, 365.0, 100.0, 100.0, 100.0)


@pytest.mark.parametrize("fn,args", [
    ("BS_GREEKS", (S, col([90.0, 105.0]), 0.75, r, sigma, q, "call", None)),
    ("BOPM_GREEKS", (S, col([90.0, 105.0]), 0.75, r, sigma, 200, q, "put", True, None, None, None, None)),
])
def test_trader_units_are_the_raw_greeks_over_365_100_100_100(client, fn, args):
    f = F.WORKSHEET_FUNCTIONS[fn]
    raw, default = f(*args, "raw"), f(*args)
    trader = f(*args, "TRADER")
    assert default == raw and table.DEFAULT_UNITS == "raw"
    assert len(raw) == 2 and all(len(row) == 6 for row in raw + trader)
    for rr, tr in zip(raw, trader):
        assert tr == [x / d for x, d in zip(rr, DIVISORS)]
    head = f(*args, "trader", True)
    assert head[0] == ["delta", "gamma", "theta (per day)", "vega (per vol point)", "rho (per 1%)",
                       "dividend rho (per 1%)"]
    assert head[1:] == trader
    assert f(*args, None, True)[0][2:4] == ["theta (per year)", "vega (per 1.00 vol)"]
    assert f(*args, "points") == '#optiond: units must be "raw" or "trader", got "points"'


# ---- BS_GREEKS and BS_IV -----------------------------------------------------------------------

ql = pytest.importorskip("QuantLib")


@pytest.mark.parametrize("kind", [0, 1])
@pytest.mark.parametrize("Sx,days,rx,qx,sx", [(100, 365, 0.05, 0.0, 0.2), (80, 30, 0.01, 0.03, 0.6),
                                              (130, 1000, 0.08, 0.02, 0.35)])
def test_bs_greeks_against_quantlib_in_both_units(client, kind, Sx, days, rx, qx, sx):
    _, opt, proc = quantlib_option(kind, float(Sx), 100.0, days, rx, qx, sx)
    opt.setPricingEngine(ql.AnalyticEuropeanEngine(proc))
    want = [opt.delta(), opt.gamma(), opt.theta(), opt.vega(), opt.rho(), opt.dividendRho()]
    kname = "call" if kind else "put"
    got = F.BS_GREEKS(float(Sx), 100.0, days / 365.0, rx, sx, qx, kname)[0]
    trader = F.BS_GREEKS(float(Sx), 100.0, days / 365.0, rx, sx, qx, kname, None, "trader")[0]
    for g, w, t, d in zip(got, want, trader, DIVISORS):
        assert g == pytest.approx(w, rel=1e-9, abs=1e-10)
        assert t == pytest.approx(w / d, rel=1e-9, abs=1e-12)
    # QuantLib's thetaPerDay is the trader theta
    assert trader[2] == pytest.approx(opt.thetaPerDay(), rel=1e-9)


def test_bs_iv_round_trips_in_cells_and_ranges(client):
    vols = [0.05, 0.2, 0.8]
    prices = [F.BS_PUT(S, 80.0, 1 / 365 * 30, r, v, q) for v in vols]
    got = F.BS_IV(col(prices), S, 80.0, 30 / 365, r, q, "put")
    assert [row[0] for row in got] == pytest.approx(vols, rel=1e-12)
    one = F.BS_IV(F.BS_CALL(S, K, EXPIRY, r, 0.3, q, VAL), S, K, EXPIRY, r, q, "call", VAL)
    assert one == pytest.approx(0.3, rel=1e-12)
    assert F.BS_IV(0.001, S, 50.0, 1.0, r, q, "call") == \
        "#optiond: price is below the lowest model value (intrinsic value): no implied volatility"


def test_american_dividend_rho_against_quantlib_bumped(client):
    """The spectral engine's and the tree's dividend rho against a central difference in q of
    QuantLib's QdFp high-precision American put."""
    days, T = 365, 1.0

    def qd(qx):
        _, opt, proc = quantlib_option(0, S, K, days, r, qx, sigma, american=True)
        opt.setPricingEngine(ql.QdFpAmericanEngine(proc, ql.QdFpAmericanEngine.highPrecisionScheme()))
        return opt.NPV()

    want = (qd(q + 1e-4) - qd(q - 1e-4)) / 2e-4
    spectral = F.AMERICAN_PUT  # the price function; its Greeks through the engine
    from optiond import engine
    from optiond.models import Method

    cols = dict(kind="put", style="american", spot=S, strike=K, expiry=T, rate=r, dividend_yield=q, volatility=sigma)
    got = engine.price_table(cols, Method(name="spectral", greeks=True, accuracy="high-precision"))
    assert got.dividend_rho[0] == pytest.approx(want, rel=1e-4)
    tree = F.BOPM_GREEKS(S, K, T, r, sigma, 2000, q, "put", True)[0][5]
    assert tree == pytest.approx(want, rel=5e-3)
    assert spectral(S, K, T, r, sigma, q) == pytest.approx(qd(q), rel=1e-4)
    assert math.isfinite(tree) and np.sign(tree) == 1  # a put gains as the dividend yield rises


# ---- the same switch on the command line -------------------------------------------------------

def test_cli_greeks_trader_divides_and_names_the_unit(tmp_path):
    import pandas as pd

    from optiond.chain import read_chain
    from optiond.cli import main as cli_main

    src = tmp_path / "book.csv"
    pd.DataFrame(dict(kind=["put", "call"], style=["american", "european"], spot=[100.0, 100.0], strike=[100.0, 105.0],
                      expiry=[1.0, 0.5], rate=[0.05, 0.05], dividend_yield=[0.01, 0.02], volatility=[0.2, 0.3],
                      method=["binomial", "black-scholes"], steps=[300, ""])).to_csv(src, index=False)
    raw, trader = tmp_path / "raw.csv", tmp_path / "trader.csv"
    assert cli_main(["price", str(src), "-o", str(raw), "--no-daemon"]) == 0
    assert cli_main(["price", str(src), "-o", str(trader), "--no-daemon", "--greeks", "trader"]) == 0
    a, b = pd.read_csv(raw), pd.read_csv(trader)
    assert {"theta", "vega", "rho", "dividend_rho"} <= set(a.columns)
    assert not {"theta", "vega", "rho", "dividend_rho"} & set(b.columns)
    for g, name, d in (("delta", "delta", 1), ("gamma", "gamma", 1), ("theta", "theta_per_day", 365),
                       ("vega", "vega_per_vol_point", 100), ("rho", "rho_per_pct", 100),
                       ("dividend_rho", "dividend_rho_per_pct", 100)):
        np.testing.assert_array_equal(b[name].to_numpy(), a[g].to_numpy() / d)
    # the European row's dividend rho is the closed form's, -T S e^{-qT} N(d1)
    from optiond.kernels.black_scholes import bs_price_greeks

    want = bs_price_greeks(1, 100.0, 105.0, 0.5, 0.05, 0.02, 0.3)["dividend_rho"][0]
    assert a.dividend_rho[1] == pytest.approx(want, rel=1e-12) and want < 0
    chain_src = tmp_path / "chain.csv"
    read_chain(str(DATA / "aapl_chain_2026-02-13.csv")).head(20).to_csv(chain_src, index=False)
    out = tmp_path / "chain_out.csv"
    assert cli_main(["chain", str(chain_src), "-o", str(out), "--no-daemon", "--steps", "100", "--greeks",
                     "trader"]) == 0
    cols = set(pd.read_csv(out).columns)
    assert {"theta_per_day", "vega_per_vol_point", "rho_per_pct", "dividend_rho_per_pct"} <= cols
    assert "theta" not in cols
