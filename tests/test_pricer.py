"""The one pricer adapter (:mod:`optiond.pricer`): in-process and daemon pricers answer implied
vols as :class:`~optiond.models.ImpliedVol`, the daemon pricer sends the client only the options
it was given, the panel's cancel flag, and the portfolio merge that ``optiond price`` and the
panel share (the Greek theta beside a Heston ``theta`` column is ``model_theta`` in both)."""

from __future__ import annotations

import dataclasses

import threading

import numpy as np
import pandas as pd
import pytest

from optiond import engine, pricer
from optiond.cli import main as cli_main
from optiond.daemon.client import DaemonError
from optiond.gui import backend
from optiond.models import ImpliedVol, Method

CELLS = dict(kind=["put", "call", "put", "put"], style="american", spot=100.0, strike=[100.0, 95.0, -1.0, 200.0],
             expiry=1.0, rate=0.05, dividend_yield=0.0)
#: a put's price, a call's, an invalid row (strike), a put under its exercise value
PRICES = np.array([8.0, 12.0, 5.0, 50.0])


class EngineClient:
    """The daemon client's calls on this process's engine (answers marked ``via="daemon"``, as
    the client marks a daemon's reply), recording each call's options."""

    def __init__(self):
        self.options: list[dict] = []

    def price_table(self, columns, method=None, *, fallback=True, timeout=None, job_id=None):
        self.options.append(dict(fallback=fallback, timeout=timeout, job_id=job_id))
        return dataclasses.replace(engine.price_table(columns, method), via="daemon")

    def implied_vol(self, prices, columns, method=None, *, fallback=True, timeout=None, job_id=None):
        self.options.append(dict(fallback=fallback, timeout=timeout, job_id=job_id))
        return dataclasses.replace(engine.implied_vol_table(prices, columns, method), via="daemon")


def test_implied_vol_result_splits_the_earlier_pair_and_keeps_its_text():
    vol = np.array([0.2, np.nan, np.nan, np.nan])
    text = np.array(["ok", "invalid: strike=-1.0: must be > 0", "no-solution", "invalid: spot='x': not a number"],
                    dtype=object)
    iv = pricer.implied_vol_result((vol, text), via="daemon")
    assert iv.status.tolist() == ["ok", "invalid", "no-solution", "invalid"]
    assert iv.error.tolist() == ["", "strike=-1.0: must be > 0", "", "spot='x': not a number"]
    assert (iv.device, iv.via) == (pricer.UNKNOWN_DEVICE, "daemon")
    got_vol, got_text = iv
    np.testing.assert_array_equal(got_vol, vol)
    assert got_text.tolist() == text.tolist()
    assert pricer.implied_vol_result(iv, via="in-process") is iv  # an ImpliedVol passes as it is


def test_local_pricer_answers_as_the_engine():
    m = Method(steps=60)
    iv = pricer.LocalPricer().implied_vol(PRICES, CELLS, m)
    assert isinstance(iv, ImpliedVol) and iv.via == "in-process"
    vol, status = engine.implied_vol_table(PRICES, CELLS, m)
    np.testing.assert_array_equal(iv.vol, vol)
    assert iv.status_text().tolist() == list(status)
    assert iv.status[2] == "invalid" and "strike" in iv.error[2] and iv.status[3] == "below-intrinsic"
    res = pricer.LocalPricer().price_table(dict(CELLS, volatility=0.2), m)
    np.testing.assert_array_equal(res.price, engine.price_table(dict(CELLS, volatility=0.2), m).price)


def test_daemon_pricer_sends_only_the_options_it_has():
    client = EngineClient()
    p = pricer.DaemonPricer(client, False)
    iv = p.implied_vol(PRICES, CELLS, Method(steps=60))
    assert isinstance(iv, ImpliedVol) and iv.via == "daemon" and iv.status[2] == "invalid"
    p.price_table(dict(CELLS, volatility=0.2), Method(steps=60))
    assert client.options == [dict(fallback=False, timeout=None, job_id=None)] * 2
    assert not p.can_cancel_remote  # no job id given

    client = EngineClient()
    p = pricer.DaemonPricer(client, timeout=7.0, job_id="batch-1")
    p.price_table(dict(CELLS, volatility=0.2), Method(steps=60))
    assert client.options == [dict(fallback=True, timeout=7.0, job_id="batch-1")]
    assert not p.can_cancel_remote  # the client has no cancel

    class Chains(EngineClient):
        def price_chain(self, df, **kw):
            return kw

    kw = pricer.DaemonPricer(Chains(), True, True, job_id="x").price_chain(pd.DataFrame(), steps=5)
    assert kw == dict(fallback=True, force=True, steps=5)  # a job id is not a chain request's


def test_cancel_flag_stops_before_the_request_and_names_a_dropped_one():
    cancel = threading.Event()

    class Dropping(EngineClient):
        def price_table(self, columns, method=None, **kw):
            cancel.set()  # the user cancels while the request is in flight; the daemon drops it
            raise DaemonError("cancelled", "JobCancelled")

    p = pricer.DaemonPricer(Dropping(), False, cancel=cancel, dropped=(DaemonError,))
    with pytest.raises(pricer.Cancelled):
        p.price_table(dict(CELLS, volatility=0.2))
    with pytest.raises(pricer.Cancelled):  # set: nothing is sent
        p.implied_vol(PRICES, CELLS)
    assert backend.Cancelled is pricer.Cancelled

    class Failing(EngineClient):
        def price_table(self, columns, method=None, **kw):
            raise DaemonError("boom")

    with pytest.raises(DaemonError, match="boom"):  # not cancelled: the daemon's error as it is
        pricer.DaemonPricer(Failing(), False, cancel=threading.Event(), dropped=(DaemonError,)).price_table(dict(CELLS, volatility=0.2))


def _heston_book(tmp_path) -> tuple[pd.DataFrame, str]:
    """A portfolio of binomial rows that also carries the Heston columns (``long_run_variance``
    and ``correlation`` beside the Greeks theta and rho)."""
    rng = np.random.default_rng(5)
    n = 12
    book = pd.DataFrame({"kind": rng.choice(["put", "call"], n), "style": "american", "spot": 100.0,
                         "strike": rng.uniform(80, 120, n).round(2), "expiry": rng.uniform(0.1, 2, n).round(3),
                         "rate": 0.04, "dividend_yield": 0.01, "volatility": rng.uniform(0.1, 0.5, n).round(3),
                         "v0": 0.04, "kappa": 1.5, "long_run_variance": 0.04, "xi": 0.3,
                         "correlation": -0.7})
    path = tmp_path / "book.csv"
    book.to_csv(path, index=False)
    return book, str(path)


def test_panel_portfolio_joins_results_as_the_cli_does(tmp_path):
    """The panel's portfolio output has the columns and numbers of ``optiond price``'s for the
    same file: the Heston inputs kept, the Greeks beside them under their own names."""
    book, path = _heston_book(tmp_path)
    dst = tmp_path / "out.csv"
    # the panel's portfolio prices on the tree by default: the CLI's --method binomial
    assert cli_main(["price", path, "-o", str(dst), "--no-daemon", "--steps", "80", "--method", "binomial"]) == 0
    cli = pd.read_csv(dst)
    out = backend.run_batch(pd.read_csv(path), "portfolio", EngineClient(), backend.BatchSettings(steps=80),
                            cancel=threading.Event())
    assert out.finished and out.done == len(book)
    panel = out.df.reset_index(drop=True)
    assert list(panel.columns) == list(cli.columns)
    assert {"theta", "rho"} <= set(panel.columns) and (panel["long_run_variance"] == 0.04).all()
    assert (panel["correlation"] == -0.7).all() and not any(c.startswith("model_") for c in panel.columns)
    for c in ("price", "delta", "gamma", "theta", "vega", "rho"):
        np.testing.assert_allclose(panel[c].to_numpy(dtype=float), cli[c].to_numpy(dtype=float), rtol=1e-12,
                                   err_msg=c)
    assert panel.status.tolist() == cli.status.tolist() == ["ok"] * len(book)
    assert panel.device.tolist() == cli.device.tolist()

    # cancelled before the first chunk: no rows, the same columns
    stop = threading.Event()
    stop.set()
    empty = backend.run_batch(pd.read_csv(path), "portfolio", EngineClient(), backend.BatchSettings(steps=80),
                              cancel=stop)
    assert empty.cancelled and list(empty.df.columns) == list(cli.columns)


def test_merge_portfolio_keeps_every_input_column():
    df = pd.DataFrame({"kind": ["put"], "spot": [100.0], "strike": [100.0], "expiry": [1.0], "rate": [0.05],
                       "volatility": [0.2], "theta": [0.04], "price": [1.0], "note": ["x"]})
    res = pricer.LocalPricer().price_table(pricer.portfolio_request(df, pricer.PORTFOLIO_COLUMNS), Method(steps=40))
    out = pricer.merge_portfolio(df, res)
    assert list(out.columns) == list(df.columns) + ["model_price", "delta", "gamma", "model_theta", "vega", "rho",
                                                    "dividend_rho", "status", "error", "device"]
    assert out.loc[0, "price"] == 1.0 and out.loc[0, "model_price"] == res.price[0]
    # "theta" is no request column (it names the Greek; the Heston input is long_run_variance)
    assert set(pricer.portfolio_request(df)) == {"kind", "spot", "strike", "expiry", "rate", "volatility"}
    assert "long_run_variance" in pricer.portfolio_request(df.rename(columns={"theta": "long_run_variance"}))
