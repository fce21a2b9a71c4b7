"""CRR binomial pricer on NVIDIA GPUs: the compiled module, the tree parameters and the batch
kernels' host side. The kernel instances are :mod:`optiond.kernels.binomial.variants`, the
single-option pipeline's host side :mod:`optiond.kernels.binomial.pipeline` (its plan
:mod:`optiond.kernels.binomial.plan`), the implied-volatility root find
:mod:`optiond.kernels.binomial.iv_gpu`; this module's docstring describes all of them.

The CUDA C++ is ``binomial.cu`` beside this file, compiled once per process with NVRTC through
:func:`optiond.kernels.gpu.module` (CuPy caches the binary on disk, so later processes skip the
compile). CuPy is imported lazily: this module imports and its host-side helpers run without it,
and :func:`optiond.kernels.gpu.available` is False on machines with no CuPy or no GPU.

Same trees as the CPU reference
-------------------------------
Every tree runs the recurrence of :func:`optiond.kernels.binomial.cpu.crr_tree` (leaves from
``exp``, ``V[j] = max(pu V[j+1] + pd V[j], X[j])``, the exercise value carried by
``X <- X u + c`` and re-anchored from ``exp`` when ``(N - t) % 64 == 0``), with the same fused
multiply-adds as the reference's compiled loop. The per-tree scalars ``a, u, pu, pd, c`` are
computed on the host bit for bit as ``crr_tree`` computes them (:func:`_fill_params`,
:func:`pd_fma_mode`): a one-ulp difference in ``u`` or ``p`` would move an N = 1e5 price by
~1e-10 relative. Leaves and re-anchored exercise values take one ``exp`` per row of G nodes and
``e <- e u^2`` along the row (a few ulps from an ``exp`` per node). Rows of nodes whose exercise
value cannot be positive during a run of levels (puts above, calls below the exercise boundary
``(t + ln(K/S)/a) / 2``, with two nodes of margin) skip the ``X`` recurrence and the ``max``:
there ``max(cont, X) == cont`` exactly, so this changes no result. Against ``crr_batch`` over
the test grid the test bound is 1e-12 relative (measured errors: BENCHMARKS.md).

FP32 (``precision="fp32"``, N <= 1e4) carries values discounted to today,
``W_t = V_t e^{-r t dt}``. The tile kernels (block per tree, pipeline) use ``p`` and ``1 - p``
rounded to floats that sum exactly to 1; the warp-per-tree batch kernel carries
``U_t = W_t / s_t`` with ``s_t = lam^(N-t) 2^E`` and the larger of ``p, 1 - p`` as unit weight
(``U[j] = max(fma(rho, U[j], U[j+1]), Y[j])``, ``rho`` = smaller / larger rounded to float,
``lam = 1 / (1 + rho)``, so the effective probabilities again sum to 1 exactly): three float
instructions per node; ``E`` is reset by exact powers of two at every re-anchoring. Either way
float discount factors do not drift over N levels; trees whose step ``a = sigma sqrt(dt)`` is
large re-anchor the exercise values every ``2 / a`` levels instead of 64 (the recurrence
``X <- u X + c`` multiplies rounding errors by ``u`` per level). The remaining error comes from
rounding the probabilities to floats and from float rounding per level. Stated bound, over the
test grid (moneyness 0.8-1.25, sigma 0.1-0.6, T 0.25-5, r 0-10 %, q 0-3 %):
``|fp32 - fp64| <= FP32_RTOL * price + FP32_ATOL_K * K`` = 1e-4 * price + 1e-5 * K (measured
errors: BENCHMARKS.md). Exponents are clamped at
ln(FLT_MAX) minus a margin (46 more in the batch kernel, for ``1 / s_t <= 2^65``) so deep
in-the-money call leaves cannot overflow; the clamped nodes carry binomial weights below
1e-300 (tile kernels) and 1e-130 (batch kernel) for ``sigma^2 T <= 2``.

Kernels (see the .cu file for the layout)
-----------------------------------------
* batch: one warp per tree with the whole tree in registers (N + 1 <= 1024: 32 nodes per lane,
  8 consecutive nodes per lane and row, one shuffle per row and level; rows above the live
  part of the tree skipped, rows without a positive exercise value run the continuation
  only), one block per tree for wider trees (tiles of K levels with recomputed halos, tree in
  L2-resident scratch); persistent grids pulling trees from an atomic queue, longest first,
  so one launch prices a portfolio of mixed N. Greeks from the tree: delta, gamma, theta from
  levels 1-2 of the base tree, vega and rho by central bumps (``binomial.cpu.VEGA_BUMP`` /
  ``RHO_BUMP``), launched as four more "virtual" trees per option in the same launch.
* pipeline (one option, large N): a throughput phase over the whole GPU (cooperative launch,
  one grid barrier per slab of K levels, 1024-node register chunks, each slab's outputs
  spread evenly over the resident warps), then grid phases with 256- and 128-node chunks
  (more, shorter warps: less latency per level; K = 96 instead of 64 when the phase starts at
  or below ``NARROW_LEVELS``), a latency phase in one block with the tree in shared memory,
  and an optional CPU tail; phase boundaries from the calibration
  (:mod:`optiond.kernels.binomial.plan`, :class:`~optiond.kernels.binomial.plan.PipelinePlan`).
  The latency phases unroll their level loops 4 deep (the batch kernels 2). Trees of at most
  ``PipelinePlan.reg_levels`` steps can instead run whole in one block that keeps the tree in
  registers (``crr_pipe_reg``: no grid barrier, halos between warps through shared memory);
  off by default, as the grid kernel is as fast. Trees of at most
  ``PipelinePlan.cluster_levels`` steps (default 4095) run whole in one thread-block cluster
  (``crr_pipe_cluster``, sm_90: the same register kernel over up to 16 multiprocessors, halos
  through distributed shared memory, one cluster barrier per 64 levels), faster than the grid
  phases there (BENCHMARKS.md). Device times (``timing``)
  start after the launches' host-side preparation (slicing, arguments); with
  ``timing["gate"]`` the launches queue behind a stream gate, so the window holds the GPU's
  work and launch latency only (:mod:`optiond.kernels.binomial.timer`).
* pruned pipeline (FP64, N >= ``PipelinePlan.prune_steps``): the grid kernel with 128-node chunks
  computes, slab by slab, only the window between the tree's exactly-known zero side and
  American exercise side (:func:`~optiond.kernels.binomial.plan.window_sides`; binomial.cu,
  "Pruned windows"), on a grid sized for the expected window
  (:func:`~optiond.kernels.binomial.plan.pruned_width`), the exercise values by shifting
  (binomial.cu, run_levels_shift): the same result as the dense tree, in far less time for
  large N (BENCHMARKS.md).
* smoothed batch (``crr_batch_gpu(extrapolate=True)``, BBSR): the FP64 warp kernel starting at
  level N - 1 from the Black-Scholes values of the last step (binomial.cu ``start_level``), the
  trees of N and N // 2 steps and their bumps in one launch, combined on the host as the CPU
  combines them (N <= :data:`BBS_MAX_STEPS`); the device root find inverts the same value.
* naive: one launch per level (the baseline of the benchmark, :mod:`optiond.kernels.binomial._bench`).

Errors: CUDA failures and out-of-memory raise :class:`optiond.kernels.gpu.GPUError`; callers
(the engine) fall back to the CPU and say so. Inputs with the CRR probability outside [0, 1]
raise :class:`~optiond.kernels.binomial.cpu.CRRProbabilityError`, as on the CPU.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.core.extending import intrinsic

from ...columns import as_columns
from .. import gpu as gpus
from . import cpu as bc
from .timer import DeviceTimer
from .variants import (BBS_WARP_SHAPES, BLOCK_VARIANT, DIV_WARP_SHAPES, WARP_VARIANTS, Variant, bbs_kernel_name,
                       coop_names, div_kernel_name, plain_names)
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

log = logging.getLogger(__name__)

CUDA_SOURCE = Path(__file__).with_name("binomial.cu")
NPAR = 16
REANCHOR = bc.REANCHOR
FP32_MAX_STEPS = 10_000
#: dynamic shared memory the latency-phase block may take (H100/H200 allow 227 KB per block)
SMEM_MAX = 200 * 1024
#: stated FP32 error against the FP64 reference: |fp32 - fp64| <= FP32_RTOL*|fp64| + FP32_ATOL_K*K
FP32_RTOL = 1e-4
FP32_ATOL_K = 1e-5
_FLT_LOG_MAX = math.log(float(np.finfo(np.float32).max))


# --------------------------------------------------------------------------- the compiled module

#: this method's per-process state: compiled kernels by name, the pd rounding mode, kernel
#: attributes already set, the empty pruned window (CuPy, the device and the compiled modules
#: are :mod:`optiond.kernels.gpu`'s)
_lock = threading.RLock()
_state: dict[Any, Any] = {}


def clusters_supported() -> bool:
    """Thread-block clusters (compute capability 9.0 and up): crr_pipe_cluster is compiled."""
    return int(gpus.device_info()["cc"].split(".")[0]) >= 9


def module(coop: bool):
    """The compiled RawModule (plain kernels, or the cooperative-launch grid kernels).

    Raises:
        GPUError: no CuPy, no device, or the compile failed.
    """
    opts = ("-std=c++17",) + (("-DCRR_COOP=1",) if coop else ())
    clusters = not coop and clusters_supported()
    if not clusters:
        opts += ("-DCRR_NO_CLUSTER=1",)
    names = coop_names() if coop else plain_names(clusters)
    return gpus.module(CUDA_SOURCE, opts, names, cooperative=coop)


def kernel(name: str, coop: bool = False):
    """A compiled kernel by its template name (see :class:`~optiond.kernels.binomial.variants.Variant`),
    from the module of the current device (a handle is only valid on the device it was loaded on)."""
    key = ("k", name, bool(coop), int(gpus.cupy().cuda.runtime.getDevice()))
    with _lock:
        if key not in _state:
            _state[key] = module(coop).get_function(name)
        return _state[key]


def resident_blocks(k, threads: int) -> int:
    """Blocks of ``threads`` threads of kernel ``k`` that fit on the whole device at once
    (registers and threads; these kernels use almost no shared memory)."""
    info = gpus.device_info()
    regs = max(int(k.num_regs), 1)
    per_warp = ((regs * 32 + 255) // 256) * 256
    warps_sm = info["regs_per_sm"] // per_warp
    wpb = (threads + 31) // 32
    per_sm = min(warps_sm // wpb, info["threads_per_sm"] // threads, 32)
    return max(per_sm, 1) * info["sms"]


def _gpu_call(fn: Callable, *a, **kw):
    """Run ``fn`` and turn CuPy/CUDA failures into :class:`optiond.kernels.gpu.GPUError`."""
    try:
        return fn(*a, **kw)
    except (gpus.GPUError, bc.CRRProbabilityError, ValueError):
        raise
    except Exception as e:
        raise gpus.GPUError(f"{type(e).__name__}: {e}") from e


# --------------------------------------------------------------------------- host-side tables

@intrinsic
def _fma(typingctx, x, y, z):
    """x * y + z with one rounding (llvm.fma.f64)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        d = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fma", [d], ir.FunctionType(d, [d, d, d]))
        return builder.call(fn, args)

    return sig, codegen


@nb.njit(cache=True)
def _fill_params(is_call, S, K, T, r, q, sigma, N, fwd, pd_fma, out, smooth=False):
    """One tree's parameter vector (layout P_* in binomial.cu). The FP64 scalars are bit for bit
    those of ``binomial.cpu.crr_tree``, whose prologue evaluates in IEEE order except
    ``pd = disc * (1 - p)``, which its fastmath build may turn into ``fma(-disc, p, disc)``
    (``pd_fma``; :func:`pd_fma_mode` finds out once per process). Written out here without
    fastmath, so no optimiser context can change them (the tests check the bits). ``smooth``
    (FP64): also the constants of the smoothed last step's Black-Scholes values
    (``black_scholes.bs_price_one`` at ``tau = dt``: ``e^{-q dt}``, ``e^{-r dt}``,
    ``(r - q) dt``; binomial.cu P_BS_*), as that function computes them."""
    dt = T / N
    a = sigma * math.sqrt(dt)
    u = math.exp(a)
    d = 1.0 / u
    disc = math.exp(-r * dt)
    p = (math.exp((r - q) * dt) - d) / (u - d)
    pu = disc * p
    pd = _fma(-disc, p, disc) if pd_fma else disc * (1.0 - p)
    sign = 1.0 if is_call else -1.0
    c = sign * K * (u - 1.0)
    out[0] = S
    out[1] = K
    out[2] = a
    out[6] = c
    out[7] = sign
    out[10] = bc.reanchor_period(a)  # FP64: the CPU's period (FP32 below: shorter)
    out[11] = 0.0
    out[12] = 0.0
    out[13] = 0.0
    out[14] = 0.0
    out[15] = 0.0
    if fwd:
        # p and 1 - p as floats summing exactly to 1 (Sterbenz: 1 - x is exact for x in [0.5, 1])
        p32 = np.float32(p)
        if p32 >= 0.5:
            q32 = np.float32(1.0 - np.float64(p32))
        else:
            q32 = np.float32(1.0 - p)
            p32 = np.float32(1.0 - np.float64(q32))
        out[3] = u * math.exp(r * dt)
        out[4] = np.float64(p32)
        out[5] = np.float64(q32)
        out[8] = r * dt
        # X <- u X + c multiplies rounding errors by u = e^a per level: re-anchor often enough
        # that e^(period a) <= e^2 (FP64 keeps the CPU's 64 levels)
        period = REANCHOR if REANCHOR * a <= 2.0 else max(1, int(2.0 / a))
        out[10] = period
        out[9] = _FLT_LOG_MAX - math.log(max(S, K, 1.0)) - abs(r) * T - min(period, N) * a - 2.0
        # the batch kernel's scaled scheme (binomial.cu, "FP32 warp per tree"): the larger of
        # p, 1 - p is the unit weight, rho = smaller / larger rounded to float, lambda = 1 / (1 + rho)
        # the effective larger probability (so the two sum to 1 exactly)
        pc = 1.0 - p
        if p >= pc:
            out[11] = 1.0
            rho = np.float64(np.float32(pc / p))
        else:
            rho = np.float64(np.float32(p / pc))
        lam = 1.0 / (1.0 + rho)
        erdt = math.exp(r * dt)
        out[12] = rho
        out[13] = lam
        out[14] = u * erdt / lam
        out[15] = erdt / lam
    else:
        out[3] = u
        out[4] = pu
        out[5] = pd
        out[8] = 0.0
        out[9] = np.inf
        if smooth:
            out[11] = math.exp(-q * dt)
            out[12] = math.exp(-r * dt)
            out[13] = (r - q) * dt


@nb.njit(cache=True)
def _p_ok(T, r, q, sigma, N):
    p = bc.crr_probability(T, r, q, sigma, N)
    return p >= 0.0 and p <= 1.0


@nb.njit(cache=True)
def _tree_table(kind, style, S, K, T, r, q, sigma, steps, greeks, fwd, pd_fma=True, smooth=False):
    """Trees to run for n options: the base tree of each option, then (with ``greeks``) the
    bumped trees sigma +- VEGA_BUMP and r +- RHO_BUMP where the CPU's ``_bumped_diff`` would
    price them (p in [0, 1], sigma - h > 0). ``smooth``: trees with the smoothed last step
    (FP64; :func:`_fill_params`).

    Returns ``(par (m, NPAR) float64, steps (m,) int32, flags (m,) int32, bump (n, 4) int64)``
    with ``bump[i] = tree index of (sigma+h, sigma-h, r+h, r-h)`` or -1.
    """
    n = S.shape[0]
    hv = bc.VEGA_BUMP
    hr = bc.RHO_BUMP
    bump = np.full((n, 4), -1, dtype=np.int64)
    m = n
    if greeks:
        for i in range(n):
            N = steps[i]
            if _p_ok(T[i], r[i], q[i], sigma[i] + hv, N):
                bump[i, 0] = m
                m += 1
            if sigma[i] - hv > 0.0 and _p_ok(T[i], r[i], q[i], sigma[i] - hv, N):
                bump[i, 1] = m
                m += 1
            if _p_ok(T[i], r[i] + hr, q[i], sigma[i], N):
                bump[i, 2] = m
                m += 1
            if _p_ok(T[i], r[i] - hr, q[i], sigma[i], N):
                bump[i, 3] = m
                m += 1
    par = np.empty((m, NPAR))
    st = np.empty(m, dtype=np.int32)
    fl = np.empty(m, dtype=np.int32)
    for i in range(n):
        call = kind[i] == 1
        N = steps[i]
        for b in range(-1, 4 if greeks else 0):
            k = i if b < 0 else bump[i, b]
            if k < 0:
                continue
            s_, r_ = sigma[i], r[i]
            if b == 0:
                s_ = sigma[i] + hv
            elif b == 1:
                s_ = sigma[i] - hv
            elif b == 2:
                r_ = r[i] + hr
            elif b == 3:
                r_ = r[i] - hr
            _fill_params(call, S[i], K[i], T[i], r_, q[i], s_, N, fwd, pd_fma, par[k], smooth)
            st[k] = N
            fl[k] = 1 if style[i] == 1 else 0
    return par, st, fl, bump


@nb.njit(cache=True)
def _assemble(S, T, r, sigma, steps, price, lv, bump, greeks, fwd):
    """(6, n) results from the tree prices and first levels, as ``binomial.cpu._batch_impl``."""
    n = S.shape[0]
    out = np.full((6, n), np.nan)
    hv = bc.VEGA_BUMP
    hr = bc.RHO_BUMP
    l6 = np.empty(6)
    for i in range(n):
        base = price[i]
        out[0, i] = base
        if not greeks:
            continue
        for k in range(6):
            l6[k] = lv[i, k]
        if fwd:  # levels discounted to time 0 (W_t = V_t e^{-r t dt}) back to values
            dd = math.exp(r[i] * T[i] / steps[i])
            l6[1] *= dd
            l6[2] *= dd
            l6[3] *= dd * dd
            l6[4] *= dd * dd
            l6[5] *= dd * dd
        out[1, i], out[2, i], out[3, i] = bc._tree_greeks(S[i], T[i], sigma[i], steps[i], l6)
        for which in range(2):
            h = hv if which == 0 else hr
            iu = bump[i, 2 * which]
            idn = bump[i, 2 * which + 1]
            up = price[iu] if iu >= 0 else base
            dn = price[idn] if idn >= 0 else base
            width = (h if iu >= 0 else 0.0) + (h if idn >= 0 else 0.0)
            out[4 + which, i] = np.nan if width == 0.0 else (up - dn) / width
    return out


@nb.njit(cache=True, fastmath=True)
def _finish_cpu(V, X, t0, am, par, N, lv):
    """Levels t0 - 1 ... 0 of an FP64 tree on the CPU from its level-t0 vectors (the pipeline's
    CPU tail); the loop of ``binomial.cpu.crr_tree``, deliberately written out again: one shared
    jitted function is compiled (and FMA-contracted under fastmath) differently depending on
    where LLVM inlines it, which broke this bit-exact CPU/GPU replay on some test orders.
    Returns the price; fills ``lv`` with
    levels 0-2 (level t0 included when t0 <= 2)."""
    S, K, a, u, pu, pd, c, sign = par[0], par[1], par[2], par[3], par[4], par[5], par[6], par[7]
    if t0 == 2:  # the starting level is one of the first three (the leaves when N <= 2)
        lv[3] = V[0]
        lv[4] = V[1]
        lv[5] = V[2]
    elif t0 == 1:
        lv[1] = V[0]
        lv[2] = V[1]
    anchor = int(par[10])  # the CPU's period (bc.reanchor_period)
    for t in range(t0 - 1, -1, -1):
        if am:
            if (N - t) % anchor == 0:
                for j in range(t + 1):
                    X[j] = sign * (S * math.exp((2 * j - t) * a) - K)
                for j in range(t + 1):
                    V[j] = max(pu * V[j + 1] + pd * V[j], X[j])
            else:
                for j in range(t + 1):
                    x = X[j] * u + c
                    X[j] = x
                    V[j] = max(pu * V[j + 1] + pd * V[j], x)
        else:
            for j in range(t + 1):
                V[j] = pu * V[j + 1] + pd * V[j]
        if t == 2:
            lv[3] = V[0]
            lv[4] = V[1]
            lv[5] = V[2]
        elif t == 1:
            lv[1] = V[0]
            lv[2] = V[1]
    lv[0] = V[0]
    return V[0]


@nb.njit(cache=True, fastmath=True)
def _replay(par, N, am):
    """The GPU's FP64 recurrence on the CPU from a parameter row (for :func:`pd_fma_mode`)."""
    S, K, a, sign = par[0], par[1], par[2], par[7]
    V = np.empty(N + 2)
    X = np.empty(N + 2)
    for j in range(N + 1):
        x = sign * (S * math.exp((2 * j - N) * a) - K)
        X[j] = x
        V[j] = max(x, 0.0)
    lv = np.empty(6)
    return _finish_cpu(V, X, N, am, par, N, lv)


def pd_fma_mode() -> bool:
    """Whether this process's build of ``binomial.cpu.crr_tree`` rounds ``pd`` as
    ``fma(-disc, p, disc)`` (numba's fastmath contraction, as on x86-64 with FMA) rather than
    as ``disc * (1 - p)``: decided once by replaying a few trees both ways against it."""
    with _lock:
        if "pd_fma" not in _state:
            rng = np.random.default_rng(12345)
            n = 24
            cols = _columns(rng.integers(0, 2, n), rng.integers(0, 2, n), rng.uniform(60, 140, n), rng.uniform(60, 140, n),
                            rng.uniform(0.2, 3, n), rng.choice([0.03, 0.05, 0.1], n), rng.uniform(0, 0.03, n),
                            rng.uniform(0.1, 0.5, n), rng.integers(150, 400, n))
            ref = bc.crr_batch(*cols, greeks=False)[0]
            miss = {}
            for mode in (True, False):
                par, st, fl, _ = _tree_table(*cols, False, False, mode)
                got = np.array([_replay(par[i], int(st[i]), bool(fl[i])) for i in range(n)])
                miss[mode] = (int(np.sum(got != ref)), float(np.max(np.abs(got - ref) / np.abs(ref))))
            _state["pd_fma"] = min(miss, key=lambda m: miss[m])
            if miss[_state["pd_fma"]][0]:
                log.warning("GPU tree parameters do not reproduce the CPU reference bit for bit (%s)", miss)
        return _state["pd_fma"]


def _columns(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps):
    return as_columns((kind, np.int8), (style, np.int8), spot, strike, expiry, rate, dividend_yield, volatility,
                      (steps, np.int64))


def _check_p(T, r, q, s, N) -> None:
    bad = bc.probability_errors(T, r, q, s, N)
    if bad.size:
        i = int(bad[0])
        p = float(bc.probabilities(T[i], r[i], q[i], s[i], N[i]))
        raise bc.CRRProbabilityError(f"option {i}: {bc.probability_message(p)}")


def _check_precision(precision: str, N: np.ndarray) -> bool:
    if precision not in ("fp64", "fp32"):
        raise ValueError(f"precision must be 'fp64' or 'fp32', not {precision!r}")
    if precision == "fp32" and N.size and int(N.max()) > FP32_MAX_STEPS:
        raise ValueError(f"fp32 is for N <= {FP32_MAX_STEPS} (got N = {int(N.max())}); use fp64")
    return precision == "fp32"


# --------------------------------------------------------------------------- batch launches

def _launch_persistent(k, grid: int, threads: int, args) -> None:
    k((grid,), (threads,), args)


def _run_trees(par: np.ndarray, steps: np.ndarray, flags: np.ndarray, precision: str = "fp64",
               warp_variant: Variant | None = None, timing: dict | None = None, route: str = "auto",
               smooth: bool = False):
    """Price m trees on the GPU, one launch per kernel kind: a warp per tree where the tree fits
    a warp's registers, a block per tree otherwise (both persistent, longest trees first).
    ``smooth``: FP64 trees with the smoothed last step (parameters from ``_tree_table(...,
    smooth=True)``), the warp kernel only (N <= :data:`BBS_MAX_STEPS`).

    Returns ``(price (m,), lv (m, 6))`` as float64 NumPy arrays (lv NaN where not computed).
    ``timing``, if given, receives ``device_s``: CUDA-event time of the kernels (after the
    uploads and the launches' host-side preparation, before the copy back), in seconds; see
    :class:`optiond.kernels.binomial.timer.DeviceTimer` for ``timing["gate"]``.
    ``route``: ``"auto"``, or ``"warp"`` / ``"block"`` to force one kernel (tests and benchmarks).
    """
    cp = gpus.cupy()
    m = int(par.shape[0])
    if m == 0:
        return np.empty(0), np.empty((0, 6))
    wv_list = WARP_VARIANTS[precision]
    if route not in ("auto", "warp", "block"):
        raise ValueError(f"route must be auto, warp or block, not {route!r}")
    in_warp = steps + 1 <= (warp_variant or wv_list[-1]).cw
    if smooth and (precision != "fp64" or route == "block" or not in_warp.all()):
        raise ValueError(f"smoothed trees run on the FP64 warp kernel only (N <= {BBS_MAX_STEPS})")
    if route == "block":
        in_warp[:] = False
    elif route == "warp" and not in_warp.all():
        raise ValueError(f"route='warp' needs N + 1 <= {(warp_variant or wv_list[-1]).cw}")
    iw = np.flatnonzero(in_warp)
    ib = np.flatnonzero(~in_warp)
    iw = iw[np.argsort(-steps[iw], kind="stable")].astype(np.int32)
    ib = ib[np.argsort(-steps[ib], kind="stable")].astype(np.int32)
    ints = np.concatenate([steps.astype(np.int32), flags.astype(np.int32), iw, ib, np.zeros(2, np.int32)])
    stream = cp.cuda.get_current_stream()
    with stream:
        timer = DeviceTimer(timing, stream)
        d_par = cp.asarray(np.ascontiguousarray(par, dtype=np.float64))
        d_int = cp.asarray(ints)
        o = 0
        d_steps = d_int[o:o + m]; o += m
        d_flags = d_int[o:o + m]; o += m
        d_iw = d_int[o:o + iw.size]; o += iw.size
        d_ib = d_int[o:o + ib.size]; o += ib.size
        d_cnt = d_int[o:o + 2]
        d_out = cp.full(7 * m, np.nan)  # prices, then 6 levels per tree
        d_p, d_l = d_out[:m], d_out[m:]
        launches = []  # (kernel, grid, threads, args), all prepared before the first launch
        if iw.size:
            wmax = int(steps[iw].max()) + 1
            wv = warp_variant or next(v for v in wv_list if v.cw >= wmax)
            if wv.cw < wmax:
                raise ValueError(f"warp variant {wv.name} holds N + 1 <= {wv.cw}, got {wmax}")
            k = kernel(bbs_kernel_name(wv.G, wv.R) if smooth else wv.name)
            wpb = wv.threads // 32
            grid = min((iw.size + wpb - 1) // wpb, resident_blocks(k, wv.threads))
            launches.append((k, grid, wv.threads, (d_par, d_steps, d_flags, d_iw, np.int32(iw.size), d_cnt[0:1], d_p,
                                                   d_l)))
        if ib.size:
            bv = BLOCK_VARIANT[precision]
            k = kernel(bv.name)
            grid = min(ib.size, resident_blocks(k, bv.threads))
            stride = ((int(steps[ib].max()) + 1 + bv.cw + 31) // 32) * 32
            scratch = cp.empty(grid * 4 * stride, dtype=cp.float64 if precision == "fp64" else cp.float32)
            launches.append((k, grid, bv.threads, (d_par, d_steps, d_flags, d_ib, np.int32(ib.size), d_cnt[1:2],
                                                   np.int32(bv.K), scratch, np.uint64(stride), d_p, d_l)))
        timer.start()
        for k, grid, threads, args in launches:
            _launch_persistent(k, grid, threads, args)
        timer.stop()
        out = cp.asnumpy(d_out, stream=stream)
        stream.synchronize()
        timer.finish()
    return out[:m].copy(), out[m:].reshape(m, 6).copy()


#: the most steps a cash-dividend tree may have on the GPU (the widest dividend warp kernel)
DIV_MAX_STEPS = 32 * DIV_WARP_SHAPES[-1][0] * DIV_WARP_SHAPES[-1][1] - 1
#: the most steps an extrapolated (BBSR) option may have on the GPU (the widest smoothed warp kernel)
BBS_MAX_STEPS = 32 * BBS_WARP_SHAPES[-1][0] * BBS_WARP_SHAPES[-1][1] - 1
MAXDIV = bc.MAX_DIVIDENDS


def _dividend_table(T, r, K, kind, style, steps, par_rate, owner, div_t, div_a, nd):
    """Per tree (``owner[k]``: its option; ``par_rate[k]``: its rate, bumped for rho) the cash
    dividends as ``crr_batch_warp_div`` reads them, latest first: ``(count (m,) int32, level
    (m, 8) int32, amount (m, 8), v0 (m, 8))``, with the levels of
    :func:`optiond.kernels.binomial.cpu.dividend_level` and ``v0`` the value at ``S = 0`` of
    :func:`optiond.kernels.binomial.cpu._apply_dividend` (0 for a call, K for an American put,
    ``K e^{-r (T - L dt)}`` for a European one), each computed as the CPU computes it."""
    m = owner.shape[0]
    count = nd[owner].astype(np.int32)
    dt = T[owner] / steps[owner]
    d = np.arange(MAXDIV)
    live = d[None, :] < count[:, None]
    src = np.clip(count[:, None] - 1 - d[None, :], 0, max(div_t.shape[1] - 1, 0))  # latest first
    if div_t.shape[1] == 0:
        return count, np.zeros((m, MAXDIV), np.int32), np.zeros((m, MAXDIV)), np.zeros((m, MAXDIV))
    t_src = np.take_along_axis(div_t[owner], src, axis=1)
    level = np.minimum(np.maximum(np.floor(t_src / dt[:, None] + 0.5), 2), steps[owner][:, None]).astype(np.int32)
    amount = np.where(live, np.take_along_axis(div_a[owner], src, axis=1), 0.0)
    with np.errstate(over="ignore"):
        euro_put = K[owner][:, None] * np.exp(-par_rate[:, None] * (T[owner][:, None] - level * dt[:, None]))
    v0 = np.where(kind[owner][:, None] == 1, 0.0, np.where(style[owner][:, None] == 1, K[owner][:, None], euro_put))
    return count, np.where(live, level, 0).astype(np.int32), amount, np.where(live, v0, 0.0)


def _run_dividend_trees(par, steps, flags, table, timing: dict | None = None):
    """Price m trees with cash dividends (``table`` from :func:`_dividend_table`) on the GPU, one
    warp per tree (FP64, N + 1 <= 32 G R of the narrowest shape that holds the widest).

    Returns ``(price (m,), lv (m, 6))`` as :func:`_run_trees`."""
    cp = gpus.cupy()
    m = int(par.shape[0])
    if m == 0:
        return np.empty(0), np.empty((0, 6))
    count, level, amount, v0 = table
    wmax = int(steps.max()) + 1
    G, R = next(((g, r) for g, r in DIV_WARP_SHAPES if 32 * g * r >= wmax), (0, 0))
    if G == 0:
        raise ValueError(f"cash-dividend trees on the GPU need N <= {DIV_MAX_STEPS}, got {wmax - 1}")
    order = np.argsort(-steps, kind="stable").astype(np.int32)
    stream = cp.cuda.get_current_stream()
    with stream:
        timer = DeviceTimer(timing, stream)
        d_par = cp.asarray(np.ascontiguousarray(par, dtype=np.float64))
        d_steps = cp.asarray(steps.astype(np.int32))
        d_flags = cp.asarray(flags.astype(np.int32))
        d_order = cp.asarray(order)
        d_cnt = cp.zeros(1, dtype=cp.int32)
        d_n = cp.asarray(count)
        d_lev = cp.asarray(level)
        d_amt = cp.asarray(amount)
        d_v0 = cp.asarray(v0)
        d_out = cp.full(7 * m, np.nan)
        k = kernel(div_kernel_name(G, R))
        grid = min((m + 3) // 4, resident_blocks(k, 128))
        scratch = cp.empty(grid * 4 * 3 * 32 * G * R, dtype=cp.float64)  # 3 rows per warp
        timer.start()
        _launch_persistent(k, grid, 128, (d_par, d_steps, d_flags, d_order, np.int32(m), d_cnt, d_n, d_lev, d_amt,
                                          d_v0, scratch, d_out[:m], d_out[m:]))
        timer.stop()
        out = cp.asnumpy(d_out, stream=stream)
        stream.synchronize()
        timer.finish()
    return out[:m].copy(), out[m:].reshape(m, 6).copy()


def crr_batch_gpu(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps, greeks=True,
                  precision="fp64", timing: dict | None = None, warp_variant: Variant | None = None,
                  route: str = "auto", dividend_times=None, dividend_amounts=None, extrapolate=False):
    """Price arrays of options on CRR trees on the GPU; the same contract as
    :func:`optiond.kernels.binomial.cpu.crr_batch`.

    Args:
        kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps: as
            ``crr_batch`` (shape (n,) or scalars; steps 1 ... 1e7, mixed N in one launch).
        greeks: also delta, gamma, theta (from the tree) and vega, rho (central bumps, as the
            CPU's ``_bumped_diff``); they cost up to four more trees per option. The dividend
            rho is the front door's (:func:`optiond.kernels.binomial._with_dividend_rho`).
        precision: ``"fp64"`` (matches the CPU to ~1e-14 relative) or ``"fp32"`` (N <= 1e4;
            error <= FP32_RTOL * price + FP32_ATOL_K * strike, see the module docstring).
        timing: optional dict that receives ``device_s`` (CUDA-event time of the launches).
        warp_variant, route: force a kernel shape or kernel (tests, benchmarks).
        dividend_times, dividend_amounts: cash dividends as ``crr_batch`` (the spot model,
            ``crr_tree_div``): every option of the call then runs on ``crr_batch_warp_div``
            (FP64 whatever ``precision`` says, N <= :data:`DIV_MAX_STEPS`); None: the
            dividend-free kernels.
        extrapolate: the converged value (BBSR) of ``crr_batch(extrapolate=True)``: smoothed
            trees (the Black-Scholes values of the last step at level N - 1, binomial.cu
            ``start_level``) of N and M = N // 2 steps, base and bumped trees of both in one launch of
            ``crr_batch_warp<double, G, R, false, true>``, then the CPU's Greek assembly and
            Richardson combination (:func:`optiond.kernels.binomial.cpu.richardson`), for the
            price and every Greek; FP64 whatever ``precision`` says, N <=
            :data:`BBS_MAX_STEPS`, no cash dividends. Agrees with the CPU to about 1e-13
            relative (leaves within a few ulps: CUDA's ``exp``, ``log``, ``erfc``; the
            combination weights them by up to 3).

    Returns:
        float64 array (6, n): price, delta, gamma, theta, vega, rho (NaN rows without greeks).

    Raises:
        CRRProbabilityError: p outside [0, 1] for some option.
        ValueError: fp32 with N > 1e4, an unknown precision, cash dividends with N >
            :data:`DIV_MAX_STEPS`, or ``extrapolate`` with N > :data:`BBS_MAX_STEPS` or with
            cash dividends.
        GPUError: no GPU, a CUDA error or out of device memory.
    """
    kind, style, S, K, T, r, q, s, N = _columns(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps)
    _check_p(T, r, q, s, N)
    cash = dividend_times is not None
    if extrapolate:
        if cash:
            raise ValueError("extrapolate (BBSR) is not for cash dividends")
        if N.size and int(N.max()) > BBS_MAX_STEPS:
            raise ValueError(f"extrapolate (BBSR) on the GPU needs N <= {BBS_MAX_STEPS}, got {int(N.max())}")
        if S.shape[0] == 0:
            return np.full((6, 0), np.nan)
        tables = bbsr_tables(kind, style, S, K, T, r, q, s, N, bool(greeks))
        price, lv = _gpu_call(_run_trees, *tables[:3], "fp64", None, timing, "warp", True)
        return bbsr_assemble(S, T, r, s, N, price, lv, tables, bool(greeks))
    fwd = False if cash else _check_precision(precision, N)
    if S.shape[0] == 0:
        return np.full((6, 0), np.nan)
    if cash:
        S, div_t, div_a, nd = bc.cash_dividends(S, T, dividend_times, dividend_amounts)
    par, st, fl, bump = _tree_table(kind, style, S, K, T, r, q, s, N, bool(greeks), fwd, pd_fma_mode())
    if cash:
        owner, rate_k = _tree_owners(r, bump, st.shape[0])
        table = _dividend_table(T, r, K, kind, style, N, rate_k, owner, div_t, div_a, nd)
        price, lv = _gpu_call(_run_dividend_trees, par, st, fl, table, timing)
    else:
        price, lv = _gpu_call(_run_trees, par, st, fl, precision, warp_variant, timing, route)
    return _assemble(S, T, r, s, N, price, lv, bump, bool(greeks), fwd)


def bbsr_tables(kind, style, S, K, T, r, q, sigma, N, greeks: bool):
    """The trees of a BBSR batch (columns as :func:`_columns` gives them): the smoothed trees
    (:func:`_tree_table` with ``smooth=True``) of N steps, then those of M =
    ``cpu.coarse_steps(N)``, each with its bumped trees. Returns ``(par, steps, flags, bump_N,
    bump_M, m_N)``: the concatenated table (one launch), each half's bump indices into its own
    half, and the number of trees of the N half."""
    M = bc.coarse_steps(N)
    fine = _tree_table(kind, style, S, K, T, r, q, sigma, N, greeks, False, pd_fma_mode(), True)
    coarse = _tree_table(kind, style, S, K, T, r, q, sigma, M, greeks, False, pd_fma_mode(), True)
    return (np.concatenate([fine[0], coarse[0]]), np.concatenate([fine[1], coarse[1]]),
            np.concatenate([fine[2], coarse[2]]), fine[3], coarse[3], fine[0].shape[0])


def bbsr_assemble(S, T, r, sigma, N, price, lv, tables, greeks: bool) -> np.ndarray:
    """(6, n) BBSR results from the prices and first levels of the trees of :func:`bbsr_tables`
    (in its order): each half's Greeks as the CPU's ``_batch_impl`` (:func:`_assemble`), then
    the CPU's Richardson combination (:func:`optiond.kernels.binomial.cpu.richardson`)."""
    _, _, _, bump_n, bump_m, m = tables
    M = bc.coarse_steps(N)
    fine = _assemble(S, T, r, sigma, N, price[:m], lv[:m], bump_n, greeks, False)
    coarse = _assemble(S, T, r, sigma, M, price[m:], lv[m:], bump_m, greeks, False)
    return bc.richardson(fine, coarse, N, M)


def _tree_owners(r, bump, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Per tree of :func:`_tree_table`: the option it prices and its rate (rho's bumps)."""
    n = r.shape[0]
    owner = np.empty(m, dtype=np.int64)
    rate = np.empty(m)
    owner[:n] = np.arange(n)
    rate[:n] = r
    for b, dr in ((0, 0.0), (1, 0.0), (2, bc.RHO_BUMP), (3, -bc.RHO_BUMP)):
        k = bump[:, b]
        sel = k >= 0
        owner[k[sel]] = np.flatnonzero(sel)
        rate[k[sel]] = r[sel] + dr
    return owner, rate


__all__: Sequence[str] = (
    "FP32_ATOL_K",
    "FP32_MAX_STEPS",
    "FP32_RTOL",
    "DIV_MAX_STEPS",
    "BBS_MAX_STEPS",
    "crr_batch_gpu",
)
