"""The desktop panel (:mod:`optiond.gui`) driven with pytest-qt, offscreen, against real daemons.

The Status, Batch, Timings and Surface tabs are exercised through their widgets (clicks, combo
choices, pointer moves) on the session's daemon; the daemon-down test starts a daemon of its
own so the shared one stays up. QSettings are pointed at a temporary folder. The whole module
is skipped when PySide6, pytest-qt or pyqtgraph cannot be imported. (The README's screenshots come from
``python -m optiond.gui.screenshots docs/``.)
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt is imported

import math  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("PySide6.QtWidgets", reason="PySide6 (the gui extra) is not installed or cannot load")
pytest.importorskip("pytestqt", reason="pytest-qt is not installed")
pg = pytest.importorskip("pyqtgraph", reason="pyqtgraph (the gui extra) is not installed")

from PySide6.QtCore import QPoint, QPointF, QSettings, Qt  # noqa: E402

from optiond import chain, engine, models  # noqa: E402
from optiond.kernels.binomial import cpu as bc  # noqa: E402
from optiond.daemon.client import Client, DaemonUnavailable  # noqa: E402
from optiond.gui import backend, devices  # noqa: E402
from optiond.gui.status_tab import StatusTab  # noqa: E402
from optiond.gui.surface_tab import SurfaceTab  # noqa: E402
from optiond.gui.timings_tab import HEARTBEAT_SERIES  # noqa: E402
from optiond.gui.window import MainWindow  # noqa: E402
from optiond.pricer import LocalPricer  # noqa: E402
from optiond.surface.model import Slice, Surface  # noqa: E402
from optiond.surface.svi import SVI  # noqa: E402

from conftest import start_daemon, stop_daemon  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
AAPL = DATA / "aapl_chain_2026-02-13.csv"
SPY = DATA / "spy_chain_2026-02-13.csv"
STEPS = 200  # enough for a real tree, quick on two cores
SURFACE_STEPS = 100  # the SPY chain's 6,800 rows for its surface


@pytest.fixture
def settings(tmp_path):
    """A QSettings file in a temporary folder; QSettings' default locations point there too."""
    folder = tmp_path / "qsettings"
    for fmt in (QSettings.Format.IniFormat, QSettings.Format.NativeFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(folder))
    return QSettings(str(tmp_path / "panel.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def panel(qtbot, daemon, settings):
    """The panel on the session's daemon, shown offscreen at a fixed size."""
    win = MainWindow(daemon.connection_file, settings)
    qtbot.addWidget(win)
    win.resize(1280, 820)
    win.show()
    yield win
    win.shutdown()


def _status(handle) -> dict:
    c = handle.client(timeout=5.0, retries=0)
    try:
        return c.status()
    finally:
        c.close()


def _wait_ready(qtbot, win) -> None:
    """Until the panel has seen the daemon up (Run is enabled then)."""
    qtbot.waitUntil(lambda: win.status_tab.state is not None and win.status_tab.state.up, timeout=15000)
    qtbot.waitUntil(win.batch_tab.run_button.isEnabled, timeout=5000)


def _run(qtbot, tab, path: Path, steps: int = STEPS, timeout_ms: int = 60000) -> backend.BatchOutcome:
    """Choose ``path``, click Run, wait for the job to finish; return its outcome."""
    assert tab.set_file(path), tab.file_info.text()
    tab.steps.setValue(steps)
    with qtbot.waitSignal(tab.job_finished, timeout=timeout_ms) as blocker:
        qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    return blocker.args[0]


# ---------------------------------------------------------------------------- status


def test_status_fields_fill_in(qtbot, panel, daemon):
    """Every field of the Status tab is filled in from the live daemon and NVML."""
    tab = panel.status_tab
    qtbot.waitUntil(lambda: tab.state is not None and tab.state.up, timeout=15000)
    qtbot.waitUntil(lambda: panel.timings_tab.point_count(HEARTBEAT_SERIES) >= 2, timeout=10000)  # it keeps polling
    st = _status(daemon)
    v = {k: w.text() for k, w in tab.values.items()}
    assert v["state"] == "Daemon up"
    assert v["version"] == st["version"]
    assert v["pid"] == str(daemon.pid)
    assert re.fullmatch(r"(\d+ d )?\d\d:\d\d:\d\d", v["uptime"]), v["uptime"]
    assert v["engine_devices"] == ", ".join(st["devices"])
    assert v["connection_file"] == str(daemon.connection_file)
    assert re.fullmatch(r"\d+\.\d\d ms", v["heartbeat"]), v["heartbeat"]
    assert int(v["requests"]) >= 1
    # fields the daemon may not report yet: its value when it does, else n/a
    expect = backend.DaemonState(True, status=st).fields()
    for key in ("queue_depth", "cache_hit_ratio", "mpi_ranks", "cpu_threads", "gpu_memory"):
        assert v[key] == expect[key], key
        if backend.lookup(st, key) is None:
            assert v[key] == "n/a", key
    assert not tab.start_button.isVisible()
    assert panel.daemon_label.text().startswith("Daemon up")
    gpus = devices.read_gpus()
    if gpus.gpus:
        assert tab.gpu_table.rowCount() == len(gpus.gpus)
        assert tab.gpu_table.item(0, 1).text() == gpus.gpus[0].name
    else:
        assert v["gpu_summary"].startswith("No GPU")
        assert not tab.gpu_table.isVisible()


def test_status_shows_richer_daemon_fields(qtbot, tmp_path):
    """Status keys a newer daemon reports (queue, cache, MPI, threads, GPU memory, versions)
    are shown; missing ones read n/a."""
    tab = StatusTab(tmp_path / "daemon.json")
    qtbot.addWidget(tab)
    rich = {"version": "9.9", "pid": 42, "uptime_s": 93784.0, "devices": ["cpu", "gpu:0 Test GPU"],
            "queue_depth": 3, "cache": {"hits": 3, "misses": 1}, "mpi_workers_alive": {"alive": 2, "total": 3},
            "cpu_threads": 16, "gpu_memory": [{"device": "gpu:0", "used": 2 * 2**30, "total": 80 * 2**30}],
            "cuda_version": "12.4", "cupy_version": "13.3.0"}
    gpu = devices.GpuSnapshot([devices.GpuReading(0, "Test GPU", 2**30, 4 * 2**30, 57, 61)], "12.4", "550.1")
    tab.show_state(backend.DaemonState(True, status=rich, round_trip_s=0.00123, gpus=gpu))
    v = {k: w.text() for k, w in tab.values.items()}
    assert v["uptime"] == "1 d 02:03:04"
    assert v["queue_depth"] == "3"
    assert v["cache_hit_ratio"] == "75.0 % (3 of 4)"
    assert v["mpi_ranks"] == "2 of 3"
    assert v["cpu_threads"] == "16"
    assert v["gpu_memory"] == "gpu:0: 2.0 GiB / 80.0 GiB"
    assert (v["cuda_version"], v["cupy_version"]) == ("12.4", "13.3.0")
    assert v["heartbeat"] == "1.23 ms"
    assert [tab.gpu_table.item(0, c).text() for c in range(5)] == ["0", "Test GPU", "1.0 GiB / 4.0 GiB (25 %)", "57 %",
                                                                   "61 °C"]
    nested = {"version": "9.9", "jobs": {"queue_depth": 5}, "mpi": {"ranks": 3, "workers_alive": 1},
              "cache": {"hits": 0, "misses": 0, "hit_ratio": float("nan")}}
    tab.show_state(backend.DaemonState(True, status=nested))
    v = {k: w.text() for k, w in tab.values.items()}
    assert (v["queue_depth"], v["mpi_ranks"], v["cache_hit_ratio"]) == ("5", "2 of 3", "no lookups yet")
    tab.show_state(backend.DaemonState(True, status={"version": "9.9", "cache_hit_ratio": 0.5}))
    v = {k: w.text() for k, w in tab.values.items()}
    assert v["cache_hit_ratio"] == "50.0 %"
    assert v["queue_depth"] == v["mpi_ranks"] == v["cpu_threads"] == v["gpu_memory"] == "n/a"
    assert v["gpu_summary"] == "No GPU"


def test_daemon_down_within_2s_and_start_button(qtbot, tmp_path, settings):
    """Stopping the daemon shows "Daemon down" within 2 s with a Start button, which starts
    a new daemon on the same connection file."""
    handle = start_daemon(tmp_path, "--no-warmup")
    win = MainWindow(handle.connection_file, settings)
    qtbot.addWidget(win)
    win.show()
    tab = win.status_tab
    new_pid = None
    try:
        qtbot.waitUntil(lambda: tab.state is not None and tab.state.up and tab.values["pid"].text() == str(handle.pid),
                        timeout=15000)
        stop_daemon(handle)
        qtbot.waitUntil(lambda: not tab.state.up, timeout=2000)
        assert tab.values["state"].text() == "Daemon down"
        assert tab.values["version"].text() == "n/a"
        assert tab.start_button.isVisible() and tab.start_button.isEnabled()
        assert win.daemon_label.text() == "Daemon down"
        assert not win.batch_tab.run_button.isEnabled()
        assert str(handle.connection_file) in tab.start_command()

        with qtbot.waitSignal(tab.start_finished, timeout=60000) as blocker:
            qtbot.mouseClick(tab.start_button, Qt.MouseButton.LeftButton)
        assert blocker.args[0] == 0, blocker.args[1]
        qtbot.waitUntil(lambda: tab.state.up, timeout=15000)
        new_pid = int(tab.values["pid"].text())
        assert new_pid != handle.pid
        assert not tab.start_button.isVisible()
    finally:
        win.shutdown()
        stop_daemon(handle)
        _stop_detached(handle.connection_file, new_pid)


def _stop_detached(conn: Path, pid: int | None) -> None:
    """Stop the daemon the Start button launched (shutdown request, else SIGKILL)."""
    c = Client(conn, timeout=2.0, retries=0)
    try:
        c.shutdown()
    except DaemonUnavailable:
        pass
    finally:
        c.close()
    if pid is None:
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, 9)


# ---------------------------------------------------------------------------- batch


def test_batch_aapl_chain_every_row(qtbot, panel, daemon, tmp_path):
    """The real AAPL chain runs on the daemon through the panel: every row comes back, ok rows
    have an IV and a model price, and the numbers are the chain job's."""
    _wait_ready(qtbot, panel)
    tab = panel.batch_tab
    tab.fit_surface.setChecked(False)  # the surface fit has a test of its own (SPY); AAPL's 23 expiries are slow
    before = _status(daemon)["by_op"]
    out = _run(qtbot, tab, AAPL)
    df = chain.read_chain(str(AAPL))

    assert out.finished, out.summary()
    assert out.done == out.total == len(df)
    assert tab.table_model.rowCount() == len(df)
    assert tab.progress.value() == tab.progress.maximum() == len(df)
    assert not tab.is_running() and tab.run_button.isEnabled() and not tab.cancel_button.isEnabled()
    res = tab.table_model.frame()
    ok = res[res["status"] == "ok"]
    assert len(ok) > 0.8 * len(df)
    assert np.isfinite(ok["iv"]).all() and np.isfinite(ok["model_price"]).all() and np.isfinite(ok["delta"]).all()
    assert (res.loc[res["status"] != "ok", "model_price"].isna()).all()

    ref, _ = chain.price_chain(df, rate=chain.DEFAULT_RATE, steps=STEPS)  # the same job in this process
    key = ["expiry", "type", "strike"]
    both = res.merge(ref, on=key, suffixes=("", "_ref"))
    assert len(both) == len(df)
    assert (both["status"] == both["status_ref"]).all()
    np.testing.assert_allclose(both["iv"], both["iv_ref"], rtol=0, atol=1e-7, equal_nan=True)
    np.testing.assert_allclose(both["model_price"], both["model_price_ref"], rtol=1e-9, atol=1e-9, equal_nan=True)

    after = _status(daemon)["by_op"]  # it went through the daemon
    assert after.get("implied_vol", 0) > before.get("implied_vol", 0)
    assert after.get("price", 0) > before.get("price", 0)
    timings = panel.timings_tab
    assert timings.jobs.rowCount() >= 1 and timings.jobs.item(0, 7).text() == "done"
    assert timings.jobs.item(0, 3).text() == f"{len(df):,} / {len(df):,}"
    # the chain's American contracts (method auto: the spectral engine; the tree for cash dividends)
    assert any(name.startswith("spectral implied vol") for name in timings.series), list(timings.series)
    assert any(name.startswith("spectral price") for name in timings.series), list(timings.series)
    _screenshots(qtbot, panel, tmp_path)


def _screenshots(qtbot, win, tmp_path: Path) -> None:
    """Each tab renders to an image of the window's size that can be saved as PNG."""
    win.timings_tab.redraw(force=True)
    for i, name in enumerate(("status", "timings", "batch", "surface")):
        win.tabs.setCurrentIndex(i)
        qtbot.wait(200)
        image = win.grab()
        assert (image.width(), image.height()) == (win.width(), win.height())
        assert image.save(str(tmp_path / f"panel_{name}.png"))
        assert (tmp_path / f"panel_{name}.png").stat().st_size > 10_000


def test_results_sort_filter_smile_export(qtbot, panel, tmp_path):
    """The results table sorts on values, filters by status and text, the smile plots the
    chosen expiry's solved IVs, and Export writes the rows shown."""
    _wait_ready(qtbot, panel)
    tab = panel.batch_tab
    tab.fit_surface.setChecked(False)  # no surface fit: no theo columns, the Surface tab says so
    out = _run(qtbot, tab, AAPL)
    assert out.finished
    assert out.surface is None and not out.surface_error and "no surface" not in tab.message.text()
    assert panel.surface_tab.summary.text() == "No surface: Fit surface is off on the Batch tab."
    res = tab.table_model.frame()
    assert not {"iv_fit", "theo", "edge"} & set(res.columns)
    cols = list(res.columns)

    tab.table.sortByColumn(cols.index("strike"), Qt.SortOrder.DescendingOrder)
    shown = [float(tab.proxy.index(r, cols.index("strike")).data()) for r in range(5)]
    assert shown[0] == res["strike"].max() and shown == sorted(shown, reverse=True)
    tab.table.sortByColumn(cols.index("iv"), Qt.SortOrder.AscendingOrder)
    first = tab.proxy.index(0, cols.index("iv")).data()
    assert float(first) == pytest.approx(res["iv"].min(), rel=1e-5)  # the table shows 6 significant digits

    tab.status_filter.setCurrentIndex(tab.status_filter.findData("ok"))
    n_ok = int((res["status"] == "ok").sum())
    assert tab.proxy.rowCount() == n_ok
    tab.filter_edit.setText("2026-03-20")
    expect = res[(res["status"] == "ok") & (res["expiry"] == "2026-03-20")]
    assert 0 < tab.proxy.rowCount() == len(expect)

    path = tmp_path / "shown.csv"
    assert tab.export_csv(path) == len(expect)
    back = pd.read_csv(path)
    assert len(back) == len(expect) and set(back["expiry"]) == {"2026-03-20"} and set(back["status"]) == {"ok"}
    assert list(back["iv"]) == sorted(back["iv"])  # in the order shown
    tab.status_filter.setCurrentIndex(0)
    tab.filter_edit.clear()
    assert tab.proxy.rowCount() == len(res)

    assert tab.expiry_combo.count() == res["expiry"].nunique()
    tab.expiry_combo.setCurrentIndex(tab.expiry_combo.findData("2026-03-20"))
    items = {item.name(): item for item in tab.smile_plot.getPlotItem().listDataItems()}
    # the smile: one point per strike, from the out-of-the-money side's row (call for K >= F)
    exp = res[res["expiry"] == "2026-03-20"]
    otm = exp[(exp["type"] == np.where(exp["strike"] >= exp["forward"], "call", "put")) & np.isfinite(exp["iv_otm"])]
    otm = otm.sort_values("strike")
    assert len(otm) > 10 and otm["strike"].is_unique
    xs, ys = items["OTM IV (mid), bid–ask bars"].getData()
    np.testing.assert_allclose(xs, otm["strike"])
    np.testing.assert_allclose(ys, 100 * otm["iv"])
    assert "2026-03-20" in tab.smile_plot.getPlotItem().titleLabel.text
    tab.axis_combo.setCurrentIndex(tab.axis_combo.findData("log_moneyness"))
    items = {item.name(): item for item in tab.smile_plot.getPlotItem().listDataItems()}
    xs, _ = items["OTM IV (mid), bid–ask bars"].getData()
    np.testing.assert_allclose(xs, np.log(otm["strike"] / otm["forward"]), rtol=1e-12)


def _two_expiries(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    """Two AAPL expiries (about 3 and 5 weeks) as a chain file of their own."""
    df = chain.read_chain(str(AAPL))
    part = df[df["expiry"].isin(["2026-03-13", "2026-03-20"])].reset_index(drop=True)
    assert part["expiry"].nunique() == 2
    path = tmp_path / "aapl_two_expiries.csv"
    part.to_csv(path, index=False)
    return part, path


def test_forward_table_and_smile_follow_the_whole_chain(qtbot, panel, tmp_path):
    """A chain priced in parts on the daemon: its market is solved once on the whole chain,
    so the forward table's forwards and carries are those of chain.solve_market in this
    process, every row is priced on them, and the residuals and the smile are those of the
    chain priced in one piece; the smile points lie within their bid/ask IV bars."""
    _wait_ready(qtbot, panel)
    tab = panel.batch_tab
    part, path = _two_expiries(tmp_path)
    tab.carry.setCurrentIndex(tab.carry.findData("parity"))
    tab.quote_time.setText("10:50")
    out = _run(qtbot, tab, path)  # in parts: the first is 4 rows (backend.ChunkSizer), calls before puts
    assert out.finished, out.summary()
    assert out.done == len(part)

    market = chain.solve_market(part, quote_time="10:50", steps=STEPS)  # in process
    ref, summary = chain.price_chain(part, market=market, steps=STEPS)
    shown = tab.forward_model.frame()
    assert list(shown["expiry"]) == ["2026-03-13", "2026-03-20"] == list(out.forwards["expiry"])
    assert list(shown["method"]) == list(market.table["method"]) and shown["method"].str.startswith("carry solve").all()
    np.testing.assert_allclose(shown["forward"], market.table["forward"], rtol=1e-10)
    np.testing.assert_allclose(shown["carry"], 100 * market.table["carry"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(shown["rate"], 100 * market.table["rate"], rtol=1e-12)
    np.testing.assert_allclose(out.forwards["call_minus_put_iv_pts"], summary.forwards["call_minus_put_iv_pts"],
                               atol=1e-6)
    assert np.isfinite(shown["call_minus_put_iv_pts"]).all()
    res = tab.table_model.frame()
    np.testing.assert_allclose(res["forward"], ref["forward"], rtol=1e-10)
    np.testing.assert_allclose(res["iv_otm"], ref["iv_otm"], atol=1e-7, equal_nan=True)
    assert (res["status"] == ref["status"]).all()

    for expiry in ("2026-03-13", "2026-03-20"):
        sm = backend.smile(res, expiry)
        rows = res[res["expiry"] == expiry]
        fwd = float(market.table.set_index("expiry").loc[expiry, "forward"])
        assert sm.forward == pytest.approx(fwd, rel=1e-10)
        otm = rows[(rows["type"] == np.where(rows["strike"] >= fwd, "call", "put")) & np.isfinite(rows["iv_otm"])]
        otm = otm.sort_values("strike")
        assert len(sm.strike) == len(otm) > 5
        np.testing.assert_array_equal(sm.strike, otm["strike"])
        np.testing.assert_array_equal(sm.iv, otm["iv_otm"])
        np.testing.assert_array_equal(sm.iv, otm["iv"])  # the OTM row's own mid IV
        np.testing.assert_array_equal(sm.iv_bid, otm["iv_bid"])
        np.testing.assert_array_equal(sm.iv_ask, otm["iv_ask"])
        np.testing.assert_allclose(sm.log_moneyness, np.log(otm["strike"] / fwd), rtol=1e-12)
        b, a = np.isfinite(sm.iv_bid), np.isfinite(sm.iv_ask)
        assert b.sum() > 5 and a.all()
        assert (sm.iv_bid[b] <= sm.iv[b] + 1e-12).all() and (sm.iv[a] <= sm.iv_ask[a] + 1e-12).all()

    # clicking a row of the forward table plots that expiry's smile, with the forward marked
    tab.forward_table.clicked.emit(tab.forward_model.index(0, 0))
    assert tab.expiry_combo.currentData() == "2026-03-13"
    plot = tab.smile_plot.getPlotItem()
    lines = [i for i in plot.items if type(i).__name__ == "InfiniteLine"]
    assert len(lines) == 1 and lines[0].value() == pytest.approx(float(market.table["forward"].iloc[0]))
    bars = [i for i in plot.items if type(i).__name__ == "ErrorBarItem"]
    assert len(bars) == 1


def _refused_before_pricing(settings: backend.BatchSettings) -> backend.BatchOutcome:
    """run_batch of a bit of the AAPL chain with settings it refuses before any request: the
    outcome, whose error says why (never raising, nothing priced)."""

    class NoDaemon:
        def price_table(self, *a, **k):
            raise AssertionError("not called")

        implied_vol = price_table

    df = chain.read_chain(str(AAPL)).iloc[:20]
    out = backend.run_batch(df, "chain", NoDaemon(), settings, cancel=threading.Event())
    assert out.error and out.done == 0 and out.forwards is None
    return out


#: a made-up cash-dividend schedule for the AAPL chain: both expiries of _two_expiries have the
#: first ex-date before them, only the later one the second
AAPL_DIVS = (("2026-03-09", 0.26), ("2026-03-16", 0.31))


def test_chain_with_a_dividend_file(qtbot, panel, tmp_path):
    """A dividend file chosen on the Batch tab goes where optiond chain --dividends puts it:
    the forward table gains pv_dividends (the dividends before each expiry discounted at its
    rate, written out here), and each row's model price is the tree priced directly with its
    inputs and its own schedule. Cleared, the run is the one without dividends again."""
    from optiond import dividends
    from optiond.kernels.binomial.cpu import crr_batch
    from optiond.market import clock

    _wait_ready(qtbot, panel)
    tab = panel.batch_tab
    tab.fit_surface.setChecked(False)
    tab.carry.setCurrentIndex(tab.carry.findData("parity"))
    tab.quote_time.setText("10:50")
    part, path = _two_expiries(tmp_path)
    div_path = tmp_path / "aapl_dividends.csv"
    pd.DataFrame(AAPL_DIVS, columns=["ex_date", "amount"]).to_csv(div_path, index=False)
    assert tab.set_dividend_file(div_path)
    assert "2 dividends" in tab.dividends_label.text() and tab.dividends_clear.isEnabled()

    out = _run(qtbot, tab, path)
    assert out.finished, out.summary()
    table = out.forwards.set_index("expiry")
    start = clock.quote_instant(str(part["quote_date"].iloc[0]), "10:50")
    for expiry, row in table.iterrows():
        T = clock.years_between(start, clock.settlement_instant(expiry))
        due = [(dividends.ex_date_years(start, d), a) for d, a in AAPL_DIVS if dividends.ex_date_years(start, d) < T]
        assert len(due) == (1 if expiry == "2026-03-13" else 2)
        assert row["pv_dividends"] == pytest.approx(sum(a * math.exp(-row["rate"] * t) for t, a in due), abs=1e-12)
    shown = tab.forward_model.frame()  # the Batch tab's forward table shows them
    np.testing.assert_array_equal(shown["pv_dividends"], out.forwards["pv_dividends"])

    res = tab.table_model.frame()
    priced = res[(res["status"] == "ok") & np.isfinite(res["iv"])]
    picks = [priced[priced["expiry"] == e].iloc[len(priced[priced["expiry"] == e]) // 2] for e in table.index]
    for r in picks:
        due = [(dividends.ex_date_years(start, d), a) for d, a in AAPL_DIVS
               if dividends.ex_date_years(start, d) < r["expiry_years"]]
        want = crr_batch(np.array([models.CALL if r["type"] == "call" else models.PUT], dtype=np.int8),
                         np.array([models.AMERICAN], dtype=np.int8), r["spot"], r["strike"], r["expiry_years"],
                         r["rate"], r["dividend_yield"], r["iv"], STEPS, greeks=False,
                         dividend_times=np.array([t for t, _ in due]), dividend_amounts=np.array([a for _, a in due]))
        assert r["model_price"] == pytest.approx(float(want[0, 0]), rel=1e-10, abs=1e-10)

    # cleared: the run without dividends, as before
    tab.dividends_clear.click()
    assert tab.dividend_file == "" and tab.dividends_label.text() == "none"
    plain = _run(qtbot, tab, path)
    assert plain.finished and "pv_dividends" not in plain.forwards.columns
    assert "pv_dividends" not in tab.forward_model.frame().columns
    ref, _ = chain.price_chain(part, market=chain.solve_market(part, quote_time="10:50", steps=STEPS), steps=STEPS)
    got = tab.table_model.frame()
    np.testing.assert_allclose(got["forward"], ref["forward"], rtol=1e-10)
    np.testing.assert_allclose(got["model_price"], ref["model_price"], rtol=1e-9, equal_nan=True)


def test_a_bad_dividend_file_is_refused_with_its_reason(qtbot, tmp_path, settings):
    """A dividend file with a bad row: its one-line reason in the status line when chosen and
    at Run, which does not start (no daemon needed); the file is remembered with the settings."""
    win = MainWindow(tmp_path / "no-daemon.json", settings)
    qtbot.addWidget(win)
    bad = tmp_path / "bad_dividends.csv"
    bad.write_text("ex_date,amount\n2026-03-09,0.26\n2026-03-16,-1\n")
    try:
        tab = win.batch_tab
        assert tab.set_file(AAPL)
        assert not tab.set_dividend_file(bad)
        assert "row 2" in tab.message.text() and "amount" in tab.message.text()
        tab.run()
        assert not tab.is_running() and tab.outcome is None
        text = tab.message.text()
        assert "Not started" in text and "row 2" in text and "\n" not in text
        win.close()
    finally:
        win.shutdown()
    again = MainWindow(tmp_path / "no-daemon.json", QSettings(str(tmp_path / "panel.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(again)
    try:
        assert again.batch_tab.dividend_file == str(bad.resolve())
    finally:
        again.shutdown()

    out = _refused_before_pricing(backend.BatchSettings(dividend_file=str(bad)))
    assert "row 2" in out.error


def test_bad_quote_time_is_refused_with_a_reason(qtbot, tmp_path, settings):
    """A quote time that does not parse is not run: the tab says why (no daemon needed),
    and run_batch itself reports it as the outcome's error, never raising."""
    win = MainWindow(tmp_path / "no-daemon.json", settings)
    qtbot.addWidget(win)
    try:
        tab = win.batch_tab
        assert tab.set_file(AAPL)
        tab.quote_time.setText("25:99")
        tab.run()
        assert not tab.is_running() and tab.outcome is None
        assert "Not started" in tab.message.text() and "25:99" in tab.message.text()
    finally:
        win.shutdown()

    out = _refused_before_pricing(backend.BatchSettings(quote_time="25:99"))
    assert "25:99" in out.error


def test_cancel_during_the_market_solve(qtbot, panel):
    """The whole chain's forward and carry solve comes first (the status line says so);
    Cancel stops it: no row priced, no forward table, the tab idle again."""
    _wait_ready(qtbot, panel)
    tab = panel.batch_tab
    assert tab.set_file(SPY)
    tab.steps.setValue(5000)  # the carry solve's tree IVs alone are minutes of work on a CPU
    tab.carry.setCurrentIndex(tab.carry.findData("parity"))
    qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Solving the forward and carry" in tab.message.text(), timeout=10000)
    with qtbot.waitSignal(tab.job_finished, timeout=60000) as blocker:
        qtbot.mouseClick(tab.cancel_button, Qt.MouseButton.LeftButton)
    out = blocker.args[0]
    assert out.cancelled and not out.error and out.done == 0 and out.forwards is None
    assert tab.forward_model.rowCount() == 0
    assert not tab.is_running() and tab.run_button.isEnabled()
    assert "Cancelled" in tab.message.text()


def test_cancel_stops_a_long_run(qtbot, panel):
    """Cancel stops the SPY chain at 5,000 steps (minutes of work) early: fewer rows finished,
    the rows done are shown, and the tab returns to idle."""
    _wait_ready(qtbot, panel)
    tab = panel.batch_tab
    assert tab.set_file(SPY)
    tab.steps.setValue(5000)
    tab.carry.setCurrentIndex(tab.carry.findData("flat"))  # no market solve before the pricing
    total = len(chain.read_chain(str(SPY)))
    qtbot.mouseClick(tab.run_button, Qt.MouseButton.LeftButton)
    assert tab.is_running() and tab.cancel_button.isEnabled() and not tab.run_button.isEnabled()
    assert not tab.file_combo.isEnabled() and not tab.steps.isEnabled()
    qtbot.waitUntil(lambda: tab.progress.value() > 0, timeout=60000)
    with qtbot.waitSignal(tab.job_finished, timeout=60000) as blocker:
        qtbot.mouseClick(tab.cancel_button, Qt.MouseButton.LeftButton)
    out = blocker.args[0]
    assert out.cancelled and not out.error
    assert 0 < out.done < out.total == total
    assert tab.table_model.rowCount() == out.done
    assert not tab.is_running() and tab.run_button.isEnabled() and not tab.cancel_button.isEnabled()
    assert tab.file_combo.isEnabled() and tab.steps.isEnabled()
    assert tab.message.text().count("Cancelled") == 1
    assert panel.timings_tab.jobs.item(0, 7).text() == "cancelled"


def test_portfolio_csv(qtbot, panel, tmp_path):
    """A portfolio CSV (optiond price's columns) runs too: every row back, a bad row marked,
    the others priced as the engine prices them."""
    _wait_ready(qtbot, panel)
    rng = np.random.default_rng(3)
    n = 40
    book = pd.DataFrame({"kind": rng.choice(["put", "call"], n), "style": "american", "spot": 100.0,
                         "strike": rng.uniform(80, 120, n).round(2), "expiry": rng.uniform(0.1, 2, n).round(3),
                         "rate": 0.04, "dividend_yield": 0.01, "volatility": rng.uniform(0.1, 0.5, n).round(3)})
    book.loc[7, "volatility"] = -0.2
    book["dividends"] = ""  # cash dividends in years from now on some rows, an ex-date (needs a valuation) on one
    book.loc[[2, 5, 9], "dividends"] = "0.05:1.0;0.08:0.5"
    book.loc[11, "dividends"] = "2026-03-20:1.0"
    path = tmp_path / "book.csv"
    book.to_csv(path, index=False)
    out = _run(qtbot, panel.batch_tab, path)
    assert out.finished and out.kind == "portfolio" and out.done == n
    res = panel.batch_tab.table_model.frame()
    assert len(res) == n and res.loc[7, "status"] == "error" and "volatility" in res.loc[7, "error"]
    assert res.loc[11, "status"] == "error" and "dividends" in res.loc[11, "error"]
    plain = [i for i in range(n) if i not in (2, 5, 9)]
    ref = engine.price_table({c: book[c].to_numpy()[plain] for c in book.columns if c != "dividends"},
                             models.Method(steps=STEPS))
    np.testing.assert_allclose(res["price"].to_numpy()[plain][[i != 11 for i in plain]],
                               ref.price[[i != 11 for i in plain]], rtol=1e-12, equal_nan=True)
    cash = book.loc[[2, 5, 9]]
    ref_cash = bc.crr_batch((cash["kind"] == "call").to_numpy().astype(int), 1, 100.0, cash["strike"], cash["expiry"],
                            0.04, 0.01, cash["volatility"], STEPS, greeks=False, dividend_times=[0.05, 0.08],
                            dividend_amounts=[1.0, 0.5])[0]
    np.testing.assert_allclose(res.loc[[2, 5, 9], "price"], ref_cash, rtol=1e-12)
    assert not panel.batch_tab.rate.isEnabled()  # a portfolio carries its own rates
    assert panel.batch_tab.expiry_combo.count() == 0
    assert out.surface is None and not out.surface_error and "iv_fit" not in res  # no fit tried
    assert panel.surface_tab.surface is None and "portfolio" in panel.surface_tab.summary.text()


# ---------------------------------------------------------------------------- surface


def _colours(image, step: int = 5) -> set[int]:
    """The distinct colours of a QImage's pixels on a grid of every ``step``-th pixel."""
    return {image.pixel(x, y) for x in range(0, image.width(), step) for y in range(0, image.height(), step)}


def test_spy_surface_fit_smile_map_cursor_and_stats(qtbot, panel):
    """A finished SPY chain run is fitted on the worker thread: the results gain iv_fit (the
    surface's vol at each row's K and T), theo (the chain's method at iv_fit, as the engine prices it
    in this process) and edge; the smile shows bid/ask bars and the fitted SVI smile; the
    Surface tab renders its heatmap offscreen, its cursor reads Surface.vol under the pointer
    and its table holds each slice's own statistics."""
    _wait_ready(qtbot, panel)
    tab = panel.batch_tab
    tab.carry.setCurrentIndex(tab.carry.findData("parity"))
    tab.quote_time.setText("10:50")
    out = _run(qtbot, tab, SPY, steps=SURFACE_STEPS)
    assert out.finished, out.summary()
    surface = out.surface
    assert surface is not None and tab.surface is surface, out.surface_error
    res = tab.table_model.frame()
    assert set(res["expiry"]) == {s.expiry for s in surface.slices} | set(surface.stats["skipped"])
    assert len(surface.slices) > 20 and f"surface: {len(surface.slices)} expiries fitted" in tab.message.text()

    # the theo columns: the surface's vol at each row, the tree's price there, mid minus it
    K, T = res["strike"].to_numpy(), res["expiry_years"].to_numpy()
    for t in np.unique(T):
        r = T == t
        np.testing.assert_allclose(res["iv_fit"][r], surface.vol(K[r], float(t)), rtol=1e-12, equal_nan=True)
    ok = res[np.isfinite(res["theo"])]
    assert len(ok) > 0.8 * len(res)
    sample = ok.iloc[:: max(1, len(ok) // 40)]
    ref = engine.price_table({"kind": sample["type"].to_numpy(), "style": sample["style"].to_numpy(),
                              "spot": sample["spot"].to_numpy(), "strike": sample["strike"].to_numpy(),
                              "expiry": sample["expiry_years"].to_numpy(), "rate": sample["rate"].to_numpy(),
                              "dividend_yield": sample["dividend_yield"].to_numpy(),
                              "volatility": sample["iv_fit"].to_numpy()},
                             models.Method(name=chain.DEFAULT_METHOD, steps=SURFACE_STEPS,
                                           accuracy=chain.DEFAULT_ACCURACY))
    np.testing.assert_allclose(sample["theo"], ref.price, rtol=1e-9)  # the chain's own method (auto)
    np.testing.assert_allclose(res["edge"], res["mid"] - res["theo"], rtol=0, atol=1e-12, equal_nan=True)

    # the smile: bid/ask IV bars of the out-of-the-money rows, and the fitted smile
    expiry = "2026-03-20"
    sl = next(s for s in surface.slices if s.expiry == expiry)
    tab.axis_combo.setCurrentIndex(tab.axis_combo.findData("strike"))
    tab.expiry_combo.setCurrentIndex(tab.expiry_combo.findData(expiry))
    plot = tab.smile_plot.getPlotItem()
    bars = [i for i in plot.items if isinstance(i, pg.ErrorBarItem)]
    assert len(bars) == 1
    rows = res[res["expiry"] == expiry]
    otm = rows[(rows["type"] == np.where(rows["strike"] >= rows["forward"], "call", "put"))
               & np.isfinite(rows["iv_otm"])].sort_values("strike")
    otm = otm[np.isfinite(otm["iv_bid"]) | np.isfinite(otm["iv_ask"])]
    o = bars[0].opts
    np.testing.assert_allclose(o["x"], otm["strike"])
    asks = np.isfinite(otm["iv_ask"]).to_numpy()
    np.testing.assert_allclose((o["y"] + o["top"])[asks], 100 * otm["iv_ask"][asks], rtol=1e-12)
    bids = np.isfinite(otm["iv_bid"]).to_numpy()
    np.testing.assert_allclose((o["y"] - o["bottom"])[bids], 100 * otm["iv_bid"][bids], rtol=1e-12)
    items = {item.name(): item for item in plot.listDataItems()}
    xs, ys = items["SVI fit"].getData()
    assert xs.min() < otm["strike"].min() and xs.max() > otm["strike"].max()
    for i in (len(xs) // 4, len(xs) // 2):
        assert ys[i] == pytest.approx(100 * float(surface.vol(xs[i], sl.T)), rel=1e-9)
    tab.axis_combo.setCurrentIndex(tab.axis_combo.findData("log_moneyness"))
    xs, ys = {item.name(): item for item in plot.listDataItems()}["SVI fit"].getData()
    i = int(np.argmin(np.abs(xs)))
    assert ys[i] == pytest.approx(100 * float(surface.vol(surface.forward(sl.T) * math.exp(xs[i]), sl.T)), rel=1e-9)

    # the Surface tab: the map renders, over the fitted expiries and the quoted log-moneyness
    st = panel.surface_tab
    panel.tabs.setCurrentWidget(st)
    qtbot.wait(100)
    assert st.surface is surface
    k, T, vol = st.grid
    assert T[0] == surface.slices[0].T and T[-1] == pytest.approx(surface.slices[-1].T, rel=1e-12)
    assert k[0] < -0.05 and k[-1] > 0.05
    for i, j in ((0, 0), (len(T) // 2, len(k) // 3), (len(T) - 1, len(k) - 1)):
        expect = 100 * float(surface.vol(surface.forward(T[i]) * math.exp(k[j]), T[i]))
        assert st.image.image[j, i] == pytest.approx(expect, rel=1e-9)
    image = st.plot.grab().toImage()
    assert not image.isNull() and image.width() > 300 and image.height() > 200
    assert len(_colours(image)) > 50  # a colour map, not a blank or one-colour plot
    assert f"{len(surface.slices)} expiries" in st.summary.text()

    # the cursor: (K, T, sigma) under the pointer, sigma the surface's vol there
    vb = st.plot.getPlotItem().vb
    target_k, target_T = -0.05, surface.slices[len(surface.slices) // 2].T
    pos = st.plot.mapFromScene(vb.mapViewToScene(QPointF(target_k, math.log10(target_T))))
    qtbot.wait(50)  # pyqtgraph drops pointer moves that come within a few ms of the last one
    qtbot.mouseMove(st.plot.viewport(), pos)
    qtbot.waitUntil(lambda: st.cursor is not None, timeout=3000)
    c = st.cursor
    px, py = vb.viewPixelSize()
    assert abs(c.k - target_k) <= 2 * px and abs(math.log10(c.T) - math.log10(target_T)) <= 2 * py
    forward = surface.forward(c.T)
    sigma = float(surface.vol(forward * math.exp(c.k), c.T))
    assert c.forward == pytest.approx(forward, rel=1e-12)
    assert c.strike == pytest.approx(forward * math.exp(c.k), rel=1e-12)
    text = st.cursor_label.text()
    assert f"σ = {100 * sigma:.2f} %" in text, text
    assert f"K = {forward * math.exp(c.k):,.2f}" in text and f"T = {c.T:.4f} y" in text, text
    qtbot.wait(50)
    qtbot.mouseMove(st.plot.viewport(), QPoint(2, 2))  # on the margin, off the map
    qtbot.waitUntil(lambda: st.cursor is None, timeout=3000)
    assert "σ =" not in st.cursor_label.text()

    # the fit statistics: one row per slice, its own numbers
    frame = st.stats_model.frame()
    assert st.stats_model.rowCount() == len(frame) == len(surface.slices)
    for r, s in enumerate(surface.slices):
        row = frame.iloc[r]
        assert (row["expiry"], row["T"], row["forward"]) == (s.expiry, s.T, s.forward)
        assert row["rate"] == pytest.approx(100 * s.rate, rel=1e-12)
        assert row["atm_iv"] == pytest.approx(100 * math.sqrt(float(s.total_variance(0.0)) / s.T), rel=1e-12)
        assert (row["quotes"], row["fitted_quotes"]) == (s.stats["quotes"], s.stats["fitted_quotes"])
        assert row["rms_vol_pts"] == pytest.approx(s.stats["rms_vol_pts"], rel=1e-12)
        assert row["inside_share_near"] == pytest.approx(100 * s.stats["inside_share_near"], rel=1e-12, nan_ok=True)
        assert row["confidence"] == pytest.approx(s.stats["confidence"], rel=1e-12)
        assert row["arbitrage_free"] == ("yes" if s.stats["arbitrage_free"] else "no")
    col = list(frame.columns).index("rms_vol_pts")
    assert st.stats_model.index(0, col).data() == f"{surface.slices[0].stats['rms_vol_pts']:.6g}"


def test_a_failed_fit_keeps_the_priced_chain(qtbot, panel, tmp_path):
    """A chain too thin to fit (four strikes per expiry, fewer quotes than a slice needs) is
    priced in full; the status line and the Surface tab say why there is no surface, and the
    smile has no fit."""
    _wait_ready(qtbot, panel)
    df = chain.read_chain(str(AAPL))
    part = df[df["expiry"] == "2026-03-20"]
    spot = float(part["underlying_price"].iloc[0])
    near = sorted(part["strike"].unique(), key=lambda k: abs(k - spot))[:4]
    part = part[part["strike"].isin(near)].reset_index(drop=True)
    path = tmp_path / "aapl_four_strikes.csv"
    part.to_csv(path, index=False)
    tab = panel.batch_tab
    tab.carry.setCurrentIndex(tab.carry.findData("flat"))
    out = _run(qtbot, tab, path)
    assert out.finished and out.done == len(part), out.summary()
    assert out.surface is None and out.surface_error
    res = tab.table_model.frame()
    assert len(res) == len(part) and "iv_fit" not in res and (res["status"] == "ok").sum() >= 4
    assert f"no surface: {out.surface_error}" in tab.message.text()
    assert "SVI fit" not in {item.name() for item in tab.smile_plot.getPlotItem().listDataItems()}
    st = panel.surface_tab
    assert st.surface is None and st.stats_model.rowCount() == 0
    assert st.summary.text() == f"No surface: the fit failed: {out.surface_error}."


def test_fit_chain_surface_keeps_the_rows_when_the_theo_pricing_stops(tmp_path):
    """The fit's theo pricing cancelled or refused by the daemon: the priced rows come back as
    they were, with the reason; on a working pricer they gain iv_fit = the surface's vol."""
    part, _ = _two_expiries(tmp_path)
    out, _ = chain.price_chain(part, steps=50)

    class Down:
        def price_table(self, *a, **k):
            raise DaemonUnavailable("no daemon on test.json")

        implied_vol = price_table

    cancel = threading.Event()
    cancel.set()
    for pricer, reason in ((backend.PanelPricer(Down(), backend.BatchSettings(), cancel), "cancelled"),
                           (backend.PanelPricer(Down(), backend.BatchSettings(), threading.Event()),
                            "DaemonUnavailable: no daemon on test.json")):
        got, surface, why = backend.fit_chain_surface(out, pricer, 50)
        assert got is out and surface is None and why == reason
    got, surface, why = backend.fit_chain_surface(out, LocalPricer(), 50)
    assert why == "" and [s.expiry for s in surface.slices] == ["2026-03-13", "2026-03-20"]
    r = got["expiry"] == "2026-03-20"
    np.testing.assert_allclose(got.loc[r, "iv_fit"], surface.vol(got.loc[r, "strike"].to_numpy(),
                                                                 surface.slices[1].T), rtol=1e-12)


def test_surface_tab_one_expiry_and_odd_input(qtbot):
    """The Surface tab (no daemon needed) draws a one-expiry surface, reads it by hand's
    numbers, and takes a surface with no positive variance, a chain output without the quote
    columns, missing statistics and runs without a surface without raising."""
    st = SurfaceTab()
    qtbot.addWidget(st)
    st.resize(900, 700)
    st.show()
    qtbot.mouseMove(st.plot.viewport(), QPoint(200, 200))  # nothing shown yet: nothing to read
    assert st.cursor is None and st.stats_model.rowCount() == 0

    one = Surface("XYZ", "2026-01-02", [Slice("2026-04-02", 0.25, 100.0, 0.04, SVI(0.01, 0.1, -0.5, 0.0, 0.1), {})])
    st.show_surface(one, pd.DataFrame({"unrelated": [1.0]}))  # no quote columns: the default k range
    k, T, vol = st.grid
    assert (k[0], k[-1]) == (-0.3, 0.3) and list(T) == [0.25] and vol.shape == (1, len(k))
    c = st.read_at(0.0, 0.25)  # w(0) = a + b sigma = 0.02 at the forward
    assert c.forward == pytest.approx(100.0, rel=1e-12) and c.strike == pytest.approx(100.0, rel=1e-12)
    assert c.vol == pytest.approx(math.sqrt(0.02 / 0.25), rel=1e-12)
    assert "σ = 28.28 %" in c.text() and "K = 100.00" in c.text()
    row = st.stats_model.frame().iloc[0]
    assert (row["expiry"], row["T"], row["forward"], row["arbitrage_free"]) == ("2026-04-02", 0.25, 100.0, "")
    assert row["rate"] == pytest.approx(4.0) and row["atm_iv"] == pytest.approx(100 * math.sqrt(0.02 / 0.25))
    assert math.isnan(row["rms_vol_pts"]) and st.stats_model.index(0, 7).data() == ""
    assert len(_colours(st.plot.grab().toImage())) > 20

    negative = Surface("XYZ", "2026-01-02", [Slice("2026-04-02", 0.25, 100.0, 0.04, SVI(-1.0, 0.1, 0.0, 0.0, 0.1),
                                                   {"arbitrage_free": False})])
    st.show_surface(negative)
    assert np.isnan(st.grid[2]).all() and st.stats_model.frame()["arbitrage_free"].tolist() == ["no"]
    assert "σ = n/a" in st.read_at(0.0, 0.25).text()
    assert not st.plot.grab().toImage().isNull()
    assert st.read_at(0.0, 0.0) is None and st.read_at(float("nan"), 0.25) is None

    failed = backend.BatchOutcome("x.csv", "chain", "binomial", 10, 3, pd.DataFrame(), 1.0, error="boom")
    st.show_outcome(failed)
    assert st.surface is None and st.grid is None and st.summary.text() == "No surface: the last run failed."
    st.show_surface(None)
    assert st.summary.text() == "No surface: the fit kept no expiry."


# ---------------------------------------------------------------------------- models, settings, cancel plumbing


def test_models_offered_follow_the_engine(qtbot, tmp_path, settings):
    """Binomial is always offered; MLMC and Heston ADI only when the engine has them (disabled
    with a tooltip otherwise), and a daemon that lists its methods decides."""
    win = MainWindow(tmp_path / "no-daemon.json", settings)
    qtbot.addWidget(win)
    try:
        combo = win.batch_tab.model_combo

        def enabled() -> dict:
            return {combo.itemData(i): combo.model().item(i).isEnabled() for i in range(combo.count())}

        local = {m.key: any(n in models.METHODS for n in m.engine_names) for m in backend.MODELS}
        assert enabled() == local and local["binomial"]
        for i in range(combo.count()):
            if not combo.model().item(i).isEnabled():
                assert "not available" in combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
        win.batch_tab.set_daemon_state(backend.DaemonState(True, status={"methods": ["binomial", "heston-adi"]}))
        assert enabled() == {"binomial": True, "mlmc": False, "heston-adi": True}
        assert win.batch_tab.engine_name("heston-adi") == "heston-adi"
    finally:
        win.shutdown()


def test_settings_remembered(qtbot, tmp_path, settings):
    """File, model settings and tab survive closing and reopening the panel."""
    conn = tmp_path / "no-daemon.json"
    first = MainWindow(conn, settings)
    qtbot.addWidget(first)
    tab = first.batch_tab
    assert tab.set_file(AAPL)
    tab.steps.setValue(777)
    tab.rate.setValue(0.0525)
    tab.dividend.setValue(0.011)
    tab.carry.setCurrentIndex(tab.carry.findData("flat"))
    tab.quote_time.setText("10:50")
    tab.device.setCurrentText("cpu")
    tab.fit_surface.setChecked(False)
    first.tabs.setCurrentIndex(2)
    first.close()
    assert (tmp_path / "panel.ini").is_file()

    second = MainWindow(conn, QSettings(str(tmp_path / "panel.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(second)
    try:
        tab = second.batch_tab
        assert tab.path == str(AAPL.resolve()) and tab.file_combo.currentData() == str(AAPL.resolve())
        assert tab.steps.value() == 777
        assert tab.rate.value() == pytest.approx(0.0525) and tab.dividend.value() == pytest.approx(0.011)
        assert tab.device.currentText() == "cpu"
        assert tab.carry.currentData() == "flat" and tab.quote_time.text() == "10:50"
        assert not tab.fit_surface.isChecked()
        assert second.tabs.currentIndex() == 2
    finally:
        second.shutdown()


def test_remote_cancel_used_when_the_client_offers_it():
    """With a client that takes job ids and has ``cancel``, Cancel asks the daemon to drop
    the job's request; a client without them is used as it is."""

    class JobClient:
        def __init__(self):
            self.cancelled, self.job_ids = [], []

        def price_table(self, columns, method=None, *, fallback=True, timeout=None, job_id=None):
            self.job_ids.append(job_id)
            return engine.price_table(columns, method)

        def implied_vol(self, prices, columns, method=None, *, fallback=True, timeout=None, job_id=None):
            self.job_ids.append(job_id)
            return engine.implied_vol_table(prices, columns, method)

        def cancel(self, job_id):
            self.cancelled.append(job_id)

    client, cancel = JobClient(), threading.Event()
    pricer = backend.PanelPricer(client, backend.BatchSettings(steps=50), cancel)
    assert pricer.can_cancel_remote
    df = chain.read_chain(str(AAPL)).iloc[:30]
    out, _ = chain.price_chain(df, pricer, steps=50)
    assert set(client.job_ids) == {pricer.job_id}
    pricer.cancel_remote()
    assert client.cancelled == [pricer.job_id]
    cancel.set()
    with pytest.raises(backend.Cancelled):
        pricer.price_table({"kind": "put", "spot": 1.0, "strike": 1.0, "expiry": 1.0, "rate": 0.0, "volatility": 0.2})

    class PlainClient:
        def price_table(self, columns, method=None, *, fallback=True, timeout=None):
            raise AssertionError("not called")

        implied_vol = price_table

    assert not backend.PanelPricer(PlainClient(), backend.BatchSettings(), threading.Event()).can_cancel_remote


def test_panel_command_registered():
    """``optiond panel`` parses its options without starting Qt."""
    import argparse

    from optiond.commands import panel

    parser = argparse.ArgumentParser()
    panel.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["panel", "--connection-file", "/tmp/x.json", "--tab", "batch"])
    assert (args.command, args.connection_file, args.tab, args.func) == ("panel", "/tmp/x.json", "batch", panel.cmd_panel)
