"""Where the CLI writes: ``optiond chain`` without ``-o`` streams its CSV to stdout as
``optiond price`` does (the summary on stderr), and progress bars appear only on a terminal."""

from __future__ import annotations

import io
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from scipy.stats import norm

from optiond.cli import main as cli_main
from optiond.commands.pricing import _JobBar

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"


def test_chain_without_output_writes_csv_to_stdout(tmp_path, capsys):
    src = tmp_path / "chain.csv"
    pd.read_csv(DATA / "aapl_chain_2026-02-13.csv").head(6).to_csv(src, index=False)
    dst = tmp_path / "out.csv"
    assert cli_main(["chain", str(src), "--no-daemon", "--steps", "50", "-o", str(dst)]) == 0
    capsys.readouterr()
    assert cli_main(["chain", str(src), "--no-daemon", "--steps", "50"]) == 0
    out, err = capsys.readouterr()
    streamed = pd.read_csv(io.StringIO(out))
    # the same table as the file -o writes, and the summary on stderr, not mixed into the CSV
    pd.testing.assert_frame_equal(streamed, pd.read_csv(dst))
    assert len(streamed) == 6 and "methods:" in err and "wrote" not in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _feed(bar: _JobBar) -> None:
    for f in (None, 0.25, 0.5, 1.0):
        bar(SimpleNamespace(fraction=f))
    bar.close()


def test_job_bar_only_on_a_terminal(monkeypatch):
    log = io.StringIO()  # a log file or a pipe: no bar
    monkeypatch.setattr("sys.stderr", log)
    _feed(_JobBar(9, "price", True))
    assert log.getvalue() == ""
    tty = _Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    _feed(_JobBar(9, "price", True))
    assert "price" in tty.getvalue() and "9/9" in tty.getvalue()
    quiet = _Terminal()  # --no-progress: none even on a terminal
    monkeypatch.setattr("sys.stderr", quiet)
    _feed(_JobBar(9, "price", False))
    assert quiet.getvalue() == ""


def test_bad_volatility_cell_is_reported_as_written(tmp_path, capsys):
    # a file with the Heston columns whose rows are not Heston rows (blank v0): the volatility
    # cell 'abc' is named as written, and the next row is priced by the closed form
    src = tmp_path / "book.csv"
    src.write_text("kind,style,spot,strike,expiry,rate,volatility,v0,kappa,long_run_variance,xi,correlation\n"
                   "call,european,100,100,1,0.05,abc,,,,,\n"
                   "call,european,100,100,1,0.05,0.2,,,,,\n")
    dst = tmp_path / "out.csv"
    assert cli_main(["price", str(src), "--no-daemon", "--method", "black-scholes", "-o", str(dst)]) == 1
    out = pd.read_csv(dst)
    assert out.status.tolist() == ["error", "ok"]
    assert "volatility='abc'" in out.error[0] and "nan" not in out.error[0]
    d1 = (math.log(100 / 100) + (0.05 + 0.02) * 1.0) / 0.2
    ref = 100 * norm.cdf(d1) - 100 * math.exp(-0.05) * norm.cdf(d1 - 0.2)
    assert out.price[1] == pytest.approx(ref, rel=1e-12)
