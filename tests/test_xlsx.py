"""A real .xlsx with optiond formulas, recalculated without Excel against a live daemon.

The workbook is written with openpyxl: input cells, a column of strikes, and formulas
``=BOPM_PUT(...)``, ``=BOPM_CALL(...)``, ``=BS_PUT(...)``, ``=BOPM_IV(...)``,
``=BOPM_GREEKS(...)``, ``=MLMC_CALL(...)``, ``=HESTON_PUT(...)`` and ``=PARITY_FORWARD(...)`` (over
a strip of ``=BS_CALL`` and ``=BS_PUT`` cells) that refer to them (single
cells, array formulas over a range of strikes, a formula over formula cells, bad inputs). The
``formulas`` package recalculates it with the functions registered under their Excel names;
every request must be answered by the daemon (``OPTIOND_FALLBACK=0``), and the cell values are
checked against references written here: Black-Scholes-Merton with math.erf, a plain NumPy
CRR tree, and (for the Heston cells) QuantLib's ``AnalyticHestonEngine``.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

formulas = pytest.importorskip("formulas")
openpyxl = pytest.importorskip("openpyxl")
from openpyxl.worksheet.formula import ArrayFormula  # noqa: E402

from optiond.addin import functions as F  # noqa: E402
from optiond.addin import pricing  # noqa: E402
from optiond.daemon.client import get_client  # noqa: E402

S, R, Q, T, SIGMA, N = 100.0, 0.05, 0.01, 0.5, 0.25, 200
STRIKES = [80.0, 90.0, 100.0, 110.0, 120.0]
ROWS = range(2, 2 + len(STRIKES))
EPS = 0.02  # MLMC target RMS error
#: Heston: expiry (whole days / 365, for QuantLib's dates), v0, kappa, theta, xi, rho
HESTON = dict(TH=1.0, v0=0.04, kappa=1.5, theta=0.04, xi=0.3, rho=-0.7)


def _ncdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def bs_put(S, K, T, r, sigma, q=0.0) -> float:
    sq = sigma * math.sqrt(T)
    d1 = (math.log(S / K) + (r - q + 0.5 * sigma * sigma) * T) / sq
    return K * math.exp(-r * T) * _ncdf(-(d1 - sq)) - S * math.exp(-q * T) * _ncdf(-d1)


def crr(kind, S, K, T, r, sigma, N, q=0.0, american=False):
    """(price, delta) on a CRR tree by backward induction over NumPy levels."""
    dt = T / N
    u = math.exp(sigma * math.sqrt(dt))
    p = (math.exp((r - q) * dt) - 1 / u) / (u - 1 / u)
    disc = math.exp(-r * dt)

    def payoff(s):
        return np.maximum(s - K, 0.0) if kind == "call" else np.maximum(K - s, 0.0)

    V = payoff(S * u ** (2.0 * np.arange(N + 1) - N))
    delta = math.nan
    for t in range(N - 1, -1, -1):
        V = disc * (p * V[1:] + (1.0 - p) * V[:-1])
        if american:
            V = np.maximum(V, payoff(S * u ** (2.0 * np.arange(t + 1) - t)))
        if t == 1:
            delta = (V[1] - V[0]) / (S * u - S / u)
    return float(V[0]), delta


def heston_put_ql(K: float) -> float:
    """European Heston put by QuantLib's AnalyticHestonEngine (T a whole number of days / 365)."""
    ql = pytest.importorskip("QuantLib")
    h = HESTON
    today = ql.Date(15, 1, 2024)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    def curve(x):
        return ql.YieldTermStructureHandle(ql.FlatForward(today, x, dc))

    process = ql.HestonProcess(curve(R), curve(Q), ql.QuoteHandle(ql.SimpleQuote(S)), h["v0"], h["kappa"], h["theta"],
                               h["xi"], h["rho"])
    option = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put, K), ql.EuropeanExercise(today + round(h["TH"] * 365)))
    option.setPricingEngine(ql.AnalyticHestonEngine(ql.HestonModel(process)))
    return option.NPV()


def bs_call(S, K, T, r, sigma, q=0.0) -> float:
    sq = sigma * math.sqrt(T)
    d1 = (math.log(S / K) + (r - q + 0.5 * sigma * sigma) * T) / sq
    return S * math.exp(-q * T) * _ncdf(d1) - K * math.exp(-r * T) * _ncdf(d1 - sq)


def build(path) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "PRICING"
    for row, (label, value) in enumerate((("S", S), ("r", R), ("q", Q), ("T", T), ("sigma", SIGMA), ("N", N)), 1):
        ws.cell(row, 1, label)
        ws.cell(row, 2, value)
    ws["D1"] = "K"
    for r, k in zip(ROWS, STRIKES):
        ws[f"D{r}"] = k
        ws[f"E{r}"] = f"=BOPM_PUT($B$1, D{r}, $B$4, $B$2, $B$5, $B$6, $B$3, TRUE)"
        ws[f"F{r}"] = f"=BOPM_CALL($B$1, D{r}, $B$4, $B$2, $B$5, $B$6, $B$3, FALSE)"
        ws[f"G{r}"] = f"=BS_PUT($B$1, D{r}, $B$4, $B$2, $B$5, $B$3)"
        ws[f"I{r}"] = f'=BOPM_IV(E{r}, $B$1, D{r}, $B$4, $B$2, $B$3, "put", $B$6, TRUE)'
        ws[f"K{r}"] = f"=E{r}-G{r}"  # early exercise premium over the European closed form, by Excel arithmetic
        ws[f"Y{r}"] = f"=BS_CALL($B$1, D{r}, $B$4, $B$2, $B$5, $B$3)"
    last = ROWS[-1]
    # range arguments: one request each, the result spills over the array formula's cells
    ws["H2"] = ArrayFormula(f"H2:H{last}", f"=BOPM_PUT(B1, D2:D{last}, B4, B2, B5, B6, B3, FALSE)")
    ws["J2"] = ArrayFormula(f"J2:J{last}", f'=BOPM_IV(E2:E{last}, B1, D2:D{last}, B4, B2, B3, "put", B6, TRUE)')
    ws["M2"] = ArrayFormula("M2:R2", '=BOPM_GREEKS(B1, D4, B4, B2, B5, B6, B3, "put", FALSE)')
    # an omitted optional argument, and bad inputs: a message in the cell
    ws["A10"] = "=BS_PUT(B1, D4, B4, B2, B5)"
    ws["A11"] = "=BOPM_PUT(B1, -5, B4, B2, B5, B6)"
    ws["A12"] = '=BS_PUT(B1, "abc", B4, B2, B5)'
    ws["A13"] = "=BOPM_PUT(B1, 1/0, B4, B2, B5, B6)"
    ws["A14"] = "=BOPM_PUT(B1, D4, B4, B2, B5, B30)"
    ws["A15"] = "=BOPM_CALL(B1, D4, B4, B2, B5, 0)"
    # MLMC and Heston: inputs in U1:V7, a single cell and an array formula each, bad inputs
    for row, (label, value) in enumerate(list(HESTON.items()) + [("eps", EPS)], 1):
        ws.cell(row, 21, label)
        ws.cell(row, 22, value)
    ws["S2"] = "=MLMC_CALL($B$1, D4, $B$4, $B$2, $B$5, $V$7, $B$3)"
    ws["S3"] = "=MLMC_CALL($B$1, D4, $B$4, $B$2, $B$5, $V$7, $B$3, 7)"
    ws["T2"] = ArrayFormula(f"T2:T{last}", f"=MLMC_CALL(B1, D2:D{last}, B4, B2, B5, V7, B3)")
    ws["W2"] = ArrayFormula(f"W2:W{last}", f"=HESTON_PUT(B1, D2:D{last}, V1, B2, B3, V2, V3, V4, V5, V6, FALSE)")
    ws["X2"] = "=HESTON_PUT(B1, D4, V1, B2, B3, V2, V3, V4, V5, V6)"
    ws["X3"] = '=HESTON_PUT(B1, D4, V1, B2, B3, V2, V3, V4, V5, V6, TRUE, "hv")'
    ws["A16"] = "=MLMC_CALL(B1, D4, B4, B2, B5, -0.01)"
    ws["A17"] = "=MLMC_CALL(B1, D4, B4, B2, B5, 0.0001)"
    ws["A18"] = "=HESTON_PUT(B1, D4, V1, B2, B3, V2, V3, V4, V5, 1.5)"
    ws["A19"] = '=HESTON_PUT(B1, D4, V1, B2, B3, V2, V3, V4, V5, V6, FALSE, "xyz")'
    ws["A20"] = "=MLMC_STDERR(B1, D4, B4, B2, B5, V7, B3)"
    # the forward and discount factor of the strip of closed-form calls (Y) and puts (G)
    ws["Z2"] = ArrayFormula("Z2:AA2", f"=PARITY_FORWARD(D2:D{last}, Y2:Y{last}, G2:G{last}, B4)")
    ws["Z3"] = ArrayFormula("Z3:AA3", f"=PARITY_FORWARD(D2:D{last}, Y2:Y{last}, G2:G{last}, B4, B2)")
    ws["A21"] = f"=PARITY_FORWARD(D2:D{last}, Y2:Y{last}, G2:G{last}, 0)"
    wb.save(path)


class _Spy:
    """The real client, recording where each request was priced."""

    def __init__(self):
        self.real = get_client()
        self.via: list[tuple[str, str, int]] = []

    def price_table(self, columns, method=None, **kw):
        res = self.real.price_table(columns, method, **kw)
        self.via.append(("price_table", res.via, len(res)))
        return res

    def implied_vol(self, prices, columns, method=None, **kw):
        out = self.real.implied_vol(prices, columns, method, **kw)
        self.via.append(("implied_vol", "daemon", len(out[0])))  # fallback is off: only the daemon answers
        return out


@pytest.fixture(scope="module")
def recalculated(daemon, tmp_path_factory):
    """Build the workbook and recalculate it once for the module: (cell values by reference,
    the spy, the daemon's request counts before and after)."""
    with pytest.MonkeyPatch.context() as mp:
        # the daemon fixture points OPTIOND_CONNECTION_FILE at its connection file; accept it
        # handed over as a path (or an object with .connection_file) as well
        conn = getattr(daemon, "connection_file", daemon)
        if isinstance(conn, (str, os.PathLike)):
            mp.setenv("OPTIOND_CONNECTION_FILE", str(conn))
        mp.setenv("OPTIOND_FALLBACK", "0")
        mp.setenv("OPTIOND_LOCAL_NODES", "0")  # every cell through the daemon, small ones too
        mp.delenv("OPTIOND_CACHE", raising=False)
        F.clear_cache()
        spy = _Spy()
        mp.setattr(pricing, "_client", lambda: spy)
        before = spy.real.status()["by_op"]
        path = tmp_path_factory.mktemp("xlsx") / "chain.xlsx"
        build(path)
        F.register_formulas()
        solution = formulas.ExcelModel().loads(str(path)).finish().calculate()
        after = spy.real.status()["by_op"]
        F.clear_cache()
    values = {key.split("!")[-1]: np.asarray(getattr(v, "value", v), dtype=object) for key, v in solution.items()}
    return values, spy, before, after


def cell(values, ref):
    return values[ref].ravel()[0]


def test_workbook_recalculates_against_the_daemon(recalculated):
    values, spy, before, after = recalculated
    assert spy.via and all(v == "daemon" for _, v, _ in spy.via), spy.via
    assert after.get("price", 0) - before.get("price", 0) == sum(1 for op, _, _ in spy.via if op == "price_table")
    assert after.get("implied_vol", 0) - before.get("implied_vol", 0) >= 2
    # the array formulas over the strike range: one request of five rows each
    assert ("price_table", "daemon", 5) in spy.via and ("implied_vol", "daemon", 5) in spy.via

    for r, k in zip(ROWS, STRIKES):
        am_put = crr("put", S, k, T, R, SIGMA, N, Q, american=True)[0]
        eu_call = crr("call", S, k, T, R, SIGMA, N, Q)[0]
        assert cell(values, f"E{r}") == pytest.approx(am_put, rel=1e-12)
        assert cell(values, f"F{r}") == pytest.approx(eu_call, rel=1e-12)
        assert cell(values, f"G{r}") == pytest.approx(bs_put(S, k, T, R, SIGMA, Q), rel=1e-12)
        assert cell(values, f"I{r}") == pytest.approx(SIGMA, abs=1e-8)  # the IV of the American put cell
        assert cell(values, f"K{r}") == pytest.approx(am_put - bs_put(S, k, T, R, SIGMA, Q), rel=1e-10, abs=1e-12)
    h = values[f"H2:H{ROWS[-1]}"].ravel()
    j = values[f"J2:J{ROWS[-1]}"].ravel()
    for i, k in enumerate(STRIKES):
        assert h[i] == pytest.approx(crr("put", S, k, T, R, SIGMA, N, Q)[0], rel=1e-12)
        assert j[i] == pytest.approx(SIGMA, abs=1e-8)

    greeks = values["M2:R2"].ravel()
    assert len(greeks) == 6 and all(isinstance(g, float) for g in greeks)  # ... rho, dividend rho
    assert greeks[0] == pytest.approx(crr("put", S, 100.0, T, R, SIGMA, N, Q)[1], rel=1e-10)  # delta


def test_workbook_mlmc_and_heston_against_the_daemon(recalculated):
    values, spy, _, _ = recalculated
    last = ROWS[-1]
    assert ("price_table", "daemon", 5) in spy.via  # each array formula: one request of five rows
    mlmc = values[f"T2:T{last}"].ravel()
    for i, k in enumerate(STRIKES):
        assert abs(mlmc[i] - bs_call(S, k, T, R, SIGMA, Q)) < 3 * EPS
    single, seed7 = cell(values, "S2"), cell(values, "S3")
    assert single == mlmc[2]  # the same inputs and the default seed: the same estimate
    assert seed7 != single and abs(seed7 - bs_call(S, 100.0, T, R, SIGMA, Q)) < 3 * EPS
    eu = values[f"W2:W{last}"].ravel()
    for i, k in enumerate(STRIKES):
        assert eu[i] == pytest.approx(heston_put_ql(k), abs=2e-3)
    am, am_hv = cell(values, "X2"), cell(values, "X3")  # american by default
    assert am > eu[2] + 0.05 and am_hv == pytest.approx(am, abs=2e-3)


def test_workbook_defaults_and_errors(recalculated):
    values = recalculated[0]
    assert cell(values, "A10") == pytest.approx(bs_put(S, 100.0, T, R, SIGMA), rel=1e-12)  # q omitted: 0
    expected = {
        "A11": "#optiond: K must be > 0, got -5",
        "A12": '#optiond: K must be a number, got "abc"',
        "A13": "#optiond: K is #DIV/0!",
        "A14": "#optiond: N is required (empty cell)",
        "A15": "#optiond: N must be between 1 and 1e+07, got 0",
        "A16": "#optiond: eps must be > 0, got -0.01",
        "A18": "#optiond: rho must be between -1 and 1, got 1.5",
        "A19": '#optiond: scheme must be "mcs", "hv", "cs" or "do", got "xyz"',
    }
    for ref, text in expected.items():
        assert cell(values, ref) == text
    assert cell(values, "A17").startswith("#optiond: eps=0.0001 is below the worksheet floor of 0.0001 x S = 0.01")


def test_workbook_parity_forward_of_a_strip_of_formula_cells(recalculated):
    values = recalculated[0]
    for ref in ("Z2:AA2", "Z3:AA3"):  # both fitted; the rate given
        forward, discount = values[ref].ravel()
        assert forward == pytest.approx(S * math.exp((R - Q) * T), rel=1e-9)
        assert discount == pytest.approx(math.exp(-R * T), rel=1e-9)
    assert cell(values, "A21") == "#optiond: T must be > 0, got 0"


def test_workbook_mlmc_stderr_through_the_daemon(recalculated):
    se = cell(recalculated[0], "A20")
    assert isinstance(se, float) and 0 < se <= EPS
