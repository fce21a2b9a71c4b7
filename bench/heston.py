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

3. Section ``american_fit``: the Heston calibration of the bundled SPY chain (American contracts,
   ``examples/data/spy_chain_2026-02-13.csv``) directly to its American mids near the money:
   the chain job solves each expiry's spot, rate and carry, :func:`optiond.heston_fit.quotes_from_chain`
   keeps the out-of-the-money mids within ``--k-sd`` ATM standard deviations, at most
   ``--per-expiry`` a expiry (about 500 contracts), and :func:`optiond.heston_fit.fit_heston` with
   ``exercise="american"`` fits them: every evaluation one batched ADI solve of all of them, a
   coarse grid first, the ADI default at the end. Timed on the GPU (the fit's wall time, the CUDA
   module compiled beforehand) and on the CPU: the CPU time is measured per batched solve at each
   stage's settings (one solve of every contract, all cores) and multiplied by the solves the GPU
   fit made (the same iterations; a full CPU fit of ~500 contracts takes long), unless
   ``--cpu-full`` runs the whole fit on the CPU too.

4. ``gpu``: the 10,000 prices of each shape on the GPU, host to host, against the CPU kernel's.

Usage: ``python bench/heston.py [--only prices|spx|american_fit|gpu ...] [--threads 2] [--repeat 3] [--sample 300]
[--k-sd 2] [--per-expiry 17] [--cpu-full] [--out FILE]`` (every section without ``--only``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from optiond import chain, heston_fit  # noqa: E402
from optiond.kernels import adi  # noqa: E402
from optiond.kernels import gpu as kernel_gpu  # noqa: E402
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


SPY = Path(__file__).resolve().parents[1] / "examples" / "data" / "spy_chain_2026-02-13.csv"


def _record_solves(log: list):
    """Wrap the ADI front door so that every batched solve of the fit is logged (rows, settings, seconds)."""
    inner = adi.heston_price_batch
    depth = [0]

    def wrapped(*args, **kw):
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            out = inner(*args, **kw)
        finally:
            depth[0] -= 1
        if depth[0] == 0:  # the fit's own calls, not the front door's inner ones
            settings = {k: kw[k] for k in ("grid", "time_steps", "steps_per_year", "richardson") if k in kw}
            log.append({"rows": int(np.size(out["price"])), "settings": settings, "seconds": time.perf_counter() - t0})
        return out

    return inner, wrapped


def american_fit(k_sd: float, per_expiry: int, cpu_full: bool) -> dict:
    t0 = time.perf_counter()
    df = chain.read_chain(str(SPY))
    out, _ = chain.price_chain(df)
    t_chain = time.perf_counter() - t0
    quotes = heston_fit.quotes_from_chain(out, european_only=False, k_sd=k_sd, max_per_expiry=per_expiry)
    n = sum(e.strike.size for e in quotes)
    res = {"chain": SPY.name, "contracts": n, "expiries": len(quotes), "k_sd": k_sd, "per_expiry": per_expiry,
           "chain_job_s": t_chain, "stages": {"coarse": heston_fit.AMERICAN_COARSE,
                                              "final": {k: (list(v) if isinstance(v, tuple) else v)
                                                        for k, v in heston_fit.AMERICAN_FINAL.items()}}}
    have_gpu = kernel_gpu.available()
    log: list = []
    inner, wrapped = _record_solves(log)
    devices = (["gpu"] if have_gpu else []) + (["cpu"] if cpu_full or not have_gpu else [])
    for dev in devices:
        if dev == "gpu":  # compile the module outside the timing
            e = quotes[0]
            adi.heston_price_batch(e.kind[:2], "american", e.spot, e.strike[:2], e.T, 0.04, 0.01, 0.04, 2.0, 0.04,
                                   0.5, -0.7, device="gpu", grid=(20, 10), time_steps=4)
        log.clear()
        adi.heston_price_batch = wrapped
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                t1 = time.perf_counter()
                fit = heston_fit.fit_heston(quotes, exercise="american", device=dev)
                wall = time.perf_counter() - t1
        finally:
            adi.heston_price_batch = inner
        res[dev] = {"device": fit.device if dev == "cpu" else kernel_gpu.device_label(), "fit_s": wall,
                    "solves": fit.solves, "nfev": fit.nfev, "rows_solved": int(sum(x["rows"] for x in log)),
                    "solve_s": float(sum(x["seconds"] for x in log)), "params": fit.params, "rms_vol_pts": fit.rms_vol_pts,
                    "feller": fit.feller, "message": fit.message}
        print(f"{dev}: {n} contracts, fit {wall:.2f} s, {fit.solves} batched solves, RMS {fit.rms_vol_pts:.3f} vol pts, "
              f"{fit.params}", file=sys.stderr, flush=True)
        if dev == "gpu":
            res["gpu"]["solve_log"] = [{"rows": x["rows"], "richardson": bool(x["settings"].get("richardson")),
                                        "seconds": x["seconds"]} for x in log]
    if have_gpu and not cpu_full:
        # the CPU's time for the same solves: one batched solve of all contracts per stage, on all cores
        e_all = heston_fit._AmericanProblem(quotes, "cpu")
        p = np.array([fit.params[k] for k in heston_fit.PARAMS])
        per_row = {}
        for name, settings in (("coarse", heston_fit.AMERICAN_COARSE), ("final", heston_fit.AMERICAN_FINAL)):
            t1 = time.perf_counter()
            e_all.prices(p[None, :], settings)
            per_row[name] = (time.perf_counter() - t1) / e_all.n
        rows = {"coarse": sum(x["rows"] for x in log if not x["settings"].get("richardson")),
                "final": sum(x["rows"] for x in log if x["settings"].get("richardson"))}
        res["cpu_extrapolated"] = {
            "how": "CPU seconds per contract of one batched solve at each stage's settings (all cores) x the contracts "
                   "the GPU fit solved at those settings (same iterations)",
            "cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
            "seconds_per_contract": per_row, "rows": rows,
            "fit_s": float(sum(per_row[k] * rows[k] for k in rows))}
        print(f"cpu (extrapolated): {res['cpu_extrapolated']['fit_s']:.1f} s", file=sys.stderr, flush=True)
    return res


def gpu_bench(repeat: int) -> dict:
    """10,000 European prices of each shape on the GPU (``heston_batch_gpu``, host to host,
    best of ``repeat``, the module compiled beforehand) and their largest difference from the
    CPU kernel's, relative to max(1, price)."""
    from optiond.kernels.heston import gpu

    out = {"device": kernel_gpu.device_label()}
    for shape in ("random", "chain"):
        c = contracts(shape)
        args = (c["kind"], S0, c["strike"], c["expiry"], R, Q, c["v0"], c["kappa"], c["theta"], c["xi"], c["rho"])
        got = gpu.heston_batch_gpu(*args, greeks=False)[0]  # compile and warm
        ref = ours(c)
        out[shape] = {"contracts": len(c["strike"]),
                      "gpu_s": best(lambda: gpu.heston_batch_gpu(*args, greeks=False), repeat),
                      "cpu_s": best(lambda: ours(c), repeat),
                      "max_rel_diff_vs_cpu": float(np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref))))}
    return out


SECTIONS = ("prices", "spx", "american_fit", "gpu")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--only", choices=SECTIONS, action="append", help="run only these sections")
    ap.add_argument("--k-sd", type=float, default=2.0)
    ap.add_argument("--per-expiry", type=int, default=17)
    ap.add_argument("--cpu-full", action="store_true", help="run the whole American fit on the CPU as well")
    ap.add_argument("--out")
    a = ap.parse_args()
    only = set(a.only or SECTIONS)
    import numba

    numba.set_num_threads(min(a.threads, numba.config.NUMBA_NUM_THREADS))
    doc = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                       "load_avg_1min": os.getloadavg()[0], "numba_threads": numba.get_num_threads()},
           "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if "prices" in only:
        doc["prices"] = [prices_bench(s, a.repeat, a.sample) for s in ("random", "chain")]
    if "spx" in only:
        doc["spx_calibration"] = spx_bench(a.repeat)
    if "american_fit" in only:
        doc["american_fit"] = american_fit(a.k_sd, a.per_expiry, a.cpu_full)
    if "gpu" in only and kernel_gpu.available():
        doc["gpu"] = gpu_bench(a.repeat)
    text = json.dumps(doc, indent=2, default=float)
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
