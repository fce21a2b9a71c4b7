"""Adaptive multilevel Monte Carlo (MLMC) for options on geometric Brownian motion.

The driver is Giles' adaptive algorithm: Giles (2008), "Multilevel Monte Carlo path
simulation", Operations Research 56(3), §5 (the numerical algorithm), in the form of Giles
(2015), "Multilevel Monte Carlo methods", Acta Numerica 24, §2.6 Algorithm 1 and his
``mlmc.m``:

1. start with levels ``0 .. L_min`` and ``N0`` samples on each;
2. sample the extra ``dN_l``; from the sums estimate per level the mean ``m_l`` and the
   unbiased sample variance ``V_l`` (Bessel's ``N_l/(N_l - 1)``) of ``Y_l = P_l - P_{l-1}``,
   and the cost ``C_l`` per sample;
3. set the optimal sample counts (Giles 2008 eq. (12), Giles 2015 eq. (2.8)) for a sampling
   variance of ``(1 - theta) eps^2``:

       N_l = ceil( sqrt(V_l / C_l) * sum_k sqrt(V_k C_k) / ((1 - theta) eps^2) ),

   with ``theta = 1/2`` by default, i.e. ``N_l = ceil(2 eps^-2 sqrt(V_l/C_l) Σ sqrt(V_k C_k))``;
4. when no level needs more than 1 % extra samples, test the bias by extrapolating the weak
   error ``|E[P_L - P_{L-1}]| ≈ c 2^{-alpha L}`` (Giles 2015 eq. (2.10), using the largest of
   the last three levels scaled to level L as in the Python ``mlmc.py`` of Giles' group):
   ``rem = max_{k<3} m_{L-k} 2^{-k alpha} / (2^alpha - 1)``; if ``rem > sqrt(theta) eps``,
   add level ``L+1`` (variance extrapolated with beta, cost from :func:`level_cost`), up to ``L_max`` (then
   the result carries a warning and ``converged = False``). The new level gets at least ``n0``
   samples before its own estimates are used, like the first levels: Giles (2008) §5 step 2
   ("estimate V_L using an initial N_L samples"). Without that floor (Giles' ``mlmc.m``, which
   this module followed before) the optimal count of the finest level is a few tens of samples
   (19 for the call at eps = 0.02), so its ``m_L`` (the bias test's input, ±50 % noise there)
   and ``V_L`` were guesses: the finest level was chosen by noise (three different L over the
   seeds), runs whose top-level means came out low stopped early with a low price, and
   ``std_error`` was 0.86-0.91 of the spread of the estimates across 256 seeds (now
   0.97-0.99; ``bench/mlmc.py --study`` has the 64-seed figures). The mean error that
   remains, -0.4 to -0.6 eps, is the truncation bias the split allows (at most
   ``sqrt(theta) eps``, estimated by ``rem`` to within the noise of the seeds). The floor
   costs ``n0 C_L`` a level: on that call 4.3e5 model path steps at eps = 0.01 (was 1.0e5)
   and 1.06e6 at eps = 0.005 (was 4.4e5); it grows like 1/eps against the optimal counts'
   1/eps^2, so its share falls as eps does;
5. repeat until no extra samples are needed; then the estimated MSE ``Σ V_l/N_l + rem^2`` is
   at most ``eps^2``.

Exact level 0 (default; ``exact_level0=True`` in :func:`mlmc_price`, ``level0_mean=`` in
:func:`mlmc_adaptive`): the coarsest level is one Milstein step of length T, a function of one
standard normal (two for the Asian), and its expectation ``E[P_0]`` has a closed form (call,
put; the digital's level 0 is deterministic anyway) or a 1-D integral of a closed form computed
to ~1e-13 (Asian): :func:`optiond.kernels.mlmc.level0.level0_mean` gives the derivation. It is
computed once on the host in FP64 (with ``comm``: on rank 0, then broadcast) and enters the
estimate as level 0's mean with variance 0 and cost 0, so

    price = E[P_0] + Σ_{l=1..L} mean(Y_l),     MSE = Σ_{l>=1} V_l/N_l + rem^2,

``N_0 = 0`` (the sample-count formula gives 0 for V_0 = 0 and is applied to levels >= 1 only:
``Σ sqrt(V_k C_k)`` runs over k >= 1), and the first iteration samples levels ``1 .. max(L_min,
1)``. Level 0 never enters the bias test (which uses levels L, L-1, L-2 >= 1) nor the regressions
(levels >= 1), so both are unchanged. This is the standard control variate with a known mean
(Glasserman 2004, "Monte Carlo Methods in Financial Engineering", §4.1) applied to the
coarsest term of the telescoping sum, which Giles derives MLMC from as a recursive control
variate whose coarse means are *estimated* (Giles 2015, §1, "control variates and two-level
MLMC"); here the coarsest one is known. It removes the term that dominated the cost at small
eps (the seed's call cases at eps = 1e-3: up to 1.4e10 one-step samples, because V_0 = Var P_0
is O(price^2) while V_l falls 4x per level). ``exact_level0=False`` samples level 0 as before
(the seed's algorithm; used for comparisons and by :func:`mlmc_test`'s per-level table).

``alpha``, ``beta``, ``gamma`` (weak order, variance decay, cost growth: ``|m_l| ~ 2^{-alpha
l}``, ``V_l ~ 2^{-beta l}``, ``C_l ~ 2^{gamma l}``) are estimated inside the loop by least
squares on levels >= 1 (floored at 0.5), as ``mlmc.m`` does, and the estimate of ``alpha`` is
capped at :data:`ALPHA_MAX` = 1, the weak order of the Milstein scheme for these payoffs
(Kloeden & Platen 1992, §14.5): the weak error of an out-of-the-money call can change sign
between levels (S = 50, K = 60, sigma = 0.4, T = 2 has m_3 ~ 0), a regression through that
near-zero mean returns alpha = 3..5, and the bias test then stops levels too early (errors of
-2..-5 eps were measured before the cap). ``m_l`` and ``V_l`` of levels >= 2 are floored at
half their extrapolation from the level below, against noisy zeros.

Refinement factor: ``M = 2`` (level l has ``nf = 2^l`` fine steps, the coarse path ``2^(l-1)``).
With Milstein the variance falls ≈ 4x per level (beta = 2) against a cost growth of 2x
(gamma = 1), so the total cost is O(eps^-2) for any M; M = 2 gives finer control of the
finest level (the bias test overshoots by at most a factor 2 in time step rather than 4), and
is what Giles uses for his Milstein tests (``mcqmc06``). The seed implementation used M = 4.

Cost model: ``C_l`` = path steps per sample, ``2^l + 2^(l-1)`` (fine plus coarse) for l >= 1
and 1 at level 0; deterministic, so the sample counts (and the estimate) do not depend on
timing noise. Measured wall time per level is reported beside it.

Determinism and MPI: each iteration's new samples of a level, indices ``N_l .. N_l + dN_l - 1``,
are cut into at most ``MAX_CHUNKS`` chunks whose boundaries depend only on ``(N_l, dN_l)``;
each chunk's sums are computed deterministically by whichever process owns it (see
:mod:`optiond.kernels.mlmc.cpu`); with ``comm`` (an mpi4py communicator of R ranks) rank r owns
the contiguous chunks ``[n*r/R, n*(r+1)/R)`` of every level, writes their sums into one zeroed
buffer holding the chunks of all levels, and ONE ``Allreduce(SUM)`` per iteration combines
them: each entry has a single non-zero contribution, so the sum is exact. Every rank then adds
the chunks one by one in chunk order, so every rank, and any number of ranks, gets
bit-identical level sums, sample counts and price.

Public entry points: :func:`mlmc_price` (one option), :func:`mlmc_price_batch` (columns),
:func:`mlmc_adaptive` (the driver over any level sampler), :func:`mlmc_test` (Giles'
``mlmc_test`` report), :func:`exact_level0_mean` (the exact ``E[P_0]``). Errors:
:class:`optiond.models.InvalidInputError` for invalid inputs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numba as nb
import numpy as np

from ...models import InvalidInputError
from .cpu import NSTAT, CPUSampler, unit_size
from .level0 import PAYOFF_CODES, PAYOFF_NAMES, level0_mean
from .philox import seed_key
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

MAX_CHUNKS = 128
DEFAULT_N0 = 1000
DEFAULT_L_MIN = 2
DEFAULT_L_MAX = 20
DEFAULT_THETA = 0.5
#: the largest weak-convergence exponent the bias extrapolation may assume (Milstein: order 1)
ALPHA_MAX = 1.0

_KURTOSIS_WARN = 100.0
_CONSISTENCY_WARN = 1.0


# --------------------------------------------------------------------------------------------
# result


@dataclass
class MLMCResult:
    """The result of one adaptive MLMC run.

    Per-level arrays have shape (levels,) = (L + 1,), index l = level:

    * ``n_samples``: N_l; ``mean``/``variance``: sample mean and unbiased variance of ``Y_l = P_l -
      P_{l-1}`` (``P_0`` at level 0); ``mean_fine``/``var_fine``: of ``P_l``;
      ``kurtosis``: of ``Y_l`` (0 at level 0); ``consistency``: Giles' check
      ``|m_l - (E P_l - E P_{l-1})| / (3 (sd's / sqrt N))`` (0 at level 0, > 1 is suspicious);
      ``cost``: model cost per sample (path steps); ``seconds``: time this rank spent sampling
      each level (CPU: wall time per level; GPU: kernel time of each fused launch, shared out
      to the levels in proportion to their path steps).
    * with ``exact_level0``: level 0 is not sampled: ``n_samples[0] = 0``, ``mean[0] =
      mean_fine[0] =`` the exact ``E[P_0]``, ``variance[0] = var_fine[0] = 0``, ``seconds[0] = 0``,
      ``sums[0] = 0``.

    Scalars: ``price`` (Σ_l mean_l, currency units), ``std_error`` (sqrt Σ V_l/N_l, V_l unbiased), ``bias``
    (the extrapolated remaining weak error ``rem``), ``mse`` (``std_error^2 + bias^2``),
    ``alpha``/``beta``/``gamma`` (least-squares exponents of |mean|, variance and cost on
    levels >= 1; NaN with fewer than two such levels), ``converged`` (MSE target met without
    hitting L_max), ``warnings`` (texts), ``iterations``, ``elapsed_s``, and the inputs.
    """

    price: float
    std_error: float
    eps: float
    levels: int
    n_samples: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    cost: np.ndarray
    mean_fine: np.ndarray
    var_fine: np.ndarray
    kurtosis: np.ndarray
    consistency: np.ndarray
    seconds: np.ndarray
    alpha: float
    beta: float
    gamma: float
    bias: float
    mse: float
    converged: bool
    warnings: tuple[str, ...]
    iterations: int
    elapsed_s: float
    payoff: str = ""
    seed: int = 0
    device: str = "cpu"
    ranks: int = 1
    sums: np.ndarray = field(default_factory=lambda: np.zeros((0, NSTAT)), repr=False)
    exact_level0: bool = False

    @property
    def fine_steps(self) -> int:
        """Fine path steps simulated in total, Σ N_l 2^l."""
        return int(sum(int(n) << l for l, n in enumerate(self.n_samples)))

    @property
    def total_cost(self) -> float:
        """Σ N_l C_l (path steps, fine plus coarse)."""
        return float(np.dot(self.n_samples, self.cost))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (arrays as lists)."""
        out = {}
        for k, v in self.__dict__.items():
            if k == "sums":
                continue
            out[k] = v.tolist() if isinstance(v, np.ndarray) else (list(v) if isinstance(v, tuple) else v)
        out["fine_steps"] = self.fine_steps
        return out


# --------------------------------------------------------------------------------------------
# statistics helpers


def _level_stats(sums: np.ndarray, n: np.ndarray):
    """Means, unbiased variances (Bessel's ``N/(N-1)``) and kurtosis from the power sums
    (Giles' ``mlmc_test`` formulas; the kurtosis from the central moments as he writes them)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        s = sums / np.maximum(n, 1)[:, None]
        m = s[:, 0]
        v = np.maximum(s[:, 1] - m * m, 0.0)
        mf = s[:, 4]
        vf = np.maximum(s[:, 5] - mf * mf, 0.0)
        kurt = (s[:, 3] - 4 * s[:, 2] * m + 6 * s[:, 1] * m * m - 3 * m ** 4) / (v * v)
        kurt = np.where(v > 0, kurt, 0.0)
    kurt[0] = 0.0
    bessel = np.asarray(n, dtype=np.float64) / np.maximum(np.asarray(n, dtype=np.float64) - 1.0, 1.0)
    return m, v * bessel, mf, vf * bessel, kurt


def _consistency(m, mf, v, vf, n):
    chk = np.zeros(len(m))
    for l in range(1, len(m)):
        den = 3.0 * (math.sqrt(v[l] / max(n[l], 1)) + math.sqrt(vf[l - 1] / max(n[l - 1], 1)) + math.sqrt(vf[l] / max(n[l], 1)))
        num = abs(m[l] + mf[l - 1] - mf[l])
        chk[l] = num / den if den > 0 else (0.0 if num == 0 else math.inf)
    return chk


def regression_exponent(values: Sequence[float], first_level: int = 1) -> float:
    """Least-squares slope of log2|values[l]| against l for l >= first_level (NaN if < 2
    usable points). alpha = -slope of the means, beta = -slope of variances, gamma = slope of costs."""
    x, y = [], []
    for l in range(first_level, len(values)):
        v = abs(float(values[l]))
        if v > 0 and math.isfinite(v):
            x.append(float(l))
            y.append(math.log2(v))
    n = len(x)
    if n < 2:
        return math.nan
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx


@nb.njit(cache=True, nogil=True)
def _add_chunks(sums, level_rows, offsets, counts, packed):
    """sums[level] += the chunks of that level, added one by one in chunk order (deterministic)."""
    for i in range(level_rows.shape[0]):
        l = level_rows[i]
        for c in range(offsets[i], offsets[i] + counts[i]):
            for k in range(packed.shape[1]):
                sums[l, k] += packed[c, k]


def level_cost(level: int) -> float:
    """Model cost per sample of ``level`` in path steps: fine ``2^l`` plus coarse ``2^(l-1)``."""
    return 1.0 if level == 0 else 1.5 * (1 << level)


def chunk_layout(level: int, count: int) -> tuple[int, int]:
    """``(chunk_size, n_chunks)`` for ``count`` new samples of ``level``: chunk_size is a
    multiple of ``unit_size(level)`` and there are at most ``MAX_CHUNKS`` chunks."""
    unit = unit_size(level)
    n_units = -(-count // unit)
    upc = max(1, -(-n_units // MAX_CHUNKS))
    size = upc * unit
    return size, -(-count // size)


# --------------------------------------------------------------------------------------------
# the adaptive driver


def mlmc_adaptive(sampler, eps: float, *, n0: int = DEFAULT_N0, l_min: int = DEFAULT_L_MIN, l_max: int = DEFAULT_L_MAX,
                  theta: float = DEFAULT_THETA, alpha0: float = 0.0, beta0: float = 0.0, gamma0: float = 0.0,
                  comm=None, max_iterations: int = 1000, progress=None, level0_mean: float | None = None,
                  on_fraction=None) -> MLMCResult:
    """Giles' adaptive MLMC (module docstring) over a level sampler.

    Args:
        sampler: object with ``run(requests) -> ndarray (chunks, NSTAT)`` where requests are
            ``[(level, start, count, chunk_size)]`` (:class:`.cpu.CPUSampler`,
            :class:`.gpu.GPUSampler`: one call per iteration, one host sync on the GPU).
        eps: target root-mean-square error (currency units), > 0.
        n0: initial samples per level (>= 2); l_min, l_max: first and last allowed finest
            level (0 <= l_min <= l_max <= 40); theta: share of eps^2 for the squared bias.
        alpha0, beta0: fixed exponents (> 0), or <= 0 to estimate them by regression inside the
            loop. gamma0: accepted for Giles' interface; the cost of a level is the deterministic
            :func:`level_cost`, so no cost exponent is needed (gamma is reported, by regression).
        comm: mpi4py communicator, or None for one process.
        max_iterations: safety stop (a warning if reached).
        progress: optional callable ``progress(iteration, L, n_samples)``; raise from it to cancel.
        on_fraction: optional callable ``on_fraction(f)`` at the end of each iteration with the
            estimated fraction of the run's cost done: ``sum N_l C_l / sum max(N_l, target_l) C_l``
            (the targets of the latest optimal sample counts; it can step back when a level is
            added).
        level0_mean: the exact ``E[P_0]`` of the sampler's level 0 (module docstring "Exact
            level 0"), or None to sample level 0. When given, level 0 is never requested from
            the sampler, ``l_min`` is raised to 1 and ``l_max`` must be >= 1; with ``comm`` the
            value of rank 0 is used on every rank.

    Returns:
        :class:`MLMCResult` (``price`` etc.; identical on every rank).
    """
    if not (eps > 0 and math.isfinite(eps)):
        raise InvalidInputError("eps", None, eps, "must be a positive finite number")
    if not (0 <= l_min <= l_max <= 40):
        raise InvalidInputError("l_max", None, (l_min, l_max), "need 0 <= l_min <= l_max <= 40")
    if n0 < 2:
        raise InvalidInputError("n0", None, n0, "need at least 2 initial samples per level")
    if not 0 < theta < 1:
        raise InvalidInputError("theta", None, theta, "must lie in (0, 1)")
    exact = level0_mean is not None
    if exact:
        if l_max < 1:
            raise InvalidInputError("l_max", None, l_max, "an exact level 0 needs l_max >= 1 (nothing else to sample)")
        level0_mean = float(level0_mean)
        if not math.isfinite(level0_mean):
            raise InvalidInputError("level0_mean", None, level0_mean, "must be finite")
    rank, size = (comm.Get_rank(), comm.Get_size()) if comm is not None else (0, 1)
    if exact and comm is not None and size > 1:
        level0_mean = float(comm.bcast(level0_mean, root=0))  # one value on every rank, bit for bit
    first = 1 if exact else 0  # the first sampled level
    t_start = time.perf_counter()
    alpha, beta = max(0.0, alpha0), max(0.0, beta0)
    L = max(l_min, first)
    nl = np.zeros(L + 1, dtype=np.int64)
    sums = np.zeros((L + 1, NSTAT))
    cl = np.array([level_cost(l) for l in range(L + 1)])
    dn = np.full(L + 1, int(n0), dtype=np.int64)
    dn[:first] = 0
    warnings: list[str] = []
    iterations = 0
    rem = math.nan
    hit_lmax = False
    while dn.sum() > 0:
        if iterations >= max_iterations:
            warnings.append(f"stopped after {max_iterations} iterations without meeting the sample targets")
            break
        iterations += 1
        # ---- sample: this rank's chunks of every level, one packed allreduce
        plan = []  # (level, offset in packed buffer, n_chunks)
        requests = []
        my_offsets = []
        offset = 0
        for l in range(L + 1):
            if dn[l] <= 0:
                continue
            csize, nch = chunk_layout(l, int(dn[l]))
            c0, c1 = nch * rank // size, nch * (rank + 1) // size
            a = int(nl[l]) + c0 * csize
            b = int(nl[l]) + min(c1 * csize, int(dn[l]))
            plan.append((l, offset, nch))
            if b > a:
                requests.append((l, a, b - a, csize))
                my_offsets.append((offset + c0, c1 - c0))
            offset += nch
        packed = np.zeros((offset, NSTAT))
        local = sampler.run(requests)
        pos = 0
        for off, k in my_offsets:
            packed[off:off + k] = local[pos:pos + k]
            pos += k
        if comm is not None and size > 1:
            total = np.empty_like(packed)
            comm.Allreduce(packed, total)
            packed = total
        if plan:
            pl = np.array(plan, dtype=np.int64)
            _add_chunks(sums, pl[:, 0], pl[:, 1], pl[:, 2], packed)
            nl[pl[:, 0]] += dn[pl[:, 0]]
        if progress is not None:
            progress(iterations, L, nl.copy())
        # ---- estimates
        with np.errstate(divide="ignore", invalid="ignore"):
            ml = np.abs(sums[:, 0] / nl)
            vl = np.maximum(0.0, sums[:, 1] / nl - (sums[:, 0] / nl) ** 2) * (nl / np.maximum(nl - 1, 1))
        if exact:  # known mean, no sampling variance
            ml[0], vl[0] = abs(level0_mean), 0.0
        for l in range(2, L + 1):
            ml[l] = max(ml[l], 0.5 * ml[l - 1] / 2 ** alpha)
            vl[l] = max(vl[l], 0.5 * vl[l - 1] / 2 ** beta)
        if alpha0 <= 0:
            a_ = regression_exponent(ml)
            alpha = min(ALPHA_MAX, max(0.5, -a_)) if math.isfinite(a_) else 0.5
        if beta0 <= 0:
            b_ = regression_exponent(vl)
            beta = max(0.5, -b_) if math.isfinite(b_) else 0.5
        # ---- optimal sample counts (the costs are the deterministic model's: no gamma needed)
        ns = _optimal_n(vl, cl, eps, theta, first)
        dn = np.maximum(0, ns - nl)
        # ---- bias test when (almost) converged
        if not np.any(dn > 0.01 * nl):
            rem = _remaining_bias(ml, L, alpha)
            hit_lmax = False
            if rem > math.sqrt(theta) * eps:
                if L == l_max:
                    hit_lmax = True  # Giles: "failed to achieve weak convergence"; sampling goes on
                else:
                    L += 1
                    vl = np.append(vl, vl[L - 1] / 2 ** beta)
                    nl = np.append(nl, 0)
                    sums = np.vstack([sums, np.zeros(NSTAT)])
                    cl = np.append(cl, level_cost(L))
                    ns = _optimal_n(vl, cl, eps, theta, first)
                    dn = np.maximum(0, ns - nl)
                    dn[L] = max(int(dn[L]), int(n0))  # Giles 2008 §5 step 2: V_L from n0 samples first
        if on_fraction is not None:
            done = float(np.dot(nl, cl))
            on_fraction(done / (done + float(np.dot(dn, cl))) if dn.any() else 1.0)
    # ---- final estimate and diagnostics
    m, v, mf, vf, kurt = _level_stats(sums, nl)
    if exact:
        m[0] = mf[0] = level0_mean
        v[0] = vf[0] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ml = np.abs(m)
    price = float(math.fsum([level0_mean] * first + [sums[l, 0] / nl[l] for l in range(first, L + 1)]))
    var = float(math.fsum(v[l] / nl[l] for l in range(first, L + 1)))
    if not math.isfinite(rem):
        rem = _remaining_bias(ml, L, alpha)
    mse = var + rem * rem
    if hit_lmax:
        warnings.append(f"failed to achieve weak convergence: estimated bias {rem:.3g} > {math.sqrt(theta) * eps:.3g} "
                        f"at the maximum level L_max = {l_max}; the price may be biased (raise l_max or eps)")
    if L >= 1 and kurt[L] > _KURTOSIS_WARN:
        warnings.append(f"kurtosis on the finest level is {kurt[L]:.1f} (> {_KURTOSIS_WARN:g}): the level correction is "
                        "dominated by a few rare paths and its variance estimate is unreliable")
    chk = _consistency(m, mf, v, vf, nl)
    if chk.max(initial=0.0) > _CONSISTENCY_WARN:
        warnings.append(f"consistency check {chk.max():.2f} > 1 at level {int(chk.argmax())}: "
                        "E[Pf - Pc] = E[Pf] - E[Pc] looks violated (coupling error?)")
    seconds = np.array([getattr(sampler, "level_seconds", {}).get(l, 0.0) for l in range(L + 1)])
    converged = (not hit_lmax) and mse <= eps * eps * (1 + 1e-12) and not any(w.startswith("stopped after") for w in warnings)
    return MLMCResult(
        price=price, std_error=math.sqrt(var), eps=float(eps), levels=L + 1, n_samples=nl.copy(), mean=m, variance=v,
        cost=cl.copy(), mean_fine=mf, var_fine=vf, kurtosis=kurt, consistency=chk, seconds=seconds,
        alpha=-regression_exponent(m), beta=-regression_exponent(v), gamma=regression_exponent(cl),
        bias=float(rem), mse=float(mse), converged=bool(converged), warnings=tuple(warnings), iterations=iterations,
        elapsed_s=time.perf_counter() - t_start, device=getattr(sampler, "device", "cpu"), ranks=size, sums=sums.copy(),
        exact_level0=exact,
    )


def _optimal_n(vl, cl, eps, theta, first=0):
    """Giles 2015 eq. (2.8): N_l = ceil(sqrt(V_l/C_l) Σ sqrt(V_k C_k) / ((1-theta) eps^2)) for the
    sampled levels l, k >= ``first`` (at least 1 sample each); 0 for the exact levels below."""
    v, c = vl[first:], cl[first:]
    tot = float(np.sum(np.sqrt(v * c)))
    ns = np.zeros(len(vl), dtype=np.int64)
    ns[first:] = np.maximum(np.ceil(np.sqrt(v / c) * tot / ((1.0 - theta) * eps * eps)), 1)
    return ns


def _remaining_bias(ml, L, alpha):
    """Extrapolated weak error: max_{k<3} |m_{L-k}| 2^{-k alpha} / (2^alpha - 1)."""
    k = np.arange(min(3, L))
    if len(k) == 0:
        return float(ml[L])  # L == 0: no correction level to extrapolate from
    return float(np.max(ml[L - k] / 2.0 ** (k * alpha)) / (2.0 ** alpha - 1.0))


# --------------------------------------------------------------------------------------------
# pricing API


def _validate(payoff, spot, strike, expiry, rate, dividend_yield, volatility, eps, payout):
    if isinstance(payoff, str):
        code = PAYOFF_CODES.get(payoff.strip().lower().replace("-", "_").replace(" ", "_"))
        if code is None:
            raise InvalidInputError("payoff", None, payoff, f"unknown payoff; expected one of {sorted(PAYOFF_CODES)}")
    else:
        code = int(payoff)
        if code not in PAYOFF_NAMES:
            raise InvalidInputError("payoff", None, payoff, "unknown payoff code")
    checks = (("spot", spot, lambda x: x > 0), ("strike", strike, lambda x: x > 0), ("expiry", expiry, lambda x: x > 0),
              ("rate", rate, lambda x: abs(x) < 1), ("dividend_yield", dividend_yield, lambda x: abs(x) < 1),
              ("volatility", volatility, lambda x: 0 < x <= 5), ("eps", eps, lambda x: x > 0), ("payout", payout, lambda x: x > 0))
    for name, value, ok in checks:
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise InvalidInputError(name, None, value, "not a number") from None
        if not (math.isfinite(x) and ok(x)):
            raise InvalidInputError(name, None, value, "out of range")
    return code


def exact_level0_mean(payoff, spot, strike, expiry, rate, dividend_yield, volatility, payout=1.0) -> float:
    """The exact ``E[P_0]`` (discounted, one Milstein step of length ``expiry``) for these inputs:
    :func:`optiond.kernels.mlmc.level0.level0_mean` (host FP64; the same value for every device)."""
    code = _validate(payoff, spot, strike, expiry, rate, dividend_yield, volatility, 1.0, payout)
    return level0_mean(code, float(spot), float(strike), float(expiry), float(rate) - float(dividend_yield),
                       float(volatility), math.exp(-float(rate) * float(expiry)), float(payout))


def make_sampler(payoff, spot, strike, expiry, rate, dividend_yield, volatility, seed=0, device="cpu", payout=1.0,
                 comm=None, **gpu_options):
    """A level sampler for one option on ``device`` ("cpu" or "gpu"; with ``comm`` the GPU is
    ``rank % n_gpus``). Inputs validated by the caller (:func:`mlmc_price`)."""
    code = _validate(payoff, spot, strike, expiry, rate, dividend_yield, volatility, 1.0, payout)
    key = seed_key(seed)
    if device == "cpu":
        return CPUSampler(code, spot, strike, expiry, rate, dividend_yield, volatility, key, payout)
    if device == "gpu":
        from .gpu import GPUSampler  # CuPy imported lazily

        dev = None
        if comm is not None:
            from ..gpu import device_count

            n = device_count()
            dev = comm.Get_rank() % n if n else None
        return GPUSampler(code, spot, strike, expiry, rate, dividend_yield, volatility, key, payout, device_id=dev, **gpu_options)
    raise InvalidInputError("device", None, device, "expected 'cpu' or 'gpu'")


def mlmc_price(payoff, spot, strike, expiry, rate, dividend_yield, volatility, eps, *, seed: int = 0, device: str = "cpu",
               payout: float = 1.0, n0: int = DEFAULT_N0, l_min: int = DEFAULT_L_MIN, l_max: int = DEFAULT_L_MAX,
               theta: float = DEFAULT_THETA, comm=None, progress=None, sampler=None,
               gpu_options: dict | None = None, exact_level0: bool = True, on_fraction=None) -> MLMCResult:
    """Price one option by adaptive MLMC with the Milstein scheme under Black–Scholes dynamics.

    Args:
        payoff: ``"call"``, ``"put"``, ``"digital_call"``, ``"digital_put"`` (cash-or-nothing
            paying ``payout``), ``"asian_call"``, ``"asian_put"`` (arithmetic average over
            [0, T], continuous monitoring limit), or the integer codes of :mod:`.level0`.
        spot, strike: > 0, currency units. expiry: years, > 0. rate, dividend_yield:
            continuously compounded annual decimals. volatility: annual decimal in (0, 5].
        eps: target RMS error in currency units (> 0): the run stops when the estimated
            ``std_error^2 + bias^2 <= eps^2``.
        seed: 64-bit seed (the Philox key). The estimate is a deterministic function of all
            inputs and the seed: identical on any number of threads or MPI ranks; CPU and GPU
            agree to rounding.
        device: ``"cpu"`` (numba) or ``"gpu"`` (CuPy; needs an NVIDIA GPU).
        payout: digital cash amount (ignored otherwise).
        n0, l_min, l_max, theta: algorithm parameters (see :func:`mlmc_adaptive`).
        comm: mpi4py communicator for a run across ranks (all ranks call this function).
        progress: callable(iteration, L, n_samples) after each iteration; raising cancels.
        on_fraction: callable(fraction of the run's cost done) after each iteration (see
            :func:`mlmc_adaptive`).
        sampler: a ready sampler for these inputs; overrides ``device`` (not closed here).
        gpu_options: extra :class:`.gpu.GPUSampler` arguments (``fast``, ``team_levels``).
        exact_level0: use the exact ``E[P_0]`` (:func:`.level0.level0_mean`, module docstring
            "Exact level 0") instead of sampling level 0 (default); levels >= 1 are sampled
            from ``max(l_min, 1)``. False: sample level 0 as well (the seed's algorithm). With
            ``l_max = 0`` level 0 is always sampled.

    Returns:
        :class:`MLMCResult`.

    Raises:
        InvalidInputError: an input is out of range or the payoff/device is unknown.
        RuntimeError: ``device="gpu"`` without CuPy or a GPU (:class:`optiond.kernels.gpu.GPUError`), or a
            CUDA failure.
    """
    code = _validate(payoff, spot, strike, expiry, rate, dividend_yield, volatility, eps, payout)
    level0 = None
    if exact_level0 and l_max >= 1:
        level0 = exact_level0_mean(code, spot, strike, expiry, rate, dividend_yield, volatility, payout)
    own = sampler is None
    if own:
        sampler = make_sampler(code, spot, strike, expiry, rate, dividend_yield, volatility, seed, device, payout, comm,
                               **(gpu_options or {}))
    try:
        res = mlmc_adaptive(sampler, float(eps), n0=n0, l_min=l_min, l_max=l_max, theta=theta, comm=comm, progress=progress,
                            level0_mean=level0, on_fraction=on_fraction)
    finally:
        if own:
            sampler.close()
    res.payoff = PAYOFF_NAMES[code]
    res.seed = int(seed)
    return res


def mlmc_price_batch(payoff, spot, strike, expiry, rate, dividend_yield, volatility, eps, *, seed=0, device="cpu",
                     payout=1.0, comm=None, **options) -> dict[str, Any]:
    """:func:`mlmc_price` over columns (scalars broadcast to the longest column).

    All rows use the same ``seed``, so rows that differ only in strike (say) share their random
    numbers (common random numbers: smooth price curves). Rows that fail validation get NaN
    and a message; others are priced.

    Returns:
        dict: ``price``, ``std_error``, ``levels`` (int), ``converged`` (bool), ``elapsed_s``:
        arrays of shape (n,); ``error``: list of n strings ('' when fine); ``results``: the n
        :class:`MLMCResult` (None where the row failed).
    """
    cols = [np.atleast_1d(np.asarray(c, dtype=object)) for c in (payoff, spot, strike, expiry, rate, dividend_yield, volatility, eps, payout)]
    n = max(len(c) for c in cols)
    for c in cols:
        if len(c) not in (1, n):
            raise InvalidInputError("columns", None, [len(c) for c in cols], "column lengths differ")
    get = [lambda i, c=c: c[0] if len(c) == 1 else c[i] for c in cols]
    out = {"price": np.full(n, np.nan), "std_error": np.full(n, np.nan), "levels": np.zeros(n, np.int64),
           "converged": np.zeros(n, bool), "elapsed_s": np.zeros(n), "error": [""] * n, "results": [None] * n}
    for i in range(n):
        args = [g(i) for g in get]
        try:
            res = mlmc_price(*args[:8], seed=seed, device=device, payout=args[8], comm=comm, **options)
        except InvalidInputError as exc:
            out["error"][i] = str(exc)
            continue
        out["price"][i], out["std_error"][i] = res.price, res.std_error
        out["levels"][i], out["converged"][i], out["elapsed_s"][i] = res.levels, res.converged, res.elapsed_s
        out["results"][i] = res
        if res.warnings:
            out["error"][i] = "; ".join(res.warnings)
    return out


# --------------------------------------------------------------------------------------------
# Giles' mlmc_test


@dataclass
class MLMCTestReport:
    """Output of :func:`mlmc_test`: per-level convergence statistics (arrays over levels
    0..L), the fitted exponents, and one row per eps of the complexity sweep."""

    n: int
    mean: np.ndarray
    mean_fine: np.ndarray
    variance: np.ndarray
    var_fine: np.ndarray
    kurtosis: np.ndarray
    consistency: np.ndarray
    cost: np.ndarray
    seconds: np.ndarray
    alpha: float
    beta: float
    gamma: float
    sweep: list[dict[str, Any]]
    warnings: list[str]
    header: str = ""
    level0_exact: float = math.nan
    exact_level0: bool = False

    def text(self) -> str:
        """The report in the layout of Giles' ``mlmc_test.m``."""
        lines = [self.header] if self.header else []
        lines += ["", "**********************************************************",
                  "*** Convergence tests, kurtosis, telescoping sum check ***",
                  f"*** using N = {self.n:7d} samples                       ***",
                  "**********************************************************", "",
                  " l   ave(Pf-Pc)    ave(Pf)   var(Pf-Pc)    var(Pf)    kurtosis     check        cost    time(s)",
                  "-" * 100]
        for l in range(len(self.mean)):
            lines.append(f"{l:2d}  {self.mean[l]:11.4e} {self.mean_fine[l]:11.4e} {self.variance[l]:11.4e} "
                         f"{self.var_fine[l]:11.4e} {self.kurtosis[l]:11.4e} {self.consistency[l]:11.4e} "
                         f"{self.cost[l]:10.3e} {self.seconds[l]:9.3e}")
        lines.append("")
        if math.isfinite(self.level0_exact):
            se = math.sqrt(self.var_fine[0] / self.n) if self.n > 0 else math.nan
            z = (self.mean_fine[0] - self.level0_exact) / se if se > 0 else math.nan
            lines.append(f" level 0 exact: E[P_0] = {self.level0_exact:.10e}  (sampled ave(Pf) - exact = "
                         f"{self.mean_fine[0] - self.level0_exact:.3e} = {z:.2f} std.err.)")
            lines.append(f" complexity tests below: level 0 {'exact (N_0 = 0, no cost)' if self.exact_level0 else 'sampled'}")
            lines.append("")
        lines += [f" WARNING: {w}" for w in self.warnings]
        lines += ["", "******************************************************",
                  "*** Linear regression estimates of MLMC parameters ***",
                  "******************************************************", "",
                  f" alpha = {self.alpha:f}  (exponent for MLMC weak convergence)",
                  f" beta  = {self.beta:f}  (exponent for MLMC variance)",
                  f" gamma = {self.gamma:f}  (exponent for MLMC cost)", "",
                  "*****************************",
                  "*** MLMC complexity tests ***",
                  "*****************************", "",
                  "   eps       value      std.err.   mlmc_cost   std_cost  savings   time(s)  conv   N_l",
                  "-" * 100]
        for row in self.sweep:
            nl = " ".join(f"{int(x):d}" for x in row["n_samples"])
            lines.append(f"{row['eps']:.3e} {row['price']:11.4e} {row['std_error']:10.3e} {row['mlmc_cost']:11.3e} "
                         f"{row['std_cost']:10.3e} {row['savings']:8.2f} {row['elapsed_s']:9.3f}  {'yes' if row['converged'] else 'NO ':3s}  {nl}")
            for w in row["warnings"]:
                lines.append(f"    WARNING: {w}")
        lines.append("")
        return "\n".join(lines)


def mlmc_test(payoff, spot, strike, expiry, rate, dividend_yield, volatility, *, n: int = 20000, levels: int = 8,
              eps_list: Sequence[float] = (0.005, 0.01, 0.02, 0.05, 0.1), seed: int = 0, device: str = "cpu",
              payout: float = 1.0, n0: int = DEFAULT_N0, l_min: int = DEFAULT_L_MIN, l_max: int = DEFAULT_L_MAX,
              theta: float = DEFAULT_THETA, comm=None, gpu_options: dict | None = None,
              exact_level0: bool = True) -> MLMCTestReport:
    """Giles' ``mlmc_test`` (Giles 2015 §2.7; ``mlmc_test.m``): convergence tests with ``n``
    samples on each level ``0 .. levels``, then adaptive runs for each eps of ``eps_list``.

    The convergence table always samples level 0 (Giles' per-level statistics); the report also
    prints the exact ``E[P_0]`` beside the sampled mean (a check of both). The complexity sweep
    runs :func:`mlmc_price` with ``exact_level0`` (default True: ``N_0 = 0``, and ``mlmc_cost``
    counts levels >= 1 only).

    The convergence tests use seed ``seed``; the eps sweep runs use ``seed + 1 + i``. The
    standard-MC cost for comparison is ``var(P_L) 2^L / ((1 - theta) eps^2)`` with L the
    finest level the MLMC run used (fine steps only).

    Returns:
        :class:`MLMCTestReport` (``.text()`` prints it).
    """
    code = _validate(payoff, spot, strike, expiry, rate, dividend_yield, volatility, 1.0, payout)
    rank, size = (comm.Get_rank(), comm.Get_size()) if comm is not None else (0, 1)
    sampler = make_sampler(code, spot, strike, expiry, rate, dividend_yield, volatility, seed, device, payout, comm,
                           **(gpu_options or {}))
    try:
        sums = np.zeros((levels + 1, NSTAT))
        requests, plan, offset = [], [], 0
        for l in range(levels + 1):
            csize, nch = chunk_layout(l, n)
            c0, c1 = nch * rank // size, nch * (rank + 1) // size
            a, b = c0 * csize, min(c1 * csize, n)
            if b > a:
                requests.append((l, a, b - a, csize))
            plan.append((l, offset, nch, c0, c1))
            offset += nch
        packed = np.zeros((offset, NSTAT))
        local = sampler.run(requests)
        pos = 0
        for l, off, nch, c0, c1 in plan:
            packed[off + c0:off + c1] = local[pos:pos + c1 - c0]
            pos += c1 - c0
        if comm is not None and size > 1:
            tot = np.empty_like(packed)
            comm.Allreduce(packed, tot)
            packed = tot
        pl = np.array([q[:3] for q in plan], dtype=np.int64)
        _add_chunks(sums, pl[:, 0], pl[:, 1], pl[:, 2], packed)
        nn = np.full(levels + 1, n)
        m, v, mf, vf, kurt = _level_stats(sums, nn)
        chk = _consistency(m, mf, v, vf, nn)
        seconds = np.array([sampler.level_seconds.get(l, 0.0) for l in range(levels + 1)])
    finally:
        sampler.close()
    cost = np.array([level_cost(l) for l in range(levels + 1)])
    warns = []
    if levels >= 1 and kurt[-1] > _KURTOSIS_WARN:
        warns.append(f"kurtosis on finest level = {kurt[-1]:f} indicates MLMC correction dominated by a few rare paths")
    if chk.max(initial=0.0) > _CONSISTENCY_WARN:
        warns.append(f"maximum consistency error = {chk.max():f} indicates identity E[Pf-Pc] = E[Pf] - E[Pc] not satisfied")
    report = MLMCTestReport(n=n, mean=m, mean_fine=mf, variance=v, var_fine=np.maximum(vf, 1e-10), kurtosis=kurt,
                            consistency=chk, cost=cost, seconds=seconds, alpha=-regression_exponent(m),
                            beta=-regression_exponent(v), gamma=regression_exponent(cost), sweep=[], warnings=warns,
                            level0_exact=exact_level0_mean(code, spot, strike, expiry, rate, dividend_yield, volatility, payout),
                            exact_level0=bool(exact_level0))
    for i, e in enumerate(eps_list):
        res = mlmc_price(code, spot, strike, expiry, rate, dividend_yield, volatility, e, seed=seed + 1 + i, device=device,
                         payout=payout, n0=n0, l_min=l_min, l_max=l_max, theta=theta, comm=comm, gpu_options=gpu_options,
                         exact_level0=exact_level0)
        L = res.levels - 1
        var_l = report.var_fine[min(L, levels)] if L <= levels else res.var_fine[L]
        std_cost = float(var_l) * (1 << L) / ((1.0 - theta) * e * e)
        report.sweep.append({"eps": e, "price": res.price, "std_error": res.std_error, "mlmc_cost": res.total_cost,
                             "std_cost": std_cost, "savings": std_cost / res.total_cost, "n_samples": res.n_samples.tolist(),
                             "elapsed_s": res.elapsed_s, "converged": res.converged, "warnings": list(res.warnings),
                             "levels": res.levels})
    return report
