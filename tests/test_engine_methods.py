"""MLMC and Heston ADI through the engine's one call and the portfolio CLI, against closed forms
and QuantLib; bad rows of either method are marked, never raised."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from optiond import engine
from optiond.cli import main as cli_main
from optiond.kernels.black_scholes import bs_price_greeks
from optiond.models import Method

BASE = dict(spot=100.0, strike=100.0, expiry=1.0, rate=0.05, dividend_yield=0.0, volatility=0.2)


def test_mlmc_rows_match_closed_forms_and_bad_rows_are_marked():
    cols = dict(BASE, kind=["call", "put", "call", "put", "call"], style=["european"] * 4 + ["american"],
                method="mlmc", eps=[0.01, 0.01, 0.001, "x", 0.01], payoff=["vanilla", "vanilla", "digital", "vanilla", "vanilla"])
    res = engine.price_table(cols, Method(seed=11))
    assert res.status.tolist() == ["ok", "ok", "ok", "error", "error"]
    assert "eps" in res.error[3] and "american" in res.error[4]
    bs = bs_price_greeks([1, 0], 100.0, 100.0, 1.0, 0.05, 0.0, 0.2)["price"]
    # the MSE target: |error| <= eps with high probability; 3 eps is a > 99.9 % bound
    assert abs(res.price[0] - bs[0]) < 3 * 0.01 and abs(res.price[1] - bs[1]) < 3 * 0.01
    d2 = (math.log(1.0) + (0.05 - 0.02)) / 0.2
    digital = math.exp(-0.05) * 0.5 * math.erfc(-d2 / math.sqrt(2))
    assert abs(res.price[2] - digital) < 3 * 0.001
    assert np.all(res.std_error[:3] > 0) and np.isnan(res.std_error[3:]).all()
    # a fixed seed reproduces the estimate exactly
    again = engine.price_table(cols, Method(seed=11))
    np.testing.assert_array_equal(again.price[:3], res.price[:3])


@pytest.fixture(scope="module")
def ql_heston():
    ql = pytest.importorskip("QuantLib")

    def price(kind, S, K, T, r, q, v0, kappa, theta, xi, rho):
        today = ql.Date(2, 1, 2026)
        ql.Settings.instance().evaluationDate = today
        dc = ql.Actual365Fixed()
        proc = ql.HestonProcess(ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc)),
                                ql.YieldTermStructureHandle(ql.FlatForward(today, q, dc)),
                                ql.QuoteHandle(ql.SimpleQuote(S)), v0, kappa, theta, xi, rho)
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if kind == "call" else ql.Option.Put, K),
                               ql.EuropeanExercise(today + int(round(T * 365))))
        opt.setPricingEngine(ql.AnalyticHestonEngine(ql.HestonModel(proc)))
        return opt.NPV()

    return price


def test_adi_rows_against_quantlib_and_bad_rows_marked(ql_heston):
    heston = dict(v0=0.04, kappa=1.5, long_run_variance=0.04, xi=[0.3, 0.3, 0.5, 0.3, 0.3],
                  correlation=[-0.7, -0.7, -0.5, 1.5, -0.7])
    cols = dict(BASE, kind=["put", "put", "call", "put", "put"], style=["european", "american", "european", "european", "european"],
                strike=[100.0, 100.0, 110.0, 100.0, -5.0], method="adi", **heston)
    res = engine.price_table(cols, Method(grid=(160, 80), time_steps=60))
    assert res.status.tolist() == ["ok", "ok", "ok", "error", "error"]
    assert "correlation" in res.error[3] and "strike" in res.error[4]
    for i, (kind, K, xi, rho) in enumerate([("put", 100.0, 0.3, -0.7), (None, None, None, None), ("call", 110.0, 0.5, -0.5)]):
        if kind:
            ref = ql_heston(kind, 100.0, K, 1.0, 0.05, 0.0, 0.04, 1.5, 0.04, xi, rho)
            assert res.price[i] == pytest.approx(ref, abs=2e-3)
    assert res.price[1] >= res.price[0] - 1e-12  # American >= European
    assert -1 < res.delta[0] < 0 and res.gamma[0] > 0


def test_adi_without_heston_columns_is_a_row_error():
    res = engine.price_table(dict(BASE, kind="put", style="european", method="adi"))
    assert res.status.tolist() == ["error"] and "Heston" in res.error[0]


def test_price_cli_mixed_methods_keeps_every_row_and_input(tmp_path):
    src = tmp_path / "mixed.csv"
    src.write_text(
        "kind,style,spot,strike,expiry,rate,dividend_yield,volatility,method,steps,eps,payoff,v0,kappa,long_run_variance,xi,"
        "correlation\n"
        "put,american,100,100,1,0.05,0,0.2,binomial,500,,,,,,,\n"
        "call,european,100,100,1,0.05,0,0.2,mlmc,,0.02,asian,,,,,\n"
        "put,american,100,100,1,0.05,0,,adi,,,,0.04,1.5,0.04,0.3,-0.7\n"
        "put,american,100,100,1,0.05,0,,adi,,,,0.04,1.5,0.04,0.3,\n"
        "call,european,100,100,1,0.05,0,0.2,black-scholes,,,,,,,,\n")
    dst = tmp_path / "out.csv"
    assert cli_main(["price", str(src), "-o", str(dst), "--no-daemon", "--grid", "120", "60", "--time-steps", "50"]) == 1
    out = pd.read_csv(dst, keep_default_na=False)
    assert out.status.tolist() == ["ok", "ok", "ok", "error", "ok"]
    assert float(out.long_run_variance[2]) == 0.04 and not any(c.startswith("model_") for c in out.columns)
    assert float(out.theta[2]) < 0  # the Greek: no Heston input of that name any more
    assert float(out.std_error[1]) > 0 and out.std_error[0] == ""
    assert "correlation" in out.error[3]


def test_price_cli_reads_the_earlier_heston_column_names_with_a_warning(tmp_path, capsys):
    """A Heston file that still names the long-run variance ``theta`` and the correlation ``rho``
    prices as before (a DeprecationWarning), its columns renamed in the output beside the Greeks."""
    head = "kind,style,spot,strike,expiry,rate,dividend_yield,method,v0,kappa,{},xi,{}\n"
    row = "put,american,100,100,1,0.05,0,adi,0.04,1.5,0.04,0.3,-0.7\n"
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    old.write_text(head.format("theta", "rho") + row)
    new.write_text(head.format("long_run_variance", "correlation") + row)
    args = ["--no-daemon", "--grid", "80", "40", "--time-steps", "30"]
    with pytest.warns(DeprecationWarning) as seen:
        assert cli_main(["price", str(old), "-o", str(tmp_path / "a.csv"), *args]) == 0
    said = " ".join(str(w.message) for w in seen)
    assert "'long_run_variance'" in said and "'correlation'" in said
    assert "theta as long_run_variance, rho as correlation" in capsys.readouterr().err  # the CLI's user is told
    assert cli_main(["price", str(new), "-o", str(tmp_path / "b.csv"), *args]) == 0
    a, b = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    assert list(a.columns) == list(b.columns) and "theta" in a.columns and "correlation" in a.columns
    pd.testing.assert_frame_equal(a.drop(columns=["device"]), b.drop(columns=["device"]))


@pytest.mark.parametrize("name", ["mlmc", "adi"])
def test_gpu_failure_prices_on_the_cpu_with_the_same_numbers(name, monkeypatch, caplog):
    """device="gpu" and the GPU fails: the engine's fallback prices the batch on the CPU, says so
    in the diagnostics and the log, and the numbers are the CPU's."""
    from optiond.kernels import gpu

    def no_cupy():
        raise gpu.GPUError("CuPy not importable: simulated") from ImportError("simulated")

    monkeypatch.setattr(gpu, "cupy", no_cupy)
    cols = dict(BASE, kind="put", style="european", method=name)
    if name == "adi":
        cols.update(v0=0.04, kappa=1.5, long_run_variance=0.04, xi=0.3, correlation=-0.7)
    settings = dict(seed=3, eps=0.05, grid=(60, 30), time_steps=20)
    on_cpu = engine.price_table(cols, Method(device="cpu", **settings))
    with caplog.at_level("WARNING", logger="optiond.engine"):
        res = engine.price_table(cols, Method(device="gpu", **settings))
    assert res.status.tolist() == ["ok"] and res.device == "cpu"
    assert res.diagnostics["gpu_fallback"] == "ImportError: simulated" and "priced on the CPU" in caplog.text
    np.testing.assert_array_equal(res.price, on_cpu.price)


def test_a_gpu_fallback_note_survives_a_table_with_a_bad_row(monkeypatch):
    """price_table and implied_vol_table merge the valid rows' result into the table's: the
    GPU failure's note stays (a table without a bad row keeps it as well)."""
    from optiond.kernels import gpu

    def no_cupy():
        raise gpu.GPUError("CuPy not importable: simulated") from ImportError("simulated")

    monkeypatch.setattr(gpu, "cupy", no_cupy)
    cols = dict(BASE, kind="put", style="american", spot=[100.0, -1.0, 105.0])
    m = Method(steps=50, device="gpu")
    res = engine.price_table(cols, m)
    assert res.status.tolist() == ["ok", "error", "ok"] and res.device == "cpu"
    assert res.diagnostics["gpu_fallback"] == "ImportError: simulated"
    ref = engine.price_table(cols, Method(steps=50, device="cpu"))
    np.testing.assert_array_equal(res.price, ref.price)
    iv = engine.implied_vol_table(np.nan_to_num(ref.price, nan=5.0), {k: v for k, v in cols.items() if k != "volatility"}, m)
    assert iv.status.tolist() == ["ok", "invalid", "ok"] and iv.diagnostics["gpu_fallback"] == "ImportError: simulated"
