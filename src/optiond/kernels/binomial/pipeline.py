"""The single-option CRR pipeline on NVIDIA GPUs (large N), run side: the phase launches, one
tree after the other over the whole GPU, and the CPU tail. Its plan (the phases, the pruned
windows, the calibrated boundaries) is :mod:`optiond.kernels.binomial.plan`; the kernels and the
trees' parameters are :mod:`optiond.kernels.binomial.gpu`'s (its docstring describes the
pipeline's phases); the CUDA C++ is ``binomial.cu``.

Errors: CUDA failures raise :class:`optiond.kernels.gpu.GPUError` (the engine falls back to the
CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numba as nb
import numpy as np

from .. import gpu as gpus
from .gpu import (SMEM_MAX, _assemble, _check_p, _check_precision, _columns, _finish_cpu, _gpu_call, _state,
                  _tree_table, kernel, pd_fma_mode, resident_blocks)
from .plan import (PRUNE_WARP_OUTPUTS, PipelinePlan, cluster_max_levels, pipeline_phases, pipeline_plan, pruned_width,
                   reg_max_levels, window_table)
from .timer import DeviceTimer
from .variants import NARROW_LEVELS, PIPE_BLOCK, PIPE_GRID_BIG, PIPE_GRID_MID, PIPE_GRID_SMALL, Variant
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

#: initial window state of one tree (binomial.cu, tiles_tree: L, H, then three (min, max) slots)
_WIN_INIT = (0, 1 << 30, 1 << 30, -1, 1 << 30, -1, 1 << 30, -1)
#: CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cluster sizes above 8 on sm_90)
_FUNC_ATTR_NON_PORTABLE_CLUSTER = 14


def _phase_prepare(v: Variant, coop: bool, d_par, N: int, am: bool, t_hi: int, t_lo: int, src: int, out_cap: int,
                   Vb, Xb, stride: int, d_price, d_lv, window=None) -> tuple[Callable[[], None], int]:
    """One pipeline phase (levels t_hi -> t_lo) made ready to launch: ``(launch, buffer index of
    level t_lo)``; ``launch()`` only enqueues the kernel (the host work is done here, so a
    caller can prepare every phase before the GPU starts). ``window``: ``(d_win (8,) int32,
    kinds, Ls)`` for a pruned grid variant's windows
    (:func:`~optiond.kernels.binomial.plan.window_sides`; the phases of one tree share ``d_win``),
    or None for every node."""
    k = kernel(v.name, coop=coop)
    if window is None or not v.prune:
        window = (_no_window(), 0, 0.0)
    wargs = (window[0], np.float64(window[2]), np.int32(window[1]))
    if v.kernel == "crr_pipe_cluster":  # the whole tree, one cluster of v.cluster blocks
        if t_hi != N or t_lo != 0 or N > cluster_max_levels(v):
            raise ValueError(f"{v.name} runs whole trees of N <= {cluster_max_levels(v)}, not {t_hi} -> {t_lo} of {N}")
        nw = N // (v.cw - v.K) + 1
        wpb = -(-nw // v.cluster)
        smem = 4 * wpb * v.K * (8 if v.dtype == "double" else 4)
        if v.cluster > 8 and not _state.get(("nonportable", v.name)):
            cp = gpus.cupy()
            cp.cuda.driver.funcSetAttribute(k.kernel.ptr, _FUNC_ATTR_NON_PORTABLE_CLUSTER, 1)
            _state[("nonportable", v.name)] = True
        args = (d_par, np.int32(N), np.int32(am), np.int32(v.K), d_price, d_lv)
        return (lambda: k((v.cluster,), (32 * wpb,), args, shared_mem=smem)), src
    if v.kernel == "crr_pipe_reg":  # the whole tree, one block of N / (cw - K) + 1 warps
        if t_hi != N or t_lo != 0 or N > reg_max_levels(v):
            raise ValueError(f"{v.name} runs whole trees of N <= {reg_max_levels(v)}, not {t_hi} -> {t_lo} of {N}")
        nw = N // (v.cw - v.K) + 1
        smem = 4 * (nw + 1) * v.K * (8 if v.dtype == "double" else 4)
        args = (d_par, np.int32(N), np.int32(am), np.int32(v.K), d_price, d_lv)
        return (lambda: k((1,), (32 * nw,), args, shared_mem=smem)), src
    K = v.K_narrow if coop and v.K_narrow and t_hi <= NARROW_LEVELS else v.K
    vw = v.cw - K
    chunks = min(t_hi, out_cap + K) // vw + 1
    args = (d_par, np.int32(N), np.int32(am), np.int32(t_hi), np.int32(t_lo), np.int32(K), np.int32(src),
            np.int32(out_cap), Vb, Xb, np.uint64(stride), d_price, d_lv)
    nslabs = -(-(t_hi - t_lo) // K)
    dst = src ^ (nslabs & 1)
    if coop:
        wpb = v.threads // 32
        if window[1]:  # warps for the expected window, not the whole level
            chunks = min(chunks, int(pruned_width(N, t_hi, t_lo) + 2 * K) // min(PRUNE_WARP_OUTPUTS, vw) + 1)
        grid = max(1, min((chunks + wpb - 1) // wpb, resident_blocks(k, v.threads)))
        units = 0
        if v.spread > 0:
            units = v.spread * 4 * gpus.device_info()["sms"]
        elif v.spread < 0:
            units = grid * wpb

        coop_args = args[:8] + (np.int32(units),) + args[8:] + wargs

        def launch(grid=grid, args=coop_args):
            while True:
                try:
                    k((grid,), (v.threads,), args)
                    return
                except Exception as e:
                    if grid == 1 or "COOPERATIVE" not in str(e).upper():
                        raise
                    grid //= 2
                    if v.spread < 0:
                        args = args[:8] + (np.int32(grid * wpb),) + args[9:]

        return launch, dst
    # the tree in shared memory when it fits (4 arrays: V and X, double-buffered)
    itemsize = 8 if v.dtype == "double" else 4
    sstride = ((t_hi + 2 + 31) // 32) * 32
    smem = 4 * sstride * itemsize
    if smem > SMEM_MAX:
        sstride, smem = 0, 0
    elif smem > 48 * 1024 and _state.get(("smem", v.name), 0) < smem:
        k.max_dynamic_shared_size_bytes = SMEM_MAX
        _state[("smem", v.name)] = SMEM_MAX
    threads = min(v.threads, 32 * chunks)
    units = threads // 32 if v.spread != 0 else 0
    args = args[:8] + (np.int32(units),) + args[8:] + (np.int32(sstride),)
    return (lambda: k((1,), (threads,), args, shared_mem=smem)), dst

def _no_window():
    """A device int32[8] for phases without a pruned window (kinds = 0: never read)."""
    if "no_window" not in _state:
        _state["no_window"] = gpus.cupy().zeros(8, dtype=np.int32)
    return _state["no_window"]

def crr_pipeline_gpu(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps, greeks=True,
                     precision="fp64", plan: PipelinePlan | None = None, timing: dict | None = None):
    """Price a few options, each with large N, one tree at a time over the whole GPU (the
    hybrid pipeline: throughput phase, latency phase, optional CPU tail).

    Arguments, returns and errors as :func:`optiond.kernels.binomial.gpu.crr_batch_gpu`; ``plan``
    sets the regime changes (default: the calibrated ones,
    :func:`optiond.kernels.binomial.plan.pipeline_plan`).
    """
    kind, style, S, K, T, r, q, s, N = _columns(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps)
    _check_p(T, r, q, s, N)
    fwd = _check_precision(precision, N)
    if S.shape[0] == 0:
        return np.full((6, 0), np.nan)
    if plan is None:
        plan = pipeline_plan()
    par, st, fl, bump = _tree_table(kind, style, S, K, T, r, q, s, N, bool(greeks), fwd, pd_fma_mode())
    windows = None
    if plan.prune and precision == "fp64":
        windows = window_table(kind, style, S, K, T, r, q, s, N, bump, par.shape[0])
    price, lv = _gpu_call(_run_pipeline, par, st, fl, precision, plan, timing, windows)
    return _assemble(S, T, r, s, N, price, lv, bump, bool(greeks), fwd)


def _run_pipeline(par, steps, flags, precision, plan, timing=None, windows=None):
    """Each tree through the pipeline phases, one after the other on one stream; CPU tails
    (FP64) finish on the host. ``windows``: ``[(kinds, Ls)]`` per tree
    (:func:`~optiond.kernels.binomial.plan.window_sides`) for pruned windows, or None. Returns
    ``(price (m,), lv (m, 6))``."""
    cp = gpus.cupy()
    m = par.shape[0]
    stream = cp.cuda.get_current_stream()
    dtype = cp.float64 if precision == "fp64" else cp.float32
    tails = []
    with stream:
        d_res = cp.full(7 * m, np.nan)  # prices, then 6 levels per tree
        d_par = cp.asarray(np.ascontiguousarray(par, dtype=np.float64))
        d_win = cp.asarray(np.tile(np.array(_WIN_INIT, dtype=np.int32), m)) if windows is not None else None
        width = max(PIPE_GRID_BIG[precision].cw, PIPE_GRID_MID[precision].cw, PIPE_GRID_SMALL[precision].cw,
                    PIPE_BLOCK[precision].cw)
        stride = ((int(steps.max()) + 1 + width + 31) // 32) * 32
        Vb = cp.empty(2 * stride, dtype=dtype)
        Xb = cp.empty(2 * stride, dtype=dtype)
        trees = []  # every launch prepared before the first one (the GPU does not wait on Python)
        for i in range(m):
            N, am = int(steps[i]), bool(flags[i] & 1)
            src, t, launches = 0, N, []
            for v, coop, t_hi, t_lo in pipeline_phases(N, precision, plan):
                win = None
                if windows is not None and windows[i][0]:
                    win = (d_win[8 * i:8 * i + 8], windows[i][0], windows[i][1])
                launch, src = _phase_prepare(v, coop, d_par[i], N, am, t_hi, t_lo, src, 1 << 30, Vb, Xb, stride,
                                             d_res[i:i + 1], d_res[m + 6 * i:m + 6 * i + 6], win)
                launches.append(launch)
                t = t_lo
            trees.append((i, N, src, t, launches))
        # a CPU tail copies a level back between launches (a synchronising call): no gate then
        timer = DeviceTimer(timing, stream, allow_gate=all(t == 0 for _, _, _, t, _ in trees))
        timer.start()
        for i, N, src, t, launches in trees:
            for launch in launches:
                launch()
            if t == N:  # the CPU tail is the whole tree: leaves on the host
                V, X = np.empty(N + 2), np.empty(N + 2)
                _leaves_cpu(par[i], N, V, X)
                tails.append((i, t, V, X))
            elif t > 0:  # CPU tail: level t back to the host (the next tree reuses the buffers)
                V = cp.asnumpy(Vb[src * stride:src * stride + t + 2], stream=stream)
                X = cp.asnumpy(Xb[src * stride:src * stride + t + 2], stream=stream)
                tails.append((i, t, V, X))
        timer.stop()
        out = cp.asnumpy(d_res, stream=stream)
        stream.synchronize()
        timer.finish()
    price, lv = out[:m].copy(), out[m:].reshape(m, 6).copy()
    for i, t, V, X in tails:
        price[i] = _finish_cpu(V.astype(np.float64), X.astype(np.float64), t, bool(flags[i] & 1), par[i],
                               int(steps[i]), lv[i])
    return price, lv


# --------------------------------------------------------------------------- the CPU's part

@nb.njit(cache=True, fastmath=True)
def _leaves_cpu(par, N, V, X):
    S, K, a, sign = par[0], par[1], par[2], par[7]
    for j in range(N + 1):
        x = sign * (S * math.exp((2 * j - N) * a) - K)
        X[j] = x
        V[j] = max(x, 0.0)


__all__: Sequence[str] = ("PipelinePlan", "crr_pipeline_gpu")
