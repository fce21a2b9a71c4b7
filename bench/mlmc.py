"""Adaptive MLMC benchmark: the seed's nine cases, end to end, on the CPU and/or a GPU; prints JSON.

Cases (seeds/mlmc_cuda_mpi.md §3.1): European call, S0 = K, r = 0.05, and

    AAPL  T = 1    sigma = 0.25  K = 280
    TSLA  T = 0.5  sigma = 0.30  K = 430
    SPY   T = 2    sigma = 0.10  K = 680

at eps in {0.005, 0.0025, 0.001}. For each: price (against Black–Scholes), std error, levels,
N_l, iterations, fine path steps (Σ N_l 2^l), wall time of one whole ``mlmc_price`` call
(validation, sampler set-up, every iteration, result), fine path-steps/s end to end and, on the
GPU, inside the kernels (CUDA events), against the 405 G/s of ARCHITECTURE.md §4; beside the
seed's published times (its sequential GHC times divided by its published speed-ups).

Level 0 is exact by default (``mlmc_price(exact_level0=True)``: its closed-form mean, no
samples, see optiond.kernels.mlmc); ``--level0 sampled`` runs the seed's algorithm that samples
it, ``--level0 both`` runs each case both ways (rows carry ``exact_level0``).

GPU timing: ``first_s`` is the first call in the process (module load from CuPy's cache or
NVRTC compile); ``wall_s`` the median of ``--repeat`` further calls. ``--throughput`` adds
single-launch rates per level and layout; ``--variants`` re-times the eps = 0.001 cases with
other layouts (team_levels), register budgets and the fast (fp32 Box–Muller) variant.

``--study`` (CPU): the accuracy of the adaptive algorithm itself over many seeds instead of the
cases above: Giles' case (S = K = 100, T = 1, r = 0.05, sigma = 0.2), a call and a put, each
eps of ``--study-eps`` run with seeds 1 .. ``--study-seeds`` (64), against Black–Scholes:
``rms_over_eps`` (sqrt of the mean squared error, over eps: at most 1 when the algorithm keeps
its promise), ``bias_over_eps`` (mean error), ``std_error_over_spread`` (the root mean square
of the reported ``std_error`` over the standard deviation of the estimates across seeds: 1
when ``std_error`` is honest), the mean bias estimate, levels and model cost; ``pooled``: the
same two ratios over all rows (each row's squares in units of its eps), whose sampling noise is
smaller than a row's (a row's spread of 64 estimates is itself uncertain by about 9 %).

Usage::

    python bench/mlmc.py --study [--study-eps 0.02 0.01 0.005] [--study-seeds 64]
    python bench/mlmc.py --device cpu [--eps 0.005 0.0025]
    python bench/mlmc.py --device gpu --repeat 5 --throughput --variants
    python bench/mlmc.py --device gpu --level0 both --eps 0.001
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from optiond.kernels.black_scholes import bs_price_greeks
from optiond.kernels.mlmc import chunk_layout, mlmc_price

CASES = {"AAPL": (280.0, 1.0, 0.25), "TSLA": (430.0, 0.5, 0.30), "SPY": (680.0, 2.0, 0.10)}
RATE = 0.05
EPS = (0.005, 0.0025, 0.001)
TARGET_STEPS_PER_S = 405e9

# seeds/mlmc_cuda_mpi.md: sequential times (GHC, s) and final speed-ups, per eps (0.005, 0.0025, 0.001)
SEED = {
    "sequential_ghc_s": {"AAPL": (6.027, 24.994, 167.43), "TSLA": (8.35, 35.374, 227.92), "SPY": (11.677, 48.257, 314.34)},
    "speedup_ghc_rtx2080_1gpu": {"AAPL": (40.36, 134.56, 171.01), "TSLA": (103.97, 149.05, 177.60), "SPY": (109.63, 155.19, 178.48)},
    "speedup_psc_v100_1gpu": {"AAPL": (42.448, 817.468, 2417.736), "TSLA": (413.593, 968.922, 2699.163), "SPY": (483.982, 1089.535, 2591.166)},
    "speedup_psc_v100_2gpu": {"AAPL": (24.081, 1335.994, 4010.843), "TSLA": (516.079, 1596.455, 3931.381), "SPY": (519.825, 1825.066, 4815.201)},
    "speedup_psc_v100_4gpu": {"AAPL": (15.577, 757.495, 3988.724), "TSLA": (383.186, 1246.866, 4575.523), "SPY": (389.722, 1350.550, 5430.051)},
}


def seed_published(name: str, eps: float) -> dict:
    i = EPS.index(eps) if eps in EPS else None
    if i is None:
        return {}
    seq = SEED["sequential_ghc_s"][name][i]
    out = {"sequential_ghc_s": seq}
    for k, v in SEED.items():
        if k.startswith("speedup_"):
            out[k.replace("speedup_", "") + "_s"] = round(seq / v[name][i], 5)
    return out


def one_case(name, eps, device, seed, repeat, gpu_options=None, exact_level0=True):
    s0, T, sig = CASES[name]
    exact = float(bs_price_greeks(np.array([1]), s0, s0, T, RATE, 0.0, sig)["price"][0])
    walls, kernel = [], []
    first = None
    runs = max(1, repeat) + (1 if device == "gpu" else 0)
    res = None
    for i in range(runs):
        t0 = time.perf_counter()
        res = mlmc_price("call", s0, s0, T, RATE, 0.0, sig, eps, seed=seed, device=device, gpu_options=gpu_options,
                         exact_level0=exact_level0)
        dt = time.perf_counter() - t0
        if device == "gpu" and i == 0:
            first = dt
            continue
        walls.append(dt)
        kernel.append(float(np.sum(res.seconds)))
    wall = statistics.median(walls)
    ksec = statistics.median(kernel)
    steps = res.fine_steps
    row = {
        "case": name, "eps": eps, "device": device, "exact_level0": res.exact_level0, "price": res.price, "black_scholes": exact,
        "error": res.price - exact, "std_error": res.std_error, "bias_estimate": res.bias, "converged": res.converged,
        "levels": res.levels, "n_samples": res.n_samples.tolist(), "iterations": res.iterations, "fine_steps": steps,
        "model_cost": res.total_cost,
        "wall_s": wall, "walls_s": walls, "fine_steps_per_s": steps / wall,
        "sampling_s": ksec, "sampling_fine_steps_per_s": steps / ksec if ksec > 0 else None,
        "vs_405G": steps / wall / TARGET_STEPS_PER_S, "alpha": res.alpha, "beta": res.beta, "gamma": res.gamma,
        "warnings": list(res.warnings), "seed_published": seed_published(name, eps),
    }
    if first is not None:
        row["first_s"] = first
    if gpu_options:
        row["gpu_options"] = {k: list(v) if isinstance(v, tuple) else v for k, v in gpu_options.items()}
    return row


STUDY_CASE = (100.0, 100.0, 1.0, 0.05, 0.0, 0.2)  # spot, strike, expiry, rate, dividend yield, volatility
STUDY_EPS = (0.02, 0.01, 0.005)


def seed_study(payoff: str, eps: float, seeds: int) -> dict:
    """One row of ``--study``: ``seeds`` independent runs (seeds 1 .. seeds) of one payoff at ``eps``."""
    spot, strike, expiry, rate, q, vol = STUDY_CASE
    exact = float(bs_price_greeks(np.array([1 if payoff == "call" else 0]), spot, strike, expiry, rate, q, vol)
                  ["price"][0])
    t0 = time.perf_counter()
    runs = [mlmc_price(payoff, spot, strike, expiry, rate, q, vol, eps, seed=s) for s in range(1, seeds + 1)]
    wall = time.perf_counter() - t0
    p = np.array([r.price for r in runs])
    se = np.array([r.std_error for r in runs])
    err = p - exact
    spread = float(p.std(ddof=1))
    levels = [r.levels for r in runs]
    return {"payoff": payoff, "eps": eps, "seeds": seeds, "black_scholes": exact,
            "rms_over_eps": float(np.sqrt(np.mean(err ** 2)) / eps), "bias_over_eps": float(err.mean() / eps),
            "std_error_over_spread": float(np.sqrt(np.mean(se ** 2)) / spread), "spread_over_eps": spread / eps,
            "mean_std_error_over_eps": float(se.mean() / eps),
            "rms_std_error_over_eps": float(np.sqrt(np.mean(se ** 2)) / eps),
            "bias_estimate_over_eps": float(np.mean([r.bias for r in runs]) / eps),
            "levels_min": min(levels), "levels_max": max(levels),
            "mean_model_cost": float(np.mean([r.total_cost for r in runs])), "wall_s": wall}


def throughput(levels=(0, 2, 4, 6, 7, 8, 10, 12, 14), seconds=0.2, **gpu_options):
    """Single-launch rates of the level kernel: fine path steps per second (CUDA events)."""
    from optiond.kernels.mlmc.gpu import GPUSampler
    from optiond.kernels.mlmc.level0 import CALL
    from optiond.kernels.mlmc.philox import seed_key

    s = GPUSampler(CALL, 100.0, 100.0, 1.0, RATE, 0.0, 0.2, seed_key(1), **gpu_options)
    out = []
    for level in levels:
        n = max(32, int(2 ** 31 // (1 << level)))  # ~2e9 fine steps
        cs, _ = chunk_layout(level, n)
        s.run([(level, 0, n, cs)])  # warm
        k0 = s.kernel_seconds
        reps = 0
        t0 = time.perf_counter()
        while True:
            s.run([(level, (reps + 1) * n, n, cs)])
            reps += 1
            if time.perf_counter() - t0 > seconds:
                break
        ks = (s.kernel_seconds - k0) / reps
        out.append({"level": level, "layout": s.team_size(level), "samples": n, "fine_steps": n << level,
                    "kernel_s": ks, "fine_steps_per_s": (n << level) / ks, "vs_405G": (n << level) / ks / TARGET_STEPS_PER_S})
    s.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "gpu", "both"), default="cpu")
    ap.add_argument("--eps", type=float, nargs="+", default=list(EPS))
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--repeat", type=int, default=3, help="GPU: timed repeats per case (median); the CPU runs each case once")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--throughput", action="store_true")
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--fast", action="store_true", help="GPU: single-precision Box-Muller variant")
    ap.add_argument("--level0", choices=("exact", "sampled", "both"), default="exact",
                    help="level 0 by its exact mean (default), sampled (the seed's algorithm), or both")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--study", action="store_true", help="the many-seed accuracy study (CPU) instead of the cases")
    ap.add_argument("--study-eps", type=float, nargs="+", default=list(STUDY_EPS))
    ap.add_argument("--study-seeds", type=int, default=64)
    args = ap.parse_args(argv)
    if args.study:
        rows = []
        for payoff in ("call", "put"):
            for eps in args.study_eps:
                rows.append(seed_study(payoff, eps, args.study_seeds))
                r = rows[-1]
                print(f"# {payoff:4s} eps={eps:<7g} rms/eps={r['rms_over_eps']:.3f} bias/eps={r['bias_over_eps']:+.3f} "
                      f"std_error/spread={r['std_error_over_spread']:.3f} L={r['levels_min']}..{r['levels_max']} "
                      f"wall={r['wall_s']:.1f} s", file=sys.stderr, flush=True)
        pooled = {"rms_over_eps": float(np.sqrt(np.mean([r["rms_over_eps"] ** 2 for r in rows]))),
                  "std_error_over_spread": float(np.sqrt(np.mean([r["rms_std_error_over_eps"] ** 2 for r in rows])
                                                         / np.mean([r["spread_over_eps"] ** 2 for r in rows])))}
        text = json.dumps({"bench": "mlmc_seed_study", "case": dict(zip(
            ("spot", "strike", "expiry", "rate", "dividend_yield", "volatility"), STUDY_CASE)), "rows": rows,
            "pooled": pooled}, indent=1)
        print(text)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text)
        return 0

    report = {"bench": "mlmc", "python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count(),
              "target_fine_steps_per_s": TARGET_STEPS_PER_S, "rows": []}
    try:
        import numba

        report["numba_threads"] = numba.get_num_threads()
    except Exception:  # pragma: no cover
        pass
    devices = ["cpu", "gpu"] if args.device == "both" else [args.device]
    if "gpu" in devices:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        report["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        report["cupy"] = cupy.__version__
    modes = {"exact": [True], "sampled": [False], "both": [True, False]}[args.level0]
    report["level0"] = args.level0
    for dev in devices:
        for name in args.cases:
            for eps in args.eps:
                for exact in modes:
                    opts = {"fast": True} if (dev == "gpu" and args.fast) else None
                    row = one_case(name, eps, dev, args.seed, args.repeat if dev == "gpu" else 1, opts, exact)
                    report["rows"].append(row)
                    print(f"# {dev} {name:4s} eps={eps:<7g} level0={'exact  ' if exact else 'sampled'} "
                          f"price={row['price']:.5f} err={row['error']:+.5f} "
                          f"L={row['levels']} it={row['iterations']} wall={row['wall_s'] * 1e3:9.2f} ms "
                          f"steps={row['fine_steps']:.3e} rate={row['fine_steps_per_s']:.3e}/s", file=sys.stderr, flush=True)
    if "gpu" in devices and args.throughput:
        report["throughput"] = {"default": throughput(), "fast": throughput(fast=True),
                                "sincospi": throughput(sincospi=True), "min_blocks_2": throughput(min_blocks=2),
                                "sample_parallel_all": throughput(team_levels=(99, 99))}
    if "gpu" in devices and args.variants:
        variants = {"team_7_11": {"team_levels": (7, 11)}, "team_10_14": {"team_levels": (10, 14)},
                    "no_team": {"team_levels": (99, 99)}, "min_blocks_2": {"min_blocks": 2},
                    "sincospi": {"sincospi": True}, "fast": {"fast": True}, "fast_min_blocks_2": {"fast": True, "min_blocks": 2}}
        report["variants"] = {}
        for vname, opts in variants.items():
            report["variants"][vname] = [one_case(name, 0.001, "gpu", args.seed, args.repeat, opts) for name in args.cases]
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
