"""The spectral American engine on an NVIDIA GPU (CuPy RawModule over ``spectral.cu``), FP64.

The GPU twin of :func:`optiond.kernels.spectral.cpu.alo_batch` and
:func:`~optiond.kernels.spectral.cpu.alo_implied_vol`: the same plan tables
(:func:`~optiond.kernels.spectral.cpu.plan`, copied to the device once per setting), and per
option the same recurrences (the QD+ start node after node, the Jacobi–Newton first sweep and
the plain sweeps of the smooth-pasting equation, the premium integral, delta, gamma and theta
from it, vega and rho by the same central bumps of the whole solve), the same implied-volatility
search. One warp per solve (``spectral.cu`` describes the layout): a batch with Greeks is one
launch of ``5 n`` warps (the option and its four bumped solves; seven with the dividend rho),
the host forms the differences as the CPU does. Compiled with ``--fmad=false``; exp, log and the
normal distribution function are the CUDA math library's (the CPU's are polynomial forms of a
few ulps, :func:`~optiond.kernels.spectral.cpu.vexp`): prices agree with the CPU to rounding
(``tests/test_spectral_gpu.py`` asks 1e-12 relative).

Limits: the plan's fixed-point rule has at most 32 points (``l``; the named settings have 8, 16
and 32) and at most :data:`NMAX` nodes; other settings raise :class:`~optiond.kernels.gpu.GPUError`
(the engine then prices on the CPU).

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
#: warps per block (one solve each)
WARPS = 4
#: resident blocks per multiprocessor the kernels' register budget is cut for (``__launch_bounds__``)
MIN_BLOCKS = 4
#: most Chebyshev nodes a solve holds (the warp's shared arrays)
NMAX = 64
#: kernel instances (rows of abscissa slots a lane holds, option constants kept in registers)
INSTANCES = ((4, True), (12, True), (64, False))
#: solves per option: the option, vega's two, rho's two (and the dividend rho's two)
SOLVES, SOLVES_DIVIDEND_RHO = 5, 7

_TABLES: dict = {}


def _options(min_blocks: int) -> tuple:
    defs = {"WARPS": WARPS, "MIN_BLOCKS": int(min_blocks), "NMAX": NMAX, "QDPLUS_TOL": repr(float(cpu.QDPLUS_TOL)),
            "INV_SQRT_2PI": repr(float(cpu._INV_SQRT_2PI)), "IV_OK": rootfind.IV_OK,
            "IV_BELOW": rootfind.IV_BELOW, "IV_ABOVE": rootfind.IV_ABOVE,
            "IV_NOT_CONVERGED": rootfind.IV_NOT_CONVERGED, "IV_INVALID": rootfind.IV_INVALID}
    return ("--std=c++17", "--fmad=false") + tuple(f"-D{k}={v}" for k, v in defs.items())


def rows(tables: tuple) -> int:
    """Rows of 32 abscissa slots a solve walks per sweep: a node holds the power of two at or
    above the rule's size ``l`` of lanes (``spectral.cu``)."""
    n, l = tables[0].shape[0], tables[1].shape[0]
    lp = 1 << max(0, (l - 1).bit_length())
    return -(-n // (32 // lp))


def instance(tables: tuple) -> tuple[int, bool]:
    """The kernel instance ``(RMAX, STORE)`` of a plan's tables.

    Raises:
        GPUError: a setting outside the kernels' limits (module docstring).
    """
    n, l = tables[0].shape[0], tables[1].shape[0]
    if l > 32 or n > NMAX:
        raise _gpu.GPUError(f"the GPU kernels take at most 32 fixed-point abscissae and {NMAX} nodes (got l = {l}, n = {n})")
    r = rows(tables)
    return next(inst for inst in INSTANCES if inst[0] >= r)


def _kernels(inst: tuple[int, bool], min_blocks: int | None = None):
    """``(alo_batch, alo_iv)`` of one instance (the module compiled once per process by
    :func:`optiond.kernels.gpu.module`)."""
    r, store = inst
    names = [f"alo_batch<{r}, {str(store).lower()}>", f"alo_iv<{r}, {str(store).lower()}>"]
    mod = _gpu.module(_SOURCE, _options(MIN_BLOCKS if min_blocks is None else min_blocks), names)
    return mod.get_function(names[0]), mod.get_function(names[1])


def _device_tables(pl: cpu.Plan) -> tuple:
    """The plan's tables on the current device (copied once per setting and device)."""
    cp = _gpu.cupy()
    key = (pl.accuracy, int(cp.cuda.runtime.getDevice()))
    got = _TABLES.get(key)
    if got is None:
        got = tuple(cp.asarray(t) for t in pl.tables)
        _TABLES[key] = got
    return got


def _launch(pl: cpu.Plan, which: int, warps: int, make_args, timing: dict | None, min_blocks: int | None) -> list:
    """One launch of kernel ``which`` (0 batch, 1 implied vol) of the plan's instance over
    ``warps`` warps: ``make_args(cupy, plan_args) -> (kernel arguments, device outputs)``;
    returns the outputs on the host. Any failure is raised as :class:`~optiond.kernels.gpu.GPUError`."""
    try:
        fn = _kernels(instance(pl.tables), min_blocks)[which]
        cp = _gpu.cupy()
        ft, fa, pa = pl.tables[0], pl.tables[1], pl.tables[5]
        dev = (*_device_tables(pl), np.int32(ft.shape[0]), np.int32(fa.shape[0]), np.int32(pl.accuracy.m),
               np.int32(pa.shape[0]))
        args, outs = make_args(cp, dev)
        stream = cp.cuda.get_current_stream()
        timer = DeviceTimer(timing, stream)
        timer.start()
        fn(((warps + WARPS - 1) // WARPS,), (32 * WARPS,), args, stream=stream)
        timer.stop()
        got = [o.get() for o in outs]
        timer.finish()
        return got
    except _gpu.GPUError:
        raise
    except Exception as e:  # noqa: BLE001 (CUDA error, out of memory: the caller prices on the CPU)
        raise _gpu.GPUError(f"{type(e).__name__}: {e}") from e


def alo_batch_gpu(kind, spot, strike, expiry, rate, dividend_yield, volatility, accuracy="accurate", greeks=True,
                  dividend_rho=False, timing: dict | None = None, min_blocks: int | None = None) -> np.ndarray:
    """ALO prices (and Greeks) on the GPU: arguments and rows as
    :func:`optiond.kernels.spectral.cpu.alo_batch` (single-boundary rows only), one launch.

    Args:
        dividend_rho: also a seventh row, the dividend rho (per 1.00 of yield), by the central
            bump of q of size ``cpu.RHO_BUMP`` (one-sided where a call's q - h <= 0).
        timing: a dict that receives ``device_s``, the launch's CUDA-event time
            (:class:`optiond.kernels.binomial.timer.DeviceTimer`; ``timing["gate"]`` as there).
        min_blocks: the instances' register budget (default :data:`MIN_BLOCKS`).

    Returns:
        float64 array (6, n), or (7, n) with ``dividend_rho``: price, delta, gamma, theta, vega,
        rho (and dividend rho); the Greeks NaN without ``greeks``.

    Raises:
        GPUError: no CuPy or device, a compile or CUDA failure, or a setting outside the limits.
        KeyError: an unknown accuracy name.
    """
    pl = cpu.plan(accuracy)
    shape = np.shape(spot)
    cols = [np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype=np.float64), shape)).reshape(-1)
            for a in (spot, strike, expiry, rate, dividend_yield, volatility)]
    kd = np.ascontiguousarray(np.broadcast_to(np.asarray(kind, dtype=np.int8), shape)).reshape(-1)
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

    (v,) = _launch(pl, 0, n * ns, args, timing, min_blocks)
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
                        min_blocks: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Implied volatilities on the GPU: arguments and result as
    :func:`optiond.kernels.spectral.cpu.alo_implied_vol` (the same search, one warp per
    option, one launch); ``timing`` as :func:`alo_batch_gpu`.

    Raises:
        GPUError: no CuPy or device, a compile or CUDA failure, or a setting outside the limits.
        KeyError: an unknown accuracy name.
    """
    pl = cpu.plan(accuracy)
    shape = np.shape(spot)
    f = [np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype=np.float64), shape)).reshape(-1)
         for a in (price, spot, strike, expiry, rate, dividend_yield, lo, hi)]
    kd = np.ascontiguousarray(np.broadcast_to(np.asarray(kind, dtype=np.int8), shape)).reshape(-1)
    n = kd.shape[0]
    if n == 0:
        return np.empty(0), np.empty(0, dtype=np.int8)
    def args(cp, dev):
        d = [cp.asarray(c) for c in f]
        vol, status = cp.empty(n, dtype=cp.float64), cp.empty(n, dtype=cp.int8)
        return (d[0], cp.asarray(kd), *d[1:], np.float64(xtol), np.int64(n), *dev, vol, status), (vol, status)

    v, s = _launch(pl, 1, n, args, timing, min_blocks)
    return v, s
