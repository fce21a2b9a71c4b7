"""CPU/GPU dispatch of the binomial pricer, without a GPU (CI).

* :func:`optiond.kernels.binomial.plan.choose` and the calibration file (round trip, bad files);
* the engine's fall-back to the CPU when the GPU path fails (simulated by monkeypatching);
* the GPU driver's host side, exactly: the per-tree parameters and the Greek assembly give,
  through a CPU replay of the GPU recurrence, bit-identical results to ``crr_batch``; the
  vectorised implied-vol root find equals ``crr_implied_vol`` with a CPU evaluator;
* the CUDA sources compile (``nvcc -ptx``) where nvcc exists.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import shutil
import subprocess
from collections import Counter

import numba as nb
import numpy as np
import pytest

from optiond import costs, engine
from optiond.kernels import gpu
from optiond.kernels.binomial import cpu as bc
from optiond.kernels.binomial import gpu as bg
from optiond.kernels.binomial import iv_gpu as biv
from optiond.kernels.binomial import pipeline as bp
from optiond.kernels.binomial import plan as dispatch  # the calibrated dispatch and the pipeline's plan
from optiond.kernels.binomial import variants
from optiond.kernels.rootfind import IV_INVALID
from optiond.models import Batch, Method

CAL = dict(dispatch.DEFAULTS, gpu_min_nodes=1e6, pipeline_min_steps=20_000, pipeline_max_options=4)


# --------------------------------------------------------------------------- choose()

def test_no_gpu_always_cpu():
    for n, N in ((1, 10), (1, 10**6), (10**5, 1000)):
        assert dispatch.choose(n, N, calibration=CAL, gpu=False) == "cpu"
        assert dispatch.choose(n, N, calibration=CAL, gpu=False, force_gpu=True) == "cpu"


def test_choose_by_size():
    assert dispatch.choose(1, 100, calibration=CAL, gpu=True) == "cpu"  # 5 * 5151 nodes
    assert dispatch.choose(1, 100, greeks=False, calibration=CAL, gpu=True) == "cpu"
    assert dispatch.choose(10_000, 1000, calibration=CAL, gpu=True) == "gpu-batch"
    assert dispatch.choose(1, 100_000, calibration=CAL, gpu=True) == "gpu-pipeline"
    assert dispatch.choose(4, [100, 50_000, 10, 10], calibration=CAL, gpu=True) == "gpu-pipeline"
    assert dispatch.choose(5, 50_000, calibration=CAL, gpu=True) == "gpu-batch"  # too many for one tree at a time
    assert dispatch.choose(2, 5_000, calibration=CAL, gpu=True) == "gpu-batch"  # below pipeline_min_steps
    assert dispatch.choose(0, 1000, calibration=CAL, gpu=True) == "cpu"


def test_choose_threshold_is_the_calibrated_one():
    nodes = costs.tree_nodes(1000)  # 501501
    assert nodes == 501_501
    cal = dict(CAL, gpu_min_nodes=nodes * 5)
    assert dispatch.choose(1, 1000, greeks=True, calibration=cal, gpu=True) == "gpu-batch"
    assert dispatch.choose(1, 1000, greeks=False, calibration=cal, gpu=True) == "cpu"
    assert dispatch.choose(1, 1000, greeks=False, calibration=cal, gpu=True, force_gpu=True) == "gpu-batch"
    # a scalar N broadcasts over the options
    assert dispatch.choose(3, 1000, greeks=False, calibration=dict(cal, gpu_min_nodes=3 * nodes), gpu=True) == "gpu-batch"


def test_choose_without_gpu_module_state(monkeypatch):
    monkeypatch.setenv(gpu.DISABLE_ENV, "1")
    assert not gpu.available()
    assert dispatch.choose(10_000, 1000, calibration=CAL) == "cpu"


# --------------------------------------------------------------------------- calibration file

def test_calibration_round_trip(tmp_path):
    p = tmp_path / "sub" / "calibration.json"
    cal = dict(dispatch.DEFAULTS, source="measured", gpu="Test GPU", gpu_min_nodes=123456.0, pipeline_min_steps=7000,
               plan={"big_to_mid": 111_000, "mid_to_small": 9000, "small_to_block": 1500, "cpu_tail": 200,
                     "prune_steps": 50_000},
               measurements={"cpu": [[1, 2]]})
    assert dispatch.save_calibration(cal, p) == p
    back = dispatch.load_calibration(p)
    assert back == json.loads(json.dumps(cal))
    plan = dispatch.pipeline_plan(back)
    assert (plan.big_to_mid, plan.mid_to_small, plan.small_to_block, plan.cpu_tail) == (111_000, 9000, 1500, 200)
    assert plan.prune_steps == 50_000 and plan.prune
    assert not p.with_suffix(".json.tmp").exists()
    # a file from before pruned windows: the default crossover fills in
    old = dict(cal, plan={"big_to_mid": 111_000, "mid_to_small": 9000, "small_to_block": 1500, "cpu_tail": 200})
    dispatch.save_calibration(old, p)
    assert dispatch.pipeline_plan(dispatch.load_calibration(p)).prune_steps == dispatch.DEFAULTS["plan"]["prune_steps"]


def test_calibration_missing_gives_defaults(tmp_path):
    assert dispatch.load_calibration(tmp_path / "none.json") == dispatch.DEFAULTS


BAD_NEGATIVE = '{"version": 1, "gpu_min_nodes": -1, "pipeline_min_steps": 1, "pipeline_max_options": 1}'


@pytest.mark.parametrize("text, why", [("{not json", "Expecting"), ("[1, 2]", "not a JSON object"),
                                       ('{"version": 99}', "format version"), (BAD_NEGATIVE, "gpu_min_nodes")])
def test_calibration_bad_file_gives_defaults(tmp_path, caplog, text, why):
    p = tmp_path / "calibration.json"
    p.write_text(text)
    with caplog.at_level(logging.WARNING, logger="optiond.kernels.binomial.plan"):
        assert dispatch.load_calibration(p) == dispatch.DEFAULTS
    assert why in caplog.text


def test_calibration_from_another_gpu_is_ignored(tmp_path, caplog):
    p = tmp_path / "c.json"
    dispatch.save_calibration(dict(dispatch.DEFAULTS, gpu="GPU A", gpu_min_nodes=5.0), p)
    assert dispatch.load_calibration(p, gpu_name="GPU A")["gpu_min_nodes"] == 5.0
    with caplog.at_level(logging.WARNING):
        assert dispatch.load_calibration(p, gpu_name="GPU B")["gpu_min_nodes"] == dispatch.DEFAULTS["gpu_min_nodes"]
    assert "GPU A" in caplog.text


def test_save_rejects_invalid(tmp_path):
    with pytest.raises(ValueError, match="version"):
        dispatch.save_calibration({"version": 0}, tmp_path / "c.json")


def test_calibration_path_and_current(tmp_path, monkeypatch):
    p = tmp_path / "env.json"
    monkeypatch.setenv(dispatch.CALIBRATION_ENV, str(p))
    assert dispatch.calibration_path() == p
    dispatch.save_calibration(dict(dispatch.DEFAULTS, gpu_min_nodes=42.0), p)
    dispatch.reset_cache()
    try:
        assert dispatch.current()["gpu_min_nodes"] == 42.0
    finally:
        dispatch.reset_cache()
    monkeypatch.delenv(dispatch.CALIBRATION_ENV)
    assert dispatch.calibration_path().name == "calibration.json"
    assert "optiond" in str(dispatch.calibration_path())


def test_calibrate_command(tmp_path, monkeypatch, capsys):
    from optiond.commands import calibrate as cmd

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cmd.register(sub)
    p = tmp_path / "c.json"
    dispatch.save_calibration(dict(dispatch.DEFAULTS, gpu_min_nodes=77.0), p)
    args = parser.parse_args(["calibrate", "--show", "--path", str(p)])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["gpu_min_nodes"] == 77.0
    monkeypatch.setenv(gpu.DISABLE_ENV, "1")
    args = parser.parse_args(["calibrate", "--path", str(p)])
    assert args.func(args) == 1
    assert "no usable GPU" in capsys.readouterr().err


# --------------------------------------------------------------------------- engine fall-back

def _batch(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return Batch.from_columns(kind=rng.choice(["put", "call"], n), style=rng.choice(["american", "european"], n),
                              spot=100.0, strike=rng.uniform(80, 120, n), expiry=rng.uniform(0.1, 2, n), rate=0.03,
                              dividend_yield=0.01, volatility=rng.uniform(0.1, 0.5, n))


def _cpu_ref(batch, steps, greeks=True):
    return bc.crr_batch(batch.kind, batch.style, batch.spot, batch.strike, batch.expiry, batch.rate,
                        batch.dividend_yield, batch.volatility, steps, greeks=greeks)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A 'GPU' that is present but whose pricing calls fail like CUDA would."""
    monkeypatch.delenv(gpu.DISABLE_ENV, raising=False)
    monkeypatch.setattr(gpu, "available", lambda: True)
    monkeypatch.setattr(gpu, "device_label", lambda: "gpu:0 Simulated GPU")
    monkeypatch.setattr(dispatch, "current", lambda: dict(CAL))
    calls = []

    def failing(name, exc):
        def fn(*a, **kw):
            calls.append(name)
            raise exc
        return fn

    monkeypatch.setattr(bg, "crr_batch_gpu", failing("batch", RuntimeError("simulated CUDA error: an illegal memory access")))
    monkeypatch.setattr(bp, "crr_pipeline_gpu", failing("pipeline", gpu.GPUError("OutOfMemoryError: simulated")))
    monkeypatch.setattr(biv, "crr_implied_vol_gpu", failing("iv", gpu.GPUError("cudaErrorLaunchFailure: simulated")))
    return calls


def test_engine_without_gpu_is_the_cpu_path(monkeypatch):
    monkeypatch.setenv(gpu.DISABLE_ENV, "1")
    b = _batch()
    for device in ("auto", "gpu", "cpu"):
        res = engine.price(b, Method(steps=200, device=device))
        assert res.device == "cpu"
        ref = _cpu_ref(b, 200)
        np.testing.assert_array_equal(res.price, ref[0])
        np.testing.assert_array_equal(res.vega, ref[4])
        assert "gpu_fallback" not in res.diagnostics


def test_engine_gpu_error_falls_back(fake_gpu, caplog):
    b = _batch()
    with caplog.at_level(logging.WARNING, logger="optiond.engine"):
        res = engine.price(b, Method(steps=200, device="gpu"))
    assert fake_gpu == ["batch"]
    assert res.device == "cpu"
    assert "illegal memory access" in res.diagnostics["gpu_fallback"]
    assert "priced on the CPU instead" in caplog.text
    ref = _cpu_ref(b, 200)
    for k, name in enumerate(("price", "delta", "gamma", "theta", "vega", "rho")):
        np.testing.assert_array_equal(getattr(res, name), ref[k])
    assert (res.status == "ok").all()


def test_engine_gpu_oom_in_pipeline_falls_back(fake_gpu, caplog):
    b = _batch(n=2)
    with caplog.at_level(logging.WARNING, logger="optiond.engine"):
        res = engine.price(b, Method(steps=30_000, device="auto", greeks=False))
    assert fake_gpu == ["pipeline"]
    assert res.device == "cpu" and "OutOfMemoryError" in res.diagnostics["gpu_fallback"]
    np.testing.assert_array_equal(res.price, _cpu_ref(b, 30_000, greeks=False)[0])


def test_engine_auto_small_request_stays_on_cpu(fake_gpu):
    res = engine.price(_batch(n=3), Method(steps=50, device="auto"))
    assert res.device == "cpu" and fake_gpu == []


def test_engine_black_scholes_never_gpu(fake_gpu):
    b = Batch.from_columns(kind="call", style="european", spot=100.0, strike=[90.0, 110.0], expiry=1.0, rate=0.01,
                           volatility=0.2)
    assert engine.price(b, Method(name="black-scholes", device="gpu")).device == "cpu"


def test_engine_bad_rows_marked_before_gpu(fake_gpu):
    b = Batch.from_columns(kind="put", style="american", spot=100.0, strike=100.0, expiry=[1.0, 1.0], rate=[0.05, 3.0],
                           volatility=[0.2, 0.01])
    res = engine.price(b, Method(steps=10, device="gpu"))
    assert list(res.status) == ["ok", "error"] and "CRR probability" in res.error[1]
    assert res.price[0] == _cpu_ref(b.take([0]), 10)[0][0]


def test_implied_vol_gpu_error_falls_back(fake_gpu, caplog):
    b = _batch(n=30, seed=3)
    m = Method(steps=100, device="gpu")
    prices = _cpu_ref(b, 100, greeks=False)[0]
    with caplog.at_level(logging.WARNING, logger="optiond.engine"):
        vol, _status = engine.implied_vol(prices, b, m)
    assert fake_gpu == ["iv"] and "solved on the CPU instead" in caplog.text
    ref_vol, _ = bc.crr_implied_vol(prices, b.kind, b.style, b.spot, b.strike, b.expiry, b.rate,
                                           b.dividend_yield, 100, xtol=m.iv_tolerance)
    np.testing.assert_array_equal(vol, ref_vol)


# --------------------------------------------------------------------------- host side of the GPU driver

@nb.njit(fastmath=True)  # not cached: numba's cache does not see changes in the callees' modules
def _replay_tree(par, N, am, lv):
    """The GPU recurrence replayed on the CPU from a parameter row (leaves, then the levels)."""
    S, K, a, sign = par[0], par[1], par[2], par[7]
    V = np.empty(N + 1)
    X = np.empty(N + 1)
    for j in range(N + 1):
        x = sign * (S * math.exp((2 * j - N) * a) - K)
        X[j] = x
        V[j] = max(x, 0.0)
    return bg._finish_cpu(V, X, N, am, par, N, lv)


def _grid(n, seed, nmax=300):
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, 2, n), rng.integers(0, 2, n), rng.uniform(50, 150, n), rng.uniform(50, 150, n),
            rng.uniform(0.05, 5, n), rng.choice([0.0, 0.05, 0.1], n), rng.uniform(0, 0.06, n), rng.uniform(0.05, 0.8, n),
            rng.integers(1, nmax, n)]
    ok = np.ones(n, bool)
    ok[bc.probability_errors(cols[4], cols[5], cols[6], cols[7], cols[8])] = False
    return [c[ok] for c in cols]


def test_tree_table_and_assembly_are_bit_exact():
    """Parameters, bumps and Greeks of the GPU driver reproduce crr_batch bit for bit when the
    trees are evaluated with the same arithmetic (this guards the host-computed u, p, pu, pd)."""
    args = _grid(1500, 11)
    cols = bg._columns(*args)
    par, st, fl, bump = bg._tree_table(*cols, True, False, bg.pd_fma_mode())
    assert par.shape[0] > len(args[0]) * 4  # most options get four bumped trees
    lv = np.full((par.shape[0], 6), np.nan)
    price = np.array([_replay_tree(par[i], int(st[i]), bool(fl[i]), lv[i]) for i in range(par.shape[0])])
    _, _, S, _, T, r, _, s, N = cols
    got = bg._assemble(S, T, r, s, N, price, lv, bump, True, False)
    ref = bc.crr_batch(*args, greeks=True)
    np.testing.assert_array_equal(got, ref[:got.shape[0]])  # the dividend rho (row 6) is the front door's


def _replay_smoothed(par, N, am, lv):
    """The smoothed tree (BBS) replayed on the CPU from a parameter row: level N - 1 from the
    Black-Scholes constants of the row (binomial.cu start_level), then the levels."""
    S, K, a, sign = par[0], par[1], par[2], par[7]
    dfq, dfr, rqt = par[11], par[12], par[13]
    V = np.empty(N)
    X = np.empty(N)
    for j in range(N):
        sj = S * math.exp((2 * j - (N - 1)) * a)
        x = sign * (sj - K)
        d1 = (math.log(sj / K) + rqt) / a + 0.5 * a
        d2 = d1 - a
        if sign > 0:
            e = sj * dfq * _ncdf(d1) - K * dfr * _ncdf(d2)
        else:
            e = K * dfr * _ncdf(-d2) - sj * dfq * _ncdf(-d1)
        X[j] = x
        V[j] = max(e, x) if am else e
    if N - 1 == 2:
        lv[3:6] = V[:3]
    elif N - 1 == 1:
        lv[1:3] = V[:2]
    return bg._finish_cpu(V, X, N - 1, am, par, N, lv)


def _ncdf(x):
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def test_bbsr_tables_and_assembly_reproduce_crr_batch():
    """The GPU driver's BBSR host side (smoothed trees of N and N // 2 steps with their bumps in
    one table, the Black-Scholes constants of the last step, each half's Greek assembly, the
    Richardson combination) reproduces crr_batch(extrapolate=True) when its trees are replayed
    on the CPU: to rounding (the reference's leaves come from its own compiled
    Black-Scholes)."""
    args = _grid(160, 13, nmax=120)
    args[8][:3] = (1, 2, 3)  # the smallest trees: M = N = 1, a coarse tree of one step
    cols = bg._columns(*args)
    tables = bg.bbsr_tables(*cols, True)
    par, st, fl = tables[:3]
    n = len(args[0])
    dt = cols[4] / cols[8]
    want = [math.exp(-r_ * d) for r_, d in zip(cols[5], dt)]  # e^{-r dt} of the base trees, as the CPU's libm
    np.testing.assert_array_equal(par[:n, 12], want)
    lv = np.full((par.shape[0], 6), np.nan)
    price = np.array([_replay_smoothed(par[i], int(st[i]), bool(fl[i]), lv[i]) for i in range(par.shape[0])])
    _, _, S, _, T, r, _, s, N = cols
    got = bg.bbsr_assemble(S, T, r, s, N, price, lv, tables, True)
    ref = bc.crr_batch(*args, greeks=True, extrapolate=True)[:6]  # the dividend rho (row 6) is the front door's
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got[ok], ref[ok], rtol=1e-9, atol=1e-9)


def test_fp32_parameters():
    args = _grid(400, 5, nmax=10_000)
    par, _, _, _ = bg._tree_table(*bg._columns(*args), False, True)
    p32, q32 = par[:, 4].astype(np.float32), par[:, 5].astype(np.float32)
    assert np.array_equal(par[:, 4], p32.astype(np.float64)) and np.array_equal(par[:, 5], q32.astype(np.float64))
    assert np.all(p32 + q32 == np.float32(1.0))  # p + (1 - p) == 1 exactly in float
    p = bc.probabilities(args[4], args[5], args[6], args[7], args[8])
    np.testing.assert_allclose(par[:, 4], p, rtol=1e-7, atol=1e-8)
    assert np.all(np.isfinite(par[:, 9]))


def test_precision_and_route_checks():
    with pytest.raises(ValueError, match="fp32"):
        bg._check_precision("fp32", np.array([20_000]))
    with pytest.raises(ValueError):
        bg._check_precision("fp16", np.array([10]))
    with pytest.raises(bc.CRRProbabilityError):
        bg.crr_batch_gpu(0, 1, 100.0, 100.0, 1.0, 3.0, 0.0, 0.01, 10)  # p > 1, before any GPU work


def test_pipeline_phases_cover_the_tree():
    plan = bp.PipelinePlan(big_to_mid=8000, mid_to_small=5000, small_to_block=1000, cpu_tail=100, prune=False)
    ph = dispatch.pipeline_phases(20_000, "fp64", plan)
    assert [(v.kernel, v.cw, t_hi, t_lo) for v, _, t_hi, t_lo in ph] == [
        ("crr_pipe_grid", 1024, 20_000, 8000), ("crr_pipe_grid", 256, 8000, 5000), ("crr_pipe_grid", 128, 5000, 1000),
        ("crr_pipe_block", 128, 1000, 100)]
    assert all(v.K < v.cw for v, _, _, _ in ph)
    assert dispatch.pipeline_phases(500, "fp64", plan)[0][2:] == (500, 100)
    assert dispatch.pipeline_phases(50, "fp64", plan) == []  # all on the CPU tail
    assert dispatch.pipeline_phases(50, "fp32", plan)[-1][3] == 0  # no CPU tail in fp32
    assert [p[2:] for p in dispatch.pipeline_phases(3000, "fp64", bp.PipelinePlan())] == [(3000, 0)]


def test_cpu_tail_continues_the_tree():
    """_finish_cpu from an intermediate level equals the whole tree."""
    kind, style, S, K, T, r, q, s, N = 0, 1, 100.0, 105.0, 1.5, 0.05, 0.01, 0.3, 700
    par, _, _, _ = bg._tree_table(*bg._columns(kind, style, S, K, T, r, q, s, N), False, False, bg.pd_fma_mode())
    lv_full = np.full(6, np.nan)
    whole = _replay_tree(par[0], N, True, lv_full)
    # run the top 300 levels with the same loop by hand, then hand over at t0 = 400
    V = np.empty(N + 1)
    X = np.empty(N + 1)
    a, sign = par[0, 2], par[0, 7]
    for j in range(N + 1):
        X[j] = sign * (S * math.exp((2 * j - N) * a) - K)
        V[j] = max(X[j], 0.0)
    _partial(V, X, N, 400, par[0])
    lv = np.full(6, np.nan)
    assert bg._finish_cpu(V, X, 400, True, par[0], N, lv) == whole
    np.testing.assert_array_equal(lv, lv_full)


@nb.njit(fastmath=True)
def _partial(V, X, N, t0, par):
    S, K, a, u, pu, pd, c, sign = par[0], par[1], par[2], par[3], par[4], par[5], par[6], par[7]
    for t in range(N - 1, t0 - 1, -1):
        if (N - t) % 64 == 0:
            for j in range(t + 1):
                X[j] = sign * (S * math.exp((2 * j - t) * a) - K)
            for j in range(t + 1):
                V[j] = max(pu * V[j + 1] + pd * V[j], X[j])
        else:
            for j in range(t + 1):
                x = X[j] * u + c
                X[j] = x
                V[j] = max(pu * V[j + 1] + pd * V[j], x)


def test_vectorised_implied_vol_equals_cpu():
    """The chain-wide Brent (one batch evaluation per iteration) takes the same steps as the
    CPU's per-option Brent: identical volatilities and statuses with a CPU evaluator."""
    rng = np.random.default_rng(8)
    n = 60
    kind, style = rng.integers(0, 2, n), rng.integers(0, 2, n)
    S, K = 100.0, rng.uniform(70, 130, n)
    T, r, q = rng.uniform(0.1, 2, n), 0.04, 0.01
    sig = rng.uniform(0.1, 0.7, n)
    N = rng.integers(20, 200, n)
    price = bc.crr_batch(kind, style, S, K, T, r, q, sig, N, greeks=False)[0]
    price[:3] = [np.nan, -1.0, 0.0]  # invalid, invalid, below the tree's lowest value
    price[3] = 1e6  # above the highest
    price[4] = np.maximum(price[4] - 5.0, 1e-3)
    vol, st = biv.crr_implied_vol_gpu(price, kind, style, S, K, T, r, q, N, evaluator=biv.cpu_evaluator)
    ref_vol, ref_st = bc.crr_implied_vol(price, kind, style, S, K, T, r, q, N)
    np.testing.assert_array_equal(st, ref_st)
    np.testing.assert_array_equal(vol, ref_vol)
    assert (st == 0).sum() > 50


# --------------------------------------------------------------------------- CUDA sources compile

def _instances_source(names: list[str]) -> str:
    lines = [f'#include "{bg.CUDA_SOURCE.as_posix()}"', "void* optiond_kernel_instances[] = {"]
    lines += [f"    (void*)&{n}," for n in names]
    lines += ["};"]
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("coop", [False, True])
def test_cuda_sources_compile(tmp_path, coop):
    """Every instance of the two modules gpu.module builds (the plain kernels; the cooperative
    grid kernels with -DCRR_COOP and without the sm_90 cluster kernels) compiles, each instance
    in the configuration it is built in (each instance once). The optimiser runs at -O1
    (-Xcicc): every instance still goes through the front end and code generation; the modules
    with NVRTC's full optimisation are built by the GPU tests."""
    names = variants.coop_names() if coop else variants.plain_names()
    src = tmp_path / "instances.cu"
    src.write_text(_instances_source(names))
    cmd = ["nvcc", "-ptx", "-std=c++17", "-arch=sm_90", "-Xcicc", "-O1", "-o", str(tmp_path / "out.ptx"), str(src)]
    if coop:
        cmd[1:1] = ["-DCRR_COOP=1", "-DCRR_NO_CLUSTER=1"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ptx = (tmp_path / "out.ptx").read_text()
    # one entry per template instance (the entry's mangled name: _Z<length><kernel>I<arguments>)
    entries = [(m[2][:int(m[1])], m[2][int(m[1])] == "I") for m in re.finditer(r"^\.visible \.entry _Z(\d+)(\w+)\(", ptx, re.M)]
    assert Counter(k for k, templated in entries if templated) == Counter(n.split("<")[0] for n in names if "<" in n)
    assert {n for n in names if "<" not in n} <= {k for k, _ in entries}
    for name in ("crr_pipe_grid",) if coop else ("crr_batch_warp", "crr_batch_block", "crr_pipe_block",
                                                  "crr_naive_step", "crr_pipe_cluster"):
        assert name in ptx
    assert ("crr_pipe_grid" in ptx) == coop


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_gate_source_compiles(tmp_path):
    from optiond.kernels.binomial import timer

    out = tmp_path / "gate.ptx"
    proc = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-o", str(out), str(timer.GATE_SOURCE)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "crr_gate" in out.read_text()


def test_device_timer_without_timing_is_a_no_op():
    """No timing dict: the timer touches neither CuPy nor the stream (CPU-only machines)."""
    from optiond.kernels.binomial.timer import DeviceTimer

    t = DeviceTimer(None, stream=None)
    t.start()
    t.stop()
    t.finish()
    assert not t.gated


def test_vectorised_implied_vol_with_row_brackets_equals_cpu():
    """Per-row brackets (the chain's hints) take the same Brent steps in the vectorised and the
    per-option root finds; a bracket that holds the root gives the same volatility as the full
    one to the tolerance, in fewer tree evaluations."""
    rng = np.random.default_rng(9)
    n = 40
    kind, style = rng.integers(0, 2, n), np.ones(n, dtype=np.int64)
    S, K = 100.0, rng.uniform(80, 120, n)
    T, r, q = rng.uniform(0.1, 1.5, n), 0.04, 0.01
    sig = rng.uniform(0.15, 0.6, n)
    price = bc.crr_batch(kind, style, S, K, T, r, q, sig, 150, greeks=False)[0]
    lo, hi = sig - 0.02, sig + 0.03
    vol, st = biv.crr_implied_vol_gpu(price, kind, style, S, K, T, r, q, 150, lo=lo, hi=hi, xtol=1e-10,
                                     evaluator=biv.cpu_evaluator)
    ref_vol, ref_st = bc.crr_implied_vol(price, kind, style, S, K, T, r, q, 150, lo=lo, hi=hi, xtol=1e-10)
    np.testing.assert_array_equal(st, ref_st)
    np.testing.assert_array_equal(vol, ref_vol)
    full, _ = bc.crr_implied_vol(price, kind, style, S, K, T, r, q, 150, xtol=1e-10)
    np.testing.assert_allclose(vol, full, atol=1e-9)
    np.testing.assert_allclose(vol, sig, atol=1e-8)
    calls = []

    def counting(*a):
        calls.append(1)
        return biv.cpu_evaluator(*a)

    biv.crr_implied_vol_gpu(price, kind, style, S, K, T, r, q, 150, lo=lo, hi=hi, xtol=1e-10, evaluator=counting)
    narrow = len(calls)
    calls.clear()
    biv.crr_implied_vol_gpu(price, kind, style, S, K, T, r, q, 150, xtol=1e-10, evaluator=counting)
    assert narrow < len(calls)


def test_engine_bracket_hint_outside_the_root_is_solved_again():
    """A hint that misses the root (below or above it) changes nothing: those rows are solved
    again on the full bracket; a nonsense hint (lo >= hi, negative) is ignored."""
    n = 6
    sig = np.array([0.2, 0.3, 0.45, 0.25, 0.35, 0.5])
    cols = dict(kind=["put", "call"] * 3, style="american", spot=100.0, strike=[90, 95, 100, 105, 110, 115.0],
                expiry=0.5, rate=0.04, dividend_yield=0.01)
    price = bc.crr_batch(np.array([0, 1] * 3), 1, 100.0, np.array(cols["strike"]), 0.5, 0.04, 0.01, sig, 200,
                         greeks=False)[0]
    m = Method(steps=200, iv_tolerance=1e-10, device="cpu")
    ref, ref_st = engine.implied_vol_table(price, cols, m)
    lo = np.array([0.25, 0.05, 0.40, -1.0, 0.30, np.nan])  # row 0 above the root, row 1 below, 3 nonsense
    hi = np.array([0.35, 0.10, 0.50, 0.30, 0.20, np.nan])  # row 4 lo > hi: ignored
    vol, st = engine.implied_vol_table(price, dict(cols, iv_lo=lo, iv_hi=hi), m)
    assert list(st) == list(ref_st) == ["ok"] * n
    np.testing.assert_allclose(vol, ref, atol=1e-9)
    np.testing.assert_allclose(vol, sig, atol=1e-8)


def test_nan_brackets_are_invalid_and_hints_outside_the_full_bracket_change_nothing():
    """A NaN bracket end is an invalid row in both root finds (it was "ok" with a NaN volatility
    on the GPU host and could raise in the CPU kernel); through the engine a hint beyond the full
    bracket [MIN_IV, MAX_IV] is cut to it, so the answer is the unhinted one (a hint of 1e300
    returned 1e300 as "ok")."""
    price = bc.crr_batch(np.ones(3, np.int8), 1, 100.0, 100.0, 1.0, 0.03, 0.0, 0.3, 200, greeks=False)[0]
    lo, hi = np.array([np.nan, 0.1, 0.2]), np.array([1.0, np.nan, np.inf])
    for solve in (lambda: bc.crr_implied_vol(price, 1, 1, 100.0, 100.0, 1.0, 0.03, 0.0, 200, lo=lo, hi=hi),
                  lambda: biv.crr_implied_vol_gpu(price, 1, 1, 100.0, 100.0, 1.0, 0.03, 0.0, 200, lo=lo, hi=hi,
                                                  evaluator=biv.cpu_evaluator)):
        vol, st = solve()
        assert np.isnan(vol).all() and (st == IV_INVALID).all()
    cols = dict(kind=["call"] * 3, style="american", spot=100.0, strike=100.0, expiry=1.0, rate=0.03)
    vol, st = engine.implied_vol_table(price, dict(cols, iv_lo=[np.nan, 1e-9, 0.2], iv_hi=[1e6, np.nan, 1e300]),
                                       Method(steps=200))
    assert st.tolist() == ["ok"] * 3
    np.testing.assert_allclose(vol, 0.3, atol=1e-9)
