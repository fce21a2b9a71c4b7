"""The spectral American engine on an NVIDIA GPU (CuPy RawModule over ``spectral.cu``), FP64.

The GPU twin of :func:`optiond.kernels.spectral.cpu.alo_batch` and
:func:`~optiond.kernels.spectral.cpu.alo_implied_vol`: the same plan tables
(:func:`~optiond.kernels.spectral.cpu.plan`, copied to the device once per setting), and per
option the same recurrences (the QD+ start at every node from its own seed, the Jacobi–Newton
first sweep and the plain sweeps of the smooth-pasting equation with the same damping, the
premium integral, delta, gamma and theta from it, vega and rho by the same central bumps of the
whole solve), the same implied-volatility search. One thread per solve for launches that fill
the device, one warp per solve for smaller ones (``spectral.cu`` describes both layouts;
:data:`THREAD_MIN_SOLVES`): a batch with Greeks is one launch of ``5 n`` solves (the option and
its four bumped solves; seven with the dividend rho), the host forms the differences as the CPU
does. Compiled with ``--fmad=false``; Phi is the CPU's rational form, exp, log and sqrt the
CUDA math library's (the CPU's are polynomial forms of a few ulps,
:func:`~optiond.kernels.spectral.vmath.vexp`): prices agree with the CPU to rounding
(``tests/test_spectral_gpu.py`` asks 1e-12 relative).

Limits: at most :data:`NMAX` Chebyshev nodes (other settings raise
:class:`~optiond.kernels.gpu.GPUError`; the engine then prices on the CPU).

CuPy is imported lazily (:mod:`optiond.kernels.gpu`): this module imports without CUDA, and its
functions raise :class:`~optiond.kernels.gpu.GPUError` there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import gpu as _gpu
from .. import rootfind
from ..binomial.timer import DeviceTimer
from . import cpu

_SOURCE = Path(__file__).with_name("spectral.cu")
#: threads per block (a solve each in the thread layout; four warps, a solve each, in the warp layout)
TPB = 128
#: launches of at least this many solves use the thread layout, smaller ones the warp layout
#: (``spectral.cu``), by accuracy setting (others: the fast setting's); measured on an H200
#: (``bench/american.py --only gpu``, ``layouts_device_ms``): the high-precision setting's 48
#: nodes take more shared memory and registers a thread than the thread layout can hide, so it
#: stays on the warp layout
THREAD_MIN_SOLVES = {"fast": 20_000, "accurate": 75_000, "high-precision": float("inf")}
#: resident blocks per multiprocessor the thread layout's register budget is cut for
#: (``__launch_bounds__``), by accuracy setting (other settings, and the warp layout: 4); measured
#: on an H200 (``bench/american.py --only gpu``)
MIN_BLOCKS = {"fast": 8, "accurate": 8, "high-precision": 4}
#: most Chebyshev nodes (a block holds an (n, TPB) array of doubles in shared memory: 96 KiB at 96)
NMAX = 96
#: solves per option: the option, vega's two, rho's two (and the dividend rho's two)
SOLVES, SOLVES_DIVIDEND_RHO = 5, 7

_TABLES: dict = {}


def _options(min_blocks: int) -> tuple:
    defs = {"TPB": TPB, "MIN_BLOCKS": int(min_blocks), "NMAX": NMAX, "QDPLUS_TOL": repr(float(cpu.QDPLUS_TOL)),
            "INV_SQRT_2PI": repr(float(cpu._INV_SQRT_2PI)), "IV_OK": rootfind.IV_OK,
            "IV_BELOW": rootfind.IV_BELOW, "IV_ABOVE": rootfind.IV_ABOVE,
            "IV_NOT_CONVERGED": rootfind.IV_NOT_CONVERGED, "IV_INVALID": rootfind.IV_INVALID}
    return ("--std=c++17", "--fmad=false") + tuple(f"-D{k}={v}" for k, v in defs.items())


def shared_bytes(tables: tuple, warp: bool = False) -> int:
    """A block's shared memory for a plan's tables: the boundary, (n, TPB) doubles in the
    thread layout; four n doubles a warp in the warp layout.

    Raises:
        GPUError: a setting with more than :data:`NMAX` nodes.
    """
    n = tables[0].shape[0]
    if n > NMAX:
        raise _gpu.GPUError(f"the GPU kernels take at most {NMAX} nodes (got n = {n})")
    return (TPB // 32) * 4 * n * 8 if warp else n * TPB * 8


def _kernels(min_blocks: int, warp: bool):
    """``(alo_batch, alo_iv)`` of one layout (the module compiled once per process and register
    budget by :func:`optiond.kernels.gpu.module`)."""
    names = [f"alo_batch<{str(w).lower()}>" for w in (False, True)] + [f"alo_iv<{str(w).lower()}>" for w in (False, True)]
    mod = _gpu.module(_SOURCE, _options(min_blocks), names)
    return mod.get_function(names[int(warp)]), mod.get_function(names[2 + int(warp)])


def _device_tables(pl: cpu.Plan) -> tuple:
    """The plan's tables on the current device (copied once per setting and device), then
    ``1 / fa`` (the kernels' ``ifa``)."""
    cp = _gpu.cupy()
    key = (pl.accuracy, int(cp.cuda.runtime.getDevice()))
    got = _TABLES.get(key)
    if got is None:
        got = tuple(cp.asarray(t) for t in pl.tables) + (cp.asarray(1.0 / pl.tables[1]),)
        _TABLES[key] = got
    return got


def _launch(pl: cpu.Plan, which: int, solves: int, make_args, timing: dict | None, min_blocks: int | None,
            layout: str | None = None) -> list:
    """One launch of kernel ``which`` (0 batch, 1 implied vol) over ``solves`` solvers, in
    ``layout`` (``"thread"`` or ``"warp"``; default by the setting's :data:`THREAD_MIN_SOLVES`):
    ``make_args(cupy, plan_args) -> (kernel arguments, device outputs)``; returns the outputs on
    the host. Any failure is raised as :class:`~optiond.kernels.gpu.GPUError`."""
    try:
        if layout is None:
            layout = "warp" if solves < THREAD_MIN_SOLVES.get(pl.accuracy.name, THREAD_MIN_SOLVES["fast"]) else "thread"
        warp = layout == "warp"
        smem = shared_bytes(pl.tables, warp)
        if min_blocks is None:  # the warp layout's launches are small: the register budget of 4 blocks
            min_blocks = 4 if warp else MIN_BLOCKS.get(pl.accuracy.name, 4)
        fn = _kernels(min_blocks, warp)[which]
        threads = 32 * solves if warp else solves
        if smem > 48 * 1024:  # past the default: opt in (per kernel)
            fn.max_dynamic_shared_size_bytes = smem
        cp = _gpu.cupy()
        ft, fa, pa = pl.tables[0], pl.tables[1], pl.tables[5]
        dev = (*_device_tables(pl), np.int32(ft.shape[0]), np.int32(fa.shape[0]), np.int32(pl.accuracy.m),
               np.int32(pa.shape[0]))
        args, outs = make_args(cp, dev)
        stream = cp.cuda.get_current_stream()
        timer = DeviceTimer(timing, stream)
        timer.start()
        fn(((threads + TPB - 1) // TPB,), (TPB,), args, stream=stream, shared_mem=smem)
        timer.stop()
        got = [o.get() for o in outs]
        timer.finish()
        return got
    except _gpu.GPUError:
        raise
    except Exception as e:  # noqa: BLE001 (CUDA error, out of memory: the caller prices on the CPU)
        raise _gpu.GPUError(f"{type(e).__name__}: {e}") from e


def alo_batch_gpu(kind, spot, strike, expiry, rate, dividend_yield, volatility, accuracy="accurate", greeks=True,
                  dividend_rho=False, timing: dict | None = None, min_blocks: int | None = None,
                  layout: str | None = None) -> np.ndarray:
    """ALO prices (and Greeks) on the GPU: arguments and rows as
    :func:`optiond.kernels.spectral.cpu.alo_batch` (single-boundary rows only), one launch.

    Args:
        dividend_rho: also a seventh row, the dividend rho (per 1.00 of yield), by the central
            bump of q of size ``cpu.RHO_BUMP`` (one-sided where a call's q - h <= 0).
        timing: a dict that receives ``device_s``, the launch's CUDA-event time
            (:class:`optiond.kernels.binomial.timer.DeviceTimer`; ``timing["gate"]`` as there).
        min_blocks: the kernels' register budget (default :data:`MIN_BLOCKS` of the setting).
        layout: ``"thread"`` (a solve a thread) or ``"warp"`` (a solve a warp); default by the
            launch's solve count (:data:`THREAD_MIN_SOLVES`).

    Returns:
        float64 array (6, n), or (7, n) with ``dividend_rho``: price, delta, gamma, theta, vega,
        rho (and dividend rho); the Greeks NaN without ``greeks``.

    Raises:
        GPUError: no CuPy or device, a compile or CUDA failure, or a setting outside the limits.
        KeyError: an unknown accuracy name.
    """
    pl = cpu.plan(accuracy)
    kd, cols = cpu.flat_columns(np.shape(spot), kind, spot, strike, expiry, rate, dividend_yield, volatility)
    n = kd.shape[0]
    rows_out = 7 if dividend_rho else 6
    out = np.full((rows_out, n), np.nan)
    if n == 0:
        return out
    ns = 1 if not greeks else (SOLVES_DIVIDEND_RHO if dividend_rho else SOLVES)
    def args(cp, dev):
        res = cp.empty((ns + 3, n), dtype=cp.float64)
        return (cp.asarray(kd), *(cp.asarray(c) for c in cols), np.int64(n), np.int32(ns), np.int32(bool(greeks)),
                np.float64(cpu.VEGA_BUMP), np.float64(cpu.RHO_BUMP), *dev, res), (res,)

    (v,) = _launch(pl, 0, n * ns, args, timing, min_blocks, layout)
    out[0] = v[0]
    if not greeks:
        return out
    out[1:4] = v[ns:ns + 3]
    S, r, q, sig = cols[0], cols[3], cols[4], cols[5]
    call = kd == 1
    hv = np.minimum(cpu.VEGA_BUMP, 0.5 * sig)
    out[4] = (v[1] - v[2]) / (2.0 * hv)
    out[5] = (v[3] - v[4]) / np.where(~call & (r - cpu.RHO_BUMP <= 0.0), cpu.RHO_BUMP, 2.0 * cpu.RHO_BUMP)
    if dividend_rho:
        out[6] = (v[5] - v[6]) / np.where(call & (q - cpu.RHO_BUMP <= 0.0), cpu.RHO_BUMP, 2.0 * cpu.RHO_BUMP)
    return out


def alo_implied_vol_gpu(price, kind, spot, strike, expiry, rate, dividend_yield, accuracy="accurate",
                        lo=cpu.MIN_IV, hi=cpu.MAX_IV, xtol=1e-12, timing: dict | None = None,
                        min_blocks: int | None = None, layout: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Implied volatilities on the GPU: arguments and result as
    :func:`optiond.kernels.spectral.cpu.alo_implied_vol` (the same search, one solver per
    option, one launch); ``timing``, ``min_blocks`` and ``layout`` as :func:`alo_batch_gpu`.

    Raises:
        GPUError: no CuPy or device, a compile or CUDA failure, or a setting outside the limits.
        KeyError: an unknown accuracy name.
    """
    pl = cpu.plan(accuracy)
    kd, f = cpu.flat_columns(np.shape(spot), kind, price, spot, strike, expiry, rate, dividend_yield, lo, hi)
    n = kd.shape[0]
    if n == 0:
        return np.empty(0), np.empty(0, dtype=np.int8)
    def args(cp, dev):
        d = [cp.asarray(c) for c in f]
        vol, status = cp.empty(n, dtype=cp.float64), cp.empty(n, dtype=cp.int8)
        return (d[0], cp.asarray(kd), *d[1:], np.float64(xtol), np.int64(n), *dev, vol, status), (vol, status)

    v, s = _launch(pl, 1, n, args, timing, min_blocks, layout)
    return v, s
