"""Semi-analytic European Heston prices on an NVIDIA GPU (CuPy RawModule over ``heston.cu``), FP64.

The GPU twin of :func:`optiond.kernels.heston.cpu.heston_batch`: the same chunk plan
(:func:`~optiond.kernels.heston.cpu.plan_chunks`), and per chunk the same recurrence (the
characteristic function, the truncation, the graded panels and the adaptive Gauss–Kronrod rule
with the same acceptance test, the same Greeks), one GPU thread per chunk, compiled with
``--fmad=false``. Prices agree with the CPU to rounding (the CUDA math library's ``exp``,
``log``, ``sin``/``cos`` against the host's differ in the last bits; an acceptance test that
lands on the other side changes a price by at most the tolerance): within 1e-12 at S = 100
(``tests/test_heston_analytic.py``, ``@pytest.mark.gpu``).

CuPy is imported lazily (:mod:`optiond.kernels.gpu`): this module imports on machines without
CUDA, and :func:`heston_batch_gpu` raises :class:`~optiond.kernels.gpu.GPUError` there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import gpu as _gpu
from . import cpu

_SOURCE = Path(__file__).with_name("heston.cu")
#: the kernel's most strikes per chunk (``HESTON_CHUNK`` in ``heston.cu``)
MAX_CHUNK = 32
BLOCK = 64
#: the compiled modules whose quadrature constants are set (by id)
_READY: set = set()


def _module():
    """The compiled module with the Gauss–Kronrod nodes and weights in its constant memory."""
    mod = _gpu.module(_SOURCE, ("--std=c++14", "--fmad=false"))
    if id(mod) not in _READY:
        cp = _gpu.cupy()
        for name, values in (("NODES", cpu.NODES), ("W_K", cpu.W_K), ("W_G", cpu.W_G)):
            ptr = mod.get_global(name)
            cp.ndarray((15,), cp.float64, ptr).set(np.ascontiguousarray(values, dtype=np.float64))
        _READY.add(id(mod))
    return mod


def heston_batch_gpu(kind, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho,
                     greeks: bool = True, tol: float = cpu.TOL, chunk: int = cpu.CHUNK) -> np.ndarray:
    """European Heston prices and Greeks of a batch on the GPU: arguments and result as
    :func:`optiond.kernels.heston.cpu.heston_batch` (``chunk`` at most :data:`MAX_CHUNK`).

    Raises:
        GPUError: no CuPy or device, or the compile failed.
        ValueError: ``chunk`` over :data:`MAX_CHUNK`.
    """
    if not 1 <= chunk <= MAX_CHUNK:
        raise ValueError(f"chunk must be 1 ... {MAX_CHUNK}, got {chunk}")
    cp = _gpu.cupy()
    cols = [np.ascontiguousarray(np.asarray(a, dtype=np.float64).reshape(-1)) for a in
            (spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho)]
    n = max(c.shape[0] for c in cols)
    cols = [np.ascontiguousarray(np.broadcast_to(c, (n,))) for c in cols]
    kd = np.ascontiguousarray(np.broadcast_to(np.asarray(kind, dtype=np.int8).reshape(-1), (n,)))
    order, starts = cpu.plan_chunks(cols[2], cols[5], cols[6], cols[7], cols[8], cols[9], chunk)
    nch = starts.shape[0] - 1
    if n == 0:
        return np.empty((7, 0))
    fn = _module().get_function("heston_chunks")
    d = [cp.asarray(kd)] + [cp.asarray(c) for c in cols]
    out = cp.empty(7 * n, dtype=cp.float64)
    evals = cp.zeros(nch, dtype=cp.int64)
    fn(((nch + BLOCK - 1) // BLOCK,), (BLOCK,),
       (*d, cp.asarray(order), cp.asarray(starts), np.int32(nch), np.int32(bool(greeks)), np.float64(tol),
        np.int64(n), out, evals))
    return out.get().reshape(7, n)
