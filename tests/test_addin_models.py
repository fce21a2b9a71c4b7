"""The MLMC and Heston worksheet functions called as plain Python, as they run off Windows.

References are independent of the package: Black-Scholes-Merton and the cash-or-nothing
digital written here with math.erf; the arithmetic-average Asian call by a short plain NumPy
Monte Carlo with the geometric-average option as control variate (its closed form written
here); the Heston European price by QuantLib's ``AnalyticHestonEngine``. The pricing client
is replaced by a counting adapter over the engine, so "one range = one request" is checked
by counting calls.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from optiond import engine
from optiond.addin import functions as F
from optiond.addin import generate
from optiond.addin import pricing
from optiond.addin import table

from addin_support import LIMIT, CountingClient, _fresh_cache, client, col, is_error  # noqa: F401
from optiond.models import Result

ql = pytest.importorskip("QuantLib")



# ---- independent references ----------------------------------------------------------------

def _ncdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _d1d2(S, K, T, r, sigma, q):
    sq = sigma * math.sqrt(T)
    d1 = (math.log(S / K) + (r - q + 0.5 * sigma * sigma) * T) / sq
    return d1, d1 - sq


def bs_price(kind: str, S, K, T, r, sigma, q=0.0) -> float:
    d1, d2 = _d1d2(S, K, T, r, sigma, q)
    if kind == "call":
        return S * math.exp(-q * T) * _ncdf(d1) - K * math.exp(-r * T) * _ncdf(d2)
    return K * math.exp(-r * T) * _ncdf(-d2) - S * math.exp(-q * T) * _ncdf(-d1)


def digital_call(S, K, T, r, sigma, q=0.0) -> float:
    """Cash-or-nothing call paying 1: exp(-rT) N(d2)."""
    return math.exp(-r * T) * _ncdf(_d1d2(S, K, T, r, sigma, q)[1])


def asian_call_mc(S, K, T, r, sigma, q=0.0, steps=200, paths=100_000, seed=1) -> tuple[float, float]:
    """Arithmetic-average Asian call, average over [0, T] by the trapezoid rule on ``steps``
    exact GBM steps, plain Monte Carlo with the geometric-average call (same weights; log G
    is normal, so its price is closed form) as control variate: ``(price, standard error)``."""
    rng = np.random.default_rng(seed)
    dt, mu = T / steps, r - q
    t = np.arange(steps + 1) * dt
    w = np.full(steps + 1, dt / T)
    w[0] = w[-1] = 0.5 * dt / T
    m = math.log(S) + float(w @ ((mu - 0.5 * sigma ** 2) * t))
    v = sigma ** 2 * float(w @ np.minimum.outer(t, t) @ w)
    d1 = (m - math.log(K) + v) / math.sqrt(v)
    geometric = math.exp(m + 0.5 * v) * _ncdf(d1) - K * _ncdf(d1 - math.sqrt(v))
    ys, gs = [], []
    chunk = 10_000
    for _ in range(paths // chunk):
        z = rng.standard_normal((chunk, steps))
        logs = np.cumsum((mu - 0.5 * sigma ** 2) * dt + sigma * math.sqrt(dt) * z, axis=1) + math.log(S)
        logs = np.concatenate([np.full((chunk, 1), math.log(S)), logs], axis=1)
        ys.append(np.maximum(np.exp(logs) @ w - K, 0.0))
        gs.append(np.maximum(np.exp(logs @ w) - K, 0.0))
    y, g = np.concatenate(ys), np.concatenate(gs)
    b = np.cov(y, g)[0, 1] / np.var(g, ddof=1)
    adj = y - b * (g - geometric)
    disc = math.exp(-r * T)
    return disc * float(adj.mean()), disc * float(adj.std(ddof=1)) / math.sqrt(adj.size)


def heston_quantlib(kind: str, S, K, T, r, q, v0, kappa, theta, xi, rho, exact: bool = False) -> float:
    """European Heston price by QuantLib's AnalyticHestonEngine (T must be whole days / 365):
    its default Gauss-Laguerre rule, or with ``exact`` its adaptive Gauss-Lobatto at 1e-14."""
    days = round(T * 365)
    assert abs(days - T * 365) < 1e-9, "T must be a whole number of days over 365"
    today = ql.Date(15, 1, 2024)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    def curve(x):
        return ql.YieldTermStructureHandle(ql.FlatForward(today, x, dc))

    process = ql.HestonProcess(curve(r), curve(q), ql.QuoteHandle(ql.SimpleQuote(S)), v0, kappa, theta, xi, rho)
    option = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if kind == "call" else ql.Option.Put, K),
                              ql.EuropeanExercise(today + days))
    model = ql.HestonModel(process)
    option.setPricingEngine(ql.AnalyticHestonEngine(model, 1e-14, 1000000) if exact else ql.AnalyticHestonEngine(model))
    return option.NPV()


# ---- a counting client over the engine -----------------------------------------------------

GILES = dict(S=100.0, K=100.0, T=1.0, r=0.05, sigma=0.2)  # Giles' GBM test case


# ---- MLMC against closed forms -------------------------------------------------------------

@pytest.mark.parametrize("kind", ["call", "put"])
@pytest.mark.parametrize("S,K,T,r,sigma,q,eps", [(100, 100, 1.0, 0.05, 0.2, 0.0, 0.01),
                                                 (100, 90, 0.5, 0.03, 0.3, 0.02, 0.02),
                                                 (80, 100, 0.75, 0.04, 0.3, 0.0, 0.01)])
def test_mlmc_vanilla_against_black_scholes(client, kind, S, K, T, r, sigma, q, eps):
    f = F.MLMC_CALL if kind == "call" else F.MLMC_PUT
    got = f(S, K, T, r, sigma, eps, q)
    assert abs(got - bs_price(kind, S, K, T, r, sigma, q)) < 3 * eps
    se = F.MLMC_STDERR(S, K, T, r, sigma, eps, q, None, kind)
    assert 0 < se <= eps  # the sampling part of the MSE target
    assert client.calls == [("price_table", 1)]  # the standard error is the same (cached) run


def test_mlmc_seeds_reproduce_and_differ(client):
    g = GILES
    want = bs_price("call", g["S"], g["K"], g["T"], g["r"], g["sigma"])
    prices = F.MLMC_CALL(g["S"], g["K"], g["T"], g["r"], g["sigma"], 0.01, 0.0, [[0, 1, 2, 3, 4, 5]])[0]
    assert len(set(prices)) == 6  # independent estimates
    assert all(abs(p - want) < 3 * 0.01 for p in prices)
    assert client.calls == [("price_table", 1)] * 6  # the seed is a request setting: one request per seed
    F.clear_cache()
    assert F.MLMC_CALL(g["S"], g["K"], g["T"], g["r"], g["sigma"], 0.01, 0.0, 3) == prices[3]  # reproduced
    assert F.MLMC_CALL(g["S"], g["K"], g["T"], g["r"], g["sigma"], 0.01) == prices[0]  # seed defaults to 0


@pytest.mark.parametrize("K", [80.0, 100.0, 120.0])
def test_mlmc_digital_against_closed_form(client, K):
    eps = 1e-3
    got = F.MLMC_DIGITAL_CALL(100.0, K, 1.0, 0.05, 0.2, eps, 0.01)
    assert abs(got - digital_call(100.0, K, 1.0, 0.05, 0.2, 0.01)) < 3 * eps
    assert 0 < F.MLMC_STDERR(100.0, K, 1.0, 0.05, 0.2, eps, 0.01, 0, "call", "digital") <= eps
    assert len(client.calls) == 1


@pytest.mark.parametrize("S,K,T,r,sigma,q", [(100, 100, 1.0, 0.05, 0.2, 0.0), (100, 90, 2.0, 0.03, 0.3, 0.01)])
def test_mlmc_asian_against_plain_monte_carlo(client, S, K, T, r, sigma, q):
    """Tolerance: 3 x sqrt(eps^2 + se_ref^2) (the MLMC's RMS error target and the reference's
    standard error) plus 0.005 for the reference's trapezoid average over 200 dates against
    the continuously monitored average."""
    eps = 0.01
    ref, se = asian_call_mc(S, K, T, r, sigma, q)
    got = F.MLMC_ASIAN_CALL(S, K, T, r, sigma, eps, q)
    assert abs(got - ref) < 3 * math.hypot(eps, se) + 0.005
    assert got < bs_price("call", S, K, T, r, sigma, q)  # averaging lowers the volatility
    assert 0 < F.MLMC_STDERR(S, K, T, r, sigma, eps, q, None, None, "asian") <= eps


# ---- MLMC ranges, the standard error, the cache ----------------------------------------------

def test_mlmc_range_is_one_request(client):
    strikes = [[90.0], [100.0], [110.0]]
    eps = [[0.02, 0.01]]
    out = F.MLMC_PUT(100.0, strikes, 1.0, 0.05, 0.25, eps)
    assert np.shape(out) == (3, 2)
    assert client.calls == [("price_table", 6)]
    assert client.methods[0].name == "mlmc" and client.methods[0].eps == 0.01 and client.methods[0].seed == 0
    for i, (k,) in enumerate(strikes):
        for j, e in enumerate(eps[0]):
            assert abs(out[i][j] - bs_price("put", 100.0, k, 1.0, 0.05, 0.25)) < 3 * e
    # the standard errors of the same range: the same request, from the cache
    se = F.MLMC_STDERR(100.0, strikes, 1.0, 0.05, 0.25, eps, None, None, "put")
    assert len(client.calls) == 1
    assert all(0 < se[i][j] <= eps[0][j] for i in range(3) for j in range(2))
    # payoffs in a range: one request (the engine groups the payoff families inside it)
    mixed = F.MLMC_STDERR(100.0, 100.0, 1.0, 0.05, 0.2, 0.01, None, None, "call", [["vanilla", "asian", "digital"]])
    assert client.calls[-1] == ("price_table", 3) and len(client.calls) == 2
    assert mixed[0] == [F.MLMC_STDERR(100.0, 100.0, 1.0, 0.05, 0.2, 0.01, None, None, "call", p)
                        for p in ("vanilla", "asian", "digital")]


def test_mlmc_stderr_without_cache_is_the_same_run(client, monkeypatch):
    monkeypatch.setenv("OPTIOND_CACHE", "0")
    g = GILES
    a = F.MLMC_STDERR(g["S"], g["K"], g["T"], g["r"], g["sigma"], 0.01, 0.0, 7)
    b = F.MLMC_STDERR(g["S"], g["K"], g["T"], g["r"], g["sigma"], 0.01, 0.0, 7)
    assert a == b and len(client.calls) == 2  # deterministic for a seed: the same run again


def test_stderr_missing_from_the_reply_is_said(monkeypatch):
    class OldDaemon:
        """A daemon whose replies carry no standard error."""

        def price_table(self, columns, method=None, **kw):
            res = engine.price_table(columns, method)
            return Result(res.price, res.delta, res.gamma, res.theta, res.vega, res.rho, res.dividend_rho,
                          status=res.status, error=res.error, via="daemon")

    monkeypatch.setattr(pricing, "_client", lambda: OldDaemon())
    assert isinstance(F.MLMC_CALL(100.0, 100.0, 1.0, 0.05, 0.2, 0.05), float)
    out = F.MLMC_STDERR(100.0, col([100.0, -1.0]), 1.0, 0.05, 0.2, 0.05)
    assert is_error(out[0][0]) and "standard error" in out[0][0] and "optiond serve" in out[0][0]
    assert out[1][0] == "#optiond: K must be > 0, got -1"
    # such a reply is not cached: once the daemon sends standard errors, the cells show them
    monkeypatch.setattr(pricing, "_client", lambda: CountingClient())
    assert 0 < F.MLMC_STDERR(100.0, col([100.0, -1.0]), 1.0, 0.05, 0.2, 0.05)[0][0] <= 0.05
    assert 0 < F.MLMC_STDERR(100.0, 100.0, 1.0, 0.05, 0.2, 0.05) <= 0.05


# ---- MLMC bad input and the work limit ---------------------------------------------------------

def test_mlmc_bad_inputs_mark_their_own_cells(client):
    eps = [0.02, -0.01, 0.0, float("nan"), "abc", None, 0.001, 0.02, 0.02, 0.02]
    seed = [0, 0, 0, 0, 0, 0, 0, 1.5, -1, "x"]
    out = [r[0] for r in F.MLMC_CALL(100.0, 100.0, 1.0, 0.05, 0.2, col(eps), 0.0, col(seed))]
    assert abs(out[0] - bs_price("call", 100.0, 100.0, 1.0, 0.05, 0.2)) < 3 * 0.02
    assert out[1] == "#optiond: eps must be > 0, got -0.01"
    assert out[2] == "#optiond: eps must be > 0, got 0"
    assert out[3] == "#optiond: eps must be a finite number, got nan"
    assert out[4] == '#optiond: eps must be a number, got "abc"'
    assert out[5] == "#optiond: eps is required (empty cell)"
    assert out[6].startswith("#optiond: eps=0.001 is below the worksheet floor of 0.0001 x S = 0.01")
    assert "optiond panel" in out[6] and "optiond price" in out[6]
    assert out[7] == "#optiond: seed must be a whole number >= 0, got 1.5"
    assert out[8] == "#optiond: seed must be a whole number >= 0, got -1"
    assert out[9] == '#optiond: seed must be a number, got "x"'
    assert all(is_error(x) for x in out[1:])
    assert client.calls == [("price_table", 1)]  # only the good row travels
    # the schema's checks, per cell, in the same request as the good rows
    out = F.MLMC_PUT(col([100.0, -5.0, 100.0, 100.0]), 100.0, 1.0, 0.05, col([0.2, 0.2, 0.0, 7.0]), 0.05)
    assert isinstance(out[0][0], float)
    assert out[1][0] == "#optiond: S must be > 0, got -5"
    assert out[2][0] == "#optiond: sigma must be > 0, got 0"
    assert out[3][0].startswith("#optiond: sigma=7 looks like vol points: enter 0.07")  # the unit guard first
    assert is_error(F.MLMC_STDERR(100, 100, 1, 0.05, 0.2, 0.01, 0, 0, "call", "barrier"))
    assert is_error(F.MLMC_STDERR(100, 100, 1, 0.05, 0.2, 0.01, 0, 0, "straddle"))
    # the digital's floor is 1e-4 of its payout of 1, not of S
    assert isinstance(F.MLMC_DIGITAL_CALL(100.0, 100.0, 1.0, 0.05, 0.2, 0.001), float)
    assert "floor of 0.0001 for a digital" in F.MLMC_DIGITAL_CALL(100.0, 100.0, 1.0, 0.05, 0.2, 5e-5)


def test_mlmc_work_limit(client, monkeypatch):
    # on its own: a long, volatile option at the eps floor
    w = table.mlmc_path_steps("vanilla", 100.0, 5.0, 0.05, 0.0, 2.0, 0.01)
    assert w > table.MLMC_MAX_PATH_STEPS
    out = F.MLMC_CALL(100.0, 100.0, col([1.0, 5.0]), 0.05, col([0.2, 2.0]), 0.01)
    assert isinstance(out[0][0], float)
    assert out[1][0].startswith("#optiond: eps=0.01 needs about") and "path steps" in out[1][0]
    assert "raise eps" in out[1][0] and "optiond price" in out[1][0]
    # together: a range whose rows are each fine but not all at once
    one = float(table.mlmc_path_steps("vanilla", 100.0, 1.0, 0.05, 0.0, 0.2, 0.05))
    monkeypatch.setattr(table, "MLMC_MAX_PATH_STEPS", 2.5 * one)
    assert all(isinstance(r[0], float) for r in F.MLMC_CALL(100.0, col([95.0, 105.0]), 1.0, 0.05, 0.2, 0.05))
    out = F.MLMC_CALL(100.0, col([90.0, 100.0, 110.0, 120.0]), 1.0, 0.05, 0.2, 0.05)
    assert all(is_error(r[0]) and "this call needs about" in r[0] and "for 4 options" in r[0] for r in out)
    assert len(client.calls) == 2


# ---- Heston ----------------------------------------------------------------------------------

HESTON_CASES = [  # S, K, T (whole days / 365), r, q, v0, kappa, theta, xi, rho
    (100.0, 100.0, 1.0, 0.05, 0.0, 0.04, 1.5, 0.04, 0.3, -0.9),
    (100.0, 90.0, 182 / 365, 0.03, 0.02, 0.0625, 2.0, 0.05, 0.5, -0.5),
    (50.0, 55.0, 2.0, 0.02, 0.01, 0.09, 1.0, 0.09, 0.9, -0.3),  # high vol of vol
    (100.0, 80.0, 1.0, 0.04, 0.0, 0.04, 2.0, 0.04, 1.0, -0.7),  # vol of vol 1
    (100.0, 110.0, 91 / 365, 0.0, 0.0, 0.03, 3.0, 0.04, 0.2, 0.5),
]


@pytest.mark.parametrize("kind", ["call", "put"])
@pytest.mark.parametrize("case", HESTON_CASES)
def test_heston_european_against_quantlib(client, kind, case):
    f = F.HESTON_CALL if kind == "call" else F.HESTON_PUT
    got = f(*case, False)
    assert got == pytest.approx(heston_quantlib(kind, *case), abs=2e-3)
    am = f(*case)  # american defaults to TRUE, as for BOPM
    assert am == f(*case, True)
    assert am >= got - 2e-3  # ADI (American) against the semi-analytic European: within the grid error
    assert am >= max(0.0, (case[0] - case[1]) if kind == "call" else (case[1] - case[0])) - 1e-12


def test_heston_american_put_premium(client):
    case = HESTON_CASES[0]
    eu, am = F.HESTON_PUT(*case, col([False, True]))
    assert am[0] > eu[0] + 0.1  # an ATM put at 5 %: early exercise is worth something
    # the European row by the semi-analytic engine, the American one by ADI: a request each
    assert client.calls == [("price_table", 1)] * 2
    assert sorted(m.name for m in client.methods) == ["adi", "heston"]


def test_heston_european_is_semi_analytic(client, monkeypatch):
    """american=FALSE: the semi-analytic engine (QuantLib's AnalyticHestonEngine to 1e-8), the
    scheme ignored; with the default local budget priced in this process (no daemon request)."""
    for kind in ("call", "put"):
        f = F.HESTON_CALL if kind == "call" else F.HESTON_PUT
        for case in HESTON_CASES:
            assert f(*case, False) == pytest.approx(heston_quantlib(kind, *case, exact=True), abs=1e-8)
            assert f(*case, False, "hv") == f(*case, False)
    assert {m.name for m in client.methods} == {"heston"}
    monkeypatch.delenv("OPTIOND_LOCAL_NODES")
    client.calls.clear()
    F.clear_cache()
    assert F.HESTON_PUT(*HESTON_CASES[1], False) == pytest.approx(heston_quantlib("put", *HESTON_CASES[1], exact=True),
                                                                  abs=1e-8)
    assert client.calls == []


def test_heston_range_is_one_request(client):
    S, _, T, r, q, v0, kappa, theta, xi, _ = HESTON_CASES[0]
    strikes = col([90.0, 100.0, 110.0])
    rhos = [[-0.9, 0.0, 0.5]]
    out = F.HESTON_CALL(S, strikes, T, r, q, v0, kappa, theta, xi, rhos, True)
    assert client.calls == [("price_table", 9)]
    m = client.methods[0]
    assert (m.name, m.scheme, m.grid, m.time_steps) == ("adi", "mcs", table.HESTON_GRID, table.HESTON_TIME_STEPS)
    eu = F.HESTON_CALL(S, strikes, T, r, q, v0, kappa, theta, xi, rhos, False)
    assert client.calls[1] == ("price_table", 9) and client.methods[1].name == "heston"  # European: one request
    for i, (k,) in enumerate(strikes):
        for j, p in enumerate(rhos[0]):
            ref = heston_quantlib("call", S, k, T, r, q, v0, kappa, theta, xi, p)
            assert out[i][j] >= ref - 2e-3  # American: at least the European value
            assert eu[i][j] == pytest.approx(ref, abs=2e-3)


def test_heston_schemes(client):
    case = HESTON_CASES[0]
    ref = F.HESTON_PUT(*case, True)  # American, by ADI with the default scheme
    client.calls.clear()
    client.methods.clear()
    out = F.HESTON_PUT(*case, True, [["mcs", "HV", "cs", "do", "Hundsdorfer-Verwer", None]])[0]
    assert all(x == pytest.approx(ref, abs=3e-3) for x in out)  # the schemes' time-step errors differ by ~2.5e-3
    assert out[1] == out[4] and out[0] == out[5]  # names and the default
    assert sorted(m.scheme for m in client.methods) == ["cs", "do", "hv", "mcs"]  # a request per scheme
    assert [n for _, n in client.calls] == [2, 2, 1, 1]


def test_heston_bad_inputs_mark_their_own_cells(client):
    S, K, T, r, q, v0, kappa, theta, xi, rho = HESTON_CASES[0]
    out = [row[0] for row in F.HESTON_PUT(S, K, T, r, q, col([v0, -0.01, v0, v0, v0, v0, v0, v0]),
                                          col([kappa, kappa, 0.0, kappa, kappa, kappa, kappa, kappa]), theta,
                                          col([xi, xi, xi, 0.0, xi, xi, xi, xi]),
                                          col([rho, rho, rho, rho, 1.5, -1.01, rho, rho]),
                                          col([True] * 6 + ["maybe", True]),
                                          col(["mcs"] * 7 + ["xyz"]))]
    assert isinstance(out[0], float)
    assert out[1] == "#optiond: v0 must be >= 0, got -0.01"
    assert out[2] == "#optiond: kappa must be > 0, got 0"
    assert out[3] == "#optiond: xi must be > 0, got 0"
    assert out[4] == "#optiond: rho must be between -1 and 1, got 1.5"
    assert out[5] == "#optiond: rho must be between -1 and 1, got -1.01"
    assert out[6] == '#optiond: american must be TRUE or FALSE, got "maybe"'
    assert out[7] == '#optiond: scheme must be "mcs", "hv", "cs" or "do", got "xyz"'
    assert client.calls == [("price_table", 6)]  # the schema's checks travel; unknown texts never do
    assert F.HESTON_CALL(S, K, T, r, None, v0, kappa, theta, xi, rho) == "#optiond: q is required (empty cell)"


def test_heston_work_limit(client, monkeypatch):
    S, K, T, r, q, v0, kappa, theta, xi, rho = HESTON_CASES[0]
    assert table.heston_grid_work(1) == 200 * 100 * 100
    monkeypatch.setattr(table, "HESTON_MAX_GRID_WORK", table.heston_grid_work(3))
    assert all(isinstance(x[0], float) for x in F.HESTON_PUT(S, col([90.0, 100.0, 110.0]), T, r, q, v0, kappa, theta,
                                                             xi, rho, True))
    out = F.HESTON_PUT(S, col([80.0, 90.0, 100.0, 110.0]), T, r, q, v0, kappa, theta, xi, rho, True)
    assert all(is_error(x[0]) and "grid-cell updates for 4 options" in x[0] and "split the range" in x[0] for x in out)
    # European rows count nothing against the ADI budget
    assert all(isinstance(x[0], float) for x in F.HESTON_PUT(S, col([80.0, 90.0, 100.0, 110.0]), T, r, q, v0, kappa,
                                                             theta, xi, rho, False))
    monkeypatch.setattr(table, "HESTON_MAX_GRID_WORK", 1e6)
    one = F.HESTON_CALL(S, K, T, r, q, v0, kappa, theta, xi, rho)
    assert one.startswith("#optiond: one option needs about 2e+06 grid-cell updates") and "optiond price" in one
    assert [m.name for m in client.methods] == ["adi", "heston"]


# ---- the table ---------------------------------------------------------------------------------

def test_table_entries_and_limits():
    sig = {f.name: f.signature() for f in table.FUNCTIONS}
    for name in ("MLMC_CALL", "MLMC_PUT", "MLMC_ASIAN_CALL", "MLMC_DIGITAL_CALL"):
        assert sig[name] == f"{name}(S, K, T, r, sigma, eps, [q], [seed], [valuation])"
    assert sig["MLMC_STDERR"] == "MLMC_STDERR(S, K, T, r, sigma, eps, [q], [seed], [kind], [payoff], [valuation])"
    for name in ("HESTON_CALL", "HESTON_PUT"):
        # kappa...rho are left out when v0 is a Heston set's handle (OPTIOND_HESTON), else required
        assert sig[name] == f"{name}(S, K, T, r, q, v0, [kappa], [theta], [xi], [rho], [american], [scheme], [valuation])"
        spec = table.BY_NAME[name]
        assert spec.args[-3].default is True and spec.args[-2].default == "mcs" and spec.args[-1].name == "valuation"
    for spec in table.FUNCTIONS:
        assert len(spec.description) <= LIMIT and all(len(a.doc) <= LIMIT for a in spec.args)
        assert spec.name in F.formulas_functions()
    ref = generate.reference()
    for const in ("BOPM_MAX_TREE_NODES", "MLMC_MIN_EPS_REL", "MLMC_MAX_PATH_STEPS", "HESTON_MAX_GRID_WORK"):
        assert f"`{const}`" in ref
    assert "## `HESTON_PUT(S, K, T, r, q, v0, [kappa], [theta], [xi], [rho], [american], [scheme], [valuation])`" in ref
