"""CRR binomial pricer on NVIDIA GPUs: batch kernels, the single-option pipeline, implied vols.

The CUDA C++ is ``kernels/cuda/binomial.cu``, compiled once per process with NVRTC through
CuPy's ``RawModule`` (CuPy caches the binary on disk, so later processes skip the compile).
CuPy is imported lazily: this module imports and its host-side helpers run without it, and
:func:`available` is False on machines with no CuPy or no GPU.

Same trees as the CPU reference
-------------------------------
Every tree runs the recurrence of :func:`optiond.kernels.binomial_cpu.crr_tree` (leaves from
``exp``, ``V[j] = max(pu V[j+1] + pd V[j], X[j])``, the exercise value carried by
``X <- X u + c`` and re-anchored from ``exp`` when ``(N - t) % 64 == 0``), with the same fused
multiply-adds as the reference's compiled loop. The per-tree scalars ``a, u, pu, pd, c`` are
computed on the host bit for bit as ``crr_tree`` computes them (:func:`_fill_params`,
:func:`pd_fma_mode`): a one-ulp difference in ``u`` or ``p`` would move an N = 1e5 price by
~1e-10 relative. Leaves and re-anchored exercise values take one ``exp`` per row of G nodes and
``e <- e u^2`` along the row (a few ulps from an ``exp`` per node). Rows of nodes whose exercise
value cannot be positive during a run of levels (puts above, calls below the exercise boundary
``(t + ln(K/S)/a) / 2``, with two nodes of margin) skip the ``X`` recurrence and the ``max``:
there ``max(cont, X) == cont`` exactly, so this changes no result. Measured on an H200 against
``crr_batch`` over the test grid: max relative error 1.7e-13 (N = 31, large steps ``a``),
2.2e-14 (N = 1000), 1.6e-14 (N = 4097), 8e-15 (N = 1e4); the test bound is 1e-12.

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
rounding the probabilities to floats and from float rounding per level. Measured on an H200
against the FP64 reference over the test grid (moneyness 0.8-1.25, sigma 0.1-0.6, T 0.25-5,
r 0-10 %, q 0-3 %): max relative error 1.9e-5 at N = 31, 6.2e-6 at N = 1000 (batch kernel),
1.7e-5 at N = 1000 (block kernel), 2.5e-5 at N = 4097, 2.2e-5 at N = 1e4, absolute
<= 6.6e-6 * K. Stated bound: ``|fp32 - fp64| <= FP32_RTOL * price + FP32_ATOL_K * K``
= 1e-4 * price + 1e-5 * K (the measurements use at most 8.4 % of it). Exponents are clamped at
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
  levels 1-2 of the base tree, vega and rho by central bumps (``binomial_cpu.VEGA_BUMP`` /
  ``RHO_BUMP``), launched as four more "virtual" trees per option in the same launch.
* pipeline (one option, large N): a throughput phase over the whole GPU (cooperative launch,
  one grid barrier per slab of K levels, 1024-node register chunks, each slab's outputs
  spread evenly over the resident warps), then grid phases with 256- and 128-node chunks
  (more, shorter warps: less latency per level; K = 96 instead of 64 when the phase starts at
  or below ``NARROW_LEVELS``), a latency phase in one block with the tree in shared memory,
  and an optional CPU tail; phase boundaries from the calibration
  (:mod:`optiond.kernels.dispatch`, :class:`PipelinePlan`). The latency phases unroll their
  level loops 4 deep (the batch kernels 2). Trees of at most ``PipelinePlan.reg_levels`` steps
  can instead run whole in one block that keeps the tree in registers (``crr_pipe_reg``: no
  grid barrier, halos between warps through shared memory); off by default, as the grid
  kernel is as fast on an H200 (N = 1000: 69.0 against 71.9 us). Trees of at most
  ``PipelinePlan.cluster_levels`` steps (default 4095) run whole in one thread-block cluster
  (``crr_pipe_cluster``, sm_90: the same register kernel over up to 16 multiprocessors, halos
  through distributed shared memory, one cluster barrier per 64 levels): N = 1000 in 57.6
  against 67.3 us on the grid phases, N = 4000 in 205 against 231 us. Device times (``timing``)
  start after the launches' host-side preparation (slicing, arguments); with
  ``timing["gate"]`` the launches queue behind a stream gate, so the window holds the GPU's
  work and launch latency only (:mod:`optiond.kernels.gpu_timer`).
* pruned pipeline (FP64, N >= ``PipelinePlan.prune_steps``): the grid kernel with 128-node chunks
  computes, slab by slab, only the window between the tree's exactly-known zero side and
  American exercise side (:func:`window_sides`; binomial.cu, "Pruned windows"), on a grid sized
  for the expected window (:func:`pruned_width`), the exercise values by shifting (binomial.cu,
  run_levels_shift): one at-the-money put at N = 1e5 in 5.08 ms against 8.5 ms dense, N = 1e6 in
  64.6 ms against 311 ms, on an H200, the same result.
* naive: one launch per level (the baseline of the benchmark).

Errors: CUDA failures and out-of-memory raise :class:`GPUError`; callers (the engine) fall back
to the CPU and say so. Inputs with the CRR probability outside [0, 1] raise
:class:`~optiond.kernels.binomial_cpu.CRRProbabilityError`, as on the CPU.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.core.extending import intrinsic

from ..columns import as_columns
from . import binomial_cpu as bc
from .gpu_timer import DeviceTimer
from .rootfind import (
    FB,
    IV_ABOVE,
    IV_BELOW,
    IV_INVALID,
    IV_NOT_CONVERGED,
    IV_OK,
    B,
    brent_init,
    brent_step_rows,
)

log = logging.getLogger(__name__)

CUDA_SOURCE = Path(__file__).with_name("cuda") / "binomial.cu"
NPAR = 16
REANCHOR = bc.REANCHOR
FP32_MAX_STEPS = 10_000
#: dynamic shared memory the latency-phase block may take (H100/H200 allow 227 KB per block)
SMEM_MAX = 200 * 1024
#: stated FP32 error against the FP64 reference: |fp32 - fp64| <= FP32_RTOL*|fp64| + FP32_ATOL_K*K
FP32_RTOL = 1e-4
FP32_ATOL_K = 1e-5
_FLT_LOG_MAX = math.log(float(np.finfo(np.float32).max))

#: disable the GPU path for this process (any non-empty value but "0")
DISABLE_ENV = "OPTIOND_DISABLE_GPU"


class GPUError(RuntimeError):
    """A GPU failure (no device, CUDA error, out of memory); the CPU path is the fall-back."""


# --------------------------------------------------------------------------- kernel variants

@dataclass(frozen=True)
class Variant:
    """One compiled instance of a templated kernel: nodes per lane ``G x R`` (chunk width
    ``32 G R``), slab depth ``K`` (tile kernels) and threads per block."""

    kernel: str
    dtype: str  # "double" | "float"
    G: int
    R: int
    K: int = 0
    threads: int = 128
    #: tile kernels: chunk slots per SM sub-partition over which a slab's outputs are spread
    #: evenly (0: fixed chunks of cw - K outputs; -1: one slot per resident warp)
    spread: int = 0
    #: grid phases starting at or below NARROW_LEVELS use K_narrow levels per slab instead of K
    #: (0: always K): fewer grid barriers where the GPU is far from full anyway
    K_narrow: int = 0
    #: crr_pipe_cluster: blocks per thread-block cluster (the kernel's __cluster_dims__)
    cluster: int = 0
    #: crr_pipe_grid: the instance with pruned windows (binomial.cu, PRUNE; the only pruned kernel)
    prune: bool = False

    @property
    def cw(self) -> int:
        return 32 * self.G * self.R

    @property
    def fwd(self) -> bool:
        return self.dtype == "float"

    @property
    def name(self) -> str:
        c = f", {self.cluster}" if self.kernel == "crr_pipe_cluster" else ""
        if self.kernel == "crr_pipe_grid":
            c = ", true" if self.prune else ", false"
        return f"{self.kernel}<{self.dtype}, {self.G}, {self.R}, {'true' if self.fwd else 'false'}{c}>"


def _warp(dtype, G, R):
    return Variant("crr_batch_warp", dtype, G, R, threads=128)


#: warp-per-tree variants by precision, narrowest first (the narrowest that holds the widest
#: tree of a launch is used: fewer registers, more warps per SM); at most 4 rows of 32 G nodes
#: (CRR_SKIP_ROWS in binomial.cu): the kernel skips the exercise value in rows where it is <= 0
WARP_VARIANTS = {
    "fp64": [_warp("double", 8, 1), _warp("double", 8, 2), _warp("double", 8, 4)],
    "fp32": [_warp("float", 8, 1), _warp("float", 8, 2), _warp("float", 8, 4)],
}
#: extra shapes compiled for the benchmark's comparison (8 rows: no exercise-row skipping)
BENCH_WARP_VARIANTS = [_warp("double", 4, 8), _warp("float", 4, 8)]
BLOCK_VARIANT = {"fp64": Variant("crr_batch_block", "double", 4, 4, K=64, threads=256),
                 "fp32": Variant("crr_batch_block", "float", 8, 2, K=64, threads=256)}
PIPE_BLOCK = {"fp64": Variant("crr_pipe_block", "double", 4, 1, K=32, threads=1024),
              "fp32": Variant("crr_pipe_block", "float", 8, 1, K=64, threads=1024)}
PIPE_GRID_BIG = {"fp64": Variant("crr_pipe_grid", "double", 2, 16, K=128, threads=128, spread=-1),
                 "fp32": Variant("crr_pipe_grid", "float", 4, 8, K=128, threads=128, spread=-1)}
PIPE_GRID_MID = {"fp64": Variant("crr_pipe_grid", "double", 2, 4, K=64, threads=128, spread=-1),
                 "fp32": Variant("crr_pipe_grid", "float", 4, 2, K=64, threads=128, spread=-1)}
PIPE_GRID_SMALL = {"fp64": Variant("crr_pipe_grid", "double", 4, 1, K=64, threads=128, K_narrow=96),
                   "fp32": Variant("crr_pipe_grid", "float", 8, 1, K=64, threads=128)}
NARROW_LEVELS = 15_000
#: the pipeline's whole tree for N <= PipelinePlan.reg_levels: one block, the tree in registers
#: (binomial.cu, crr_pipe_reg); K levels per slab, one warp per chunk of cw - K outputs, <= 32 warps
PIPE_REG = {"fp64": Variant("crr_pipe_reg", "double", 4, 1, K=32, threads=1024),
            "fp32": Variant("crr_pipe_reg", "float", 8, 1, K=32, threads=1024)}
#: the pipeline's whole tree for N <= PipelinePlan.cluster_levels: one thread-block cluster of
#: `cluster` blocks of up to threads / 32 warps (one per SM sub-partition), the tree in registers,
#: halos through distributed shared memory, one cluster barrier per slab of K levels (binomial.cu,
#: crr_pipe_cluster; sm_90). H200, one American put, device time against the grid phases:
#: FP64 N = 1000 57.6 / 67.3 us, 2000 106 / 121, 3000 154 / 175, 4000 205 / 231 (6000 with 6
#: warps per SM: 396 / 338); FP32 (K = 128) 77 / 111, 145 / 216, 285 / 432. K = 64 against 32:
#: 57.6 / 65.6 us at N = 1000 (a slab boundary costs ~0.6 us); 4, 8 or 16 blocks: the same.
#: Since the halo stores became one loop over consumer warps (binomial.cu, reg_tree; 56 registers
#: instead of 61), N = 1000 49.5 us against 51.9, N = 2000 95.4 against 100.4 (A/B, one H200);
#: with exercise values by shifting (binomial.cu, run_levels_shift) 45.3 and 86.3 us
PIPE_CLUSTER = {"fp64": Variant("crr_pipe_cluster", "double", 4, 1, K=64, threads=128, cluster=16),
                "fp32": Variant("crr_pipe_cluster", "float", 8, 1, K=128, threads=128, cluster=8)}
#: cluster shapes compiled for the benchmark's sweep (K is a launch argument: same kernels; K = 96
#: > cw / 2: each warp's halo from three warps. H200, N = 1000: 50.9 us against 49.5 with K = 64,
#: K = 112: 54.0; the slabs saved do not pay for the deeper halo recomputed and the longer stores)
BENCH_CLUSTER_VARIANTS = [Variant("crr_pipe_cluster", "double", 4, 1, K=32, threads=128, cluster=16),
                          Variant("crr_pipe_cluster", "double", 4, 1, K=96, threads=128, cluster=16),
                          Variant("crr_pipe_cluster", "double", 4, 1, K=64, threads=128, cluster=8),
                          Variant("crr_pipe_cluster", "double", 4, 1, K=64, threads=256, cluster=16)]
#: extra pipeline shapes compiled for the benchmark's sweep (4 rows: with exercise-row skipping)
BENCH_PIPE_VARIANTS = [Variant("crr_pipe_grid", "double", 8, 4, K=128, spread=-1),
                       Variant("crr_pipe_grid", "double", 4, 2, K=64, spread=-1)]


#: the pruned pipeline's kernel (PipelinePlan.prune): the grid kernel with 128-node chunks (4 per
#: lane) and pruned windows, K levels per slab (pruned_variant picks K). H200, one American put,
#: gated device time, all levels in this kernel: K = 64 / 96 / 112: N = 1e5 8.27 / 7.10 / 6.78 ms,
#: N = 1e6 82.5 / 78.9 / 94.9 ms; since the window is one slab stale and the exercise values
#: shift (binomial.cu), K = 96 / 104 / 112 / 120: N = 1e5 5.48 / 5.26 / 5.08 / 6.53 ms, N = 1e6
#: 64.6 / 63.1 / 79.2 / 114 ms; the 256- and 1024-node chunk kernels with pruned windows took
#: 8.0-11.7 ms and 78-135 ms (each warp's latency per level grows with its nodes per lane), the
#: 128-node chunk as 2 rows of 64 or 4 of 32 nodes 7.05 / 9.14 ms against 6.78 at N = 1e5
PIPE_PRUNED = Variant("crr_pipe_grid", "double", 4, 1, K=96, threads=128, prune=True)


def pruned_variant(N: int) -> Variant:
    """PIPE_PRUNED with K = 112 (fewer slabs, 16 outputs per warp) where the expected window
    needs at most one warp per SM sub-partition, else K = 96 (32 outputs per warp)."""
    sms = device_info()["sms"] if available() else 132
    if pruned_width(N, N, 0) / (PIPE_PRUNED.cw - 112) <= 4 * sms:
        return replace(PIPE_PRUNED, K=112)
    return PIPE_PRUNED


#: the device root find's warp shapes (binomial.cu, crr_iv_warp<G, R>; FP64, N + 1 <= 32 G R),
#: narrowest first, as WARP_VARIANTS["fp64"]
IV_WARP_SHAPES = ((8, 1), (8, 2), (8, 4))


def _iv_kernel_name(G: int, R: int) -> str:
    return f"crr_iv_warp<{G}, {R}>"


def _plain_names(clusters: bool = True) -> list[str]:
    """Kernels of the plain module; ``clusters``: with the sm_90 cluster kernels."""
    vs = [v for lst in WARP_VARIANTS.values() for v in lst] + BENCH_WARP_VARIANTS
    vs += list(BLOCK_VARIANT.values()) + list(PIPE_BLOCK.values()) + list(PIPE_REG.values())
    vs += [v for v in BENCH_PIPE_VARIANTS if v.kernel != "crr_pipe_grid"]
    if clusters:
        vs += list(PIPE_CLUSTER.values()) + BENCH_CLUSTER_VARIANTS
    return (sorted({v.name for v in vs}) + [_iv_kernel_name(G, R) for G, R in IV_WARP_SHAPES]
            + ["crr_naive_leaves", "crr_naive_step"])


def _coop_names() -> list[str]:
    vs = list(PIPE_GRID_BIG.values()) + list(PIPE_GRID_MID.values()) + list(PIPE_GRID_SMALL.values())
    vs.append(PIPE_PRUNED)
    vs += [v for v in BENCH_PIPE_VARIANTS if v.kernel == "crr_pipe_grid"]
    return sorted({v.name for v in vs})


# --------------------------------------------------------------------------- CuPy, lazily

_lock = threading.RLock()
_state: dict[str, Any] = {}


def _cupy():
    try:
        import cupy
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        raise GPUError(f"CuPy not importable: {e}") from e
    return cupy


def available() -> bool:
    """True when CuPy imports and sees at least one CUDA device (cached per process; set
    ``OPTIOND_DISABLE_GPU=1`` to force False)."""
    if os.environ.get(DISABLE_ENV, "0") not in ("", "0"):
        return False
    with _lock:
        if "available" not in _state:
            try:
                cp = _cupy()
                _state["available"] = cp.cuda.runtime.getDeviceCount() > 0
            except Exception as e:  # noqa: BLE001 (any failure means: no GPU here)
                log.debug("no GPU: %s", e)
                _state["available"] = False
        return _state["available"]


def device_info() -> dict:
    """Name, multiprocessor count and register file of the current device.

    Raises:
        GPUError: no GPU.
    """
    with _lock:
        if "info" not in _state:
            cp = _cupy()
            try:
                dev = cp.cuda.Device()
                props = cp.cuda.runtime.getDeviceProperties(dev.id)
                name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
                _state["info"] = {"id": dev.id, "name": name, "sms": int(props["multiProcessorCount"]),
                                  "regs_per_sm": int(props["regsPerMultiprocessor"]),
                                  "threads_per_sm": int(props["maxThreadsPerMultiProcessor"]),
                                  "cc": f"{props['major']}.{props['minor']}",
                                  "memory_bytes": int(props["totalGlobalMem"])}
            except Exception as e:
                raise GPUError(f"cannot query the GPU: {e}") from e
        return _state["info"]


def clusters_supported() -> bool:
    """Thread-block clusters (compute capability 9.0 and up): crr_pipe_cluster is compiled."""
    return int(device_info()["cc"].split(".")[0]) >= 9


def device_label() -> str:
    """``"gpu:<id> <name>"`` for Result.device."""
    info = device_info()
    return f"gpu:{info['id']} {info['name']}"


def _module(coop: bool):
    """The compiled RawModule (plain kernels, or the cooperative-launch grid kernels)."""
    key = "coop" if coop else "plain"
    with _lock:
        if key not in _state:
            cp = _cupy()
            code = CUDA_SOURCE.read_text()
            opts = ("-std=c++17",) + (("-DCRR_COOP=1",) if coop else ())
            clusters = not coop and clusters_supported()
            if not clusters:
                opts += ("-DCRR_NO_CLUSTER=1",)
            names = _coop_names() if coop else _plain_names(clusters)
            try:
                mod = cp.RawModule(code=code, options=opts, name_expressions=names, enable_cooperative_groups=coop)
                mod.compile()
            except Exception as e:
                raise GPUError(f"compiling {CUDA_SOURCE.name} failed: {e}") from e
            _state[key] = mod
        return _state[key]


def kernel(name: str, coop: bool = False):
    """A compiled kernel by its template name (see :class:`Variant`)."""
    mod = _module(coop)
    key = ("k", name)
    with _lock:
        if key not in _state:
            _state[key] = mod.get_function(name)
        return _state[key]


def resident_blocks(k, threads: int) -> int:
    """Blocks of ``threads`` threads of kernel ``k`` that fit on the whole device at once
    (registers and threads; these kernels use almost no shared memory)."""
    info = device_info()
    regs = max(int(k.num_regs), 1)
    per_warp = ((regs * 32 + 255) // 256) * 256
    warps_sm = info["regs_per_sm"] // per_warp
    wpb = (threads + 31) // 32
    per_sm = min(warps_sm // wpb, info["threads_per_sm"] // threads, 32)
    return max(per_sm, 1) * info["sms"]


def _gpu_call(fn: Callable, *a, **kw):
    """Run ``fn`` and turn CuPy/CUDA failures into :class:`GPUError`."""
    try:
        return fn(*a, **kw)
    except (GPUError, bc.CRRProbabilityError, ValueError):
        raise
    except Exception as e:
        raise GPUError(f"{type(e).__name__}: {e}") from e


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
def _fill_params(is_call, S, K, T, r, q, sigma, N, fwd, pd_fma, out):
    """One tree's parameter vector (layout P_* in binomial.cu). The FP64 scalars are bit for bit
    those of ``binomial_cpu.crr_tree``, whose prologue evaluates in IEEE order except
    ``pd = disc * (1 - p)``, which its fastmath build may turn into ``fma(-disc, p, disc)``
    (``pd_fma``; :func:`pd_fma_mode` finds out once per process). Written out here without
    fastmath, so no optimiser context can change them (the tests check the bits)."""
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
    out[10] = REANCHOR
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


@nb.njit(cache=True)
def _p_ok(T, r, q, sigma, N):
    p = bc.crr_probability(T, r, q, sigma, N)
    return p >= 0.0 and p <= 1.0


@nb.njit(cache=True)
def _tree_table(kind, style, S, K, T, r, q, sigma, steps, greeks, fwd, pd_fma=True):
    """Trees to run for n options: the base tree of each option, then (with ``greeks``) the
    bumped trees sigma +- VEGA_BUMP and r +- RHO_BUMP where the CPU's ``_bumped_diff`` would
    price them (p in [0, 1], sigma - h > 0).

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
            _fill_params(call, S[i], K[i], T[i], r_, q[i], s_, N, fwd, pd_fma, par[k])
            st[k] = N
            fl[k] = 1 if style[i] == 1 else 0
    return par, st, fl, bump


@nb.njit(cache=True)
def _assemble(S, T, r, sigma, steps, price, lv, bump, greeks, fwd):
    """(6, n) results from the tree prices and first levels, as ``binomial_cpu._batch_impl``."""
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
    CPU tail); the loop of ``binomial_cpu.crr_tree``, deliberately written out again: one shared
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
    for t in range(t0 - 1, -1, -1):
        if am:
            if (N - t) % REANCHOR == 0:
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
    """Whether this process's build of ``binomial_cpu.crr_tree`` rounds ``pd`` as
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
               warp_variant: Variant | None = None, timing: dict | None = None, route: str = "auto"):
    """Price m trees on the GPU, one launch per kernel kind: a warp per tree where the tree fits
    a warp's registers, a block per tree otherwise (both persistent, longest trees first).

    Returns ``(price (m,), lv (m, 6))`` as float64 NumPy arrays (lv NaN where not computed).
    ``timing``, if given, receives ``device_s``: CUDA-event time of the kernels (after the
    uploads and the launches' host-side preparation, before the copy back), in seconds; see
    :class:`optiond.kernels.gpu_timer.DeviceTimer` for ``timing["gate"]``.
    ``route``: ``"auto"``, or ``"warp"`` / ``"block"`` to force one kernel (tests and benchmarks).
    """
    cp = _cupy()
    m = int(par.shape[0])
    if m == 0:
        return np.empty(0), np.empty((0, 6))
    wv_list = WARP_VARIANTS[precision]
    if route not in ("auto", "warp", "block"):
        raise ValueError(f"route must be auto, warp or block, not {route!r}")
    in_warp = steps + 1 <= (warp_variant or wv_list[-1]).cw
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
            k = kernel(wv.name)
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


def crr_batch_gpu(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps, greeks=True,
                  precision="fp64", timing: dict | None = None, warp_variant: Variant | None = None,
                  route: str = "auto"):
    """Price arrays of options on CRR trees on the GPU; the same contract as
    :func:`optiond.kernels.binomial_cpu.crr_batch`.

    Args:
        kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps: as
            ``crr_batch`` (shape (n,) or scalars; steps 1 ... 1e7, mixed N in one launch).
        greeks: also delta, gamma, theta (from the tree) and vega, rho (central bumps, as the
            CPU's ``_bumped_diff``); they cost up to four more trees per option.
        precision: ``"fp64"`` (matches the CPU to ~1e-14 relative) or ``"fp32"`` (N <= 1e4;
            error <= FP32_RTOL * price + FP32_ATOL_K * strike, see the module docstring).
        timing: optional dict that receives ``device_s`` (CUDA-event time of the launches).
        warp_variant, route: force a kernel shape or kernel (tests, benchmarks).

    Returns:
        float64 array (6, n): price, delta, gamma, theta, vega, rho (NaN rows without greeks).

    Raises:
        CRRProbabilityError: p outside [0, 1] for some option.
        ValueError: fp32 with N > 1e4, or an unknown precision.
        GPUError: no GPU, a CUDA error or out of device memory.
    """
    kind, style, S, K, T, r, q, s, N = _columns(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, steps)
    _check_p(T, r, q, s, N)
    fwd = _check_precision(precision, N)
    if S.shape[0] == 0:
        return np.full((6, 0), np.nan)
    par, st, fl, bump = _tree_table(kind, style, S, K, T, r, q, s, N, bool(greeks), fwd, pd_fma_mode())
    price, lv = _gpu_call(_run_trees, par, st, fl, precision, warp_variant, timing, route)
    return _assemble(S, T, r, s, N, price, lv, bump, bool(greeks), fwd)


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


# --------------------------------------------------------------------------- implied volatility

def _gpu_price_evaluator(precision: str):
    def evaluate(kind, style, S, K, T, r, q, sigma, N):
        par, st, fl, _ = _tree_table(kind, style, S, K, T, r, q, sigma, N, False, precision == "fp32", pd_fma_mode())
        price, _ = _gpu_call(_run_trees, par, st, fl, precision)
        return price
    return evaluate


def crr_implied_vol_gpu(price, kind, style, spot, strike, expiry, rate, dividend_yield, steps, lo=bc.MIN_IV,
                        hi=bc.MAX_IV, xtol=1e-12, precision="fp64",
                        evaluator: Callable[..., np.ndarray] | None = None, max_iter: int = 200):
    """Implied volatilities of a whole chain by Brent's root find on the CRR tree price, the
    same Brent sequence per option as :func:`optiond.kernels.binomial_cpu.crr_implied_vol`, so
    the results agree with it.

    FP64 trees that fit a warp (N + 1 <= 1024) run the whole root find on the device in ONE
    launch (binomial.cu, ``crr_iv_warp``: a warp per option, each trial volatility's tree in
    its registers). Otherwise the loop runs here, vectorised: every Brent step prices all
    still-unconverged options in one batch launch (:func:`optiond.kernels.rootfind.brent_step_rows`).

    Args:
        price: market prices, shape (n,); other arguments as ``crr_implied_vol``.
        evaluator: ``f(kind, style, S, K, T, r, q, sigma, N) -> prices`` for the host loop
            (default: the GPU batch kernel, or the device root find where it applies); the CPU
            ``crr_batch`` can be passed for testing.
        max_iter: Brent steps per option (as the CPU's 200).

    Returns:
        ``(vol, status)`` as ``crr_implied_vol`` (float64 NaN where none; int8 IV_* codes).

    Raises:
        GPUError: a GPU failure (the caller falls back to the CPU).
    """
    p, kind, style, S, K, T, r, q, N, lo, hi = as_columns(price, (kind, np.int8), (style, np.int8), spot, strike, expiry,
                                                          rate, dividend_yield, (steps, np.int64), lo, hi)
    n = S.shape[0]
    f = evaluator or _gpu_price_evaluator(precision)
    vol = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int8)
    valid = np.isfinite(p) & (p >= 0.0)
    status[~valid] = IV_INVALID
    dt = T / N
    lo_i = np.maximum(lo, 1.0001 * np.abs(r - q) * np.sqrt(dt) + 1e-12)
    status[valid & (lo_i >= hi)] = IV_INVALID
    idx = np.flatnonzero(valid & (lo_i < hi))
    if idx.size == 0:
        return vol, status
    G, R = IV_WARP_SHAPES[-1]
    if evaluator is None and precision == "fp64" and int(N[idx].max()) + 1 <= 32 * G * R:
        vol[idx], status[idx] = _gpu_call(_iv_device, p[idx], kind[idx], style[idx], S[idx], K[idx], T[idx], r[idx],
                                          q[idx], N[idx], lo_i[idx], hi[idx], float(xtol), int(max_iter))
        return vol, status
    # both bracket ends of every option in one launch
    two = np.concatenate([idx, idx])
    sig = np.concatenate([lo_i[idx], hi[idx]])
    vals = f(kind[two], style[two], S[two], K[two], T[two], r[two], q[two], sig, N[two])
    flo = vals[:idx.size] - p[idx]
    fhi = vals[idx.size:] - p[idx]
    ftol = 1e-12 * np.maximum(1.0, p[idx])
    below = flo > ftol
    above = (~below) & (fhi < -ftol)
    status[idx[below]] = IV_BELOW
    status[idx[above]] = IV_ABOVE
    keep = ~(below | above)
    rows = idx[keep]
    if rows.size == 0:
        return vol, status
    states = np.empty((rows.size, 8))
    _init_rows(states, lo_i[rows], hi[rows], flo[keep], fhi[keep])
    ftol_r = ftol[keep]
    active = np.ones(rows.size, dtype=np.bool_)
    status[rows] = IV_NOT_CONVERGED
    for _ in range(max_iter):
        left = brent_step_rows(states, active, float(xtol), ftol_r)
        if left == 0:
            break
        a = np.flatnonzero(active)
        i = rows[a]
        states[a, FB] = f(kind[i], style[i], S[i], K[i], T[i], r[i], q[i], states[a, B], N[i]) - p[i]
    status[rows[~active]] = IV_OK
    vol[rows] = states[:, B]
    return vol, status


def _iv_device(p, kind, style, S, K, T, r, q, N, lo, hi, xtol: float, max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """The root find of :func:`crr_implied_vol_gpu` on the device (binomial.cu, ``crr_iv_warp``)
    for options with a valid bracket ``lo < hi`` (``lo`` already above the p-in-[0, 1] bound):
    persistent warps, longest trees first. Returns ``(vol, status)`` (status: the IV_* codes
    IV_OK, IV_BELOW, IV_ABOVE, IV_NOT_CONVERGED)."""
    cp = _cupy()
    m = int(p.shape[0])
    G, R = next(sh for sh in IV_WARP_SHAPES if 32 * sh[0] * sh[1] >= int(N.max()) + 1)
    k = kernel(_iv_kernel_name(G, R))
    opt = np.ascontiguousarray(np.column_stack([S, K, T, r, q, p, lo, hi]), dtype=np.float64)
    flags = (style == 1).astype(np.int32) | ((kind == 1).astype(np.int32) << 1)
    order = np.argsort(-N, kind="stable").astype(np.int32)
    ints = np.concatenate([N.astype(np.int32), flags, order, np.zeros(1, np.int32)])  # the queue counter: 0
    grid = min((m + 3) // 4, resident_blocks(k, 128))
    stream = cp.cuda.get_current_stream()
    with stream:
        d_opt = cp.asarray(opt)
        d_int = cp.asarray(ints)
        d_out = cp.empty(m, dtype=cp.float64)
        d_st = cp.empty(m, dtype=cp.int32)
        k((grid,), (128,), (d_opt, d_int[:m], d_int[m:2 * m], d_int[2 * m:3 * m], np.int32(m), d_int[3 * m:],
                           np.float64(xtol), np.int32(max_iter), np.int32(1 if pd_fma_mode() else 0), np.int32(REANCHOR),
                           d_out, d_st))
        vol = cp.asnumpy(d_out, stream=stream)
        st = cp.asnumpy(d_st, stream=stream)
        stream.synchronize()
    return vol, _IV_CODES[st]


#: crr_iv_warp's status codes 0..3 as the IV_* codes
_IV_CODES = np.array([IV_OK, IV_BELOW, IV_ABOVE, IV_NOT_CONVERGED], dtype=np.int8)


@nb.njit(cache=True)
def _init_rows(states, a, b, fa, fb):
    for i in range(states.shape[0]):
        brent_init(states[i], a[i], b[i], fa[i], fb[i])


def cpu_evaluator(kind, style, S, K, T, r, q, sigma, N):
    """Tree prices on the CPU (``crr_batch``): the evaluator for testing the vectorised root
    find without a GPU."""
    return bc.crr_batch(kind, style, S, K, T, r, q, sigma, N, greeks=False)[0]


__all__: Sequence[str] = (
    "FP32_ATOL_K",
    "FP32_MAX_STEPS",
    "FP32_RTOL",
    "GPUError",
    "PipelinePlan",
    "available",
    "cpu_evaluator",
    "crr_batch_gpu",
    "crr_implied_vol_gpu",
    "crr_naive_gpu",
    "crr_pipeline_gpu",
    "crr_split_gpu",
    "device_info",
    "device_label",
)
