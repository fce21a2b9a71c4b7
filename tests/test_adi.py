"""ADI finite differences (CPU): Heston and Heston-Hull-White against QuantLib, convergence
orders, American/Bermudan exercise, the generic 2-D/3-D solver on problems with known
solutions, and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optiond.kernels import adi as A
from optiond.kernels.adi.grids import heston_s_grid, heston_v_grid, sinh_grid
from optiond.kernels.adi.operators import BC, PDE
from optiond.kernels.adi.solver import make_schedule, point_values, solve
from optiond.models import InvalidInputError

ql = pytest.importorskip("QuantLib")

TODAY = ql.Date(15, 1, 2025)
BASE = dict(spot=100.0, strike=100.0, expiry=1.0, rate=0.05, dividend_yield=0.0, v0=0.04, kappa=1.5, theta=0.04, xi=0.3, rho=-0.9)


def _ql_heston(kind, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho, american=False, fd=None):
    """QuantLib price; ``expiry`` must be a whole number of days / 365 (Actual/365)."""
    ql.Settings.instance().evaluationDate = TODAY
    dc = ql.Actual365Fixed()
    days = int(round(expiry * 365))
    assert abs(days / 365 - expiry) < 1e-12
    mat = TODAY + days
    rts = ql.YieldTermStructureHandle(ql.FlatForward(TODAY, rate, dc))
    qts = ql.YieldTermStructureHandle(ql.FlatForward(TODAY, dividend_yield, dc))
    model = ql.HestonModel(ql.HestonProcess(rts, qts, ql.QuoteHandle(ql.SimpleQuote(spot)), v0, kappa, theta, xi, rho))
    ex = ql.AmericanExercise(TODAY, mat) if american else ql.EuropeanExercise(mat)
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if kind == "call" else ql.Option.Put, strike), ex)
    if fd is None:
        opt.setPricingEngine(ql.AnalyticHestonEngine(model, 1e-12, 100000))
    else:
        opt.setPricingEngine(ql.FdHestonVanillaEngine(model, *fd, 0, ql.FdmSchemeDesc.ModifiedCraigSneyd()))
    return opt.NPV()


# ---------------------------------------------------------------- Heston European vs analytic

CASES = [
    ("put", BASE),                                                                        # rho = -0.9
    ("call", dict(BASE, rate=0.025, v0=0.0348, kappa=1.15, theta=0.0348, xi=0.39, rho=-0.64)),
    ("call", dict(BASE, rate=0.0, v0=0.09, kappa=2.0, theta=0.09, xi=1.0, rho=-0.3)),    # high vol of vol
    ("put", dict(BASE, spot=90.0, rate=0.03, dividend_yield=0.01, kappa=3.0, theta=0.12, xi=0.04, rho=0.6)),
    ("call", dict(BASE, spot=110.0, expiry=0.5 - 0.5 / 365, rate=0.04, dividend_yield=0.02, xi=0.8, rho=-0.9)),
]


@pytest.mark.parametrize("kind,p", CASES)
def test_heston_european_vs_analytic(kind, p):
    ref = _ql_heston(kind, **p)
    out = A.heston_price(kind, "european", **p, scheme="mcs", grid=(300, 150), time_steps=100)
    assert abs(out["price"] - ref) < 1e-3, (out["price"], ref)


def test_heston_greeks_vs_analytic_bumps():
    p = dict(BASE, spot=105.0)
    h = 0.05
    up, mid, dn = (_ql_heston("put", **dict(p, spot=p["spot"] + k * h)) for k in (1, 0, -1))
    out = A.heston_price("put", "european", **p, grid=(300, 150), time_steps=100)
    assert abs(out["delta"] - (up - dn) / (2 * h)) < 2e-4
    assert abs(out["gamma"] - (up - 2 * mid + dn) / h**2) < 2e-4
    # theta: u_tau from the PDE at expiry T, against the analytic price at T - dt
    dT = 1.0 / 365
    later = _ql_heston("put", **dict(p, expiry=p["expiry"] - dT))
    assert abs(out["theta"] - (later - mid) / dT) < 0.02
    # dv0 against the analytic price bumped in v0
    e = 1e-4
    dv = (_ql_heston("put", **dict(p, v0=p["v0"] + e)) - _ql_heston("put", **dict(p, v0=p["v0"] - e))) / (2 * e)
    assert abs(out["dv0"] - dv) < 0.02 * abs(dv)


@pytest.mark.parametrize("scheme", ["do", "cs", "mcs", "hv"])
def test_all_schemes_price(scheme):
    ref = _ql_heston("put", **BASE)
    out = A.heston_price("put", "european", **BASE, scheme=scheme, grid=(200, 100), time_steps=200)
    assert abs(out["price"] - ref) < 2e-3
    assert out["scheme"] in ("douglas", "craig-sneyd", "modified-craig-sneyd", "hundsdorfer-verwer")


# ---------------------------------------------------------------- convergence orders

def _orders(errors):
    return [math.log2(abs(errors[i] / errors[i + 1])) for i in range(len(errors) - 1)]


@pytest.mark.parametrize("scheme", ["mcs", "hv"])
def test_space_order_two(scheme):
    ref = _ql_heston("put", **BASE)
    e = [A.heston_price("put", "european", **BASE, scheme=scheme, grid=(n, n // 2), time_steps=200)["price"] - ref
         for n in (40, 80, 160)]
    assert all(1.7 < o < 2.4 for o in _orders(e)), e


@pytest.mark.parametrize("scheme", ["mcs", "hv"])
def test_time_order_two_with_rannacher(scheme):
    run = lambda N: A.heston_price("put", "european", **BASE, scheme=scheme, grid=(60, 30), time_steps=N, rannacher=2)["price"]  # noqa: E731
    fine = run(2560)
    e = [run(N) - fine for N in (10, 20, 40)]
    assert all(1.7 < o < 2.4 for o in _orders(e)), e


# ---------------------------------------------------------------- American and Bermudan

def test_american_put_vs_quantlib_fine_grid():
    # QuantLib's American step condition is a projection after each step (first order in
    # time), so its reference needs many time steps; 1000 x 400 x 200 is within ~1e-3 of the
    # limit (its 2000-step and 800 x 400 runs move it by < 1e-3).
    ref = _ql_heston("put", **BASE, american=True, fd=(1000, 400, 200))
    out = A.heston_price("put", "american", **BASE, scheme="mcs", grid=(400, 200), time_steps=200)
    assert abs(out["price"] - ref) < 2e-3, (out["price"], ref)


@pytest.mark.parametrize("kind,rho", [("put", -0.9), ("call", 0.0), ("call", 0.5), ("call", -0.9)])
def test_american_dominates_european_and_intrinsic_everywhere(kind, rho):
    p = dict(BASE, dividend_yield=0.04, rho=rho)
    am = A.heston_price(kind, "american", **p, grid=(100, 50), time_steps=50, return_grid=True)
    eu = A.heston_price(kind, "european", **p, grid=(100, 50), time_steps=50, return_grid=True)
    s = am["s"]
    intrinsic = np.maximum(s - p["strike"], 0.0) if kind == "call" else np.maximum(p["strike"] - s, 0.0)
    assert np.all(am["values"] >= intrinsic[:, None] - 1e-12)
    # With strong negative correlation the central mixed-derivative stencil is not monotone and
    # the European call undershoots below 0 far out of the money (-3.4e-3 here); the American
    # solution is floored at the payoff, so there it may sit below the European one by a
    # fraction of that undershoot. Everywhere else the inequality holds to rounding.
    tol = 1e-10 + 0.1 * max(0.0, -eu["values"].min())
    assert np.all(am["values"] >= eu["values"] - tol)
    assert am["price"] >= eu["price"]
    assert np.all(am["lam"] >= 0.0)


def test_bermudan_between_european_and_american():
    dates = np.linspace(0.0, 1.0, 13)[1:]  # monthly
    b = A.heston_price("put", "bermudan", **BASE, grid=(100, 50), time_steps=60, exercise_dates=dates)["price"]
    e = A.heston_price("put", "european", **BASE, grid=(100, 50), time_steps=60)["price"]
    a = A.heston_price("put", "american", **BASE, grid=(100, 50), time_steps=60)["price"]
    assert e < b < a
    # daily-ish dates approach the American price
    many = A.heston_price("put", "bermudan", **BASE, grid=(100, 50), time_steps=60,
                          exercise_dates=np.linspace(0, 1, 241)[1:])["price"]
    assert abs(many - a) < 0.3 * (a - b)


def test_bermudan_schedule_hits_dates():
    sch = make_schedule(1.0, 10, 2, 1 / 3, 2, exercise_taus=[0.25, 0.333, 1.0])
    for t in (0.25, 0.333, 1.0):
        k = int(np.argmin(np.abs(sch.taus - t)))
        assert abs(sch.taus[k] - t) < 1e-12 and sch.project[k - 1] == 1
    assert sch.project.sum() == 3
    assert np.allclose(sch.dts[:4], 0.05) and np.all(sch.thetas[:4] == 1.0)  # 2 Rannacher steps halved
    assert abs(sch.dts.sum() - 1.0) < 1e-14


# ---------------------------------------------------------------- 3-D and Heston-Hull-White

def test_3d_reproduces_2d_without_rate_volatility():
    p = dict(BASE, dividend_yield=0.01, rho=-0.7)
    for kind, style in (("put", "european"), ("call", "european"), ("put", "american")):
        two = A.heston_price(kind, style, **p, grid=(40, 20), time_steps=20)
        three = A.hhw_price(kind, style, **p, hw_a=0.1, hw_sigma=0.0, grid=(40, 20, 5), time_steps=20, scheme="mcs")
        for k in ("price", "delta", "gamma", "dv0"):
            assert abs(two[k] - three[k]) < 1e-12 * max(1.0, abs(two[k])), (kind, style, k)


def _ql_hhw(kind, spot, strike, expiry, rate, v0, kappa, theta, xi, rho, a, sigma):
    ql.Settings.instance().evaluationDate = TODAY
    dc = ql.Actual365Fixed()
    rts = ql.YieldTermStructureHandle(ql.FlatForward(TODAY, rate, dc))
    qts = ql.YieldTermStructureHandle(ql.FlatForward(TODAY, 0.0, dc))
    hm = ql.HestonModel(ql.HestonProcess(rts, qts, ql.QuoteHandle(ql.SimpleQuote(spot)), v0, kappa, theta, xi, rho))
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if kind == "call" else ql.Option.Put, strike),
                           ql.EuropeanExercise(TODAY + int(round(expiry * 365))))
    # exact for a short rate independent of the spot and of the variance
    opt.setPricingEngine(ql.AnalyticHestonHullWhiteEngine(hm, ql.HullWhite(rts, a, sigma), 144))
    return opt.NPV()


@pytest.mark.parametrize("kind", ["put", "call"])
def test_hhw_european_vs_quantlib(kind):
    """Stated tolerance: 5e-3 on a (100, 50, 21) grid with 50 steps (measured error 3.7e-3,
    second order under refinement: 1.8e-3 on (140, 70, 31))."""
    p = dict(spot=100.0, strike=100.0, expiry=1.0, rate=0.03, v0=0.04, kappa=1.5, theta=0.04, xi=0.3, rho=-0.7)
    ref = _ql_hhw(kind, **p, a=0.1, sigma=0.02)
    out = A.hhw_price(kind, "european", dividend_yield=0.0, **p, hw_a=0.1, hw_sigma=0.02, grid=(100, 50, 21), time_steps=50)
    assert abs(out["price"] - ref) < 5e-3, (out["price"], ref)


def test_hhw_spot_rate_correlation_vs_quantlib_fd():
    """With rho_sr != 0 there is no exact closed form: compare the effect of rho_sr = 0.3 on
    the price with QuantLib's FdHestonHullWhiteVanillaEngine (each engine's own
    discretisation error cancels in the difference; measured agreement ~1e-5)."""
    ql.Settings.instance().evaluationDate = TODAY
    dc = ql.Actual365Fixed()
    rts = ql.YieldTermStructureHandle(ql.FlatForward(TODAY, 0.03, dc))
    qts = ql.YieldTermStructureHandle(ql.FlatForward(TODAY, 0.0, dc))
    hm = ql.HestonModel(ql.HestonProcess(rts, qts, ql.QuoteHandle(ql.SimpleQuote(100.0)), 0.04, 1.5, 0.04, 0.3, -0.7))
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call, 100.0), ql.EuropeanExercise(TODAY + 365))

    def qlfd(rho_sr):
        opt.setPricingEngine(ql.FdHestonHullWhiteVanillaEngine(hm, ql.HullWhiteProcess(rts, 0.1, 0.02), rho_sr, 50, 100, 40, 20, 0,
                                                               False, ql.FdmSchemeDesc.Hundsdorfer()))
        return opt.NPV()

    ours = lambda rho_sr: A.hhw_price("call", "european", 100.0, 100.0, 1.0, 0.03, 0.0, 0.04, 1.5, 0.04, 0.3, -0.7, 0.1, 0.02,  # noqa: E731
                                      rho_sr=rho_sr, grid=(100, 50, 21), time_steps=50)["price"]
    q0, q1 = qlfd(0.0), qlfd(0.3)
    o0, o1 = ours(0.0), ours(0.3)
    assert q1 - q0 > 0.05
    assert abs((o1 - o0) - (q1 - q0)) < 1e-3, (o1 - o0, q1 - q0)
    assert abs(o1 - q1) < 1e-2


def test_hhw_rate_correlation_moves_price_sensibly():
    p = dict(spot=100.0, strike=100.0, expiry=1.0, rate=0.03, dividend_yield=0.0, v0=0.04, kappa=1.5, theta=0.04, xi=0.3, rho=-0.7,
             hw_a=0.1, hw_sigma=0.02, grid=(60, 30, 15), time_steps=30)
    base = A.hhw_price("call", "european", **p)["price"]
    pos = A.hhw_price("call", "european", **p, rho_sr=0.5)["price"]
    # positive spot-rate correlation adds variance to the forward: a higher ATM call
    assert pos > base
    am = A.hhw_price("put", "american", **p)
    eu = A.hhw_price("put", "european", **p)
    assert am["price"] > eu["price"]


# ---------------------------------------------------------------- generic solver, known solutions

def _heat_pde(n, td=False):
    x = np.linspace(0.0, math.pi, n)
    diff = (lambda X, Y, t: 1.0 + t) if td else 1.0
    return PDE(axes=(x, x), diffusion=(diff, diff), convection=(0.0, 0.0), reaction=0.0,
               bcs=((BC("dirichlet", 0.0), BC("dirichlet", 0.0)),) * 2, time_dependent=td)


@pytest.mark.parametrize("scheme", ["do", "cs", "mcs", "hv"])
@pytest.mark.parametrize("td", [False, True])
def test_generic_2d_heat_equation(scheme, td):
    """u_tau = a(tau) (u_xx + u_yy), u = exp(-2 A(tau)) sin x sin y, A = int a."""
    T = 0.5
    errs = []
    for n in (21, 41):
        pde = _heat_pde(n, td)
        X, Y = np.meshgrid(pde.axes[0], pde.axes[1], indexing="ij")
        sol = solve(pde, np.sin(X) * np.sin(Y), T, time_steps=4 * n, scheme=scheme, rannacher=0)
        At = T + T * T / 2 if td else T
        errs.append(np.abs(sol.values - math.exp(-2 * At) * np.sin(X) * np.sin(Y)).max())
    assert errs[1] < errs[0] / 3.0, errs


def test_generic_neumann_and_mixed_term():
    """u_tau = u_xx + u_yy + 2 b u_xy (b = 0.3) with Neumann data on all four sides: the exact
    solution is u = exp(-2(1 - b) tau) cos(x - y); the error must fall at second order."""
    b = 0.3

    def run(n):
        x = np.linspace(0.0, 1.0, n)
        exact = lambda X, Y, t: np.exp(-(2.0 - 2 * b) * t) * np.cos(X - Y)  # noqa: E731
        # u_x = -sin(x - y) e^{..}, u_y = +sin(x - y) e^{..}
        gx = lambda X, Y, t: -np.sin(X - Y) * np.exp(-(2.0 - 2 * b) * t)  # noqa: E731
        gy = lambda X, Y, t: np.sin(X - Y) * np.exp(-(2.0 - 2 * b) * t)  # noqa: E731
        pde = PDE(axes=(x, x), diffusion=(1.0, 1.0), convection=(0.0, 0.0), mixed={(0, 1): 2 * b},
                  bcs=((BC("neumann", gx), BC("neumann", gx)), (BC("neumann", gy), BC("neumann", gy))))
        X, Y = np.meshgrid(x, x, indexing="ij")
        sol = solve(pde, exact(X, Y, 0.0), 0.25, time_steps=2 * n, scheme="hv", rannacher=0)
        return np.abs(sol.values - exact(X, Y, 0.25)).max()

    e1, e2 = run(21), run(41)
    assert e2 < 1e-3 and e1 / e2 > 2.5, (e1, e2)


def test_generic_3d_heat_with_mixed_terms():
    n = 17
    x = np.linspace(0.0, math.pi, n)
    # u_xx + u_yy + u_zz with zero Dirichlet data; mixed coefficients zero on the faces
    pde = PDE(axes=(x, x, x), diffusion=(1.0, 1.0, 1.0), convection=(0.0, 0.0, 0.0), reaction=0.1,
              bcs=((BC("dirichlet", 0.0), BC("dirichlet", 0.0)),) * 3)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    u0 = np.sin(X) * np.sin(Y) * np.sin(Z)
    sol = solve(pde, u0, 0.3, time_steps=40, scheme="mcs", rannacher=0)
    exact = math.exp(-3.1 * 0.3) * u0
    assert np.abs(sol.values - exact).max() < 5e-3


# ---------------------------------------------------------------- grids, interpolation, validation

def test_grids_put_points_on_nodes():
    s = heston_s_grid(101, 100.0, 800.0, s_left=50.0, c=20.0)
    assert s[0] == 0.0 and np.any(s == 100.0) and np.all(np.diff(s) > 0)
    v = heston_v_grid(51, 5.0)
    assert v[0] == 0.0 and v[-1] == 5.0 and np.all(np.diff(v) > 0) and v[1] < 0.02
    r = sinh_grid(21, -0.1, 0.2, 0.03, 0.05)
    assert np.any(r == 0.03) and r[0] == -0.1


def test_point_values_exact_for_cubics():
    x = np.sort(np.concatenate([[0.0, 3.0], np.random.default_rng(1).uniform(0, 3, 30)]))
    y = np.linspace(0.0, 1.0, 12) ** 1.5
    X, Y = np.meshgrid(x, y, indexing="ij")
    f = lambda X, Y: 1 + X - 0.5 * X**2 + 0.1 * X * Y + Y**3  # noqa: E731  (quadratic in x: FD exact)
    pv = point_values((x, y), f(X, Y), (1.3, 0.37))
    assert abs(pv["value"] - f(1.3, 0.37)) < 1e-12
    assert abs(pv["d0"] - (1 - 1.3 + 0.1 * 0.37)) < 1e-10
    assert abs(pv["d00"] + 1.0) < 1e-9
    assert abs(pv["d1"] - (0.1 * 1.3 + 3 * 0.37**2)) < 1e-10


def test_batch_matches_single_and_marks_bad_rows():
    strikes = np.array([90.0, 100.0, -1.0, 110.0])
    out = A.heston_price_batch("put", "american", 100.0, strikes, 0.5, 0.03, 0.0, 0.04, 1.5, 0.04, 0.3, -0.7,
                               grid=(60, 30), time_steps=20, threads=2)
    assert list(out["status"]) == ["ok", "ok", "error", "ok"]
    assert "strike" in out["error"][2] and np.isnan(out["price"][2])
    one = A.heston_price("put", "american", 100.0, 110.0, 0.5, 0.03, 0.0, 0.04, 1.5, 0.04, 0.3, -0.7, grid=(60, 30), time_steps=20)
    assert out["price"][3] == one["price"]


@pytest.mark.parametrize("bad,field", [
    (dict(scheme="xyz"), "scheme"), (dict(grid=(3, 100)), "grid"), (dict(time_steps=0), "time_steps"),
    (dict(rho=1.5), "rho"), (dict(v0=-0.1), "v0"), (dict(kind="straddle"), "kind"), (dict(style="asian"), "style"),
    (dict(expiry=0.0), "expiry"), (dict(style="bermudan"), "exercise_dates"), (dict(spot=float("nan")), "spot"),
])
def test_validation(bad, field):
    args = dict(kind="put", style="european", **BASE, grid=(60, 30), time_steps=10)
    args.update(bad)
    with pytest.raises(InvalidInputError) as e:
        A.heston_price(**args)
    assert e.value.field == field


def test_heston_pde_rejects_short_grid():
    with pytest.raises(ValueError):
        PDE(axes=(np.arange(4.0), np.arange(10.0)), diffusion=(1.0, 1.0), convection=(0.0, 0.0))
