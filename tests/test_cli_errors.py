"""Bad input through ``optiond price`` / ``optiond chain``: one line on stderr, a non-zero exit,
no traceback, and every other row priced where the file has any; per-row work limits marked
the same way in-process and on the daemon."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optiond import costs, engine
from optiond.cli import EXIT_DAEMON, EXIT_INPUT
from optiond.cli import main as cli_main
from optiond import limits
from optiond.kernels.binomial.cpu import crr_price
from optiond.models import Method

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
ROW = dict(kind="put", style="european", spot=100.0, strike=100.0, expiry=1.0, rate=0.05, dividend_yield=0.0,
           volatility=0.2)


def run_cli(capsys, *argv: str) -> tuple[int, list[str], str]:
    """(exit status, stderr lines, stdout) of ``optiond <argv>`` run in this process."""
    rc = cli_main(list(argv))
    out, err = capsys.readouterr()
    return rc, [line for line in err.splitlines() if line.strip()], out


def assert_one_line(rc: int, err: list[str], code: int, *words: str) -> None:
    assert rc == code, err
    assert len(err) == 1, err
    assert "Traceback" not in err[0] and err[0].startswith("optiond ")
    for w in words:
        assert w in err[0], err[0]


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def book(tmp_path: Path, rows: list[dict]) -> str:
    src = tmp_path / "book.csv"
    pd.DataFrame([dict(ROW, **r) for r in rows]).to_csv(src, index=False)
    return str(src)


def test_empty_and_header_only_files(tmp_path, capsys):
    empty = write(tmp_path / "empty.csv", "")
    header = write(tmp_path / "header.csv", "kind,spot,strike,expiry,rate,volatility\n")
    for flag in ("--no-daemon", "--daemon-only"):  # the file is read before any daemon is asked
        assert_one_line(*run_cli(capsys, "price", empty, flag)[:2], EXIT_INPUT, "empty")
    assert_one_line(*run_cli(capsys, "price", header, "--no-daemon")[:2], EXIT_INPUT, "no rows")
    assert_one_line(*run_cli(capsys, "price", str(tmp_path / "missing.csv"), "--no-daemon")[:2], EXIT_INPUT,
                    "cannot read")
    # the engine prices a table without rows to an empty result (no IndexError)
    res = engine.price_table({k: np.array([]) if k != "kind" else np.array([], dtype=object) for k in ROW})
    assert len(res) == 0


@pytest.mark.parametrize("steps", ["0", "1000000000"])
def test_chain_steps_out_of_range(tmp_path, capsys, steps):
    src = tmp_path / "chain.csv"
    pd.read_csv(DATA / "aapl_chain_2026-02-13.csv").head(5).to_csv(src, index=False)
    assert_one_line(*run_cli(capsys, "chain", str(src), "--no-daemon", "--steps", steps)[:2], EXIT_INPUT,
                    "steps", steps)


def test_duplicate_columns_are_refused_unknown_ones_warned(tmp_path, capsys):
    dup = write(tmp_path / "dup.csv", "kind,spot,strike,expiry,rate,volatility,spot\nput,100,100,1,0.05,0.2,120\n")
    assert_one_line(*run_cli(capsys, "price", dup, "--no-daemon")[:2], EXIT_INPUT, "'spot'", "more than once")
    chain_src = tmp_path / "chain.csv"
    text = (DATA / "aapl_chain_2026-02-13.csv").read_text().splitlines()[:4]
    write(chain_src, "\n".join([text[0] + ",strike"] + [line + ",1" for line in text[1:]]) + "\n")
    rc, err, _ = run_cli(capsys, "chain", str(chain_src), "--no-daemon")
    assert_one_line(rc, err, EXIT_INPUT, "'strike'", "more than once")

    unknown = write(tmp_path / "unknown.csv", "kind,spot,strike,expiry,rate,volatility,desk,trader\n"
                                              "put,100,100,1,0.05,0.2,rates,ann\n")
    out_path = tmp_path / "out.csv"
    rc, err, _ = run_cli(capsys, "price", unknown, "--no-daemon", "-o", str(out_path), "--steps", "200",
                         "--method", "binomial")
    assert rc == 0
    assert err[0] == "optiond price: warning: ignoring unknown columns desk, trader"
    out = pd.read_csv(out_path)
    assert out.status.tolist() == ["ok"] and out.desk.tolist() == ["rates"]  # kept in the output, not read
    assert out.price[0] == pytest.approx(crr_price("put", "american", 100, 100, 1, 0.05, 0.0, 0.2, 200), rel=1e-12)
    # a chain with the optional columns and an unknown one: only the unknown one is named
    chain_src2 = tmp_path / "chain2.csv"
    df = pd.read_csv(DATA / "aapl_chain_2026-02-13.csv").head(3)
    df["quote_time"], df["settlement"], df["venue"] = "15:59", "am", "x"
    df.to_csv(chain_src2, index=False)
    rc, err, _ = run_cli(capsys, "chain", str(chain_src2), "--no-daemon", "--steps", "50")
    assert rc == 0 and err[0] == "optiond chain: warning: ignoring unknown column venue"


def _limit_book(tmp_path: Path) -> str:
    return book(tmp_path, [
        dict(method="binomial", steps=200),
        dict(method="mlmc", eps=1e-9),                 # 2e20 path steps: over max_mlmc_cost
        dict(method="binomial", steps=600_000),        # 9e11 nodes with Greeks: over max_tree_nodes
        dict(method="black-scholes"),
        dict(method="binomial", steps=10**9),          # over MAX_STEPS
        dict(method="mlmc", eps=0.05),
    ])


def _check_limit_rows(out: pd.DataFrame) -> None:
    assert out.status.tolist() == ["ok", "error", "error", "ok", "error", "ok"]
    assert "max_mlmc_cost" in out.error[1] and "eps=1e-09" in out.error[1]
    assert "max_tree_nodes" in out.error[2] and "steps=600000" in out.error[2]
    assert "steps" in out.error[4]
    assert out.price[0] == pytest.approx(crr_price("put", "european", 100, 100, 1, 0.05, 0.0, 0.2, 200), rel=1e-12)
    assert abs(out.price[5] - out.price[3]) < 5 * 0.05  # MLMC within a few eps of the closed form


def test_rows_over_a_work_limit_are_marked_in_process(tmp_path, capsys):
    dst = tmp_path / "out.csv"
    rc, err, _ = run_cli(capsys, "price", _limit_book(tmp_path), "--no-daemon", "-o", str(dst))
    assert rc == 1 and err[-1].startswith("priced 3/6 rows (3 errors)")
    _check_limit_rows(pd.read_csv(dst))


def test_rows_over_a_work_limit_are_marked_on_the_daemon_too(tmp_path, capsys, daemon):
    dst = tmp_path / "out.csv"
    rc, err, _ = run_cli(capsys, "price", _limit_book(tmp_path), "--daemon-only", "-o", str(dst))
    assert rc == 1 and "(daemon)" in err[-1], err
    out = pd.read_csv(dst)
    _check_limit_rows(out)
    local = pd.read_csv(_limit_book(tmp_path))
    res = engine.price_table({c: local[c].to_numpy() for c in local.columns}, Method(eps=0.01, seed=0))
    assert out.status.tolist() == res.status.tolist()
    assert out.error.fillna("").tolist() == res.error.tolist()
    np.testing.assert_array_equal(out.price.to_numpy(), res.price)  # the same bits whoever prices


def test_adi_grid_over_the_limit_marks_adi_rows_only(tmp_path, capsys):
    src = book(tmp_path, [dict(method="adi", v0=0.04, kappa=1.5, long_run_variance=0.04, xi=0.3, correlation=-0.7),
                          dict(method="binomial", steps=100, v0=0.04, kappa=1.5, long_run_variance=0.04, xi=0.3, correlation=-0.7)])
    dst = tmp_path / "out.csv"
    rc, err, _ = run_cli(capsys, "price", src, "--no-daemon", "--grid", "4000", "4000", "-o", str(dst))
    assert rc == 1
    out = pd.read_csv(dst)
    assert out.status.tolist() == ["error", "ok"] and "max_adi_nodes" in out.error[0]
    (row, reason), = limits.row_limit_errors(np.array(["adi", "binomial"], dtype=object), np.ones(2, dtype=np.int64),
                                             np.ones(2), Method(name="adi", grid=(100, 100), time_steps=10**7))
    assert row == 0 and "max_adi_cells" in reason  # 1e11 cell updates: under the node limit, over the work one
    # the daemon's estimate leaves out rows it will not price: a request of such rows costs nothing
    cost = limits.estimate("price", {"eps": np.array([1e-9, 0.01])}, Method(name="mlmc"), 2)
    assert cost.work == pytest.approx(costs.MLMC_STEPS_EPS2 / 0.01**2)


def test_daemon_only_without_a_daemon_says_what_to_do(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPTIOND_CONNECTION_FILE", str(tmp_path / "none.json"))
    src = book(tmp_path, [dict(steps=100)])
    for argv in (("price", src), ("chain", str(DATA / "aapl_chain_2026-02-13.csv"))):
        rc, err, _ = run_cli(capsys, *argv, "--daemon-only")
        assert_one_line(rc, err, EXIT_DAEMON, "no daemon", "optiond serve", "drop --daemon-only")


def test_refused_request_is_one_line(tmp_path, capsys, daemon):
    # every row within the limits, the whole over max_tree_nodes (1000 x 2e8 nodes x 5 > 6e11)
    src = book(tmp_path, [dict(strike=80.0 + i * 0.04) for i in range(1000)])
    rc, err, _ = run_cli(capsys, "price", src, "--daemon-only", "--steps", "20000", "--method", "binomial")
    assert_one_line(rc, err, EXIT_DAEMON, "refused", "tree nodes")


def test_debug_shows_the_traceback(tmp_path):
    empty = write(tmp_path / "empty.csv", "")
    plain = subprocess.run([sys.executable, "-m", "optiond.cli", "price", empty, "--no-daemon"], capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode == EXIT_INPUT and plain.stderr.strip().count("\n") == 0
    debug = subprocess.run([sys.executable, "-m", "optiond.cli", "--debug", "price", empty, "--no-daemon"],
                           capture_output=True, text=True, timeout=120)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "TableFileError" in debug.stderr


@pytest.mark.parametrize("argv, words", [
    (["chain", "{chain}", "--no-daemon", "--rate", "nan"], ["--rate", "'nan'", "finite"]),
    (["chain", "{chain}", "--no-daemon", "--rate", "inf"], ["--rate", "'inf'", "finite"]),
    (["chain", "{chain}", "--no-daemon", "--dividend-yield", "nan"], ["--dividend-yield", "finite"]),
    (["chain", "{chain}", "--no-daemon", "--rate", "4.3"], ["--rate", "annual decimal"]),
    (["heston-fit", "{european}", "--rate", "nan"], ["--rate", "finite"]),
    (["heston-fit", "{european}", "--k-sd", "-1"], ["--k-sd", "above 0"]),
    (["price", "{book}", "--no-daemon", "--eps", "nan"], ["--eps", "finite"]),
    (["price", "{book}", "--no-daemon", "--grid", "0", "80"], ["--grid", "at least 1"]),
    (["mlmc-test", "--vol", "-0.2"], ["--vol", "above 0"]),
    (["mlmc-test", "-N", "x"], ["--samples", "whole number"]),
    (["objects", "publish", "{latin1}", "--name", "S"], ["cannot read", "not UTF-8"]),
    (["objects", "publish", "{missing}", "--name", "S"], ["cannot read", "No such file"]),
    (["status", "--timeout", "inf"], ["--timeout", "finite"]),
    (["chain", "{chain}", "--no-daemon", "-o", "{nodir}/out.csv"], ["--output", "no directory"]),
    (["chain", "{chain}", "--no-daemon", "--forwards", "{dir}"], ["--forwards", "a directory, not a file"]),
    (["price", "{book}", "--no-daemon", "-o", "{nodir}/out.csv"], ["--output", "no directory"]),
    (["heston-fit", "{european}", "--json", "{dir}"], ["--json", "a directory, not a file"]),
])
def test_bad_options_and_files_are_one_line_before_any_work(tmp_path, capsys, monkeypatch, argv, words):
    """A non-finite or out-of-range number (checked where argparse reads it), an input file
    that cannot be read, or an output path that cannot be written (checked before pricing):
    one line, exit 2, no traceback (no daemon runs: none is needed)."""
    monkeypatch.setenv("OPTIOND_CONNECTION_FILE", str(tmp_path / "none.json"))
    chain_src = tmp_path / "chain.csv"
    pd.read_csv(DATA / "aapl_chain_2026-02-13.csv").head(5).to_csv(chain_src, index=False)
    pd.read_csv(DATA / "spx_chain_2025-10-01.csv").head(8).to_csv(tmp_path / "spx.csv", index=False)
    (tmp_path / "latin1.json").write_bytes('{"underlying": "DAX ÄÖÜ"}'.encode("latin-1"))
    names = dict(chain=str(chain_src), european=str(tmp_path / "spx.csv"), book=book(tmp_path, [{}]), latin1=str(tmp_path / "latin1.json"),
                 missing=str(tmp_path / "missing.json"), nodir=str(tmp_path / "nodir"), dir=str(tmp_path))
    rc, err, _ = run_cli(capsys, *[a.format(**names) for a in argv])
    assert_one_line(rc, err, EXIT_INPUT, *words)


def test_non_finite_market_arguments_are_refused_in_the_library():
    from optiond import chain

    df = chain.read_chain(str(DATA / "aapl_chain_2026-02-13.csv")).head(4)
    for kw in (dict(rate=float("nan")), dict(dividend_yield=float("inf"))):
        with pytest.raises(ValueError, match=f"{next(iter(kw))} .*not a finite number"):
            chain.solve_market(df, **kw)


@pytest.mark.parametrize("argv, words", [
    (["serve", "--max-request-s", "nan"], ["--max-request-s", "finite"]),
    (["serve", "--max-options", "-5"], ["--max-options", "at least 1"]),
    (["serve", "--workers", "-2"], ["--workers", "negative"]),
    (["serve", "--metrics-port", "99999999"], ["--metrics-port", "not a port"]),
    (["service", "unit", "--metrics-port", "70000"], ["--metrics-port", "not a port"]),
])
def test_daemon_options_are_checked_before_it_starts(capsys, argv, words):
    """The daemon's numeric options are refused where argparse reads them (parsed only here:
    nothing is started), one line and exit 2."""
    from optiond.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert_one_line(e.value.code, err, EXIT_INPUT, *words)
