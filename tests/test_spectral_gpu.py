"""The spectral American engine on the GPU equals the CPU reference: prices to 1e-12 relative,
Greeks to the bounds that follow from it, implied volatilities by the same search; the engine
places a large batch on the GPU. Skipped without CuPy and a CUDA device."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
from optiond import engine  # noqa: E402
from optiond.kernels import gpu as kernel_gpu  # noqa: E402
from optiond.kernels.rootfind import IV_OK  # noqa: E402
from optiond.kernels.spectral import GPU_MIN_ROWS, cpu  # noqa: E402
from optiond.kernels.spectral import gpu as G  # noqa: E402
from optiond.models import Method  # noqa: E402

if not kernel_gpu.available():
    pytest.skip("no CUDA device", allow_module_level=True)

#: prices: relative agreement, and the floor under which only the deep tail's rounding is left
#: (Phi(-x) for x of 15-25 carries x^2/2 times an ulp of its argument: 3e-11 relative on a
#: price of 4e-53 in a host emulation of the kernel with the C library's erfc)
RTOL, FLOOR = 1e-12, 1e-15


#: a long low-volatility put with r well above q, where the CPU's fixed point halves its step
#: (``tests/test_spectral.py``, test_low_volatility_high_drift_put): kind, S, days, r, q, sigma
DAMPED = (0, 96.31095443600152, 512, 0.08132916647296176, 0.019006881901437536, 0.05679405738324934)


def _grid(n=240, seed=7, damped=False):
    """The 240-option grid of ``tests/test_spectral.py`` (that module needs QuantLib), with
    :data:`DAMPED` appended when ``damped``."""
    rng = np.random.default_rng(seed)
    kind = np.tile([0, 1], n // 2).astype(np.int8)
    S = 100.0 * rng.uniform(0.7, 1.3, n)
    days = np.round(np.exp(rng.uniform(np.log(7), np.log(5 * 365), n))).astype(int)
    sig, r, q = rng.uniform(0.05, 1.0, n), rng.uniform(0.0, 0.1, n), rng.uniform(0.0, 0.1, n)
    if damped:
        k, s0, d0, r0, q0, v0 = DAMPED
        kind, S, days, r, q, sig = (np.r_[a, b].astype(a.dtype) for a, b in
                                    ((kind, k), (S, s0), (days, d0), (r, r0), (q, q0), (sig, v0)))
    return kind, S, days / 365.0, r, q, sig


@pytest.mark.parametrize("layout", ["thread", "warp"])
@pytest.mark.parametrize("accuracy", cpu.ACCURACY_NAMES)
def test_prices_and_greeks_equal_cpu(accuracy, layout):
    """Both kernel layouts (a solve a thread, a solve a warp): prices to 1e-12 relative; delta,
    gamma, theta (sums of the same integrands) to 1e-12 of their largest size on the grid; vega
    and rho, differences of two solves over the bump h, to the price agreement over h:
    2 (1e-12 price + floor) / h."""
    kind, S, T, r, q, sig = _grid(damped=True)
    c = cpu.alo_batch(kind, S, 100.0, T, r, q, sig, accuracy)
    g = G.alo_batch_gpu(kind, S, 100.0, T, r, q, sig, accuracy, layout=layout)
    assert g.shape == (6, 241) and np.isfinite(g).all()
    np.testing.assert_allclose(g[0], c[0], rtol=RTOL, atol=FLOOR)
    for k in (1, 2, 3):
        np.testing.assert_allclose(g[k], c[k], rtol=RTOL, atol=RTOL * np.abs(c[k]).max())
    hv = np.minimum(cpu.VEGA_BUMP, 0.5 * sig)
    h2 = np.where((kind == 0) & (r - cpu.RHO_BUMP <= 0.0), cpu.RHO_BUMP, 2.0 * cpu.RHO_BUMP)
    bound = 2.0 * (RTOL * c[0] + FLOOR)
    assert (np.abs(g[4] - c[4]) <= bound / (2.0 * hv)).all()
    assert (np.abs(g[5] - c[5]) <= bound / h2).all()
    # prices only: the same prices, no Greeks
    p = G.alo_batch_gpu(kind, S, 100.0, T, r, q, sig, accuracy, greeks=False, layout=layout)
    np.testing.assert_array_equal(p[0], g[0])
    assert np.isnan(p[1:]).all()


def test_dividend_rho_is_the_central_difference_in_q():
    """The seventh row: (V(q + h) - V(q - h)) / 2h of the kernel's own prices (one-sided where a
    call's q - h <= 0), and the first six rows unchanged."""
    kind, S, T, r, q, sig = _grid(40, seed=11)
    q[:4] = [0.0, 0.0, 5e-5, 5e-5]  # a put and a call at q = 0, and under the bump
    g7 = G.alo_batch_gpu(kind, S, 100.0, T, r, q, sig, "fast", dividend_rho=True)
    g6 = G.alo_batch_gpu(kind, S, 100.0, T, r, q, sig, "fast")
    np.testing.assert_array_equal(g7[:6], g6)
    h = cpu.RHO_BUMP
    qm = np.where((kind == 1) & (q - h <= 0.0), q, q - h)
    at = lambda qq: G.alo_batch_gpu(kind, S, 100.0, T, r, qq, sig, "fast", greeks=False)[0]  # noqa: E731
    ref = (at(q + h) - at(qm)) / np.where(qm == q, h, 2.0 * h)
    np.testing.assert_allclose(g7[6], ref, rtol=1e-14, atol=0)
    # against the CPU's prices at the bumped yields, as for rho
    cref = (cpu.alo_batch(kind, S, 100.0, T, r, q + h, sig, "fast", greeks=False)[0]
            - cpu.alo_batch(kind, S, 100.0, T, r, qm, sig, "fast", greeks=False)[0]) / np.where(qm == q, h, 2.0 * h)
    assert (np.abs(g7[6] - cref) <= 2.0 * (RTOL * g6[0] + FLOOR) / h).all()


@pytest.mark.parametrize("layout", ["thread", "warp"])
@pytest.mark.parametrize("accuracy", ["fast", "accurate"])
def test_implied_vol_round_trip_and_cpu(accuracy, layout):
    """Implied volatilities of the engine's own prices (both layouts): the volatility back to
    1e-10 where the price has a vega to invert, the same statuses as the CPU's search and its
    volatilities to 1e-10."""
    kind, S, T, r, q, sig = _grid(40, seed=3)
    price = cpu.alo_batch(kind, S, 100.0, T, r, q, sig, accuracy, greeks=False)[0]
    vol, code = G.alo_implied_vol_gpu(price, kind, S, 100.0, T, r, q, accuracy, layout=layout)
    cvol, ccode = cpu.alo_implied_vol(price, kind, S, 100.0, T, r, q, accuracy)
    ok = price > np.maximum(np.where(kind == 1, S - 100.0, 100.0 - S), 0.0) + 1e-6
    assert (code[ok] == IV_OK).all() and (code == ccode).all()
    np.testing.assert_allclose(vol[ok], sig[ok], rtol=0, atol=1e-10)
    np.testing.assert_allclose(vol, cvol, rtol=0, atol=1e-10)


def test_implied_vol_bracket_statuses_equal_cpu():
    """Prices outside the bracket's values, a negative and a NaN price: the CPU's statuses."""
    kind = np.array([0, 1, 0, 1, 0, 1], dtype=np.int8)
    S, T = np.array([95.0, 105.0, 95.0, 105.0, 100.0, 100.0]), np.array([0.5, 2.0, 0.5, 2.0, 1.0, 1.0])
    r, q = np.array([0.05, 0.03, 0.05, 0.03, 0.05, 0.05]), np.array([0.02, 0.04, 0.02, 0.04, 0.02, 0.02])
    at = lambda v: cpu.alo_batch(kind, S, 100.0, T, r, q, np.full(6, v), "fast", greeks=False)[0]  # noqa: E731
    price = np.r_[at(0.1)[:2] - 1e-3, at(0.8)[2:4] + 1e-3, -1.0, np.nan]
    c = cpu.alo_implied_vol(price, kind, S, 100.0, T, r, q, "fast", lo=0.1, hi=0.8)
    for layout in ("thread", "warp"):
        g = G.alo_implied_vol_gpu(price, kind, S, 100.0, T, r, q, "fast", lo=0.1, hi=0.8, layout=layout)
        assert g[1].tolist() == c[1].tolist() and np.isnan(g[0]).all()


def test_engine_places_a_large_batch_on_the_gpu():
    """Through the engine with ``device="auto"``: a batch of GPU_MIN_ROWS American rows is priced
    and inverted on the GPU, equal to the CPU's (``device="cpu"``); a small one stays on the CPU."""
    n = GPU_MIN_ROWS
    rng = np.random.default_rng(2)
    cols = dict(kind=np.where(rng.random(n) < 0.5, "put", "call"), style="american", spot=100.0 * rng.uniform(0.8, 1.2, n),
                strike=100.0, expiry=rng.uniform(0.1, 2.0, n), rate=rng.uniform(0.01, 0.08, n),
                dividend_yield=rng.uniform(0.0, 0.06, n), volatility=rng.uniform(0.1, 0.6, n))
    m = Method(name="spectral", accuracy="fast")
    res = engine.price_table(cols, m)
    assert res.device.startswith("gpu") and "gpu_fallback" not in res.diagnostics
    ref = engine.price_table(cols, Method(name="spectral", accuracy="fast", device="cpu"))
    assert ref.device == "cpu"
    np.testing.assert_allclose(res.price, ref.price, rtol=RTOL, atol=FLOOR)
    np.testing.assert_allclose(res.delta, ref.delta, rtol=RTOL, atol=RTOL)
    quotes = {k: v for k, v in cols.items() if k != "volatility"}
    iv = engine.implied_vol_table(res.price, quotes, m)
    civ = engine.implied_vol_table(res.price, quotes, Method(name="spectral", accuracy="fast", device="cpu"))
    assert iv.device.startswith("gpu") and civ.device == "cpu" and iv.status.tolist() == civ.status.tolist()
    exercise = np.maximum(np.where(cols["kind"] == "call", cols["spot"] - 100.0, 100.0 - cols["spot"]), 0.0)
    ok = res.price > exercise + 1e-6  # a vega to invert
    assert (iv.status[ok] == "ok").all()
    np.testing.assert_allclose(iv.vol[ok], cols["volatility"][ok], rtol=0, atol=1e-10)
    small = engine.price_table({k: (v[:10] if np.ndim(v) else v) for k, v in cols.items()}, m)
    assert small.device == "cpu"
