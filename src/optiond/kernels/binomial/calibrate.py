"""``optiond calibrate``'s measurement: where, on this machine, the GPU paths of the binomial
method beat the CPU and where the pipeline's phases should change. The result is stored and read
by :mod:`optiond.kernels.binomial.plan` (:func:`~optiond.kernels.binomial.plan.choose`).
"""

from __future__ import annotations

import logging
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ... import costs
from .. import gpu as gpus
from . import cpu as bc
from . import gpu as bg
from . import pipeline as bp
from .plan import CALIBRATION_VERSION, DEFAULTS, PipelinePlan, save_calibration

log = logging.getLogger(__name__)


def _best(fn: Callable[[], Any], repeats: int) -> float:
    """Best wall time of ``repeats`` calls after a warm-up call (the warm-up's if repeats == 0)."""
    t0 = time.perf_counter()
    fn()  # warm-up: compile, allocate
    best = float("inf") if repeats > 0 else time.perf_counter() - t0
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares ``y = a + b x`` (a, b >= 0)."""
    A = np.vstack([np.ones_like(x), x]).T
    a, b = np.linalg.lstsq(A, y, rcond=None)[0]
    return max(float(a), 0.0), max(float(b), 1e-15)


def calibrate(quick: bool = False, save: bool = True, path: Path | str | None = None,
              progress: Callable[[str], None] | None = None) -> dict:
    """Measure the crossovers on this machine and (by default) store them.

    Times, host to host, American puts on the CPU (``crr_batch``) and on the GPU batch kernel
    over a range of batch sizes, fits ``t = overhead + cost * nodes`` to each and stores the
    node count where the GPU starts to win (``gpu_min_nodes``); times one option through the
    pipeline and through the batch kernel for N from 500 to 1e5 (``pipeline_min_steps``); and
    picks the pipeline's phase boundaries and CPU tail from a small grid of trials.

    Args:
        quick: fewer sizes and repeats (about 10 s instead of about a minute).
        save: write the result to ``path`` (default :func:`calibration_path`).
        progress: called with a line of text per measurement.

    Returns:
        The calibration dict (with a ``measurements`` section).

    Raises:
        GPUError: no usable GPU (calibration needs one).
    """
    say = progress or (lambda s: log.info("%s", s))
    if not gpus.available():
        raise gpus.GPUError("no GPU: nothing to calibrate (the CPU is used for everything)")
    info = gpus.device_info()
    reps = 2 if quick else 4
    rng = np.random.default_rng(0)
    meas: dict[str, Any] = {"cpu": [], "gpu_batch": [], "single": [], "plan": [], "cpu_tail": []}

    def puts(n, N):
        K = rng.uniform(80.0, 120.0, n)
        return (0, 1, 100.0, K, 1.0, 0.05, 0.0, 0.25, N)

    # 1. CPU vs GPU batch (price only), host to host
    sizes = [(1, 200), (1, 1000), (20, 1000), (200, 1000), (2000, 1000)] if quick else \
        [(1, 100), (1, 500), (1, 1000), (1, 2000), (10, 1000), (100, 500), (100, 1000), (1000, 1000), (4000, 1000)]
    for n, N in sizes:
        a = puts(n, N)
        nodes = n * costs.tree_nodes(N)
        tc = _best(lambda a=a: bc.crr_batch(*a, greeks=False), reps)
        tg = _best(lambda a=a: bg.crr_batch_gpu(*a, greeks=False), reps)
        meas["cpu"].append([nodes, tc])
        meas["gpu_batch"].append([nodes, tg])
        say(f"batch {n} x N={N}: cpu {tc * 1e3:.3f} ms, gpu {tg * 1e3:.3f} ms")
    c0, c1 = _fit(*map(np.array, zip(*meas["cpu"])))
    g0, g1 = _fit(*map(np.array, zip(*meas["gpu_batch"])))
    gpu_min_nodes = (g0 - c0) / (c1 - g1) if c1 > g1 else float("inf")
    gpu_min_nodes = float(min(max(gpu_min_nodes, 0.0), 1e12))

    # 2. pipeline phase boundaries (device time of one American put), one boundary at a time
    def pipe_time(N, plan, repeats=1):
        tm: dict = {}
        t = _best(lambda: bp.crr_pipeline_gpu(*puts(1, N), greeks=False, plan=plan, timing=tm), repeats)
        return tm.get("device_s", t)

    best = dict(DEFAULTS["plan"])
    sweeps = [("small_to_block", 2_000, (0, 500, 1000, 2000)),
              ("mid_to_small", 100_000 if quick else 200_000, (5_000, 15_000, 30_000, 60_000)),
              ("big_to_mid", 400_000 if quick else 1_000_000, (10**9, 800_000, 600_000, 300_000, 0))]
    for key, N, values in sweeps:
        trials = []
        for v in values:
            plan = PipelinePlan(**dict(best, cpu_tail=0, prune=False, **{key: v}))  # the dense phases
            d = pipe_time(N, plan, 1 if N < 500_000 else 0)
            trials.append((d, v))
            meas["plan"].append({"N": N, key: v, "device_s": d})
            say(f"pipeline N={N} {key}={v}: {d * 1e3:.3f} ms")
        best[key] = min(trials)[1]

    # 2b. pruned windows: the smallest N from which the pruned kernel beats the dense phases
    prune_min = None
    for N in (5_000, 10_000, 20_000, 30_000, 50_000, 100_000):
        dd = pipe_time(N, PipelinePlan(**dict(best, cpu_tail=0, prune=False)), 1)
        dp = pipe_time(N, PipelinePlan(**dict(best, cpu_tail=0, prune_steps=0)), 1)
        meas["plan"].append({"N": N, "dense_device_s": dd, "pruned_device_s": dp})
        say(f"pipeline N={N}: dense {dd * 1e3:.3f} ms, pruned {dp * 1e3:.3f} ms")
        if dp < dd and prune_min is None:
            prune_min = N
        elif dp >= dd:
            prune_min = None
    best["prune_steps"] = prune_min if prune_min is not None else 10**9

    # 3. CPU tail (host to host, N = 1e4)
    tails = []
    for tail in (0, 100, 300, 1000):
        plan = PipelinePlan(**dict(best, cpu_tail=tail))
        t = _best(lambda plan=plan: bp.crr_pipeline_gpu(*puts(1, 10_000), greeks=False, plan=plan), reps)
        tails.append((t, tail))
        meas["cpu_tail"].append([tail, t])
        say(f"pipeline N=1e4 cpu_tail={tail}: {t * 1e3:.3f} ms host to host")
    best["cpu_tail"] = min(tails)[1]

    # 4. one option: pipeline vs batch kernel (host to host)
    plan = PipelinePlan(**best)
    pipe_min = None
    for N in ((1000, 5000, 20_000) if quick else (500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)):
        tp = _best(lambda N=N: bp.crr_pipeline_gpu(*puts(1, N), greeks=False, plan=plan), reps)
        tb = _best(lambda N=N: bg.crr_batch_gpu(*puts(1, N), greeks=False), reps)
        meas["single"].append([N, tp, tb])
        say(f"one option N={N}: pipeline {tp * 1e3:.3f} ms, batch kernel {tb * 1e3:.3f} ms")
        if tp < tb and pipe_min is None:
            pipe_min = N
        elif tp >= tb:
            pipe_min = None
    cal = {
        "version": CALIBRATION_VERSION,
        "source": "measured",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "gpu": info["name"],
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpu_min_nodes": gpu_min_nodes,
        "pipeline_min_steps": int(pipe_min if pipe_min is not None else 10_000_000),
        "pipeline_max_options": int(DEFAULTS["pipeline_max_options"]),
        "plan": {k: int(v) for k, v in best.items()},
        "model": {"cpu_overhead_s": c0, "cpu_s_per_node": c1, "gpu_overhead_s": g0, "gpu_s_per_node": g1},
        "measurements": meas,
    }
    if save:
        where = save_calibration(cal, path)
        say(f"saved {where}")
    return cal
