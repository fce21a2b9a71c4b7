"""The semi-analytic European Heston engine (``method="heston"``): its front door.

The engine calls :func:`price` and :func:`wants_gpu` (the kernel front-door contract of
:mod:`optiond.kernels.binomial`: a :class:`~optiond.models.Result` back, a GPU failure raised as
:class:`optiond.kernels.gpu.GPUError` for the engine to fall back on the CPU).

Where the method begins and ends (this folder):

* ``__init__.py``: the front door (which rows it prices, the chunk plan, CPU or GPU);
* ``cpu.py``: the gold reference: the characteristic function in the "little trap" form
  (Albrecher et al. 2007), Lewis's (2000) single-integral price, the Greeks as integrals of the
  same integrand, the adaptive Gauss–Kronrod rule and its error bound (numba, ``prange`` over
  chunks of strikes that share one expiry and parameter set);
* ``gpu.py`` / ``heston.cu``: the same recurrence on a CUDA GPU in FP64 (one thread per chunk,
  the CPU's chunk plan), for calibration batches.

Rows and where they go: European rows with the Heston columns (``v0, kappa,
long_run_variance, xi, correlation``) are priced here; American rows are marked
``status="error"`` (early exercise needs the PDE: ``method="adi"``), and so is every row of a
batch without the Heston columns.

Accuracy: the price integral to :data:`cpu.TOL` absolute, so a price is within
``2e-13 e^{-rT} sqrt(F K) / pi`` of the exact Lewis integral (module docstring of
:mod:`.cpu`); measured 3e-14 against Lewis's published reference prices and 3e-12 against
QuantLib's adaptive Gauss–Lobatto ``AnalyticHestonEngine`` on the test grid (T from one week to
10 years, xi to 1.5, rho to -0.9, strikes 0.3 to 2.5 times the spot).

Greeks (``method.greeks``): delta, gamma, theta (per year of calendar time), rho (per 1.00 of
rate), and as ``vega`` the derivative to the instantaneous volatility sqrt(v0), per 1.00
(``2 sqrt(v0) dV/dv0``, comparable with a Black–Scholes vega at sigma = sqrt(v0));
``diagnostics["heston_dv0"]`` holds dV/dv0 itself (as ADI's ``adi_dv0``).
"""

from __future__ import annotations

import numpy as np

from ...models import AMERICAN, Batch, Method, Result
from .. import gpu as _gpu
from . import cpu
from .cpu import CHUNK, TOL, heston_batch, plan_chunks  # noqa: F401 (the method's public names)

#: the method has a GPU path (:mod:`.gpu`)
GPU = True
#: with ``device="auto"`` and a GPU present, batches of at least this many options go to the GPU
GPU_MIN_BATCH = 4096

#: the reason on American rows
AMERICAN_ROWS = "method=heston prices European exercise only; American rows need method=adi"
#: the reason on rows without the Heston columns
NO_HESTON = "method=heston needs the Heston columns v0, kappa, theta, xi, rho"


def wants_gpu(batch: Batch, method: Method) -> bool:
    """With ``method.device="auto"`` and a GPU present: a batch of at least
    :data:`GPU_MIN_BATCH` options (a smaller one is priced faster on the CPU than copied)."""
    return len(batch) >= GPU_MIN_BATCH


def _columns(b: Batch) -> tuple:
    return (b.kind, b.spot, b.strike, b.expiry, b.rate, b.dividend_yield, b.v0, b.kappa, b.long_run_variance, b.xi,
            b.correlation)


def price(batch: Batch, method: Method, device: str = "cpu") -> Result:
    """European Heston prices (and Greeks with ``method.greeks``) of a validated batch on
    ``device`` (``"cpu"`` or ``"gpu"``), see the module docstring.

    Returns:
        :class:`~optiond.models.Result`; ``diagnostics``: ``heston_dv0`` (dV/dv0 per row, with
        Greeks) and ``heston_tol`` (the price integral's absolute tolerance).

    Raises:
        GPUError: ``device="gpu"`` and the GPU failed (no CuPy, no device, a CUDA error).
    """
    n = len(batch)
    res = Result.empty(n, device="cpu")
    if batch.v0 is None:
        res.mark_error(np.arange(n), NO_HESTON)
        return res
    amer = np.flatnonzero(batch.style == AMERICAN)
    if amer.size:
        res.mark_error(amer, AMERICAN_ROWS)
    rows = np.flatnonzero(batch.style != AMERICAN)
    if rows.size == 0:
        return res
    sub = batch if rows.size == n else batch.take(rows)
    if device == "gpu":
        from . import gpu

        try:
            out = gpu.heston_batch_gpu(*_columns(sub), greeks=method.greeks)
        except _gpu.GPUError:
            raise
        except Exception as e:  # noqa: BLE001 (CUDA error, out of memory, compile error: the engine uses the CPU)
            raise _gpu.GPUError(f"{type(e).__name__}: {e}") from e
        res.device = _gpu.device_label()
    else:
        out = heston_batch(*_columns(sub), greeks=method.greeks)
    for k, name in enumerate(("price", "delta", "gamma", "theta", "vega", "rho")):
        getattr(res, name)[rows] = out[k]
    # the dividend rho: the yield enters only through the forward S e^{(r-q)T}, so dV/dq = -T S delta
    res.dividend_rho[rows] = -sub.expiry * sub.spot * out[1]
    res.diagnostics["heston_tol"] = TOL
    if method.greeks:
        dv0 = np.full(n, np.nan)
        dv0[rows] = out[6]
        res.diagnostics["heston_dv0"] = dv0.tolist()
    return res
