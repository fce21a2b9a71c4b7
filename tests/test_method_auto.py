"""``method="auto"``: the spectral engine for American rows with a continuous carry and no cash
dividends, the CRR tree for cash-dividend rows, the closed form for European rows; the same
numbers as the explicit methods; the per-row ``method`` column of ``optiond price`` and
``optiond chain``; its work model and GPU crossover; the worksheet limits table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optiond import chain, costs, engine
from optiond.cli import main as cli_main
from optiond.models import Method, auto_methods

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
NAN = math.nan

#: a mixed book: American put with a continuous carry (spectral, the ALO engine), American call
#: with a cash dividend (the tree), European put (the closed form), American put of the
#: double-boundary regime q < r < 0 (spectral's own tree rows), American call with q = 0 (no
#: early exercise: spectral's closed-form rows)
BOOK = dict(kind=["put", "call", "put", "put", "call"], style=["american", "american", "european", "american", "american"],
            spot=100.0, strike=[95.0, 105.0, 100.0, 110.0, 100.0], expiry=[0.5, 1.0, 0.75, 1.0, 0.3],
            rate=[0.04, 0.04, 0.04, -0.01, 0.03], dividend_yield=[0.01, 0.02, 0.01, -0.02, 0.0], volatility=0.25,
            dividend_times=np.array([[NAN], [0.4], [NAN], [NAN], [NAN]]),
            dividend_amounts=np.array([[NAN], [1.5], [NAN], [NAN], [NAN]]))
#: what ``auto`` asks for per row, and what then prices it (the spectral engine's own routing)
AUTO_ASKS = ["spectral", "binomial", "black-scholes", "spectral", "spectral"]
PRICED_BY = ["spectral", "binomial", "black-scholes", "binomial", "black-scholes"]


def _rows(cols: dict, rows: list[int]) -> dict:
    return {k: (np.asarray(v)[rows] if np.ndim(v) else v) for k, v in cols.items()}


def test_auto_rule_and_what_prices_each_row():
    assert auto_methods(np.array([1, 1, 0, 0]), np.array([False, True, False, True])).tolist() == \
        ["spectral", "binomial", "black-scholes", "binomial"]
    assert engine.row_methods(BOOK, Method(name="auto")).tolist() == PRICED_BY
    # the explicit spectral method names the same rows (the cash row goes to its tree); the tree is the tree
    assert engine.row_methods(BOOK, Method(name="spectral")).tolist() == PRICED_BY
    assert engine.row_methods(BOOK, Method(name="binomial")).tolist() == ["binomial"] * 5
    # an invalid row is priced by nobody; a per-row method cell wins over the default
    bad = dict(BOOK, strike=[95.0, -1.0, 100.0, 110.0, 100.0], method=["binomial", "", "", "", "bogus"])
    assert engine.row_methods(bad, Method(name="auto")).tolist() == ["binomial", "", "black-scholes", "binomial", ""]


@pytest.mark.parametrize("greeks", [True, False])
def test_auto_prices_and_ivs_equal_the_explicit_methods_to_the_bit(greeks):
    auto = engine.price_table(BOOK, Method(name="auto", greeks=greeks, steps=400))
    assert auto.status.tolist() == ["ok"] * 5
    iv_auto = engine.implied_vol_table(auto.price, BOOK, Method(name="auto", steps=400))
    for name in set(AUTO_ASKS):
        rows = [i for i, a in enumerate(AUTO_ASKS) if a == name]
        sub = _rows(BOOK, rows)
        if name != "binomial":  # the closed form and the spectral method take no cash-dividend schedule
            sub = {k: v for k, v in sub.items() if not k.startswith("dividend_") or k == "dividend_yield"}
        ref = engine.price_table(sub, Method(name=name, greeks=greeks, steps=400))
        for f in ("price", "delta", "gamma", "theta", "vega", "rho"):
            np.testing.assert_array_equal(getattr(auto, f)[rows], getattr(ref, f), err_msg=f"{name} {f}")
        iv = engine.implied_vol_table(ref.price, sub, Method(name=name, steps=400))
        np.testing.assert_array_equal(iv_auto.vol[rows], iv.vol, err_msg=name)
    np.testing.assert_allclose(iv_auto.vol, 0.25, atol=1e-6)  # and each solve finds its own volatility
    # one contract (the scalar path) is the batch's number
    for i in range(5):
        one = engine.price_table({k: (v[i] if isinstance(v, list) else v) for k, v in BOOK.items()
                                  if not k.startswith("dividend_") or k == "dividend_yield"},
                                 Method(name="auto", greeks=greeks, steps=400)) if i != 1 else None
        if one is not None:
            assert one.price[0] == auto.price[i]


def test_price_cli_default_is_auto_with_a_method_column_and_binomial_is_unchanged(tmp_path, capsys):
    book = pd.DataFrame({k: v for k, v in BOOK.items() if not k.startswith("dividend_") or k == "dividend_yield"})
    book["dividends"] = ["", "0.4:1.5", "", "", ""]
    src = tmp_path / "book.csv"
    book.to_csv(src, index=False)
    assert cli_main(["price", str(src), "-o", str(tmp_path / "auto.csv"), "--no-daemon", "--steps", "400"]) == 0
    err = capsys.readouterr().err
    assert "methods: binomial 2, black-scholes 2, spectral 1 (accuracy accurate)" in err
    out = pd.read_csv(tmp_path / "auto.csv", keep_default_na=False)
    assert out.method.tolist() == PRICED_BY
    ref = engine.price_table(BOOK, Method(name="auto", steps=400))
    np.testing.assert_array_equal(out.price.to_numpy(), ref.price)  # the CSV's 17 digits are the float's
    # --method binomial: every row on the tree, as before the auto default
    assert cli_main(["price", str(src), "-o", str(tmp_path / "tree.csv"), "--no-daemon", "--steps", "400",
                     "--method", "binomial"]) == 0
    tree = pd.read_csv(tmp_path / "tree.csv", keep_default_na=False)
    assert tree.method.tolist() == ["binomial"] * 5
    np.testing.assert_array_equal(tree.price.to_numpy(), engine.price_table(BOOK, Method(steps=400)).price)
    # a per-row method cell wins; the result is written over the request where the row was priced
    book["method"] = ["binomial", "", "", "", "nonsense"]
    book.to_csv(src, index=False)
    assert cli_main(["price", str(src), "-o", str(tmp_path / "mixed.csv"), "--no-daemon", "--steps", "400",
                     "--allow-errors"]) == 0
    mixed = pd.read_csv(tmp_path / "mixed.csv", keep_default_na=False)
    assert mixed.method.tolist() == ["binomial", "binomial", "black-scholes", "binomial", "nonsense"]
    assert mixed.status.tolist() == ["ok"] * 4 + ["error"] and "model_method" not in mixed.columns
    assert float(mixed.price[0]) == tree.price[0] and float(mixed.price[2]) == out.price[2]


@pytest.mark.parametrize("command", ["price", "chain"])
def test_a_bad_method_name_is_one_line(tmp_path, capsys, command):
    src = tmp_path / "in.csv"
    if command == "price":
        pd.DataFrame([dict(kind="put", spot=100, strike=100, expiry=1, rate=0.05, volatility=0.2)]).to_csv(src, index=False)
    else:
        pd.read_csv(DATA / "spy_chain_2026-02-13.csv").head(20).to_csv(src, index=False)
    rc = cli_main([command, str(src), "--no-daemon", "--method", "bogus"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"optiond {command}") and "'bogus'" in err[0] and "auto" in err[0]
    assert "Traceback" not in err[0]


@pytest.fixture(scope="module")
def spy_part():
    """Four expiries of the bundled SPY chain (American), every strike within 12 % of the spot."""
    df = chain.read_chain(str(DATA / "spy_chain_2026-02-13.csv"))
    expiries = sorted(df.expiry.unique())
    keep = [expiries[i] for i in (2, 6, 10, 14)]
    S = float(df.underlying_price.iloc[0])
    part = df[df.expiry.isin(keep) & (df.strike.between(0.88 * S, 1.12 * S))].reset_index(drop=True)
    out, summary = chain.price_chain(part, quote_time="2026-02-13T15:45:00-05:00")
    return part, out, summary


def test_chain_auto_reports_the_method_per_row(spy_part):
    part, out, summary = spy_part
    ok = out.status == "ok"
    assert ok.sum() > 100
    # American with a continuous carry: the spectral engine, whose calls where the carry is <= 0
    # (early exercise never optimal) are its closed-form rows
    no_early = ok & (out.type == "call") & (out.dividend_yield <= 0) & (out.rate >= out.dividend_yield)
    assert (out.method[no_early] == "black-scholes").all() and (out.method[ok & ~no_early] == "spectral").all()
    assert (out.method[ok] == "spectral").mean() > 0.5
    assert (out.method[~ok] == "").all()
    assert "method" in chain.OUTPUT_COLUMNS


def test_chain_auto_ivs_agree_with_a_fine_tree_within_its_own_error(spy_part):
    """The mid IVs of ``auto`` (the spectral engine at the chain's "fast" setting) against the
    CRR tree's at N = 2000 on the same market inputs, within the tree's own error: its price at
    ``auto``'s IV moves by up to m between N = 2000 and N = 1000, 2001, 4000; CRR's error (a 1/N
    part and an oscillation of the same order) is within 3 m there (measured on these 605
    contracts: at most 0.9 of it), plus the "fast" setting's worst price error 9e-5; divided by
    the vega to be a volatility, plus the solves' tolerance."""
    part, out, _ = spy_part
    ok = np.flatnonzero((out.status == "ok").to_numpy())
    cols = dict(kind=out.type.to_numpy()[ok], style="american", spot=out.spot.to_numpy()[ok],
                strike=out.strike.to_numpy()[ok], expiry=out.expiry_years.to_numpy()[ok],
                rate=out.rate.to_numpy()[ok], dividend_yield=out.dividend_yield.to_numpy()[ok])
    auto, vega = out.iv.to_numpy()[ok], out.vega.to_numpy()[ok]
    tree = engine.implied_vol_table(out.mid.to_numpy()[ok], cols, Method(steps=2000, iv_tolerance=1e-9))
    assert (tree.status == "ok").all()
    at = {N: engine.price_table(dict(cols, volatility=auto), Method(steps=N, greeks=False)).price
          for N in (1000, 2000, 2001, 4000)}
    move = np.max([np.abs(at[2000] - at[N]) for N in (1000, 2001, 4000)], axis=0)
    bound = (3.0 * move + 9e-5) / vega + 2e-9
    err = np.abs(auto - tree.vol)
    assert np.all(err <= bound), (err.max(), bound[np.argmax(err - bound)])
    assert err.max() < 2e-4  # under 0.02 vol points everywhere


def test_chain_binomial_is_the_tree_at_the_chain_steps(spy_part):
    part, out, _ = spy_part
    tree, _ = chain.price_chain(part, quote_time="2026-02-13T15:45:00-05:00", method="binomial")
    ok = np.flatnonzero((tree.status == "ok").to_numpy())
    assert set(tree.method[ok]) == {"binomial"}
    cols = dict(kind=tree.type.to_numpy()[ok], style="american", spot=tree.spot.to_numpy()[ok],
                strike=tree.strike.to_numpy()[ok], expiry=tree.expiry_years.to_numpy()[ok],
                rate=tree.rate.to_numpy()[ok], dividend_yield=tree.dividend_yield.to_numpy()[ok])
    ref = engine.implied_vol_table(tree.mid.to_numpy()[ok], cols, Method(steps=chain.DEFAULT_STEPS,
                                                                          iv_tolerance=chain.IV_TOLERANCE))
    np.testing.assert_array_equal(tree.iv.to_numpy()[ok], ref.vol)


def test_auto_work_is_the_sum_of_its_rows_methods():
    m = Method(name="auto", accuracy="fast", steps=300)
    cols = {k: v for k, v in BOOK.items()}
    got = costs.estimate("price", cols, m, 5)
    # each row by what prices it (PRICED_BY): row 0 the ALO engine, rows 1 (cash) and 3 (the
    # spectral door's double-boundary row) the tree (301 x 302 / 2 nodes, x7 with Greeks), rows
    # 2 and 4 (the spectral door's no-early-exercise call) the closed form
    spectral = costs.SPECTRAL_WORK["fast"] * costs.SPECTRAL_SOLVES["greeks"]
    tree = 301 * 302 / 2 * costs.GREEK_TREES
    assert got.work == pytest.approx(spectral + 2 * tree + 2 * costs.CLOSED_FORM_WORK)
    assert got.model == "mixed" and got.max_steps == 300


def test_spectral_gpu_crossover():
    from optiond.kernels import spectral
    from optiond.kernels.spectral import plan

    m = Method(name="spectral", accuracy="fast", greeks=False)
    # unmeasured (NaN) figures: no crossover, the CPU unless the GPU is asked for
    saved = plan.GPU_FIXED_S
    try:
        plan.GPU_FIXED_S = math.nan
        assert plan.gpu_min_work("fast", {}) == math.inf
        assert plan.choose(10**6, m, calibration={}, gpu=True) == "cpu"
    finally:
        plan.GPU_FIXED_S = saved
    assert plan.choose(1, m, calibration={}, gpu=True, force_gpu=True) == "gpu"
    assert plan.choose(10**6, m, calibration={}, gpu=False, force_gpu=True) == "cpu"
    # the measured figures: one option stays on the CPU, a million go to the GPU
    assert plan.choose(1, m, calibration={}, gpu=True) == "cpu"
    assert plan.choose(10**6, m, calibration={}, gpu=True) == "gpu"
    # a measured crossover in the calibration decides, in the work model's units
    cal = {plan.CALIBRATION_KEY: {"fast": 1e7}}
    per = costs.SPECTRAL_WORK["fast"]
    assert plan.choose(math.ceil(1e7 / per) - 1, m, calibration=cal, gpu=True) == "cpu"
    assert plan.choose(math.ceil(1e7 / per), m, calibration=cal, gpu=True) == "gpu"
    # without a calibration, the cost figures: each size goes where its modelled time is smaller,
    # CPU n x (seconds a solve) against GPU fixed + n x (its seconds a solve), a price one solve
    cpu = per * plan.CPU_NS_PER_WORK * 1e-9
    gpu = cpu / 4.0
    fig = dict(GPU_FIXED_S=1e-3, GPU_S_PER_SOLVE={"fast": gpu, "accurate": 1e-4, "high-precision": 4e-4})
    old = {k: getattr(plan, k) for k in fig}
    try:
        for k, v in fig.items():
            setattr(plan, k, v)
        sizes = [n for n in range(1, 2_000) if abs(n * cpu - (1e-3 + n * gpu)) > 2 * cpu][::7]
        picks = [plan.choose(n, m, calibration={}, gpu=True) for n in sizes]
        assert picks == ["gpu" if 1e-3 + n * gpu < n * cpu else "cpu" for n in sizes]
        assert "cpu" in picks and "gpu" in picks  # the range spans the crossover
    finally:
        for k, v in old.items():
            setattr(plan, k, v)
    # no GPU path yet: the front door says no whatever the size
    if not spectral.GPU:
        from optiond.models import Batch

        big = Batch.from_columns(dict(kind="put", style="american", spot=100.0, strike=np.full(10**4, 100.0),
                                      expiry=1.0, rate=0.05, dividend_yield=0.0, volatility=0.2))
        assert spectral.wants_gpu(big, m) is False


def test_worksheet_limits_table_has_the_american_limit():
    from optiond.addin import generate, table

    ref = generate.reference()
    line = next(x for x in ref.splitlines() if x.startswith("| `AMERICAN_PUT`"))
    assert "`AMERICAN_MAX_WORK`" in line and f"{table.AMERICAN_MAX_WORK:.3g}" in line
    n_prices = table.AMERICAN_MAX_WORK / float(table.american_work(table.DEFAULT_ACCURACY))
    assert f"{n_prices:,.0f} prices" in line and f"x{costs.SPECTRAL_SOLVES['implied_vol']} for `AMERICAN_IV`" in line
