"""The gold reference of the MLMC level sampler: geometric Brownian motion on the CPU (numba).

One MLMC level ``l`` simulates, for each sample, a fine path of ``nf = 2^l`` Milstein steps
and (for l >= 1) the coupled coarse path of ``nc = nf/2`` steps driven by the same Brownian
increments, and returns the sums of powers of ``P_l - P_{l-1}`` and of ``P_l`` that the
adaptive driver (:mod:`optiond.kernels.mlmc`) needs. This is the level function ``mlmc_l`` of
Giles (2015), "Multilevel Monte Carlo methods", Acta Numerica 24, §2 (Algorithm 1) and of
his MATLAB ``mcqmc06.m`` tests, for the model

    dS = (r - q) S dt + sigma S dW   (risk-neutral GBM, continuous dividend yield q)

with the Milstein scheme (Giles 2008, "Improved multilevel Monte Carlo convergence using
the Milstein scheme", MCQMC 2006, eq. (2)), written multiplicatively:

    S_{n+1} = S_n * f(dW_n),   f(w) = (1 + mu h - sigma^2 h / 2) + w (sigma + sigma^2 w / 2),

``mu = r - q``, ``h`` the step and ``dW_n ~ N(0, h)``. The coarse increment is the sum of the
two fine increments it spans. Payoffs and their fine/coarse coupling (Giles 2008 §4):

* ``CALL``/``PUT``: ``max(S_T - K, 0)`` / ``max(K - S_T, 0)`` at each path's end.
* ``DIGITAL_CALL``/``DIGITAL_PUT``: cash-or-nothing paying ``payout``. The last time step is
  replaced by its conditional expectation (the Gaussian one-step approximation, Giles 2008
  §4.3): the fine path uses ``payout * Phi((S' (1 + mu h_f) - K) / (sigma S' sqrt(h_f)))``
  with ``S'`` the value before its last step; the coarse path conditions also on the first fine
  increment ``dW'`` of its last step: ``payout * Phi((S'_c (1 + mu h_c) + sigma S'_c dW' - K)
  / (sigma S'_c sqrt(h_f)))``. This smooths the discontinuity, giving beta ≈ 1.5 instead of
  0.5; at level 0 the estimator is deterministic (variance 0).
* ``ASIAN_CALL``/``ASIAN_PUT``: the arithmetic average ``A = (1/T) ∫ S dt`` by the trapezoidal
  rule plus Giles' Brownian-interpolation term: each step adds ``h (S_n + S_{n+1}) / 2 +
  sigma S_n dI_n`` with ``dI_n = ∫ (W(t) - W_n - (t - t_n) dW_n / h) dt ~ N(0, h^3 / 12)``
  independent of ``dW_n``; on the coarse path ``dI_c = dI_1 + dI_2 + h_f (dW_1 - dW_2) / 2``
  (exact for the Brownian bridge), Giles 2008 §4.2. Payoff ``max(A - K, 0)`` / ``max(K - A, 0)``.

All payoffs are discounted by ``exp(-r T)``.

Random numbers (see :mod:`optiond.kernels.mlmc.philox`): sample ``n`` of level ``l`` reads the
Philox4x32-10 blocks with counter ``(g, n mod 2^32, n div 2^32, l)`` under key = seed. For
call/put/digital one normal per fine step: fine steps ``4g .. 4g+3`` take the Box–Muller pairs
of words (0, 1) and (2, 3) of block ``g`` (pair ``p`` of fine steps uses block ``p // 2``,
words (0, 1) for even ``p``, (2, 3) for odd); for the Asian two normals per step: pair ``p``
uses block ``p``, words (0, 1) for ``dW`` of its two steps and (2, 3) for their ``dI``. At
level 0 (one step) neighbouring samples share a block (:func:`level0_normals`): four samples a
block (two for the Asian), which halves the dominant cost of the coarsest level. So a
sample's numbers depend only on (seed, level, sample index, step): not on threads, chunking,
ranks or device.

Exact level 0: the level-0 payoff, its normals and its exact expectation ``E[P_0]`` (computed on
the host instead of sampled, the driver's default) are in :mod:`optiond.kernels.mlmc.level0`.

Statistics: per sample, ``d = P_l - P_{l-1}`` (``P_0`` at level 0) and ``f = P_l``; a level
run returns float64 sums ``[Σd, Σd², Σd³, Σd⁴, Σf, Σf², Σf³, Σf⁴]`` (``NSTAT = 8``). Sums are
deterministic: each *unit* of ``unit_size(l)`` consecutive samples is summed in sample order
by one thread, each *chunk* (a run of units fixed by the driver) sums its units in order, so
the result is independent of thread count and of how chunks are spread over ranks.
"""

from __future__ import annotations

import math
import time

import numba as nb
import numpy as np

from ... import runctl
from .level0 import (  # noqa: F401  (the payoff codes and level0_mean: re-exported for the earlier path)
    ASIAN_CALL,
    ASIAN_PUT,
    CALL,
    DIGITAL_CALL,
    DIGITAL_PUT,
    PAYOFF_CODES,
    PAYOFF_NAMES,
    PUT,
    _ncdf,
    level0_mean,
    level0_normals,
    level0_payoff,
)
from .philox import _MASK, _S32, box_muller_r, box_muller_theta, philox4x32_10
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

NSTAT = 8


def unit_size(level: int) -> int:
    """Samples in one deterministic summation unit at ``level``: 256 up to level 4, then halving
    per level (about 4096 fine steps of work per unit) down to 1 from level 12."""
    return 1 << max(0, 8 - max(0, level - 4))


@nb.njit(cache=True, nogil=True)
def mlmc_sample(payoff, l, n, k0, k1, S0, K, T, mu, sig, disc, payout):
    """One coupled MLMC sample: returns ``(P_l - P_{l-1}, P_l)`` for sample ``n`` of level ``l``
    (``(P_0, P_0)`` at level 0). ``k0, k1`` are the Philox key words (uint64 < 2^32); the
    other arguments as in :func:`run_level` (``mu = r - q``, ``disc = exp(-r T)``)."""
    s = np.uint64(n)
    slo = s & _MASK
    shi = s >> _S32
    lev = np.uint64(l)
    sig2h = 0.5 * sig * sig
    asian = payoff == ASIAN_CALL or payoff == ASIAN_PUT
    digital = payoff == DIGITAL_CALL or payoff == DIGITAL_PUT
    if l == 0:
        if digital:
            z = zi = 0.0
        else:
            z, zi = level0_normals(payoff, n, k0, k1)
        pf = level0_payoff(payoff, z, zi, S0, K, T, mu, sig, disc, payout)
        return pf, pf

    nf = 1 << l
    nc = nf >> 1
    hf = T / nf
    hc = 2.0 * hf
    sqhf = math.sqrt(hf)
    af_ = 1.0 + mu * hf - sig2h * hf
    ac_ = 1.0 + mu * hc - sig2h * hc
    sdi = hf * math.sqrt(hf / 12.0)
    xf = S0
    xc = S0
    xf_prev = S0
    xc_prev = S0
    dw1 = 0.0
    af = 0.5 * hf * S0
    ac = 0.5 * hc * S0
    x0 = x1 = x2 = x3 = np.uint64(0)
    for p in range(nc):
        if asian:
            x0, x1, x2, x3 = philox4x32_10(np.uint64(p), slo, shi, lev, k0, k1)
            r = box_muller_r(x0)
            t = box_muller_theta(x1)
        elif (p & 1) == 0:
            x0, x1, x2, x3 = philox4x32_10(np.uint64(p >> 1), slo, shi, lev, k0, k1)
            r = box_muller_r(x0)
            t = box_muller_theta(x1)
        else:
            r = box_muller_r(x2)
            t = box_muller_theta(x3)
        dw1 = sqhf * (r * math.cos(t))
        dw2 = sqhf * (r * math.sin(t))
        # two fine steps
        x_a = xf
        xf = xf * (af_ + dw1 * (sig + sig2h * dw1))
        xf_prev = xf
        xf = xf * (af_ + dw2 * (sig + sig2h * dw2))
        # one coarse step with the summed increment
        dwc = dw1 + dw2
        xc_prev = xc
        xc = xc * (ac_ + dwc * (sig + sig2h * dwc))
        if asian:
            ri = box_muller_r(x2)
            ti = box_muller_theta(x3)
            di1 = sdi * (ri * math.cos(ti))
            di2 = sdi * (ri * math.sin(ti))
            af += hf * xf_prev + sig * x_a * di1
            af += hf * xf + sig * xf_prev * di2
            ac += hc * xc + sig * xc_prev * (di1 + di2 + 0.5 * hf * (dw1 - dw2))
    if asian:
        avf = (af - 0.5 * hf * xf) / T
        avc = (ac - 0.5 * hc * xc) / T
        if payoff == ASIAN_CALL:
            pf = max(avf - K, 0.0)
            pc = max(avc - K, 0.0)
        else:
            pf = max(K - avf, 0.0)
            pc = max(K - avc, 0.0)
    elif digital:
        zf = (xf_prev + mu * xf_prev * hf - K) / (sig * xf_prev * sqhf)
        zc = (xc_prev + mu * xc_prev * hc + sig * xc_prev * dw1 - K) / (sig * xc_prev * sqhf)
        if payoff == DIGITAL_CALL:
            pf = payout * _ncdf(zf)
            pc = payout * _ncdf(zc)
        else:
            pf = payout * _ncdf(-zf)
            pc = payout * _ncdf(-zc)
    elif payoff == CALL:
        pf = max(xf - K, 0.0)
        pc = max(xc - K, 0.0)
    else:
        pf = max(K - xf, 0.0)
        pc = max(K - xc, 0.0)
    pf *= disc
    pc *= disc
    return pf - pc, pf


@nb.njit(cache=True, nogil=True, parallel=True)
def _unit_sums(payoff, l, start, count, unit, k0, k1, S0, K, T, mu, sig, disc, payout):
    n_units = (count + unit - 1) // unit
    out = np.zeros((n_units, NSTAT))
    asian = payoff == ASIAN_CALL or payoff == ASIAN_PUT
    digital = payoff == DIGITAL_CALL or payoff == DIGITAL_PUT
    per = 2 if asian else 4
    for u in nb.prange(n_units):
        a = start + u * unit
        b = min(a + unit, start + count)
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
        q_cached = -1
        z = np.zeros(4)
        zi = np.zeros(2)
        for n in range(a, b):
            if l == 0:
                # level 0: one Philox block and two Box-Muller pairs serve `per` samples
                if digital:
                    d = level0_payoff(payoff, 0.0, 0.0, S0, K, T, mu, sig, disc, payout)
                else:
                    q = n // per
                    if q != q_cached:
                        qq = np.uint64(q)
                        x0, x1, x2, x3 = philox4x32_10(np.uint64(0), qq & _MASK, qq >> _S32, np.uint64(0), k0, k1)
                        r0 = box_muller_r(x0)
                        t0 = box_muller_theta(x1)
                        r1 = box_muller_r(x2)
                        t1 = box_muller_theta(x3)
                        if asian:
                            z[0] = r0 * math.cos(t0)
                            z[1] = r0 * math.sin(t0)
                            zi[0] = r1 * math.cos(t1)
                            zi[1] = r1 * math.sin(t1)
                        else:
                            z[0] = r0 * math.cos(t0)
                            z[1] = r0 * math.sin(t0)
                            z[2] = r1 * math.cos(t1)
                            z[3] = r1 * math.sin(t1)
                        q_cached = q
                    j = n - q * per
                    d = level0_payoff(payoff, z[j], zi[j] if asian else 0.0, S0, K, T, mu, sig, disc, payout)
                f = d
            else:
                d, f = mlmc_sample(payoff, l, n, k0, k1, S0, K, T, mu, sig, disc, payout)
            d2 = d * d
            f2 = f * f
            s0 += d
            s1 += d2
            s2 += d2 * d
            s3 += d2 * d2
            s4 += f
            s5 += f2
            s6 += f2 * f
            s7 += f2 * f2
        out[u, 0] = s0
        out[u, 1] = s1
        out[u, 2] = s2
        out[u, 3] = s3
        out[u, 4] = s4
        out[u, 5] = s5
        out[u, 6] = s6
        out[u, 7] = s7
    return out


@nb.njit(cache=True, nogil=True)
def _chunk_sums(units, units_per_chunk):
    n_units = units.shape[0]
    n_chunks = (n_units + units_per_chunk - 1) // units_per_chunk
    out = np.zeros((n_chunks, NSTAT))
    for c in range(n_chunks):
        for u in range(c * units_per_chunk, min((c + 1) * units_per_chunk, n_units)):
            for k in range(NSTAT):
                out[c, k] += units[u, k]
    return out


def run_level(payoff, level, start, count, chunk_size, key, S0, K, T, mu, sig, disc, payout):
    """Chunk sums of one level over the samples ``start .. start + count - 1``.

    Args:
        payoff: payoff code (``CALL`` ... ``ASIAN_PUT``); level: l >= 0.
        start, count: first sample index and number of samples (count >= 0).
        chunk_size: samples per chunk, a multiple of ``unit_size(level)``; chunk ``c`` holds
            samples ``start + c*chunk_size ..`` (the last one may be short).
        key: Philox key words ``(k0, k1)``.
        S0, K, T, mu, sig, disc, payout: spot, strike, expiry (years), drift ``r - q``,
            volatility, discount factor ``exp(-r T)``, digital payout.

    Returns:
        float64 array, shape (ceil(count / chunk_size), NSTAT): the sums of each chunk.
    """
    unit = unit_size(level)
    if chunk_size % unit:
        raise ValueError(f"chunk_size {chunk_size} is not a multiple of the unit {unit} of level {level}")
    if count <= 0:
        return np.zeros((0, NSTAT))
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    units = _unit_sums(payoff, level, start, count, unit, k0, k1, S0, K, T, mu, sig, disc, payout)
    return _chunk_sums(units, chunk_size // unit)


#: fine path steps of one piece of a level run under a daemon job's control: the granularity of
#: cancellation inside an MLMC iteration
PIECE_PATH_STEPS = 1 << 23


class CPUSampler:
    """The level sampler interface of :func:`optiond.kernels.mlmc.mlmc_adaptive` on the CPU.

    Args:
        payoff: payoff code; spot, strike, expiry, rate, dividend_yield, volatility: floats
            (validated by the caller); key: Philox key words; payout: digital cash amount.

    ``run(requests)`` takes ``[(level, start, count, chunk_size), ...]`` and returns the chunk
    sums of all requests stacked in order, shape (total chunks, NSTAT); it records the wall
    time of each level in ``level_seconds`` and the samples it simulated in ``samples_done``.
    """

    device = "cpu"

    def __init__(self, payoff, spot, strike, expiry, rate, dividend_yield, volatility, key, payout=1.0):
        self.payoff = int(payoff)
        self.args = (float(spot), float(strike), float(expiry), float(rate) - float(dividend_yield), float(volatility),
                     math.exp(-float(rate) * float(expiry)), float(payout))
        self.key = key
        self.level_seconds: dict[int, float] = {}
        self.samples_done = 0

    def run(self, requests):
        out = []
        controlled = runctl.active()
        for level, start, count, chunk_size in requests:
            self.samples_done += max(0, int(count))
            t0 = time.perf_counter()
            if controlled and count > chunk_size:
                out.append(self._run_in_pieces(level, start, count, chunk_size))
            else:
                out.append(run_level(self.payoff, level, start, count, chunk_size, self.key, *self.args))
            self.level_seconds[level] = self.level_seconds.get(level, 0.0) + time.perf_counter() - t0
        return np.concatenate(out) if out else np.zeros((0, NSTAT))

    def _run_in_pieces(self, level, start, count, chunk_size):
        """:func:`run_level` in pieces of whole chunks of about :data:`PIECE_PATH_STEPS`, with
        :func:`optiond.runctl.check` between them (a cancelled daemon job stops within a piece,
        not after a whole iteration, which can take most of a run). Each chunk's sums do not
        depend on the piece that computes it, so the result is the same bits."""
        steps = 1.0 if level == 0 else 1.5 * (1 << level)
        per = max(1, int(PIECE_PATH_STEPS // (steps * chunk_size)))
        n_chunks = -(-count // chunk_size)
        parts = []
        for c0 in range(0, n_chunks, per):
            runctl.check()
            a = c0 * chunk_size
            b = min((c0 + per) * chunk_size, count)
            parts.append(run_level(self.payoff, level, start + a, b - a, chunk_size, self.key, *self.args))
        return np.concatenate(parts)

    def close(self):
        pass
