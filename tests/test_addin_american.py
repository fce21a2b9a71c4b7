"""The spectral American functions AMERICAN_PUT, AMERICAN_CALL and AMERICAN_IV, and the
``extrapolate`` argument (BBSR) of BOPM_PUT, BOPM_CALL, BOPM_IV and BOPM_GREEKS, called as
plain Python.

The references are the CPU kernels themselves, called here directly (no table, no request, no
daemon): :func:`optiond.kernels.spectral.cpu.alo_batch` (Andersen, Lake & Offengenden 2016)
at the same accuracy setting, and :func:`optiond.kernels.binomial.cpu.crr_batch` with
``extrapolate=True``. The requests go to a counting adapter over the engine, to the real
daemon of the test session, or to a client with no daemon behind it (the in-process
fall-back).
"""

from __future__ import annotations

import numpy as np
import pytest

from optiond.addin import functions as F
from optiond.addin import pricing, table
from optiond.daemon.client import Client
from optiond.kernels.binomial.cpu import crr_batch
from optiond.kernels.spectral.cpu import alo_batch

from addin_support import CountingClient, _fresh_cache, client, col, is_error  # noqa: F401

S, K, T, R, SIG, Q = 100.0, 100.0, 1.0, 0.05, 0.25, 0.02


def alo(kind: str, accuracy: str = "accurate", **kw) -> np.ndarray:
    """ALO prices of American options, K a scalar or a list (the other inputs scalars)."""
    strike = np.atleast_1d(np.asarray(kw.get("K", K), dtype=np.float64))
    n = strike.size
    full = lambda x: np.full(n, float(x))  # noqa: E731
    return alo_batch(np.full(n, 1 if kind == "call" else 0, dtype=np.int8), full(kw.get("S", S)), strike,
                     full(kw.get("T", T)), full(kw.get("r", R)), full(kw.get("q", Q)), full(kw.get("sigma", SIG)),
                     accuracy, greeks=False)[0]


def bbsr(kind: str, american: bool, N: int, greeks: bool = False, **kw) -> np.ndarray:
    """(6, n) of the extrapolated CRR kernel (K a scalar or a list)."""
    strike = np.atleast_1d(np.asarray(kw.get("K", K), dtype=np.float64))
    return crr_batch(np.full(strike.size, 1 if kind == "call" else 0, dtype=np.int8),
                     np.full(strike.size, int(american), dtype=np.int8), S, strike, T, R, Q,
                     kw.get("sigma", SIG), N, greeks=greeks, extrapolate=True)


# ---- AMERICAN_PUT, AMERICAN_CALL ----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["put", "call"])
@pytest.mark.parametrize("accuracy", [None, "fast", "accurate", "high-precision"])
def test_one_cell_equals_the_alo_kernel(client, kind, accuracy):
    f = F.AMERICAN_CALL if kind == "call" else F.AMERICAN_PUT
    q = 0.06 if kind == "call" else Q  # a call with q > r: early exercise matters
    got = f(S, K, T, R, SIG, q, accuracy)
    want = alo(kind, accuracy or "accurate", q=q)[0]
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert client.calls == [("price_table", 1)]
    m = client.methods[0]
    assert m.name == "spectral" and m.accuracy == (accuracy or "accurate") and not m.greeks


def test_a_range_is_one_request_and_equals_the_kernel(client):
    strikes = [80.0, 95.0, 100.0, 110.0, 130.0]
    got = F.AMERICAN_PUT(S, col(strikes), T, R, SIG, Q, "high-precision")
    np.testing.assert_allclose([r[0] for r in got], alo("put", "high-precision", K=strikes), rtol=1e-12, atol=1e-12)
    assert client.calls == [("price_table", 5)]
    # a grid: a column of strikes against a row of volatilities, one request
    vols = [0.15, 0.45]
    grid = F.AMERICAN_CALL(S, col(strikes), T, R, [vols], 0.06)
    assert np.shape(grid) == (5, 2) and client.calls[-1] == ("price_table", 10)
    for j, v in enumerate(vols):
        np.testing.assert_allclose([r[j] for r in grid], alo("call", K=strikes, sigma=v, q=0.06), rtol=1e-12,
                                   atol=1e-12)


def test_accuracy_text_is_read_as_the_method_reads_it(client):
    want = alo("put", "high-precision")[0]
    for text in ("high-precision", "High", " HIGH_PRECISION "):
        F.clear_cache()
        assert F.AMERICAN_PUT(S, K, T, R, SIG, Q, text) == pytest.approx(want, rel=1e-12)
    # an empty cell is the default
    assert F.AMERICAN_PUT(S, K, T, R, SIG, Q, "") == pytest.approx(alo("put")[0], rel=1e-12)


@pytest.mark.parametrize("bad", ["medium", 1.0, True, "#N/A"])
def test_a_bad_accuracy_is_a_cell_error_naming_the_argument(client, bad):
    got = F.AMERICAN_PUT(S, K, T, R, SIG, Q, bad)
    assert is_error(got) and got.startswith("#optiond: accuracy ")
    # in a range: only its own cells
    out = F.AMERICAN_PUT(S, K, T, R, SIG, Q, col(["fast", bad]))
    assert not is_error(out[0][0]) and is_error(out[1][0]) and "accuracy" in out[1][0]
    assert client.calls == [("price_table", 1)]  # the bad cell is not sent


def test_several_accuracies_in_a_range_are_one_request_each(client):
    got = F.AMERICAN_PUT(S, K, T, R, SIG, Q, col(["fast", "accurate", "fast"]))
    assert sorted(m.accuracy for m in client.methods) == ["accurate", "fast"]
    assert [r[0] for r in got] == pytest.approx([alo("put", "fast")[0], alo("put")[0], alo("put", "fast")[0]],
                                                rel=1e-12)


def test_the_cache_keys_the_accuracy(client):
    fast = F.AMERICAN_PUT(S, col([K]), T, R, SIG, Q, "fast")
    accurate = F.AMERICAN_PUT(S, col([K]), T, R, SIG, Q, "accurate")
    assert fast != accurate and len(client.calls) == 2
    assert F.AMERICAN_PUT(S, col([K]), T, R, SIG, Q, "fast") == fast and len(client.calls) == 2  # a hit


def test_a_bad_value_is_the_schemas_text_under_the_excel_name(client):
    out = F.AMERICAN_PUT(S, col([K, -5.0]), T, R, SIG, Q)
    assert not is_error(out[0][0]) and out[1][0].startswith("#optiond: K ")


def test_the_work_limit_refuses_a_range_too_large(client):
    # puts with r > 0: the ALO engine's rows (a call with q = 0 is its closed form, and costs that)
    n = int(table.AMERICAN_MAX_WORK / float(table.american_work("accurate", "iv"))) + 1
    got = F.AMERICAN_IV(1.0, S, col([K] * n), T, R, 0.0, "put")
    assert all(is_error(r[0]) and "worksheet limit" in r[0] for r in got) and client.calls == []


# ---- AMERICAN_IV ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["put", "call"])
@pytest.mark.parametrize("accuracy", ["fast", "accurate"])
def test_iv_round_trip(client, kind, accuracy):
    vols = [0.12, 0.3, 0.7]
    q = 0.06 if kind == "call" else Q
    prices = [float(alo(kind, accuracy, sigma=v, q=q)[0]) for v in vols]
    got = F.AMERICAN_IV(col(prices), S, K, T, R, q, kind, accuracy)
    np.testing.assert_allclose([r[0] for r in got], vols, atol=1e-8)
    assert client.calls == [("implied_vol", 3)] and client.methods[0].accuracy == accuracy
    assert client.methods[0].name == "spectral"
    one = F.AMERICAN_IV(prices[1], S, K, T, R, q, kind, accuracy)
    assert one == pytest.approx(0.3, abs=1e-8)


def test_iv_of_a_price_below_intrinsic_is_the_statuss_text(client):
    got = F.AMERICAN_IV(0.5, S, 130.0, T, R, Q, "put")
    assert is_error(got) and "intrinsic" in got


# ---- extrapolate on the BOPM functions -----------------------------------------------------------

@pytest.mark.parametrize("kind", ["put", "call"])
def test_bopm_extrapolate_equals_the_bbsr_kernel_and_differs_from_the_plain_tree(client, kind):
    f = F.BOPM_CALL if kind == "call" else F.BOPM_PUT
    want = bbsr(kind, True, 300)[0, 0]
    got = f(S, K, T, R, SIG, 300, Q, True, None, None, True)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert client.methods[-1].extrapolate is True
    plain = f(S, K, T, R, SIG, 300, Q, True, None, None, False)
    assert plain != got and plain == f(S, K, T, R, SIG, 300, Q, True)  # FALSE is the default
    assert client.methods[-1].extrapolate is False
    strikes = [90.0, 100.0, 110.0]
    rng = f(S, col(strikes), T, R, SIG, 300, Q, True, None, None, "TRUE")
    np.testing.assert_allclose([r[0] for r in rng], bbsr(kind, True, 300, K=strikes)[0], rtol=1e-12, atol=1e-12)


def test_without_extrapolate_the_request_is_bit_for_bit_as_before(client):
    strikes = np.array([90.0, 110.0])
    got = F.BOPM_PUT(S, col(strikes.tolist()), T, R, SIG, 150, Q, True)
    plain = crr_batch(np.zeros(2, np.int8), np.ones(2, np.int8), S, strikes, T, R, Q, SIG, 150)
    assert [r[0] for r in got] == plain[0].tolist()
    assert client.methods[-1] == pricing._method("binomial", False, 150)  # the method of before


def test_bopm_greeks_and_iv_take_extrapolate(client):
    strikes = [90.0, 110.0]
    want = bbsr("put", True, 300, greeks=True, K=strikes)
    got = F.BOPM_GREEKS(S, col(strikes), T, R, SIG, 300, Q, "put", True, None, None, True)
    np.testing.assert_allclose(np.array(got, dtype=float).T, want[1:], rtol=1e-12, atol=1e-12)
    iv = F.BOPM_IV(col(want[0].tolist()), S, col(strikes), T, R, Q, "put", 300, True, None, None, True)
    np.testing.assert_allclose([r[0] for r in iv], SIG, atol=1e-8)
    assert client.methods[-1].extrapolate is True


def test_the_cache_keys_extrapolate(client):
    a = F.BOPM_PUT(S, col([K]), T, R, SIG, 120, Q, True, None, None, True)
    b = F.BOPM_PUT(S, col([K]), T, R, SIG, 120, Q, True, None, None, False)
    assert a != b and len(client.calls) == 2
    assert F.BOPM_PUT(S, col([K]), T, R, SIG, 120, Q, True, None, None, True) == a and len(client.calls) == 2


def test_a_bad_extrapolate_is_a_cell_error_naming_the_argument(client):
    got = F.BOPM_PUT(S, K, T, R, SIG, 100, Q, True, None, None, "maybe")
    assert is_error(got) and got.startswith("#optiond: extrapolate must be TRUE or FALSE")
    assert client.calls == []


def test_one_cell_priced_here_is_extrapolated(monkeypatch, client):
    monkeypatch.setenv("OPTIOND_LOCAL_NODES", "1e9")
    got = F.BOPM_CALL(S, K, T, R, SIG, 200, 0.06, True, None, None, True)
    assert client.calls == []  # priced in this process
    want = crr_batch(np.ones(1, np.int8), np.ones(1, np.int8), S, K, T, R, 0.06, SIG, 200, greeks=False,
                     extrapolate=True)[0, 0]
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


# ---- through the daemon and its in-process fall-back ---------------------------------------------

def test_the_daemon_prices_american_and_extrapolated_cells(daemon, monkeypatch):
    monkeypatch.setenv("OPTIOND_FALLBACK", "0")  # the daemon's answers, not the in-process fall-back
    strikes = [90.0, 100.0, 110.0]
    got = F.AMERICAN_PUT(S, col(strikes), T, R, SIG, Q, "fast")
    np.testing.assert_allclose([r[0] for r in got], alo("put", "fast", K=strikes), rtol=1e-12, atol=1e-12)
    one = F.AMERICAN_CALL(S, K, T, R, SIG, 0.06)
    assert one == pytest.approx(alo("call", q=0.06)[0], rel=1e-12, abs=1e-12)
    iv = F.AMERICAN_IV(col([float(x) for x in alo("put", K=strikes)]), S, col(strikes), T, R, Q, "put")
    np.testing.assert_allclose([r[0] for r in iv], SIG, atol=1e-8)
    bopm = F.BOPM_PUT(S, col(strikes), T, R, SIG, 300, Q, True, None, None, True)
    np.testing.assert_allclose([r[0] for r in bopm], bbsr("put", True, 300, K=strikes)[0], rtol=1e-12, atol=1e-12)
    bopm_one = F.BOPM_PUT(S, K, T, R, SIG, 300, Q, True, None, None, True)
    assert bopm_one == pytest.approx(bbsr("put", True, 300)[0, 0], rel=1e-12, abs=1e-12)


def test_no_daemon_prices_american_cells_in_process(monkeypatch, tmp_path):
    real = Client(connection_file=tmp_path / "no-daemon.json", timeout=0.5, retries=0)
    monkeypatch.setattr(pricing, "_client", lambda: real)
    try:
        got = F.AMERICAN_PUT(S, col([95.0, 105.0]), T, R, SIG, Q)
        np.testing.assert_allclose([r[0] for r in got], alo("put", K=[95.0, 105.0]), rtol=1e-12, atol=1e-12)
        monkeypatch.setenv("OPTIOND_FALLBACK", "0")
        F.clear_cache()
        out = F.AMERICAN_PUT(S, K, T, R, SIG, Q)
        assert is_error(out) and "no optiond daemon is running" in out
    finally:
        real.close()
