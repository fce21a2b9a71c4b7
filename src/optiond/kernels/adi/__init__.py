"""ADI finite differences for 2-D and 3-D pricing PDEs: the method's front door.

* :func:`price` (``Batch``, ``Method``, device) -> ``Result``: Heston (1993) by ADI (in 't Hout &
  Foulon 2010), European or American (Ikonen–Toivanen); price, delta, gamma and theta at the
  spot, ``dV/dv0`` in the diagnostics.
* :func:`wants_gpu`: with ``method.device="auto"`` and a GPU present, batches of at least
  :data:`GPU_MIN_BATCH` options go to the GPU (one 2-D problem does not fill it).
* :func:`heston_price` / :func:`heston_price_batch`: the pricers with a ``device`` argument
  (``"cpu"``, ``"gpu"`` or ``"auto"``); :func:`hhw_price` (Heston-Hull-White, 3-D) and the
  generic solver :func:`solve` with :class:`PDE` / :class:`BC` (the CPU reference). With
  ``steps_per_year`` and ``richardson`` they take the accurate default discretisation of
  :mod:`.defaults` (what :class:`optiond.models.Method` asks for unless told otherwise: within
  6.2e-3 of the analytic European price over hard parameter sets, kappa 0.5-2, xi 0.5-1.5,
  rho -0.9-0, T 0.25-2, K/S 0.8-1.2 with S = 100 (6.3e-4 on the T = 10 sets), and within
  8.5e-5 of the published American references, see :mod:`.defaults`); without them, one grid
  and a fixed step count.

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
from . import defaults
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
                 v_max: float | None = None, return_grid: bool = False, steps_per_year: float = 0.0,
                 richardson: bool = False) -> dict:
    """Price one vanilla option under Heston by ADI finite differences: arguments, result and
    errors as :func:`optiond.kernels.adi.cpu.heston_price`, plus ``device``: ``"cpu"``,
    ``"gpu"`` (CuPy, :func:`optiond.kernels.adi.gpu.heston_price`: European/American on the
    default domain) or ``"auto"`` (the CPU: one 2-D problem does not fill a GPU; batches go to
    the GPU, see :func:`heston_price_batch`).

    ``steps_per_year`` > 0: ``time_steps`` becomes the least step count and the option gets
    :func:`.defaults.steps_for` steps; ``richardson``: the two-grid extrapolation of
    :mod:`.defaults` (prices and Greeks; ``grid`` is the fine grid; not with ``return_grid``).

    Raises:
        InvalidInputError: a bad argument (field, value and reason in the message).
    """
    if steps_per_year or richardson:
        heston_inputs(kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho, grid,
                      time_steps, rannacher, scheme, exercise_dates)
        N = int(defaults.steps_for(float(expiry), int(time_steps), float(steps_per_year)))
        one = lambda g, n: heston_price(kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi,  # noqa: E731
                                        rho, scheme=scheme, grid=g, time_steps=n, rannacher=rannacher, device=device,
                                        exercise_dates=exercise_dates, scheme_theta=scheme_theta, v_max_bc=v_max_bc,
                                        s_max=s_max, v_max=v_max, return_grid=return_grid and not richardson)
        fine = one(grid, N)
        if not richardson:
            return fine
        coarse = one(_coarse(grid), max(1, N // 2))
        for k in RESULT_KEYS:
            fine[k] = float(defaults.extrapolate(fine[k], coarse[k]))
        fine.update(richardson=True, elapsed_s=fine["elapsed_s"] + coarse["elapsed_s"])
        return fine
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
                       rannacher: int = 2, device: str = "cpu", threads: int | None = None,
                       steps_per_year: float = 0.0, richardson: bool = False) -> dict:
    """Price a batch of Heston options (columns: scalars or 1-D arrays of one length n).

    European and American rows only (Bermudan needs per-row dates: use :func:`heston_price`).
    On the CPU (:func:`optiond.kernels.adi.cpu.heston_price_batch`) the options are priced in
    parallel threads; ``device="gpu"`` (or ``"auto"`` with a GPU present and at least
    :data:`GPU_MIN_BATCH` options) sends the whole batch to
    :func:`optiond.kernels.adi.gpu.heston_price_batch`.

    ``steps_per_year`` > 0: ``time_steps`` is the least step count and each row gets
    :func:`.defaults.steps_for` steps (one batched solve per distinct count);
    ``richardson``: the two-grid extrapolation of :mod:`.defaults` (``grid`` the fine grid, a
    second batched solve on half of it). Both together are the accurate default (errors in
    :mod:`.defaults`).

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
    if steps_per_year or richardson:
        return _batch_levels(cols, n, code, g, N, R, dev, threads, float(steps_per_year), bool(richardson))
    if dev == "gpu" or (dev == "auto" and n >= GPU_MIN_BATCH):
        from . import gpu

        if dev == "gpu" or _gpu.available():
            return gpu.heston_price_batch(*(cols[f] for f in BATCH_FIELDS), scheme=code, grid=g, time_steps=N, rannacher=R)
    return cpu.heston_price_batch(*(cols[f] for f in BATCH_FIELDS), scheme=code, grid=g, time_steps=N, rannacher=R,
                                  threads=threads)


def _coarse(grid) -> tuple:
    try:
        return defaults.coarse_grid(grid)
    except ValueError as e:
        raise InvalidInputError("grid", None, grid, str(e)) from None


def _batch_levels(cols: dict, n: int, code: int, g: tuple, N: int, R: int, dev: str, threads, steps_per_year: float,
                  richardson: bool) -> dict:
    """:func:`heston_price_batch` with per-row step counts and/or the Richardson pair: rows
    grouped by step count, each group one batched solve per grid, on one device for all."""
    import time

    t0 = time.perf_counter()
    if dev == "auto":
        dev = "gpu" if n >= GPU_MIN_BATCH and _gpu.available() else "cpu"
    T = np.array([_float_or_nan(t) for t in cols["expiry"]])
    steps = defaults.steps_for(T, N, steps_per_year)
    levels = [(g, 1)] + ([(_coarse(g), 2)] if richardson else [])
    out = {k: np.full(n, np.nan) for k in RESULT_KEYS}
    status = np.array(["ok"] * n, dtype=object)
    error = np.array([""] * n, dtype=object)
    device_label = dev
    for Ng in np.unique(steps):
        rows = np.flatnonzero(steps == Ng)
        sub = [np.asarray(cols[f])[rows] for f in BATCH_FIELDS]
        res = [heston_price_batch(*sub, scheme=code, grid=grid, time_steps=max(1, int(Ng) // div), rannacher=R,
                                  device=dev, threads=threads) for grid, div in levels]
        device_label = str(res[0].get("device", dev))
        for k in RESULT_KEYS:
            out[k][rows] = res[0][k] if len(res) == 1 else defaults.extrapolate(res[0][k], res[1][k])
        for r in res:
            bad = np.asarray(r["status"]) != "ok"
            status[rows[bad]] = "error"
            error[rows[bad]] = np.where(error[rows[bad]] == "", np.asarray(r["error"])[bad], error[rows[bad]])
    for k in RESULT_KEYS:
        out[k][status != "ok"] = np.nan
    out.update(status=status, error=error, device=device_label, elapsed_s=time.perf_counter() - t0,
               time_steps=steps, richardson=richardson)
    return out


def _float_or_nan(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


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
                                 rannacher=method.rannacher, device=device, steps_per_year=method.steps_per_year,
                                 richardson=method.richardson)
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
    steps = out.get("time_steps", method.time_steps)
    res.diagnostics.update(adi_dv0=np.asarray(out["dv0"]).tolist(), adi_scheme=method.scheme, adi_grid=list(method.grid),
                           adi_time_steps=np.asarray(steps).tolist(), adi_richardson=bool(method.richardson))
    return res
