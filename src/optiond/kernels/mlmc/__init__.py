"""Multilevel Monte Carlo (Giles 2008/2015, Milstein scheme, geometric Brownian motion): the
method's front door.

* :func:`price` (``Batch``, ``Method``, device) -> ``Result``: one adaptive run per option
  (:func:`mlmc_price`), price and its standard error; rows it cannot price are marked.
* :func:`wants_gpu`: with ``method.device="auto"`` and a GPU present, the GPU takes every
  MLMC request.
* the driver's entry points, re-exported: :func:`mlmc_price`, :func:`mlmc_price_batch`,
  :func:`mlmc_adaptive`, :func:`mlmc_test`, :func:`make_sampler`, :class:`MLMCResult`, ...

The room: :mod:`.adaptive` (Giles' adaptive driver), :mod:`.cpu` (the gold reference level
sampler), :mod:`.gpu` (the CUDA sampler over ``mlmc.cu``), :mod:`.level0` (payoff codes and the
exact level-0 mean), :mod:`.philox` (the counter-based random numbers both samplers share).
"""

from __future__ import annotations

import numpy as np

from ... import runctl
from ...models import AMERICAN, Batch, InvalidInputError, Method, Result
from .. import gpu as _gpu
from .adaptive import (  # noqa: F401  (the public names of optiond.kernels.mlmc)
    ALPHA_MAX,
    DEFAULT_L_MAX,
    DEFAULT_L_MIN,
    DEFAULT_N0,
    DEFAULT_THETA,
    MAX_CHUNKS,
    MLMCResult,
    MLMCTestReport,
    chunk_layout,
    exact_level0_mean,
    level_cost,
    make_sampler,
    mlmc_adaptive,
    mlmc_price,
    mlmc_price_batch,
    mlmc_test,
    regression_exponent,
)
from .cpu import NSTAT, CPUSampler, unit_size  # noqa: F401
from .level0 import PAYOFF_CODES, PAYOFF_NAMES, level0_mean  # noqa: F401
from .philox import seed_key  # noqa: F401

#: the method has a GPU path (:mod:`.gpu`)
GPU = True


def wants_gpu(batch: Batch, method: Method) -> bool:
    """With ``method.device="auto"`` and a GPU present: every MLMC request goes to the GPU."""
    return True


def payoff_name(kind: int, payoff: str) -> str:
    """The driver's payoff name of a row: ``kind`` 1 = call, else put; ``payoff`` one of
    :data:`optiond.models.PAYOFFS` (``"vanilla"`` -> ``"call"``/``"put"``, ``"asian"`` ->
    ``"asian_call"``/``"asian_put"``, ...)."""
    side = "call" if kind == 1 else "put"
    return side if payoff == "vanilla" else f"{payoff}_{side}"


def price(batch: Batch, method: Method, device: str) -> Result:
    """Adaptive MLMC (Giles 2008), one run per option on ``device`` (``"cpu"`` or ``"gpu"``).

    Every row uses ``method.seed`` (common random numbers across rows) and its own target RMS
    error ``method.eps`` (a scalar or one per row). American rows and rows with an invalid input
    are marked ``status="error"``; the rest get price and ``std_error`` (Greeks NaN).
    ``diagnostics``: ``mlmc_levels`` (levels used per row, 0 where not priced) and
    ``mlmc_warnings`` (row -> the run's warnings, e.g. the finest level reached without
    convergence). Under a daemon job (:mod:`optiond.runctl`) each adaptive iteration reports
    progress and may cancel.

    Raises:
        GPUError: ``device="gpu"`` and the GPU failed (no CuPy, no device, a CUDA error); the
            CPU gives the same estimates (the same Philox streams), to rounding.
    """
    n = len(batch)
    res = Result.empty(n, device="cpu")
    res.std_error = np.full(n, np.nan)
    am = np.flatnonzero(batch.style == AMERICAN)
    if am.size:
        res.mark_error(am, "mlmc prices European-style payoffs (vanilla, digital, asian); use method=binomial for american")
    eps = np.broadcast_to(np.asarray(method.eps, dtype=np.float64), (n,))
    levels, warnings = np.zeros(n, dtype=np.int64), {}
    todo = np.flatnonzero(res.ok).tolist()
    hooks: dict = {}
    for k, i in enumerate(todo):
        args = (payoff_name(int(batch.kind[i]), method.payoff), batch.spot[i], batch.strike[i], batch.expiry[i],
                batch.rate[i], batch.dividend_yield[i], batch.volatility[i], float(eps[i]))
        if runctl.active():  # a daemon job: progress per adaptive iteration, cancellation between them
            hooks = {"progress": lambda *_: runctl.check(),
                     "on_fraction": lambda f, k=k: runctl.report((k + f) / len(todo))}
        try:
            r = mlmc_price(*args, seed=int(method.seed), device=device, **hooks)
        except InvalidInputError as e:
            res.mark_error([i], str(e))
            continue
        except (ImportError, RuntimeError) as e:  # GPU unusable: the caller prices on the CPU
            if device != "gpu" or isinstance(e, _gpu.GPUError):
                raise
            raise _gpu.GPUError(str(e)) from e
        res.price[i], res.std_error[i], levels[i] = r.price, r.std_error, r.levels
        if r.warnings:
            warnings[i] = "; ".join(r.warnings)
    if device == "gpu":
        res.device = _gpu.device_label()
    res.diagnostics.update(mlmc_levels=levels.tolist(), mlmc_warnings=warnings)
    return res
