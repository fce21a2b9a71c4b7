"""The spectral method's plan: whether a request runs on the CPU or the GPU, by the crossover
mechanism of the CRR trees (:func:`optiond.kernels.binomial.plan.choose`): the request's work in
the work model's units (:data:`optiond.costs.COST_MODELS` ``["spectral"]``: tree-node units,
:data:`optiond.costs.SPECTRAL_WORK` an option and solve by accuracy setting) against the work
from which the GPU wins (:func:`gpu_min_work`).

The crossover per accuracy setting comes from the calibration file the trees use
(:func:`optiond.kernels.binomial.plan.current`, key ``spectral_gpu_min_work``: a map from
accuracy setting to work units), written by a calibration that times both paths on this
machine; without one, it follows from the GPU cost figures below and the CPU's
(:data:`CPU_NS_PER_WORK`): the GPU wins where ``work x CPU_NS_PER_WORK`` exceeds
``GPU_FIXED_S + solves x GPU_S_PER_SOLVE[accuracy]``.

The GPU cost figures are measured (``bench/american.py --only gpu``, host to host, one launch,
FP64, on an NVIDIA H200); a figure set to NaN gives no crossover (every request then stays on
the CPU unless the GPU is asked for, ``device="gpu"``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ... import costs
from ...models import Method

#: the GPU path's fixed time of one request, seconds host to host (launch, transfers, the
#: result's copy back): measured on an NVIDIA H200 (fast setting, the warp layout: 0.32 ms for
#: 100 and for 300 options, 0.39 ms for 1,000; ``bench/american.py --only gpu``)
GPU_FIXED_S = 3.2e-4
#: the GPU path's seconds per option and solve, by accuracy setting (one boundary solve and its
#: premium integral; :data:`optiond.costs.SPECTRAL_SOLVES` solves an option): measured on an
#: NVIDIA H200, 100,000 options host to host less the fixed time (fast 6.8 ms, accurate 21.6 ms,
#: high precision 109.7 ms; the thread layout for the first two, the warp layout for the third)
GPU_S_PER_SOLVE = {"fast": 6.5e-8, "accurate": 2.1e-7, "high-precision": 1.1e-6}
#: the CPU's nanoseconds per work unit of the spectral engine (the tree-node units of
#: :data:`optiond.costs.SPECTRAL_WORK` were measured at 0.46 ns a node)
CPU_NS_PER_WORK = 0.46
#: the calibration file's key of the measured crossovers (accuracy -> work units)
CALIBRATION_KEY = "spectral_gpu_min_work"


def gpu_min_work(accuracy: str, calibration: Mapping[str, Any] | None = None) -> float:
    """The request work (the work model's spectral units) from which the GPU beats the CPU at
    ``accuracy``: the calibration's measured value where it has one, else the crossover of the
    cost figures (``GPU_FIXED_S / (CPU_NS_PER_WORK 1e-9 - GPU_S_PER_SOLVE / SPECTRAL_WORK)``);
    ``inf`` where the GPU never wins or a figure is not measured (NaN). ``calibration``:
    default the trees' (:func:`optiond.kernels.binomial.plan.current`)."""
    if calibration is None:
        from ..binomial import plan as tree_plan

        calibration = tree_plan.current()
    measured = calibration.get(CALIBRATION_KEY)
    if isinstance(measured, Mapping):
        v = measured.get(accuracy)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
            return float(v)
    per_solve_cpu = costs.SPECTRAL_WORK[accuracy] * CPU_NS_PER_WORK * 1e-9
    gain = per_solve_cpu - GPU_S_PER_SOLVE[accuracy]  # seconds saved per solve on the GPU
    if not (math.isfinite(GPU_FIXED_S) and math.isfinite(gain)) or gain <= 0:
        return math.inf
    return GPU_FIXED_S / gain * costs.SPECTRAL_WORK[accuracy]


def choose(n_options: int, method: Method, op: str = "price", calibration: Mapping[str, Any] | None = None,
           gpu: bool | None = None, force_gpu: bool = False) -> str:
    """The engine for a spectral request: ``"cpu"`` or ``"gpu"``.

    Args:
        n_options: options in the request.
        method: its ``accuracy`` and ``greeks`` (the work per option).
        op: ``"price"`` or ``"implied_vol"``.
        calibration: a calibration dict (default: the trees' :func:`~optiond.kernels.binomial.plan.current`).
        gpu: whether a GPU is usable (default: :func:`optiond.kernels.gpu.available`).
        force_gpu: the caller asked for the GPU: never ``"cpu"`` while a GPU is present.

    Returns:
        ``"gpu"`` when a GPU is there and the request's work (:func:`optiond.costs.estimate`'s
        spectral model) reaches :func:`gpu_min_work`, or the GPU was asked for; else ``"cpu"``.
    """
    if gpu is None:
        from .. import gpu as gpus

        gpu = gpus.available()
    if not gpu or n_options <= 0:
        return "cpu"
    if force_gpu:
        return "gpu"
    work = costs.estimate(op, {}, method if method.name == "spectral" else Method(name="spectral", accuracy=method.accuracy,
                                                                                 greeks=method.greeks), n_options).work
    return "gpu" if work >= gpu_min_work(method.accuracy, calibration) else "cpu"


__all__ = ["CALIBRATION_KEY", "CPU_NS_PER_WORK", "GPU_FIXED_S", "GPU_S_PER_SOLVE", "choose", "gpu_min_work"]
