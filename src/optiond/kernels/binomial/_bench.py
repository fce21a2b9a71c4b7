"""Benchmark-only host code of the binomial method (``bench/binomial_gpu.py``): the CPU-GPU split
of one tree (an experiment the engine does not use) and the naive one-launch-per-level baseline.
Their kernels are in ``binomial.cu``; the shapes compiled for the benchmark's comparisons are
:mod:`optiond.kernels.binomial.variants`' ``BENCH_*`` lists.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .. import gpu as gpus
from .gpu import REANCHOR, _check_p, _columns, _tree_table, kernel, pd_fma_mode
from .pipeline import _leaves_cpu, _phase_prepare
from .timer import DeviceTimer
from .variants import PIPE_GRID_MID, Variant


# --------------------------------------------------------------------------- CPU-GPU split (experiment)

def _phase_launch(v: Variant, coop: bool, d_par, N: int, am: bool, t_hi: int, t_lo: int, src: int, out_cap: int,
                  Vb, Xb, stride: int, d_price, d_lv) -> int:
    """Launch one pipeline phase (levels t_hi -> t_lo), every node computed; returns the buffer
    index of level t_lo."""
    launch, dst = _phase_prepare(v, coop, d_par, N, am, t_hi, t_lo, src, out_cap, Vb, Xb, stride, d_price, d_lv)
    launch()
    return dst


@nb.njit(cache=True, fastmath=True)
def _cpu_region(V, X, t, kk, m, am, par, N):
    """Levels t - 1 ... t - kk of nodes j >= m, in place (the right-hand strip of the split):
    a strip never needs nodes left of it, since V[j] depends on V[j] and V[j + 1] only."""
    S, K, a, u, pu, pd, c, sign = par[0], par[1], par[2], par[3], par[4], par[5], par[6], par[7]
    for lvl in range(t - 1, t - kk - 1, -1):
        if am:
            if (N - lvl) % REANCHOR == 0:
                for j in range(m, lvl + 1):
                    X[j] = sign * (S * math.exp((2 * j - lvl) * a) - K)
                for j in range(m, lvl + 1):
                    V[j] = max(pu * V[j + 1] + pd * V[j], X[j])
            else:
                for j in range(m, lvl + 1):
                    x = X[j] * u + c
                    X[j] = x
                    V[j] = max(pu * V[j + 1] + pd * V[j], x)
        else:
            for j in range(m, lvl + 1):
                V[j] = pu * V[j + 1] + pd * V[j]


def crr_split_gpu(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps, cpu_width: int,
                  timing: dict | None = None) -> float:
    """EXPERIMENT (the CPU-GPU split of one tree, seed 004, Zhang et al. 2012): the CPU prices
    the right-hand strip of the tree (nodes j >= N + 1 - cpu_width, which depend on nothing to
    their left) while the GPU prices the rest, slab by slab at the same time; after each slab
    the strip's K left-most nodes go to the GPU as the halo of its next slab. One option, FP64,
    price only. The benchmark measures it against the pipeline; the engine does not use it.

    Returns:
        The price. ``timing["host_s"]`` receives the wall time of the levels.
    """
    import time

    cp = gpus.cupy()
    kind, style, S, K, T, r, q, s, N = _columns(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps)
    _check_p(T, r, q, s, N)
    par, _, _, _ = _tree_table(kind[:1], style[:1], S[:1], K[:1], T[:1], r[:1], q[:1], s[:1], N[:1], False, False,
                               pd_fma_mode())
    Nn, am = int(N[0]), bool(style[0] == 1)
    v = PIPE_GRID_MID["fp64"]
    m = max(1, Nn + 1 - int(cpu_width))
    stride = ((Nn + 1 + v.cw + 31) // 32) * 32
    Vh, Xh = np.empty(Nn + 2), np.empty(Nn + 2)
    _leaves_cpu(par[0], Nn, Vh, Xh)
    stream = cp.cuda.get_current_stream()
    with stream:
        d_par = cp.asarray(par[0])
        Vb, Xb = cp.empty(2 * stride), cp.empty(2 * stride)
        d_res = cp.full(7, np.nan)
        t0 = time.perf_counter()
        t, src = Nn, 0
        while t > 0 and t - min(v.K, t) >= m:  # both sides busy
            kk = min(v.K, t)
            src_next = _phase_launch(v, True, d_par, Nn, am, t, t - kk, src, m - 1, Vb, Xb, stride, d_res[0:1], d_res[1:])
            _cpu_region(Vh, Xh, t, kk, m, am, par[0], Nn)  # meanwhile, on the CPU
            hi = min(m + v.K, t - kk + 1)
            o = src_next * stride
            Vb[o + m:o + hi].set(Vh[m:hi])  # waits for the slab's kernel (stream order)
            Xb[o + m:o + hi].set(Xh[m:hi])
            src, t = src_next, t - kk
        if t > 0:  # the strip is gone: the GPU finishes alone
            _phase_launch(v, True, d_par, Nn, am, t, 0, src, 1 << 30, Vb, Xb, stride, d_res[0:1], d_res[1:])
        out = cp.asnumpy(d_res)
        stream.synchronize()
        if timing is not None:
            timing["host_s"] = time.perf_counter() - t0
    return float(out[0])


# --------------------------------------------------------------------------- naive baseline

def crr_naive_gpu(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps, timing: dict | None = None):
    """Prices (n,) by the naive method: one kernel launch per level, one thread per node,
    exercise values from exp, all in global memory; all options share one N (FP64). For the
    benchmark's baseline."""
    cp = gpus.cupy()
    kind, style, S, K, T, r, q, s, N = _columns(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps)
    _check_p(T, r, q, s, N)
    if len(set(N.tolist())) != 1:
        raise ValueError("the naive kernel takes one N for all options")
    if len(set(style.tolist())) != 1:
        raise ValueError("the naive kernel takes one exercise style for all options")
    n, Nn, am = S.shape[0], int(N[0]), int(style[0])
    par, _, _, _ = _tree_table(kind, style, S, K, T, r, q, s, N, False, False, pd_fma_mode())
    leaves, step = kernel("crr_naive_leaves"), kernel("crr_naive_step")
    stream = cp.cuda.get_current_stream()
    with stream:
        d_par = cp.asarray(par)
        A = cp.zeros(n * (Nn + 2))
        Bv = cp.zeros(n * (Nn + 2))
        timer = DeviceTimer(timing, stream, allow_gate=False)  # N + 1 launches: more than a gate holds
        timer.start()
        leaves(((Nn + 256) // 256, n), (256,), (d_par, np.int32(Nn), A))
        for t in range(Nn - 1, -1, -1):
            step(((t + 256) // 256, n), (256,), (d_par, np.int32(Nn), np.int32(am), np.int32(t), A, Bv))
            A, Bv = Bv, A
        timer.stop()
        out = cp.asnumpy(A.reshape(n, Nn + 2)[:, 0], stream=stream)
        stream.synchronize()
        timer.finish()
    return out
