"""Semi-analytic European Heston benchmarks; prints JSON.

1. 10,000 European Heston prices (no Greeks), ours (``optiond.kernels.heston``, numba on
   ``--threads`` threads, default 2, tolerance 1e-13, and at 1e-8: the error of QuantLib's
   default rule) against QuantLib's AnalyticHestonEngine on
   one core (its default Gauss–Laguerre rule of order 144, and its adaptive Gauss–Lobatto at a
   relative tolerance of 1e-10), in two shapes:

   * ``random``: every contract its own parameter set, expiry and strike (S = 100, K 50–150,
     T 0.05–3 y, v0 and theta 0.01–0.1, kappa 0.5–5, xi 0.1–1, rho -0.9–0): no sharing;
   * ``chain``: 100 expiries x 100 strikes under one parameter set (a calibration's shape:
     the strikes of an expiry share the characteristic function's evaluations).

   Errors: max absolute error over a sample of ``--sample`` contracts against QuantLib's
   adaptive Gauss–Lobatto at 1e-14 (the reference of ``tests/test_heston_analytic.py``).
   Times: best of ``--repeat`` runs, the numba kernels compiled beforehand.
2. The bundled SPX chain's calibration on the CPU: the chain job (forwards, IVs) and then the
   fit (:func:`optiond.heston_fit.fit_heston`, vega-scaled price residuals), each timed.

Usage: ``python bench/heston.py [--threads 2] [--repeat 3] [--sample 300] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from optiond.kernels.heston import cpu  # noqa: E402

S0, R, Q = 100.0, 0.03, 0.01
DATA = Path(__file__).resolve().parents[1] / "examples" / "data" / "spx_chain_2025-10-01.csv"


def contracts(shape: str, n: int = 10_000, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    days = None
    if shape == "random":
        days = rng.integers(18, 1095, n)
        cols = dict(kind=rng.integers(0, 2, n).astype(np.int8), strike=rng.uniform(50, 150, n),
                    v0=rng.uniform(0.01, 0.1, n), kappa=rng.uniform(0.5, 5, n), theta=rng.uniform(0.01, 0.1, n),
                    xi=rng.uniform(0.1, 1.0, n), rho=rng.uniform(-0.9, 0.0, n))
    else:
        m = int(round(n ** 0.5))
        days = np.repeat(np.linspace(18, 1095, m).round().astype(int), m)
        strike = np.tile(np.linspace(50, 150, m), m)
        cols = dict(kind=(strike >= 100).astype(np.int8), strike=strike, v0=np.full(n, 0.04), kappa=np.full(n, 1.5),
                    theta=np.full(n, 0.06), xi=np.full(n, 0.6), rho=np.full(n, -0.7))
    cols["days"] = days
    cols["expiry"] = days / 365.0  # whole days (Actual/365 Fixed), so QuantLib's dates give the same T
    return cols


def ours(c: dict, tol: float = cpu.TOL) -> np.ndarray:
    return cpu.heston_batch(c["kind"], S0, c["strike"], c["expiry"], R, Q, c["v0"], c["kappa"], c["theta"], c["xi"],
                            c["rho"], greeks=False, tol=tol)[0]


def quantlib(c: dict, rows, engine: str) -> np.ndarray:
    import QuantLib as ql

    today = ql.Date(2, 1, 2024)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    rts = ql.YieldTermStructureHandle(ql.FlatForward(today, R, dc))
    qts = ql.YieldTermStructureHandle(ql.FlatForward(today, Q, dc))
    spot = ql.QuoteHandle(ql.SimpleQuote(S0))
    out = np.empty(len(rows))
    # one model and one engine, the parameters set per contract (QuantLib's own calibration
    # loop does the same: the Gauss-Laguerre nodes are computed once)
    model = ql.HestonModel(ql.HestonProcess(rts, qts, spot, 0.04, 1.0, 0.04, 0.5, -0.5))
    eng = (ql.AnalyticHestonEngine(model, 144) if engine == "laguerre-144" else
           ql.AnalyticHestonEngine(model, 1e-10, 1_000_000) if engine == "lobatto-1e-10" else
           ql.AnalyticHestonEngine(model, 1e-14, 1_000_000))
    last = None
    for j, i in enumerate(rows):
        v0, kappa, theta, xi, rho = (float(c[p][i]) for p in ("v0", "kappa", "theta", "xi", "rho"))
        if (v0, kappa, theta, xi, rho) != last:
            model.setParams(ql.Array([theta, kappa, xi, rho, v0]))
            last = (v0, kappa, theta, xi, rho)
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if c["kind"][i] else ql.Option.Put,
                                                     float(c["strike"][i])),
                               ql.EuropeanExercise(today + int(c["days"][i])))
        opt.setPricingEngine(eng)
        out[j] = opt.NPV()
    return out


def best(fn, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def prices_bench(shape: str, repeat: int, sample: int) -> dict:
    c = contracts(shape)
    n = len(c["strike"])
    rows = np.random.default_rng(2).choice(n, size=sample, replace=False)
    sub = {k: v[rows] for k, v in c.items()}
    ref = quantlib(sub, range(sample), "reference")
    ours(sub)  # compile
    res = {"contracts": n, "shape": shape}
    res["ours_s"] = best(lambda: ours(c), repeat)
    res["ours_max_abs_err"] = float(np.max(np.abs(ours(c)[rows] - ref)))
    ours(sub, 1e-8)
    res["ours_tol_1e-8_s"] = best(lambda: ours(c, 1e-8), repeat)
    res["ours_tol_1e-8_max_abs_err"] = float(np.max(np.abs(ours(c, 1e-8)[rows] - ref)))
    for eng in ("laguerre-144", "lobatto-1e-10"):
        res[f"quantlib_{eng}_s"] = best(lambda: quantlib(c, range(n), eng), 1)
        res[f"quantlib_{eng}_max_abs_err"] = float(np.max(np.abs(quantlib(sub, range(sample), eng) - ref)))
    res["speedup_vs_laguerre"] = res["quantlib_laguerre-144_s"] / res["ours_s"]
    res["speedup_vs_lobatto"] = res["quantlib_lobatto-1e-10_s"] / res["ours_s"]
    return res


def spx_bench(repeat: int) -> dict:
    from optiond import chain, heston_fit

    t0 = time.perf_counter()
    df = chain.read_chain(str(DATA))
    out, _ = chain.price_chain(df)
    chain_s = time.perf_counter() - t0
    quotes = heston_fit.quotes_from_chain(out)
    heston_fit.fit_heston(quotes)  # compile
    fits = []
    fit_s = best(lambda: fits.append(heston_fit.fit_heston(quotes)), repeat)
    f = fits[-1]
    return {"chain_job_s": chain_s, "fit_s": fit_s, "expiries": len(quotes), "quotes": int(sum(q.strike.size for q in quotes)),
            "params": f.params, "rms_vol_pts": f.rms_vol_pts, "sse": f.sse, "nfev": f.nfev,
            "feller_satisfied": f.feller["satisfied"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--out")
    a = ap.parse_args()
    import numba

    numba.set_num_threads(min(a.threads, numba.config.NUMBA_NUM_THREADS))
    doc = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                       "load_avg_1min": os.getloadavg()[0], "numba_threads": numba.get_num_threads()},
           "prices": [prices_bench(s, a.repeat, a.sample) for s in ("random", "chain")],
           "spx_calibration": spx_bench(a.repeat)}
    text = json.dumps(doc, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
