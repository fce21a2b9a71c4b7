"""ADI on the GPU equals the CPU solver to 1e-10 on the same grid and scheme (batched 2-D
Heston, generic 3-D / Heston-Hull-White). Skipped without CuPy and a CUDA device."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
from optiond.kernels import adi as A  # noqa: E402
from optiond.kernels import gpu as kernel_gpu  # noqa: E402
from optiond.kernels.adi import gpu as G  # noqa: E402
from optiond.kernels.adi import heston as H  # noqa: E402
from optiond.kernels.adi import hhw  # noqa: E402
from optiond.kernels.adi.solver import solve as cpu_solve  # noqa: E402

if not kernel_gpu.available():
    pytest.skip("no CUDA device", allow_module_level=True)

TOL = 1e-10


@pytest.mark.parametrize("scheme", ["do", "cs", "mcs", "hv"])
@pytest.mark.parametrize("style", ["european", "american"])
def test_heston_batch_gpu_equals_cpu(scheme, style):
    kinds = np.array(["put", "call", "put", "call", "put"])
    strikes = np.array([80.0, 95.0, 100.0, 110.0, 125.0])
    expiries = np.array([0.25, 0.5, 1.0, 1.5, 2.0])
    args = dict(spot=100.0, rate=0.03, dividend_yield=0.02, v0=0.05, kappa=2.0, theta=0.04, xi=0.5, rho=-0.7)
    grid, N = (60, 30), 20
    g = G.heston_price_batch(kinds, style, args["spot"], strikes, expiries, args["rate"], args["dividend_yield"], args["v0"],
                             args["kappa"], args["theta"], args["xi"], args["rho"], scheme=scheme, grid=grid, time_steps=N,
                             return_values=True)
    assert list(g["status"]) == ["ok"] * 5
    for b in range(5):
        c = A.heston_price(kinds[b], style, strike=strikes[b], expiry=expiries[b], **args, scheme=scheme, grid=grid,
                           time_steps=N, return_grid=True)
        np.testing.assert_allclose(g["values"][b], c["values"], rtol=0, atol=TOL)
        for k in ("price", "delta", "gamma", "theta", "dv0"):
            assert abs(g[k][b] - c[k]) < TOL * max(1.0, abs(c[k])), (b, k, g[k][b], c[k])


def test_heston_batch_mixed_styles_and_bad_rows():
    strikes = np.array([90.0, 100.0, -5.0, 110.0])
    styles = np.array(["american", "european", "american", "european"])
    g = G.heston_price_batch("put", styles, 100.0, strikes, 1.0, 0.05, 0.0, 0.04, 1.5, 0.04, 0.3, -0.9, grid=(50, 25), time_steps=10)
    assert list(g["status"]) == ["ok", "ok", "error", "ok"]
    for i in (0, 1, 3):
        c = A.heston_price("put", styles[i], 100.0, strikes[i], 1.0, 0.05, 0.0, 0.04, 1.5, 0.04, 0.3, -0.9, grid=(50, 25), time_steps=10)
        assert abs(g["price"][i] - c["price"]) < TOL


def test_heston_price_device_gpu():
    c = A.heston_price("put", "american", 100, 100, 1.0, 0.05, 0.0, 0.04, 1.5, 0.04, 0.3, -0.9, grid=(80, 40), time_steps=20)
    g = A.heston_price("put", "american", 100, 100, 1.0, 0.05, 0.0, 0.04, 1.5, 0.04, 0.3, -0.9, grid=(80, 40), time_steps=20, device="gpu")
    assert abs(g["price"] - c["price"]) < TOL and g["device"].startswith("gpu")


def test_heston_batch_default_settings_gpu_equals_cpu():
    """The accurate default (per-expiry step counts, Richardson pair) on the GPU: each group and
    grid a batched launch, the same numbers as the CPU to 1e-10."""
    K = np.array([80.0, 100.0, 120.0, 100.0, 95.0, 105.0, 90.0, 110.0])
    T = np.array([0.1, 0.5, 0.9, 1.5, 2.0, 3.0, 0.25, 10.0])
    kw = dict(grid=(60, 30), time_steps=10, steps_per_year=20.0, richardson=True)
    for style in ("european", "american"):
        g = A.heston_price_batch("put", style, 100.0, K, T, 0.03, 0.01, 0.04, 1.5, 0.05, 0.8, -0.8, device="gpu", **kw)
        c = A.heston_price_batch("put", style, 100.0, K, T, 0.03, 0.01, 0.04, 1.5, 0.05, 0.8, -0.8, device="cpu", **kw)
        assert g["device"].startswith("gpu") and len(set(g["time_steps"].tolist())) > 3
        for k in ("price", "delta", "gamma", "theta", "dv0"):
            np.testing.assert_allclose(g[k], c[k], rtol=0, atol=TOL * 10)


def _hhw_problem(shape, sigma_r, kind=0, style="european", rho_sr=0.3):
    s, v, r = hhw.hhw_grids(100.0, 100.0, 1.0, 0.04, 1.5, 0.04, 0.3, 0.03, 0.1, max(sigma_r, 1e-12), *shape)
    pde = hhw.hhw_pde(s, v, r, kind, style, 100.0, 1.0, 0.03, 0.01, 1.5, 0.04, 0.3, -0.7, 0.1, sigma_r, rho_sr, 0.2)
    pay = np.ascontiguousarray(np.repeat(H.payoff(s, shape[1], kind, 100.0)[:, :, None], shape[2], axis=2))
    return pde, pay


@pytest.mark.parametrize("scheme", ["do", "cs", "mcs", "hv"])
@pytest.mark.parametrize("axis2", ["tiled", "plain"])
def test_3d_gpu_equals_cpu(scheme, axis2):
    # sizes that are not multiples of the tile shapes (32 lines x 8 columns)
    pde, pay = _hhw_problem((23, 13, 11), 0.02)
    c = cpu_solve(pde, pay, 1.0, 12, scheme)
    g = G.solve(pde, pay, 1.0, 12, scheme, axis2=axis2)
    np.testing.assert_allclose(g.values, c.values, rtol=0, atol=TOL)


@pytest.mark.parametrize("kind,style", [(0, "american"), (1, "european"), (0, "bermudan")])
def test_3d_gpu_equals_cpu_exercise(kind, style):
    pde, pay = _hhw_problem((21, 11, 9), 0.0 if style == "bermudan" else 0.015, kind=kind, style=style)
    taus = (0.25, 0.5, 0.75) if style == "bermudan" else ()
    c = cpu_solve(pde, pay, 1.0, 10, "hv", exercise=style, obstacle=pay, exercise_taus=taus)
    g = G.solve(pde, pay, 1.0, 10, "hv", exercise=style, obstacle=pay, exercise_taus=taus)
    np.testing.assert_allclose(g.values, c.values, rtol=0, atol=TOL)
    np.testing.assert_allclose(g.lam, c.lam, rtol=0, atol=1e-8)
