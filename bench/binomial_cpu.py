"""CPU CRR binomial: ours (numba) against QuantLib's BinomialVanillaEngine("crr"), one run.

Prints JSON: one American put at N = 1e3 and 1e4 on one core (ns per node, ratio to
QuantLib), and 10,000 American puts x N = 1000 on all cores. With ``--dividends``: that batch
with four cash dividends each beside the same batch without, and one American put with four
cash dividends on one core against QuantLib's finite differences with the same schedule
(``FdBlackScholesVanillaEngine``, spot model) at a range of steps and grids, each with its
error against the QuantLib reference of ``tests/test_binomial_dividends.py``.

    python bench/binomial_cpu.py [--repeats 5] [--dividends]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numba
import numpy as np

from optiond.kernels.binomial import cpu as bc


def nodes(N: int) -> int:
    return (N + 1) * (N + 2) // 2


def best_of(fn, repeats: int) -> float:
    fn()  # warm-up (JIT compile, caches)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def quantlib_setup(vol: float, strike: float):
    """QuantLib's American put (S = 100, r = 5 %, q = 0, T = 365 days) on a Black-Scholes
    process: ``(ql, today, spot quote, process, option, run)``; ``run`` prices it afresh."""
    import QuantLib as ql

    today = ql.Date(2, 1, 2026)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    spot = ql.SimpleQuote(100.0)
    proc = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(spot), ql.YieldTermStructureHandle(ql.FlatForward(today, 0.0, dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, 0.05, dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), vol, dc)))
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put, strike), ql.AmericanExercise(today, today + 365))
    state = {"i": 0}

    def run():
        state["i"] += 1
        spot.setValue(100.0 + 1e-9 * (state["i"] % 2))  # forces a fresh calculation
        return opt.NPV()

    return ql, today, spot, proc, opt, run


def quantlib_put(N: int, repeats: int):
    ql, _, _, proc, opt, run = quantlib_setup(0.2, 100.0)
    opt.setPricingEngine(ql.BinomialVanillaEngine(proc, "crr", N))
    return best_of(run, repeats), ql.__version__


#: the quarterly schedule of tests/test_binomial_dividends.py (days, cash) and the QuantLib
#: reference of its American put, K = 110, q = 0 (S = 100, r = 5 %, sigma = 30 %, T = 365 days)
QUARTERLY = [(45, 1.0), (136, 1.0), (227, 1.0), (318, 1.0)]
QUARTERLY_PUT_110 = 17.3558922682


def dividends(repeats: int) -> dict:
    """Cash dividends: the batch beside the dividend-free batch (all cores), and one option on
    one core against QuantLib's FD engine with the same schedule, error against the reference
    (that part only where QuantLib is installed)."""
    n, N = 10_000, 1000
    rng = np.random.default_rng(0)
    K = rng.uniform(80.0, 120.0, n)
    t = np.array([d for d, _ in QUARTERLY]) / 365.0
    a = np.array([x for _, x in QUARTERLY])
    plain = best_of(lambda: bc.crr_batch(0, 1, 100.0, K, 1.0, 0.05, 0.0, 0.3, N, greeks=False, parallel=True), 3)
    cash = best_of(lambda: bc.crr_batch(0, 1, 100.0, K, 1.0, 0.05, 0.0, 0.3, N, greeks=False, parallel=True,
                                        dividend_times=t, dividend_amounts=a), 3)
    out = {"batch": {"options": n, "N": N, "dividends": len(QUARTERLY), "no_dividends_s": plain, "dividends_s": cash,
                     "ratio": cash / plain}, "one_option": {"ours": [], "quantlib_fd": []}}
    for steps in (250, 500, 1000, 2000, 4000):
        f = lambda: bc.crr_batch(0, 1, 100.0, 110.0, 1.0, 0.05, 0.0, 0.3, steps, greeks=False, parallel=False,
                                 dividend_times=t, dividend_amounts=a)[0, 0]
        sec = best_of(f, repeats)
        out["one_option"]["ours"].append({"N": steps, "s": sec, "error": abs(f() - QUARTERLY_PUT_110)})
    try:
        ql, today, spot, proc, opt, run = quantlib_setup(0.3, 110.0)
    except ImportError:
        out["one_option"]["quantlib_fd"] = "QuantLib is not installed"
        return out
    schedule = ql.DividendVector([today + d for d, _ in QUARTERLY], [x for _, x in QUARTERLY])
    for grid in (50, 100, 200, 400, 800):
        opt.setPricingEngine(ql.FdBlackScholesVanillaEngine(proc, schedule, grid, grid, 0, ql.FdmSchemeDesc.Douglas(),
                                                            False, -0.1, ql.FdBlackScholesVanillaEngine.Spot))
        sec = best_of(run, repeats)
        spot.setValue(100.0)
        out["one_option"]["quantlib_fd"].append({"grid": grid, "s": sec, "error": abs(opt.NPV() - QUARTERLY_PUT_110)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dividends", action="store_true", help="only the cash-dividend comparisons")
    args = ap.parse_args()
    if args.dividends:
        print(json.dumps({"bench": "binomial_cpu_dividends", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                          "numba_threads": numba.get_num_threads(), **dividends(args.repeats)}, indent=2))
        return
    out = {"bench": "binomial_cpu", "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "numba_threads": numba.get_num_threads(), "single_option": []}
    for N in (1000, 10_000):
        ours = best_of(lambda: bc.crr_batch(0, 1, 100.0, 100.0, 1.0, 0.05, 0.0, 0.2, N, greeks=False, parallel=False), args.repeats)
        ql_t, ql_version = quantlib_put(N, max(2, args.repeats // 2) if N > 5000 else args.repeats)
        out["quantlib"] = ql_version
        out["single_option"].append({
            "N": N, "ours_s": ours, "ours_ns_per_node": ours / nodes(N) * 1e9,
            "quantlib_s": ql_t, "quantlib_ns_per_node": ql_t / nodes(N) * 1e9, "speedup_vs_quantlib": ql_t / ours})
    n, N = 10_000, 1000
    rng = np.random.default_rng(0)
    K = rng.uniform(80.0, 120.0, n)
    batch = best_of(lambda: bc.crr_batch(0, 1, 100.0, K, 1.0, 0.05, 0.0, 0.25, N, greeks=False, parallel=True), 3)
    out["batch"] = {"options": n, "N": N, "seconds": batch, "ns_per_node_per_core": batch * numba.get_num_threads() / (n * nodes(N)) * 1e9,
                    "nodes_per_s": n * nodes(N) / batch}
    greeks = best_of(lambda: bc.crr_batch(0, 1, 100.0, K, 1.0, 0.05, 0.0, 0.25, N, greeks=True, parallel=True), 2)
    out["batch_with_greeks_s"] = greeks
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
