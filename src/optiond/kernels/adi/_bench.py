"""Benchmark-only GPU kernels of the ADI method (``bench/adi.py``): one 3-D ADI step timed
with CUDA events. Not used by any pricer.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import gpu as _gpu
from . import heston as _heston
from . import hhw as _hhw
from . import solver as _solver
from .gpu import THREADS, _Dev3, _fn, _grid1, _step3_gpu
from .operators import assemble, boundary_values


@functools.lru_cache(maxsize=1)
def _bench_operator(n: int):
    s, v, r = _hhw.hhw_grids(100.0, 100.0, 1.0, 0.04, 1.5, 0.04, 0.3, 0.03, 0.1, 0.02, n, n, n)
    pde = _hhw.hhw_pde(s, v, r, 0, "european", 100.0, 1.0, 0.03, 0.0, 1.5, 0.04, 0.3, -0.7, 0.1, 0.02, 0.3, 0.1)
    pde.time_dependent = False  # time one step of the operator frozen at tau = 0
    return pde, assemble(pde, 0.0), s


def time_step3(n: int = 256, scheme: Any = "mcs", steps: int = 20, axis2: str = "tiled") -> dict:
    """Time one ADI step of a 3-D Heston-Hull-White operator on an ``n^3`` FP64 grid.

    The operator (at tau = 0) is assembled on the host, copied once and factorised; then
    ``steps`` full steps of ``scheme`` are timed with CUDA events (after one warm-up step).

    Returns:
        dict with ``ms_per_step``, ``nodes``, ``scheme``, ``axis2`` and the per-phase
        breakdown ``ms_explicit``, ``ms_sweep`` (one sweep along each axis).
    """
    cp = _gpu.cupy()

    code = _solver.scheme_code(scheme)
    th = _solver.DEFAULT_THETA[code]
    pde, op, s = _bench_operator(int(n))
    shape = pde.shape
    N = int(np.prod(shape))
    dev = _Dev3(op, shape)
    dt = 1.0 / 100
    dev.factor(th * dt)
    pay = _heston.payoff(s, n, 0, 100.0)
    U = cp.asarray(np.ascontiguousarray(np.repeat(pay[:, :, None], n, axis=2)).reshape(-1))
    phi = cp.zeros(N)
    lam = cp.zeros(N)
    work = (cp.empty(N), cp.empty(3 * N), cp.empty(N), cp.empty(N), cp.empty(N), cp.empty(N), cp.empty(3 * N))
    d0, s0 = boundary_values(pde, op, 0.0)
    g, sv = cp.asarray(d0), cp.asarray(s0)
    _step3_gpu(dev, dev, U, lam, phi, work, dt, th, code, False, False, g, sv, sv, axis2)
    cp.cuda.Stream.null.synchronize()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record()
    for _ in range(steps):
        _step3_gpu(dev, dev, U, lam, phi, work, dt, th, code, False, False, g, sv, sv, axis2)
    e1.record()
    e1.synchronize()
    ms = cp.cuda.get_elapsed_time(e0, e1) / steps
    # phases
    n1, n2, n3 = shape
    i32 = np.int32
    A0, A, Fa, Y0, Y, Z, Bv = work
    e0.record()
    for _ in range(steps):
        _fn("g3_explicit")(_grid1(N), (THREADS,), (i32(n1), i32(n2), i32(n3), dt, th * dt, i32(0), U, lam, dev.W, dev.M,
                                                   *dev.G, A0, A, Fa, Y0, Y))
    e1.record()
    e1.synchronize()
    ms_exp = cp.cuda.get_elapsed_time(e0, e1) / steps
    sweep_ms = []
    for d in range(3):
        e0.record()
        for _ in range(steps):
            if d < 2:
                nl = n2 * n3 if d == 0 else n1 * n3
                _fn("g3_solve01")(_grid1(nl), (THREADS,), (i32(n1), i32(n2), i32(n3), i32(d), th * dt, Y, A[d * N:(d + 1) * N], *dev.fac[d]))
            elif axis2 == "tiled":
                _fn("g3_solve2_tiled")(((n1 * n2 + 127) // 128,), (128,), (i32(n1), i32(n2), i32(n3), th * dt, Y, A[2 * N:], *dev.fac[2]))
            else:
                _fn("g3_solve2_plain")(_grid1(n1 * n2), (THREADS,), (i32(n1), i32(n2), i32(n3), th * dt, Y, A[2 * N:], *dev.fac[2]))
        e1.record()
        e1.synchronize()
        sweep_ms.append(cp.cuda.get_elapsed_time(e0, e1) / steps)
    ok = bool(cp.isfinite(U).all())
    return {"ms_per_step": ms, "nodes": N, "scheme": _solver.SCHEME_NAMES[code], "axis2": axis2, "ms_explicit": ms_exp,
            "ms_sweep": sweep_ms, "finite": ok}
