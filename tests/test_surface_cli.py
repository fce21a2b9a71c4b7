"""optiond chain --surface FILE.json --plot DIR: the fit's outputs from the command line."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optiond.cli import main as cli_main

SPY = Path(__file__).resolve().parents[1] / "examples" / "data" / "spy_chain_2026-02-13.csv"


@pytest.fixture(scope="module")
def small_chain(tmp_path_factory):
    """The SPY chain's first four expiries (a quick chain for the command line)."""
    df = pd.read_csv(SPY)
    keep = sorted(df["expiry"].unique())[:4]
    path = tmp_path_factory.mktemp("chain") / "spy_small.csv"
    df[df["expiry"].isin(keep)].to_csv(path, index=False)
    return path


def run(capsys, *args):
    rc = cli_main(["chain", *map(str, args), "--quote-time", "10:50", "--no-daemon"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_surface_into_a_missing_directory_is_one_line(capsys, small_chain, tmp_path):
    rc, out, err = run(capsys, small_chain, "--surface", tmp_path / "nowhere" / "s.json")
    assert rc == 2 and "Traceback" not in err
    assert err.strip().count("\n") == 0 and err.startswith("optiond chain: --surface") and "no directory" in err


def test_surface_onto_a_directory_is_one_line(capsys, small_chain, tmp_path):
    rc, _, err = run(capsys, small_chain, "--surface", tmp_path)
    assert rc == 2 and err.strip().count("\n") == 0 and "a directory" in err


def test_plot_under_a_file_is_one_line(capsys, small_chain, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    rc, _, err = run(capsys, small_chain, "--plot", f / "sub")
    assert rc == 2 and err.strip().count("\n") == 0 and err.startswith("optiond chain: --plot") and "is a file" in err


def test_surface_json_theo_columns_and_plots(capsys, small_chain, tmp_path):
    from optiond.surface import Surface
    from optiond.surface.theo import THEO_COLUMNS

    csv, js, plots = tmp_path / "o.csv", tmp_path / "spy.json", tmp_path / "plots"
    rc, out, err = run(capsys, small_chain, "-o", csv, "--surface", js, "--plot", plots)
    assert rc == 0, err
    surface = Surface.from_json(str(js))
    assert surface.underlying == "SPY" and 1 <= len(surface.slices) <= 4
    df = pd.read_csv(csv)
    assert list(df.columns[-len(THEO_COLUMNS):]) == list(THEO_COLUMNS)
    # iv_fit is the JSON surface's vol at each row's strike and T (NaN outside its expiries)
    T = df["expiry_years"].to_numpy()
    inside = (T >= surface.slices[0].T * (1 - 1e-9)) & (T <= surface.slices[-1].T * (1 + 1e-9))
    ref = np.full(len(df), np.nan)
    for t in np.unique(T[inside]):
        r = inside & (T == t)
        ref[r] = surface.vol(df["strike"].to_numpy()[r], t)
    np.testing.assert_allclose(df["iv_fit"].to_numpy(), ref, rtol=1e-12, equal_nan=True)
    # each slice keeps the spot its expiry was priced on (schema 1.1): American prices need it
    for s in surface.slices:
        assert s.spot == pytest.approx(df.loc[df["expiry"] == s.expiry, "spot"].median(), rel=1e-15)
    priced = df["theo"].notna()
    assert priced.sum() > 0.9 * inside.sum()
    np.testing.assert_allclose(df.loc[priced, "edge"], df.loc[priced, "mid"] - df.loc[priced, "theo"], rtol=1e-12)
    for f in ("smiles", "term_structure", "heatmap"):
        assert (plots / f"spy_{f}.png").stat().st_size > 5000 and not (plots / f"spy_{f}.svg").exists()
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("surface SPY (svi+correction): "))
    table = lines[head + 2:head + 2 + len(surface.slices)]  # after the column header: one line per expiry
    assert [line.split()[0] for line in table] == [s.expiry for s in surface.slices]
    assert f"wrote {js}" in out


def test_summary_lines_read_the_fit_statistics():
    from optiond.commands.pricing import surface_lines
    from optiond.surface import SVI, Slice, Surface

    p = SVI(0.01, 0.05, -0.4, 0.0, 0.2)  # w(0) = 0.01 + 0.05 * 0.2 = 0.02; T = 0.5: ATM IV 20 %
    s = Surface("SPY", "2026-02-13", [Slice("2026-08-14", 0.5, 100.0, 0.04, p,
                                            {"inside_share": 0.968, "rms_vol_pts": 0.4321, "rms_vol_pts_itm": 1.234,
                                             "confidence": 0.9})],
                stats={"inside_share": 0.968, "inside_share_near": 1.0, "rms_vol_pts": 0.4321, "arbitrage_free": True})
    head, cols, row = surface_lines(s)
    assert head == ("surface SPY (svi): 1 expiries, fitted IV inside the quoted spread 100% of two-sided quotes with "
                    "|k|<0.1, median rms 0.43 vol pts, no arbitrage")
    assert row.split() == ["2026-08-14", "0.5000", "20%", "-", "-", "97%", "0.43", "1.23", "0.90"]
    # with the yardstick: the near-the-money share beside the achievable one, and the warnings
    s.stats.update(achievable_near=1.0, warnings=["2026-08-14: inside 80% of the quotes near the money, 20 points "
                                                  "below the achievable 100%"])
    s.slices[0].stats.update(inside_share_near=0.8, achievable_near=1.0)
    lines = surface_lines(s)
    assert "|k|<0.1 (achievable 100%)" in lines[0]
    assert lines[2].split() == ["2026-08-14", "0.5000", "20%", "80%", "100%", "97%", "0.43", "1.23", "0.90"]
    assert lines[3] == "  warning 2026-08-14: inside 80% of the quotes near the money, 20 points below the achievable 100%"
    s.stats, s.slices[0].stats = {}, {}  # a surface without statistics: dashes
    assert surface_lines(s)[2].split() == ["2026-08-14", "0.5000", "20%", "-", "-", "-", "-", "-", "-"]
