"""The kernel instances compiled from ``binomial.cu``: :class:`Variant` (one instance of a
templated kernel), the tables the batch kernels, the pipeline and the device root find use, the
shapes compiled only for the benchmark's comparisons, and the name lists that the compiled
module is built with (:func:`optiond.kernels.binomial.gpu.kernel`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
#: crr_pipe_cluster; sm_90); device times against the grid phases: BENCHMARKS.md
PIPE_CLUSTER = {"fp64": Variant("crr_pipe_cluster", "double", 4, 1, K=64, threads=128, cluster=16),
                "fp32": Variant("crr_pipe_cluster", "float", 8, 1, K=128, threads=128, cluster=8)}
#: cluster shapes compiled for the benchmark's sweep (K is a launch argument: same kernels; K = 96
#: > cw / 2: each warp's halo from three warps; the slabs saved do not pay for the deeper halo
#: recomputed and the longer stores: BENCHMARKS.md)
BENCH_CLUSTER_VARIANTS = [Variant("crr_pipe_cluster", "double", 4, 1, K=32, threads=128, cluster=16),
                          Variant("crr_pipe_cluster", "double", 4, 1, K=96, threads=128, cluster=16),
                          Variant("crr_pipe_cluster", "double", 4, 1, K=64, threads=128, cluster=8),
                          Variant("crr_pipe_cluster", "double", 4, 1, K=64, threads=256, cluster=16)]
#: extra pipeline shapes compiled for the benchmark's sweep (4 rows: with exercise-row skipping)
BENCH_PIPE_VARIANTS = [Variant("crr_pipe_grid", "double", 8, 4, K=128, spread=-1),
                       Variant("crr_pipe_grid", "double", 4, 2, K=64, spread=-1)]


#: the pruned pipeline's kernel (PipelinePlan.prune): the grid kernel with 128-node chunks (4 per
#: lane) and pruned windows, K levels per slab (pruned_variant picks K; the K, chunk widths and
#: layouts tried, with their device times: BENCHMARKS.md)
PIPE_PRUNED = Variant("crr_pipe_grid", "double", 4, 1, K=96, threads=128, prune=True)


#: the device root find's warp shapes (binomial.cu, crr_iv_warp<G, R>; FP64, N + 1 <= 32 G R),
#: narrowest first, as WARP_VARIANTS["fp64"]
IV_WARP_SHAPES = tuple((v.G, v.R) for v in WARP_VARIANTS["fp64"])


def iv_kernel_name(G: int, R: int, dividends: bool = False, smooth: bool = False) -> str:
    """``smooth``: the root find on the BBSR value (binomial.cu, ``crr_iv_warp<G, R, false, true>``)."""
    return f"crr_iv_warp<{G}, {R}, {'true' if dividends else 'false'}{', true' if smooth else ''}>"


#: the smoothed-last-step (BBS) warp kernel's shapes (binomial.cu, crr_batch_warp<double, G, R,
#: false, true>; FP64, N + 1 <= 32 G R), narrowest first, as WARP_VARIANTS["fp64"]
BBS_WARP_SHAPES = IV_WARP_SHAPES


def bbs_kernel_name(G: int, R: int) -> str:
    return f"crr_batch_warp<double, {G}, {R}, false, true>"


#: the cash-dividend warp kernel's shapes (binomial.cu, crr_batch_warp_div<G, R>; FP64,
#: N + 1 <= 32 G R), narrowest first, as WARP_VARIANTS["fp64"]
DIV_WARP_SHAPES = IV_WARP_SHAPES


def div_kernel_name(G: int, R: int) -> str:
    return f"crr_batch_warp_div<{G}, {R}>"


def plain_names(clusters: bool = True) -> list[str]:
    """Kernels of the plain module; ``clusters``: with the sm_90 cluster kernels."""
    vs = [v for lst in WARP_VARIANTS.values() for v in lst] + BENCH_WARP_VARIANTS
    vs += list(BLOCK_VARIANT.values()) + list(PIPE_BLOCK.values()) + list(PIPE_REG.values())
    vs += [v for v in BENCH_PIPE_VARIANTS if v.kernel != "crr_pipe_grid"]
    if clusters:
        vs += list(PIPE_CLUSTER.values()) + BENCH_CLUSTER_VARIANTS
    return (sorted({v.name for v in vs}) + [iv_kernel_name(G, R, d) for G, R in IV_WARP_SHAPES for d in (False, True)]
            + [iv_kernel_name(G, R, smooth=True) for G, R in IV_WARP_SHAPES]
            + [div_kernel_name(G, R) for G, R in DIV_WARP_SHAPES] + [bbs_kernel_name(G, R) for G, R in BBS_WARP_SHAPES]
            + ["crr_naive_leaves", "crr_naive_step"])


def coop_names() -> list[str]:
    vs = list(PIPE_GRID_BIG.values()) + list(PIPE_GRID_MID.values()) + list(PIPE_GRID_SMALL.values())
    vs.append(PIPE_PRUNED)
    vs += [v for v in BENCH_PIPE_VARIANTS if v.kernel == "crr_pipe_grid"]
    return sorted({v.name for v in vs})
