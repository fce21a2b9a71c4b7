"""The semi-analytic European Heston engine (``method="heston"``, ``optiond.kernels.heston``).

References:

* Alan Lewis's reference prices (S = 100, r = 1 %, q = 2 %, T = 1, v0 = 0.04, kappa = 4,
  theta = 0.25, xi = 1, rho = -0.5), the 45-digit values in QuantLib's
  ``test-suite/hestonmodel.cpp``, ``testAlanLewisReferencePrices``;
* QuantLib 1.44's ``AnalyticHestonEngine`` with its adaptive Gauss–Lobatto integration at a
  relative tolerance of 1e-14 (a test dependency), on a grid with the hard corners of the issue
  (T = 10 with xi = 1, rho = -0.9; T = 0.5 with xi = 1.5, rho = -0.9), deep in and out of the money;
* the Black–Scholes limit xi -> 0 (the variance is then deterministic, its mean over [0, T] is
  theta + (v0 - theta)(1 - e^{-kappa T}) / (kappa T));
* Greeks against central differences of the engine's own price (the price is accurate to
  ~1e-12, so a difference quotient with h ~ 1e-4 relative is good to ~1e-7).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from optiond import engine
from optiond.kernels import black_scholes
from optiond.kernels import gpu as kernel_gpu
from optiond.kernels.heston import cpu
from optiond.models import Method

#: (kind 0 put / 1 call, strike) -> Lewis's reference price (hestonmodel.cpp)
LEWIS = {
    (0, 80): 7.958878113256768285213263077598987193482161301733,
    (1, 80): 26.774758743998854221382195325726949201687074848341,
    (0, 90): 12.017966707346304987709573290236471654992071308187,
    (1, 90): 20.933349000596710388139445766564068085476194042256,
    (0, 100): 17.055270961270109413522653999411000974895436309183,
    (1, 100): 16.070154917028834278213466703938231827658768230714,
    (0, 110): 23.017825898442800538908781834822560777763225722188,
    (1, 110): 12.132211516709844867860534767549426052805766831181,
    (0, 120): 29.811026202682471843340682293165857439167301370697,
    (1, 120): 9.024913483457835636553375454092357136489051667150,
}
LEWIS_MARKET = dict(spot=100.0, expiry=1.0, rate=0.01, dividend_yield=0.02, v0=0.04, kappa=4.0, theta=0.25, xi=1.0,
                    rho=-0.5)


def _price(kind, K, S=100.0, T=1.0, r=0.01, q=0.02, v0=0.04, kappa=4.0, theta=0.25, xi=1.0, rho=-0.5, greeks=False):
    cols = [np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in (S, K, T, r, q, v0, kappa, theta, xi, rho)]
    return cpu.heston_batch(np.atleast_1d(kind), *cols, greeks=greeks)


def test_lewis_reference_prices():
    keys = sorted(LEWIS)
    kind = np.array([k for k, _ in keys], dtype=np.int8)
    K = np.array([s for _, s in keys], dtype=np.float64)
    got = _price(kind, K)[0]
    ref = np.array([LEWIS[k] for k in keys])
    assert np.max(np.abs(got - ref)) <= 1e-10


def test_lewis_reference_prices_through_engine():
    cols = dict(kind=["put", "call"] * 5, strike=np.repeat([80.0, 90.0, 100.0, 110.0, 120.0], 2), style="european",
                **{("long_run_variance" if k == "theta" else "correlation" if k == "rho" else k): v
                   for k, v in LEWIS_MARKET.items()})
    res = engine.price_table(cols, Method(name="heston"))
    ref = [LEWIS[(0 if k == "put" else 1, int(s))] for k, s in zip(cols["kind"], cols["strike"])]
    assert list(res.status) == ["ok"] * 10
    assert np.max(np.abs(res.price - ref)) <= 1e-10


def _ql_grid():
    grid = []
    for T, xi, rho in ((10.0, 1.0, -0.9), (0.5, 1.5, -0.9), (1.0, 0.5, -0.7), (7 / 365, 1.0, -0.5), (3.0, 0.3, 0.5)):
        for K in (30.0, 50.0, 70.0, 90.0, 100.0, 110.0, 130.0, 170.0, 250.0):
            for kind in (0, 1):
                grid.append((kind, K, T, xi, rho))
    return grid


def test_quantlib_analytic_heston_grid():
    ql = pytest.importorskip("QuantLib")
    today = ql.Date(1, 1, 2020)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    S, r, q, v0, kappa, theta = 100.0, 0.03, 0.01, 0.04, 1.5, 0.06
    rts = ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc))
    qts = ql.YieldTermStructureHandle(ql.FlatForward(today, q, dc))
    rows, ref = [], []
    for kind, K, T, xi, rho in _ql_grid():
        mat = today + int(round(T * 365))
        Tq = dc.yearFraction(today, mat)
        model = ql.HestonModel(ql.HestonProcess(rts, qts, ql.QuoteHandle(ql.SimpleQuote(S)), v0, kappa, theta, xi, rho))
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if kind else ql.Option.Put, K),
                               ql.EuropeanExercise(mat))
        opt.setPricingEngine(ql.AnalyticHestonEngine(model, 1e-14, 1000000))
        ref.append(opt.NPV())
        rows.append((kind, K, Tq, xi, rho))
    kind, K, T, xi, rho = (np.array(c) for c in zip(*rows))
    got = _price(kind.astype(np.int8), K, S, T, r, q, v0, kappa, theta, xi, rho)[0]
    err = np.abs(got - np.array(ref))
    assert err.max() <= 1e-8, (err.max(), rows[int(err.argmax())])


@pytest.mark.parametrize("kind", [0, 1])
def test_black_scholes_limit(kind):
    """xi -> 0: the Black–Scholes price at the mean variance over [0, T]."""
    K = np.array([70.0, 95.0, 100.0, 120.0, 160.0])
    S, T, r, q, v0, kappa, theta = 100.0, 0.75, 0.04, 0.01, 0.09, 2.0, 0.04
    got = _price(np.full(5, kind, dtype=np.int8), K, S, T, r, q, v0, kappa, theta, 1e-7, -0.3)[0]
    var = theta + (v0 - theta) * (1.0 - math.exp(-kappa * T)) / (kappa * T)
    ref = black_scholes.bs_price_greeks(np.full(5, kind), S, K, T, r, q, np.full(5, math.sqrt(var)))["price"]
    assert np.max(np.abs(got - ref)) <= 1e-6


GREEK_CASES = [  # kind, K, S, T, r, q, v0, kappa, theta, xi, rho
    (1, 100.0, 100.0, 1.0, 0.01, 0.02, 0.04, 4.0, 0.25, 1.0, -0.5),
    (0, 90.0, 100.0, 0.5, 0.05, 0.0, 0.09, 1.5, 0.06, 1.5, -0.9),
    (0, 130.0, 100.0, 3.0, 0.02, 0.03, 0.03, 0.8, 0.05, 0.4, 0.3),
    (1, 70.0, 100.0, 0.1, 0.03, 0.01, 0.05, 2.0, 0.05, 0.7, -0.7),
]


@pytest.mark.parametrize("case", GREEK_CASES)
def test_greeks_against_central_differences(case):
    kind, K, S, T, r, q, v0, kappa, theta, xi, rho = case
    base = dict(kind=np.int8(kind), K=K, S=S, T=T, r=r, q=q, v0=v0, kappa=kappa, theta=theta, xi=xi, rho=rho)
    out = _price(**base, greeks=True)[:, 0]

    def p(**bump):
        return _price(**(base | bump))[0, 0]

    hS, hT, hr, hv = 1e-4 * S, 1e-5, 1e-5, 1e-5 * v0
    delta = (p(S=S + hS) - p(S=S - hS)) / (2 * hS)
    gamma = (p(S=S + hS) - 2 * p() + p(S=S - hS)) / hS ** 2
    theta_fd = -(p(T=T + hT) - p(T=T - hT)) / (2 * hT)
    rho_fd = (p(r=r + hr) - p(r=r - hr)) / (2 * hr)
    dv0 = (p(v0=v0 + hv) - p(v0=v0 - hv)) / (2 * hv)
    assert out[1] == pytest.approx(delta, abs=1e-8)
    assert out[2] == pytest.approx(gamma, abs=1e-6)
    assert out[3] == pytest.approx(theta_fd, abs=1e-5 * max(1.0, abs(theta_fd)))
    assert out[5] == pytest.approx(rho_fd, abs=1e-5 * max(1.0, abs(rho_fd)))
    assert out[6] == pytest.approx(dv0, abs=1e-5 * max(1.0, abs(dv0)))
    assert out[4] == pytest.approx(2.0 * math.sqrt(v0) * out[6], rel=1e-14)  # vega = dV/d sqrt(v0)


def test_chunking_does_not_move_prices():
    """One strike alone or among 40 of its expiry (other panels): the same price within the
    error bound."""
    K = np.linspace(60.0, 160.0, 40)
    together = _price(np.ones(40, dtype=np.int8), K, T=0.3, xi=1.2, rho=-0.8)[0]
    alone = np.array([_price(np.int8(1), k, T=0.3, xi=1.2, rho=-0.8)[0, 0] for k in K[::7]])
    assert np.max(np.abs(together[::7] - alone)) <= 1e-11


def test_engine_marks_american_rows_and_missing_columns():
    cols = dict(kind="put", style=["european", "american"], spot=100.0, strike=100.0, expiry=1.0, rate=0.01,
                dividend_yield=0.02, v0=0.04, kappa=4.0, long_run_variance=0.25, xi=1.0, correlation=-0.5)
    res = engine.price_table(cols, Method(name="heston"))
    assert res.status.tolist() == ["ok", "error"]
    assert abs(res.price[0] - LEWIS[(0, 100)]) <= 1e-10
    assert "adi" in res.error[1]
    bs = engine.price_table(dict(kind="put", spot=100.0, strike=100.0, expiry=1.0, rate=0.01, volatility=0.2),
                            Method(name="heston"))
    assert bs.status.tolist() == ["error"] and "Heston columns" in bs.error[0]


def test_dividend_rho_through_the_engine():
    """The front door's dividend rho (-T S delta: the yield enters only through the forward)
    against a central difference of the engine's price in q."""
    cols = dict(kind=["put", "call"], style="european", spot=100.0, strike=[90.0, 115.0], expiry=[0.5, 2.0],
                rate=0.01, dividend_yield=0.02, v0=0.04, kappa=1.5, long_run_variance=0.09, xi=0.8, correlation=-0.7)
    res = engine.price_table(cols, Method(name="heston"))
    h = 1e-5
    up = engine.price_table(cols | {"dividend_yield": 0.02 + h}, Method(name="heston", greeks=False)).price
    dn = engine.price_table(cols | {"dividend_yield": 0.02 - h}, Method(name="heston", greeks=False)).price
    np.testing.assert_allclose(res.dividend_rho, (up - dn) / (2 * h), rtol=1e-6, atol=1e-6)


def test_matches_adi_european():
    """The ADI solver's European price converges to the semi-analytic one (its grid error at
    200 x 100 nodes and 100 steps is ~1e-3 here)."""
    cols = dict(kind="put", style="european", spot=100.0, strike=[90.0, 100.0, 110.0], expiry=1.0, rate=0.01,
                dividend_yield=0.02, v0=0.04, kappa=4.0, long_run_variance=0.25, xi=1.0, correlation=-0.5)
    exact = engine.price_table(cols, Method(name="heston")).price
    adi = engine.price_table(cols, Method(name="adi", device="cpu")).price
    assert np.max(np.abs(adi - exact)) <= 5e-3


@pytest.mark.gpu
def test_gpu_equals_cpu():
    if not kernel_gpu.available():
        pytest.skip("no GPU")
    from optiond.kernels.heston import gpu

    rng = np.random.default_rng(7)
    n = 3000
    cols = (rng.integers(0, 2, n).astype(np.int8), np.full(n, 100.0), rng.uniform(40, 200, n),
            np.round(rng.uniform(0.02, 5.0, n // 30), 4).repeat(30), np.full(n, 0.03), np.full(n, 0.01),
            np.full(n, 0.05), np.full(n, 1.7), np.full(n, 0.06), np.full(n, 0.9), np.full(n, -0.7))
    for greeks in (False, True):
        c = cpu.heston_batch(*cols, greeks=greeks)
        g = gpu.heston_batch_gpu(*cols, greeks=greeks)
        rows = 7 if greeks else 1
        assert np.max(np.abs(g[:rows] - c[:rows])) <= 1e-12
