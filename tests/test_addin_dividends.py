"""Cash dividends in the Excel functions: the optional ``div_times`` and ``div_amounts`` of
BOPM_PUT, BOPM_CALL, BOPM_IV and BOPM_GREEKS, called as plain Python.

The reference is the CPU kernel itself, :func:`optiond.kernels.binomial.cpu.crr_batch` with
the schedule, called here directly (no table, no request, no daemon). The requests go to a
counting adapter over the engine, to the real daemon of the test session, or to a client with
no daemon behind it (the in-process fall-back).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from optiond.addin import functions as F
from optiond.addin import pricing, table
from optiond.daemon.client import Client
from optiond.kernels.binomial.cpu import crr_batch

from addin_support import CountingClient, _fresh_cache, client, col, is_error  # noqa: F401

S, K, T, R, SIG, Q = 100.0, 100.0, 1.0, 0.05, 0.3, 0.01
TIMES, AMOUNTS = [0.25, 0.5, 0.75], [1.0, 1.25, 1.5]


def ref(kind: str, american: bool, N: int, times, amounts, **kw) -> np.ndarray:
    """(6, n): price, delta, gamma, theta, vega, rho of the CRR kernel with the schedule."""
    strike = np.atleast_1d(np.asarray(kw.get("K", K), dtype=np.float64))
    return crr_batch(np.full(strike.size, 1 if kind == "call" else 0, dtype=np.int8),
                     np.full(strike.size, int(american), dtype=np.int8), kw.get("S", S), strike, kw.get("T", T), R,
                     kw.get("q", Q), kw.get("sigma", SIG), N, dividend_times=np.asarray(times, dtype=np.float64),
                     dividend_amounts=np.asarray(amounts, dtype=np.float64))


class RecordingClient(CountingClient):
    """The counting adapter, keeping each request's columns."""

    def __init__(self):
        super().__init__()
        self.columns: list[dict] = []

    def price_table(self, columns, method=None, **kw):
        self.columns.append(dict(columns))
        return super().price_table(columns, method, **kw)

    def implied_vol(self, prices, columns, method=None, **kw):
        self.columns.append(dict(columns))
        return super().implied_vol(prices, columns, method, **kw)


@pytest.fixture
def recording(monkeypatch) -> RecordingClient:
    c = RecordingClient()
    monkeypatch.setattr(pricing, "_client", lambda: c)
    return c


# ---- values against the kernel ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["put", "call"])
@pytest.mark.parametrize("american", [True, False])
def test_prices_equal_the_kernel_with_the_schedule(recording, kind, american):
    f = F.BOPM_CALL if kind == "call" else F.BOPM_PUT
    want = ref(kind, american, 300, TIMES, AMOUNTS)[0, 0]
    got = f(S, K, T, R, SIG, 300, Q, american, [TIMES], [AMOUNTS])  # a row of ex-dates, a row of amounts
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    F.clear_cache()
    assert f(S, K, T, R, SIG, 300, Q, american, col(TIMES), col(AMOUNTS)) == got  # columns: the same schedule
    # the schedule travels as the engine's (m,) columns, with the other columns as they were
    cols = recording.columns[-1]
    assert cols["dividend_times"].shape == (3,) and cols["dividend_times"].tolist() == TIMES
    assert cols["dividend_amounts"].tolist() == AMOUNTS
    # the dividends matter: the price differs from the one without them
    assert abs(got - f(S, K, T, R, SIG, 300, Q, american)) > 0.1


def test_one_dividend_in_single_cells_and_blank_cells_pad(recording):
    want = ref("put", True, 200, [0.5], [2.0])[0, 0]
    assert F.BOPM_PUT(S, K, T, R, SIG, 200, Q, True, 0.5, 2.0) == pytest.approx(want, rel=1e-12, abs=1e-12)
    F.clear_cache()
    # blanks anywhere in the two strips (both blank at a position) are padding
    assert F.BOPM_PUT(S, K, T, R, SIG, 200, Q, True, [[None, 0.5, None, ""]], [[None, 2.0]]) == \
        pytest.approx(want, rel=1e-12, abs=1e-12)
    # eight dividends, the limit
    times = np.linspace(0.1, 0.8, 8).tolist()
    want8 = ref("call", True, 200, times, [0.5] * 8)[0, 0]
    assert F.BOPM_CALL(S, K, T, R, SIG, 200, Q, True, [times], [[0.5] * 8]) == pytest.approx(want8, rel=1e-12)


def test_a_range_of_options_shares_the_one_schedule_in_one_request(recording):
    strikes = [80.0, 100.0, 120.0]
    got = F.BOPM_PUT(S, col(strikes), T, R, SIG, 250, Q, True, [TIMES], [AMOUNTS])
    want = ref("put", True, 250, TIMES, AMOUNTS, K=strikes)[0]
    assert np.shape(got) == (3, 1)
    np.testing.assert_allclose([r[0] for r in got], want, rtol=1e-12, atol=1e-12)
    assert recording.calls == [("price_table", 3)]
    # a grid of strikes x volatilities: the schedule still does not broadcast (3 x 2 options)
    vols = [0.2, 0.4]
    grid = F.BOPM_PUT(S, col(strikes), T, R, [vols], 250, Q, True, col(TIMES), col(AMOUNTS))
    assert np.shape(grid) == (3, 2)
    for j, v in enumerate(vols):
        np.testing.assert_allclose([r[j] for r in grid], ref("put", True, 250, TIMES, AMOUNTS, K=strikes, sigma=v)[0],
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["put", "call"])
def test_greeks_equal_the_kernel_with_the_schedule(recording, kind):
    strikes = [90.0, 110.0]
    got = F.BOPM_GREEKS(S, col(strikes), T, R, SIG, 200, Q, kind, True, [TIMES], [AMOUNTS])
    want = ref(kind, True, 200, TIMES, AMOUNTS, K=strikes)[1:]  # delta, gamma, theta, vega, rho
    assert np.shape(got) == (2, len(table.GREEK_COLUMNS))
    np.testing.assert_allclose(np.array(got, dtype=float).T, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind,american", [("put", True), ("call", False), ("call", True)])
def test_iv_round_trip_with_dividends(recording, kind, american):
    vols = [0.15, 0.3, 0.6]
    prices = [float(ref(kind, american, 300, TIMES, AMOUNTS, sigma=v)[0, 0]) for v in vols]
    iv = F.BOPM_IV(col(prices), S, K, T, R, Q, kind, 300, american, [TIMES], [AMOUNTS])
    np.testing.assert_allclose([r[0] for r in iv], vols, atol=1e-7)
    # the schedule is in the request: without it the same prices read as other volatilities
    plain = F.BOPM_IV(col(prices), S, K, T, R, Q, kind, 300, american)
    assert all(abs(a[0] - b[0]) > 1e-3 for a, b in zip(iv, plain) if not is_error(b[0]))


# ---- bad schedules: a short reason in the cells it concerns -------------------------------------

@pytest.mark.parametrize("times,amounts,needle", [
    ([[0.25, 0.5]], [[-1.0, 1.0]], "#optiond: div_amounts: dividend 1: must be a finite amount >= 0"),
    ([[0.5, 0.25]], [[1.0, 1.0]], "#optiond: div_times: ex-dates must be in ascending order"),
    ([[0.25, 1.5]], [[1.0, 1.0]], "#optiond: div_times: dividend 2: ex-date after the expiry"),
    ([[-0.1]], [[1.0]], "#optiond: div_times: dividend 1: ex-date before the valuation"),
    ([np.linspace(0.1, 0.9, 9).tolist()], [[1.0] * 9], "#optiond: div_times: at most 8 dividends, got 9"),
    ([[0.25, 0.5]], [[60.0, 50.0]], "#optiond: div_amounts: dividends before expiry sum to 110, not below the spot"),
    ([[0.25, 0.5]], None, "#optiond: div_amounts is missing"),
    (None, [[1.0, 1.0]], "#optiond: div_times is missing"),
    ([[0.25, "next year"]], [[1.0, 1.0]], '#optiond: div_times must be a number, got "next year"'),
    ([[0.25, 0.5]], [[1.0, "#N/A"]], "#optiond: div_amounts is #N/A"),
    ([[0.25, 0.3], [0.5, 0.6]], [[1.0, 1.0]], "#optiond: div_times must be one row or one column"),
])
@pytest.mark.parametrize("name", ["BOPM_PUT", "BOPM_GREEKS", "BOPM_IV"])
def test_a_bad_schedule_gives_its_reason_in_every_cell_it_concerns(recording, name, times, amounts, needle):
    strikes = col([95.0, 105.0])
    if name == "BOPM_PUT":
        got = F.BOPM_PUT(S, strikes, T, R, SIG, 100, Q, True, times, amounts)
    elif name == "BOPM_GREEKS":
        got = F.BOPM_GREEKS(S, strikes, T, R, SIG, 100, Q, "put", True, times, amounts)
    else:
        got = F.BOPM_IV(10.0, S, strikes, T, R, Q, "put", 100, True, times, amounts)
    cells = [c for row in got for c in row]
    assert all(is_error(c) and c.startswith(needle) for c in cells), cells


def test_an_ex_date_after_one_expiry_errors_only_that_row(recording):
    expiries = col([1.0, 0.4, 0.75])
    got = F.BOPM_CALL(S, K, expiries, R, SIG, 200, Q, True, [[0.3, 0.5]], [[1.0, 1.0]])
    assert is_error(got[1][0]) and got[1][0].startswith("#optiond: div_times: dividend 2: ex-date after the expiry")
    for i, t in ((0, 1.0), (2, 0.75)):
        assert got[i][0] == pytest.approx(ref("call", True, 200, [0.3, 0.5], [1.0, 1.0], T=t)[0, 0], rel=1e-12)
    # a sum above one row's spot errors that row only
    spots = col([100.0, 1.5])
    got = F.BOPM_PUT(spots, K, T, R, SIG, 200, Q, True, 0.5, 2.0)
    assert got[0][0] == pytest.approx(ref("put", True, 200, [0.5], [2.0])[0, 0], rel=1e-12)
    assert is_error(got[1][0]) and "div_amounts" in got[1][0] and "not below the spot 1.5" in got[1][0]


def test_a_bad_cell_of_its_own_comes_before_the_schedules_reason(recording):
    got = F.BOPM_PUT(S, col(["abc", 100.0]), T, R, SIG, 100, Q, True, [[0.5]], [["x"]])
    assert got[0][0].startswith("#optiond: K ") and got[1][0].startswith("#optiond: div_amounts must be a number")


# ---- without the new arguments: as before; the cache keys the schedule ---------------------------

def test_without_a_schedule_the_request_is_the_one_without_dividends(recording):
    a = F.BOPM_PUT(S, col([90.0, 110.0]), T, R, SIG, 150, Q, True)
    F.clear_cache()
    b = F.BOPM_PUT(S, col([90.0, 110.0]), T, R, SIG, 150, Q, True, None, None)
    F.clear_cache()
    c = F.BOPM_PUT(S, col([90.0, 110.0]), T, R, SIG, 150, Q, True, [[None, None]], [[None]])
    assert a == b == c
    assert all("dividend_times" not in cols and "dividend_amounts" not in cols for cols in recording.columns)
    plain = crr_batch(np.zeros(2, np.int8), np.ones(2, np.int8), S, np.array([90.0, 110.0]), T, R, Q, SIG, 150)
    assert [r[0] for r in a] == plain[0].tolist()  # bit for bit


def test_the_cache_keys_the_schedule(recording):
    one = F.BOPM_PUT(S, K, T, R, SIG, 120, Q, True, 0.5, 1.0)
    two = F.BOPM_PUT(S, K, T, R, SIG, 120, Q, True, 0.5, 2.0)
    assert one != two and len(recording.calls) == 2
    assert F.BOPM_PUT(S, K, T, R, SIG, 120, Q, True, 0.5, 1.0) == one and len(recording.calls) == 2  # a hit
    assert F.BOPM_PUT(S, col([K]), T, R, SIG, 120, Q, True, [[0.5]], [[2.0]]) == [[two]]
    assert len(recording.calls) == 2  # the range's request is the one-cell request: a hit too
    three = F.BOPM_PUT(S, col([K]), T, R, SIG, 120, Q, True, [[0.5, 0.6]], [[2.0, 1.0]])
    assert three[0][0] != two and len(recording.calls) == 3


def test_the_work_limit_still_refuses_a_tree_too_large(recording):
    got = F.BOPM_PUT(S, K, T, R, SIG, 300_000, Q, True, 0.5, 1.0)
    assert is_error(got) and "worksheet limit" in got and recording.calls == []


# ---- through the daemon and its in-process fall-back ----------------------------------------------

def test_the_daemon_prices_the_schedule(daemon, monkeypatch):
    monkeypatch.setenv("OPTIOND_FALLBACK", "0")  # the daemon's answers, not the in-process fall-back
    strikes = [90.0, 100.0, 110.0]
    want = ref("put", True, 400, TIMES, AMOUNTS, K=strikes)
    got = F.BOPM_PUT(S, col(strikes), T, R, SIG, 400, Q, True, [TIMES], [AMOUNTS])
    np.testing.assert_allclose([r[0] for r in got], want[0], rtol=1e-12, atol=1e-12)
    greeks = F.BOPM_GREEKS(S, col(strikes), T, R, SIG, 400, Q, "put", True, col(TIMES), col(AMOUNTS))
    np.testing.assert_allclose(np.array(greeks, dtype=float).T, want[1:], rtol=1e-12, atol=1e-12)
    iv = F.BOPM_IV(col(want[0].tolist()), S, col(strikes), T, R, Q, "put", 400, True, [TIMES], [AMOUNTS])
    np.testing.assert_allclose([r[0] for r in iv], SIG, atol=1e-7)
    one = F.BOPM_CALL(S, K, T, R, SIG, 400, Q, True, 0.5, 1.0)  # one cell: scalars and a (1,) schedule
    assert one == pytest.approx(ref("call", True, 400, [0.5], [1.0])[0, 0], rel=1e-12)
    bad = F.BOPM_CALL(S, K, col([1.0, 0.25]), R, SIG, 400, Q, True, 0.5, 1.0)
    assert not is_error(bad[0][0]) and bad[1][0].startswith("#optiond: div_times: dividend 1: ex-date after")


def test_no_daemon_prices_the_schedule_in_process(monkeypatch, tmp_path):
    real = Client(connection_file=tmp_path / "no-daemon.json", timeout=0.5, retries=0)
    monkeypatch.setattr(pricing, "_client", lambda: real)
    try:
        got = F.BOPM_PUT(S, col([95.0, 105.0]), T, R, SIG, 150, Q, True, [TIMES], [AMOUNTS])
        np.testing.assert_allclose([r[0] for r in got], ref("put", True, 150, TIMES, AMOUNTS, K=[95.0, 105.0])[0],
                                   rtol=1e-12, atol=1e-12)
        monkeypatch.setenv("OPTIOND_FALLBACK", "0")
        F.clear_cache()
        out = F.BOPM_PUT(S, K, T, R, SIG, 150, Q, True, [TIMES], [AMOUNTS])
        assert is_error(out) and "no optiond daemon is running" in out
    finally:
        real.close()


def test_small_requests_priced_here_take_the_schedule(monkeypatch, recording):
    monkeypatch.setenv("OPTIOND_LOCAL_NODES", "1e6")
    got = F.BOPM_CALL(S, K, T, R, SIG, 100, Q, True, [TIMES], [AMOUNTS])
    assert recording.calls == []  # priced in this process
    assert got == pytest.approx(ref("call", True, 100, TIMES, AMOUNTS)[0, 0], rel=1e-12, abs=1e-12)
    assert not math.isnan(got)
