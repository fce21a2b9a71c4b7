"""What ``engine.price_table`` will not drop without a word: a column it does not read, and the
extrapolated tree (BBSR) asked for rows with cash dividends, which it does not take."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from optiond import engine
from optiond.columns import unknown_columns
from optiond.models import Batch, InvalidInputError, Method

ROW = dict(kind="put", style="european", spot=100.0, strike=100.0, expiry=1.0, rate=0.05, dividend_yield=0.0,
           volatility=0.2)


def bs_put(S: float, K: float, T: float, r: float, sigma: float) -> float:
    d1 = (math.log(S / K) + (r + 0.5 * sigma * sigma) * T) / (sigma * math.sqrt(T))
    return K * math.exp(-r * T) * norm.cdf(-(d1 - sigma * math.sqrt(T))) - S * norm.cdf(-d1)


def test_unknown_column_is_refused_by_name():
    # a 'dividends' text column (the portfolio file's) is not the engine's: it used to price as
    # if there were no dividends, status ok
    with pytest.raises(InvalidInputError) as e:
        engine.price_table(dict(ROW, dividends="0.5:2.0"), Method(name="black-scholes"))
    assert e.value.field == "dividends" and "unknown column dividends" in str(e.value)
    assert "dividend_times and dividend_amounts" in str(e.value)
    with pytest.raises(InvalidInputError) as e:  # a batch, two unknown columns: both named
        engine.price_table(dict(ROW, strike=[90.0, 100.0], desk="rates", trader="ann"))
    assert e.value.field == "desk" and "unknown columns desk, trader" in str(e.value)
    # the same rule the file readers warn with
    assert unknown_columns(["kind", "desk", "v0", "trader"], engine.TABLE_COLUMNS) == ["desk", "trader"]
    res = engine.price_table(ROW, Method(name="black-scholes"))
    assert res.status.tolist() == ["ok"] and res.price[0] == pytest.approx(bs_put(100, 100, 1, 0.05, 0.2), rel=1e-12)


def test_extrapolate_with_cash_dividends_is_refused():
    times = np.array([[np.nan], [0.5]])
    cols = dict(ROW, strike=[100.0, 100.0], dividend_times=times, dividend_amounts=np.where(np.isnan(times), 0.0, 2.0))
    m = Method(name="binomial", steps=400, extrapolate=True)
    res = engine.price_table(cols, m)
    assert res.status.tolist() == ["ok", "error"]
    assert res.error[1].startswith("extrapolate=True:") and "cash dividends" in res.error[1]
    assert abs(res.price[0] - bs_put(100, 100, 1, 0.05, 0.2)) < 2e-4  # BBSR's converged European value
    # the same rows without extrapolate: both priced (the plain tree takes cash dividends)
    assert engine.price_table(cols, Method(name="binomial", steps=400)).status.tolist() == ["ok", "ok"]
    arrays, errors = engine.validate_columns(cols)
    assert not errors
    with pytest.raises(InvalidInputError) as e:
        engine.price(Batch._from_valid(arrays), m)
    assert e.value.field == "extrapolate" and "cash dividends" in str(e.value)
    iv = engine.implied_vol_table([5.0, 5.0], {k: v for k, v in cols.items() if k != "volatility"}, m)
    assert iv.status[1] == "invalid" and iv.error[1].startswith("extrapolate=True:")
