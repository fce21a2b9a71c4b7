"""Which engine prices a CRR binomial request: the CPU, the GPU batch kernel or the GPU
single-option pipeline; and the calibration that decides it.

The crossovers are measured, not copied: ``optiond calibrate`` (:func:`calibrate`) times the
CPU (``binomial_cpu.crr_batch``) and the GPU paths (``binomial_gpu``) host to host on this
machine and stores them as JSON in ``platformdirs.user_cache_dir("optiond")/calibration.json``
(or the file named by ``OPTIOND_CALIBRATION``). :func:`choose` reads it (once per process;
:func:`reset_cache` forgets it); without a file, or with one from another GPU or an older
format, it uses :data:`DEFAULTS`, which were measured on an NVIDIA H200 beside a 2-core CPU.

Without a GPU (no CuPy, no device, or ``OPTIOND_DISABLE_GPU=1``) every request goes to the CPU.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

CALIBRATION_VERSION = 1
CALIBRATION_ENV = "OPTIOND_CALIBRATION"
PATHS = ("cpu", "gpu-batch", "gpu-pipeline")

#: used when no calibration file is present (see the module docstring)
DEFAULTS: dict[str, Any] = {
    "version": CALIBRATION_VERSION,
    "source": "defaults",
    # the GPU (host to host) beats the CPU from about this many tree nodes per request
    # (H200, 2026-11: CPU 0.12 ms + 0.23 ns/node, GPU batch 0.30 ms + 0.0006 ns/node)
    "gpu_min_nodes": 8.0e5,
    # at most this many options, each with N >= pipeline_min_steps: one tree at a time over the
    # whole GPU instead of one block per tree (H200, one American put, FP64 device time: N = 1000
    # 0.059 ms in a thread-block cluster against 0.129 ms on the batch kernel; N = 1e4 0.56 / 3.3)
    "pipeline_min_steps": 1_000,
    "pipeline_max_options": 4,
    # phase boundaries of the pipeline (binomial_pipeline_gpu.PipelinePlan)
    # (big_to_mid measured on an H200 with the row-skipping kernels: N = 1e6 318 ms at 200,000, 326 ms at 300,000,
    # 341 ms at 600,000)
    # (mid_to_small: N = 1e5 8.67 ms at 15,000 against 8.84 ms at 30,000)
    # prune_steps: FP64 trees of at least this many steps run in the pruned-window kernel
    # (PipelinePlan.prune_steps); H200, one American put, device time dense / pruned: N = 5000
    # 0.276 / 0.259 ms, 1e4 0.551 / 0.513, 2e4 1.38 / 1.02, 1e5 8.5 / 5.08 (the crossover is
    # calibrated, step 2b)
    "plan": {"big_to_mid": 200_000, "mid_to_small": 15_000, "small_to_block": 0, "cpu_tail": 0,
             "prune_steps": 5_000},
    # trees of at most this many steps go through the pipeline in one block with the tree in
    # registers (PipelinePlan.reg_levels); off: on an H200 the grid kernel with the pipeline's
    # 4-level unroll is as fast or faster (N = 1000 69.0 against 71.9 us, N = 1500 94 against 114)
    "pipeline_reg_levels": 0,
    # trees of at most this many steps go through the pipeline whole in one thread-block cluster
    # (PipelinePlan.cluster_levels; binomial_gpu.PIPE_CLUSTER, the largest N it holds with one
    # warp per SM sub-partition). H200, one American put, FP64 device time against the grid
    # phases: N = 1000 57.6 / 67.3 us, 2000 106 / 121, 4000 205 / 231; with 6 warps per SM it
    # loses (N = 6000 396 / 338 us). FP32: 77 / 111 us at N = 1000, 285 / 432 at 4000
    "pipeline_cluster_levels": 4095,
}

_cache_lock = threading.Lock()
_cache: dict[str, Any] = {}


def calibration_path() -> Path:
    """Where the calibration lives: ``$OPTIOND_CALIBRATION`` or the user cache directory."""
    env = os.environ.get(CALIBRATION_ENV)
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("optiond")) / "calibration.json"


def _merged(data: dict) -> dict:
    out = json.loads(json.dumps(DEFAULTS))
    for k, v in data.items():
        if k == "plan" and isinstance(v, dict):
            out["plan"].update({kk: int(vv) for kk, vv in v.items() if kk in out["plan"]})
        else:
            out[k] = v
    return out


def _valid(data: Any) -> str | None:
    """None if ``data`` is a usable calibration, else why not."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("version") != CALIBRATION_VERSION:
        return f"format version {data.get('version')!r}, expected {CALIBRATION_VERSION}"
    for k in ("gpu_min_nodes", "pipeline_min_steps", "pipeline_max_options"):
        v = data.get(k)
        if not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
            return f"{k} = {v!r} is not a non-negative number"
    plan = data.get("plan", {})
    if not isinstance(plan, dict) or any(not isinstance(v, int) or v < 0 for v in plan.values()):
        return f"plan = {plan!r} is not a mapping of non-negative integers"
    return None


def load_calibration(path: Path | str | None = None, gpu_name: str | None = None) -> dict:
    """The calibration in ``path`` (default :func:`calibration_path`) merged over the defaults.

    A missing file gives the defaults; an unreadable or invalid one, or one measured on a
    different GPU than ``gpu_name``, gives the defaults and a warning. Never raises.
    """
    p = Path(path) if path is not None else calibration_path()
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        return _merged({})
    except (OSError, ValueError) as e:
        log.warning("ignoring calibration %s (%s); using defaults", p, e)
        return _merged({})
    why = _valid(data)
    if why:
        log.warning("ignoring calibration %s (%s); using defaults; run 'optiond calibrate'", p, why)
        return _merged({})
    if gpu_name and data.get("gpu") and data["gpu"] != gpu_name:
        log.warning("calibration %s was measured on %s, not %s; using defaults", p, data["gpu"], gpu_name)
        return _merged({})
    return _merged(data)


def save_calibration(cal: dict, path: Path | str | None = None) -> Path:
    """Write ``cal`` as JSON (atomically: a temporary file then a rename); returns the path.

    Raises:
        ValueError: ``cal`` is not a valid calibration.
        OSError: the directory cannot be written.
    """
    why = _valid(cal)
    if why:
        raise ValueError(f"invalid calibration: {why}")
    p = Path(path) if path is not None else calibration_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(cal, indent=2, sort_keys=True))
    tmp.replace(p)
    reset_cache()
    return p


def reset_cache() -> None:
    """Forget the calibration read by :func:`current`."""
    with _cache_lock:
        _cache.clear()


def current() -> dict:
    """The calibration in force for this process (read once)."""
    with _cache_lock:
        if "cal" not in _cache:
            name = None
            try:
                from . import binomial_gpu

                if binomial_gpu.available():
                    name = binomial_gpu.device_info()["name"]
            except Exception:  # noqa: BLE001 (no GPU information: just do not compare names)
                name = None
            _cache["cal"] = load_calibration(gpu_name=name)
        return _cache["cal"]


def pipeline_plan(cal: dict | None = None):
    """The :class:`~optiond.kernels.binomial_pipeline_gpu.PipelinePlan` of the calibration."""
    from .binomial_pipeline_gpu import PipelinePlan

    cal = cal or current()
    plan = {k: int(v) for k, v in cal["plan"].items()}
    plan.setdefault("reg_levels", int(cal.get("pipeline_reg_levels", DEFAULTS["pipeline_reg_levels"])))
    plan.setdefault("cluster_levels", int(cal.get("pipeline_cluster_levels", DEFAULTS["pipeline_cluster_levels"])))
    return PipelinePlan(**plan)


def tree_nodes(steps: Any) -> float:
    """Total nodes of CRR trees with these step counts, sum of (N + 1)(N + 2) / 2."""
    N = np.asarray(steps, dtype=np.float64).ravel()
    return float(np.sum((N + 1.0) * (N + 2.0) / 2.0))


def choose(n_options: int, steps: Any, greeks: bool = True, calibration: dict | None = None,
           gpu: bool | None = None, force_gpu: bool = False) -> str:
    """The engine for a binomial request: ``"cpu"``, ``"gpu-batch"`` or ``"gpu-pipeline"``.

    Args:
        n_options: options in the request.
        steps: N per option (array of length n_options) or one N for all.
        greeks: Greeks wanted (vega and rho cost four more trees per option).
        calibration: a calibration dict (default: :func:`current`).
        gpu: whether a GPU is usable (default: ``binomial_gpu.available()``).
        force_gpu: the caller asked for the GPU (``Method(device="gpu")``): never ``"cpu"``
            while a GPU is present.

    Returns:
        ``"cpu"`` when there is no GPU or the request is too small to pay for the transfers;
        ``"gpu-pipeline"`` for up to ``pipeline_max_options`` options whose largest N is at
        least ``pipeline_min_steps``; ``"gpu-batch"`` otherwise.
    """
    if gpu is None:
        from . import binomial_gpu

        gpu = binomial_gpu.available()
    if not gpu or n_options <= 0:
        return "cpu"
    cal = calibration if calibration is not None else current()
    N = np.asarray(steps, dtype=np.int64).ravel()
    if N.size == 1 and n_options > 1:
        N = np.full(n_options, int(N[0]))
    nodes = tree_nodes(N) * (5.0 if greeks else 1.0)
    if nodes < float(cal["gpu_min_nodes"]) and not force_gpu:
        return "cpu"
    if n_options <= int(cal["pipeline_max_options"]) and int(N.max()) >= int(cal["pipeline_min_steps"]):
        return "gpu-pipeline"
    return "gpu-batch"


# --------------------------------------------------------------------------- calibration

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
    from . import binomial_cpu as bc
    from . import binomial_gpu as bg
    from . import binomial_pipeline_gpu as bp

    say = progress or (lambda s: log.info("%s", s))
    if not bg.available():
        raise bg.GPUError("no GPU: nothing to calibrate (the CPU is used for everything)")
    info = bg.device_info()
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
        nodes = n * (N + 1) * (N + 2) / 2
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
            plan = bp.PipelinePlan(**dict(best, cpu_tail=0, prune=False, **{key: v}))  # the dense phases
            d = pipe_time(N, plan, 1 if N < 500_000 else 0)
            trials.append((d, v))
            meas["plan"].append({"N": N, key: v, "device_s": d})
            say(f"pipeline N={N} {key}={v}: {d * 1e3:.3f} ms")
        best[key] = min(trials)[1]

    # 2b. pruned windows: the smallest N from which the pruned kernel beats the dense phases
    prune_min = None
    for N in (5_000, 10_000, 20_000, 30_000, 50_000, 100_000):
        dd = pipe_time(N, bp.PipelinePlan(**dict(best, cpu_tail=0, prune=False)), 1)
        dp = pipe_time(N, bp.PipelinePlan(**dict(best, cpu_tail=0, prune_steps=0)), 1)
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
        plan = bp.PipelinePlan(**dict(best, cpu_tail=tail))
        t = _best(lambda plan=plan: bp.crr_pipeline_gpu(*puts(1, 10_000), greeks=False, plan=plan), reps)
        tails.append((t, tail))
        meas["cpu_tail"].append([tail, t])
        say(f"pipeline N=1e4 cpu_tail={tail}: {t * 1e3:.3f} ms host to host")
    best["cpu_tail"] = min(tails)[1]

    # 4. one option: pipeline vs batch kernel (host to host)
    plan = bp.PipelinePlan(**best)
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
