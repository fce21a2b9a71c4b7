"""The golden workbooks: ``.xlsx`` files whose sheets price with optiond's worksheet functions and
compare each result with a reference value in a PASS/FAIL column, in the pattern of QuantLibXL's
unit-test workbooks. ``tests/test_golden.py`` recalculates them with the ``formulas`` package
(the functions registered) against a live daemon and without one, and asserts every PASS cell.

Each sheet (:class:`Sheet`) is: a title and the sources of its expected values (written on the
sheet), optional set-up rows (market objects made by ``OPTIOND_CURVE`` and the like, which the
formulas refer to), a header row, and one row per case: the inputs, the formula (``got``), the
expected value, the tolerance and ``=IF(ABS(got-expected)<=tol,"PASS","FAIL")``. The expected
values are computed here, when the workbooks are written (QuantLib 1.44, closed forms), or
copied from a published table (the source is on the row); the written ``.xlsx`` files are
committed. A new sheet is a :class:`Sheet` added to :data:`WORKBOOKS`; regenerate with::

    python tests/golden/build.py

Formulas name a row's inputs as ``{S}``, ``{K}``... (the input columns), and the set-up cells by
their absolute address (``$B$6``).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
#: the column headers after the inputs
RESULT_COLUMNS = ("got", "expected", "tol", "check", "source")
#: the first row of the set-up block; the table starts after it
SETUP_ROW = 4


@dataclass
class Case:
    """One row: the inputs (in the sheet's input order), the expected value, its tolerance
    (absolute), where the expected value comes from, and the formula when it differs from the
    sheet's."""

    inputs: Sequence[Any]
    expected: float
    tol: float
    source: str
    formula: str | None = None


@dataclass
class Sheet:
    name: str
    title: str
    sources: Sequence[str]
    inputs: Sequence[str]
    formula: str
    cases: Sequence[Case]
    setup: Sequence[Sequence[Any]] = field(default_factory=list)


def _col(i: int) -> str:
    from openpyxl.utils import get_column_letter

    return get_column_letter(i + 1)


def write_sheet(ws, sheet: Sheet) -> list[str]:
    """Write ``sheet`` to the openpyxl worksheet ``ws``; returns the addresses of its check cells."""
    ws["A1"] = sheet.title
    ws["A2"] = "Sources: " + "; ".join(sheet.sources)
    for r, row in enumerate(sheet.setup):
        for c, v in enumerate(row):
            ws.cell(SETUP_ROW + r, c + 1, v)
    head = SETUP_ROW + len(sheet.setup) + 1
    names = list(sheet.inputs) + list(RESULT_COLUMNS)
    for c, name in enumerate(names):
        ws.cell(head, c + 1, name)
    n = len(sheet.inputs)
    got, exp, tol, chk, src = (_col(n + i) for i in range(5))
    checks = []
    for i, case in enumerate(sheet.cases):
        r = head + 1 + i
        refs = {name: f"{_col(c)}{r}" for c, name in enumerate(sheet.inputs)}
        for c, v in enumerate(case.inputs):
            ws.cell(r, c + 1, v)
        ws[f"{got}{r}"] = "=" + (case.formula or sheet.formula).format(**refs)
        ws[f"{exp}{r}"] = float(case.expected)
        ws[f"{tol}{r}"] = float(case.tol)
        ws[f"{chk}{r}"] = f'=IF(ABS({got}{r}-{exp}{r})<={tol}{r},"PASS","FAIL")'
        ws[f"{src}{r}"] = case.source
        checks.append(f"{chk}{r}")
    return checks


def write(path: Path, sheets: Sequence[Sheet]) -> dict[str, list[str]]:
    """Write one workbook of ``sheets``; returns each sheet's check cells."""
    import openpyxl

    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    out = {}
    for sheet in sheets:
        out[sheet.name] = write_sheet(wb.create_sheet(sheet.name), sheet)
    wb.save(path)
    return out


# ---- references ------------------------------------------------------------------------------

def _ql():
    import QuantLib as ql

    today = ql.Date(15, 1, 2025)
    ql.Settings.instance().evaluationDate = today
    return ql, today, ql.Actual365Fixed()


def _process(S, r_curve, q, sigma):
    ql, today, dc = _ql()
    curve = r_curve if not isinstance(r_curve, (int, float)) else ql.FlatForward(today, r_curve, dc)
    return ql.BlackScholesMertonProcess(
        ql.QuoteHandle(ql.SimpleQuote(S)), ql.YieldTermStructureHandle(ql.FlatForward(today, q, dc)),
        ql.YieldTermStructureHandle(curve),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), sigma, dc)))


def ql_european(kind, S, K, days, r, sigma, q=0.0) -> float:
    """QuantLib AnalyticEuropeanEngine; ``r`` a rate or a QuantLib yield curve; T = days/365."""
    ql, today, _ = _ql()
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put if kind == "put" else ql.Option.Call, K),
                           ql.EuropeanExercise(today + int(days)))
    opt.setPricingEngine(ql.AnalyticEuropeanEngine(_process(S, r, q, sigma)))
    return opt.NPV()


def ql_american(kind, S, K, days, r, sigma, q=0.0) -> float:
    """QuantLib QdFpAmericanEngine, high-precision scheme (FP_A)."""
    ql, today, _ = _ql()
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put if kind == "put" else ql.Option.Call, K),
                           ql.AmericanExercise(today, today + int(days)))
    opt.setPricingEngine(ql.QdFpAmericanEngine(_process(S, r, q, sigma), ql.QdFpAmericanEngine.highPrecisionScheme(),
                                               ql.QdFpAmericanEngine.FP_A))
    return opt.NPV()


def _heston_option(kind, S, K, days, r, q, params, american: bool):
    ql, today, dc = _ql()
    proc = ql.HestonProcess(ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc)),
                            ql.YieldTermStructureHandle(ql.FlatForward(today, q, dc)),
                            ql.QuoteHandle(ql.SimpleQuote(S)), *params)
    exercise = ql.AmericanExercise(today, today + int(days)) if american else ql.EuropeanExercise(today + int(days))
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put if kind == "put" else ql.Option.Call, K), exercise)
    return ql, opt, ql.HestonModel(proc)


def ql_heston(kind, S, K, days, r, q, *params) -> float:
    """QuantLib AnalyticHestonEngine (European); params v0, kappa, theta, xi, rho."""
    ql, opt, model = _heston_option(kind, S, K, days, r, q, params, False)
    opt.setPricingEngine(ql.AnalyticHestonEngine(model))
    return opt.NPV()


def ql_heston_american(kind, S, K, days, r, q, *params) -> float:
    """QuantLib FdHestonVanillaEngine (American; 200 time steps, 400 x 200 grid, Modified Craig-Sneyd)."""
    ql, opt, model = _heston_option(kind, S, K, days, r, q, params, True)
    opt.setPricingEngine(ql.FdHestonVanillaEngine(model, 200, 400, 200, 0, ql.FdmSchemeDesc.ModifiedCraigSneyd()))
    return opt.NPV()


def ql_discount_curve(days: Sequence[float], rates: Sequence[float]):
    """QuantLib DiscountCurve through exp(-r t) at the tenors (log-linear in the discount
    factors: the raw interpolation of optiond's ZeroCurve between tenors)."""
    ql, today, dc = _ql()
    return ql.DiscountCurve([today] + [today + int(d) for d in days],
                            [1.0] + [math.exp(-r * d / 365.0) for d, r in zip(days, rates)], dc)


# ---- the surface the SURFACE sheet reads (published under SURFACE_NAME before recalculation) ------

SURFACE_NAME = "GOLDEN-SVI"
#: (T, forward, raw SVI a, b, rho, m, sigma) per slice; rate 4 %, spot 100
SVI_SLICES = ((0.25, 101.0, (0.010, 0.10, -0.5, 0.00, 0.10)), (1.0, 104.0, (0.040, 0.12, -0.4, 0.05, 0.20)))


def golden_surface():
    from optiond.surface.model import Slice, Surface
    from optiond.surface.svi import SVI

    return Surface("GOLD", "2025-01-15T16:00:00-05:00",
                   [Slice(f"2025-0{i + 4}-15", T, F, 0.04, SVI(*p), {}, 100.0) for i, (T, F, p) in enumerate(SVI_SLICES)])


def svi_vol(T, F, p, K) -> float:
    """Raw SVI (Gatheral 2004): w(k) = a + b (rho (k - m) + sqrt((k - m)^2 + sigma^2)), k = ln(K/F)."""
    a, b, rho, m, s = p
    k = math.log(K / F)
    return math.sqrt((a + b * (rho * (k - m) + math.sqrt((k - m) ** 2 + s * s))) / T)


def bs(kind, S, K, T, r, sigma, q=0.0) -> float:
    """Black-Scholes-Merton closed form."""
    N = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731
    sq = sigma * math.sqrt(T)
    d1 = (math.log(S / K) + (r - q + 0.5 * sigma * sigma) * T) / sq
    if kind == "call":
        return S * math.exp(-q * T) * N(d1) - K * math.exp(-r * T) * N(d1 - sq)
    return K * math.exp(-r * T) * N(-(d1 - sq)) - S * math.exp(-q * T) * N(-d1)


# ---- the sheets --------------------------------------------------------------------------------

QL = "QuantLib 1.44"
HULL = "Hull, Options, Futures and Other Derivatives, 10th ed."


def sheet_bs() -> Sheet:
    cases = [
        Case((42, 40, 0.5, 0.1, 0.2, 0, "call"), 4.76, 0.005, f"{HULL}, Example 15.6 (call 4.76)",
             "BS_CALL({S},{K},{T},{r},{sigma},{q})"),
        Case((42, 40, 0.5, 0.1, 0.2, 0, "put"), 0.81, 0.005, f"{HULL}, Example 15.6 (put 0.81)",
             "BS_PUT({S},{K},{T},{r},{sigma},{q})"),
    ]
    for kind in ("call", "put"):
        for S, K, days, r, sig, q in ((100, 90, 91, 0.05, 0.25, 0.01), (100, 110, 365, 0.03, 0.4, 0.0),
                                      (50, 55, 730, -0.005, 0.2, 0.02)):
            cases.append(Case((S, K, days / 365, r, sig, q, kind), ql_european(kind, S, K, days, r, sig, q), 1e-9,
                              f"{QL} AnalyticEuropeanEngine", f"BS_{kind.upper()}({{S}},{{K}},{{T}},{{r}},{{sigma}},{{q}})"))
    return Sheet("BS", "Black-Scholes-Merton: BS_CALL, BS_PUT", [HULL, f"{QL} AnalyticEuropeanEngine"],
                 ("S", "K", "T", "r", "sigma", "q", "kind"), "", cases)


def sheet_crr() -> Sheet:
    f = "BOPM_{kind}({S},{K},{T},{r},{sigma},{N},{q},{american})"
    cases = [Case((50, 50, 5 / 12, 0.1, 0.4, 5, 0, True), 4.49, 0.005,
                  f"{HULL}, Example 21.1: American put on a 5-step tree (4.49)", f.replace("{kind}", "PUT"))]
    for kind in ("call", "put"):  # European trees against the closed form, N = 2000: O(1/N) error
        for S, K, days, r, sig, q in ((100, 100, 365, 0.05, 0.3, 0.0), (100, 90, 182, 0.03, 0.2, 0.02)):
            cases.append(Case((S, K, days / 365, r, sig, 2000, q, False), ql_european(kind, S, K, days, r, sig, q), 2e-3,
                              f"{QL} AnalyticEuropeanEngine; a CRR tree's error at N = 2000 is below 2e-3 here",
                              f.replace("{kind}", kind.upper())))
    return Sheet("CRR", "Cox-Ross-Rubinstein trees: BOPM_CALL, BOPM_PUT", [HULL, f"{QL} AnalyticEuropeanEngine"],
                 ("S", "K", "T", "r", "sigma", "N", "q", "american"), "", cases)


def sheet_american() -> Sheet:
    cases = []
    for kind in ("put", "call"):
        for S, K, days, r, sig, q in ((100, 100, 365, 0.05, 0.25, 0.05), (100, 90, 182, 0.04, 0.3, 0.0),
                                      (100, 110, 730, 0.03, 0.2, 0.06)):
            cases.append(Case((S, K, days / 365, r, sig, q), ql_american(kind, S, K, days, r, sig, q), 1e-5,
                              f"{QL} QdFpAmericanEngine, high precision",
                              f"AMERICAN_{kind.upper()}({{S}},{{K}},{{T}},{{r}},{{sigma}},{{q}})"))
    return Sheet("AMERICAN", "American options, spectral engine: AMERICAN_PUT, AMERICAN_CALL (accuracy: accurate)",
                 [f"{QL} QdFpAmericanEngine (Andersen, Lake & Offengenden 2016), high-precision scheme"],
                 ("S", "K", "T", "r", "sigma", "q"), "", cases)


HESTON = (0.04, 1.5, 0.04, 0.3, -0.7)


def sheet_heston() -> Sheet:
    setup = [["heston set", '=OPTIOND_HESTON("GOLDEN-H",{},{},{},{},{})'.format(*HESTON)]]
    cases = []
    args = "{S},{K},{T},{r},{q}"
    for kind in ("put", "call"):
        for K in (90.0, 110.0):
            cases.append(Case((100, K, 1.0, 0.05, 0.01), ql_heston(kind, 100.0, K, 365, 0.05, 0.01, *HESTON), 1e-8,
                              f"{QL} AnalyticHestonEngine (European; ours the semi-analytic engine)",
                              f"HESTON_{kind.upper()}({args},{','.join(map(str, HESTON))},FALSE)"))
            cases.append(Case((100, K, 1.0, 0.05, 0.01), ql_heston_american(kind, 100.0, K, 365, 0.05, 0.01, *HESTON),
                              5e-3, f"{QL} FdHestonVanillaEngine (American, 400 x 200 grid, 200 steps); the set by "
                              "handle", f"HESTON_{kind.upper()}({args},$B$4)"))
    return Sheet("HESTON", "Heston: HESTON_PUT, HESTON_CALL, European (semi-analytic) with the "
                 "parameters given, American (ADI, 200 x 100 grid, 100 steps) by an OPTIOND_HESTON handle "
                 "(v0 {} kappa {} theta {} xi {} rho {})"
                 .format(*HESTON), [f"{QL} AnalyticHestonEngine, FdHestonVanillaEngine"], ("S", "K", "T", "r", "q"),
                 "", cases, setup)


def new_york_years(valuation: tuple, expiry: tuple) -> float:
    """Years between two dates' 16:00 New York closes, in minutes / 525,600 (daylight saving
    counted), computed here with the standard library's time zones: the add-in's date rule."""
    import datetime as dt
    from zoneinfo import ZoneInfo

    ny = ZoneInfo("America/New_York")
    # in UTC: Python subtracts two times of the same zone as wall-clock times
    a, b = (dt.datetime(*d, 16, 0, tzinfo=ny).astimezone(dt.timezone.utc) for d in (valuation, expiry))
    return (b - a).total_seconds() / 60.0 / 525_600.0


#: (valuation, expiry) dates across a daylight-saving change and within one
DESK_DATES = (((2026, 12, 18), (2027, 6, 18)), ((2027, 1, 4), (2027, 2, 19)))


def sheet_desk() -> Sheet:
    cases = []
    for kind in ("call", "put"):  # implied volatility of QuantLib's prices
        for S, K, days, r, sig, q in ((100, 60, 730, 0.03, 0.35, 0.01), (100, 100, 7, 0.05, 0.2, 0.0),
                                      (100, 180, 3650, 0.02, 0.25, 0.015), (100, 95, 91, 0.04, 0.8, 0.02)):
            price = ql_european(kind, S, K, days, r, sig, q)
            cases.append(Case((S, K, days / 365, r, sig, q, kind, price), sig, 1e-10,
                              f"{QL} AnalyticEuropeanEngine price at sigma = {sig}; BS_IV recovers sigma",
                              "BS_IV({price},{S},{K},{T},{r},{q},{kind})"))
    for val, exp in DESK_DATES:  # T as a date: the expiry's 16:00 New York close from the valuation's
        T = new_york_years(val, exp)
        for kind in ("call", "put"):
            cases.append(Case((100, 105, T, 0.04, 0.3, 0.01, kind, 0.0), bs(kind, 100, 105, T, 0.04, 0.3, 0.01), 1e-12,
                              "Black-Scholes closed form at T = minutes between the 16:00 New York closes / 525,600",
                              f"BS_{kind.upper()}({{S}},{{K}},DATE({exp[0]},{exp[1]},{exp[2]}),{{r}},{{sigma}},{{q}},"
                              f"DATE({val[0]},{val[1]},{val[2]}))"))
    return Sheet("DESK", "Desk functions: BS_IV (European implied volatility), and T given as the expiry date with a "
                 "valuation date (16:00 New York closes, minutes / 525,600)",
                 [f"{QL} AnalyticEuropeanEngine", "Black-Scholes closed form", "IANA time zone America/New_York"],
                 ("S", "K", "T", "r", "sigma", "q", "kind", "price"), "", cases)


CURVE_DAYS = (30, 91, 182, 365, 730)
CURVE_RATES = (0.040, 0.042, 0.045, 0.043, 0.039)


def sheet_curve() -> Sheet:
    setup = [["days", *CURVE_DAYS], ["rates", *CURVE_RATES], ["curve", '=OPTIOND_CURVE("GOLDEN-USD",B4:F4,B5:F5)'],
             ["flat", '=OPTIOND_CURVE("GOLDEN-FLAT",B4:F4,{0.043,0.043,0.043,0.043,0.043})']]
    curve = ql_discount_curve(CURVE_DAYS, CURVE_RATES)
    cases = []
    for kind in ("put", "call"):
        for K, days in ((95, 45), (105, 120), (100, 300), (110, 600)):
            cases.append(Case((100, K, days / 365, 0.3), ql_european(kind, 100, K, days, curve, 0.3), 1e-9,
                              f"{QL} AnalyticEuropeanEngine on a DiscountCurve (log-linear discount factors)",
                              f"BS_{kind.upper()}({{S}},{{K}},{{T}},$B$6,{{sigma}})"))
        cases.append(Case((100, 100, 0.7, 0.25), bs(kind, 100, 100, 0.7, 0.043, 0.25), 1e-12,
                          "Black-Scholes closed form at the flat curve's rate 4.3%",
                          f"BS_{kind.upper()}({{S}},{{K}},{{T}},$B$7,{{sigma}})"))
    return Sheet("CURVE", "A zero curve by handle as r: OPTIOND_CURVE (zero rates, continuously compounded; log "
                 "discount linear between tenors)", [f"{QL} DiscountCurve, AnalyticEuropeanEngine",
                                                     "Hagan & West (2006), raw interpolation"],
                 ("S", "K", "T", "sigma"), "", cases, setup)


#: QuantLib 1.44 FdBlackScholesVanillaEngine, spot model (CashDividendModel.Spot), 4000x4000 and 8000x8000
#: Douglas grids Richardson-extrapolated (the values of tests/test_binomial_dividends.py): S 100, r 5 %,
#: sigma 30 %, T 365 days, no yield, American; (schedule in days, kind, K, v4000, v8000)
DIVIDEND_REFERENCES = (
    (((100, 2.0), (280, 2.0)), "put", 90.0, 6.8022141333, 6.8021425434),
    (((45, 1.0), (136, 1.0), (227, 1.0), (318, 1.0)), "call", 90.0, 17.2135621312, 17.2135641952),
    (((180, 3.0),), "put", 110.0, 17.2722339185, 17.2721215532),
    (((5, 2.0),), "call", 110.0, 9.0516145386, 9.0516169820),
)


def sheet_dividends() -> Sheet:
    setup, cases = [], []
    for i, (sched, kind, K, v4, v8) in enumerate(DIVIDEND_REFERENCES):
        row = SETUP_ROW + 3 * i
        setup += [[f"ex_dates {i + 1}", *[d / 365 for d, _ in sched]], [f"amounts {i + 1}", *[a for _, a in sched]],
                  [f"schedule {i + 1}", f'=OPTIOND_DIVIDENDS("GOLDEN-DIV{i + 1}",B{row}:E{row},B{row + 1}:E{row + 1})']]
        cases.append(Case((100, K, 1.0, 0.05, 0.3, 1000), 2 * v8 - v4, 4e-3,
                          f"{QL} FdBlackScholesVanillaEngine, spot model, Richardson-extrapolated 4000/8000 grids; "
                          "the tree's first-order error at N = 1000",
                          f"BOPM_{kind.upper()}({{S}},{{K}},{{T}},{{r}},{{sigma}},{{N}},$B${row + 2})"))
    return Sheet("DIVIDENDS", "Cash dividends by handle as q: OPTIOND_DIVIDENDS on the CRR tree (spot model), American",
                 [f"{QL} FdBlackScholesVanillaEngine with a DividendVector, CashDividendModel.Spot",
                  "Vellekoop & Nieuwenhuis (2006)"], ("S", "K", "T", "r", "sigma", "N"), "", cases, setup)


def sheet_surface() -> Sheet:
    cases = []
    for T, F, p in SVI_SLICES:
        for K in (80.0, 100.0, 125.0):
            for kind in ("call", "put"):
                cases.append(Case((100, K, T, 0.04), bs(kind, 100, K, T, 0.04, svi_vol(T, F, p, K)), 1e-10,
                                  "Black-Scholes at the raw SVI volatility (Gatheral 2004) of the slice",
                                  f'BS_{kind.upper()}({{S}},{{K}},{{T}},{{r}},"{SURFACE_NAME}")'))
    return Sheet("SURFACE", f"A volatility surface by name as sigma: the surface {SURFACE_NAME} (two raw SVI slices, "
                 "published before recalculation), read at each K and T",
                 ["Gatheral (2004), raw SVI", "Black-Scholes closed form"], ("S", "K", "T", "r"), "", cases)


#: the workbooks: file name -> its sheets
WORKBOOKS = {"pricing.xlsx": (sheet_bs, sheet_crr, sheet_american, sheet_heston, sheet_desk),
             "objects.xlsx": (sheet_curve, sheet_dividends, sheet_surface)}


def main(argv: Sequence[str] = ()) -> int:
    out = Path(argv[0]) if argv else HERE
    for name, makers in WORKBOOKS.items():
        checks = write(out / name, [m() for m in makers])
        print(f"{out / name}: " + ", ".join(f"{s} {len(c)}" for s, c in checks.items()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    raise SystemExit(main(sys.argv[1:]))
