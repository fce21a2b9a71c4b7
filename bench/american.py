"""Benchmark: the spectral American engine (ALO) against QuantLib's QdFpAmericanEngine.

1. One American put (S = K = 100, T = 1, r = 7.5 %, q = 5 %, sigma = 25 %), one core: time per
   option and absolute error against a converged QuantLib scheme (tanh-sinh, 64 Chebyshev
   nodes), for each of our settings and each of QuantLib's (fast / accurate / high precision).
   Ours is timed on a batch of identical puts on one numba thread (per option), QuantLib per
   ``recalculate(); NPV()`` call on a built option. For each QuantLib setting: the cheapest of
   ours whose error is <= QuantLib's, and the speed ratio. Then the same at equal accuracy over
   the 240-option grid of ``tests/test_spectral.py``: each engine's worst error there, and for
   each QuantLib setting the cheapest of ours (the settings and lighter ``cpu.Accuracy``
   configurations, ``LIGHTER``) whose worst grid error is at most QuantLib's.
2. 100,000 American options (random S/K 0.7–1.3, T 1 week–5 years, sigma 0.05–1, r, q
   0–10 %): ours (fast, every numba thread) against QuantLib QdFp fast on one core (its
   per-option ``recalculate(); NPV()`` time on a 2,000-option sample, options built
   beforehand), divided by the core count; 9 rounds of both, alternated, the best of each; worst error of both against our high-precision setting on the sample.
3. A real chain's American implied volatilities (``--chain``, default the bundled SPY chain):
   the chain job's own market per row (``optiond.chain.solve_market``: spot, rate, carry as
   dividend yield; T rounded to whole days, as QuantLib's dates need, for every solver), the
   mid quotes of the two-sided single-boundary rows whose high-precision IV exists. Ours
   (``alo_implied_vol``, a setting, every numba thread) against QuantLib QdFp fast + Brent
   (``scipy.optimize.brentq`` on ``NPV()`` with the volatility quote moved) on as many
   processes as cores; worst IV error of each against our high-precision IV.
4. ``gpu`` (needs CuPy and a GPU; QuantLib not needed): the GPU kernel (``kernels/spectral/gpu.py``)
   on section 2's 100,000 options at each setting, prices only and at the fast setting with
   Greeks: device time (CUDA events behind a stream gate, median of 5) and host to host
   (median of 5), the largest relative difference from the CPU reference (prices over 1e-15);
   implied volatilities of the 100,000 fast prices (device and host-to-host time, the worst
   round-trip error where the price has a vega to invert); both kernel layouts (a solve a thread,
   a solve a warp) on 1,000 to 100,000 options at each setting (``gpu.THREAD_MIN_SOLVES``); and
   host-to-host GPU against CPU times on batches of 100 to 10,000 (the front door's
   ``GPU_MIN_ROWS``).
5. ``gpu_chain`` (needs CuPy and a GPU): section 3's rows and reference IVs solved by the GPU's IV
   kernel (device and host-to-host time, worst IV error), and, where a daemon runs
   (``optiond serve``), as one ``implied_vol`` request with the spectral method on the GPU
   (median round trip).

Times are wall-clock (``perf_counter``) and, for the one-core rows, also the thread's CPU time
(``thread_time``), which a shared machine disturbs less; the one-core rows take the best of 5
rounds. Prints one JSON object. Run:
``python bench/american.py [--n 100000] [--chain FILE] [--chain-setting fast] [--dump rows.npz]
[--skip one_put batch chain gpu gpu_chain] [--only gpu gpu_chain]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time

import numba
import numpy as np
from scipy.optimize import brentq

from optiond.kernels.spectral import cpu

try:
    import QuantLib as ql
except ImportError:  # the gpu section runs without it
    ql = None
if ql is not None:
    TODAY = ql.Date(1, 6, 2022)
    SCHEMES = {"fast": ql.QdFpAmericanEngine.fastScheme, "accurate": ql.QdFpAmericanEngine.accurateScheme,
               "high-precision": ql.QdFpAmericanEngine.highPrecisionScheme,
               "converged": lambda: ql.QdFpTanhSinhIterationScheme(12, 64, 1e-12)}
PUT = (100.0, 100.0, 365, 0.075, 0.05, 0.25)  # S, K, days, r, q, sigma
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ql_option(kind, S, K, days, r, q, sigma, scheme, fp=None):
    """A QuantLib American option on a flat market with the QdFp engine; returns (option, vol quote)."""
    ql.Settings.instance().evaluationDate = TODAY
    dc = ql.Actual365Fixed()
    vol = ql.SimpleQuote(sigma)
    proc = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(ql.SimpleQuote(S)), ql.YieldTermStructureHandle(ql.FlatForward(TODAY, q, dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(TODAY, r, dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(TODAY, ql.NullCalendar(), ql.QuoteHandle(vol), dc)))
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if kind == 1 else ql.Option.Put, K),
                           ql.AmericanExercise(TODAY, TODAY + int(days)))
    opt.setPricingEngine(ql.QdFpAmericanEngine(proc, SCHEMES[scheme](),
                                               fp if fp is not None else ql.QdFpAmericanEngine.Auto))
    return opt, vol


def timed(fn, reps, rounds=5):
    """(wall, thread CPU) seconds per call of ``fn`` after one warm-up call: the best of
    ``rounds`` rounds of ``reps`` calls (the least disturbed by a shared machine)."""
    fn()
    best_w = best_c = float("inf")
    for _ in range(rounds):
        w, c = time.perf_counter(), time.thread_time()
        for _ in range(reps):
            fn()
        best_w = min(best_w, (time.perf_counter() - w) / reps)
        best_c = min(best_c, (time.thread_time() - c) / reps)
    return best_w, best_c


def one_put() -> dict:
    S, K, days, r, q, sig = PUT
    ref = ql_option(0, S, K, days, r, q, sig, "converged", ql.QdFpAmericanEngine.FP_A)[0].NPV()
    numba.set_num_threads(1)
    ours, theirs = {}, {}
    for name in cpu.ACCURACY_NAMES:
        batch = {"fast": 2000, "accurate": 500}.get(name, 100)
        args = (np.zeros(batch, dtype=np.int8), np.full(batch, S), K, days / 365.0, r, q, sig, name)
        price = cpu.alo_batch(*args, greeks=False)[0, 0]
        w, c = timed(lambda a=args: cpu.alo_batch(*a, greeks=False), 3)
        ours[name] = {"us": w / len(args[0]) * 1e6, "cpu_us": c / len(args[0]) * 1e6, "error": abs(price - ref)}
    for name in ("fast", "accurate", "high-precision"):
        opt = ql_option(0, S, K, days, r, q, sig, name)[0]
        price = opt.NPV()

        def again(o=opt):
            o.recalculate()
            return o.NPV()

        w, c = timed(again, {"fast": 2000, "accurate": 200, "high-precision": 10}[name])
        theirs[name] = {"us": w * 1e6, "cpu_us": c * 1e6, "error": abs(price - ref)}
    match = {}
    for name, t in theirs.items():
        ok = [o for o in ours if ours[o]["error"] <= t["error"]]
        if ok:
            best = min(ok, key=lambda o: ours[o]["cpu_us"])
            match[name] = {"ours": best, "speedup_cpu": t["cpu_us"] / ours[best]["cpu_us"],
                           "speedup_wall": t["us"] / ours[best]["us"]}
    grid = _grid_frontier(ours, theirs)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return {"reference": ref, "ours": ours, "quantlib": theirs, "at_equal_or_smaller_error": match, "grid": grid}


#: lighter configurations of our engine (n, l, m, p) for the equal-grid-error comparison (not
#: named settings: ``cpu.Accuracy`` objects)
LIGHTER = ((7, 6, 2, 16), (8, 6, 3, 16), (9, 7, 3, 20))


def _grid_frontier(ours: dict, theirs: dict) -> dict:
    """Worst absolute error over the 240-option grid of ``tests/test_spectral.py`` against the
    converged QuantLib scheme, of QuantLib's three settings, ours, and :data:`LIGHTER`
    configurations of ours (timed on the one put like the settings); for each QuantLib setting,
    the cheapest of ours (settings and lighter configurations) whose worst grid error is at most
    QuantLib's, and the CPU-time ratio on the one put."""
    rng = np.random.default_rng(7)
    n = 240
    kind = np.tile([0, 1], n // 2).astype(np.int8)
    S = 100.0 * rng.uniform(0.7, 1.3, n)
    days = np.round(np.exp(rng.uniform(np.log(7), np.log(5 * 365), n))).astype(int)
    sig, r, q = rng.uniform(0.05, 1.0, n), rng.uniform(0.0, 0.1, n), rng.uniform(0.0, 0.1, n)
    rows = list(zip(kind, S, days, r, q, sig))
    fp = ql.QdFpAmericanEngine.FP_A
    ref = np.array([ql_option(k, s_, 100.0, d, r_, q_, v, "converged", fp)[0].NPV() for k, s_, d, r_, q_, v in rows])
    out = {"quantlib": {}, "ours": {}}
    for name in theirs:
        got = np.array([ql_option(k, s_, 100.0, d, r_, q_, v, name)[0].NPV() for k, s_, d, r_, q_, v in rows])
        out["quantlib"][name] = {"worst_error": float(np.abs(got - ref).max()), "cpu_us": theirs[name]["cpu_us"]}
    configs = {name: cpu.ACCURACY[name] for name in ours}
    configs.update({"n{}_l{}_m{}_p{}".format(*c): cpu.Accuracy("lighter", *c) for c in LIGHTER})
    for label, acc in configs.items():
        got = cpu.alo_batch(kind, S, 100.0, days / 365.0, r, q, sig, acc, greeks=False)[0]
        if label in ours:
            us = ours[label]["cpu_us"]
        else:
            pS, pK, pdays, pr, pq, psig = PUT
            a = (np.zeros(2000, dtype=np.int8), np.full(2000, pS), pK, pdays / 365.0, pr, pq, psig, acc)
            us = timed(lambda a=a: cpu.alo_batch(*a, greeks=False), 3)[1] / len(a[0]) * 1e6
        out["ours"][label] = {"worst_error": float(np.abs(got - ref).max()), "cpu_us": us}
    out["at_equal_or_smaller_worst_grid_error"] = {}
    for name, t in out["quantlib"].items():
        ok = [o for o, v in out["ours"].items() if v["worst_error"] <= t["worst_error"]]
        if ok:
            best = min(ok, key=lambda o: out["ours"][o]["cpu_us"])
            out["at_equal_or_smaller_worst_grid_error"][name] = {
                "ours": best, "speedup_cpu": t["cpu_us"] / out["ours"][best]["cpu_us"]}
    return out


def random_grid(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 2, n).astype(np.int8)
    S = 100.0 * rng.uniform(0.7, 1.3, n)
    days = np.round(np.exp(rng.uniform(np.log(7), np.log(5 * 365), n))).astype(int)
    sig, r, q = rng.uniform(0.05, 1.0, n), rng.uniform(0.0, 0.1, n), rng.uniform(0.0, 0.1, n)
    return kind, S, days, r, q, sig


def batch(n: int) -> dict:
    kind, S, days, r, q, sig = random_grid(n)
    T = days / 365.0
    cpu.alo_batch(kind[:10], S[:10], 100.0, T[:10], r[:10], q[:10], sig[:10], "fast", greeks=False)
    m = min(n, 2000)
    opts = [ql_option(kind[i], S[i], 100.0, days[i], r[i], q[i], sig[i], "fast")[0] for i in range(m)]
    qlv = np.array([o.NPV() for o in opts])
    ours_s = ql_per = ql_cpu = float("inf")
    for _ in range(9):  # rounds of both, alternated; the best of each (a shared machine)
        t = time.perf_counter()
        ours = cpu.alo_batch(kind, S, 100.0, T, r, q, sig, "fast", greeks=False)[0]
        ours_s = min(ours_s, time.perf_counter() - t)
        t, c = time.perf_counter(), time.thread_time()
        for o in opts:
            o.recalculate()
            o.NPV()
        ql_per, ql_cpu = min(ql_per, (time.perf_counter() - t) / m), min(ql_cpu, (time.thread_time() - c) / m)
    hp = cpu.alo_batch(kind[:m], S[:m], 100.0, T[:m], r[:m], q[:m], sig[:m], "high-precision", greeks=False)[0]
    cores = numba.get_num_threads()
    return {"n": n, "ours_fast_s": ours_s, "ours_threads": cores, "quantlib_fast_us_per_option": ql_per * 1e6,
            "quantlib_fast_cpu_us_per_option": ql_cpu * 1e6, "quantlib_fast_scaled_s": ql_per * n / cores,
            "speedup_vs_quantlib_scaled": ql_per * n / cores / ours_s,
            "sample_worst_error_vs_ours_high_precision": {"ours_fast": float(np.abs(ours[:m] - hp).max()),
                                                          "quantlib_fast": float(np.abs(qlv - hp).max())}}


def _ql_ivs(rows) -> list:
    """QuantLib QdFp fast + Brent on ``rows`` of (kind, S, K, days, r, q, price): NaN where the
    bracket [1e-4, 10] holds no root."""
    out = []
    for kind, S, K, days, r, q, price in rows:
        opt, vol = ql_option(kind, S, K, days, r, q, 0.2, "fast")

        def f(s, o=opt, v=vol, p=price):
            v.setValue(s)
            return o.NPV() - p

        try:
            out.append(brentq(f, cpu.MIN_IV, cpu.MAX_IV, xtol=1e-10))
        except (ValueError, RuntimeError):
            out.append(np.nan)
    return out


def chain_rows(path: str) -> tuple:
    """The chain's two-sided single-boundary rows with their market (section 3) and our
    high-precision IVs of the mid quotes, less the drift-dominated rows (the engine's tree rows):
    ``(kind, S, K, T, r, q, mid, days, reference)``."""
    from optiond import chain

    df = chain.read_chain(path)
    market = chain.solve_market(df)
    status, _, bid, ask, mid = chain._screen(df, market)
    kind = (chain.labels(df["type"]) == "call").astype(np.int8)
    days = np.maximum(np.round(market.T * 365.0), 1.0)
    S, K, r, q = market.spot, df["strike"].to_numpy(float), market.rate, market.dividend_yield
    rows = np.flatnonzero((status == "ok") & (cpu.regime(kind, r, q) == cpu.SINGLE) & (market.T > 0))
    kind, S, K, T, r, q, mid, days = kind[rows], S[rows], K[rows], days[rows] / 365.0, r[rows], q[rows], mid[rows], days[rows]
    ref, code = cpu.alo_implied_vol(mid, kind, S, K, T, r, q, "high-precision")
    # the engine prices drift-dominated rows (|r - q| sqrt(T) > volatility) on the tree: left out
    keep = (code == 0) & (ref >= cpu.drift_volatility(r, q, T))
    return tuple(a[keep] for a in (kind, S, K, T, r, q, mid, days, ref))


def chain_ivs(path: str, setting: str, dump: str | None = None) -> dict:
    kind, S, K, T, r, q, mid, days, ref = chain_rows(path)
    n = len(mid)
    if dump:  # the rows and the reference, for another engine's run on the same inputs
        np.savez(dump, kind=kind, S=S, K=K, T=T, r=r, q=q, mid=mid, reference=ref)
    cpu.alo_implied_vol(mid[:10], kind[:10], S[:10], K[:10], T[:10], r[:10], q[:10], setting)
    t = time.perf_counter()
    ours, ocode = cpu.alo_implied_vol(mid, kind, S, K, T, r, q, setting, xtol=1e-10)
    ours_s = time.perf_counter() - t
    cores = numba.get_num_threads()
    args = list(zip(kind.tolist(), S.tolist(), K.tolist(), days.tolist(), r.tolist(), q.tolist(), mid.tolist()))
    chunks = [args[i::cores] for i in range(cores)]
    with mp.get_context("fork").Pool(cores) as pool:
        pool.map(_ql_ivs, [c[:5] for c in chunks])  # warm
        t = time.perf_counter()
        parts = pool.map(_ql_ivs, chunks)
        ql_s = time.perf_counter() - t
    theirs = np.empty(n)
    for i in range(cores):
        theirs[i::cores] = parts[i]
    both = (ocode == 0) & np.isfinite(theirs)
    return {"chain": os.path.relpath(path, ROOT), "rows": n, "setting": setting, "cores": cores,
            "ours_s": ours_s, "quantlib_fast_brent_s": ql_s, "speedup": ql_s / ours_s,
            "ours_failures": int((ocode != 0).sum()), "quantlib_failures": int((~np.isfinite(theirs)).sum()),
            "worst_iv_error_vs_ours_high_precision": {"ours": float(np.abs(ours - ref)[both].max()),
                                                     "quantlib_fast": float(np.abs(theirs - ref)[both].max())},
            "median_iv_error": {"ours": float(np.median(np.abs(ours - ref)[both])),
                                "quantlib_fast": float(np.median(np.abs(theirs - ref)[both]))}}


def _median_times(fn, reps: int = 5) -> dict:
    """Median device (gated CUDA events) and host-to-host seconds of ``fn(timing=...)``."""
    dev, host = [], []
    for _ in range(reps):
        timing = {"gate": True}
        t = time.perf_counter()
        fn(timing=timing)
        host.append(time.perf_counter() - t)
        dev.append(timing["device_s"])
    return {"device_ms": float(np.median(dev)) * 1e3, "host_to_host_ms": float(np.median(host)) * 1e3}


def gpu_section(n: int) -> dict:
    from optiond.kernels import gpu as gpus

    if not gpus.available():
        return {"skipped": "no GPU"}
    from optiond.kernels.spectral import gpu

    kind, S, days, r, q, sig = random_grid(n)
    T = days / 365.0
    out: dict = {"device": gpus.device_label(), "n": n, "threads_per_block": gpu.TPB, "min_blocks": gpu.MIN_BLOCKS}
    for name in cpu.ACCURACY_NAMES:
        run = lambda timing=None, a=name, g=False, mb=None: gpu.alo_batch_gpu(  # noqa: E731
            kind, S, 100.0, T, r, q, sig, a, greeks=g, timing=timing, min_blocks=mb)
        got = run()[0]
        ref = cpu.alo_batch(kind, S, 100.0, T, r, q, sig, name, greeks=False)[0]
        big = ref > 1e-15
        row = {"prices": _median_times(run), "shared_bytes_per_block": gpu.shared_bytes(cpu.plan(name).tables),
               "max_rel_diff_vs_cpu": float((np.abs(got - ref)[big] / ref[big]).max()),
               "max_abs_diff_vs_cpu": float(np.abs(got - ref).max())}
        if name == "fast":
            row["with_greeks"] = _median_times(lambda timing=None: run(timing, g=True))
        # the two kernel layouts (a solve a thread, a solve a warp) by batch size: device ms
        row["layouts_device_ms"] = {}
        for m in (1000, 10_000, 30_000, n):
            row["layouts_device_ms"][m] = {}
            for lay in ("thread", "warp"):
                one = lambda timing=None, a=name, k=m, y=lay: gpu.alo_batch_gpu(  # noqa: E731
                    kind[:k], S[:k], 100.0, T[:k], r[:k], q[:k], sig[:k], a, greeks=False, timing=timing, layout=y)
                one()
                row["layouts_device_ms"][m][lay] = _median_times(one)["device_ms"]
        out[name] = row
    price = gpu.alo_batch_gpu(kind, S, 100.0, T, r, q, sig, "fast", greeks=False)[0]
    ivrun = lambda timing=None: gpu.alo_implied_vol_gpu(price, kind, S, 100.0, T, r, q, "fast", timing=timing)  # noqa: E731
    vol, code = ivrun()
    ok = price > np.maximum(np.where(kind == 1, S - 100.0, 100.0 - S), 0.0) + 1e-6
    out["implied_vol_fast"] = {**_median_times(ivrun), "ok": int((code == 0).sum()),
                               "worst_round_trip_where_vega": float(np.abs(vol - sig)[ok & (code == 0)].max()),
                               "not_ok_where_vega": int((code[ok] != 0).sum())}
    cross = {}
    for m in (100, 300, 1000, 3000, 10_000):
        args = (kind[:m], S[:m], 100.0, T[:m], r[:m], q[:m], sig[:m], "fast")
        g = _median_times(lambda timing=None: gpu.alo_batch_gpu(*args, greeks=False, timing=timing))
        t = [0.0] * 5
        for i in range(5):
            t0 = time.perf_counter()
            cpu.alo_batch(*args, greeks=False)
            t[i] = time.perf_counter() - t0
        cross[m] = {"gpu_host_to_host_ms": g["host_to_host_ms"], "cpu_ms": float(np.median(t)) * 1e3}
    out["crossover_fast_prices"] = {"cpu_threads": numba.get_num_threads(), "by_n": cross}
    return out


def gpu_chain(path: str, setting: str) -> dict:
    """Section 5 (``gpu_chain``): section 3's rows and reference on the GPU: the IV kernel's
    device and host-to-host time (median of 5) and worst IV error; the engine's front door in
    this process (``engine.implied_vol_table``, the spectral method on the GPU: routing, the
    drift split, the kernel; median of 5); and, where a daemon runs (``optiond serve``), the same
    rows as one ``implied_vol`` request (``force=True``, ``as_job=False``, median round trip of
    5; the reply's device and statuses)."""
    from optiond.kernels import gpu as gpus

    if not gpus.available():
        return {"skipped": "no GPU"}
    from optiond.kernels.spectral import gpu
    from optiond.models import Method

    kind, S, K, T, r, q, mid, days, ref = chain_rows(path)
    run = lambda timing=None: gpu.alo_implied_vol_gpu(mid, kind, S, K, T, r, q, setting, xtol=1e-10,  # noqa: E731
                                                      timing=timing)
    vol, code = run()
    ok = code == 0
    out = {"chain": os.path.relpath(path, ROOT), "rows": len(mid), "setting": setting, "device": gpus.device_label(),
           "kernel": _median_times(run), "failures": int((~ok).sum()),
           "worst_iv_error_vs_cpu_high_precision": float(np.abs(vol - ref)[ok].max())}
    from optiond import engine

    cols = {"kind": np.where(kind == 1, "call", "put").astype(object), "style": "american", "spot": S,
            "strike": K, "expiry": T, "rate": r, "dividend_yield": q}
    method = Method(name="spectral", accuracy=setting, device="gpu", iv_tolerance=1e-10)
    walls = []
    for _ in range(6):  # the engine's front door in this process (routing, the drift split, the kernel)
        t = time.perf_counter()
        got = engine.implied_vol_table(mid, cols, method)
        walls.append(time.perf_counter() - t)
    out["engine_in_process"] = {"ms": float(np.median(walls[1:])) * 1e3, "device": got.device,
                                "statuses": {k: int(v) for k, v in zip(*np.unique(got.status, return_counts=True))}}
    try:
        from optiond.daemon.client import get_client

        client = get_client()
        client.ping()
    except Exception as e:  # noqa: BLE001 (no daemon: the section reports why)
        out["daemon"] = {"skipped": f"{type(e).__name__}: {e}"}
        return out
    walls = []
    for _ in range(6):  # one request, answered directly (not as a job with progress polling)
        t = time.perf_counter()
        got = client.implied_vol(mid, cols, method, fallback=False, force=True, as_job=False)
        walls.append(time.perf_counter() - t)
    good = np.asarray(got.status) == "ok"
    out["daemon"] = {"round_trip_ms": float(np.median(walls[1:])) * 1e3, "device": got.device, "via": got.via,
                     "worst_iv_error_vs_cpu_high_precision": float(np.abs(got.vol - ref)[good].max()),
                     "statuses": {k: int(v) for k, v in zip(*np.unique(got.status, return_counts=True))}}
    return out


SECTIONS = ("one_put", "batch", "chain", "gpu", "gpu_chain")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--chain", default=os.path.join(ROOT, "examples", "data", "spy_chain_2026-02-13.csv"))
    ap.add_argument("--chain-setting", default="fast", choices=cpu.ACCURACY_NAMES)
    ap.add_argument("--dump", help="write the chain rows and reference IVs to this .npz")
    ap.add_argument("--skip", nargs="*", default=(), choices=SECTIONS)
    ap.add_argument("--only", nargs="*", choices=SECTIONS, help="run only these sections")
    args = ap.parse_args()
    if args.only:
        args.skip = [s for s in SECTIONS if s not in args.only]
    out: dict = {"cores": os.cpu_count(), "numba_threads": numba.get_num_threads(),
                 "settings": {k: vars(v) for k, v in cpu.ACCURACY.items()}}
    if "one_put" not in args.skip:
        out["one_put"] = one_put()
    if "batch" not in args.skip:
        out["batch"] = batch(args.n)
    if "chain" not in args.skip:
        out["chain_ivs"] = chain_ivs(args.chain, args.chain_setting, args.dump)
    if "gpu" not in args.skip:
        out["gpu"] = gpu_section(args.n)
    if "gpu_chain" not in args.skip:
        out["gpu_chain"] = gpu_chain(args.chain, args.chain_setting)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
