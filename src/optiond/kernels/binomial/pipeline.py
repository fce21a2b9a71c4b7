"""The single-option CRR pipeline on NVIDIA GPUs (large N), host side: the calibrated phase
plan (:class:`PipelinePlan`), the pruned windows, the phase launches, and the split (GPU then
CPU tail) and naive (one launch per level) variants of the benchmark. The kernels and the
trees' parameters are :mod:`optiond.kernels.binomial_gpu`'s (its docstring describes the
pipeline's phases and their measured times); the CUDA C++ is ``kernels/cuda/binomial.cu``.

Errors: CUDA failures raise :class:`~optiond.kernels.binomial_gpu.GPUError` (the engine falls
back to the CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numba as nb
import numpy as np

from . import binomial_cpu as bc
from .binomial_gpu import (NARROW_LEVELS, PIPE_BLOCK, PIPE_CLUSTER, PIPE_GRID_BIG, PIPE_GRID_MID, PIPE_GRID_SMALL,
                           PIPE_PRUNED, PIPE_REG, REANCHOR, SMEM_MAX, Variant, _assemble, _check_p, _check_precision,
                           _columns, _cupy, _finish_cpu, _gpu_call, _state, _tree_table, available, clusters_supported,
                           device_info, kernel, pd_fma_mode, resident_blocks)
from .gpu_timer import DeviceTimer


def pruned_variant(N: int) -> Variant:
    """PIPE_PRUNED with K = 112 (fewer slabs, 16 outputs per warp) where the expected window
    needs at most one warp per SM sub-partition, else K = 96 (32 outputs per warp)."""
    sms = device_info()["sms"] if available() else 132
    if pruned_width(N, N, 0) / (PIPE_PRUNED.cw - 112) <= 4 * sms:
        return replace(PIPE_PRUNED, K=112)
    return PIPE_PRUNED


# --------------------------------------------------------------------------- single-option pipeline

@dataclass(frozen=True)
class PipelinePlan:
    """Where the single-option pipeline changes regime, as levels t (the tree at level t is
    t + 1 nodes wide; every kernel keeps its chunk of the tree in registers, K levels per
    slab, halos of K nodes recomputed):

    * ``t > big_to_mid``: cooperative grid kernel, 1024-node chunks, K = 128 (throughput);
    * ``big_to_mid >= t > mid_to_small``: grid kernel, 256-node chunks, K = 64;
    * ``mid_to_small >= t > small_to_block``: grid kernel, 128-node chunks (4 per lane),
      K = 64 (96 if the phase starts at or below ``NARROW_LEVELS``): more, shorter warps, so
      less latency per level;
    * ``small_to_block >= t > cpu_tail``: one block, the tree in shared memory (latency);
    * ``N <= reg_levels``: the whole tree in one block with the tree in registers
      (``crr_pipe_reg``: K levels per slab, halos exchanged through shared memory, then one
      warp) instead of the phases above; only without a CPU tail and for N <=
      :func:`reg_max_levels` (0 disables it; the calibration's ``pipeline_reg_levels``). As
      the last phase of a larger tree it lost to the grid kernels, which spread the widest
      levels over more multiprocessors (N = 1e4: 0.653 against 0.645 ms for the last 1000
      levels in it);
    * ``N <= cluster_levels``: the whole tree in one thread-block cluster with the tree in
      registers (``crr_pipe_cluster``: as ``crr_pipe_reg`` over ``PIPE_CLUSTER``'s blocks, halos
      through distributed shared memory, one cluster barrier per slab); before ``reg_levels``,
      only without a CPU tail, for N <= :func:`cluster_max_levels` and on sm_90 and up (0
      disables it; the calibration's ``pipeline_cluster_levels``);
    * ``t <= cpu_tail``: the CPU finishes (FP64 only; 0 disables it).

    With ``prune`` (FP64, N >= ``prune_steps``) the tree instead runs in one phase of the grid
    kernel with 128-node chunks that computes, slab by slab, only the window of nodes between
    the known exercise side and the known zero side of the tree (binomial.cu, "Pruned
    windows"), on as many warps as the window needs (:func:`pruned_width`), then the CPU tail
    if any: the result is the dense tree's, the work far smaller for large N (one at-the-money
    put: a window of about 24 sqrt(N) nodes instead of N).
    """

    big_to_mid: int = 200_000
    mid_to_small: int = 15_000
    small_to_block: int = 0
    cpu_tail: int = 0
    reg_levels: int = 0
    cluster_levels: int = 0
    #: FP64 trees of at least prune_steps steps run whole in the pruned grid kernel
    #: (``PIPE_PRUNED``), which computes only the nodes whose values are not known exactly
    #: (:func:`window_sides`: the zero side, and the exercise side of American options); False
    #: computes every node (the benchmark's dense comparison)
    prune: bool = True
    prune_steps: int = 5_000


def reg_max_levels(v: Variant) -> int:
    """The largest N the register block kernel ``v`` takes (32 warps of cw - K outputs each)."""
    return 32 * (v.cw - v.K) - 1


def cluster_max_levels(v: Variant) -> int:
    """The largest N the cluster kernel ``v`` takes (``cluster`` blocks of ``threads / 32`` warps
    of cw - K outputs each)."""
    return v.cluster * (v.threads // 32) * (v.cw - v.K) - 1



SIDE_NONE, SIDE_EXERCISE, SIDE_ZERO = 0, 1, 2
#: the pruned windows' exercise side needs X - cont >= (1 - e^{-r dt}) 4a K (put; call with q) above this
_PRUNE_MARGIN = 1e-13
#: a window boundary "at infinity" (no cap), as the kernel's ln(S* / S0) / a
_FAR = 1e300
#: initial window state of one tree (binomial.cu, tiles_tree: L, H, then three (min, max) slots)
_WIN_INIT = (0, 1 << 30, 1 << 30, -1, 1 << 30, -1, 1 << 30, -1)


def window_sides(is_call: bool, american: bool, S: float, K: float, T: float, r: float, q: float, sigma: float,
                 N: int) -> tuple[int, float]:
    """Which sides of one CRR tree the pruned pipeline may skip (binomial.cu, "Pruned windows").

    Args:
        is_call, american: the option; S, K: spot and strike; T: expiry in years; r, q: rate and
        dividend yield (annualised, continuous); sigma: volatility (annualised); N: steps.

    Returns:
        ``(kinds, Ls)``: ``kinds = low | high << 2`` over the tree's low (small spot) and high
        sides, each ``SIDE_ZERO`` (values underflowed to exactly 0 beyond the strike: put above,
        call below), ``SIDE_EXERCISE`` (American exercise region, where ``V = X`` by a margin:
        put below ``S* = K (1 - e^{-r dt}) / (1 - e^{-q dt})``, call above it) or
        ``SIDE_NONE``; ``Ls = ln(S* / S) / a`` (``a = sigma sqrt(T / N)``), +-1e300 when
        ``S*`` is unbounded. The exercise side is used only where ``(1 - e^{-r dt}) 4a``
        (put) or ``(1 - e^{-q dt}) 4a`` (call) is at least 1e-13, so that the exercise
        margin of the rule (four steps ``a`` from ``S*``) lies far beyond rounding.

    The rule: the American put is exercised at a node whose two successors are exercised when
    ``K (1 - e^{-r dt}) > S (1 - e^{-q dt})`` (then ``X - cont`` equals that difference
    exactly, as ``pu u + pd d = e^{-q dt}``); the exercise region is an interval (the early
    exercise boundary, Kim & Byun 1994, tracked per level here).
    """
    dt = T / N
    a = sigma * math.sqrt(dt)
    er = -math.expm1(-r * dt)  # 1 - e^{-r dt}
    eq = -math.expm1(-q * dt)
    if not is_call:
        low = SIDE_EXERCISE if american and r > 0 and er * 4 * a >= _PRUNE_MARGIN else SIDE_NONE
        Ls = math.log(K * er / eq / S) / a if q > 0 and r > 0 else _FAR
        return low | SIDE_ZERO << 2, Ls
    high = SIDE_EXERCISE if american and q > 0 and eq * 4 * a >= _PRUNE_MARGIN else SIDE_NONE
    Ls = math.log(K * er / eq / S) / a if r > 0 and q > 0 else -_FAR
    return SIDE_ZERO | high << 2, Ls


def _window_table(kind, style, S, K, T, r, q, sigma, N, bump, m: int) -> list[tuple[int, float]]:
    """:func:`window_sides` of every tree of :func:`_tree_table` (bumped trees included)."""
    out: list[tuple[int, float]] = [(0, 0.0)] * m
    hv, hr = bc.VEGA_BUMP, bc.RHO_BUMP
    for i in range(S.shape[0]):
        args = [bool(kind[i] == 1), bool(style[i] == 1), float(S[i]), float(K[i]), float(T[i]), float(r[i]),
                float(q[i]), float(sigma[i]), int(N[i])]
        out[i] = window_sides(*args)
        for b, (dr, ds) in enumerate(((0, hv), (0, -hv), (hr, 0), (-hr, 0))):
            if bump.shape[0] > i and bump[i, b] >= 0:
                bargs = list(args)
                bargs[5] += dr
                bargs[7] += ds
                out[int(bump[i, b])] = window_sides(*bargs)
    return out


#: CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cluster sizes above 8 on sm_90)
_FUNC_ATTR_NON_PORTABLE_CLUSTER = 14


def _phase_launch(v: Variant, coop: bool, d_par, N: int, am: bool, t_hi: int, t_lo: int, src: int, out_cap: int,
                  Vb, Xb, stride: int, d_price, d_lv) -> int:
    """Launch one pipeline phase (levels t_hi -> t_lo), every node computed; returns the buffer
    index of level t_lo."""
    launch, dst = _phase_prepare(v, coop, d_par, N, am, t_hi, t_lo, src, out_cap, Vb, Xb, stride, d_price, d_lv)
    launch()
    return dst


def _phase_prepare(v: Variant, coop: bool, d_par, N: int, am: bool, t_hi: int, t_lo: int, src: int, out_cap: int,
                   Vb, Xb, stride: int, d_price, d_lv, window=None) -> tuple[Callable[[], None], int]:
    """One pipeline phase (levels t_hi -> t_lo) made ready to launch: ``(launch, buffer index of
    level t_lo)``; ``launch()`` only enqueues the kernel (the host work is done here, so a
    caller can prepare every phase before the GPU starts). ``window``: ``(d_win (8,) int32,
    kinds, Ls)`` for a pruned grid variant's windows (:func:`window_sides`; the
    phases of one tree share ``d_win``), or None for every node."""
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
            cp = _cupy()
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
            units = v.spread * 4 * device_info()["sms"]
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


#: pruned windows: expected width, in nodes, per square root of the levels below the leaves
#: (the zero side lies where the tail probability of a CRR walk underflows, about 19.3 sqrt(m)
#: nodes beyond the strike after m levels, whatever sigma; the exercise side a few sqrt(m)
#: below it), and the outputs per warp the grid is sized for
PRUNE_WIDTH = 24.0
PRUNE_WARP_OUTPUTS = 64


def pruned_width(N: int, t_hi: int, t_lo: int) -> float:
    """Expected widest pruned window (nodes) over levels t_lo .. t_hi of a tree of N steps:
    the largest ``min(t + 1, PRUNE_WIDTH sqrt(N - t))`` (the level's width, the window's)."""
    ts = np.linspace(t_lo, t_hi, 33)
    return float(np.max(np.minimum(ts + 1.0, PRUNE_WIDTH * np.sqrt(np.maximum(N - ts, 1.0)))))


def _no_window():
    """A device int32[8] for phases without a pruned window (kinds = 0: never read)."""
    if "no_window" not in _state:
        _state["no_window"] = _cupy().zeros(8, dtype=np.int32)
    return _state["no_window"]


def _pipeline_phases(N: int, precision: str, plan: PipelinePlan) -> list[tuple[Variant, bool, int, int]]:
    """[(variant, cooperative, t_hi, t_lo)] for one tree of N steps under ``plan``."""
    tail = 0 if precision == "fp32" else max(0, min(int(plan.cpu_tail), N))
    reg = PIPE_REG[precision]
    cl = PIPE_CLUSTER[precision]
    if not tail and N <= min(int(plan.cluster_levels), cluster_max_levels(cl)) and clusters_supported():
        return [(cl, False, N, 0)]
    if not tail and N <= min(int(plan.reg_levels), reg_max_levels(reg)):
        return [(reg, False, N, 0)]
    if plan.prune and precision == "fp64" and N >= plan.prune_steps and N > tail:
        return [(pruned_variant(N), True, N, tail)]
    out = []
    t = N
    for v, coop, stop in ((PIPE_GRID_BIG[precision], True, max(plan.big_to_mid, tail)),
                          (PIPE_GRID_MID[precision], True, max(plan.mid_to_small, tail)),
                          (PIPE_GRID_SMALL[precision], True, max(plan.small_to_block, tail)),
                          (PIPE_BLOCK[precision], False, tail)):
        if t > stop:
            out.append((v, coop, t, stop))
            t = stop
    return out


def crr_pipeline_gpu(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps, greeks=True,
                     precision="fp64", plan: PipelinePlan | None = None, timing: dict | None = None):
    """Price a few options, each with large N, one tree at a time over the whole GPU (the
    hybrid pipeline: throughput phase, latency phase, optional CPU tail).

    Arguments, returns and errors as :func:`crr_batch_gpu`; ``plan`` sets the regime changes
    (default: the calibrated ones, :func:`optiond.kernels.dispatch.pipeline_plan`).
    """
    kind, style, S, K, T, r, q, s, N = _columns(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps)
    _check_p(T, r, q, s, N)
    fwd = _check_precision(precision, N)
    if S.shape[0] == 0:
        return np.full((6, 0), np.nan)
    if plan is None:
        from . import dispatch
        plan = dispatch.pipeline_plan()
    par, st, fl, bump = _tree_table(kind, style, S, K, T, r, q, s, N, bool(greeks), fwd, pd_fma_mode())
    windows = None
    if plan.prune and precision == "fp64":
        windows = _window_table(kind, style, S, K, T, r, q, s, N, bump, par.shape[0])
    price, lv = _gpu_call(_run_pipeline, par, st, fl, precision, plan, timing, windows)
    return _assemble(S, T, r, s, N, price, lv, bump, bool(greeks), fwd)


def _run_pipeline(par, steps, flags, precision, plan, timing=None, windows=None):
    """Each tree through the pipeline phases, one after the other on one stream; CPU tails
    (FP64) finish on the host. ``windows``: ``[(kinds, Ls)]`` per tree (:func:`window_sides`)
    for pruned windows, or None. Returns ``(price (m,), lv (m, 6))``."""
    cp = _cupy()
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
            for v, coop, t_hi, t_lo in _pipeline_phases(N, precision, plan):
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


# --------------------------------------------------------------------------- CPU-GPU split (experiment)

@nb.njit(cache=True, fastmath=True)
def _leaves_cpu(par, N, V, X):
    S, K, a, sign = par[0], par[1], par[2], par[7]
    for j in range(N + 1):
        x = sign * (S * math.exp((2 * j - N) * a) - K)
        X[j] = x
        V[j] = max(x, 0.0)


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

    cp = _cupy()
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
    cp = _cupy()
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


__all__: Sequence[str] = (
    "PipelinePlan",
    "crr_naive_gpu",
    "crr_pipeline_gpu",
    "crr_split_gpu",
    "pruned_width",
    "window_sides",
)
