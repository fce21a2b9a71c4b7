"""Adaptive MLMC (Giles 2008/2015, Milstein GBM): accuracy against closed forms and an
independent Monte Carlo reference, variance decay, determinism, the Philox generator, the
report, and (marked ``gpu``) agreement of the GPU sampler with the CPU."""

from __future__ import annotations

import io
import itertools
import math
from contextlib import redirect_stdout

import numba
import numpy as np
import pytest

from optiond.kernels.mlmc import cpu as mlmc_cpu
from optiond.kernels.mlmc import level0
from optiond.kernels.black_scholes import bs_price_greeks
from optiond.kernels.mlmc import (
    MLMCResult,
    chunk_layout,
    mlmc_price,
    mlmc_price_batch,
    mlmc_test,
)
from optiond.kernels.mlmc.philox import KAT_VECTORS, philox_block, philox_normals, seed_key
from optiond.models import InvalidInputError

# Giles' GBM test case (Giles 2008 §6; mcqmc06.m)
S0, K, T, R, SIG = 100.0, 100.0, 1.0, 0.05, 0.2
EPS = 0.01
SEEDS = range(1, 21)


def bs(kind, q=0.0, spot=S0, strike=K, expiry=T, rate=R, vol=SIG):
    return float(bs_price_greeks(np.array([kind]), spot, strike, expiry, rate, q, vol)["price"][0])


def digital_closed_form(payout, q=0.0):
    d2 = (math.log(S0 / K) + (R - q - 0.5 * SIG * SIG) * T) / (SIG * math.sqrt(T))
    return payout * math.exp(-R * T) * 0.5 * math.erfc(-d2 / math.sqrt(2.0))


# ----------------------------------------------------------------------------- Philox


@pytest.mark.parametrize("rounds, counter, key, expected", KAT_VECTORS)
def test_philox_known_answers(rounds, counter, key, expected):
    assert philox_block(counter, key, rounds) == expected


def test_philox_normals_are_standard_normal():
    z = philox_normals(2024, 3, 10**10, 50_000, 4).ravel()
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs((z ** 4).mean() - 3) < 5 * math.sqrt(96 / n)
    # counters, not state: a sub-range reproduces exactly
    assert np.array_equal(philox_normals(2024, 3, 10**10 + 777, 5, 4), philox_normals(2024, 3, 10**10, 800, 4)[777:782])


def test_seed_key_range():
    assert seed_key(2**64 - 1) == (0xFFFFFFFF, 0xFFFFFFFF)
    with pytest.raises(ValueError):
        seed_key(-1)


# ----------------------------------------------------------------------------- accuracy


def test_european_call_and_put_within_2eps_of_black_scholes():
    for kind, payoff in ((1, "call"), (0, "put")):
        exact = bs(kind)
        errs = [mlmc_price(payoff, S0, K, T, R, 0.0, SIG, EPS, seed=s).price - exact for s in SEEDS]
        ok = sum(abs(e) <= 2 * EPS for e in errs)
        assert ok >= 18, (payoff, exact, errs)


def test_digital_call_within_2eps_of_closed_form():
    # Giles' digital (mcqmc06 option 4) pays K * 1{S_T > K}: eps = 0.01 on a price of ~53
    exact = digital_closed_form(100.0)
    errs = [mlmc_price("digital_call", S0, K, T, R, 0.0, SIG, EPS, seed=s, payout=100.0).price - exact for s in SEEDS]
    assert sum(abs(e) <= 2 * EPS for e in errs) >= 18, (exact, errs)
    # unit cash-or-nothing at the same relative accuracy, and the put side by parity
    res = mlmc_price("digital_call", S0, K, T, R, 0.0, SIG, 1e-4, seed=7)
    assert abs(res.price - digital_closed_form(1.0)) <= 3e-4
    put = mlmc_price("digital_put", S0, K, T, R, 0.0, SIG, 1e-4, seed=8)
    assert abs(put.price - (math.exp(-R * T) - digital_closed_form(1.0))) <= 3e-4


def asian_reference(n_paths=200_000, n_steps=256, seed=20240607, q=0.0):
    """Independent plain Monte Carlo for the arithmetic-average (trapezoidal, continuous-limit)
    Asian call: exact GBM on a 256-step grid (NumPy PCG64 normals), with the geometric average
    under the same weights as a control variate (closed form). Returns (price, std_error)."""
    rng = np.random.default_rng(seed)
    h = T / n_steps
    t = np.linspace(0.0, T, n_steps + 1)
    w = np.full(n_steps + 1, h / T)
    w[0] = w[-1] = 0.5 * h / T
    mu = R - q - 0.5 * SIG * SIG
    m_g = math.log(S0) + mu * float(w @ t)
    v_g = SIG * SIG * float(w @ np.minimum.outer(t, t) @ w)
    d1 = (m_g - math.log(K) + v_g) / math.sqrt(v_g)
    d2 = d1 - math.sqrt(v_g)
    ncdf = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))  # noqa: E731
    geo_exact = math.exp(-R * T) * (math.exp(m_g + 0.5 * v_g) * ncdf(d1) - K * ncdf(d2))
    xs, gs = [], []
    for start in range(0, n_paths, 20_000):
        m = min(20_000, n_paths - start)
        logs = np.empty((m, n_steps + 1))
        logs[:, 0] = math.log(S0)
        np.cumsum(rng.standard_normal((m, n_steps)) * (SIG * math.sqrt(h)) + mu * h, axis=1, out=logs[:, 1:])
        logs[:, 1:] += math.log(S0)
        a = np.exp(logs) @ w
        g = np.exp(logs @ w)
        xs.append(math.exp(-R * T) * np.maximum(a - K, 0.0))
        gs.append(math.exp(-R * T) * np.maximum(g - K, 0.0))
    x, g = np.concatenate(xs), np.concatenate(gs)
    c = np.cov(x, g)
    b = c[0, 1] / c[1, 1]
    y = x - b * (g - geo_exact)
    return float(y.mean()), float(y.std(ddof=1) / math.sqrt(len(y)))


def test_asian_call_against_plain_monte_carlo_reference():
    ref, se = asian_reference()
    assert se < 2e-3
    errs = [mlmc_price("asian_call", S0, K, T, R, 0.0, SIG, EPS, seed=s).price - ref for s in SEEDS]
    assert sum(abs(e) <= 2 * EPS + 2 * se for e in errs) >= 18, (ref, se, errs)


def test_dividend_yield_call_put():
    q = 0.03
    for kind, payoff in ((1, "call"), (0, "put")):
        exact = bs(kind, q=q)
        errs = [mlmc_price(payoff, S0, K, T, R, q, SIG, 0.02, seed=s).price - exact for s in range(5)]
        assert sum(abs(e) <= 0.04 for e in errs) >= 4, (payoff, exact, errs)


def test_result_fields_and_convergence():
    res = mlmc_price("call", S0, K, T, R, 0.0, SIG, EPS, seed=3)
    assert isinstance(res, MLMCResult)
    L = res.levels
    for arr in (res.n_samples, res.mean, res.variance, res.cost, res.mean_fine, res.var_fine, res.kurtosis, res.consistency, res.seconds):
        assert arr.shape == (L,)
    assert res.converged and not res.warnings
    assert res.mse <= EPS ** 2 and res.std_error ** 2 + res.bias ** 2 == pytest.approx(res.mse)
    assert res.price == pytest.approx(float(res.mean.sum()), rel=1e-12)
    # Giles' sample-count rule holds at the end: N_l >= 2 eps^-2 sqrt(V_l/C_l) Σ sqrt(V C) (up to 1%)
    ns = 2 / EPS ** 2 * np.sqrt(res.variance / res.cost) * np.sum(np.sqrt(res.variance * res.cost))
    assert np.all(res.n_samples >= 0.99 * np.floor(ns))
    assert 0.6 < res.alpha < 1.5 and 1.5 < res.beta < 2.5 and res.gamma == pytest.approx(1.0)
    assert res.fine_steps == sum(int(n) << l for l, n in enumerate(res.n_samples))
    d = res.as_dict()
    assert d["price"] == res.price and d["n_samples"] == res.n_samples.tolist()


def test_std_error_and_error_over_seeds():
    """Giles' adaptive algorithm keeps its promise over many seeds (Giles 2008, Operations
    Research 56(3), §5; Giles 2015, Acta Numerica 24, §2.6): the finest level first gets n0
    samples of its own (§5 step 2), ``std_error`` is sqrt(Σ V_l/N_l) with the unbiased sample
    variances, it matches the spread of the estimates across seeds, and the RMS error against
    Black-Scholes is below eps. Fixed seeds of a counter-based generator: deterministic.
    Before the fix (optimal counts only, 5 samples on the finest level, biased V_l): RMS 1.05
    eps, std_error 0.74 of the spread over these 32 seeds."""
    eps, exact = 0.02, bs(1)
    runs = [mlmc_price("call", S0, K, T, R, 0.0, SIG, eps, seed=s) for s in range(1, 33)]
    for r in runs:
        n = r.n_samples[1:].astype(np.float64)
        assert np.all(n >= 1000), r.n_samples  # the default n0, on every sampled level
        s1, s2 = r.sums[1:, 0], r.sums[1:, 1]
        unbiased = (s2 - s1 * s1 / n) / (n - 1)
        assert r.std_error ** 2 == pytest.approx(float(np.sum(unbiased / n)), rel=1e-9)
    p = np.array([r.price for r in runs])
    se = np.array([r.std_error for r in runs])
    assert math.sqrt(np.mean((p - exact) ** 2)) <= 0.9 * eps
    assert 0.85 <= math.sqrt(np.mean(se ** 2)) / p.std(ddof=1) <= 1.15


def test_beta_of_the_call_is_two():
    rep = mlmc_test("call", S0, K, T, R, 0.0, SIG, n=20_000, levels=8, eps_list=(), seed=11)
    assert abs(rep.beta - 2.0) <= 0.3, rep.variance
    assert abs(rep.alpha - 1.0) <= 0.3
    assert rep.consistency.max() < 1.0


def test_lmax_warning():
    res = mlmc_price("call", S0, K, T, R, 0.0, SIG, 0.05, seed=1, l_min=1, l_max=2, n0=500)
    assert not res.converged
    assert res.levels == 3
    assert any("weak convergence" in w for w in res.warnings)


# ----------------------------------------------------------------------------- exact level 0

# (payoff code, S0, K, T, r, q, sigma): ATM, deep ITM call (no real roots), OTM call, q > 0,
# high vol, long expiry, Giles' S=50 K=60 case, a short expiry
LEVEL0_CASES = [
    (100.0, 100.0, 1.0, 0.05, 0.0, 0.2),
    (100.0, 40.0, 1.0, 0.05, 0.0, 0.2),
    (100.0, 160.0, 1.0, 0.02, 0.0, 0.2),
    (100.0, 90.0, 1.0, 0.05, 0.03, 0.3),
    (100.0, 120.0, 0.5, 0.01, 0.04, 0.3),
    (100.0, 100.0, 2.0, 0.02, 0.0, 0.8),
    (50.0, 60.0, 2.0, 0.01, 0.0, 0.4),
    (680.0, 680.0, 2.0, 0.05, 0.0, 0.1),
    (100.0, 103.0, 0.01, 0.05, 0.0, 0.3),
]


def _level0_args(S, K, T_, r, q, sig):
    return S, K, T_, r - q, sig, math.exp(-r * T_)


def _std_normal_pdf(z):
    return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


@pytest.mark.parametrize("case", LEVEL0_CASES)
def test_level0_exact_call_put_equals_quadrature_of_the_one_step_payoff(case):
    """The closed form against scipy quad of the kernel's own level-0 payoff times phi(z),
    split at the kinks (the roots of S_1(z) = K)."""
    from scipy import integrate

    S, K_, T_, r, q, sig = case
    args = _level0_args(*case)
    C = 0.5 * sig * sig * T_
    A, B = 1.0 + (r - q) * T_ - C, sig * math.sqrt(T_)
    D = A - K_ / S
    pts = [-40.0, 40.0, 0.0]
    if B * B - 4 * C * D > 0:
        pts += [(-B - math.sqrt(B * B - 4 * C * D)) / (2 * C), (-B + math.sqrt(B * B - 4 * C * D)) / (2 * C)]
    pts = sorted(p for p in pts if -40.0 <= p <= 40.0)
    for code in (level0.CALL, level0.PUT):
        def f(z, code=code):
            return float(level0.level0_payoff(code, z, 0.0, *args, 1.0)) * _std_normal_pdf(z)

        ref = sum(integrate.quad(f, a, b, epsabs=0.0, epsrel=1e-13, limit=500)[0] for a, b in itertools.pairwise(pts))
        got = level0.level0_mean(code, *args)
        assert got == pytest.approx(ref, rel=1e-11, abs=1e-13 * S), (code, got, ref)
    # no real roots: the call is the whole quadratic (one-step parity) and the put is 0
    if B * B - 4 * C * D <= 0:
        assert level0.level0_mean(level0.PUT, *args) == 0.0
    # parity of the one-step scheme: call - put = disc (S (1 + mu T) - K)
    parity = math.exp(-r * T_) * (S * (1 + (r - q) * T_) - K_)
    diff = level0.level0_mean(level0.CALL, *args) - level0.level0_mean(level0.PUT, *args)
    assert diff == pytest.approx(parity, rel=1e-12, abs=1e-12 * S)


@pytest.mark.parametrize("case", LEVEL0_CASES + [(100.0, 100.0, 10.0, 0.05, 0.0, 5.0), (100.0, 300.0, 4.0, 0.0, 0.0, 2.0)])
def test_level0_exact_asian_equals_quadrature(case):
    """Asian: the conditional closed form E[(m + s Z_I)^+] against quad over Z_I of the kernel's
    payoff at a few Z, and the composite Gauss–Legendre outer integral against scipy quad."""
    from scipy import integrate
    from scipy.special import ndtr

    S, K_, T_, r, q, sig = case
    args = _level0_args(*case)
    C = 0.5 * sig * sig * T_
    A, B = 1.0 + (r - q) * T_ - C, sig * math.sqrt(T_)
    s = sig * S * math.sqrt(T_ / 12.0)
    disc = math.exp(-r * T_)
    for code in (level0.ASIAN_CALL, level0.ASIAN_PUT):
        sign = 1.0 if code == level0.ASIAN_CALL else -1.0

        def cond(z, sign=sign):
            m = 0.5 * S * (1.0 + A + B * z + C * z * z) - K_
            return disc * (sign * m * ndtr(sign * m / s) + s * _std_normal_pdf(m / s))

        for z in (-2.0, -0.3, 0.0, 1.1):
            def f(zi, code=code, z=z):
                return float(level0.level0_payoff(code, z, zi, *args, 1.0)) * _std_normal_pdf(zi)

            kink = -(0.5 * S * (1.0 + A + B * z + C * z * z) - K_) / s  # the payoff's kink in Z_I
            inner = integrate.quad(f, -40.0, 40.0, points=[kink] if abs(kink) < 40 else None, epsabs=1e-14 * S,
                                   epsrel=1e-12, limit=500)[0]
            assert cond(z) == pytest.approx(inner, rel=1e-9, abs=1e-12 * S)
        c2, c1, c0 = 0.5 * C, 0.5 * B, 0.5 * (1.0 + A) - K_ / S
        pts = [-38.0, 0.0, 38.0]
        if c1 * c1 - 4 * c2 * c0 > 0:
            sq = math.sqrt(c1 * c1 - 4 * c2 * c0)
            pts += [p for p in ((-c1 - sq) / (2 * c2), (-c1 + sq) / (2 * c2)) if -38.0 < p < 38.0]
        pts = sorted(pts)
        ref = sum(integrate.quad(lambda z, c=cond: c(z) * _std_normal_pdf(z), a, b, epsabs=0.0, epsrel=1e-13,
                                 limit=1000)[0] for a, b in itertools.pairwise(pts))
        got = level0.level0_mean(code, *args)
        assert got == pytest.approx(ref, rel=1e-12, abs=1e-15 * S), (code, got, ref)


@pytest.mark.parametrize("payoff", sorted(level0.PAYOFF_CODES))
@pytest.mark.parametrize("case", [LEVEL0_CASES[0], LEVEL0_CASES[1], LEVEL0_CASES[4], LEVEL0_CASES[6]])
def test_level0_exact_equals_the_sampled_level_0(payoff, case):
    """The exact E[P_0] against 2^21 samples of the level-0 kernel itself (same normals as the
    sampled MLMC): within 4 standard errors; the digital's level 0 is deterministic."""
    code = level0.PAYOFF_CODES[payoff]
    args = _level0_args(*case)
    n = 1 << 21
    sums = mlmc_cpu.run_level(code, 0, 0, n, n, seed_key(314), *args, 1.0).sum(axis=0)
    mean = sums[4] / n
    se = math.sqrt(max(sums[5] / n - mean * mean, 0.0) / n)
    exact = level0.level0_mean(code, *args, 1.0)
    assert abs(mean - exact) <= 4 * se + 1e-12 * case[0], (payoff, case, mean, exact, se)


class _RecordingSampler(mlmc_cpu.CPUSampler):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.levels_requested = set()

    def run(self, requests):
        self.levels_requested.update(r[0] for r in requests if r[2] > 0)
        return super().run(requests)


def test_exact_level0_driver():
    eps = 0.01
    exact = level0.level0_mean(level0.CALL, *_level0_args(S0, K, T, R, 0.0, SIG))
    s = _RecordingSampler(level0.CALL, S0, K, T, R, 0.0, SIG, seed_key(4))
    res = mlmc_price("call", S0, K, T, R, 0.0, SIG, eps, seed=4, sampler=s)
    assert res.exact_level0 and 0 not in s.levels_requested and res.converged
    assert res.n_samples[0] == 0 and res.mean[0] == exact and res.variance[0] == 0.0 and np.all(res.sums[0] == 0)
    assert np.all(res.n_samples[1:] > 0)
    # MSE = Σ_{l>=1} V_l/N_l + bias^2 <= eps^2; price = E[P_0] + Σ_{l>=1} means
    var = sum(res.variance[l] / res.n_samples[l] for l in range(1, res.levels))
    assert res.std_error ** 2 == pytest.approx(var, rel=1e-12)
    assert res.mse == pytest.approx(var + res.bias ** 2, rel=1e-12) and res.mse <= eps ** 2
    assert res.price == pytest.approx(exact + float(res.mean[1:].sum()), rel=1e-13)
    # the optimal N_l over the sampled levels only (Giles 2015 eq. (2.8)): no V_0 C_0 term
    v, c = res.variance[1:], res.cost[1:]
    ns = 2 / eps ** 2 * np.sqrt(v / c) * np.sum(np.sqrt(v * c))
    assert np.all(res.n_samples[1:] >= 0.99 * np.floor(ns))
    assert res.total_cost == pytest.approx(float(np.dot(res.n_samples[1:], res.cost[1:])))
    # far cheaper than sampling level 0, same answer within the tolerance
    sampled = mlmc_price("call", S0, K, T, R, 0.0, SIG, eps, seed=4, exact_level0=False)
    assert not sampled.exact_level0 and sampled.n_samples[0] > 0
    assert res.total_cost < 0.2 * sampled.total_cost
    assert abs(res.price - sampled.price) < 3 * eps
    # l_min = 0 starts at level 1; l_max = 0 falls back to sampling level 0
    r0 = mlmc_price("call", S0, K, T, R, 0.0, SIG, 0.05, seed=1, l_min=0, l_max=5)
    assert r0.n_samples[0] == 0 and r0.levels >= 2
    r1 = mlmc_price("call", S0, K, T, R, 0.0, SIG, 0.05, seed=1, l_min=0, l_max=0)
    assert not r1.exact_level0 and r1.n_samples[0] > 0 and not r1.converged
    # the put and the Asian through the driver
    for payoff, ref in (("put", bs(0)), ("asian_call", None)):
        r = mlmc_price(payoff, S0, K, T, R, 0.0, SIG, 0.02, seed=2)
        assert r.n_samples[0] == 0 and r.converged
        if ref is not None:
            assert abs(r.price - ref) < 3 * 0.02


def test_mlmc_test_report_shows_exact_level0():
    rep = mlmc_test("call", S0, K, T, R, 0.0, SIG, n=20_000, levels=4, eps_list=(0.05,), seed=3)
    assert rep.level0_exact == pytest.approx(level0.level0_mean(level0.CALL, *_level0_args(S0, K, T, R, 0.0, SIG)))
    # the table still samples level 0 (Giles' per-level statistics) and agrees with the exact mean
    assert rep.variance[0] > 0 and abs(rep.mean_fine[0] - rep.level0_exact) < 4 * math.sqrt(rep.var_fine[0] / rep.n)
    assert rep.sweep[0]["n_samples"][0] == 0
    assert "level 0 exact" in rep.text()


# ----------------------------------------------------------------------------- determinism


def test_fixed_seed_reproduces_and_seed_matters():
    a = mlmc_price("asian_call", S0, K, T, R, 0.0, SIG, 0.02, seed=42)
    b = mlmc_price("asian_call", S0, K, T, R, 0.0, SIG, 0.02, seed=42)
    c = mlmc_price("asian_call", S0, K, T, R, 0.0, SIG, 0.02, seed=43)
    assert a.price == b.price and np.array_equal(a.sums, b.sums) and np.array_equal(a.n_samples, b.n_samples)
    assert a.price != c.price


def test_independent_of_thread_count():
    prev = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = mlmc_price("call", S0, K, T, R, 0.0, SIG, 0.02, seed=5)
        numba.set_num_threads(max(2, prev))
        many = mlmc_price("call", S0, K, T, R, 0.0, SIG, 0.02, seed=5)
    finally:
        numba.set_num_threads(prev)
    assert one.price == many.price and np.array_equal(one.sums, many.sums)


def test_samples_depend_only_on_counters():
    # units of a level are bit-identical however the range is split across calls (ranks)
    key = seed_key(9)
    args = (S0, K, T, R, SIG, math.exp(-R * T), 1.0)
    for level in (0, 3, 6):
        u = mlmc_cpu.unit_size(level)
        whole = mlmc_cpu.run_level(level0.CALL, level, 0, 40 * u, u, key, *args)
        parts = np.concatenate([mlmc_cpu.run_level(level0.CALL, level, a, 10 * u, u, key, *args) for a in range(0, 40 * u, 10 * u)])
        assert np.array_equal(whole, parts)


def test_chunk_layout():
    for level in (0, 5, 9, 14):
        for count in (1, 7, 256, 1000, 123_457, 10**9):
            size, n = chunk_layout(level, count)
            assert size % mlmc_cpu.unit_size(level) == 0 and 1 <= n <= 128 and (n - 1) * size < count <= n * size


# ----------------------------------------------------------------------------- API, report


def test_validation_errors():
    with pytest.raises(InvalidInputError):
        mlmc_price("barrier", S0, K, T, R, 0.0, SIG, EPS)
    with pytest.raises(InvalidInputError):
        mlmc_price("call", -1.0, K, T, R, 0.0, SIG, EPS)
    with pytest.raises(InvalidInputError):
        mlmc_price("call", S0, K, T, R, 0.0, 0.0, EPS)
    with pytest.raises(InvalidInputError):
        mlmc_price("call", S0, K, T, R, 0.0, SIG, 0.0)
    with pytest.raises(InvalidInputError):
        mlmc_price("call", S0, K, T, R, 0.0, SIG, EPS, device="tpu")


def test_batch_helper():
    out = mlmc_price_batch("call", S0, [90.0, 100.0, -5.0], T, R, 0.0, SIG, 0.05, seed=1)
    assert np.isnan(out["price"][2]) and "strike" in out["error"][2]
    exact = bs_price_greeks(np.array([1, 1]), S0, np.array([90.0, 100.0]), T, R, 0.0, SIG)["price"]
    assert np.all(np.abs(out["price"][:2] - exact) < 0.2)
    assert out["levels"][0] >= 3 and out["converged"][:2].all()


def test_mlmc_test_command_prints_giles_report():
    from optiond.commands import mlmc as cmd
    import argparse

    parser = argparse.ArgumentParser()
    cmd.register(parser.add_subparsers())
    args = parser.parse_args(["mlmc-test", "-N", "2000", "-L", "4", "--eps", "0.1", "0.05", "--seed", "1"])
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert args.func(args) == 0
    text = buf.getvalue()
    for needle in ("ave(Pf-Pc)", "var(Pf-Pc)", "kurtosis", "check", "alpha =", "beta  =", "gamma =", "mlmc_cost", "std_cost", "savings"):
        assert needle in text
    assert len([ln for ln in text.splitlines() if ln.startswith(("1.000e-01", "5.000e-02"))]) == 2


# ----------------------------------------------------------------------------- GPU


def _gpu():
    from optiond.kernels import gpu as kernel_gpu
    from optiond.kernels.mlmc import gpu as mlmc_gpu

    return mlmc_gpu if kernel_gpu.available() else None


gpu = pytest.mark.skipif(_gpu() is None, reason="needs CuPy and an NVIDIA GPU")


def _assert_sums_close(gpu_sums, cpu_sums, n, tol=1e-12):
    """Sums agree to rounding. P_l sums relatively; for d = P_l - P_{l-1} (which cancels), a
    per-sample error of tol * rms(P_l) bounds the error of Σd^p by p tol rms(P_l) Σ|d|^(p-1)."""
    g, c = np.asarray(gpu_sums, float), np.asarray(cpu_sums, float)
    np.testing.assert_allclose(g[4:], c[4:], rtol=tol)
    rms_f = math.sqrt(c[5] / n)
    m2, m4 = c[1] / n, c[3] / n
    bounds = (1.0, 2.0 * math.sqrt(m2), 3.0 * m2, 4.0 * math.sqrt(m2 * m4))
    for p in range(4):
        assert abs(g[p] - c[p]) / n <= tol * rms_f * bounds[p] + 1e-300, (p, g[p], c[p])


@gpu
@pytest.mark.gpu
def test_gpu_philox_known_answers():
    m = _gpu()
    out = m.philox_kat_gpu([v[1] for v in KAT_VECTORS if v[0] == 10], [v[2] for v in KAT_VECTORS if v[0] == 10])
    assert [tuple(int(x) for x in row) for row in out] == [v[3] for v in KAT_VECTORS if v[0] == 10]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("payoff", sorted(level0.PAYOFF_CODES))
def test_gpu_level_sums_equal_cpu_to_rounding(payoff):
    """Same seed and counters: sample-parallel levels (0-7) do the same operations in the same
    order as the CPU (fmad off), team levels (8-12) the same factors in another association
    order; differences are last-bit (libm vs CUDA math, summation trees)."""
    m = _gpu()
    code = level0.PAYOFF_CODES[payoff]
    key = seed_key(77)
    args = (S0, K, T, R - 0.01, SIG, math.exp(-R * T), 1.0)
    s = m.GPUSampler(code, S0, K, T, R, 0.01, SIG, key)
    for level, n in ((0, 100_000), (1, 50_000), (4, 20_000), (7, 4_000), (8, 1_000), (11, 64), (12, 16)):
        cs, _ = chunk_layout(level, n)
        g = s.run([(level, 1000, n, cs)])
        c = mlmc_cpu.run_level(code, level, 1000, n, cs, key, *args)
        _assert_sums_close(g.sum(0), c.sum(0), n)


@gpu
@pytest.mark.gpu
def test_gpu_adaptive_equals_cpu_and_is_deterministic():
    for payoff in ("call", "digital_call", "asian_call"):
        c = mlmc_price(payoff, S0, K, T, R, 0.0, SIG, 0.005, seed=3)
        g1 = mlmc_price(payoff, S0, K, T, R, 0.0, SIG, 0.005, seed=3, device="gpu")
        g2 = mlmc_price(payoff, S0, K, T, R, 0.0, SIG, 0.005, seed=3, device="gpu")
        assert g1.price == g2.price and np.array_equal(g1.sums, g2.sums)
        assert np.array_equal(g1.n_samples, c.n_samples)
        assert g1.price == pytest.approx(c.price, rel=1e-12, abs=1e-12)


@gpu
@pytest.mark.gpu
def test_gpu_fast_variant_agrees_statistically():
    exact = bs(1)
    errs = [mlmc_price("call", S0, K, T, R, 0.0, SIG, EPS, seed=s, device="gpu", gpu_options={"fast": True}).price - exact
            for s in SEEDS]
    assert sum(abs(e) <= 2 * EPS for e in errs) >= 18, errs


def test_bias_test_does_not_stop_early_when_the_weak_error_changes_sign():
    # S = 50, K = 60, sigma = 0.4, T = 2: the level means change sign near level 3, and an
    # uncapped regression alpha (3..5) stopped at L = 4 with errors of -2..-5 eps.
    eps = 0.005
    ref = bs_price_greeks(1, 50.0, 60.0, 2.0, 0.01, 0.0, 0.4)["price"][0]
    errs = np.array([(mlmc_price("call", 50.0, 60.0, 2.0, 0.01, 0.0, 0.4, eps, seed=s).price - ref) / eps
                     for s in range(8)])
    # the estimator's MSE target is eps^2 (bias^2 <= eps^2 / 2): allow sampling slack on 8 seeds
    assert np.sqrt(np.mean(errs ** 2)) < 1.6
    assert abs(errs.mean()) < 1.2


# ---- under a daemon job's control: progress, cancellation, same bits -------------------------

def test_controlled_run_reports_progress_and_gives_the_same_bits(monkeypatch):
    from optiond import runctl
    from optiond.kernels.mlmc import cpu as mc

    args = ("call", 100.0, 100.0, 1.0, 0.05, 0.0, 0.2, 0.005)
    plain = mlmc_price(*args, seed=11)
    monkeypatch.setattr(mc, "PIECE_PATH_STEPS", 1 << 12)  # many small pieces per level
    seen: list[float] = []
    with runctl.controlled(runctl.RunControl(seen.append, lambda: False)):
        fracs: list[float] = []
        ctl = mlmc_price(*args, seed=11, progress=lambda *_: runctl.check(),
                              on_fraction=lambda f: (fracs.append(f), runctl.report(f)))
    assert ctl.price == plain.price and ctl.std_error == plain.std_error
    assert np.array_equal(ctl.n_samples, plain.n_samples)
    assert fracs and fracs[-1] == 1.0 and all(0.0 <= f <= 1.0 for f in fracs) and seen == fracs


def test_cancelled_run_stops_inside_an_iteration(monkeypatch):
    from optiond import runctl
    from optiond.kernels.mlmc import cpu as mc

    monkeypatch.setattr(mc, "PIECE_PATH_STEPS", 1 << 12)
    checks = {"n": 0}

    def cancelled() -> bool:
        checks["n"] += 1
        return checks["n"] > 3  # the fourth check: in the middle of the first big level

    with runctl.controlled(runctl.RunControl(None, cancelled)), pytest.raises(runctl.Cancelled):
        mlmc_price("call", 100.0, 100.0, 1.0, 0.05, 0.0, 0.2, 0.002, seed=2)
    assert checks["n"] == 4
    assert not runctl.active()  # the control ends with the block
