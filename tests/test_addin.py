"""The Excel worksheet functions called as plain Python, as they run off Windows.

References are independent of the package: Black-Scholes-Merton written here with math.erf,
and a plain NumPy CRR tree (European and American). The pricing client is replaced by a
counting adapter over the engine, so "one range = one request" is checked by counting calls;
the daemon-down test uses the real client with no daemon behind it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from optiond.addin import functions as F
from optiond.addin import generate
from optiond.addin import pricing
from optiond.addin import table

from addin_support import LIMIT, CountingClient, _fresh_cache, client, col, is_error  # noqa: F401
from optiond.daemon.client import Client



# ---- independent references ----------------------------------------------------------------

def _ncdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _npdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def bs_ref(kind: str, S, K, T, r, sigma, q=0.0) -> dict:
    """Black-Scholes-Merton price and Greeks (theta per year of calendar time, vega, rho and
    dividend rho per 1.00)."""
    sq = sigma * math.sqrt(T)
    d1 = (math.log(S / K) + (r - q + 0.5 * sigma * sigma) * T) / sq
    d2 = d1 - sq
    dq, dr = math.exp(-q * T), math.exp(-r * T)
    gamma = dq * _npdf(d1) / (S * sq)
    vega = S * dq * _npdf(d1) * math.sqrt(T)
    decay = -S * dq * _npdf(d1) * sigma / (2 * math.sqrt(T))
    if kind == "call":
        return dict(price=S * dq * _ncdf(d1) - K * dr * _ncdf(d2), delta=dq * _ncdf(d1), gamma=gamma,
                    theta=decay - r * K * dr * _ncdf(d2) + q * S * dq * _ncdf(d1), vega=vega,
                    rho=K * T * dr * _ncdf(d2), dividend_rho=-S * T * dq * _ncdf(d1))
    return dict(price=K * dr * _ncdf(-d2) - S * dq * _ncdf(-d1), delta=-dq * _ncdf(-d1), gamma=gamma,
                theta=decay + r * K * dr * _ncdf(-d2) - q * S * dq * _ncdf(-d1), vega=vega,
                rho=-K * T * dr * _ncdf(-d2), dividend_rho=S * T * dq * _ncdf(-d1))


def crr_ref(kind: str, S, K, T, r, sigma, N, q=0.0, american=False, levels=False):
    """Cox-Ross-Rubinstein tree by plain backward induction over whole NumPy levels."""
    dt = T / N
    u = math.exp(sigma * math.sqrt(dt))
    d = 1.0 / u
    p = (math.exp((r - q) * dt) - d) / (u - d)
    disc = math.exp(-r * dt)

    def payoff(s):
        return np.maximum(s - K, 0.0) if kind == "call" else np.maximum(K - s, 0.0)

    V = payoff(S * u ** (2.0 * np.arange(N + 1) - N))
    level1 = None
    for t in range(N - 1, -1, -1):
        V = disc * (p * V[1:] + (1.0 - p) * V[:-1])
        if american:
            V = np.maximum(V, payoff(S * u ** (2.0 * np.arange(t + 1) - t)))
        if t == 1:
            level1 = V.copy()
    if levels:
        return float(V[0]), (level1[1] - level1[0]) / (S * u - S * d)
    return float(V[0])


# ---- a counting client over the engine -----------------------------------------------------

BASE = dict(S=100.0, K=105.0, T=0.75, r=0.04, sigma=0.3, q=0.01)


# ---- scalars against the references ---------------------------------------------------------

@pytest.mark.parametrize("kind", ["put", "call"])
@pytest.mark.parametrize("S,K,T,r,sigma,q", [(100, 105, 0.75, 0.04, 0.3, 0.01), (50, 30, 2.0, 0.0, 0.5, 0.0),
                                             (80, 120, 0.1, 0.08, 0.15, 0.03)])
def test_bs_scalars_match_closed_form(client, kind, S, K, T, r, sigma, q):
    f = F.BS_CALL if kind == "call" else F.BS_PUT
    want = bs_ref(kind, S, K, T, r, sigma, q)["price"]
    assert f(S, K, T, r, sigma, q) == pytest.approx(want, rel=1e-12, abs=1e-12)
    if q == 0:
        assert f(S, K, T, r, sigma) == pytest.approx(want, rel=1e-12, abs=1e-12)  # q defaults to 0


@pytest.mark.parametrize("kind", ["put", "call"])
@pytest.mark.parametrize("american", [False, True])
@pytest.mark.parametrize("N", [1, 2, 7, 200])
def test_bopm_scalars_match_numpy_crr(client, kind, american, N):
    f = F.BOPM_CALL if kind == "call" else F.BOPM_PUT
    b = BASE
    got = f(b["S"], b["K"], b["T"], b["r"], b["sigma"], N, b["q"], american)
    want = crr_ref(kind, b["S"], b["K"], b["T"], b["r"], b["sigma"], N, b["q"], american=american)
    assert got == pytest.approx(want, rel=1e-12)


def test_bopm_defaults_american_and_no_dividend(client):
    b = BASE
    got = F.BOPM_PUT(b["S"], b["K"], b["T"], b["r"], b["sigma"], 100)
    assert got == pytest.approx(crr_ref("put", b["S"], b["K"], b["T"], b["r"], b["sigma"], 100, 0.0, True), rel=1e-12)
    assert F.BOPM_PUT(b["S"], b["K"], b["T"], b["r"], b["sigma"], 100, 0, 0) == pytest.approx(
        crr_ref("put", b["S"], b["K"], b["T"], b["r"], b["sigma"], 100, 0.0, False), rel=1e-12)
    # TRUE / FALSE as text and as 1/0, kind labels in any case
    assert F.BOPM_PUT(100, 100, 1, 0.05, 0.2, 50, None, "FALSE") == F.BOPM_PUT(100, 100, 1, 0.05, 0.2, 50, 0, False)
    assert F.BOPM_CALL(100, 100, 1, 0.05, 0.2, 50, 0, 1) == F.BOPM_CALL(100, 100, 1, 0.05, 0.2, 50)


def test_european_bopm_converges_to_bs(client):
    b = BASE
    got = F.BOPM_CALL(b["S"], b["K"], b["T"], b["r"], b["sigma"], 2000, b["q"], False)
    assert got == pytest.approx(bs_ref("call", **b)["price"], abs=1e-2)


# ---- ranges: shapes and ONE request ----------------------------------------------------------

def test_column_of_strikes_is_one_request(client):
    strikes = [80.0, 90.0, 100.0, 110.0, 120.0]
    out = F.BOPM_PUT(100.0, col(strikes), 1.0, 0.05, 0.25, 150, 0.0, True)
    assert client.calls == [("price_table", 5)]
    assert [len(r) for r in out] == [1] * 5
    for row, k in zip(out, strikes):
        assert row[0] == pytest.approx(crr_ref("put", 100.0, k, 1.0, 0.05, 0.25, 150, american=True), rel=1e-12)


def test_row_and_1d_and_2d_shapes(client):
    strikes = [90.0, 100.0, 110.0]
    row = F.BS_CALL(100.0, [strikes], 0.5, 0.03, 0.2)
    assert len(row) == 1 and len(row[0]) == 3
    assert F.BS_CALL(100.0, strikes, 0.5, 0.03, 0.2) == [[v] for v in row[0]]  # a Python list is a column
    assert F.BS_CALL(100.0, np.array(strikes), 0.5, 0.03, 0.2) == [[v] for v in row[0]]
    grid = [[90.0, 100.0], [110.0, 120.0], [95.0, 105.0]]
    out = F.BS_PUT(100.0, grid, 0.5, 0.03, 0.2)
    assert np.shape(out) == (3, 2)
    for i in range(3):
        for j in range(2):
            assert out[i][j] == pytest.approx(bs_ref("put", 100.0, grid[i][j], 0.5, 0.03, 0.2)["price"], rel=1e-12)
    # the row, the list and the array are the same canonical request: priced once, then cached
    assert client.calls == [("price_table", 3), ("price_table", 6)]


def test_row_times_column_broadcasts_to_a_grid_in_one_request(client):
    strikes = [[90.0, 100.0, 110.0]]
    vols = col([0.1, 0.2, 0.3, 0.4])
    out = F.BOPM_CALL(100.0, strikes, 1.0, 0.05, vols, 60, 0.0, False)
    assert client.calls == [("price_table", 12)]
    assert np.shape(out) == (4, 3)
    for i, (v,) in enumerate(vols):
        for j, k in enumerate(strikes[0]):
            assert out[i][j] == pytest.approx(crr_ref("call", 100.0, k, 1.0, 0.05, v, 60), rel=1e-12)


def test_every_argument_may_be_a_range(client):
    n = 4
    S = col([90.0, 95.0, 100.0, 105.0])
    T = col([0.25, 0.5, 1.0, 2.0])
    N = col([10, 20, 30, 40])
    am = col([True, False, True, False])
    out = F.BOPM_PUT(S, 100.0, T, 0.02, col([0.2] * n), N, col([0.0, 0.01, 0.02, 0.03]), am)
    assert client.calls == [("price_table", 4)]
    for i in range(n):
        want = crr_ref("put", S[i][0], 100.0, T[i][0], 0.02, 0.2, N[i][0], [0.0, 0.01, 0.02, 0.03][i], am[i][0])
        assert out[i][0] == pytest.approx(want, rel=1e-12)


def test_shapes_that_do_not_broadcast_give_one_message(client):
    out = F.BS_PUT(100.0, col([90.0, 100.0, 110.0]), 1.0, 0.05, col([0.1, 0.2]))
    assert is_error(out) and "shapes" in out
    assert is_error(F.BS_PUT(100.0, [[90.0, 100.0], [110.0]], 1.0, 0.05, 0.2))  # ragged rows
    assert client.calls == []


# ---- bad input: a message in its own cell, the rest priced ---------------------------------

def test_bad_strikes_mark_only_their_cells(client):
    strikes = [100.0, -5.0, 0.0, float("nan"), "abc", None, True, "#N/A", "", 110.0]
    out = [r[0] for r in F.BOPM_PUT(100.0, col(strikes), 1.0, 0.05, 0.2, 50, 0.0, True)]
    # cells that are not numbers never travel; range checks are the schema's, in the same request
    assert client.calls == [("price_table", 5)]
    assert out[0] == pytest.approx(crr_ref("put", 100.0, 100.0, 1.0, 0.05, 0.2, 50, american=True), rel=1e-12)
    assert out[-1] == pytest.approx(crr_ref("put", 100.0, 110.0, 1.0, 0.05, 0.2, 50, american=True), rel=1e-12)
    assert all(is_error(x) for x in out[1:-1])
    assert out[1] == "#optiond: K must be > 0, got -5"
    assert out[2] == "#optiond: K must be > 0, got 0"
    assert out[3] == "#optiond: K must be a finite number, got nan"
    assert out[4] == '#optiond: K must be a number, got "abc"'
    assert out[5] == out[8] == "#optiond: K is required (empty cell)"
    assert out[6] == "#optiond: K must be a number, got TRUE"
    assert out[7] == "#optiond: K is #N/A"


@pytest.mark.parametrize("args,needle", [
    ((-100, 100, 1, 0.05, 0.2, 50), "S must be > 0"),
    ((100, 100, 0, 0.05, 0.2, 50), "T must be > 0"),
    ((100, 100, -1, 0.05, 0.2, 50), "T must be > 0"),
    ((100, 100, 1, float("nan"), 0.2, 50), "r must be a finite number"),
    ((100, 100, 1, "five", 0.2, 50), "r must be a number"),
    ((100, 100, 1, 0.05, 0, 50), "sigma must be > 0"),
    ((100, 100, 1, 0.05, -0.2, 50), "sigma must be > 0"),
    ((100, 100, 1, 0.05, 12, 50), "sigma=12 looks like vol points: enter 0.12"),  # the unit guard
    ((100, 100, 1, 0.05, float("inf"), 50), "sigma must be a finite number"),
    ((100, 100, 1, 0.05, 0.2, 0), "N must be between 1 and"),
    ((100, 100, 1, 0.05, 0.2, -3), "N must be between 1 and"),
    ((100, 100, 1, 0.05, 0.2, 1e8), "N must be between 1 and"),
    ((100, 100, 1, 0.05, 0.2, 2.5), "N must be a whole number"),
    ((100, 100, 1, 0.05, 0.2, "many"), "N must be a number"),
    ((100, 100, 1, 0.05, 0.2, None), "N is required"),
    ((100, 100, 1, 0.05, 0.2, 50, float("nan")), "q must be a finite number"),
    ((100, 100, 1, 0.05, 0.2, 50, 0, "maybe"), "american must be TRUE or FALSE"),
    ((100, 100, 1, 0.05, 0.2, 50, 0, 2), "american must be TRUE or FALSE"),
    ((100, 100, 1, 0.5, 0.01, 1), "CRR probability p="),  # p outside [0, 1]
])
def test_bad_scalar_inputs_give_short_text(client, args, needle):
    out = F.BOPM_PUT(*args)
    assert is_error(out), out
    assert needle in out


def test_p_outside_unit_interval_marks_its_cell_only(client):
    out = F.BOPM_CALL(100.0, 100.0, 1.0, col([0.0, 0.5]), 0.01, 1, 0.0, True)
    assert isinstance(out[0][0], float) and out[0][0] > 0
    assert is_error(out[1][0]) and "outside [0,1]" in out[1][0] and "increase N" in out[1][0]


def test_bad_kind_and_iv_price(client):
    assert F.BOPM_IV(5.0, 100, 100, 1, 0.05, 0, "straddle") == '#optiond: kind must be "put" or "call", got "straddle"'
    assert F.BOPM_IV(-1.0, 100, 100, 1, 0.05, 0, "put") == "#optiond: price must be > 0, got -1"
    assert F.BOPM_IV(float("nan"), 100, 100, 1, 0.05) == "#optiond: price must be a finite number, got nan"
    out = F.BOPM_IV(col([0.5, 10.0, 200.0]), 100, 100, 1, 0.05, 0, "put", col([50, 0, 50]))
    assert out[0][0] == pytest.approx(0.0382645695, rel=1e-6)  # a low but valid volatility
    assert out[1][0].startswith("#optiond: N must be between 1")
    assert is_error(out[2][0]) and "above" in out[2][0]
    assert client.calls == [("implied_vol", 2)]  # the row with a bad N is not sent


def test_below_intrinsic_iv(client):
    out = F.BOPM_IV(5.0, 100.0, 120.0, 0.5, 0.05, 0.0, "put", 100, True)  # intrinsic 20
    assert is_error(out) and "intrinsic" in out


def test_messages_stay_under_255_characters(client):
    long_text = "x" * 1000
    for out in (F.BOPM_PUT(long_text, 100, 1, 0.05, 0.2, 10), F.BOPM_IV(5.0, 100, 100, 1, 0.05, 0, long_text),
                F.BOPM_PUT(100, 100, 1, 0.05, 0.2, 10, 0, long_text)):
        assert is_error(out)
    assert len(F.error_text("y" * 1000)) == LIMIT


def test_empty_optional_cells_take_defaults(client):
    out = F.BOPM_PUT(100.0, 100.0, 1.0, 0.05, 0.2, 80, col([None, 0.0, 0.02]), col([None, True, ""]))
    assert out[0][0] == out[1][0] == pytest.approx(crr_ref("put", 100, 100, 1, 0.05, 0.2, 80, 0.0, True), rel=1e-12)
    assert out[2][0] == pytest.approx(crr_ref("put", 100, 100, 1, 0.05, 0.2, 80, 0.02, True), rel=1e-12)


def test_unexpected_failures_are_text_not_tracebacks(monkeypatch):
    class Broken:
        def price_table(self, *a, **k):
            raise RuntimeError("boom\nTraceback (most recent call last): ...")

    monkeypatch.setattr(pricing, "_client", lambda: Broken())
    out = F.BOPM_PUT(100.0, col([90.0, "x"]), 1, 0.05, 0.2, 10)
    assert out[0][0] == "#optiond: pricing failed: boom Traceback (most recent call last): ..."
    assert out[1][0] == '#optiond: K must be a number, got "x"'  # its own error is kept
    # a failed request is not cached: the next call asks again
    good = CountingClient()
    monkeypatch.setattr(pricing, "_client", lambda: good)
    assert isinstance(F.BOPM_PUT(100.0, col([90.0, "x"]), 1, 0.05, 0.2, 10)[0][0], float)


# ---- the work limit ------------------------------------------------------------------------

def test_a_tree_over_the_work_limit_is_refused_in_its_own_cell(client):
    big = 200_000  # (N+1)(N+2)/2 = 2.0e10 nodes: just over BOPM_MAX_TREE_NODES on its own
    assert table.bopm_tree_nodes(big)[()] > table.BOPM_MAX_TREE_NODES
    out = F.BOPM_PUT(100.0, 100.0, 1.0, 0.05, 0.2, col([50, big, 10_000_000]), 0.0, False)
    assert out[0][0] == pytest.approx(crr_ref("put", 100.0, 100.0, 1.0, 0.05, 0.2, 50), rel=1e-12)
    for (text,), n in zip(out[1:], ("200000", "10000000")):
        assert is_error(text) and f"N={n} needs about" in text and "worksheet limit of 2e+10" in text
        assert "optiond panel" in text and "optiond price" in text
    assert client.calls == [("price_table", 1)]  # refused rows are never sent
    # an invalid N is the schema's message, not the limit's
    assert F.BOPM_PUT(100, 100, 1, 0.05, 0.2, 1e8).startswith("#optiond: N must be between 1 and")


def test_trees_over_the_limit_together_refuse_the_call(client, monkeypatch):
    monkeypatch.setattr(table, "BOPM_MAX_TREE_NODES", 3 * table.bopm_tree_nodes(1000)[()] + 1)
    args = (100.0, col([90.0, 100.0, 110.0]), 1.0, 0.05, 0.2, 1000)
    assert all(isinstance(r[0], float) for r in F.BOPM_CALL(*args))  # three trees: within the limit
    out = F.BOPM_CALL(100.0, col([80.0, 90.0, 100.0, 110.0, "bad"]), 1.0, 0.05, 0.2, 1000)
    assert all(is_error(r[0]) for r in out)
    assert all("this call needs about 2e+06 tree nodes for 4 options" in r[0] for r in out[:4])
    assert out[4][0] == '#optiond: K must be a number, got "bad"'
    # BOPM_GREEKS counts five trees an option, BOPM_IV fifty
    greeks = F.BOPM_GREEKS(100.0, 100.0, 1.0, 0.05, 0.2, 1000, 0.0, "put")
    assert all(is_error(x) and "tree nodes" in x for x in greeks[0])
    assert "tree nodes" in F.BOPM_IV(5.0, 100.0, 100.0, 1.0, 0.05, 0.0, "put", 1000)
    assert len(client.calls) == 1


# ---- BOPM_GREEKS --------------------------------------------------------------------------

def test_greeks_one_row_and_one_row_per_option(client):
    out = F.BOPM_GREEKS(100.0, 100.0, 1.0, 0.05, 0.2, 60, 0.0, "put", False)
    assert len(out) == 1 and len(out[0]) == 6
    price, delta = crr_ref("put", 100.0, 100.0, 1.0, 0.05, 0.2, 60, levels=True)
    assert out[0][0] == pytest.approx(delta, rel=1e-10)
    strikes = [90.0, 100.0, "bad", 110.0]
    rows = F.BOPM_GREEKS(100.0, col(strikes), 1.0, 0.05, 0.2, 60, 0.0, "call", True)
    assert len(rows) == 4 and all(len(r) == 6 for r in rows)
    assert all(is_error(x) for x in rows[2])
    assert all(isinstance(x, float) for r in (rows[0], rows[1], rows[3]) for x in r)
    assert client.calls[-1] == ("price_table", 3)


@pytest.mark.parametrize("kind", ["put", "call"])
def test_european_tree_greeks_near_closed_form(client, kind):
    b = BASE
    got = F.BOPM_GREEKS(b["S"], b["K"], b["T"], b["r"], b["sigma"], 2000, b["q"], kind, False)[0]
    want = bs_ref(kind, **b)
    # delta and gamma from the first levels; theta, vega, rho and dividend rho within 1 % (the
    # bumped and level-2 estimates carry the tree's discretisation error)
    assert len(got) == len(table.GREEK_COLUMNS) == 6
    for name, g, (rel, abs_) in zip(table.GREEK_COLUMNS, got, ((0, 2e-3), (0, 1e-3), (1e-2, 0), (1e-2, 0), (1e-2, 0),
                                                              (1e-2, 0))):
        assert g == pytest.approx(want[name], rel=rel, abs=abs_), name


# ---- BOPM_IV --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["put", "call"])
@pytest.mark.parametrize("american", [True, False])
def test_iv_round_trip(client, kind, american):
    f = F.BOPM_CALL if kind == "call" else F.BOPM_PUT
    vols = [0.15, 0.3, 0.6]
    prices = [f(100.0, 95.0, 0.5, 0.03, v, 300, 0.01, american) for v in vols]
    iv = F.BOPM_IV(col(prices), 100.0, 95.0, 0.5, 0.03, 0.01, kind, 300, american)
    assert client.calls[-1] == ("implied_vol", 3)
    for (got,), v in zip(iv, vols):
        assert got == pytest.approx(v, abs=1e-8)
    back = f(100.0, 95.0, 0.5, 0.03, col([r[0] for r in iv]), 300, 0.01, american)
    for (p2,), p in zip(back, prices):
        assert p2 == pytest.approx(p, rel=1e-8)


def test_iv_defaults_call_american_1000_steps(client):
    p = F.BOPM_CALL(100.0, 100.0, 1.0, 0.05, 0.25, 1000)
    assert F.BOPM_IV(p, 100.0, 100.0, 1.0, 0.05) == pytest.approx(0.25, abs=1e-8)


# ---- the cache and the daemon ------------------------------------------------------------

def test_identical_calls_hit_the_cache(client, monkeypatch):
    args = (100.0, col([90.0, 100.0]), 1.0, 0.05, 0.2, 40)
    first = F.BOPM_PUT(*args)
    assert F.BOPM_PUT(*args) == first
    assert F.BOPM_PUT(100, 100, 1, 0.05, 0.2, 40) == F.BOPM_PUT(100, 100, 1, 0.05, 0.2, 40)
    assert F.BOPM_PUT(100, col([90, 100]), 1, 0.05, 0.2, 40, 0, "american") == first  # same canonical request
    assert len(client.calls) == 2
    F.clear_cache()
    F.BOPM_PUT(*args)
    assert len(client.calls) == 3
    monkeypatch.setenv("OPTIOND_CACHE", "0")
    F.BOPM_PUT(*args)
    F.BOPM_PUT(100, 100, 1, 0.05, 0.2, 40)
    assert len(client.calls) == 5
    assert F.cache_info()["enabled"] is False


def test_cache_is_bounded():
    c = F._Cache(max_entries=3, max_rows=10)
    for i in range(5):
        c.put(i, i, 2)
    assert c.info()["entries"] == 3 and c.get(0) is None and c.get(4) == 4
    c.put("big", 0, 9)
    assert c.info()["rows"] <= 10
    c.put("huge", 0, 11)
    assert c.get("huge") is None


def test_daemon_down_prices_in_process(monkeypatch, tmp_path):
    real = Client(connection_file=tmp_path / "no-daemon.json", timeout=0.5, retries=0)
    seen = []

    class Spy:
        def price_table(self, *a, **k):
            res = real.price_table(*a, **k)
            seen.append(res.via)
            return res

    monkeypatch.setattr(pricing, "_client", lambda: Spy())
    out = F.BOPM_PUT(100.0, col([95.0, 105.0]), 1.0, 0.05, 0.2, 100, 0.0, False)
    assert seen == ["in-process"]
    for (got,), k in zip(out, (95.0, 105.0)):
        assert got == pytest.approx(crr_ref("put", 100.0, k, 1.0, 0.05, 0.2, 100), rel=1e-12)
    # with the fall-back off, a clear message instead
    monkeypatch.setenv("OPTIOND_FALLBACK", "0")
    monkeypatch.setattr(pricing, "_client", lambda: real)
    out = F.BS_CALL(100.0, 100.0, 1.0, 0.05, 0.2)
    assert is_error(out) and "no optiond daemon is running" in out and "optiond serve" in out
    real.close()


# ---- the function table, the decorators and the VBA ------------------------------------

def test_table_drives_the_functions():
    assert [f.name for f in table.FUNCTIONS] == ["BOPM_PUT", "BOPM_CALL", "BS_PUT", "BS_CALL", "BS_IV", "BS_GREEKS",
                                                 "BOPM_IV", "BOPM_GREEKS",
                                                 "AMERICAN_PUT", "AMERICAN_CALL", "AMERICAN_IV", "MLMC_CALL", "MLMC_PUT", "MLMC_ASIAN_CALL", "MLMC_DIGITAL_CALL",
                                                 "MLMC_STDERR", "HESTON_CALL", "HESTON_PUT", "PARITY_FORWARD",
                                                 "SURFACE_FIT", "SURFACE_VOL", "SURFACE_PRICE", "OPTIOND_CURVE",
                                                 "OPTIOND_DIVIDENDS", "OPTIOND_HESTON", "HESTON_FIT", "OPTIOND_OBJECTS",
                                                 "OPTIOND_ERROR"]
    assert set(F.WORKSHEET_FUNCTIONS) == set(F.formulas_functions()) == {f.name for f in table.FUNCTIONS}
    for spec in table.FUNCTIONS:
        f = F.WORKSHEET_FUNCTIONS[spec.name]
        assert f.__doc__ == spec.description and len(spec.description) <= LIMIT
        assert all(a.doc and len(a.doc) <= LIMIT and a.name != "caller" for a in spec.args)
    assert table.BY_NAME["BOPM_PUT"].signature() == ("BOPM_PUT(S, K, T, r, sigma, N, [q], [american], [div_times], "
                                                      "[div_amounts], [extrapolate], [valuation])")
    assert table.BY_NAME["BOPM_IV"].signature() == ("BOPM_IV(price, S, K, T, r, [q], [kind], [N], [american], "
                                                    "[div_times], [div_amounts], [extrapolate], [valuation])")
    assert table.BY_NAME["BOPM_GREEKS"].signature() == ("BOPM_GREEKS(S, K, T, r, sigma, N, [q], [kind], [american], "
                                                        "[div_times], [div_amounts], [extrapolate], [valuation], "
                                                        "[units], [header])")
    assert table.BY_NAME["BS_IV"].signature() == "BS_IV(price, S, K, T, r, [q], [kind], [valuation])"
    assert table.BY_NAME["BS_GREEKS"].signature() == ("BS_GREEKS(S, K, T, r, sigma, [q], [kind], [valuation], [units], "
                                                      "[header])")
    assert table.BY_NAME["AMERICAN_PUT"].signature() == "AMERICAN_PUT(S, K, T, r, sigma, [q], [accuracy], [valuation])"
    assert table.BY_NAME["AMERICAN_IV"].signature() == ("AMERICAN_IV(price, S, K, T, r, [q], [kind], [accuracy], "
                                                        "[valuation])")
    assert "## `BS_CALL(S, K, T, r, sigma, [q], [valuation])`" in generate.reference()
    assert table.BY_NAME["HESTON_PUT"].signature() == ("HESTON_PUT(S, K, T, r, q, v0, [kappa], [theta], [xi], [rho], "
                                                       "[american], [scheme], [valuation])")
    assert table.BY_NAME["OPTIOND_OBJECTS"].signature() == "OPTIOND_OBJECTS()"
    assert table.BY_NAME["HESTON_FIT"].signature() == ("HESTON_FIT(name, chain_range, [quote_time], [rate], "
                                                       "[settlement], [feller])")


def test_decorate_rejects_a_signature_that_disagrees_with_the_table():
    def BS_PUT(S, K, T, r, vol, q=None):
        return None

    def identity(*a, **k):
        return lambda f: f

    with pytest.raises(TypeError):
        table.decorate(table.BY_NAME["BS_PUT"], BS_PUT, func=identity, arg=identity)


def test_xlwings_metadata_from_the_table():
    """xlwings' own decorators (as on Windows) carry the table's category and wizard texts."""
    with generate._xlwings_udfs() as udfs:
        for spec in table.FUNCTIONS:
            f = generate._copy_function(F.WORKSHEET_FUNCTIONS[spec.name])
            f = table.decorate(spec, f, func=udfs.xlfunc, arg=udfs.xlarg)
            xf = f.__xlfunc__
            assert xf["category"] == "optiond" and xf["ret"]["doc"] == spec.description
            assert [a["doc"] for a in xf["args"]] == [a.doc for a in spec.args]
            assert [("optional" in a) for a in xf["args"]] == [a.optional for a in spec.args]
            assert all(a["options"] == {"ndim": 2, "err_to_str": True} for a in xf["args"])
    import sys

    assert "pythoncom" not in sys.modules or sys.platform == "win32"


def test_vba_golden_files_are_current():
    assert generate.VBA_UDF_FILE.read_text(encoding="utf-8") == generate.vba_udf_module(), \
        "regenerate: python -m optiond.addin.generate --write-vba"
    assert generate.VBA_REGISTER_FILE.read_text(encoding="utf-8") == generate.vba_register_module()
    vba = generate.vba_udf_module()
    for spec in table.FUNCTIONS:
        assert f"Function {spec.name}(" in vba
        assert f'XLPy.CallUDF("{table.UDF_MODULE}", "{spec.name}"' in vba
    assert ("Function BOPM_IV(price, S, K, T, r, Optional q, Optional kind, Optional N, Optional american, "
            "Optional div_times, Optional div_amounts, Optional extrapolate, Optional valuation)") in vba
    assert "Function AMERICAN_CALL(S, K, T, r, sigma, Optional q, Optional accuracy, Optional valuation)" in vba


# ---- small requests priced in this process; one cell by the short path -------------------------

@pytest.mark.parametrize("call,args,local", [
    (F.BOPM_PUT, (100.0, 95.0, 0.5, 0.03, 0.25, 100), True),           # 5,151 tree nodes
    (F.BOPM_CALL, (100.0, 95.0, 0.5, 0.03, 0.25, 630, 0.01), True),    # 199,396
    (F.BOPM_CALL, (100.0, 95.0, 0.5, 0.03, 0.25, 640, 0.01), False),   # 205,761: over 2e5
    (F.BS_PUT, (100.0, 95.0, 0.5, 0.03, 0.25), True),
    (F.BOPM_PUT, (col([100.0, 101.0, 102.0]), 95.0, 0.5, 0.03, 0.25, 200), True),   # 3 x 20,301
    (F.BOPM_PUT, (col(np.linspace(90, 110, 20)), 95.0, 0.5, 0.03, 0.25, 200), False),  # 406,020
    (F.MLMC_CALL, (100.0, 100.0, 1.0, 0.05, 0.2, 0.05), False),        # MLMC: always the daemon
])
def test_small_requests_are_priced_here_with_the_daemons_numbers(client, monkeypatch, call, args, local):
    monkeypatch.delenv("OPTIOND_LOCAL_NODES")  # the default, 2e5 tree nodes
    assert F.LOCAL_MAX_NODES == 2e5
    got = call(*args)
    assert (client.calls == []) == local
    monkeypatch.setenv("OPTIOND_LOCAL_NODES", "0")  # everything through the client (the daemon's engine)
    F.clear_cache()
    assert call(*args) == got  # same bits either way
    assert len(client.calls) == (1 if local else 2)


def test_local_pricing_threshold_is_a_setting(client, monkeypatch):
    monkeypatch.setenv("OPTIOND_LOCAL_NODES", "1e9")
    F.BOPM_PUT(100.0, 95.0, 0.5, 0.03, 0.25, 5000)  # 12.5 M nodes, under 1e9
    assert client.calls == []
    monkeypatch.setenv("OPTIOND_LOCAL_NODES", "not a number")  # the default then
    F.BOPM_PUT(100.0, 96.0, 0.5, 0.03, 0.25, 5000)
    assert client.calls == [("price_table", 1)]


@pytest.mark.parametrize("name", ["BOPM_PUT", "BOPM_CALL", "BS_PUT", "BS_CALL"])
@pytest.mark.parametrize("cell", [
    (100.0, 95.0, 0.5, 0.03, 0.25, 200, 0.02, False),
    (100, 105, 2, 0.0, 0.6, 1, None, True),               # N = 1, empty q
    (100.0, 100.0, 1.0, 0.5, 0.001, 100, 0.0, True),       # CRR p outside [0, 1]: the row's text
    (100.0, -5.0, 1.0, 0.05, 0.2, 100, 0.0, True),         # K <= 0: the schema's text
    (100.0, 100.0, 1.0, 0.05, 0.2, 100.5, 0.0, True),      # N not whole
    (100.0, 100.0, 1.0, 0.05, 0.2, 1e8, 0.0, True),        # N over the schema's limit
    (100.0, "abc", 1.0, 0.05, 0.2, 100, 0.0, True),        # text for a number
    (100.0, 100.0, None, 0.05, 0.2, 100, 0.0, "TRUE"),     # a required cell empty
])
def test_one_cell_short_path_answers_as_the_general_path(client, name, cell):
    spec = table.BY_NAME[name]
    values = cell[:len(spec.args)] if name.startswith("BOPM") else cell[:5] + cell[6:7]
    short = F.evaluate(spec, values)
    F.clear_cache()
    general = F._compute(spec, *F._read_cells(spec, values))[0]
    assert short == general or (isinstance(short, float) and math.isnan(short) and math.isnan(general))


# ---- PARITY_FORWARD: a put-call parity fit of a pasted strip ---------------------------------

def _bs_strip(S, T, r, q, strikes):
    """European call and put prices of a strip by the closed form (a skewed smile)."""
    from optiond.kernels.black_scholes import bs_price_greeks

    k = np.asarray(strikes, dtype=float)
    vols = 0.22 - 0.15 * np.log(k / S)
    return (bs_price_greeks(1, S, k, T, r, q, vols)["price"], bs_price_greeks(0, S, k, T, r, q, vols)["price"])


@pytest.mark.parametrize("S,T,r,q", [(100.0, 0.5, 0.045, 0.012), (5000.0, 1.75, 0.031, 0.016), (42.0, 0.05, 0.0, 0.03)])
def test_parity_forward_gives_back_forward_and_discount(S, T, r, q):
    """A strip priced by Black-Scholes-Merton with known r and q: F = S e^((r-q)T) and
    D = e^(-rT) back to 1e-9 relative (both fitted), F alone when the rate is given; a row
    and a column strip give the same answer, and no request is sent."""
    strikes = np.linspace(0.8 * S, 1.2 * S, 9)
    calls, puts = _bs_strip(S, T, r, q, strikes)
    F_true, D_true = S * math.exp((r - q) * T), math.exp(-r * T)

    class NoClient:
        def __getattr__(self, name):
            raise AssertionError("PARITY_FORWARD is computed in this process")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pricing, "_client", lambda: NoClient())
        row = F.PARITY_FORWARD([strikes.tolist()], [calls.tolist()], [puts.tolist()], T)
        column = F.PARITY_FORWARD(col(strikes), col(calls), col(puts), T)
        given = F.PARITY_FORWARD(col(strikes), col(calls), col(puts), T, r)
    assert len(row) == 1 and len(row[0]) == 2
    (f, d), (fc, dc), (fg, dg) = row[0], column[0], given[0]
    assert f == pytest.approx(F_true, rel=1e-9) and d == pytest.approx(D_true, rel=1e-9)
    assert (fc, dc) == pytest.approx((f, d), rel=1e-12)
    assert fg == pytest.approx(F_true, rel=1e-9) and dg == D_true
    # with the rate, one strike is enough
    one = F.PARITY_FORWARD([[strikes[4]]], [[calls[4]]], [[puts[4]]], T, r)[0]
    assert one[0] == pytest.approx(F_true, rel=1e-9)


def test_parity_forward_skips_strikes_with_an_empty_cell_and_a_wrong_rate_moves_only_f():
    S, T, r, q = 100.0, 0.5, 0.04, 0.01
    strikes = np.linspace(85, 115, 7)
    calls, puts = _bs_strip(S, T, r, q, strikes)
    c = calls.tolist()
    c[2] = None  # a missing quote
    f, d = F.PARITY_FORWARD(col(strikes), col(c), col(puts), T)[0]
    assert f == pytest.approx(S * math.exp((r - q) * T), rel=1e-9) and d == pytest.approx(math.exp(-r * T), rel=1e-9)
    # C - P = D (F - K) at every strike: with D off by a factor, F solves the fit in least squares
    f_wrong, d_wrong = F.PARITY_FORWARD(col(strikes), col(calls), col(puts), T, r + 0.01)[0]
    assert d_wrong == math.exp(-(r + 0.01) * T)
    y = calls - puts
    assert f_wrong == pytest.approx(float(np.mean(strikes + y / d_wrong)), rel=1e-9)  # equal weights, no outlier


@pytest.mark.parametrize("args,text", [
    (([[90, 100, 110]], [[12, 5]], [[2, 5, 12]], 0.5), "#optiond: strikes, call_mids and put_mids must have the same "
                                                        "length, got 3, 2 and 3"),
    (([[90, 100]], [[12, 5]], [[2, 5]], 0.5), "#optiond: 2 two-sided strike pair(s); the parity fit needs 3 (or give "
                                              "rate to fit the forward alone)"),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, 5, 12]], 0), "#optiond: T must be > 0, got 0"),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, 5, 12]], -1.5), "#optiond: T must be > 0, got -1.5"),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, 5, 12]], "abc"), '#optiond: T must be a number, got "abc"'),
    (([[90, 100, 110]], [[12, "x", 2]], [[2, 5, 12]], 0.5), '#optiond: call_mids must be a number, got "x"'),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, "#N/A", 12]], 0.5), "#optiond: put_mids is #N/A"),
    (([[90, -100, 110]], [[12, 5, 2]], [[2, 5, 12]], 0.5), "#optiond: strikes must be > 0, got -100"),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, -5, 12]], 0.5), "#optiond: put_mids must be >= 0, got -5"),
    (([[90, 100], [110, 120]], [[12, 5, 2, 1]], [[2, 5, 12, 20]], 0.5), "#optiond: strikes must be one row or one "
                                                                          "column, got 2x2"),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, 5, 12]], [[0.5, 1.0]]), "#optiond: T must be a single cell"),
    (([[90, 100, 100]], [[12, 5, 5]], [[2, 5, 5]], 0.5), "#optiond: strikes has a strike twice"),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, 5, 12]], None), "#optiond: T is required (empty cell)"),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, 5, 12]], 0.5, "x"), '#optiond: rate must be a number, got "x"'),
    (([[90, 100, 110]], [[12, 5, 2]], [[2, 5, 12]], 0.5, float("nan")), "#optiond: rate must be a finite number, "
                                                                         "got nan"),
])
def test_parity_forward_bad_input_gives_a_short_reason(args, text):
    got = F.PARITY_FORWARD(*args)
    assert got == text and len(got) <= table.EXCEL_TEXT_LIMIT


def test_parity_forward_in_the_table_and_reference():
    spec = table.BY_NAME["PARITY_FORWARD"]
    assert spec.signature() == "PARITY_FORWARD(strikes, call_mids, put_mids, T, [rate], [valuation])"
    assert spec.op == "forward" and spec.args[-1].optional and spec.args[-1].default is None
    ref = generate.reference()
    assert "## `PARITY_FORWARD(strikes, call_mids, put_mids, T, [rate], [valuation])`" in ref
    assert "| `rate` | none |" in ref


def test_the_addin_modules_import_without_a_cycle():
    """Each add-in module imports only the ones below it: table <- cells <- checks <- pricing
    <- functions <- generate (VBA and reference generation left the table to break the cycle)."""
    import ast
    from pathlib import Path

    import optiond.addin as pkg

    folder = Path(pkg.__file__).parent
    deps = {}
    for p in folder.glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names |= {node.module} if node.module else {a.name for a in node.names}
        deps[p.stem] = {n.split(".")[0] for n in names} & {q.stem for q in folder.glob("*.py")}

    def reaches(a, b, seen=()):
        return any(d == b or (d not in seen and reaches(d, b, seen + (d,))) for d in deps.get(a, ()))

    assert not [m for m in deps if reaches(m, m)]
    assert not deps["table"] & {"functions", "generate", "pricing", "checks", "cells"}
