"""The five bundled real chains with the default market set-up (forwards and carry from the
chain, the snapshot times of examples/data/README.md): calls and puts agree, SPX agrees with
Cboe's own implied volatilities, and quotes under the model's bound are rare."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from conftest import SNAPSHOTS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def priced(bundled_chains):
    return {name: bundled_chains(name)[1:] for name in SNAPSHOTS}


def _pairs_near_the_money(out: pd.DataFrame) -> pd.DataFrame:
    """Call and put IVs at the same strike and expiry, |K/S - 1| < 5 %, 2 to 400 days."""
    days = out.expiry_years * 365.0
    near = out[(np.abs(out.strike / out.underlying_price - 1) < 0.05) & (days >= 2) & (days <= 400)
               & (out.status == "ok")]
    c = near[near.type == "call"].set_index(["expiry", "strike"])
    p = near[near.type == "put"].set_index(["expiry", "strike"])
    both = c[["iv", "expiry_years"]].join(p[["iv"]].rename(columns={"iv": "iv_put"}), how="inner")
    both["diff_pts"] = 100.0 * (both.iv - both.iv_put)
    return both


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_calls_and_puts_agree(priced, name):
    out, summary = priced[name]
    both = _pairs_near_the_money(out)
    assert len(both) >= 30
    assert abs(float(both.diff_pts.median())) <= 0.3
    per = both.groupby(level=0).agg(diff=("diff_pts", "median"), n=("diff_pts", "size"), years=("expiry_years", "first"))
    checked = per[(per.years * 365 >= 7) & (per.n >= 3)]
    assert len(checked) >= 5
    worst = checked["diff"].abs().max()
    assert worst <= 1.0, per.sort_values("diff").to_string()
    # every expiry has a forward, a carry and a method; the table's residual is what the solve balanced
    f = summary.forwards
    assert f.forward.notna().all() and f.carry.notna().all() and (f.method != "").all()
    assert len(f) == out.expiry.nunique()
    solved = f[f.method.str.startswith("carry solve") & (f["T"] * 365 >= 7)]
    assert (solved.call_minus_put_iv_pts.abs() <= 1.0).all(), solved.to_string()


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_below_model_bound_is_rare(priced, name):
    out, _ = priced[name]
    two_sided = out[(out.bid > 0) & (out.ask > 0) & (out.bid <= out.ask)]
    assert (two_sided.status == "below-model-bound").mean() <= 0.01
    msg = out.loc[out.status == "below-model-bound", "error"]
    assert msg.str.contains("forward").all()


def test_spx_agrees_with_cboe(priced):
    out, summary = priced["spx_chain_2025-10-01.csv"]
    near = out[(np.abs(out.strike / out.underlying_price - 1) < 0.05) & (out.status == "ok") & out.implied_vol.notna()]
    assert len(near) > 100
    assert 100 * float(np.median(np.abs(near.iv - near.implied_vol))) <= 0.3
    # the implied rates and dividend yields of the parity fits are those of an index in late 2025
    f = summary.forwards
    assert f.method.str.startswith("parity fit").all()
    assert f.rate.between(0.03, 0.05).all() and f.carry.between(0.005, 0.015).all()


def test_every_row_carries_its_market_inputs(priced):
    out, summary = priced["spy_chain_2026-02-13.csv"]
    for col in ("spot", "rate", "dividend_yield", "forward", "expiry_years", "iv_bid", "iv", "iv_ask", "iv_otm"):
        assert col in out
    live = out[out.status == "ok"]
    np.testing.assert_allclose(live.forward, live.spot * np.exp((live.rate - live.dividend_yield) * live.expiry_years),
                               rtol=1e-12)
    by_expiry = summary.forwards.set_index("expiry")
    np.testing.assert_allclose(live.dividend_yield, by_expiry.loc[live.expiry, "carry"].to_numpy(), rtol=0, atol=0)
    assert not (live.iv_bid > live.iv + 1e-8).any() and not (live.iv > live.iv_ask + 1e-8).any()


def test_spx_forwards_agree_with_cboes_rule(priced):
    """Each liquid SPX expiry's fitted forward against Cboe's rule (VIX white paper, step 1:
    F = K* + e^{RT} (C - P) at the strike where the call and put mids differ least) at the
    fit's own rate: the two agree within the quotes' spread at K*, the rule's own noise."""
    from optiond.market.forwards import cboe_forward

    out, summary = priced["spx_chain_2025-10-01.csv"]
    q = out[(out.bid > 0) & (out.ask > 0)]
    checked = 0
    for row in summary.forwards.itertuples(index=False):
        if row.T * 365 < 7 or row.pairs < 10:
            continue
        e = q[q.expiry == row.expiry]
        c = e[e.type == "call"].set_index("strike")
        p = e[e.type == "put"].set_index("strike")
        k = c.index.intersection(p.index)
        cm, pm = (c.bid + c.ask)[k] / 2, (p.bid + p.ask)[k] / 2
        f_cboe, k_star = cboe_forward(k.to_numpy(), cm.to_numpy(), pm.to_numpy(), row.T, row.rate)
        spread = float((c.ask - c.bid)[k_star] + (p.ask - p.bid)[k_star]) / 2
        assert abs(row.forward - f_cboe) <= math.exp(row.rate * row.T) * spread + 1e-9, (row.expiry, row.forward, f_cboe)
        checked += 1
    assert checked >= 5
