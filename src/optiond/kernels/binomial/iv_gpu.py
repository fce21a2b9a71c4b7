"""Implied volatilities on CRR trees on NVIDIA GPUs: Brent's root find, the same steps as
:func:`optiond.kernels.binomial.cpu.crr_implied_vol` (:mod:`optiond.kernels.brent`), either
whole on the device (binomial.cu ``crr_iv_warp``, one launch) or as a host loop of batch
launches (:func:`optiond.kernels.binomial.gpu.crr_batch_gpu`'s kernels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba as nb
import numpy as np

from ...columns import as_columns
from .. import gpu as gpus
from ..rootfind import FB, IV_ABOVE, IV_BELOW, IV_INVALID, IV_NOT_CONVERGED, IV_OK, B, brent_init, brent_step_rows
from . import cpu as bc
from .gpu import (BBS_MAX_STEPS, DIV_MAX_STEPS, REANCHOR, _dividend_table, _gpu_call, _run_trees, _tree_table, kernel, pd_fma_mode,
                  resident_blocks)
from .variants import IV_WARP_SHAPES, iv_kernel_name
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)


# --------------------------------------------------------------------------- implied volatility

def _gpu_price_evaluator(precision: str):
    def evaluate(kind, style, S, K, T, r, q, sigma, N):
        par, st, fl, _ = _tree_table(kind, style, S, K, T, r, q, sigma, N, False, precision == "fp32", pd_fma_mode())
        price, _ = _gpu_call(_run_trees, par, st, fl, precision)
        return price
    return evaluate


def crr_implied_vol_gpu(price, kind, style, spot, strike, expiry, rate, dividend_yield, steps, lo=bc.MIN_IV,
                        hi=bc.MAX_IV, xtol=1e-12, precision="fp64",
                        evaluator: Callable[..., np.ndarray] | None = None, max_iter: int = 200,
                        dividend_times=None, dividend_amounts=None, extrapolate=False):
    """Implied volatilities of a whole chain by Brent's root find on the CRR tree price, the
    same Brent steps per option as :func:`optiond.kernels.binomial.cpu.crr_implied_vol`, so
    the results agree with it.

    Trees that fit a warp (N + 1 <= 1024) run the whole root find on the device, in FP64
    whatever ``precision`` says, one launch per warp shape (binomial.cu, ``crr_iv_warp``: a warp
    per option, each trial volatility's tree in its registers; its parameters agree with
    :func:`~optiond.kernels.binomial.gpu._fill_params`' to about an ulp, CUDA's ``exp`` not
    being the host's, so a root can differ in its last bits). Otherwise the loop runs here,
    vectorised: every Brent step prices all
    still-unconverged options in one batch launch (:func:`optiond.kernels.rootfind.brent_step_rows`).

    Args:
        price: market prices, shape (n,); other arguments as ``crr_implied_vol``.
        evaluator: ``f(kind, style, S, K, T, r, q, sigma, N) -> prices`` for the host loop
            (default: the GPU batch kernel, or the device root find where it applies); the CPU
            ``crr_batch`` can be passed for testing.
        max_iter: Brent steps per option (as the CPU's 200).
        dividend_times, dividend_amounts: cash dividends as ``crr_implied_vol`` (the spot model): the
            root find runs
            on the device (``crr_iv_warp<G, R, true>``, the trees of ``crr_batch_warp_div``);
            every tree must fit a warp (N <= :data:`optiond.kernels.binomial.gpu.DIV_MAX_STEPS`).
        extrapolate: invert the BBSR value (``crr_implied_vol(extrapolate=True)``: smoothed trees
            of N and N // 2 steps, ``(N V_N - M V_M) / (N - M)`` in that order) on the device
            (``crr_iv_warp<G, R, false, true>``); the bracket's lower end from the coarser
            tree's step, as the CPU's. N <= :data:`optiond.kernels.binomial.gpu.BBS_MAX_STEPS`,
            no cash dividends, no evaluator.

    Returns:
        ``(vol, status)`` as ``crr_implied_vol`` (float64 NaN where none; int8 IV_* codes).

    Raises:
        GPUError: a GPU failure (the caller falls back to the CPU).
        ValueError: cash dividends or ``extrapolate`` with a tree wider than a warp holds, with
            an evaluator, or both together.
    """
    p, kind, style, S, K, T, r, q, N, lo, hi = as_columns(price, (kind, np.int8), (style, np.int8), spot, strike, expiry,
                                                          rate, dividend_yield, (steps, np.int64), lo, hi)
    n = S.shape[0]
    table = None
    if dividend_times is not None:
        S, div_t, div_a, nd = bc.cash_dividends(S, T, dividend_times, dividend_amounts)
    f = evaluator or _gpu_price_evaluator(precision)
    vol = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int8)
    valid = np.isfinite(p) & (p >= 0.0)
    status[~valid] = IV_INVALID
    if extrapolate and (evaluator is not None or dividend_times is not None or (n and int(N.max()) > BBS_MAX_STEPS)):
        raise ValueError(f"extrapolated implied volatilities on the GPU need N <= {BBS_MAX_STEPS}, the device root "
                         "find and no cash dividends")
    dt = T / (bc.coarse_steps(N) if extrapolate else N)  # the coarser tree has the larger step
    lo_i = np.maximum(lo, 1.0001 * np.abs(r - q) * np.sqrt(dt) + 1e-12)
    if dividend_times is not None:
        if evaluator is not None or (n and int(N.max()) > DIV_MAX_STEPS):
            raise ValueError(f"implied volatilities with cash dividends on the GPU need N <= {DIV_MAX_STEPS} and the "
                             "device root find")
        table = (nd, div_t, div_a)
    bracketed = np.isfinite(lo_i) & np.isfinite(hi) & (lo_i < hi)  # NaN-safe
    status[valid & ~bracketed] = IV_INVALID
    idx = np.flatnonzero(valid & bracketed)
    if idx.size == 0:
        return vol, status
    G, R = IV_WARP_SHAPES[-1]
    if evaluator is None and int(N[idx].max()) + 1 <= 32 * G * R:  # FP64 on the device, whatever precision
        cash = None
        if table is not None:
            nd, div_t, div_a = table
            sub = np.arange(idx.size)
            cash = _dividend_table(T[idx], r[idx], K[idx], kind[idx], style[idx], N[idx], r[idx], sub, div_t[idx],
                                   div_a[idx], nd[idx])
        vol[idx], status[idx] = _gpu_call(_iv_device, p[idx], kind[idx], style[idx], S[idx], K[idx], T[idx], r[idx],
                                          q[idx], N[idx], lo_i[idx], hi[idx], float(xtol), int(max_iter), cash,
                                          bool(extrapolate))
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


def _iv_device(p, kind, style, S, K, T, r, q, N, lo, hi, xtol: float, max_iter: int,
               cash: tuple | None = None, smooth: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The root find of :func:`crr_implied_vol_gpu` on the device (binomial.cu, ``crr_iv_warp``)
    for options with a valid bracket ``lo < hi`` (``lo`` already above the p-in-[0, 1] bound):
    persistent warps, longest trees first, one launch per warp shape (the narrowest that holds
    each option's tree: a few wide trees do not slow the rest), one copy back. Returns
    ``(vol, status)`` (status: the IV_* codes IV_OK, IV_BELOW, IV_ABOVE, IV_NOT_CONVERGED,
    which crr_iv_warp writes as 0..3). ``cash``: the options' dividend table
    (:func:`optiond.kernels.binomial.gpu._dividend_table`), run by ``crr_iv_warp<G, R, true>``;
    ``smooth``: the BBSR value's root find, ``crr_iv_warp<G, R, false, true>``."""
    cp = gpus.cupy()
    m = int(p.shape[0])
    opt = np.ascontiguousarray(np.column_stack([S, K, T, r, q, p, lo, hi]), dtype=np.float64)
    flags = (style == 1).astype(np.int32) | ((kind == 1).astype(np.int32) << 1)
    widths = [32 * G * R for G, R in IV_WARP_SHAPES]
    shape = np.searchsorted(widths, N + 1)  # index of the narrowest shape with N + 1 <= its width
    order = np.lexsort((-N, shape)).astype(np.int32)  # by shape, longest trees first within one
    starts = np.searchsorted(shape[order], np.arange(len(widths) + 1))
    counters = np.zeros(len(widths), np.int32)
    ints = np.concatenate([N.astype(np.int32), flags, order, counters])
    stream = cp.cuda.get_current_stream()
    with stream:
        d_opt = cp.asarray(opt)
        d_int = cp.asarray(ints)
        d_out = cp.empty(m, dtype=cp.float64)
        d_st = cp.empty(m, dtype=cp.int32)
        d_steps, d_flags, d_order, d_cnt = d_int[:m], d_int[m:2 * m], d_int[2 * m:3 * m], d_int[3 * m:]
        null = np.uint64(0)
        div_args = (null,) * 5
        if cash is not None:
            count, level, amount, v0 = cash
            div_args = (cp.asarray(count), cp.asarray(level), cp.asarray(amount), cp.asarray(v0), None)
        for s, (G, R) in enumerate(IV_WARP_SHAPES):
            a, b = int(starts[s]), int(starts[s + 1])
            if a == b:
                continue
            k = kernel(iv_kernel_name(G, R, cash is not None, smooth))
            grid = min((b - a + 3) // 4, resident_blocks(k, 128))
            if cash is not None:
                div_args = div_args[:4] + (cp.empty(grid * 4 * 3 * 32 * G * R, dtype=cp.float64),)
            k((grid,), (128,), (d_opt, d_steps, d_flags, d_order[a:b], np.int32(b - a), d_cnt[s:s + 1],
                               np.float64(xtol), np.int32(max_iter), np.int32(1 if pd_fma_mode() else 0),
                               np.int32(REANCHOR), d_out, d_st) + div_args)
        vol = cp.asnumpy(d_out, stream=stream)
        st = cp.asnumpy(d_st, stream=stream)
        stream.synchronize()
    return vol, st.astype(np.int8)


assert (IV_OK, IV_BELOW, IV_ABOVE, IV_NOT_CONVERGED) == (0, 1, 2, 3)  # crr_iv_warp writes these codes


@nb.njit(cache=True)
def _init_rows(states, a, b, fa, fb):
    for i in range(states.shape[0]):
        brent_init(states[i], a[i], b[i], fa[i], fb[i])


def cpu_evaluator(kind, style, S, K, T, r, q, sigma, N):
    """Tree prices on the CPU (``crr_batch``): the evaluator for testing the vectorised root
    find without a GPU."""
    return bc.crr_batch(kind, style, S, K, T, r, q, sigma, N, greeks=False)[0]


__all__: Sequence[str] = ("cpu_evaluator", "crr_implied_vol_gpu")
