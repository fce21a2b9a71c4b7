"""The main job on the real SPY chain, and the portfolio CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optiond import chain, pricer
from optiond.cli import main as cli_main

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
SPY = DATA / "spy_chain_2026-02-13.csv"


@pytest.fixture(scope="module")
def spy_result(bundled_chains):
    return bundled_chains(SPY.name)


def test_every_row_present_with_a_status(spy_result):
    df, out, summary = spy_result
    assert len(out) == len(df) == summary.contracts
    pd.testing.assert_frame_equal(out[df.columns], df)  # input kept as is, in order
    assert list(out.columns) == list(df.columns) + list(chain.OUTPUT_COLUMNS)  # the listed columns, in order
    assert set(out["status"]).issubset(set(chain.STATUSES))
    assert sum(summary.by_status.values()) == len(df)
    # the statuses mean what they say
    assert (out.loc[out.status == "no-bid", "bid"].fillna(0) <= 0).all()
    assert (out.loc[out.status == "crossed", "bid"] > out.loc[out.status == "crossed", "ask"]).all()
    below = out[out.status == "below-intrinsic"]
    intrinsic = np.where(below.type == "call", below.spot - below.strike, below.strike - below.spot)
    assert (below.mid < intrinsic + 1e-9).all()


def test_implied_vols_for_two_sided_quotes(spy_result):
    _, out, _ = spy_result
    two_sided = out[(out.bid > 0) & (out.ask > 0) & (out.bid <= out.ask)]
    assert (two_sided.status == "ok").mean() > 0.80
    ok = out[out.status == "ok"]
    assert ok.iv.between(1e-4, 10).all() and ok[["model_price", "delta", "gamma", "vega"]].notna().all().all()
    # the model price at the implied vol reproduces the mid: to 1e-6 on the tree and the closed
    # form; the spectral engine's "fast" price (the chain's default) moves in steps of a few 1e-6
    # in the volatility (3.4e-6 at sigma 0.21 for a 5-day put), inside its 9e-5 error, so 1e-5 there
    spectral = (ok.method == "spectral").to_numpy()
    np.testing.assert_allclose(ok.model_price[~spectral], ok.mid[~spectral], atol=1e-6)
    np.testing.assert_allclose(ok.model_price[spectral], ok.mid[spectral], atol=1e-5)


def test_liquid_near_the_money_ivs_agree_with_the_file(spy_result):
    _, out, _ = spy_result
    days = out.expiry_years * 365
    liquid = out[(np.abs(out.strike / out.underlying_price - 1) < 0.05) & (days >= 14) & (days <= 120)
                 & (out.status == "ok") & out.implied_vol.notna()]
    assert len(liquid) > 200
    assert float(np.median(np.abs(liquid.iv - liquid.implied_vol))) < 0.03


def test_european_chain_uses_closed_form():
    df = chain.read_chain(str(DATA / "spx_chain_2025-10-01.csv")).head(200)
    out, _ = chain.price_chain(df, rate=0.04, dividend_yield=0.013)
    ok = out[out.status == "ok"]
    assert len(ok) > 100
    np.testing.assert_allclose(ok.model_price, ok.mid, atol=1e-6)


def test_price_cli_marks_bad_rows(tmp_path, capsys):
    src = tmp_path / "book.csv"
    pd.DataFrame(dict(kind=["put", "call", "put", "put"], style=["american", "european", "american", "american"],
                      spot=[100, 100, -3, 100], strike=[100, 105, 100, 100], expiry=[1, 0.5, 1, 1],
                      rate=[0.05] * 4, dividend_yield=[0.0] * 4, volatility=[0.2, 0.3, 0.2, 0.2],
                      method=["binomial", "black-scholes", "binomial", "finite-volume"], steps=[500, "", 500, 500])
                 ).to_csv(src, index=False)
    dst = tmp_path / "out.csv"
    rc = cli_main(["price", str(src), "-o", str(dst), "--no-daemon"])
    assert rc == 1  # some rows failed
    out = pd.read_csv(dst, keep_default_na=False)
    assert out.status.tolist() == ["ok", "ok", "error", "error"]
    assert "spot" in out.error[2] and "method" in out.error[3]
    from optiond.kernels.binomial.cpu import crr_price
    from optiond.kernels.black_scholes import bs_price_greeks
    assert float(out.price[0]) == pytest.approx(crr_price("put", "american", 100, 100, 1, 0.05, 0.0, 0.2, 500), rel=1e-12)
    assert float(out.price[1]) == pytest.approx(bs_price_greeks(1, 100, 105, 0.5, 0.05, 0.0, 0.3)["price"][0], rel=1e-12)


def test_chain_cli_writes_output(tmp_path):
    src = tmp_path / "aapl_small.csv"
    chain.read_chain(str(DATA / "aapl_chain_2026-02-13.csv")).head(60).to_csv(src, index=False)
    dst = tmp_path / "priced.csv"
    proc = subprocess.run([sys.executable, "-m", "optiond.cli", "chain", str(src), "-o", str(dst), "--no-daemon",
                           "--rate", "0.04", "--steps", "200"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "contracts: 60" in proc.stdout and "contracts/s" in proc.stdout
    out = pd.read_csv(dst)
    assert len(out) == 60 and out.status.notna().all()


# ----------------------------------------------------------------------------- the chain request


@pytest.fixture(scope="module")
def small_chain():
    """Three expiries of the AAPL chain (a few hundred contracts; American: the carry search runs)."""
    df = chain.read_chain(str(DATA / "aapl_chain_2026-02-13.csv"))
    keep = sorted(df.expiry.unique())[2:5]
    return df[df.expiry.isin(keep)].reset_index(drop=True)


def test_chain_request_on_the_daemon_equals_in_process(daemon, small_chain):
    """One ``chain`` request: the daemon solves the market and prices every contract; the
    result is the in-process job's, column for column, and the forward table too."""
    market = dict(steps=200, quote_time="10:50")
    with daemon.client() as client:
        got, s_got = client.price_chain(small_chain, fallback=False, **market)
    want, s_want = chain.price_chain(small_chain, pricer.LocalPricer(), **market)
    assert s_got.via == "daemon" and s_got.extra["server_s"] > 0
    assert list(got.columns) == list(want.columns)
    assert got.status.tolist() == want.status.tolist() and got.error.tolist() == want.error.tolist()
    for c in ("iv", "iv_bid", "iv_ask", "iv_otm", "forward", "dividend_yield", "spot", "model_price", "delta", "vega"):
        np.testing.assert_allclose(got[c], want[c], rtol=1e-12, atol=1e-14, err_msg=c)
    pd.testing.assert_frame_equal(s_got.forwards, s_want.forwards, check_exact=False, rtol=1e-12)
    assert s_got.by_status == s_want.by_status
    assert (got.status == "ok").sum() > 0.5 * len(got)


def test_chain_request_refuses_bad_input(daemon, small_chain):
    with daemon.client() as client:
        _refused(client, small_chain)


def _refused(client, small_chain):
    from optiond.daemon import chain_op
    from optiond.models import InvalidInputError

    with pytest.raises(InvalidInputError) as e:
        client.price_chain(small_chain.drop(columns=["strike"]), fallback=False)
    assert e.value.field == "strike"
    with pytest.raises(InvalidInputError) as e:
        client.price_chain(small_chain, fallback=False, carry="guess")
    assert e.value.field == "carry"
    buffers: list = []
    content = chain_op.encode_request(small_chain, {}, buffers)
    content["market"]["curve"] = [[30, 0.04], [-5, 0.04]]
    with pytest.raises(InvalidInputError) as e:
        client._request("chain", content, buffers)
    assert e.value.field == "curve" and "negative" in str(e.value)
    with pytest.raises(ValueError, match="unknown chain market field"):
        client.price_chain(small_chain, fallback=False, volatility=0.2)
    assert client.ping()["status"] == "ok"  # and the daemon goes on


def test_chain_cli_through_the_daemon(daemon, small_chain, tmp_path):
    src, dst = tmp_path / "small.csv", tmp_path / "priced.csv"
    small_chain.to_csv(src, index=False)
    proc = subprocess.run([sys.executable, "-m", "optiond.cli", "chain", str(src), "-o", str(dst), "--daemon-only",
                           "--steps", "200", "--quote-time", "10:50"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "(daemon)" in proc.stdout and "forwards and carry per expiry" in proc.stdout
    want, _ = chain.price_chain(small_chain, steps=200, quote_time="10:50")
    got = pd.read_csv(dst)
    np.testing.assert_allclose(got.iv, want.iv, rtol=1e-12)


def test_chain_request_names_the_bad_market_field():
    """Each market field of a chain request is checked on its own, so the error names it."""
    from optiond.daemon import chain_op
    from optiond.models import InvalidInputError

    for field, value in (("spot_mode", "carry"), ("settlement", "quote"), ("quote_time", "carry on"),
                         ("carry", "guess"), ("steps", 0), ("rate", float("nan"))):
        with pytest.raises(InvalidInputError) as e:
            chain_op.decode_request({"chain": {c: [] for c in chain.CHAIN_COLUMNS}, "market": {field: value}}, [],
                                    max_rows=10)
        assert e.value.field == field


def test_blank_text_cells_through_the_daemon(daemon, small_chain, tmp_path, capsys):
    """Blank ``quote_time`` and ``style`` cells (the README allows a blank quote time): the
    request encoding copies the text columns (never writes into the caller's frame, whose
    pandas 3 string columns it would otherwise see through), and the CLI through the daemon
    prices and writes every row as in-process."""
    from optiond.cli import main as cli_main
    from optiond.daemon import chain_op

    df = small_chain.copy()
    df.insert(len(df.columns), "quote_time", "10:50")
    df.loc[df.index % 7 == 0, "quote_time"] = np.nan  # these rows take the 16:00 close
    df.loc[df.index % 11 == 0, "style"] = np.nan       # no style: priced as American
    src, dst = tmp_path / "blanks.csv", tmp_path / "priced.csv"
    df.to_csv(src, index=False)
    read = chain.read_chain(str(src))
    before = read.copy()
    chain_op.encode_request(read, {}, [])
    pd.testing.assert_frame_equal(read, before)  # the caller's frame as it was
    rc = cli_main(["chain", str(src), "-o", str(dst), "--daemon-only", "--steps", "200"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "(daemon)" in captured.out and "Traceback" not in captured.err
    got = pd.read_csv(dst)
    want, _ = chain.price_chain(before, steps=200)
    assert len(got) == len(df) and got.status.tolist() == want.status.tolist()
    np.testing.assert_allclose(got.iv, want.iv, rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(got.expiry_years, want.expiry_years, rtol=1e-15)
    # the blank quote times took the 16:00 close, the others 10:50: 310 minutes less to expiry
    blank, first = (df.index % 7 == 0), (df.expiry == df.expiry.iat[0])
    close, morning = got.expiry_years[blank & first].iat[0], got.expiry_years[~blank & first].iat[0]
    assert close == pytest.approx(morning - 310 / 525_600, abs=1e-12)
