"""ADI finite differences for 2-D and 3-D pricing PDEs: the method's front door.

* :func:`price` (``Batch``, ``Method``, device) -> ``Result``: Heston (1993) by ADI (in 't Hout &
  Foulon 2010), European or American (Ikonen–Toivanen); price, delta, gamma and theta at the
  spot, ``dV/dv0`` in the diagnostics.
* :func:`wants_gpu`: with ``method.device="auto"`` and a GPU present, batches of at least
  :data:`GPU_MIN_BATCH` options go to the GPU (one 2-D problem does not fill it).
* :func:`heston_price` / :func:`heston_price_batch`: the pricers with a ``device`` argument
  (``"cpu"``, ``"gpu"`` or ``"auto"``); :func:`hhw_price` (Heston-Hull-White, 3-D) and the
  generic solver :func:`solve` with :class:`PDE` / :class:`BC` (the CPU reference).

Modules:

* :mod:`.cpu`: the gold reference (Heston, Heston-Hull-White and the generic solver on the
  CPU); :mod:`.gpu`: the same on a CUDA GPU via CuPy (over ``adi.cu``); :mod:`.inputs`: the
  checks of their inputs.
* :mod:`.grids`: non-uniform sinh grids (in 't Hout & Foulon 2010, §2.2) with the strike (or
  another point) on a node; the CIR quantile that sizes the variance domain.
* :mod:`.operators`: :class:`~.operators.PDE` / :class:`~.operators.BC` (coefficients as
  functions of the coordinates and time to maturity; Dirichlet, Neumann and "linear"
  boundaries) and their second-order finite-difference discretisation.
* :mod:`.solver`: the Douglas, Craig-Sneyd, Modified Craig-Sneyd and Hundsdorfer-Verwer time
  steppers (in 't Hout & Foulon 2010, §3), Rannacher start, Ikonen-Toivanen American and
  Bermudan exercise, point values and Greeks by interpolation.
* :mod:`._kernels`: the numba kernels (explicit stencils, Thomas line solves, fused steps).
* :mod:`.heston`, :mod:`.hhw`: the Heston (S, v) and Heston-Hull-White (S, v, r) models.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...models import Batch, InvalidInputError, Method, Result
from .. import gpu as _gpu
from . import cpu
from .cpu import BC, DEFAULT_THETA, PDE, Solution, hhw_price, solve  # noqa: F401  (the method's public names)
from .inputs import (  # noqa: F401
    BATCH_FIELDS,
    KINDS,
    MAX_GRID,
    MAX_TIME_STEPS,
    RESULT_KEYS,
    STYLES,
    batch_inputs,
    heston_inputs,
    parse_device,
)
from .solver import SCHEME_NAMES, point_values, scheme_code  # noqa: F401

__all__ = ["heston_price", "heston_price_batch", "hhw_price", "solve", "PDE", "BC", "Solution", "DEFAULT_THETA"]

#: the method has a GPU path (:mod:`.gpu`)
GPU = True
#: with ``device="auto"``, batches of at least this many options go to the GPU when one is there
GPU_MIN_BATCH = 8


def wants_gpu(batch: Batch, method: Method) -> bool:
    """With ``method.device="auto"`` and a GPU present: a batch of at least
    :data:`GPU_MIN_BATCH` options."""
    return len(batch) >= GPU_MIN_BATCH


def heston_price(kind: Any, style: Any, spot: float, strike: float, expiry: float, rate: float,
                 dividend_yield: float, v0: float, kappa: float, theta: float, xi: float, rho: float,
                 scheme: str = "mcs", grid: Sequence[int] = (200, 100), time_steps: int = 100,
                 rannacher: int = 2, device: str = "cpu", exercise_dates: Sequence[float] | None = None,
                 scheme_theta: float | None = None, v_max_bc: str = "linear", s_max: float | None = None,
                 v_max: float | None = None, return_grid: bool = False) -> dict:
    """Price one vanilla option under Heston by ADI finite differences: arguments, result and
    errors as :func:`optiond.kernels.adi.cpu.heston_price`, plus ``device``: ``"cpu"``,
    ``"gpu"`` (CuPy, :func:`optiond.kernels.adi.gpu.heston_price`: European/American on the
    default domain) or ``"auto"`` (the CPU: one 2-D problem does not fill a GPU; batches go to
    the GPU, see :func:`heston_price_batch`).

    Raises:
        InvalidInputError: a bad argument (field, value and reason in the message).
    """
    args = (kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho)
    opts = dict(scheme=scheme, grid=grid, time_steps=time_steps, rannacher=rannacher, exercise_dates=exercise_dates,
                scheme_theta=scheme_theta, v_max_bc=v_max_bc, s_max=s_max, v_max=v_max, return_grid=return_grid)
    if str(device).lower() == "gpu":
        from . import gpu

        return gpu.heston_price(*args, **opts)
    if str(device).lower() not in ("cpu", "auto"):  # the option's own errors first, then the device's
        heston_inputs(*args, grid, time_steps, rannacher, scheme, exercise_dates)
        parse_device(device)
    return cpu.heston_price(*args, **opts)


def heston_price_batch(kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho,
                       scheme: str = "mcs", grid: Sequence[int] = (200, 100), time_steps: int = 100,
                       rannacher: int = 2, device: str = "cpu", threads: int | None = None) -> dict:
    """Price a batch of Heston options (columns: scalars or 1-D arrays of one length n).

    European and American rows only (Bermudan needs per-row dates: use :func:`heston_price`).
    On the CPU (:func:`optiond.kernels.adi.cpu.heston_price_batch`) the options are priced in
    parallel threads; ``device="gpu"`` (or ``"auto"`` with a GPU present and at least
    :data:`GPU_MIN_BATCH` options) sends the whole batch to
    :func:`optiond.kernels.adi.gpu.heston_price_batch`.

    Returns:
        dict of arrays of length n: ``price, delta, gamma, theta, dv0`` (float64, NaN on failed
        rows), ``status`` (``"ok"``/``"error"``) and ``error`` (the reason), plus ``device`` and
        ``elapsed_s``.

    Raises:
        InvalidInputError: columns of different lengths, or a bad scheme/grid/steps/device
            (these concern the whole batch; bad values in a row only mark that row).
    """
    values = (kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho)
    cols, n, code, g, N, R = batch_inputs(values, scheme, grid, time_steps, rannacher)
    dev = parse_device(device)
    if dev == "gpu" or (dev == "auto" and n >= GPU_MIN_BATCH):
        from . import gpu

        if dev == "gpu" or _gpu.available():
            return gpu.heston_price_batch(*(cols[f] for f in BATCH_FIELDS), scheme=code, grid=g, time_steps=N, rannacher=R)
    return cpu.heston_price_batch(*(cols[f] for f in BATCH_FIELDS), scheme=code, grid=g, time_steps=N, rannacher=R,
                                  threads=threads)


def price(batch: Batch, method: Method, device: str) -> Result:
    """Heston by ADI finite differences (in 't Hout & Foulon 2010), European or American
    (Ikonen–Toivanen), on ``device`` (``"cpu"`` or ``"gpu"``): price, delta, gamma and theta at
    the spot (vega and rho NaN); ``diagnostics``: ``adi_dv0`` (dV/dv0 per row), ``adi_scheme``,
    ``adi_grid``, ``adi_time_steps``. A batch without the Heston columns (``v0, kappa, theta, xi,
    rho``) has every row marked; a row with a bad value is marked alone.

    Raises:
        GPUError: ``device="gpu"`` and the GPU failed (no CuPy, no device, a CUDA error).
    """
    n = len(batch)
    res = Result.empty(n, device="cpu")
    if batch.v0 is None:
        res.mark_error(np.arange(n), "method=adi needs the Heston columns v0, kappa, theta, xi, rho")
        return res
    try:
        out = heston_price_batch(batch.kind, batch.style, batch.spot, batch.strike, batch.expiry, batch.rate,
                                 batch.dividend_yield, batch.v0, batch.kappa, batch.long_run_variance, batch.xi, batch.correlation,
                                 scheme=method.scheme, grid=method.grid, time_steps=method.time_steps,
                                 rannacher=method.rannacher, device=device)
    except InvalidInputError:
        raise
    except Exception as e:  # noqa: BLE001 (CUDA error, out of memory, compile error: the caller uses the CPU)
        if device != "gpu" or isinstance(e, _gpu.GPUError):
            raise
        raise _gpu.GPUError(str(e)) from e
    for name in ("price", "delta", "gamma", "theta"):
        getattr(res, name)[:] = out[name]
    bad = np.flatnonzero(np.asarray(out["status"]) != "ok")
    if bad.size:
        res.mark_error(bad, [str(out["error"][i]) for i in bad])
    res.device = "cpu" if str(out.get("device", "cpu")).startswith("cpu") else str(out["device"])
    res.diagnostics.update(adi_dv0=np.asarray(out["dv0"]).tolist(), adi_scheme=method.scheme, adi_grid=list(method.grid),
                           adi_time_steps=method.time_steps)
    return res
