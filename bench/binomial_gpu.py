"""GPU CRR binomial on this machine's GPU: the issue-3 benchmark, one run, JSON on stdout.

* one American put (S = K = 100, T = 1, r = 5 %, sigma = 20 %) at N = 1e3, 1e4, 1e5, 1e6 through
  the pipeline: FP64 device time (CUDA events around the kernels, the launches queued behind a
  stream gate so that the window holds the GPU's work and not the host's launch calls:
  ``measure``; the plain event window is reported too) and host-to-host time, as a
  fraction of the FP64 ceiling (ARCHITECTURE.md section 3: 2.44e12 nodes/s), beside the naive
  one-launch-per-level kernel run here and the seed's Table 5 (RTX 2080: the hybrid and the
  warp-per-block kernels);
* 10,000 American puts x N = 1000 through the batch kernel in FP64 and FP32 (ceilings 2.44e12
  and 8.1e12 nodes/s), with and without Greeks, the warp shapes compared, beside the naive
  kernel on the same batch;
* 10,000 American puts x N = 1000 converged (BBSR: smoothed trees of N and N / 2 steps,
  Richardson-extrapolated; ``extrapolate``) on the GPU, beside the plain tree on the GPU and
  BBSR on the CPU (all cores), with the GPU's largest difference from the CPU;
* the seed-004 CPU-GPU split of one tree against the pipeline;
* the SPY chain's implied volatilities (``chain.price_chain``) on the GPU and on the CPU.

    python bench/binomial_gpu.py [--quick] [--out FILE]

The SPY chain is read from ``$OPTIOND_SPY_CHAIN`` or ``shared/data/spy_chain_2026-02-13.csv``.

Nothing here asserts; correctness is tests/test_binomial_gpu.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from optiond.kernels import gpu
from optiond.kernels.binomial import _bench
from optiond.kernels.binomial import cpu as bc
from optiond.kernels.binomial import gpu as bg
from optiond.kernels.binomial import pipeline as bp
from optiond.kernels.binomial import plan as dispatch
from optiond.kernels.binomial import variants

CEIL = {"fp64": 2.44e12, "fp32": 8.1e12}
TARGET_MS = {1000: 0.05, 10_000: 0.6, 100_000: 6.0, 1_000_000: 300.0}
BATCH_TARGET_MS = {"fp64": 2.3, "fp32": 0.8}
#: seed binomial_hybrid_cpu_gpu_mpi.md Table 5 (ms, RTX 2080): hybrid CPU-GPU and warp per block
SEED_T5 = {1000: (0.63, 0.90), 10_000: (8.14, 8.44), 100_000: (358.59, 352.01), 1_000_000: (28_579.0, 32_189.0)}
PUT = (0, 1, 100.0, 100.0, 1.0, 0.05, 0.0, 0.20)


def nodes(N: int) -> float:
    return (N + 1) * (N + 2) / 2


def measure(fn, repeats: int) -> dict:
    """Median host wall time and device times after a warm-up. Each repeat runs ``fn`` twice:
    once with the plain event window (``device_event_ms``: holds the host's launch calls), once
    gated (``timing["gate"]``: the launches queued behind a blocking kernel, NVBench's method,
    so the window holds the GPU alone). ``device_ms`` is the gated time where the call allows a
    gate (the pipeline and batch calls), else the plain one; ``device_gated`` says which."""
    fn({})
    host, dev, gated = [], [], []
    for _ in range(max(repeats, 1)):
        tm: dict = {}
        t0 = time.perf_counter()
        fn(tm)
        host.append(time.perf_counter() - t0)
        if "device_s" in tm:
            dev.append(tm["device_s"])
        tg: dict = {"gate": True}
        fn(tg)
        if tg.get("gated") and not tg.get("gate_timed_out"):
            gated.append(tg["device_s"])
    out = {"host_ms": statistics.median(host) * 1e3, "host_min_ms": min(host) * 1e3}
    if dev:
        out["device_event_ms"] = statistics.median(dev) * 1e3
        use = gated if len(gated) == max(repeats, 1) else dev
        out["device_ms"] = statistics.median(use) * 1e3
        out["device_min_ms"] = min(use) * 1e3
        out["device_gated"] = use is gated
    return out


def frac(n_nodes: float, ms: float, prec: str = "fp64") -> float:
    return n_nodes / (ms / 1e3) / CEIL[prec]


def single(args, plan) -> list[dict]:
    rows = []
    for N in (1000, 10_000, 100_000, 1_000_000):
        reps = args.repeats if N < 1_000_000 else max(2, args.repeats // 3)
        m = measure(lambda tm, N=N: bp.crr_pipeline_gpu(*PUT, N, greeks=False, plan=plan, timing=tm), reps)
        row = {"N": N, "nodes": nodes(N), **m, "fraction_of_ceiling": frac(nodes(N), m["device_ms"]),
               "target_ms": TARGET_MS[N], "meets_target": m["device_ms"] <= TARGET_MS[N],
               "seed_table5_hybrid_ms": SEED_T5[N][0], "seed_table5_warp_per_block_ms": SEED_T5[N][1]}
        row["pruned"] = bool(plan.prune and N >= plan.prune_steps and N > plan.cluster_levels)
        if row["pruned"]:  # the same tree with every node computed
            dense = replace(plan, prune=False)
            dm = measure(lambda tm, N=N, d=dense: bp.crr_pipeline_gpu(*PUT, N, greeks=False, plan=d, timing=tm), reps)
            row["dense_device_ms"], row["dense_host_ms"] = dm["device_ms"], dm["host_ms"]
            row["dense_fraction_of_ceiling"] = frac(nodes(N), dm["device_ms"])
        if N <= 100_000 and not args.quick or N <= 10_000:
            nv = measure(lambda tm, N=N: _bench.crr_naive_gpu(*PUT, N, timing=tm), 1 if N >= 100_000 else 2)
            row["naive_device_ms"], row["naive_host_ms"] = nv["device_ms"], nv["host_ms"]
            row["naive_fraction_of_ceiling"] = frac(nodes(N), nv["device_ms"])
        if N <= 100_000:  # one block per tree (the batch kernel) for comparison
            bk = measure(lambda tm, N=N: bg.crr_batch_gpu(*PUT, N, greeks=False, timing=tm), reps)
            row["batch_kernel_device_ms"] = bk["device_ms"]
        if N <= 10_000:
            t0 = time.perf_counter()
            bc.crr_batch(*PUT, N, greeks=False, parallel=False)
            t0 = time.perf_counter()
            bc.crr_batch(*PUT, N, greeks=False, parallel=False)
            row["cpu_one_core_ms"] = (time.perf_counter() - t0) * 1e3
        rows.append(row)
        print(f"single N={N}: {json.dumps(row)}", file=sys.stderr, flush=True)
    return rows


def prune_sweep(args) -> list[dict]:
    """Where pruned windows start to pay (PipelinePlan.prune_steps): one put, dense grid phases
    against the pruned kernel on every level, device time."""
    out = []
    for N in (5_000, 10_000, 20_000, 30_000, 50_000, 100_000):
        row = {"N": N}
        for key, plan in (("dense_ms", bp.PipelinePlan(cluster_levels=0, prune=False)),
                          ("pruned_ms", bp.PipelinePlan(cluster_levels=0, prune_steps=0))):
            row[key] = measure(lambda tm, N=N, p=plan: bp.crr_pipeline_gpu(*PUT, N, greeks=False, plan=p, timing=tm),
                               args.repeats)["device_ms"]
        out.append(row)
        print(f"prune {row}", file=sys.stderr, flush=True)
    return out


def plan_sweep(args) -> list[dict]:
    """Phase boundaries and phase kernel shapes of the pipeline (device time, one put)."""
    out = []
    inf = 10**9

    def run(N, plan, mid=None, small=None, big=None, reps=3):
        saved = (variants.PIPE_GRID_MID["fp64"], variants.PIPE_GRID_SMALL["fp64"], variants.PIPE_GRID_BIG["fp64"])
        try:
            if mid:
                variants.PIPE_GRID_MID["fp64"] = mid
            if small:
                variants.PIPE_GRID_SMALL["fp64"] = small
            if big:
                variants.PIPE_GRID_BIG["fp64"] = big
            p = replace(bp.PipelinePlan(*plan), prune=False)  # the dense phases
            m = measure(lambda tm: bp.crr_pipeline_gpu(*PUT, N, greeks=False, plan=p, timing=tm), reps)
        finally:
            variants.PIPE_GRID_MID["fp64"], variants.PIPE_GRID_SMALL["fp64"], variants.PIPE_GRID_BIG["fp64"] = saved
        def name(v):
            return None if v is None else f"<{v.G},{v.R}> K={v.K}"

        out.append({"N": N, "plan": plan, "mid": name(mid), "small": name(small), "big": name(big), **m})
        print(f"plan {out[-1]}", file=sys.stderr, flush=True)

    big84 = next(v for v in variants.BENCH_PIPE_VARIANTS if (v.G, v.R) == (8, 4))
    mid42 = next(v for v in variants.BENCH_PIPE_VARIANTS if (v.G, v.R) == (4, 2))
    small64 = variants.Variant("crr_pipe_grid", "double", 4, 1, K=64, threads=128)
    small32 = variants.Variant("crr_pipe_grid", "double", 4, 1, K=32, threads=128)
    run(1000, (inf, inf, 0, 0, 1000))       # one block, the tree in registers (crr_pipe_reg)
    run(1000, (inf, inf, 1000, 0))          # one block, shared memory
    run(1000, (inf, inf, 0, 0))             # small grid (K = 96 up to NARROW_LEVELS)
    for N in (1500, 2000):
        run(N, (inf, inf, 0, 0, N))
        run(N, (inf, inf, 0, 0))
    run(1000, (inf, inf, 0, 0), small=small64)
    run(1000, (inf, inf, 0, 0), small=small32)
    for stb in (0, 1000):
        run(10_000, (inf, inf, stb, 0))
    run(10_000, (inf, inf, 0, 0), small=small64)
    run(10_000, (inf, 5000, 0, 0))
    for mts in (10_000, 15_000, 30_000, 60_000):
        run(100_000, (inf, mts, 0, 0))
    run(100_000, (inf, 15_000, 0, 0), mid=mid42)
    if bg.clusters_supported():  # the whole tree in one thread-block cluster (crr_pipe_cluster)
        saved = variants.PIPE_CLUSTER["fp64"]
        pc = bp.PipelinePlan(inf, inf, 0, 0, 0, inf)
        try:
            for v in [saved] + variants.BENCH_CLUSTER_VARIANTS:
                variants.PIPE_CLUSTER["fp64"] = v
                for N in (1000, 2000, 4000, 6000, 10_000):
                    if N <= dispatch.cluster_max_levels(v) and (N == 1000 or v.cluster >= 8):
                        m = measure(lambda tm, N=N: bp.crr_pipeline_gpu(*PUT, N, greeks=False, plan=pc, timing=tm), 3)
                        out.append({"N": N, "cluster": f"<{v.G},{v.R}> K={v.K} warps/block<={v.threads // 32} "
                                    f"blocks={v.cluster}", **m})
                        print(f"plan {out[-1]}", file=sys.stderr, flush=True)
        finally:
            variants.PIPE_CLUSTER["fp64"] = saved
        for N in (4000, 6000):
            run(N, (inf, inf, 0, 0))
    if not args.quick:
        for btm in (inf, 600_000, 300_000):
            run(1_000_000, (btm, 15_000, 0, 0), reps=1)
        run(1_000_000, (600_000, 15_000, 0, 0), big=big84, mid=mid42, reps=1)
    return out


def batch(args) -> dict:
    n, N = 10_000, 1000
    K = np.random.default_rng(0).uniform(80.0, 120.0, n)
    a = (0, 1, 100.0, K, 1.0, 0.05, 0.0, 0.25, N)
    tot = n * nodes(N)
    rows = []
    for prec, greeks in (("fp64", False), ("fp32", False), ("fp64", True), ("fp32", True)):
        m = measure(lambda tm, g=greeks, p=prec: bg.crr_batch_gpu(*a, greeks=g, precision=p, timing=tm), args.repeats)
        trees = tot * (5 if greeks else 1)
        rows.append({"options": n, "N": N, "precision": prec, "greeks": greeks, **m,
                     "fraction_of_ceiling": frac(trees, m["device_ms"], prec),
                     "target_ms": None if greeks else BATCH_TARGET_MS[prec],
                     "meets_target": None if greeks else m["device_ms"] <= BATCH_TARGET_MS[prec]})
        print(f"batch {rows[-1]}", file=sys.stderr, flush=True)
    shapes = []
    for v in variants.WARP_VARIANTS["fp64"][-1:] + variants.WARP_VARIANTS["fp32"][-1:] + variants.BENCH_WARP_VARIANTS:
        prec = "fp64" if v.dtype == "double" else "fp32"
        m = measure(lambda tm, p=prec, v=v: bg.crr_batch_gpu(*a, greeks=False, precision=p, timing=tm, warp_variant=v), 3)
        regs = int(bg.kernel(v.name).num_regs)
        shapes.append({"kernel": v.name, "nodes_per_lane": v.G * v.R, "registers": regs, **m,
                       "fraction_of_ceiling": frac(tot, m["device_ms"], prec)})
        print(f"shape {shapes[-1]}", file=sys.stderr, flush=True)
    blk = measure(lambda tm: bg.crr_batch_gpu(*a, greeks=False, timing=tm, route="block"), 3)
    nv = measure(lambda tm: _bench.crr_naive_gpu(*a, timing=tm), 1)
    cpu_t0 = time.perf_counter()
    bc.crr_batch(*a, greeks=False)
    cpu_ms = (time.perf_counter() - cpu_t0) * 1e3
    return {"rows": rows, "warp_shapes": shapes,
            "block_per_tree_fp64": {**blk, "fraction_of_ceiling": frac(tot, blk["device_ms"])},
            "naive": {**nv, "fraction_of_ceiling": frac(tot, nv["device_ms"])},
            "cpu_all_cores_ms": cpu_ms, "cpu_cores": os.cpu_count()}


def dividends(args) -> dict:
    """10,000 American puts x N = 1000, each with four cash dividends (crr_batch_warp_div, FP64),
    beside the same batch without (crr_batch_warp), in one run; and the result against the CPU."""
    n, N = 10_000, 1000
    K = np.random.default_rng(0).uniform(80.0, 120.0, n)
    a = (0, 1, 100.0, K, 1.0, 0.05, 0.0, 0.3, N)
    t = np.array([45, 136, 227, 318]) / 365.0
    amt = np.ones(4)
    plain = measure(lambda tm: bg.crr_batch_gpu(*a, greeks=False, timing=tm), args.repeats)
    cash = measure(lambda tm: bg.crr_batch_gpu(*a, greeks=False, timing=tm, dividend_times=t, dividend_amounts=amt),
                   args.repeats)
    cash_g = measure(lambda tm: bg.crr_batch_gpu(*a, greeks=True, timing=tm, dividend_times=t, dividend_amounts=amt), 3)
    plain_g = measure(lambda tm: bg.crr_batch_gpu(*a, greeks=True, timing=tm), 3)
    dev = bg.crr_batch_gpu(*a[:3], K[:200], *a[4:], greeks=False, dividend_times=t, dividend_amounts=amt)[0]
    ref = bc.crr_batch(*a[:3], K[:200], *a[4:], greeks=False, dividend_times=t, dividend_amounts=amt)[0]
    return {"options": n, "N": N, "dividends": 4, "no_dividends": plain, "dividends_fp64": cash,
            "ratio_device": cash["device_ms"] / plain["device_ms"], "with_greeks": {"no_dividends": plain_g,
            "dividends": cash_g, "ratio_device": cash_g["device_ms"] / plain_g["device_ms"]},
            "max_rel_diff_vs_cpu_200": float(np.max(np.abs(dev - ref) / np.abs(ref)))}


def extrapolate(args) -> dict:
    """10,000 American puts x N = 1000: BBSR (crr_batch_gpu(extrapolate=True): smoothed trees of
    N and 500 steps in one launch) against the plain tree on the GPU, with and without Greeks,
    and BBSR on the CPU (crr_batch(extrapolate=True), all cores, prices); the GPU's largest
    relative difference from the CPU over the batch."""
    n, N = 10_000, 1000
    K = np.random.default_rng(0).uniform(80.0, 120.0, n)
    a = (0, 1, 100.0, K, 1.0, 0.05, 0.0, 0.25, N)
    out = {"options": n, "N": N, "style": "american put"}
    for greeks in (False, True):
        reps = args.repeats if not greeks else 3
        bbsr = measure(lambda tm, g=greeks: bg.crr_batch_gpu(*a, greeks=g, timing=tm, extrapolate=True), reps)
        plain = measure(lambda tm, g=greeks: bg.crr_batch_gpu(*a, greeks=g, timing=tm), reps)
        out["greeks" if greeks else "prices"] = {"bbsr_gpu_fp64": bbsr, "plain_gpu_fp64": plain,
                                                 "ratio_device": bbsr["device_ms"] / plain["device_ms"]}
        print(f"extrapolate greeks={greeks} {out['greeks' if greeks else 'prices']}", file=sys.stderr, flush=True)
    bc.crr_batch(*a[:3], K[:10], *a[4:], greeks=False, extrapolate=True)  # compile, threads up
    cpu_ms = []
    for _ in range(2):
        t0 = time.perf_counter()
        ref = bc.crr_batch(*a, greeks=False, extrapolate=True)[0]
        cpu_ms.append((time.perf_counter() - t0) * 1e3)
    dev = bg.crr_batch_gpu(*a, greeks=False, extrapolate=True)[0]
    out["bbsr_cpu_all_cores_ms"] = min(cpu_ms)
    out["cpu_cores"] = os.cpu_count()
    out["speedup_gpu_over_cpu_host"] = min(cpu_ms) / out["prices"]["bbsr_gpu_fp64"]["host_ms"]
    out["max_rel_diff_gpu_vs_cpu"] = float(np.max(np.abs(dev - ref) / np.abs(ref)))
    return out


def accuracy(args) -> list[dict]:
    """Max relative error of each kernel against crr_batch on a grid (K 80/100/125, sigma
    0.1-0.6, T 0.25-5, r 0-10 %, q 0/3 %, puts and calls, American and European)."""
    import itertools

    out = []
    for N in (1000, 4097, 10_000):
        rows = list(itertools.product((0, 1), (0, 1), (80.0, 100.0, 125.0), (0.1, 0.3, 0.6), (0.25, 1.0, 5.0),
                                      (0.0, 0.05, 0.1), (0.0, 0.03)))
        kind, style, K, s, T, r, q = (np.array(c) for c in zip(*rows))
        if N == 10_000:
            sel = slice(None, None, 5)
            kind, style, K, s, T, r, q = (a[sel] for a in (kind, style, K, s, T, r, q))
        n = kind.size
        Nn = np.full(n, N)
        ok = np.ones(n, bool)
        ok[bc.probability_errors(T, r, q, s, Nn)] = False
        cols = [c[ok] for c in (kind, style, np.full(n, 100.0), K, T, r, q, s, Nn)]
        ref = bc.crr_batch(*cols, greeks=False)[0]
        def rel(x, ref=ref):
            return float(np.max(np.abs(x - ref) / np.maximum(np.abs(ref), 1e-300)))

        row = {"N": N, "options": int(ok.sum())}
        row["fp64_batch"] = rel(bg.crr_batch_gpu(*cols, greeks=False)[0])
        row["fp64_block"] = rel(bg.crr_batch_gpu(*cols, greeks=False, route="block")[0])
        row["fp64_pipeline"] = rel(bp.crr_pipeline_gpu(*cols, greeks=False,
                                                       plan=bp.PipelinePlan(3000, 1000, 100))[0])
        for route in ("auto", "block"):
            g = bg.crr_batch_gpu(*cols, greeks=False, precision="fp32", route=route)[0]
            e = np.abs(g - ref)
            row[f"fp32_{route}_max_rel"] = rel(g)
            row[f"fp32_{route}_max_abs_over_K"] = float(np.max(e / cols[3]))
            row[f"fp32_{route}_max_over_bound"] = float(np.max(e / (bg.FP32_RTOL * np.abs(ref) + bg.FP32_ATOL_K * cols[3])))
        out.append(row)
        print(f"accuracy {row}", file=sys.stderr, flush=True)
    return out


def split(args, plan) -> list[dict]:
    out = []
    for N in (10_000, 100_000):
        pipe = measure(lambda tm, N=N: bp.crr_pipeline_gpu(*PUT, N, greeks=False, plan=plan, timing=tm), 3)
        ref = bc.crr_batch(*PUT, N, greeks=False)[0, 0]
        for w in (64, 512, 4096):
            tm: dict = {}
            _bench.crr_split_gpu(*PUT, N, cpu_width=w, timing=tm)  # warm-up
            hs = []
            for _ in range(2):
                tm = {}
                price = _bench.crr_split_gpu(*PUT, N, cpu_width=w, timing=tm)
                hs.append(tm["host_s"] * 1e3)
            share = (w * w / 2) / nodes(N)
            out.append({"N": N, "cpu_width": w, "cpu_share_of_nodes": share, "split_host_ms": min(hs),
                        "pipeline_host_ms": pipe["host_ms"], "pipeline_device_ms": pipe["device_ms"],
                        "split_rel_err_vs_cpu": abs(price - ref) / ref})
            print(f"split {out[-1]}", file=sys.stderr, flush=True)
    return out


def chain(args) -> dict:
    from optiond import chain as chain_job

    path = None
    for cand in (Path(os.environ.get("OPTIOND_SPY_CHAIN", "-")), Path("shared/data/spy_chain_2026-02-13.csv"),
                 Path("../shared/data/spy_chain_2026-02-13.csv"),
                 Path("examples/data/spy_chain_2026-02-13.csv")):
        if cand.exists():
            path = cand
            break
    if path is None:
        return {"skipped": "SPY chain CSV not found"}
    df = chain_job.read_chain(str(path))
    res = {"file": str(path), "contracts": len(df)}
    for label, env in (("gpu", "0"), ("cpu", "1")):
        os.environ[gpu.DISABLE_ENV] = env
        chain_job.price_chain(df)  # warm-up
        t0 = time.perf_counter()
        out, _summary = chain_job.price_chain(df)
        res[f"{label}_s"] = time.perf_counter() - t0
        res[f"{label}_device"] = str(out["device"].iloc[0]) if "device" in out else None
        res[f"{label}_ok"] = int((out["status"] == "ok").sum())
        if label == "gpu":
            iv_gpu = out["iv"].to_numpy()
        else:
            d = np.abs(out["iv"].to_numpy() - iv_gpu)
            res["max_iv_diff_gpu_cpu"] = float(np.nanmax(d)) if np.isfinite(d).any() else None
    os.environ.pop(gpu.DISABLE_ENV, None)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, no N = 1e6 sweeps")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: accuracy,single,prune,plans,batch,split,chain,dividends,"
                         "extrapolate")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if not gpu.available():
        print(json.dumps({"bench": "binomial_gpu", "skipped": "no GPU"}))
        return
    t_start = time.perf_counter()
    info = gpu.device_info()
    plan = dispatch.pipeline_plan()
    out = {"bench": "binomial_gpu", "date": time.strftime("%Y-%m-%d"), "gpu": info, "ceiling_nodes_per_s": CEIL,
           "plan": plan.__dict__, "calibration_source": dispatch.current().get("source")}
    t0 = time.perf_counter()
    bg.module(False), bg.module(True)
    out["compile_s"] = time.perf_counter() - t0
    if "accuracy" not in skip:
        out["accuracy"] = accuracy(args)
    if "batch" not in skip:
        out["batch_10000x1000"] = batch(args)
    if "dividends" not in skip:
        out["dividends_10000x1000"] = dividends(args)
    if "extrapolate" not in skip:
        out["extrapolate_10000x1000"] = extrapolate(args)
    if "single" not in skip:
        out["single_american_put_fp64"] = single(args, plan)
    if "prune" not in skip:
        out["prune_sweep"] = prune_sweep(args)
    if "plans" not in skip:
        out["plan_sweep"] = plan_sweep(args)
    if "split" not in skip:
        out["split_experiment"] = split(args, plan)
    if "chain" not in skip:
        out["spy_chain"] = chain(args)
    out["bench_s"] = time.perf_counter() - t_start
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
