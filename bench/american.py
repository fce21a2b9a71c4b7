"""Benchmark: the spectral American engine (ALO) against QuantLib's QdFpAmericanEngine.

1. One American put (S = K = 100, T = 1, r = 7.5 %, q = 5 %, sigma = 25 %): time per option on
   one core and the error against QuantLib's high-precision scheme, at each accuracy setting,
   ours and QuantLib's (fast / accurate / high precision).
2. 100,000 American options (random S/K 0.7–1.3, T 1 week–5 years, sigma 0.05–1, r, q 0–10 %):
   ours (fast, every core: numba prange) against QuantLib QdFp fast on one core, scaled by the
   core count (its per-option time measured on a 2,000-option sample).

Prints one JSON object. Run: ``python bench/american.py [--n 100000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numba
import numpy as np
import QuantLib as ql

from optiond.kernels.spectral import cpu

TODAY = ql.Date(1, 6, 2022)
SCHEMES = {"fast": ql.QdFpAmericanEngine.fastScheme, "accurate": ql.QdFpAmericanEngine.accurateScheme,
           "high-precision": ql.QdFpAmericanEngine.highPrecisionScheme}


def ql_option(kind, S, K, days, r, q, sigma, scheme, fp=None):
    ql.Settings.instance().evaluationDate = TODAY
    dc = ql.Actual365Fixed()
    proc = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(ql.SimpleQuote(S)), ql.YieldTermStructureHandle(ql.FlatForward(TODAY, q, dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(TODAY, r, dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(TODAY, ql.NullCalendar(), sigma, dc)))
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if kind == 1 else ql.Option.Put, K),
                           ql.AmericanExercise(TODAY, TODAY + int(days)))
    eng = ql.QdFpAmericanEngine(proc, SCHEMES[scheme](), fp if fp is not None else ql.QdFpAmericanEngine.Auto)
    opt.setPricingEngine(eng)
    return opt


def per_call(fn, reps):
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args()
    out: dict = {"cores": os.cpu_count(), "numba_threads": numba.get_num_threads()}
    ref = ql_option(0, 100.0, 100.0, 365, 0.075, 0.05, 0.25, "high-precision", ql.QdFpAmericanEngine.FP_A).NPV()
    one = {}
    numba.set_num_threads(1)
    for name in cpu.ACCURACY_NAMES:
        args1 = (np.array([0], dtype=np.int8), np.array([100.0]), 100.0, 1.0, 0.075, 0.05, 0.25, name)
        ours = cpu.alo_batch(*args1, greeks=False)[0, 0]
        t_ours = per_call(lambda: cpu.alo_batch(*args1, greeks=False), 200 if name != "high-precision" else 20)
        opt = ql_option(0, 100.0, 100.0, 365, 0.075, 0.05, 0.25, name)
        qlv = opt.NPV()

        def again(o=opt):
            o.recalculate()
            return o.NPV()

        t_ql = per_call(again, 200 if name != "high-precision" else 20)
        one[name] = {"ours_us": t_ours * 1e6, "ours_error": abs(ours - ref), "quantlib_us": t_ql * 1e6,
                     "quantlib_error": abs(qlv - ref)}
    out["one_put"] = {"reference": ref, "settings": one}
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    rng = np.random.default_rng(1)
    n = args.n
    kind = rng.integers(0, 2, n).astype(np.int8)
    S = 100.0 * rng.uniform(0.7, 1.3, n)
    days = np.round(np.exp(rng.uniform(np.log(7), np.log(5 * 365), n))).astype(int)
    sig, r, q = rng.uniform(0.05, 1.0, n), rng.uniform(0.0, 0.1, n), rng.uniform(0.0, 0.1, n)
    cpu.alo_batch(kind[:10], S[:10], 100.0, days[:10] / 365.0, r[:10], q[:10], sig[:10], "fast", greeks=False)
    t = time.perf_counter()
    cpu.alo_batch(kind, S, 100.0, days / 365.0, r, q, sig, "fast", greeks=False)
    ours = time.perf_counter() - t
    m = min(n, 2000)
    t = time.perf_counter()
    for i in range(m):
        ql_option(kind[i], S[i], 100.0, days[i], r[i], q[i], sig[i], "fast").NPV()
    ql_per = (time.perf_counter() - t) / m
    cores = numba.get_num_threads()
    out["batch"] = {"n": n, "ours_fast_s": ours, "ours_cores": cores,
                    "quantlib_fast_one_core_s": ql_per * n, "quantlib_fast_per_core_scaled_s": ql_per * n / cores,
                    "speedup_vs_quantlib_scaled": ql_per * n / cores / ours}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
