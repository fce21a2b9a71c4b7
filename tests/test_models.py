"""Schema validation: every invalid value is named by field, row and value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optiond import engine
from optiond.models import Batch, InvalidInputError, Method, validate_columns

GOOD = dict(kind=["put", "call", "put"], style=["american", "european", "american"], spot=100.0,
            strike=[90.0, 100.0, 110.0], expiry=1.0, rate=0.05, dividend_yield=0.01, volatility=0.25)


@pytest.mark.parametrize("field,value,reason", [
    ("spot", 0.0, "> 0"), ("spot", -5.0, "> 0"), ("strike", 0.0, "> 0"), ("expiry", -1.0, "> 0"),
    ("volatility", 0.0, "> 0"), ("volatility", 10.5, "<= 10"), ("rate", math.nan, "finite"),
    ("dividend_yield", math.inf, "finite"), ("strike", math.nan, "finite"), ("kind", "straddle", "unknown kind"),
    ("style", "bermudan", "unknown style"), ("spot", "abc", "not a number"),
])
def test_invalid_value_names_field_row_and_value(field, value, reason):
    cols = dict(GOOD)
    col = np.array(np.broadcast_to(np.asarray(cols[field], dtype=object), (3,)), dtype=object)
    col[1] = value
    cols[field] = col
    with pytest.raises(InvalidInputError) as ei:
        Batch.from_columns(cols)
    e = ei.value
    assert isinstance(e, ValueError)
    assert (e.field, e.row) == (field, 1)
    assert reason in str(e) and "row 1" in str(e)


@pytest.mark.parametrize("steps,reason", [(0, "between"), (10_000_001, "between"), (2.5, "whole"), (math.nan, "finite")])
def test_invalid_steps(steps, reason):
    with pytest.raises(InvalidInputError, match=reason):
        Method(steps=steps)


@pytest.mark.parametrize("steps,reason", [(0, "between"), (10_000_001, "between"), (2.5, "whole"), ("many", "not a number")])
def test_invalid_steps_in_a_table_mark_the_row(steps, reason):
    # (a blank / NaN cell in a table means "the method's default", so it is not an error there)
    res = engine.price_table(dict(GOOD, steps=np.array([100, steps, 100], dtype=object)))
    assert res.status.tolist() == ["ok", "error", "ok"] and reason in res.error[1]


def test_unknown_method_and_whole_table_errors():
    with pytest.raises(InvalidInputError, match="unknown method"):
        Method(name="monte-carlo-ish")
    with pytest.raises(InvalidInputError, match="missing column"):
        Batch.from_columns({k: v for k, v in GOOD.items() if k != "strike"})
    with pytest.raises(InvalidInputError, match="lengths differ"):
        Batch.from_columns(dict(GOOD, spot=[1.0, 2.0]))


def test_one_bad_row_is_marked_and_the_rest_priced():
    cols = dict(GOOD, spot=[100.0, -1.0, 100.0])
    arrays, errors = validate_columns(cols)
    assert [(e.row, e.field) for e in errors] == [(1, "spot")]
    res = engine.price_table(cols, Method(steps=200))
    assert res.status.tolist() == ["ok", "error", "ok"]
    assert np.isnan(res.price[1]) and "spot" in res.error[1]
    good = engine.price(Batch.from_columns(dict(GOOD, spot=100.0)).take([0, 2]), Method(steps=200))
    np.testing.assert_array_equal(res.price[[0, 2]], good.price)


def test_scalars_broadcast_and_codes_accepted():
    b = Batch.from_columns(kind=[0, 1], style=1, spot=100, strike=100, expiry=0.5, rate=0.0, volatility=0.2)
    assert len(b) == 2 and b.kind.tolist() == [0, 1] and b.style.tolist() == [1, 1]
    assert b.dividend_yield.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("method", [Method(steps=150), Method(steps=3, greeks=True), Method(name="black-scholes")])
def test_single_contract_fast_path_equals_the_batch_path(method):
    one = dict(kind="call", style="european" if method.name == "black-scholes" else "american", spot=101.0,
               strike=97.0, expiry=0.7, rate=0.03, dividend_yield=0.02, volatility=0.31)
    fast = engine.price_table(one, method)
    batch = engine.price_table({k: [v, v] for k, v in one.items()}, method)
    for f in ("price", "delta", "gamma", "theta", "vega", "rho"):
        assert getattr(fast, f)[0] == getattr(batch, f)[0] or (np.isnan(getattr(fast, f)[0]) and np.isnan(getattr(batch, f)[0]))


@pytest.mark.parametrize("bad,reason", [(dict(spot=-1.0), "spot"), (dict(volatility=12.0), "<= 10"), (dict(kind="strangle"), "kind"),
                                        (dict(steps=0), "steps"), (dict(expiry=5.0, rate=0.1, volatility=0.05, steps=1), "CRR probability")])
def test_single_contract_errors_match_the_batch_path(bad, reason):
    one = dict(dict(kind="put", style="american", spot=100.0, strike=100.0, expiry=1.0, rate=0.05, volatility=0.2), **bad)
    fast = engine.price_table(one, Method(steps=100))
    batch = engine.price_table({k: [v] for k, v in one.items()}, Method(steps=100))
    assert fast.status[0] == batch.status[0] == "error" and fast.error[0] == batch.error[0] and reason in fast.error[0]


@pytest.mark.parametrize("col", ["method", "eps", "payoff", "steps"])
def test_per_row_columns_of_the_wrong_length_are_a_table_error(col):
    with pytest.raises(InvalidInputError, match=col):
        engine.price_table(dict(GOOD, **{col: ["binomial", "binomial"] if col in ("method", "payoff") else [1, 2]}))


def test_mark_error_copies_a_read_only_column_first():
    """A daemon's prices-only reply shares one read-only NaN column among the Greeks; marking
    a row bad must not fail on it, nor change another Result's arrays."""
    from optiond.models import GREEK_FIELDS, Result, object_full

    nan = np.broadcast_to(np.nan, (4,))
    price = np.array([1.0, 2.0, 3.0, 4.0])
    res = Result(price, *([nan] * len(GREEK_FIELDS)), status=object_full(4, "ok"), error=object_full(4, ""))
    res.mark_error([2], "bad strike")
    assert np.array_equal(res.price, [1.0, 2.0, np.nan, 4.0], equal_nan=True)
    assert all(getattr(res, g).flags.writeable and np.isnan(getattr(res, g)).all() for g in GREEK_FIELDS)
    assert res.status.tolist() == ["ok", "ok", "error", "ok"] and res.error[2] == "bad strike"
    assert not nan.flags.writeable and np.isnan(nan).all()
