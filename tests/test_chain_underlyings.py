"""One market per underlying: a chain file that holds several underlyings (files concatenated)
prices each on its own spot, forwards and carry, exactly as each file alone; a row whose
``underlying`` cell is not a symbol is marked ``invalid`` and the rest still prices; the steps
that take one underlying (a dividend file, a surface or Heston fit) refuse such a chain in one
line. In-process and through the daemon (one ``chain`` request)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optiond import chain
from optiond.cli import EXIT_INPUT
from optiond.cli import main as cli_main
from optiond.market.underlyings import MAX_SYMBOL_CHARS, split

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
QUOTE_TIME = "10:50"  # the bundled 2026-02-13 snapshots (examples/data/README.md)
#: what each underlying's rows must share with the file priced alone
SAME = ("expiry_years", "spot", "rate", "dividend_yield", "forward", "mid", "iv_bid", "iv", "iv_ask", "iv_otm",
        "model_price", "delta")


def _front(name: str, expiries: int = 1) -> pd.DataFrame:
    """The first ``expiries`` expiries of a bundled chain (about 150 rows each: cheap)."""
    df = chain.read_chain(str(DATA / name))
    return df[df.expiry.isin(sorted(df.expiry.unique())[:expiries])].reset_index(drop=True)


@pytest.fixture(scope="module")
def alone():
    """SPY's and QQQ's front expiries, each priced on its own."""
    out = {}
    for sym, name in (("SPY", "spy_chain_2026-02-13.csv"), ("QQQ", "qqq_chain_2026-02-13.csv")):
        df = _front(name)
        out[sym] = (df,) + chain.price_chain(df, quote_time=QUOTE_TIME)
    return out


def _mixed(alone) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """QQQ then SPY (lower-case, padded: the same symbol), a 1,000-character underlying on a copy
    of a SPY row, and three rows of a stray symbol with its own print; the rows of each."""
    spy, qqq = alone["SPY"][0].copy(), alone["QQQ"][0]
    spy["underlying"] = " spy "
    garbage = spy.iloc[[10]].assign(underlying="X" * 1000)
    control = spy.iloc[[11]].assign(underlying="SP\x00Y")
    stray = spy.iloc[[20, 21, 22]].assign(underlying="SPYX", underlying_price=50.0)
    parts = [qqq, spy, garbage, control, stray]
    mixed = pd.concat(parts, ignore_index=True)
    ends = np.cumsum([0] + [len(p) for p in parts])
    rows = dict(QQQ=np.arange(ends[0], ends[1]), SPY=np.arange(ends[1], ends[2]), bad=np.arange(ends[2], ends[4]),
                SPYX=np.arange(ends[4], ends[5]))
    return mixed, rows


def _assert_same_as_alone(out: pd.DataFrame, forwards: pd.DataFrame, rows: dict, alone) -> None:
    for sym in ("SPY", "QQQ"):
        own, own_summary = alone[sym][1], alone[sym][2]
        part = out.iloc[rows[sym]].reset_index(drop=True)
        assert part.status.tolist() == own.status.tolist(), sym
        for c in SAME:
            np.testing.assert_allclose(part[c].to_numpy(dtype=float), own[c].to_numpy(dtype=float), rtol=1e-12,
                                       atol=1e-14, equal_nan=True, err_msg=f"{sym} {c}")
        table = forwards[forwards.underlying == sym].reset_index(drop=True)
        mine = own_summary.forwards
        assert (mine.underlying == sym).all() and len(table) == len(mine)
        for c in ("T", "spot", "rate", "forward", "carry"):
            np.testing.assert_allclose(table[c].to_numpy(dtype=float), mine[c].to_numpy(dtype=float), rtol=1e-12)
    # the two spots are far apart: one spot for both would show
    assert alone["SPY"][1].spot.iat[0] - alone["QQQ"][1].spot.iat[0] > 50.0
    bad = out.iloc[rows["bad"]]
    assert (bad.status == "invalid").all() and bad.spot.isna().all()
    assert "1,000 characters" in bad.error.iat[0] and "control character" in bad.error.iat[1]
    stray = out.iloc[rows["SPYX"]]
    assert (stray.spot == 50.0).all()  # its own print (too few pairs to imply one), not SPY's spot
    assert forwards.underlying.tolist().count("SPYX") == 1
    assert set(forwards.underlying) == {"SPY", "QQQ", "SPYX"}


def test_split_names_and_marks_bad_cells():
    u = split(pd.Series(["SPY", " spy", "QQQ", np.nan, "X" * (MAX_SYMBOL_CHARS + 1), "A\tB", "", "BRK.B"]))
    assert u.names == ["SPY", "QQQ", "BRK.B"]
    assert u.code.tolist() == [0, 0, 1, -1, -1, -1, -1, 2]
    assert [bool(e) for e in u.error] == [False, False, False, True, True, True, True, False]
    assert "blank" in u.error[3] and "SPY, QQQ, BRK.B" in u.error[3]
    assert "characters long" in u.error[4] and "control character" in u.error[5]
    blank = split(pd.Series([np.nan, "", " "]))  # no cell names one: one unnamed underlying
    assert blank.names == [""] and blank.code.tolist() == [0, 0, 0] and not blank.error.any()


def test_too_many_underlyings_keeps_those_with_the_most_rows(monkeypatch):
    from optiond.market import underlyings

    monkeypatch.setattr(underlyings, "MAX_UNDERLYINGS", 2)
    u = split(pd.Series(["A", "B", "B", "C", "C", "C", "D", "x" * 40]))
    assert u.names == ["B", "C"] and u.code.tolist() == [-1, 0, 0, 1, 1, 1, -1, -1]
    assert "holds 4 underlyings, more than 2" in u.error[0] and u.error[0] == u.error[6]
    assert "characters long" in u.error[7] and not u.error[1:6].any()


def test_mixed_underlyings_price_as_each_file_alone(alone):
    mixed, rows = _mixed(alone)
    out, summary = chain.price_chain(mixed, quote_time=QUOTE_TIME)
    _assert_same_as_alone(out, summary.forwards, rows, alone)
    assert summary.by_status["invalid"] == 2
    text = "\n".join(summary.lines())
    assert "  QQQ  2026-02-17" in text and "  SPYX 2026-02-17" in text


def test_mixed_underlyings_through_the_daemon(alone, daemon):
    mixed, rows = _mixed(alone)
    with daemon.client(timeout=60.0) as client:
        out, summary = client.price_chain(mixed, fallback=False, quote_time=QUOTE_TIME)
    assert summary.via == "daemon"
    _assert_same_as_alone(out, summary.forwards, rows, alone)


def test_one_underlying_steps_refuse_a_mixed_chain(alone, tmp_path, capsys):
    mixed, _ = _mixed(alone)
    divs = pd.DataFrame({"ex_date": ["2026-03-20"], "amount": [1.9]})
    with pytest.raises(ValueError, match=r"dividend file is for one underlying; the chain holds 3 \(QQQ, SPY, SPYX\)"):
        chain.solve_market(mixed, dividends=divs)
    src = tmp_path / "mixed.csv"
    mixed.to_csv(src, index=False)
    (tmp_path / "divs.csv").write_text("ex_date,amount\n2026-03-20,1.9\n")
    for extra, words in ((["--surface", str(tmp_path / "s.json")], "--surface takes one underlying"),
                         (["--dividends", str(tmp_path / "divs.csv")], "--dividends takes one underlying")):
        rc = cli_main(["chain", str(src), "--no-daemon", "-o", str(tmp_path / "out.csv")] + extra)
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert rc == EXIT_INPUT and len(err) == 1 and words in err[0] and "QQQ, SPY, SPYX" in err[0], err
        assert not (tmp_path / "out.csv").exists()  # refused before any pricing
    rc = cli_main(["heston-fit", str(src)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == EXIT_INPUT and len(err) == 1 and "heston-fit takes one underlying" in err[0], err


def test_surface_fit_takes_the_chains_one_symbol(alone):
    from optiond.surface.points import fit_chain

    spy_out = alone["SPY"][1]
    garbage = spy_out.iloc[[0]].assign(underlying="X" * 1000, status="invalid", iv=np.nan)
    surface = fit_chain(pd.concat([garbage, spy_out], ignore_index=True))
    assert surface.underlying == "SPY"  # not the invalid first row's cell
    with pytest.raises(ValueError, match=r"a surface fit takes one underlying; the chain holds 2 \(SPY, QQQ\)"):
        fit_chain(pd.concat([spy_out, alone["QQQ"][1]], ignore_index=True))
