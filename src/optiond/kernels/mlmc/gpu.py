"""Multilevel Monte Carlo level sampler on NVIDIA GPUs (CuPy RawModule over ``mlmc.cu``).

The GPU twin of :class:`optiond.kernels.mlmc.cpu.CPUSampler`: the same interface (``run``
takes ``[(level, start, count, chunk_size)]`` and returns chunk sums, shape (chunks, 8)), the
same Philox4x32-10 counters and Box–Muller normals, the same Milstein arithmetic. CuPy is
imported lazily (through :mod:`optiond.kernels.gpu`), so this module imports on machines
without CUDA; constructing a sampler there raises :class:`optiond.kernels.gpu.GPUError` (no CuPy,
no device).

One MLMC iteration is one :meth:`GPUSampler.run`: a small int64 work table goes to the
device, ONE launch of ``mlmc_tiles<payoff>`` samples all levels (blocks of different levels run
side by side, so the few deep-level samples overlap the many shallow ones), one launch of
``mlmc_chunk_sums`` reduces tile partials to chunk sums on the device, and one device-to-host
copy of the chunk sums is the iteration's only synchronisation.

Layouts (see ``mlmc.cu``): levels below ``team_levels[0]`` are sample-parallel (a thread per
path), levels from ``team_levels[0]`` a warp per path, from ``team_levels[1]`` a 256-thread
block per path (timestep-parallel: segments of the path's Milstein factor product combined in a
fixed tree). The choice depends only on the level, and the tile sizes only on the global chunk
size, so for a fixed seed the sums are bit-identical whatever the number of MPI ranks.

Agreement with the CPU (same seed and counters):

* sample-parallel levels: the same operations in the same order (``--fmad=false``); payoffs
  differ only through the last-bit differences of ``log``/``sincos``/``erfc`` between the CUDA
  math library and the host's libm, and sums through their summation trees: relative
  differences ~1e-15 per sample, ~1e-13 in level sums;
* team levels: the path is a product in a different association order, so relative
  differences ~1e-15 * sqrt(steps) per sample: still rounding level;
* ``fast=True``: Box–Muller in single precision with the special-function units and
  multiply-add contraction: normals differ by ~1e-7, so prices agree with the CPU only
  statistically (within the standard error), not to rounding.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from .. import gpu as _gpu
from .cpu import NSTAT

BLOCK = 256
T_COLS = 10
_SOURCE = Path(__file__).with_name("mlmc.cu")

#: the earlier names of this module's probe, kept for the old path ``optiond.kernels.mlmc_gpu``
#: (the one probe is :mod:`optiond.kernels.gpu`)
device_count = _gpu.device_count
gpu_available = _gpu.available


def get_module(payoff: int, fast: bool = False, min_blocks: int = 3, sincospi: bool = False):
    """The compiled RawModule for ``payoff`` (cached per payoff, variant, register budget and
    device by :func:`optiond.kernels.gpu.module`).

    Raises:
        GPUError: no CuPy, or the compile failed.
    """
    opts = ("--std=c++14", "-DMLMC_FAST=1") if fast else ("--std=c++14", "--fmad=false")
    opts += (f"-DMLMC_MINB={int(min_blocks)}",) + (("-DMLMC_SINCOSPI=1",) if sincospi else ())
    return _gpu.module(_SOURCE, opts, name_expressions=[f"mlmc_tiles<{int(payoff)}>"])


def philox_kat_gpu(counters, keys) -> np.ndarray:
    """Philox4x32-10 on the GPU of counters (n, 4) under keys (n, 2): uint32 array (n, 4)."""
    cp = _gpu.cupy()
    c = np.asarray(counters, dtype=np.uint32).reshape(-1, 4)
    k = np.asarray(keys, dtype=np.uint32).reshape(-1, 2)
    inp = cp.asarray(np.concatenate([c, k], axis=1).ravel())
    out = cp.zeros(4 * len(c), dtype=cp.uint32)
    fn = get_module(0).get_function("philox_kat")
    fn(((len(c) + 127) // 128,), (128,), (inp, out, np.int32(len(c))))
    return out.get().reshape(-1, 4)


class GPUSampler:
    """Level sampler on one GPU (see module docstring).

    Args:
        payoff: payoff code; spot, strike, expiry, rate, dividend_yield, volatility: floats;
        key: Philox key words; payout: digital cash amount;
        device_id: CUDA device to use (None: the current one);
        fast: single-precision Box–Muller variant (statistical agreement with the CPU only);
        team_levels: (first warp-per-path level >= 7, first block-per-path level >= 10).
        min_blocks: ``__launch_bounds__`` blocks per SM (register budget 65536 / (256 min_blocks));
            None: 3 (80 registers), but 2 for the Asian payoffs, which would spill at 80.
        sincospi: Box–Muller angle by ``sincospi(2u)`` instead of ``sincos(2 pi u)`` (no range
            reduction; the same angle rounded differently, so still rounding-level agreement).

    Raises:
        GPUError: CuPy missing or no CUDA device. ValueError: bad team_levels.
    """

    device = "gpu"

    def __init__(self, payoff, spot, strike, expiry, rate, dividend_yield, volatility, key, payout=1.0, device_id=None,
                 fast=False, team_levels=(8, 12), min_blocks=None, sincospi=False):
        cp = _gpu.cupy()
        if not _gpu.available():
            raise _gpu.GPUError("no CUDA device is visible")
        if not (team_levels[0] >= 7 and team_levels[1] >= max(10, team_levels[0])):
            raise ValueError("team_levels must satisfy 7 <= first and 10 <= second >= first")
        self.cp = cp
        self.device_id = cp.cuda.runtime.getDevice() if device_id is None else int(device_id)
        self._dev = cp.cuda.Device(self.device_id)
        self._dev.use()
        self.payoff = int(payoff)
        self.fast = bool(fast)
        self.team_levels = tuple(team_levels)
        if min_blocks is None:
            min_blocks = 2 if self.payoff >= 4 else 3  # ASIAN_CALL, ASIAN_PUT
        self.min_blocks = int(min_blocks)
        mod = get_module(self.payoff, self.fast, self.min_blocks, sincospi)
        self._tiles = mod.get_function(f"mlmc_tiles<{self.payoff}>")
        self._chunks = mod.get_function("mlmc_chunk_sums")
        mu = float(rate) - float(dividend_yield)
        self._args = (np.float64(spot), np.float64(strike), np.float64(expiry), np.float64(mu), np.float64(volatility),
                      np.float64(math.exp(-float(rate) * float(expiry))), np.float64(payout),
                      np.uint32(key[0]), np.uint32(key[1]))
        self._partial = cp.empty(0, dtype=cp.float64)
        self._out = cp.empty(0, dtype=cp.float64)
        self._ev0, self._ev1 = cp.cuda.Event(), cp.cuda.Event()
        self.level_seconds: dict[int, float] = {}
        self.launches = 0
        self.samples_done = 0
        self.kernel_seconds = 0.0

    # -- layout
    def team_size(self, level: int) -> int:
        if level >= self.team_levels[1]:
            return BLOCK
        if level >= self.team_levels[0]:
            return 32
        return 1

    def tile_size(self, level: int, chunk_size: int) -> int:
        """Samples per 256-thread block: a function of the level and the (global) chunk size only."""
        ts = self.team_size(level)
        if ts == 1:
            spt = max(1, min(64, chunk_size // (BLOCK * 16)))
            return min(BLOCK * spt, chunk_size)
        if ts == 32:
            return min(8 * max(1, min(16, chunk_size // (8 * 64))), chunk_size)
        return max(1, min(16, chunk_size // 64))

    def table(self, requests):
        """The int64 work table (rows: level, start, count, cs, tile, tpc, ts, block_off, chunk_off,
        n_chunks), the total number of blocks and of chunks."""
        rows, blocks, chunks = [], 0, 0
        for level, start, count, cs in requests:
            if count <= 0:
                continue
            tile = self.tile_size(level, cs)
            tpc = -(-cs // tile)
            nch = -(-count // cs)
            rows.append((level, start, count, cs, tile, tpc, self.team_size(level), blocks, chunks, nch))
            blocks += nch * tpc
            chunks += nch
        return np.array(rows, dtype=np.int64).reshape(-1, T_COLS), blocks, chunks

    # -- sampling
    def run(self, requests):
        cp = self.cp
        tab, blocks, chunks = self.table(requests)
        self.samples_done += int(tab[:, 2].sum()) if len(tab) else 0
        if chunks == 0:
            return np.zeros((0, NSTAT))
        with self._dev:
            d_tab = cp.asarray(tab)
            if self._partial.size < blocks * NSTAT:
                self._partial = cp.empty(max(blocks * NSTAT, 2 * self._partial.size), dtype=cp.float64)
            if self._out.size < chunks * NSTAT:
                self._out = cp.empty(max(chunks * NSTAT, 2 * self._out.size), dtype=cp.float64)
            n = np.int32(len(tab))
            t0 = time.perf_counter()
            self._ev0.record()
            self._tiles((blocks,), (BLOCK,), (d_tab, n) + self._args + (self._partial,))
            warps = chunks * 32
            self._chunks(((warps + BLOCK - 1) // BLOCK,), (BLOCK,), (d_tab, n, self._partial, self._out, np.int64(chunks)))
            self._ev1.record()
            host = self._out[: chunks * NSTAT].get()  # the iteration's one synchronisation
            self.launches += 2
            try:
                secs = cp.cuda.get_elapsed_time(self._ev0, self._ev1) / 1e3
            except Exception:
                secs = time.perf_counter() - t0
        self.kernel_seconds += secs
        # apportion the launch's time to levels by their path steps (one fused launch)
        work = {int(r[0]): int(r[2]) * (1.5 * (1 << int(r[0])) if r[0] else 1.0) for r in tab}
        tot = sum(work.values())
        for level, w in work.items():
            self.level_seconds[level] = self.level_seconds.get(level, 0.0) + secs * w / tot
        return host.reshape(chunks, NSTAT)

    def close(self):
        self._partial = self.cp.empty(0, dtype=self.cp.float64)
        self._out = self.cp.empty(0, dtype=self.cp.float64)
