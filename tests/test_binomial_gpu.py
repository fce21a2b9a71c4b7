"""GPU CRR kernels against the CPU reference ``binomial.cpu.crr_batch`` (needs CuPy and a CUDA
GPU; skipped otherwise).

Grid in the style of the seed: moneyness (K = 80, 100, 125 at S = 100) x volatility 0.1-0.6 x
expiry 0.25-5 x rate 0/5/10 % x dividend yield 0/3 %, puts and calls, American and European,
at N = 1, 2, 31, 32, 33, 1000, 4097 and 1e5 (options whose CRR p leaves [0, 1] are dropped).
Every kernel (warp per tree in each shape, block per tree, the pipeline through each of its
phases and the CPU tail, the register block and cluster kernels for whole trees, the naive per-level
kernel) must equal the CPU to 1e-12 relative in FP64; FP32 within its stated error; the
Greeks equal the CPU's within the rounding their formulas amplify. The CPU references are computed once per N (N = 1e5 on a reduced grid).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from optiond import engine
from optiond.kernels import gpu
from optiond.kernels.binomial import _bench
from optiond.kernels.binomial import cpu as bc
from optiond.kernels.binomial import gpu as bg
from optiond.kernels.binomial import iv_gpu as biv
from optiond.kernels.binomial import pipeline as bp
from optiond.kernels.binomial import plan, variants
from optiond.models import Batch, Method

pytestmark = pytest.mark.gpu

NS = (1, 2, 31, 32, 33, 1000, 4097, 100_000)
RTOL = 1e-12


@pytest.fixture(scope="module", autouse=True)
def _need_gpu():
    if not gpu.available():
        pytest.skip("no CuPy or no CUDA GPU")


def grid(N: int, reduced: bool = False):
    """Columns (kind, style, S, K, T, r, q, sigma, N) of the test grid, p in [0, 1] only;
    ``reduced``: two corners of the grid (K 80, sigma 0.1, T 0.25, r 0 and K 125, sigma 0.6,
    T 5, r 10 %, q 3 %): an American put and call, a European put and call (4 options; the CPU
    reference takes about 8 s per tree at N = 1e5, where its vectors fall out of cache)."""
    if reduced:
        c1, c2 = (80.0, 0.1, 0.25, 0.0, 0.0), (125.0, 0.6, 5.0, 0.10, 0.03)
        rows = [(0, 1) + c1, (1, 1) + c2, (0, 0) + c2, (1, 0) + c1]
    else:
        rows = list(itertools.product((0, 1), (0, 1), (80.0, 100.0, 125.0), (0.1, 0.3, 0.6), (0.25, 1.0, 5.0),
                                      (0.0, 0.05, 0.10), (0.0, 0.03)))
    kind, style, K, s, T, r, q = (np.array(c) for c in zip(*rows))
    n = kind.size
    S, Nn = np.full(n, 100.0), np.full(n, N, dtype=np.int64)
    ok = np.ones(n, bool)
    ok[bc.probability_errors(T, r, q, s, Nn)] = False
    return [c[ok] for c in (kind, style, S, K, T, r, q, s, Nn)]


_refs: dict = {}


def reference(N: int, greeks: bool):
    """(columns, CPU results) for the grid at N (cached); at N = 1e5 the reduced grid, prices
    only (Greeks would cost five CPU trees per option)."""
    if N >= 100_000:
        greeks = False
    key = (N, greeks)
    if key not in _refs:
        cols = grid(N, reduced=N >= 100_000)
        _refs[key] = cols, bc.crr_batch(*cols, greeks=greeks)
    return _refs[key]


def assert_prices(got, ref, rtol=RTOL, what=""):
    err = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-300)
    i = int(np.argmax(err))
    assert err[i] <= rtol, f"{what}: max relative error {err[i]:.3g} at {i} (gpu {got[i]!r}, cpu {ref[i]!r})"


def assert_greeks(got, ref, cols, what=""):
    """delta, gamma, theta from the tree's first levels; vega, rho from bumped prices: the
    tolerance is the 1e-12 price tolerance carried through each formula."""
    _, _, S, _, T, _, _, s, N = cols
    dt = T / N
    u = np.exp(s * np.sqrt(dt))
    ds = S * (u - 1.0 / u)
    e = 4 * RTOL * np.maximum(np.abs(ref[0]), 1e-300) + 1e-15  # the levels' error, about
    tol = {1: 4 * e / ds, 2: 16 * e / ds ** 2, 3: 4 * e / dt, 4: 4 * e / bc.VEGA_BUMP, 5: 4 * e / bc.RHO_BUMP}
    for k, name in ((1, "delta"), (2, "gamma"), (3, "theta"), (4, "vega"), (5, "rho")):
        a, b = got[k], ref[k]
        assert np.array_equal(np.isnan(a), np.isnan(b)), f"{what} {name}: NaN pattern differs"
        m = ~np.isnan(b)
        d = np.abs(a[m] - b[m]) - (tol[k][m] + 1e-10 * np.abs(b[m]))
        assert d.max(initial=-1) <= 0, f"{what} {name}: excess {d.max():.3g} at {int(np.argmax(d))}"


# --------------------------------------------------------------------------- batch kernels, FP64

@pytest.mark.parametrize("N", NS)
def test_batch_auto_fp64_with_greeks(N):
    greeks = N < 100_000
    cols, ref = reference(N, greeks=greeks)
    got = bg.crr_batch_gpu(*cols, greeks=greeks)
    assert_prices(got[0], ref[0], what=f"batch N={N}")
    if greeks:
        assert_greeks(got, ref, cols, what=f"batch N={N}")


@pytest.mark.parametrize("N", NS)
def test_block_kernel_fp64(N):
    cols, ref = reference(N, greeks=False)
    got = bg.crr_batch_gpu(*cols, greeks=False, route="block")
    assert_prices(got[0], ref[0], what=f"block N={N}")


@pytest.mark.parametrize("variant", variants.WARP_VARIANTS["fp64"] + [v for v in variants.BENCH_WARP_VARIANTS if v.dtype == "double"]
                         + variants.WARP_VARIANTS["fp32"] + [v for v in variants.BENCH_WARP_VARIANTS if v.dtype == "float"],
                         ids=lambda v: f"G{v.G}R{v.R}")
def test_every_warp_shape_fp64(variant):
    fp32 = variant.dtype == "float"
    for N in (1, 2, 31, 32, 33, 1000):
        if N + 1 > variant.cw:
            continue
        cols, ref = reference(N, greeks=False)
        got = bg.crr_batch_gpu(*cols, greeks=False, route="warp", warp_variant=variant,
                               precision="fp32" if fp32 else "fp64")
        if fp32:
            assert np.all(np.abs(got[0] - ref[0]) <= bg.FP32_RTOL * np.abs(ref[0]) + bg.FP32_ATOL_K * cols[3])
        else:
            assert_prices(got[0], ref[0], what=f"warp {variant.name} N={N}")


# --------------------------------------------------------------------------- pipeline, FP64

PLANS = {
    "default": None,
    "all-phases": bp.PipelinePlan(big_to_mid=3000, mid_to_small=1500, small_to_block=1000, cpu_tail=100, prune=False),
    "big-only": bp.PipelinePlan(big_to_mid=0, mid_to_small=0, small_to_block=0, cpu_tail=0, prune=False),
    "mid-only": bp.PipelinePlan(big_to_mid=10**8, mid_to_small=0, small_to_block=0, cpu_tail=0, prune=False),
    "block-and-tail": bp.PipelinePlan(big_to_mid=10**8, mid_to_small=10**8, small_to_block=10**8, cpu_tail=20,
                                      prune=False),
    # every tree in the pruned-window kernel (binomial.cu, "Pruned windows"), alone and with a CPU tail
    "pruned": bp.PipelinePlan(prune_steps=0, cluster_levels=0),
    "pruned-tail": bp.PipelinePlan(prune_steps=0, cluster_levels=0, cpu_tail=50),
    "register": bp.PipelinePlan(reg_levels=10**9),  # the whole tree in crr_pipe_reg where N fits it
    "cluster": bp.PipelinePlan(cluster_levels=10**9),  # the whole tree in crr_pipe_cluster where N fits it
}


@pytest.mark.parametrize("kernel, plan_name, levels", [("crr_pipe_reg", "register", "reg_levels"),
                                                        ("crr_pipe_cluster", "cluster", "cluster_levels")])
def test_whole_tree_kernels_take_whole_trees_only(kernel, plan_name, levels):
    v = variants.PIPE_REG["fp64"] if kernel == "crr_pipe_reg" else variants.PIPE_CLUSTER["fp64"]
    top = plan.reg_max_levels(v) if kernel == "crr_pipe_reg" else plan.cluster_max_levels(v)
    assert plan.pipeline_phases(1000, "fp64", PLANS[plan_name]) == [(v, False, 1000, 0)]
    assert plan.pipeline_phases(top, "fp64", PLANS[plan_name]) == [(v, False, top, 0)]
    assert all(p.kernel != kernel for p, _, _, _ in plan.pipeline_phases(top + 1, "fp64", PLANS[plan_name]))
    # not with a CPU tail, and not above the plan's level limit
    assert all(p.kernel != kernel for p, _, _, _ in
               plan.pipeline_phases(1000, "fp64", bp.PipelinePlan(**{levels: 10**9, "cpu_tail": 10})))
    assert all(p.kernel != kernel for p, _, _, _ in
               plan.pipeline_phases(1001, "fp64", bp.PipelinePlan(**{levels: 1000})))


@pytest.mark.parametrize("variant", [variants.PIPE_CLUSTER["fp64"]] + variants.BENCH_CLUSTER_VARIANTS,
                         ids=lambda v: f"G{v.G}R{v.R}K{v.K}W{v.threads // 32}C{v.cluster}")
def test_every_cluster_shape_fp64(variant, monkeypatch):
    """Each compiled cluster shape (blocks per cluster, warps per block, chunk, slab depth) over
    the grid: trees of one chunk (no slab), of one warp per block and of every warp in use."""
    monkeypatch.setitem(variants.PIPE_CLUSTER, "fp64", variant)
    top = plan.cluster_max_levels(variant)
    for N in (1, 2, 33, variant.cw + 1, 1000, 4097, top):
        if N > top:
            continue
        if N in NS:
            cols, ref = reference(N, greeks=False)
            cols, ref = [c[::11] for c in cols], ref[:, ::11]
        else:
            cols = [c[::11] for c in grid(N)]
            ref = bc.crr_batch(*cols, greeks=False)
        got = bp.crr_pipeline_gpu(*cols, greeks=False, plan=PLANS["cluster"])
        assert_prices(got[0], ref[0], what=f"cluster {variant.name} K={variant.K} N={N}")


@pytest.mark.parametrize("plan", list(PLANS), ids=str)
@pytest.mark.parametrize("N", NS)
def test_pipeline_fp64(N, plan):
    """Each phase of the pipeline alone and all together, the CPU tail included."""
    p = PLANS[plan]
    if N >= 100_000 and plan in ("mid-only", "block-and-tail", "register", "cluster", "pruned-tail"):
        pytest.skip("covered at the smaller N; keeps the run short")
    if N >= 100_000 and plan == "all-phases":
        p = bp.PipelinePlan(big_to_mid=50_000, mid_to_small=20_000, small_to_block=2000, cpu_tail=300, prune=False)
    cols, ref = reference(N, greeks=False)
    if 1000 <= N < 100_000:  # one tree at a time: a sample is enough
        cols, ref = [c[::9] for c in cols], ref[:, ::9]
    got = bp.crr_pipeline_gpu(*cols, greeks=False, plan=p)
    assert_prices(got[0], ref[0], what=f"pipeline {plan} N={N}")


@pytest.mark.parametrize("plan", ("all-phases", "register", "cluster", "pruned"))
@pytest.mark.parametrize("N", (2, 1000, 4097))
def test_pipeline_greeks(N, plan):
    cols, ref = reference(N, greeks=True)
    cols, ref = [c[::13] for c in cols], ref[:, ::13]
    got = bp.crr_pipeline_gpu(*cols, greeks=True, plan=PLANS[plan])
    assert_prices(got[0], ref[0], what=f"pipeline {plan} greeks N={N}")
    assert_greeks(got, ref, cols, what=f"pipeline {plan} N={N}")


# --------------------------------------------------------------------------- FP32

@pytest.mark.parametrize("N", [n for n in NS if n <= bg.FP32_MAX_STEPS])
def test_fp32_within_stated_error(N):
    cols, ref = reference(N, greeks=False)
    K = cols[3]
    bound = bg.FP32_RTOL * np.abs(ref[0]) + bg.FP32_ATOL_K * K
    for how, got in (("batch", bg.crr_batch_gpu(*cols, greeks=False, precision="fp32")),
                     ("block", bg.crr_batch_gpu(*cols, greeks=False, precision="fp32", route="block")),
                     ("pipeline", bp.crr_pipeline_gpu(*[c[::7] for c in cols], greeks=False, precision="fp32",
                                                      plan=PLANS["all-phases"])),
                     ("register", bp.crr_pipeline_gpu(*[c[::7] for c in cols], greeks=False, precision="fp32",
                                                      plan=PLANS["register"])),
                     ("cluster", bp.crr_pipeline_gpu(*[c[::7] for c in cols], greeks=False, precision="fp32",
                                                     plan=PLANS["cluster"]))):
        r = ref[0] if how in ("batch", "block") else ref[0][::7]
        b = bound if how in ("batch", "block") else bound[::7]
        err = np.abs(got[0] - r)
        assert np.all(np.isfinite(got[0])), f"fp32 {how} N={N}: non-finite price"
        assert np.all(err <= b), f"fp32 {how} N={N}: max error/bound {np.max(err / b):.3g}"


def test_fp32_greeks_close():
    cols, ref = reference(1000, greeks=True)
    got = bg.crr_batch_gpu(*cols, greeks=True, precision="fp32")
    np.testing.assert_allclose(got[1], ref[1], atol=2e-3)  # delta
    np.testing.assert_allclose(got[0], ref[0], rtol=bg.FP32_RTOL, atol=bg.FP32_ATOL_K * cols[3].max())


# --------------------------------------------------------------------------- mixed portfolio

def test_mixed_batch_of_10000_equals_cpu_option_by_option():
    rng = np.random.default_rng(42)
    n = 10_000
    kind, style = rng.integers(0, 2, n), rng.integers(0, 2, n)
    S, K = rng.uniform(50, 150, n), rng.uniform(50, 150, n)
    T, r, q = rng.uniform(0.05, 3, n), rng.choice([0.0, 0.02, 0.05, 0.1], n), rng.uniform(0, 0.05, n)
    s = rng.uniform(0.08, 0.8, n)
    N = np.where(rng.random(n) < 0.8, rng.integers(1, 1024, n), rng.integers(1024, 2500, n))
    ok = np.ones(n, bool)
    ok[bc.probability_errors(T, r, q, s, N)] = False
    cols = [c[ok] for c in (kind, style, S, K, T, r, q, s, N)]
    ref = bc.crr_batch(*cols, greeks=True)
    got = bg.crr_batch_gpu(*cols, greeks=True)
    assert_prices(got[0], ref[0], what="mixed 10k")
    assert_greeks(got, ref, cols, what="mixed 10k")


def test_exercise_row_skipping_equals_cpu():
    """Rows of nodes whose exercise value cannot be positive skip it (binomial.cu,
    exercise_rows): exact in FP64. American calls with large dividend yields (exercise above the
    boundary, whose row set is fixed per re-anchoring block) and puts deep in and out of the
    money, through the warp, block and pipeline kernels, across many re-anchorings."""
    rows = list(itertools.product((0, 1), (60.0, 100.0, 160.0), (0.15, 0.5), (0.5, 3.0), (0.08,), (0.0, 0.06, 0.12)))
    kind, K, s, T, r, q = (np.array(c) for c in zip(*rows))
    n = kind.size
    for N in (300, 1000, 3000):
        Nn = np.full(n, N)
        ok = np.ones(n, bool)
        ok[bc.probability_errors(T, r, q, s, Nn)] = False
        cols = [c[ok] for c in (kind, np.ones(n, dtype=np.int64), np.full(n, 100.0), K, T, r, q, s, Nn)]
        ref = bc.crr_batch(*cols, greeks=False)[0]
        assert_prices(bg.crr_batch_gpu(*cols, greeks=False)[0], ref, what=f"skip batch N={N}")
        assert_prices(bg.crr_batch_gpu(*cols, greeks=False, route="block")[0], ref, what=f"skip block N={N}")
        sub = [c[::3] for c in cols]
        # big-only: the 16-row kernel, whose exercise-row count is rounded up to whole groups
        for plan in ("default", "all-phases", "big-only", "register", "cluster"):
            got = bp.crr_pipeline_gpu(*sub, greeks=False, plan=PLANS[plan])[0]
            assert_prices(got, ref[::3], what=f"skip pipeline {plan} N={N}")
        g32 = bg.crr_batch_gpu(*cols, greeks=False, precision="fp32")[0]
        assert np.all(np.abs(g32 - ref) <= bg.FP32_RTOL * np.abs(ref) + bg.FP32_ATOL_K * cols[3]), f"skip fp32 N={N}"


def test_pruned_windows_equal_cpu_at_the_edges():
    """Pruned windows (binomial.cu): the exercise side's margin rule where S* = K (1 - e^{-r dt}) /
    (1 - e^{-q dt}) lies inside the tree (q > r for puts, r > q for calls), no exercise side
    (r = 0 puts, q = 0 calls, European options), options so deep in or out of the money that
    the window empties or starts beyond the tree, and a root that is itself exercised; alone and
    with a CPU tail, against the CPU tree, and against the dense GPU pipeline."""
    rows = list(itertools.product((0, 1), (0, 1), (20.0, 70.0, 100.0, 140.0, 500.0),
                                  ((0.0, 0.0), (0.05, 0.0), (0.02, 0.1), (0.1, 0.02), (0.0, 0.06), (0.3, 0.0)),
                                  (0.1, 0.45)))
    kind, style, K, rq, s = (np.array(c) for c in zip(*rows))
    r, q = np.array([x[0] for x in rq]), np.array([x[1] for x in rq])
    n = kind.size
    for N in (700, 20_000):
        Nn = np.full(n, N)
        ok = np.ones(n, bool)
        ok[bc.probability_errors(np.full(n, 2.0), r, q, s, Nn)] = False
        cols = [c[ok] for c in (kind, style, np.full(n, 100.0), K, np.full(n, 2.0), r, q, s, Nn)]
        ref = bc.crr_batch(*cols, greeks=False)[0]
        dense = bp.crr_pipeline_gpu(*cols, greeks=False, plan=bp.PipelinePlan(cluster_levels=0, prune=False))[0]
        assert_prices(dense, ref, what=f"dense N={N}")
        for plan in ("pruned", "pruned-tail"):
            got = bp.crr_pipeline_gpu(*cols, greeks=False, plan=PLANS[plan])[0]
            assert_prices(got, ref, what=f"{plan} edges N={N}")


def test_gated_device_time_is_recorded_and_prices_unchanged():
    """timing["gate"]: the launches queue behind the gate kernel (binomial.timer); the gate is
    released in time, the window is positive and shorter than the whole call, and the prices
    are those of an untimed call."""
    import time

    cols, _ = reference(1000, greeks=False)
    for fn in (lambda tm: bg.crr_batch_gpu(*cols, greeks=False, timing=tm),
               lambda tm: bp.crr_pipeline_gpu(*[c[:2] for c in cols], greeks=False, timing=tm)):
        fn(None)
        tm = {"gate": True}
        t0 = time.perf_counter()
        got = fn(tm)
        wall = time.perf_counter() - t0
        assert tm["gated"] and not tm["gate_timed_out"]
        assert 0.0 < tm["device_s"] < wall
        np.testing.assert_array_equal(got, fn(None))


# --------------------------------------------------------------------------- naive, IV, engine

def test_naive_kernel():
    cols, ref = reference(1000, greeks=False)
    for st in (0, 1):
        m = cols[1] == st
        sub = [c[m] for c in cols]
        assert_prices(_bench.crr_naive_gpu(*sub), ref[0][m], what=f"naive style={st}")


def test_chain_implied_vols_equal_cpu():
    rng = np.random.default_rng(3)
    n = 2000
    kind, style = rng.integers(0, 2, n), np.ones(n, dtype=np.int64)
    S, K, T = 100.0, rng.uniform(60, 140, n), rng.uniform(0.02, 2, n)
    sig = rng.uniform(0.1, 0.9, n)
    price = bc.crr_batch(kind, style, S, K, T, 0.04, 0.01, sig, 500, greeks=False)[0]
    price[::50] *= 0.5  # some below intrinsic
    vol, st = biv.crr_implied_vol_gpu(price, kind, style, S, K, T, 0.04, 0.01, 500, xtol=1e-12)
    ref_vol, ref_st = bc.crr_implied_vol(price, kind, style, S, K, T, 0.04, 0.01, 500, xtol=1e-12)
    np.testing.assert_array_equal(st, ref_st)
    ok = st == 0
    assert ok.sum() > n // 2
    close = _roots_agree(vol, ref_vol, ok, price, kind, style, S, K, T, 0.04, 0.01, 500)
    assert close.mean() > 0.95


def _roots_agree(vol, ref_vol, ok, price, kind, style, S, K, T, r, q, N) -> np.ndarray:
    """Assert that two Brent searches found the same roots where both solved (``ok``): both
    stop at |f| <= 1e-12 max(1, price) or a 1e-12 bracket, so where vega is tiny the two
    stopping points may differ in volatility, never in price (repriced on the CPU tree).
    Returns the rows' "within 1e-9 in volatility" flags."""
    def rows(x):
        return x[ok] if np.ndim(x) else x

    close = np.abs(vol[ok] - ref_vol[ok]) <= 1e-9
    repriced = bc.crr_batch(rows(kind), rows(style), S, rows(K), rows(T), rows(r), rows(q), vol[ok], rows(N),
                            greeks=False)[0]
    assert np.all(close | (np.abs(repriced - price[ok]) <= 2e-12 * np.maximum(1.0, price[ok])))
    return close


def test_device_root_find_equals_the_cpu_and_the_host_loop():
    """crr_iv_warp (the whole Brent search in one launch) against the CPU's per-option Brent on
    the CPU tree (binomial.cpu.crr_implied_vol, the reference) and the host loop over batch
    launches (the same Brent steps, kernels/brent.py): mixed steps (all three warp shapes),
    calls and puts, American and European, bracket hints, prices below and above the tree."""
    rng = np.random.default_rng(11)
    n = 1200
    kind, style = rng.integers(0, 2, n), rng.integers(0, 2, n)
    S, K, T = 100.0, rng.uniform(60, 140, n), rng.uniform(0.02, 2, n)
    r, q = rng.uniform(0.0, 0.06, n), rng.uniform(0.0, 0.04, n)
    N = rng.choice([1, 2, 31, 100, 300, 500, 1000], n)  # every warp shape, and the smallest trees
    sig = rng.uniform(0.08, 0.9, n)
    price = bc.crr_batch(kind, style, S, K, T, r, q, sig, N, greeks=False)[0]
    price[::40] *= 0.3  # below the tree at the bracket's low end
    price[7::97] += 80.0  # above it at the high end
    lo, hi = np.maximum(sig - 0.1, 1e-4), sig + 0.1
    lo[::3], hi[::3] = bc.MIN_IV, bc.MAX_IV
    dev_vol, dev_st = biv.crr_implied_vol_gpu(price, kind, style, S, K, T, r, q, N, lo=lo, hi=hi, xtol=1e-12)
    host_vol, host_st = biv.crr_implied_vol_gpu(price, kind, style, S, K, T, r, q, N, lo=lo, hi=hi, xtol=1e-12,
                                               evaluator=biv._gpu_price_evaluator("fp64"))
    cpu_vol, cpu_st = bc.crr_implied_vol(price, kind, style, S, K, T, r, q, N, lo=lo, hi=hi, xtol=1e-12)
    np.testing.assert_array_equal(dev_st, cpu_st)
    np.testing.assert_array_equal(dev_st, host_st)
    assert {0, 1, 2} <= set(np.unique(dev_st).tolist())
    ok = dev_st == 0
    assert _roots_agree(dev_vol, cpu_vol, ok, price, kind, style, S, K, T, r, q, N).mean() > 0.95
    _roots_agree(dev_vol, host_vol, ok, price, kind, style, S, K, T, r, q, N)
    assert np.isnan(dev_vol[~ok & (dev_st != 3)]).all()


def test_engine_prices_on_the_gpu():
    rng = np.random.default_rng(9)
    n = 3000
    b = Batch.from_columns(kind=rng.choice(["put", "call"], n), style="american", spot=100.0,
                           strike=rng.uniform(80, 120, n), expiry=1.0, rate=0.03, volatility=0.25)
    res = engine.price(b, Method(steps=1000, device="gpu"))
    assert res.device.startswith("gpu:"), res.diagnostics
    assert res.diagnostics["path"] == "gpu-batch" and "gpu_fallback" not in res.diagnostics
    ref = bc.crr_batch(b.kind, b.style, b.spot, b.strike, b.expiry, b.rate, b.dividend_yield, b.volatility, 1000)
    assert_prices(res.price, ref[0], what="engine")
    one = engine.price(b.take([0]), Method(steps=50_000, device="gpu", greeks=False))
    assert one.diagnostics["path"] == "gpu-pipeline"
    assert_prices(one.price, bc.crr_batch(b.kind[:1], 1, 100.0, b.strike[:1], 1.0, 0.03, 0.0, 0.25, 50_000,
                                          greeks=False)[0], what="engine pipeline")


def test_chain_implied_vols_with_row_brackets_equal_cpu():
    """The per-row bracket hints of the chain job: the GPU's vectorised Brent and the CPU's
    per-option Brent agree with them as without them."""
    rng = np.random.default_rng(4)
    n = 500
    kind, style = rng.integers(0, 2, n), np.ones(n, dtype=np.int64)
    S, K, T = 100.0, rng.uniform(70, 130, n), rng.uniform(0.02, 2, n)
    sig = rng.uniform(0.1, 0.9, n)
    price = bc.crr_batch(kind, style, S, K, T, 0.04, 0.01, sig, 500, greeks=False)[0]
    lo, hi = np.maximum(sig - 0.05, 1e-4), sig + 0.05
    vol, st = biv.crr_implied_vol_gpu(price, kind, style, S, K, T, 0.04, 0.01, 500, lo=lo, hi=hi, xtol=1e-12)
    ref_vol, ref_st = bc.crr_implied_vol(price, kind, style, S, K, T, 0.04, 0.01, 500, lo=lo, hi=hi, xtol=1e-12)
    np.testing.assert_array_equal(st, ref_st)
    ok = st == 0
    assert ok.sum() > 0.9 * n
    np.testing.assert_allclose(vol[ok], ref_vol[ok], atol=1e-9)
