"""Cash dividends through the front ends (issue 21): the portfolio ``dividends`` column in
process and on a daemon, the chain's dividend file, the Excel arguments and the panel, each
against the tree priced directly with the arrays (:func:`optiond.kernels.binomial.cpu.crr_batch`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from optiond import dividends
from optiond.cli import main as cli_main
from optiond.kernels.binomial.cpu import crr_batch
from optiond.market import clock
from optiond.models import CALL, PUT, AMERICAN, EUROPEAN

STEPS = 200
VALUATION = "2026-02-13"


def _years(date: str) -> float:
    """Years from the 16:00 New York close of VALUATION to 09:30 New York on ``date``, written out."""
    start = pd.Timestamp(f"{VALUATION} 16:00", tz="America/New_York")
    end = pd.Timestamp(f"{date} 09:30", tz="America/New_York")
    return (end - start).total_seconds() / 60.0 / 525_600.0


def test_parse_schedule_dates_years_and_errors():
    v = dividends.valuation_instant(VALUATION)
    t, a = dividends.parse_schedule("2026-03-20:0.5; 2026-06-19:0.75;", v)
    assert t == pytest.approx([_years("2026-03-20"), _years("2026-06-19")], abs=1e-15) and a == [0.5, 0.75]
    assert dividends.parse_schedule("0.25:1;0.5:1") == ([0.25, 0.5], [1.0, 1.0])
    assert dividends.parse_schedule(float("nan")) == ([], []) and dividends.parse_schedule("  ") == ([], [])
    for cell, words in [("0.25", "WHEN:AMOUNT"), ("soon:1", "not a date"), ("0.25:x", "amount"),
                        ("2026-03-20:1", "--valuation")]:
        with pytest.raises(ValueError, match=words):
            dividends.parse_schedule(cell)
    # the valuation's own clock: an ISO timestamp without an offset is New York time
    assert dividends.valuation_instant("2026-02-13T10:50") == clock.quote_instant("2026-02-13", "10:50")
    with pytest.raises(ValueError, match="valuation"):
        dividends.valuation_instant("tomorrow")


ROWS = [  # kind, style, strike, expiry (years), dividends cell
    ("put", "american", 100.0, 1.0, "2026-03-20:1.5;2026-09-18:1.5"),
    ("call", "american", 95.0, 0.75, "0.1:2;0.6:2"),
    ("put", "european", 105.0, 0.5, ""),
    ("call", "european", 100.0, 1.0, "0.2:1;0.45:1;0.7:1;0.95:1"),
    ("put", "american", 100.0, 1.0, "0.5:-1"),            # negative amount
    ("put", "american", 100.0, 0.5, "0.25:1;0.75:1"),     # ex-date after expiry
    ("put", "american", 100.0, 1.0, "0.5:1;0.25:1"),      # unsorted
    ("put", "american", 100.0, 1.0, ";".join(f"{0.1 * i}:0.5" for i in range(1, 10))),  # nine: counted in the cell
    ("put", "american", 100.0, 1.0, "0.5:120"),           # above the spot
    ("put", "american", 100.0, 1.0, "0.5:1:x"),           # malformed
]
BAD = {4: "dividend_amounts", 5: "dividend_times", 6: "dividend_times", 7: "dividends", 8: "dividend_amounts",
       9: "dividends"}


def _portfolio(tmp_path) -> str:
    df = pd.DataFrame([dict(kind=k, style=s, spot=100.0, strike=K, expiry=T, rate=0.04, dividend_yield=0.01,
                            volatility=0.25, dividends=d) for k, s, K, T, d in ROWS])
    path = tmp_path / "book.csv"
    df.to_csv(path, index=False)
    return str(path)


def _reference(rows: list[int]) -> np.ndarray:
    """The good rows priced by crr_batch with the schedules written out as arrays."""
    t = np.full((len(rows), 4), np.nan)
    a = np.zeros((len(rows), 4))
    sched = {0: ([_years("2026-03-20"), _years("2026-09-18")], [1.5, 1.5]), 1: ([0.1, 0.6], [2.0, 2.0]),
             2: ([], []), 3: ([0.2, 0.45, 0.7, 0.95], [1.0] * 4)}
    for i, r in enumerate(rows):
        t[i, :len(sched[r][0])], a[i, :len(sched[r][1])] = sched[r]
    kind = np.array([CALL if ROWS[r][0] == "call" else PUT for r in rows], dtype=np.int8)
    style = np.array([AMERICAN if ROWS[r][1] == "american" else EUROPEAN for r in rows], dtype=np.int8)
    return crr_batch(kind, style, 100.0, np.array([ROWS[r][2] for r in rows]), np.array([ROWS[r][3] for r in rows]),
                     0.04, 0.01, 0.25, STEPS, dividend_times=t, dividend_amounts=a)


def _check_book(out: pd.DataFrame) -> None:
    good = [0, 1, 2, 3]
    assert out.status.tolist() == ["ok"] * 4 + ["error"] * 6, out.error.tolist()
    ref = _reference(good)
    np.testing.assert_allclose(out.price.to_numpy()[good], ref[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.delta.to_numpy()[good], ref[1], rtol=1e-10, atol=1e-12)
    for row, field in BAD.items():
        assert out.error[row].startswith(field + "="), (row, out.error[row])
        assert math.isnan(out.price[row])
    assert "dividends='0.5:1:x'" in out.error[9]


def test_portfolio_dividends_in_process(tmp_path, capsys):
    dst = tmp_path / "out.csv"
    rc = cli_main(["price", _portfolio(tmp_path), "--no-daemon", "--method", "binomial", "--steps", str(STEPS), "--valuation", VALUATION,
                   "-o", str(dst)])
    assert rc == 1  # some rows failed
    assert "priced 4/10 rows (6 errors)" in capsys.readouterr().err
    _check_book(pd.read_csv(dst))


def test_portfolio_dividends_on_the_daemon(tmp_path, capsys, daemon):
    dst = tmp_path / "out.csv"
    rc = cli_main(["price", _portfolio(tmp_path), "--daemon-only", "--method", "binomial", "--steps", str(STEPS), "--valuation", VALUATION,
                   "-o", str(dst)])
    err = capsys.readouterr().err
    assert rc == 1 and "(daemon)" in err, err
    _check_book(pd.read_csv(dst))


def test_portfolio_dividend_schedules_split_into_daemon_parts(daemon):
    """A table the daemon prices in parts slices each (n, m) schedule with its rows."""
    from optiond.daemon import jobs

    t = np.array([[0.1, 0.2], [0.3, np.nan], [0.4, 0.5]])
    part = jobs._slice_columns({"dividend_times": t, "spot": np.arange(3.0), "dividend_amounts": np.ones(2)}, 1, 3, 3)
    np.testing.assert_array_equal(part["dividend_times"], t[1:3])
    np.testing.assert_array_equal(part["spot"], [1.0, 2.0])
    np.testing.assert_array_equal(part["dividend_amounts"], np.ones(2))  # one schedule for all: not sliced
    client = daemon.client()
    try:
        n = 40
        cols = dict(kind="put", style="american", spot=100.0, strike=np.linspace(80, 120, n), expiry=1.0, rate=0.04,
                    volatility=0.25, dividend_times=np.tile([0.25, 0.75], (n, 1)),
                    dividend_amounts=np.tile([1.0, 2.0], (n, 1)))
        from optiond.models import Method

        res = client.price_table(cols, Method(steps=STEPS), fallback=False, as_job=True)
        ref = crr_batch(np.full(n, PUT, dtype=np.int8), np.full(n, AMERICAN, dtype=np.int8), 100.0, cols["strike"], 1.0,
                        0.04, 0.0, 0.25, STEPS, dividend_times=cols["dividend_times"],
                        dividend_amounts=cols["dividend_amounts"])
        assert res.via == "daemon"
        np.testing.assert_allclose(res.price, ref[0], rtol=1e-12)
    finally:
        client.close()


def test_portfolio_bad_valuation_is_one_line(tmp_path, capsys):
    rc = cli_main(["price", _portfolio(tmp_path), "--no-daemon", "--valuation", "someday"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("optiond price: --valuation")


def test_portfolio_dates_without_valuation_mark_their_rows(tmp_path, capsys):
    dst = tmp_path / "out.csv"
    cli_main(["price", _portfolio(tmp_path), "--no-daemon", "--steps", str(STEPS), "-o", str(dst)])
    out = pd.read_csv(dst)
    assert out.status[0] == "error" and out.error[0].startswith("dividends=") and "--valuation" in out.error[0]
    assert out.status[1] == "ok"


# ----------------------------------------------------------------------------- chain

DIVS = [("2026-03-06", 0.8), ("2026-06-05", 0.8), ("2026-09-04", 0.8), ("2026-12-04", 0.8)]
EXPIRIES = ("2026-03-20", "2026-06-18", "2026-12-18")
S0, R, Q_BORROW = 100.0, 0.04, 0.005


def _smile(K: np.ndarray) -> np.ndarray:
    return 0.25 + 0.4 * np.log(K / S0) ** 2


def _synthetic_chain(tmp_path, style: str) -> tuple[str, str, pd.DataFrame]:
    """A chain priced by crr_batch from known S, r, q_borrow, smile and dividends (expiries
    settle at the 16:00 close, quotes at the 16:00 close of VALUATION)."""
    start = clock.quote_instant(VALUATION)
    rows = []
    for ex in EXPIRIES:
        T = clock.years_between(start, clock.settlement_instant(ex))
        t = np.array([dividends.ex_date_years(start, d) for d, _ in DIVS])
        a = np.array([x for _, x in DIVS])
        keep = (t > 0) & (t < T)
        for K in np.arange(85.0, 116.0, 5.0):
            for kind in ("call", "put"):
                rows.append(dict(expiry=ex, type=kind, strike=K, T=T, times=t[keep], amounts=a[keep]))
    n = len(rows)
    m = max(len(r["times"]) for r in rows)
    tt, aa = np.full((n, m), np.nan), np.zeros((n, m))
    for i, r in enumerate(rows):
        tt[i, :len(r["times"])], aa[i, :len(r["amounts"])] = r["times"], r["amounts"]
    K = np.array([r["strike"] for r in rows])
    kind = np.array([CALL if r["type"] == "call" else PUT for r in rows], dtype=np.int8)
    code = AMERICAN if style == "american" else EUROPEAN
    px = crr_batch(kind, np.full(n, code, dtype=np.int8), S0, K, np.array([r["T"] for r in rows]), R, Q_BORROW,
                   _smile(K), STEPS, greeks=False, dividend_times=tt, dividend_amounts=aa)[0]
    df = pd.DataFrame(dict(underlying="XYZ", quote_date=VALUATION, expiry=[r["expiry"] for r in rows],
                           type=[r["type"] for r in rows], strike=K, bid=px - 0.01, ask=px + 0.01, last=px,
                           implied_vol=np.nan, underlying_price=S0, style=style))
    chain_path, div_path = tmp_path / "chain.csv", tmp_path / "divs.csv"
    df.to_csv(chain_path, index=False)
    pd.DataFrame(DIVS, columns=["ex_date", "amount"]).to_csv(div_path, index=False)
    return str(chain_path), str(div_path), df


def test_chain_with_dividends_recovers_vols_and_residual_borrow(tmp_path, capsys):
    chain_path, div_path, df = _synthetic_chain(tmp_path, "american")
    dst, fwd = tmp_path / "out.csv", tmp_path / "fwd.csv"
    rc = cli_main(["chain", chain_path, "--no-daemon", "--dividends", div_path, "--steps", str(STEPS),
                   "--rate", str(R), "--dividend-yield", str(Q_BORROW), "-o", str(dst), "--forwards", str(fwd)])
    printed = capsys.readouterr().out
    assert rc == 0 and "PV divs" in printed
    out, table = pd.read_csv(dst), pd.read_csv(fwd)
    assert (out.status == "ok").all(), out.error.tolist()
    np.testing.assert_allclose(out.iv, _smile(out.strike.to_numpy()), atol=1e-6)
    np.testing.assert_allclose(table.carry, Q_BORROW, atol=1e-6)
    np.testing.assert_allclose(table.spot, S0, atol=1e-6)
    # the table's PV of the dividends before each expiry, at its rate, written out
    start = clock.quote_instant(VALUATION)
    for e in table.itertuples():
        pv = sum(a * math.exp(-e.rate * dividends.ex_date_years(start, d)) for d, a in DIVS
                 if dividends.ex_date_years(start, d) < e.T)
        assert e.pv_dividends == pytest.approx(pv, abs=1e-12)
        assert e.forward == pytest.approx((e.spot - pv) * math.exp((e.rate - e.carry) * e.T), rel=1e-12)
    # without the file the carry swallows the dividends (as before): no PV column; the implied spot takes the front dividend, later carries the rest
    rc = cli_main(["chain", chain_path, "--no-daemon", "--steps", str(STEPS), "--rate", str(R),
                   "--dividend-yield", str(Q_BORROW), "-o", str(dst), "--forwards", str(fwd)])
    capsys.readouterr()
    plain = pd.read_csv(fwd)
    assert rc == 0 and "pv_dividends" not in plain.columns and (plain.carry.iloc[1:] > Q_BORROW + 0.01).all()


def test_chain_european_with_dividends_prices_on_the_tree(tmp_path):
    from optiond import chain

    chain_path, div_path, df = _synthetic_chain(tmp_path, "european")
    out, summary = chain.price_chain(chain.read_chain(chain_path), steps=STEPS, rate=R,
                                     dividends=dividends.read_dividend_file(div_path))
    assert (out.status == "ok").all(), out.error.tolist()
    table = summary.forwards
    # the parity fit on prices of a 200-step tree, whose own put-call parity is off by its
    # discretisation: the residual borrow to 1e-4 (the American test checks 1e-6)
    assert "pv_dividends" in table.columns
    np.testing.assert_allclose(table.carry, Q_BORROW, atol=1e-4)
    np.testing.assert_allclose(out.iv, _smile(out.strike.to_numpy()), atol=2e-3)


def test_chain_surface_theo_with_dividends_is_the_tree_at_iv_fit(tmp_path, capsys):
    """With --dividends the theo is the CRR tree at the fitted IV with each row's schedule (the
    engine the chain prices dividend rows with), so on a chain priced by that tree the edge is
    inside the half-spread; the continuous carry alone missed the dividends by many."""
    chain_path, div_path, df = _synthetic_chain(tmp_path, "american")
    dst = tmp_path / "out.csv"
    rc = cli_main(["chain", chain_path, "--no-daemon", "--dividends", div_path, "--steps", str(STEPS),
                   "--rate", str(R), "--dividend-yield", str(Q_BORROW), "-o", str(dst),
                   "--surface", str(tmp_path / "s.json")])
    capsys.readouterr()
    out = pd.read_csv(dst)
    assert rc == 0 and (out.status == "ok").all()
    start = clock.quote_instant(VALUATION)
    rows = out.index[np.isfinite(out.theo)].to_numpy()
    assert rows.size >= len(out) - 4
    t_all = np.array([dividends.ex_date_years(start, d) for d, _ in DIVS])
    a_all = np.array([x for _, x in DIVS])
    tt = np.where((t_all > 0) & (t_all < out.expiry_years.to_numpy()[rows, None]), t_all, np.nan)
    aa = np.where(np.isfinite(tt), a_all, 0.0)
    kind = np.where(out.type.to_numpy()[rows] == "call", CALL, PUT).astype(np.int8)
    ref = crr_batch(kind, np.full(rows.size, AMERICAN, dtype=np.int8), out.spot.to_numpy()[rows],
                    out.strike.to_numpy()[rows], out.expiry_years.to_numpy()[rows], out.rate.to_numpy()[rows],
                    out.dividend_yield.to_numpy()[rows], out.iv_fit.to_numpy()[rows], STEPS, greeks=False,
                    dividend_times=tt, dividend_amounts=aa)[0]
    np.testing.assert_allclose(out.theo.to_numpy()[rows], ref, rtol=1e-12, atol=1e-12)
    near = rows[np.abs(np.log(out.strike.to_numpy()[rows] / out.forward.to_numpy()[rows])) < 0.1]
    assert near.size >= 12
    np.testing.assert_allclose(out.edge_half_spreads.to_numpy()[near],
                               out.edge.to_numpy()[near] / (0.5 * (out.ask - out.bid).to_numpy()[near]), rtol=1e-9)
    assert np.median(np.abs(out.edge_half_spreads.to_numpy()[near])) <= 1.0


def test_chain_bad_dividend_file_is_one_line(tmp_path, capsys):
    chain_path, _, _ = _synthetic_chain(tmp_path, "american")
    bad = tmp_path / "bad.csv"
    bad.write_text("ex_date,amount\n2026-03-06,0.8\n2026-06-05,-1\n")
    rc = cli_main(["chain", chain_path, "--no-daemon", "--dividends", str(bad)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and "row 2" in err[0] and "amount" in err[0]


def _long_cell_frame(n: int = 20_000, long_row: int = 7, entries: int = 2_000) -> pd.DataFrame:
    """n European puts, every 500th with a two-dividend cell, row ``long_row`` with ``entries``."""
    df = pd.DataFrame(dict(kind="put", style="european", spot=100.0, strike=np.linspace(80.0, 120.0, n), expiry=1.0,
                           rate=0.03, volatility=0.2, dividends=""))
    df.loc[::500, "dividends"] = "0.25:1.0;0.75:1.0"
    df.loc[long_row, "dividends"] = ";".join(f"{0.9 * (j + 1) / (entries + 1):.6f}:0.001" for j in range(entries))
    return df


def test_long_dividend_cell_is_refused_before_padding():
    """Issue 32, item 8: one cell of 2,000 dividends among 20,000 rows is its row's error,
    counted before anything is padded: the schedule arrays stay MAX_DIVIDENDS wide (the old
    code padded every row to 2,000 entries, 640 MB, and checked the count afterwards)."""
    import tracemalloc

    from optiond.models import MAX_DIVIDENDS

    cells = _long_cell_frame()["dividends"].tolist()
    tracemalloc.start()
    try:
        t, a, errors = dividends.schedule_columns(cells)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert t.shape == a.shape == (20_000, 2) and peak < 50 << 20, (t.shape, peak)
    assert [(e.row, e.field) for e in errors] == [(7, "dividends")]
    assert f"2000 dividends, at most {MAX_DIVIDENDS} per option" in errors[0].message and len(errors[0].message) < 120
    np.testing.assert_array_equal(t[500], [0.25, 0.75])
    assert np.isnan(t[7]).all() and dividends.entry_count(" 0.1:1; ;0.2:1;") == 2


def test_long_dividend_cell_among_20000_rows_prices_the_rest():
    """The whole in-process path (parse, validate, price) of the 20,000-row table: the engine
    is given schedules two entries wide (never 2,000), every other row is priced, the
    cash-dividend rows on the tree equal to the tree priced directly, and the long cell's row
    is an error naming it."""
    from optiond.models import Method
    from optiond.pricer import LocalPricer, price_portfolio

    seen = []

    class Recording(LocalPricer):
        def price_table(self, columns, method=None):
            seen.append(np.shape(columns["dividend_times"]))
            assert seen[-1] == (20_000, 2), seen  # before the engine works on it
            return super().price_table(columns, method)

    df = _long_cell_frame()
    res = price_portfolio(Recording(), df, Method(name="auto", steps=50, greeks=False))
    assert seen == [(20_000, 2)]
    bad = np.flatnonzero(res.status != "ok")
    assert bad.tolist() == [7] and "2000 dividends" in res.error[7]
    rows = np.arange(0, 20_000, 500)
    ref = crr_batch(np.full(rows.size, PUT, dtype=np.int8), np.full(rows.size, EUROPEAN, dtype=np.int8), 100.0,
                    df["strike"].to_numpy()[rows], 1.0, 0.03, 0.0, 0.2, 50,
                    dividend_times=np.tile([0.25, 0.75], (rows.size, 1)), dividend_amounts=np.ones((rows.size, 2)))
    np.testing.assert_allclose(res.price[rows], ref[0], rtol=1e-12)
    assert (res.method[rows] == "binomial").all() and (res.method[8:500] == "black-scholes").all()


def test_wide_dividend_arrays_are_checked_per_row_before_broadcasting():
    """A request's own (n, m) arrays: a row over MAX_DIVIDENDS is that row's error and the
    padding past the longest usable schedule is cut; ONE (m,) schedule for every row over the
    limit refuses the request before it is broadcast to (n, m)."""
    from optiond.models import MAX_DIVIDENDS, InvalidInputError, validate_dividends

    n, m = 300, 2_000
    t = np.full((n, m), np.nan)
    a = np.zeros((n, m))
    t[:, :2], a[:, :2] = [0.25, 0.5], 1.0
    t[3], a[3] = np.linspace(0.0, 0.9, m), 0.001
    spot, expiry = np.full(n, 100.0), np.ones(n)
    tt, aa, errors = validate_dividends(t, a, spot, expiry)
    assert tt.shape == aa.shape == (n, 2) and [(e.row, e.value) for e in errors] == [(3, float(m))]
    assert np.isnan(tt[3]).all() and (aa[3] == 0).all() and (tt[0] == [0.25, 0.5]).all()
    with pytest.raises(InvalidInputError, match=f"at most {MAX_DIVIDENDS} dividends"):
        validate_dividends(np.linspace(0.0, 0.9, m), np.full(m, 0.001), np.full(20_000, 100.0), np.ones(20_000))


def test_a_long_schedule_object_gives_each_row_at_most_one_over_the_limit():
    """A dividends object of 64 entries over 10,000 rows: each row keeps its dividends up to its
    T, at most MAX_DIVIDENDS + 1 (the old code padded every row to all 64); a row with more
    than MAX_DIVIDENDS before its T is the engine's row error, the others price."""
    from optiond import engine
    from optiond.daemon.object_kinds import MAX_SCHEDULE, CashDividends
    from optiond.models import MAX_DIVIDENDS, Method

    times = tuple(0.1 * (j + 1) for j in range(MAX_SCHEDULE))
    sched = CashDividends(times, (0.01,) * MAX_SCHEDULE)
    n = 10_000
    T = np.where(np.arange(n) % 2 == 0, 0.35, 5.0)  # three dividends before 0.35, 49 before 5.0
    t, a = sched.rows(T)
    assert t.shape == a.shape == (n, MAX_DIVIDENDS + 1)
    np.testing.assert_array_equal(t[0, :3], times[:3])
    assert np.isnan(t[0, 3:]).all() and (np.isfinite(t[1])).all()
    res = engine.price_table(dict(kind="put", style="european", spot=100.0, strike=100.0, expiry=T[:4], rate=0.03,
                                  volatility=0.2, dividend_times=t[:4], dividend_amounts=a[:4]),
                             Method(steps=20, greeks=False))
    assert res.status.tolist() == ["ok", "error", "ok", "error"] and f"at most {MAX_DIVIDENDS}" in res.error[1]
