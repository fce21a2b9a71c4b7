"""The binomial method's plan: which engine prices a CRR request (the CPU, the GPU batch kernel
or the GPU single-option pipeline), from the calibration; and how the pipeline runs one tree
(:class:`PipelinePlan`: its phases, and the pruned windows that skip the nodes whose values are
known exactly).

The crossovers are measured, not copied: ``optiond calibrate``
(:func:`optiond.kernels.binomial.calibrate.calibrate`) times the CPU (``binomial.cpu.crr_batch``)
and the GPU paths (``binomial.gpu``, ``binomial.pipeline``) host to host on this machine and
stores them as JSON in ``platformdirs.user_cache_dir("optiond")/calibration.json`` (or the file
named by ``OPTIOND_CALIBRATION``). :func:`choose` reads it (once per process;
:func:`reset_cache` forgets it); without a file, or with one from another GPU or an older
format, it uses :data:`DEFAULTS`, which were measured on an NVIDIA H200 beside a 2-core CPU.

Without a GPU (no CuPy, no device, or ``OPTIOND_DISABLE_GPU=1``) every request goes to the CPU.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ... import costs
from ...files import private_dir, write_atomic
from .. import gpu as gpus
from . import cpu as bc
from .gpu import clusters_supported
from .variants import (PIPE_BLOCK, PIPE_CLUSTER, PIPE_GRID_BIG, PIPE_GRID_MID, PIPE_GRID_SMALL, PIPE_PRUNED, PIPE_REG,
                       Variant)

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
    # phase boundaries of the pipeline (PipelinePlan)
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
    # (PipelinePlan.cluster_levels; variants.PIPE_CLUSTER, the largest N it holds with one
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
    """Write ``cal`` as JSON (whole or not at all, :func:`optiond.files.write_atomic`); returns
    the path. The default path's directory is created 0700 if missing (an explicit path's
    with the umask's mode).

    Raises:
        ValueError: ``cal`` is not a valid calibration.
        OSError: the directory or file cannot be written.
    """
    why = _valid(cal)
    if why:
        raise ValueError(f"invalid calibration: {why}")
    p = Path(path) if path is not None else calibration_path()
    if path is None:
        private_dir(p.parent)  # the product's own cache directory, 0700 whatever the umask
    else:
        p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, json.dumps(cal, indent=2, sort_keys=True))
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
                if gpus.available():
                    name = gpus.device_info()["name"]
            except Exception:  # noqa: BLE001 (no GPU information: just do not compare names)
                name = None
            _cache["cal"] = load_calibration(gpu_name=name)
        return _cache["cal"]


def pipeline_plan(cal: dict | None = None) -> PipelinePlan:
    """The :class:`PipelinePlan` of the calibration."""
    cal = cal or current()
    plan = {k: int(v) for k, v in cal["plan"].items()}
    plan.setdefault("reg_levels", int(cal.get("pipeline_reg_levels", DEFAULTS["pipeline_reg_levels"])))
    plan.setdefault("cluster_levels", int(cal.get("pipeline_cluster_levels", DEFAULTS["pipeline_cluster_levels"])))
    return PipelinePlan(**plan)


def choose(n_options: int, steps: Any, greeks: bool = True, calibration: dict | None = None,
           gpu: bool | None = None, force_gpu: bool = False) -> str:
    """The engine for a binomial request: ``"cpu"``, ``"gpu-batch"`` or ``"gpu-pipeline"``.

    Args:
        n_options: options in the request.
        steps: N per option (array of length n_options) or one N for all.
        greeks: Greeks wanted (vega, rho and dividend rho cost six more trees per option).
        calibration: a calibration dict (default: :func:`current`).
        gpu: whether a GPU is usable (default: :func:`optiond.kernels.gpu.available`).
        force_gpu: the caller asked for the GPU (``Method(device="gpu")``): never ``"cpu"``
            while a GPU is present.

    Returns:
        ``"cpu"`` when there is no GPU or the request is too small to pay for the transfers;
        ``"gpu-pipeline"`` for up to ``pipeline_max_options`` options whose largest N is at
        least ``pipeline_min_steps``; ``"gpu-batch"`` otherwise.
    """
    if gpu is None:
        gpu = gpus.available()
    if not gpu or n_options <= 0:
        return "cpu"
    cal = calibration if calibration is not None else current()
    N = np.asarray(steps, dtype=np.int64).ravel()
    if N.size == 1 and n_options > 1:
        N = np.full(n_options, int(N[0]))
    nodes = costs.tree_nodes(N) * costs.trees(greeks)  # the work model's count
    if nodes < float(cal["gpu_min_nodes"]) and not force_gpu:
        return "cpu"
    if n_options <= int(cal["pipeline_max_options"]) and int(N.max()) >= int(cal["pipeline_min_steps"]):
        return "gpu-pipeline"
    return "gpu-batch"


# --------------------------------------------------------------------------- the pipeline's plan


@dataclass(frozen=True)
class PipelinePlan:
    """Where the single-option pipeline changes regime, as levels t (the tree at level t is
    t + 1 nodes wide; every kernel keeps its chunk of the tree in registers, K levels per
    slab, halos of K nodes recomputed):

    * ``t > big_to_mid``: cooperative grid kernel, 1024-node chunks, K = 128 (throughput);
    * ``big_to_mid >= t > mid_to_small``: grid kernel, 256-node chunks, K = 64;
    * ``mid_to_small >= t > small_to_block``: grid kernel, 128-node chunks (4 per lane),
      K = 64 (96 if the phase starts at or below ``NARROW_LEVELS``): more, shorter warps, so
      less latency per level;
    * ``small_to_block >= t > cpu_tail``: one block, the tree in shared memory (latency);
    * ``N <= reg_levels``: the whole tree in one block with the tree in registers
      (``crr_pipe_reg``: K levels per slab, halos exchanged through shared memory, then one
      warp) instead of the phases above; only without a CPU tail and for N <=
      :func:`reg_max_levels` (0 disables it; the calibration's ``pipeline_reg_levels``). As
      the last phase of a larger tree it lost to the grid kernels, which spread the widest
      levels over more multiprocessors (BENCHMARKS.md);
    * ``N <= cluster_levels``: the whole tree in one thread-block cluster with the tree in
      registers (``crr_pipe_cluster``: as ``crr_pipe_reg`` over ``PIPE_CLUSTER``'s blocks, halos
      through distributed shared memory, one cluster barrier per slab); before ``reg_levels``,
      only without a CPU tail, for N <= :func:`cluster_max_levels` and on sm_90 and up (0
      disables it; the calibration's ``pipeline_cluster_levels``);
    * ``t <= cpu_tail``: the CPU finishes (FP64 only; 0 disables it).

    With ``prune`` (FP64, N >= ``prune_steps``) the tree instead runs in one phase of the grid
    kernel with 128-node chunks that computes, slab by slab, only the window of nodes between
    the known exercise side and the known zero side of the tree (binomial.cu, "Pruned
    windows"), on as many warps as the window needs (:func:`pruned_width`), then the CPU tail
    if any: the result is the dense tree's, the work far smaller for large N (one at-the-money
    put: a window of about 24 sqrt(N) nodes instead of N).
    """

    big_to_mid: int = 200_000
    mid_to_small: int = 15_000
    small_to_block: int = 0
    cpu_tail: int = 0
    reg_levels: int = 0
    cluster_levels: int = 0
    #: FP64 trees of at least prune_steps steps run whole in the pruned grid kernel
    #: (``PIPE_PRUNED``), which computes only the nodes whose values are not known exactly
    #: (:func:`window_sides`: the zero side, and the exercise side of American options); False
    #: computes every node (the benchmark's dense comparison)
    prune: bool = True
    prune_steps: int = 5_000


def reg_max_levels(v: Variant) -> int:
    """The largest N the register block kernel ``v`` takes (32 warps of cw - K outputs each)."""
    return 32 * (v.cw - v.K) - 1


def cluster_max_levels(v: Variant) -> int:
    """The largest N the cluster kernel ``v`` takes (``cluster`` blocks of ``threads / 32`` warps
    of cw - K outputs each)."""
    return v.cluster * (v.threads // 32) * (v.cw - v.K) - 1



def pruned_variant(N: int) -> Variant:
    """PIPE_PRUNED with K = 112 (fewer slabs, 16 outputs per warp) where the expected window
    needs at most one warp per SM sub-partition, else K = 96 (32 outputs per warp)."""
    sms = gpus.device_info()["sms"] if gpus.available() else 132
    if pruned_width(N, N, 0) / (PIPE_PRUNED.cw - 112) <= 4 * sms:
        return replace(PIPE_PRUNED, K=112)
    return PIPE_PRUNED



def pipeline_phases(N: int, precision: str, plan: PipelinePlan) -> list[tuple[Variant, bool, int, int]]:
    """[(variant, cooperative, t_hi, t_lo)] for one tree of N steps under ``plan``."""
    tail = 0 if precision == "fp32" else max(0, min(int(plan.cpu_tail), N))
    reg = PIPE_REG[precision]
    cl = PIPE_CLUSTER[precision]
    if not tail and N <= min(int(plan.cluster_levels), cluster_max_levels(cl)) and clusters_supported():
        return [(cl, False, N, 0)]
    if not tail and N <= min(int(plan.reg_levels), reg_max_levels(reg)):
        return [(reg, False, N, 0)]
    if plan.prune and precision == "fp64" and N >= plan.prune_steps and N > tail:
        return [(pruned_variant(N), True, N, tail)]
    out = []
    t = N
    for v, coop, stop in ((PIPE_GRID_BIG[precision], True, max(plan.big_to_mid, tail)),
                          (PIPE_GRID_MID[precision], True, max(plan.mid_to_small, tail)),
                          (PIPE_GRID_SMALL[precision], True, max(plan.small_to_block, tail)),
                          (PIPE_BLOCK[precision], False, tail)):
        if t > stop:
            out.append((v, coop, t, stop))
            t = stop
    return out


# --------------------------------------------------------------------------- pruned windows


SIDE_NONE, SIDE_EXERCISE, SIDE_ZERO = 0, 1, 2
#: the pruned windows' exercise side needs X - cont >= (1 - e^{-r dt}) 4a K (put; call with q) above this
_PRUNE_MARGIN = 1e-13
#: a window boundary "at infinity" (no cap), as the kernel's ln(S* / S0) / a
_FAR = 1e300


def window_sides(is_call: bool, american: bool, S: float, K: float, T: float, r: float, q: float, sigma: float,
                 N: int) -> tuple[int, float]:
    """Which sides of one CRR tree the pruned pipeline may skip (binomial.cu, "Pruned windows").

    Args:
        is_call, american: the option; S, K: spot and strike; T: expiry in years; r, q: rate and
        dividend yield (annualised, continuous); sigma: volatility (annualised); N: steps.

    Returns:
        ``(kinds, Ls)``: ``kinds = low | high << 2`` over the tree's low (small spot) and high
        sides, each ``SIDE_ZERO`` (values underflowed to exactly 0 beyond the strike: put above,
        call below), ``SIDE_EXERCISE`` (American exercise region, where ``V = X`` by a margin:
        put below ``S* = K (1 - e^{-r dt}) / (1 - e^{-q dt})``, call above it) or
        ``SIDE_NONE``; ``Ls = ln(S* / S) / a`` (``a = sigma sqrt(T / N)``), +-1e300 when
        ``S*`` is unbounded. The exercise side is used only where ``(1 - e^{-r dt}) 4a``
        (put) or ``(1 - e^{-q dt}) 4a`` (call) is at least 1e-13, so that the exercise
        margin of the rule (four steps ``a`` from ``S*``) lies far beyond rounding.

    The rule: the American put is exercised at a node whose two successors are exercised when
    ``K (1 - e^{-r dt}) > S (1 - e^{-q dt})`` (then ``X - cont`` equals that difference
    exactly, as ``pu u + pd d = e^{-q dt}``); the exercise region is an interval (the early
    exercise boundary, Kim & Byun 1994, tracked per level here).
    """
    dt = T / N
    a = sigma * math.sqrt(dt)
    er = -math.expm1(-r * dt)  # 1 - e^{-r dt}
    eq = -math.expm1(-q * dt)
    if not is_call:
        low = SIDE_EXERCISE if american and r > 0 and er * 4 * a >= _PRUNE_MARGIN else SIDE_NONE
        Ls = math.log(K * er / eq / S) / a if q > 0 and r > 0 else _FAR
        return low | SIDE_ZERO << 2, Ls
    high = SIDE_EXERCISE if american and q > 0 and eq * 4 * a >= _PRUNE_MARGIN else SIDE_NONE
    Ls = math.log(K * er / eq / S) / a if r > 0 and q > 0 else -_FAR
    return SIDE_ZERO | high << 2, Ls


def window_table(kind, style, S, K, T, r, q, sigma, N, bump, m: int) -> list[tuple[int, float]]:
    """:func:`window_sides` of every tree of :func:`optiond.kernels.binomial.gpu._tree_table`
    (bumped trees included)."""
    out: list[tuple[int, float]] = [(0, 0.0)] * m
    hv, hr = bc.VEGA_BUMP, bc.RHO_BUMP
    for i in range(S.shape[0]):
        args = [bool(kind[i] == 1), bool(style[i] == 1), float(S[i]), float(K[i]), float(T[i]), float(r[i]),
                float(q[i]), float(sigma[i]), int(N[i])]
        out[i] = window_sides(*args)
        for b, (dr, ds) in enumerate(((0, hv), (0, -hv), (hr, 0), (-hr, 0))):
            if bump.shape[0] > i and bump[i, b] >= 0:
                bargs = list(args)
                bargs[5] += dr
                bargs[7] += ds
                out[int(bump[i, b])] = window_sides(*bargs)
    return out


#: pruned windows: expected width, in nodes, per square root of the levels below the leaves
#: (the zero side lies where the tail probability of a CRR walk underflows, about 19.3 sqrt(m)
#: nodes beyond the strike after m levels, whatever sigma; the exercise side a few sqrt(m)
#: below it), and the outputs per warp the grid is sized for
PRUNE_WIDTH = 24.0
PRUNE_WARP_OUTPUTS = 64


def pruned_width(N: int, t_hi: int, t_lo: int) -> float:
    """Expected widest pruned window (nodes) over levels t_lo .. t_hi of a tree of N steps:
    the largest ``min(t + 1, PRUNE_WIDTH sqrt(N - t))`` (the level's width, the window's)."""
    ts = np.linspace(t_lo, t_hi, 33)
    return float(np.max(np.minimum(ts + 1.0, PRUNE_WIDTH * np.sqrt(np.maximum(N - ts, 1.0)))))
