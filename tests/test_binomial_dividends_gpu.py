"""Cash dividends on the GPU (``crr_batch_warp_div``, :func:`optiond.kernels.binomial.gpu.crr_batch_gpu`
with a schedule) against the CPU reference :func:`optiond.kernels.binomial.cpu.crr_batch` (the
same recurrence): prices and Greeks to 1e-12 relative, and the front door's routing (marked
``gpu``; skipped without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from optiond import engine
from optiond.kernels import gpu
from optiond.kernels.binomial import cpu as bc
from optiond.kernels.binomial import gpu as bg
from optiond.models import Method

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _need_gpu():
    if not gpu.available():
        pytest.skip("no CuPy or no CUDA GPU")


def _random_book(n: int, seed: int):
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 2, n)
    style = rng.integers(0, 2, n)
    K = rng.uniform(70.0, 130.0, n)
    T = rng.uniform(0.05, 2.0, n)
    r = rng.uniform(-0.01, 0.07, n)
    q = np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0.0, 0.04, n))
    vol = rng.uniform(0.1, 0.6, n)
    N = rng.integers(1, bg.DIV_MAX_STEPS + 1, n)
    N[:6] = [1, 2, 3, 64, 65, bg.DIV_MAX_STEPS]  # the smallest trees, a re-anchoring level, the widest
    N[bc.probability_errors(T, r, q, vol, N)] = 500  # p in [0, 1]
    times = np.full((n, 8), np.nan)
    amounts = np.full((n, 8), np.nan)
    for i in range(n):
        m = rng.integers(1, 9)
        t = np.sort(rng.uniform(0.0, 1.1 * T[i], m))  # some after expiry: dropped
        if i % 7 == 0:
            t[0] = 0.0  # paid now: the spot less the dividend
        if i % 5 == 0:
            t[-1] = T[i] * (1 - 1e-4)  # on the last level
        if i % 3 == 0:
            t[0] = min(t[0], T[i] / N[i] * 0.6)  # within the first levels (applied on level 2)
        t = np.sort(t)
        times[i, :m] = t
        amounts[i, :m] = rng.uniform(0.1, 2.0, m)
    return kind, style, 100.0, K, T, r, q, vol, N, times, amounts


def test_gpu_equals_cpu_with_dividends_prices_and_greeks():
    kind, style, S, K, T, r, q, vol, N, t, a = _random_book(300, 11)
    cpu = bc.crr_batch(kind, style, S, K, T, r, q, vol, N, dividend_times=t, dividend_amounts=a)
    dev = bg.crr_batch_gpu(kind, style, S, K, T, r, q, vol, N, dividend_times=t, dividend_amounts=a)
    np.testing.assert_allclose(dev[0], cpu[0], rtol=1e-12, atol=1e-12 * 100.0)
    cpu = cpu[:dev.shape[0]]  # the kernel's rows: the dividend rho (row 6) is the front door's
    fin = np.isfinite(cpu[1:])
    assert (np.isfinite(dev[1:]) == fin).all()
    # Greeks: vega and rho divide the trees' ~1e-14 relative differences by the bump (1e-4)
    np.testing.assert_allclose(dev[1:][fin], cpu[1:][fin], rtol=1e-8, atol=1e-8)


def test_gpu_empty_schedule_on_the_dividend_kernel_is_the_plain_tree():
    kind, style, S, K, T, r, q, vol, N, _, _ = _random_book(64, 3)
    pad = np.full((64, 8), np.nan)
    with_pad = bg.crr_batch_gpu(kind, style, S, K, T, r, q, vol, N, greeks=False, dividend_times=pad,
                                dividend_amounts=pad)
    plain = bc.crr_batch(kind, style, S, K, T, r, q, vol, N, greeks=False)
    np.testing.assert_allclose(with_pad[0], plain[0], rtol=1e-12, atol=1e-10)


def test_front_door_prices_dividend_rows_on_the_gpu_and_wide_trees_on_the_cpu():
    cols = dict(kind="put", style="american", spot=100.0, strike=[90.0, 100.0, 110.0], expiry=1.0, rate=0.05,
                volatility=0.3, dividend_times=[[0.25, 0.5], [0.25, 0.5], [np.nan, np.nan]],
                dividend_amounts=[[1.0, 1.0], [1.0, 1.0], [np.nan, np.nan]])
    res = engine.price_table(cols, Method(steps=[800, 800, 800], device="gpu"))
    assert res.device.startswith("gpu") and res.diagnostics.get("dividends_path", "").startswith("gpu")
    ref = bc.crr_batch(0, 1, 100.0, [90.0, 100.0, 110.0], 1.0, 0.05, 0.0, 0.3, 800,
                       dividend_times=[[0.25, 0.5], [0.25, 0.5], [np.nan, np.nan]],
                       dividend_amounts=[[1.0, 1.0], [1.0, 1.0], [np.nan, np.nan]])
    np.testing.assert_allclose(res.price, ref[0], rtol=1e-12)
    wide = engine.price_table(dict(cols, strike=100.0, dividend_times=[[0.25, 0.5]], dividend_amounts=[[1.0, 1.0]]),
                              Method(steps=bg.DIV_MAX_STEPS + 500, device="gpu"))
    assert "dividends_note" in wide.diagnostics
    assert wide.price[0] == bc.crr_batch(0, 1, 100.0, 100.0, 1.0, 0.05, 0.0, 0.3, bg.DIV_MAX_STEPS + 500,
                                         greeks=False, dividend_times=[0.25, 0.5], dividend_amounts=[1.0, 1.0])[0, 0]


def test_gpu_implied_vol_with_dividends_equals_the_cpu():
    from optiond.kernels.binomial import iv_gpu

    kind, style, S, K, T, r, q, vol, N, t, a = _random_book(120, 5)
    N = np.minimum(N, 600)
    px = bc.crr_batch(kind, style, S, K, T, r, q, vol, N, greeks=False, dividend_times=t, dividend_amounts=a)[0]
    cpu_iv, cpu_code = bc.crr_implied_vol(px, kind, style, S, K, T, r, q, N, dividend_times=t, dividend_amounts=a)
    dev_iv, dev_code = iv_gpu.crr_implied_vol_gpu(px, kind, style, S, K, T, r, q, N, dividend_times=t,
                                                  dividend_amounts=a)
    # the same Brent steps on the same tree prices: the same roots (where a price hardly moves with
    # the volatility, deep in or out of the money, the root is any of several: the CPU's one)
    assert (dev_code == cpu_code).all()
    ok = cpu_code == 0
    assert ok.mean() > 0.8
    np.testing.assert_allclose(dev_iv[ok], cpu_iv[ok], rtol=0, atol=1e-9)


def test_front_door_implied_vol_with_dividends_on_the_gpu():
    cols = dict(kind=["put", "call"], style="american", spot=100.0, strike=100.0, expiry=1.0, rate=0.05,
                dividend_times=[[0.25, 0.5], [0.25, 0.5]], dividend_amounts=[[1.0, 1.0], [1.0, 1.0]])
    px = bc.crr_batch([0, 1], 1, 100.0, 100.0, 1.0, 0.05, 0.0, 0.3, 800, greeks=False,
                      dividend_times=[0.25, 0.5], dividend_amounts=[1.0, 1.0])[0]
    iv = engine.implied_vol_table(px, cols, Method(steps=800, device="gpu"))
    assert iv.device.startswith("gpu") and iv.status.tolist() == ["ok", "ok"]
    np.testing.assert_allclose(iv.vol, 0.3, atol=1e-8)
