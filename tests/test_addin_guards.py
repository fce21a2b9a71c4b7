"""The worksheet functions' unit guards (a rate or yield typed in percent, a volatility in vol
points, T in days), their opt-out, implied volatilities of prices with no time value, and
OPTIOND_ERROR.

References: the Black-Scholes closed form computed here (math.erf); the lower bound of an
option price at volatility 0 (the discounted forward intrinsic value; an American option's
exercise value)."""

from __future__ import annotations

import math

import pytest

from optiond.addin import functions as F
from optiond.addin import table

from addin_support import _fresh_cache, client, col, is_error  # noqa: F401


def bs(kind: str, S: float, K: float, T: float, r: float, q: float, sigma: float) -> float:
    """Black-Scholes with a continuous yield, from the closed form."""
    N = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731
    d1 = (math.log(S / K) + (r - q + 0.5 * sigma ** 2) * T) / (sigma * math.sqrt(T))
    d2 = d1 - sigma * math.sqrt(T)
    if kind == "call":
        return S * math.exp(-q * T) * N(d1) - K * math.exp(-r * T) * N(d2)
    return K * math.exp(-r * T) * N(-d2) - S * math.exp(-q * T) * N(-d1)


@pytest.mark.parametrize("args, needle", [
    ((100, 100, 1, 5, 0.2), "r=5 looks like percent: enter 0.05"),
    ((100, 100, 1, -4.5, 0.2), "r=-4.5 looks like percent: enter -0.045"),
    ((100, 100, 1, 0.05, 0.2, 2), "q=2 looks like percent: enter 0.02"),
    ((100, 100, 1, 0.05, 8), "sigma=8 looks like vol points: enter 0.08"),
    ((100, 100, 60, 0.05, 0.2), "T=60 is over 50 years: T is in years (days/365 = 0.1644)"),
])
def test_each_unit_slip_is_refused_with_what_was_meant_and_passes_with_the_opt_out(client, monkeypatch, args, needle):
    full = args + (0.0,) * (6 - len(args))
    for fn in (F.BS_CALL, F.BOPM_CALL, F.AMERICAN_CALL):  # a quick single-cell path, a tree, the spectral engine
        call = (args[:5] + (50,) + args[5:]) if fn is F.BOPM_CALL else args
        out = fn(*call)
        assert is_error(out) and needle in out and "OPTIOND_UNITS_CHECK=0" in out, out
        assert len(out) <= table.EXCEL_TEXT_LIMIT
    # a range: only the slipped cell is refused, the other priced
    S, K, T, r, sigma, q = full
    out = F.BS_CALL(col([100.0, S]), col([100.0, K]), col([1.0, T]), col([0.05, r]), col([0.2, sigma]),
                    col([0.0, q]))
    assert out[0][0] == pytest.approx(bs("call", 100, 100, 1, 0.05, 0.0, 0.2), rel=1e-12)
    assert is_error(out[1][0]) and needle in out[1][0]
    monkeypatch.setenv("OPTIOND_UNITS_CHECK", "0")  # what was typed is meant
    assert F.BS_CALL(*args) == pytest.approx(bs("call", S, K, T, r, q, sigma), rel=1e-9)


def test_the_opt_out_leaves_the_schema_limits_and_is_part_of_the_cache_key(client, monkeypatch):
    assert "looks like vol points" in F.BOPM_PUT(100, 100, 1, 0.05, 12, 50)
    assert "looks like vol points" in F.MLMC_PUT(100, 100, 1, 0.05, 7, 0.05)
    monkeypatch.setenv("OPTIOND_UNITS_CHECK", "off")
    assert F.BOPM_PUT(100, 100, 1, 0.05, 12, 50) == "#optiond: sigma must be <= 10, got 12"
    assert F.MLMC_PUT(100, 100, 1, 0.05, 7, 0.05) == "#optiond: sigma must be <= 5 for MLMC, got 7"
    assert isinstance(F.BS_CALL(100, 100, 1, 5, 0.2), float)  # the same cells, cached above as an error
    monkeypatch.setenv("OPTIOND_UNITS_CHECK", "1")
    assert is_error(F.BS_CALL(100, 100, 1, 5, 0.2))


def test_the_guards_do_not_touch_ordinary_inputs(client):
    # the largest values the guards let through: r and q of 1, sigma of 5, T of 50 years
    assert F.BS_PUT(100, 100, 50, 1.0, 5.0, 1.0) == pytest.approx(bs("put", 100, 100, 50, 1.0, 1.0, 5.0),
                                                                 rel=1e-9, abs=1e-12)
    assert F.BS_CALL(100, 100, 30, -0.5, 0.2) == pytest.approx(bs("call", 100, 100, 30, -0.5, 0.0, 0.2), rel=1e-9)


def test_a_price_with_no_time_value_has_no_implied_volatility(client):
    S, K, T, r, q = 120.0, 100.0, 0.5, 0.05, 0.01
    floor = S * math.exp(-q * T) - K * math.exp(-r * T)  # the call at volatility 0
    out = F.BS_IV(floor, S, K, T, r, q, "call")
    assert is_error(out) and "no time value" in out and "no implied volatility" in out, out
    above = bs("call", S, K, T, r, q, 0.08)  # with time value: the volatility comes back
    assert F.BS_IV(above, S, K, T, r, q, "call") == pytest.approx(0.08, rel=1e-6)
    # American puts deep in the money: the exercise value K - S, where every low volatility gives it
    out = F.AMERICAN_IV(20.0, 80.0, 100.0, T, r, 0.0, "put")
    assert is_error(out) and "no time value" in out, out
    out = F.BOPM_IV(col([20.0, 21.0]), 80.0, 100.0, T, r, 0.0, "put", 200, True)
    assert is_error(out[0][0]) and "no time value" in out[0][0]
    assert 0 < out[1][0] < 1  # with time value: priced


def test_bs_iv_kind_defaults_to_call_and_the_wizard_says_so(client):
    doc = dict((a.name, a.doc) for a in table.BY_NAME["BS_IV"].args)["kind"]
    assert '"call"' in doc and "Omitted" in doc
    p = bs("call", 100, 105, 0.5, 0.04, 0.0, 0.3)
    assert F.BS_IV(p, 100, 105, 0.5, 0.04) == pytest.approx(0.3, rel=1e-6)


def test_optiond_error_gives_the_message_of_an_error_cell_and_nothing_for_the_others(client):
    bad = F.BS_CALL(100, -5, 1, 0.05, 0.2)
    assert bad.startswith(F.ERROR_PREFIX)
    assert F.OPTIOND_ERROR(bad) == "K must be > 0, got -5"
    assert F.OPTIOND_ERROR([[bad]]) == "K must be > 0, got -5"  # a cell as xlwings reads it
    good = F.BS_CALL(100, 100, 1, 0.05, 0.2)
    assert F.OPTIOND_ERROR(good) == "" and F.OPTIOND_ERROR(None) == "" and F.OPTIOND_ERROR("SPY#0001") == ""
    assert F.OPTIOND_ERROR([[good, bad], ["#N/A", None]]) == [["", "K must be > 0, got -5"], ["#N/A", ""]]
    assert "OPTIOND_ERROR" in F.formulas_functions()


def test_the_guards_cover_parity_forwards_T_and_rate(client, monkeypatch):
    K = [90.0, 100.0, 110.0]
    F0, D = 101.0, math.exp(-0.05 * 0.5)
    calls = [D * max(F0 - k, 0) + 2.0 for k in K]  # put-call parity: C - P = D (F - K)
    puts = [c - D * (F0 - k) for c, k in zip(calls, K)]
    assert "rate=5 looks like percent: enter 0.05" in F.PARITY_FORWARD(K, calls, puts, 0.5, 5)
    assert "T=182 is over 50 years" in F.PARITY_FORWARD(K, calls, puts, 182, 0.05)
    got = F.PARITY_FORWARD(K, calls, puts, 0.5, 0.05)
    assert got[0][0] == pytest.approx(F0, rel=1e-9) and got[0][1] == pytest.approx(D, rel=1e-12)
    monkeypatch.setenv("OPTIOND_UNITS_CHECK", "no")
    assert not is_error(F.PARITY_FORWARD(K, calls, puts, 0.5, 5))


def test_a_chain_fits_rate_in_percent_is_refused_before_any_request(client):
    rows = [["underlying", "quote_date", "expiry", "type", "strike", "bid", "ask", "last", "implied_vol",
             "underlying_price", "style"],
            ["AAPL", "2026-02-13", "2026-02-18", "call", 210.0, 47.6, 50.7, 68.88, 1.16, 259.475, "american"]]
    for fn in (F.SURFACE_FIT, F.HESTON_FIT):
        out = fn("AAPL", rows, None, 4.0)
        assert is_error(out) and "rate=4 looks like percent: enter 0.04" in out, out
    assert client.calls == []


def test_a_daemon_that_did_not_answer_is_not_reported_as_missing():
    """A cell says "no daemon is running" only when none runs; a daemon that runs but did not
    answer in time (a timeout, a silent heartbeat) is reported with the client's own reason."""
    from optiond.addin import pricing
    from optiond.daemon.client import DaemonUnavailable

    missing = DaemonUnavailable("no daemon running (no connection file /x/daemon.json); start one with "
                                "'optiond serve --detach'")
    busy = DaemonUnavailable("no reply from the daemon at tcp://127.0.0.1:5555 within 5 s and its heartbeat is silent")
    assert pricing._failure_text(missing) == "#optiond: no optiond daemon is running; start one with: optiond serve"
    text = pricing._failure_text(busy)
    assert text.startswith("#optiond: the optiond daemon did not answer: no reply from the daemon") and "5 s" in text
