"""Converged tree prices (BBSR: Broadie & Detemple's smoothed last step, two-point Richardson
extrapolation) on the GPU against the CPU reference ``binomial.cpu.crr_batch(extrapolate=True)``
and ``crr_implied_vol(extrapolate=True)`` (needs CuPy and a CUDA GPU; skipped otherwise).

The grid: moneyness (K = 80, 100, 125 at S = 100) x volatility 0.1-0.6 x expiry 0.25-5 x rate
0/5/10 % x dividend yield 0/3 %, puts and calls, American and European, at N = 1 (the smoothed
tree alone), 2, 3 (a coarse tree of one step), 31-33, 500, 1000 and 1023 (the widest warp
kernel); options whose CRR p leaves [0, 1] at N or N // 2 are dropped. The bound is 1e-12 of the
Richardson terms' size (:func:`combination_scale`), which is the price's size but where the two
trees nearly cancel.
"""

from __future__ import annotations

import numpy as np
import pytest

from optiond import engine
from optiond.kernels import gpu
from optiond.kernels.binomial import cpu as bc
from optiond.kernels.binomial import gpu as bg
from optiond.kernels.binomial import iv_gpu as biv
from optiond.models import GREEK_FIELDS, Batch, Method

from test_binomial_gpu import grid as tree_grid

pytestmark = pytest.mark.gpu

NS = (1, 2, 3, 31, 32, 33, 500, 1000, 1023)
RTOL = 1e-12


@pytest.fixture(scope="module", autouse=True)
def _need_gpu():
    if not gpu.available():
        pytest.skip("no CuPy or no CUDA GPU")


def grid(N: int):
    """Columns (kind, style, S, K, T, r, q, sigma, N) of the GPU tests' grid at N steps
    (test_binomial_gpu.grid), less the options whose p leaves [0, 1] at N // 2."""
    cols = tree_grid(N)
    ok = np.ones(cols[0].size, bool)
    ok[bc.probability_errors(*cols[4:8], bc.coarse_steps(cols[8]))] = False
    return [c[ok] for c in cols]


def combination_scale(cols) -> np.ndarray:
    """``|w V_N| + |(1 - w) V_M|``, the size of the Richardson terms (the smoothed trees' prices,
    from the GPU): the trees' rounding reaches the BBSR value in proportion to it, not to the
    value, which is smaller where the two trees nearly cancel (few steps, far out of the money:
    a European call 25 % out of the money at N = 3 is 0.0956 and 0.285 at N = 3 and 1, its
    BBSR value 6.4e-4). Elsewhere it is about 3 times the value."""
    cols = bg._columns(*cols)
    tables = bg.bbsr_tables(*cols, False)
    price, _ = bg._run_trees(*tables[:3], "fp64", None, None, "warp", True)
    n, m, N = cols[0].size, tables[5], cols[8]
    M = bc.coarse_steps(N)
    w = np.where(N > M, N / np.maximum(N - M, 1), 1.0)
    return np.abs(w * price[:n]) + np.abs((1.0 - w) * price[m:m + n])


def greek_tolerance(cols, scale):
    """Per Greek, the price tolerance carried through its formula: delta, gamma, theta from
    the first levels of the finer tree (the smaller node spacing and dt), vega and rho from
    bumped prices."""
    _, _, S, _, T, _, _, s, N = cols
    dt = T / N
    u = np.exp(s * np.sqrt(dt))
    ds = S * (u - 1.0 / u)
    e = 4 * RTOL * scale + 1e-15
    return {1: 4 * e / ds, 2: 16 * e / ds ** 2, 3: 4 * e / dt, 4: 4 * e / bc.VEGA_BUMP, 5: 4 * e / bc.RHO_BUMP}


@pytest.mark.parametrize("N", NS)
def test_prices_and_greeks_equal_the_cpu(N):
    cols = grid(N)
    assert cols[0].size > 100 and {0, 1} <= set(cols[0]) and {0, 1} <= set(cols[1])
    ref = bc.crr_batch(*cols, greeks=True, extrapolate=True)
    got = bg.crr_batch_gpu(*cols, greeks=True, extrapolate=True)
    scale = combination_scale(cols)
    assert np.all(scale >= 0.99 * np.abs(ref[0]))
    err = np.abs(got[0] - ref[0]) / scale
    assert err.max() <= RTOL, f"N={N}: price error {err.max():.3g} of the terms at {int(np.argmax(err))}"
    if N >= 500:  # no cancellation to speak of: 1e-12 of the price itself
        assert np.max(np.abs(got[0] - ref[0]) / np.abs(ref[0])) <= RTOL
    tol = greek_tolerance(cols, scale)
    for k, name in enumerate(GREEK_FIELDS[:got.shape[0] - 1], 1):  # the kernel's rows (the dividend rho is the front door's)
        a, b = got[k], ref[k]
        assert np.array_equal(np.isnan(a), np.isnan(b)), f"N={N} {name}: NaN pattern differs"
        m = ~np.isnan(b)
        excess = np.abs(a[m] - b[m]) - (tol[k][m] + 1e-10 * np.abs(b[m]))
        assert excess.max(initial=-1.0) <= 0, f"N={N} {name}: excess {excess.max():.3g}"
    # the extrapolation changed the value: not the plain tree's (N > 1, where BBS is not BS itself)
    if N > 1:
        plain = bg.crr_batch_gpu(*cols, greeks=False)[0]
        assert np.median(np.abs(got[0] - plain)) > 1e-6


def test_prices_alone_equal_the_greeks_run_and_mixed_steps():
    """Without Greeks (no bumped trees in the launch) and with mixed N in one launch (every warp
    shape, both halves of the pair) the prices are those of the CPU."""
    rng = np.random.default_rng(5)
    n = 3000
    kind, style = rng.integers(0, 2, n), rng.integers(0, 2, n)
    K, T, sig = rng.uniform(70, 130, n), rng.uniform(0.05, 3, n), rng.uniform(0.1, 0.7, n)
    N = rng.choice([1, 2, 5, 64, 255, 256, 511, 512, 700, 1023], n)
    cols = (kind, style, 100.0, K, T, 0.03, 0.01, sig, N)
    ref = bc.crr_batch(*cols, greeks=False, extrapolate=True)[0]
    got = bg.crr_batch_gpu(*cols, greeks=False, extrapolate=True)[0]
    assert np.max(np.abs(got - ref) / combination_scale(cols)) <= RTOL
    # no cancellation to speak of: 1e-12 of the price itself (prices above 1e-6: below, the
    # Black-Scholes leaves' own cancellation far out of the money sets the relative rounding)
    wide = (N >= 255) & (ref > 1e-6)
    assert np.max(np.abs(got[wide] - ref[wide]) / np.abs(ref[wide])) <= RTOL


def test_limits_raise():
    with pytest.raises(ValueError, match="BBSR"):
        bg.crr_batch_gpu(0, 1, 100.0, 100.0, 1.0, 0.05, 0.0, 0.2, bg.BBS_MAX_STEPS + 1, extrapolate=True)
    with pytest.raises(ValueError, match="cash dividends"):
        bg.crr_batch_gpu(0, 1, 100.0, 100.0, 1.0, 0.05, 0.0, 0.2, 100, extrapolate=True, dividend_times=[0.5],
                         dividend_amounts=[1.0])


def _iv_cases(n: int, seed: int):
    """Options with vega enough for a 1e-10 round trip: moneyness 0.85-1.15, T 0.25-2, sigma
    0.12-0.6, puts and calls, American and European, mixed N."""
    rng = np.random.default_rng(seed)
    kind, style = rng.integers(0, 2, n), rng.integers(0, 2, n)
    K, T = rng.uniform(85, 115, n), rng.uniform(0.25, 2.0, n)
    r, q = rng.uniform(0.0, 0.06, n), rng.uniform(0.0, 0.03, n)
    sig = rng.uniform(0.12, 0.6, n)
    N = rng.choice([2, 3, 31, 200, 600, 1000, 1023], n)
    return kind, style, K, T, r, q, sig, N


def test_implied_vol_round_trip_on_the_device():
    kind, style, K, T, r, q, sig, N = _iv_cases(600, 21)
    px = bc.crr_batch(kind, style, 100.0, K, T, r, q, sig, N, greeks=False, extrapolate=True)[0]
    moved = np.zeros(px.size, bool)
    moved[::40] = True
    px[::40] *= 0.2  # some below the BBSR value at the bracket's low end (American rows: intrinsic)
    vol, st = biv.crr_implied_vol_gpu(px, kind, style, 100.0, K, T, r, q, N, xtol=1e-12, extrapolate=True)
    ref_vol, ref_st = bc.crr_implied_vol(px, kind, style, 100.0, K, T, r, q, N, xtol=1e-12, extrapolate=True)
    np.testing.assert_array_equal(st, ref_st)
    assert (st[~moved] == 0).all() and (st[moved] == 1).any()
    assert np.max(np.abs(vol[~moved] - sig[~moved])) <= 1e-10
    ok = st == 0
    assert np.max(np.abs(vol[ok] - ref_vol[ok])) <= 1e-10
    ok = ~moved
    # the plain tree's root of a BBSR price is another volatility: the device inverted the BBSR value
    plain, _ = biv.crr_implied_vol_gpu(px[ok], kind[ok], style[ok], 100.0, K[ok], T[ok], r[ok], q[ok], N[ok],
                                       xtol=1e-12)
    assert np.median(np.abs(plain - sig[ok])) > 1e-6


def test_front_door_keeps_a_gpu_chosen_batch_on_the_gpu():
    rng = np.random.default_rng(9)
    n = 4000
    cols = dict(kind=rng.choice(["put", "call"], n), style=rng.choice(["american", "european"], n), spot=100.0,
                strike=rng.uniform(85, 115, n), expiry=rng.uniform(0.25, 2.0, n), rate=0.03, dividend_yield=0.01,
                volatility=rng.uniform(0.15, 0.5, n))
    b = Batch.from_columns(**cols)
    method = Method(steps=1000, extrapolate=True)  # device "auto": the dispatcher chooses
    assert engine.select_device(b, method).startswith("gpu:")
    res = engine.price(b, method)
    assert res.device.startswith("gpu:"), res.diagnostics
    assert res.diagnostics["extrapolate"] == "BBSR" and res.diagnostics["path"] == "gpu-bbsr-warp"
    assert "extrapolate_note" not in res.diagnostics and "gpu_fallback" not in res.diagnostics
    ref = bc.crr_batch(b.kind, b.style, b.spot, b.strike, b.expiry, b.rate, b.dividend_yield, b.volatility, 1000,
                       extrapolate=True)
    assert np.max(np.abs(res.price - ref[0]) / np.abs(ref[0])) <= RTOL
    assert np.max(np.abs(res.delta - ref[1]) / np.maximum(np.abs(ref[1]), 1e-3)) <= 1e-10
    # the dividend rho: the front door's bumped BBSR values, as the CPU's seventh row
    assert np.max(np.abs(res.dividend_rho - ref[6]) / np.maximum(np.abs(ref[6]), 1e-3)) <= 1e-8
    iv = engine.implied_vol(ref[0], b, method)
    assert iv.device.startswith("gpu:") and "extrapolate_note" not in iv.diagnostics
    assert (iv.status == "ok").all() and np.max(np.abs(iv.vol - b.volatility)) <= 1e-10


def test_front_door_sends_wide_trees_and_cash_dividends_to_the_cpu():
    """Rows the GPU's smoothed warp kernel cannot take (N > BBS_MAX_STEPS) go to the CPU, the
    rest stay on the GPU, every row equal to the CPU; a row with cash dividends, which BBSR does
    not take, is an error of its row through the engine (the CPU kernel's own value, below, is
    the front door's to refuse)."""
    n = 6
    N = np.array([500, 2000, 800, 1023, 1024, 300])
    times = np.full((n, 1), np.nan)
    times[5, 0] = 0.4
    amounts = np.where(np.isnan(times), 0.0, 1.5)
    cols = dict(kind=["put", "call"] * 3, style="american", spot=100.0, strike=[95.0, 100.0, 105.0, 110.0, 90.0, 100.0],
                expiry=1.0, rate=0.04, dividend_yield=0.0, volatility=0.3, dividend_times=times,
                dividend_amounts=amounts)
    res = engine.price_table(cols, Method(steps=N, device="gpu", extrapolate=True))
    assert res.device.startswith("gpu:") and res.diagnostics["path"] == "gpu-bbsr-warp"
    assert "extrapolate_note" in res.diagnostics
    kind = np.array([0, 1] * 3)
    ref = bc.crr_batch(kind, 1, 100.0, np.array(cols["strike"]), 1.0, 0.04, 0.0, 0.3, N, dividend_times=times,
                       dividend_amounts=amounts, extrapolate=True)
    assert res.status.tolist() == ["ok"] * 5 + ["error"] and res.error[5].startswith("extrapolate=True:")
    np.testing.assert_allclose(res.price[:5], ref[0][:5], rtol=RTOL)
    iv = engine.implied_vol_table(ref[0], {k: v for k, v in cols.items() if k != "volatility"},
                                  Method(steps=N, device="gpu", extrapolate=True))
    assert iv.device.startswith("gpu:") and "extrapolate_note" in iv.diagnostics
    assert iv.status[5] == "invalid" and iv.error[5].startswith("extrapolate=True:")
    np.testing.assert_allclose(iv.vol[:5], 0.3, atol=1e-10)
