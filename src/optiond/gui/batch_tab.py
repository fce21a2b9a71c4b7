"""The Batch tab: open a chain or portfolio CSV, price it on the daemon with progress and
Cancel, browse the results (sortable, filterable), see the per-expiry forwards and carry
solved from the chain, plot the smile per expiry (the out-of-the-money mid IV as points with
bid/ask IV bars and the fitted SVI smile as a line, against strike or log-moneyness), and
export to CSV. A chain may take a file of cash dividends (**Dividends…**: an ``ex_date,amount``
CSV, :func:`optiond.dividends.read_dividend_file`), used as ``optiond chain --dividends`` uses
it; a file that does not read is named with its reason in the status line and the run does
not start. With **Fit surface** on, a chain priced to the end is fitted on the worker
thread (:func:`optiond.gui.backend.fit_chain_surface`): the results gain ``iv_fit``, ``theo``
and ``edge``, and the Surface tab shows the surface."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyqtgraph as pg
from PySide6.QtCore import QSettings, Qt, QThreadPool, Signal
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout,
                               QGroupBox, QHBoxLayout, QHeaderView, QLabel, QLineEdit, QProgressBar, QPushButton,
                               QSpinBox, QSplitter, QTableView, QVBoxLayout, QWidget)

from .. import chain as chain_job
from ..dividends import read_dividend_file
from ..files import write_with
from . import backend
from .qtmodels import DataFrameModel, ResultsProxy, ordered_columns
from .workers import BatchRunner

MAX_RECENT = 8
DEVICES = ("auto", "cpu", "gpu")


class BatchTab(QWidget):
    """Batch runs on the daemon. ``job_finished`` fires with the
    :class:`optiond.gui.backend.BatchOutcome` of every run (done, cancelled or failed);
    ``request_timed`` with each request's :class:`optiond.gui.backend.RequestTiming`."""

    job_finished = Signal(object)
    request_timed = Signal(object)

    def __init__(self, client, parent=None):
        super().__init__(parent)
        self.client = client
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(1)
        self.runner: BatchRunner | None = None
        self._last_runner: BatchRunner | None = None
        self.outcome: backend.BatchOutcome | None = None
        self.surface = None  # the last run's optiond.surface.model.Surface, None without one
        self.df: pd.DataFrame | None = None
        self.kind = ""
        self.path = ""
        self._methods: tuple[str, ...] | None = None
        self._daemon_up: bool | None = None
        self._daemon_devices: list[str] = []
        self._last_dir = str(backend.bundled_data_dir() or Path.home())

        # ---- file
        self.file_combo = QComboBox()
        self.file_combo.setMinimumContentsLength(28)
        self.file_combo.setToolTip("A bundled real option chain, or a file opened before")
        for p in backend.bundled_files():
            self.file_combo.addItem(p.name, str(p))
        self.file_combo.currentIndexChanged.connect(self._file_chosen)
        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("Open a chain CSV (columns of examples/data) or a portfolio CSV "
                                    "(kind, style, spot, strike, expiry, rate, dividend_yield, volatility, method, steps)")
        self.open_button.clicked.connect(self.open_dialog)
        self.file_info = QLabel("")

        # ---- model and settings
        self.model_combo = QComboBox()
        for m in backend.MODELS:
            self.model_combo.addItem(m.label, m.key)
        self.model_combo.currentIndexChanged.connect(self._model_chosen)
        self.steps = QSpinBox()
        self.steps.setRange(1, 100_000)
        self.steps.setSingleStep(100)
        self.steps.setValue(chain_job.DEFAULT_STEPS)
        self.steps.setToolTip("CRR tree steps (American contracts; also the implied-vol solve)")
        self.rate = QDoubleSpinBox()
        self.rate.setDecimals(4)
        self.rate.setRange(-0.1, 1.0)
        self.rate.setSingleStep(0.0025)
        self.rate.setValue(chain_job.DEFAULT_RATE)
        self.rate.setToolTip("Flat continuously compounded rate, annual decimal (0.04 = 4 %); with carry = parity, "
                             "European expiries imply their own rate from put-call parity")
        self.carry = QComboBox()
        for mode, label, tip in (("parity", "parity",
                                  "Forward and carry per expiry from the chain itself: a put-call parity fit "
                                  "(European) or the carry that makes call and put IVs agree (American)"),
                                 ("flat", "flat", "The rate and dividend yield as given, for every expiry")):
            self.carry.addItem(label, mode)
            self.carry.setItemData(self.carry.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.carry.setToolTip("Where each expiry's forward and carry come from")
        self.quote_time = QLineEdit()
        self.quote_time.setPlaceholderText("16:00")
        self.quote_time.setMinimumWidth(self.quote_time.fontMetrics().horizontalAdvance("00:00") + 24)
        self.quote_time.setMaximumWidth(110)
        self.quote_time.setToolTip("HH:MM New York time of the snapshot (or ISO 8601 with offset); blank: the 16:00 "
                                   "close of the quote date. The bundled Yahoo files (SPY, QQQ, TSLA, AAPL) are 10:50")
        self.dividend = QDoubleSpinBox()
        self.dividend.setDecimals(4)
        self.dividend.setRange(0.0, 1.0)
        self.dividend.setSingleStep(0.001)
        self.dividend.setValue(chain_job.DEFAULT_DIVIDEND_YIELD)
        self.dividend.setToolTip("Continuous dividend yield, annual decimal (e.g. 0.011 for SPY). Applies to carry = "
                                 "flat; with carry = parity each expiry's carry comes from the chain (this value is "
                                 "only assumed over the front expiry's few days, to imply the spot)")
        self.dividend_file = ""  # a chain's cash dividends (ex_date,amount CSV), "" for none
        self.dividends_label = QLabel("none")
        self.dividends_label.setToolTip("The chain's cash-dividend file")
        self.dividends_button = QPushButton("Dividends…")
        self.dividends_button.setToolTip("Cash dividends of the chain's underlying: a CSV with columns ex_date "
                                         "(YYYY-MM-DD) and amount (currency units). Each contract's tree gets the "
                                         "dividends ex before its expiry, and the carry is the borrow on top of them "
                                         "(as optiond chain --dividends)")
        self.dividends_button.clicked.connect(self.open_dividends_dialog)
        self.dividends_clear = QPushButton("Clear")
        self.dividends_clear.setToolTip("Price the chain without cash dividends")
        self.dividends_clear.clicked.connect(lambda: self.set_dividend_file(""))
        self.eps = QDoubleSpinBox()
        self.eps.setDecimals(4)
        self.eps.setRange(0.0001, 10.0)
        self.eps.setSingleStep(0.005)
        self.eps.setValue(0.01)
        self.eps.setToolTip("MLMC target root-mean-square error, currency units")
        self.device = QComboBox()
        self.device.addItems(list(DEVICES))
        self.device.setToolTip("Where the daemon prices: auto picks the GPU when it pays")
        self.fit_surface = QCheckBox("Fit surface")
        self.fit_surface.setChecked(True)
        self.fit_surface.setToolTip("After a chain is priced to the end: fit its volatility surface (one "
                                    "arbitrage-free SVI smile per expiry, seconds on a large chain), add iv_fit, theo "
                                    "and edge to the results (the theo prices on the daemon, tree or closed form at "
                                    "the fitted vol) and show it on the Surface tab")

        # ---- run
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("%v / %m rows")
        self.message = QLabel("Choose a file and press Run.")
        self.message.setWordWrap(True)

        # ---- results
        self.table_model = DataFrameModel()
        self.proxy = ResultsProxy(self)
        self.proxy.setSourceModel(self.table_model)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setSortIndicatorShown(True)
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter rows (any column, e.g. 2026-03-20 or put)")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self.proxy.set_text)
        self.status_filter = QComboBox()
        self.status_filter.addItem("All statuses", "")
        self.status_filter.currentIndexChanged.connect(
            lambda _i: self.proxy.set_status(self.status_filter.currentData() or None))
        self.export_button = QPushButton("Export CSV…")
        self.export_button.setToolTip("Write the rows shown (filtered and sorted) to a CSV file")
        self.export_button.setEnabled(False)
        self.export_button.clicked.connect(self.export_dialog)
        self.shown_label = QLabel("")

        # ---- smile and forwards
        self.expiry_combo = QComboBox()
        self.expiry_combo.currentIndexChanged.connect(self.plot_smile)
        self.axis_combo = QComboBox()
        self.axis_combo.addItem("strike", "strike")
        self.axis_combo.addItem("ln(K/F)", "log_moneyness")
        self.axis_combo.setToolTip("The smile's x axis: strike, or log-moneyness against the expiry's forward")
        self.axis_combo.currentIndexChanged.connect(self.plot_smile)
        self.smile_plot = pg.PlotWidget()
        self.smile_plot.setLabel("left", "implied volatility (%)")
        self.smile_plot.setLabel("bottom", "strike")
        self.smile_plot.showGrid(x=True, y=True, alpha=0.3)
        self.smile_plot.addLegend(offset=(-10, 10))
        self.forward_model = DataFrameModel(backend.forward_view(None), {c: h for c, h, _ in backend.FORWARD_VIEW})
        self.forward_table = QTableView()
        self.forward_table.setModel(self.forward_model)
        self.forward_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.forward_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.forward_table.setAlternatingRowColors(True)
        self.forward_table.verticalHeader().setVisible(False)
        self.forward_table.verticalHeader().setDefaultSectionSize(20)
        self.forward_table.setToolTip("Forward and carry per expiry, solved from the chain (rate and carry in %, "
                                      "call-put IV residual in vol points near the money); click a row to plot its "
                                      "smile")
        self.forward_table.clicked.connect(self._forward_clicked)

        self._layout()
        self._methods = backend.DaemonState(False).methods()  # this installation's, until the daemon says
        self._apply_models(backend.model_availability(self._methods))
        self._model_chosen()
        self.plot_smile()
        if self.file_combo.count():
            self._file_chosen(self.file_combo.currentIndex())

    def _layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("File:"))
        top.addWidget(self.file_combo, 1)
        top.addWidget(self.open_button)
        settings = QGroupBox("Model and settings")
        form = QHBoxLayout(settings)
        divs = QHBoxLayout()
        for w in (self.dividends_label, self.dividends_button, self.dividends_clear):
            divs.addWidget(w)
        for label, w in (("Model", self.model_combo), ("Steps", self.steps), ("Rate", self.rate),
                         ("Carry", self.carry), ("Dividend yield", self.dividend), ("Cash dividends", divs),
                         ("Quote time", self.quote_time), ("MLMC error", self.eps), ("Device", self.device)):
            sub = QFormLayout()
            sub.addRow(label + ":", w)
            form.addLayout(sub)
        run = QHBoxLayout()
        run.addWidget(self.run_button)
        run.addWidget(self.cancel_button)
        run.addWidget(self.fit_surface)
        run.addWidget(self.progress, 1)

        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        bar.addWidget(self.filter_edit, 1)
        bar.addWidget(self.status_filter)
        bar.addWidget(self.export_button)
        ll.addLayout(bar)
        ll.addWidget(self.table, 1)
        ll.addWidget(self.shown_label)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        eb = QHBoxLayout()
        eb.addWidget(QLabel("Smile for expiry:"))
        eb.addWidget(self.expiry_combo, 1)
        eb.addWidget(QLabel("x:"))
        eb.addWidget(self.axis_combo)
        rl.addLayout(eb)
        self.right_split = QSplitter(Qt.Orientation.Vertical)
        self.right_split.addWidget(self.smile_plot)
        self.right_split.addWidget(self.forward_table)
        self.right_split.setStretchFactor(0, 3)
        self.right_split.setStretchFactor(1, 2)
        self.right_split.setSizes([360, 220])
        rl.addWidget(self.right_split, 1)
        self.split = QSplitter(Qt.Orientation.Horizontal)
        self.split.addWidget(left)
        self.split.addWidget(right)
        self.split.setStretchFactor(0, 1)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([600, 660])

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.file_info)
        layout.addWidget(settings)
        layout.addLayout(run)
        layout.addWidget(self.message)
        layout.addWidget(self.split, 1)
        self.proxy.rowsInserted.connect(self._count_shown)
        self.proxy.rowsRemoved.connect(self._count_shown)
        self.proxy.modelReset.connect(self._count_shown)
        self.proxy.layoutChanged.connect(self._count_shown)

    # ------------------------------------------------------------------ file

    def _ask_csv(self, title: str) -> str:
        """A CSV file the user picks (starting in the last folder, else the bundled chains); ""
        when cancelled."""
        path, _ = QFileDialog.getOpenFileName(self, title, self._last_dir, "CSV files (*.csv);;All files (*)")
        return path

    def open_dialog(self) -> None:
        """Ask for a chain or portfolio CSV file."""
        path = self._ask_csv("Open a chain or portfolio CSV")
        if path:
            self.set_file(path)

    def set_file(self, path: str | Path) -> bool:
        """Choose ``path`` (adding it to the file list); False, with the reason shown, when it
        is no chain or portfolio."""
        path = str(Path(path).resolve())
        i = self.file_combo.findData(path)
        if i < 0:
            self.file_combo.insertItem(0, Path(path).name, path)
            self.file_combo.setItemData(0, path, Qt.ItemDataRole.ToolTipRole)
            i = 0
        if i == self.file_combo.currentIndex():
            return self._load(path)
        self.file_combo.setCurrentIndex(i)
        return self.df is not None and self.path == path

    def open_dividends_dialog(self) -> None:
        """Ask for a chain's cash-dividend file (an ``ex_date,amount`` CSV)."""
        path = self._ask_csv("Cash dividends (ex_date,amount)")
        if path:
            self.set_dividend_file(path)

    def set_dividend_file(self, path: str | Path) -> bool:
        """Use the cash-dividend file ``path`` for the chain runs ("" for none). The file is read
        again at each Run; a file that does not read now (the reason shown in the status line)
        is kept, and Run refuses it with that reason until it is fixed or cleared. Returns
        whether it reads (True for none)."""
        self.dividend_file = str(Path(path).resolve()) if str(path) else ""
        ok = True
        if not self.dividend_file:
            self.dividends_label.setText("none")
        else:
            name = Path(self.dividend_file).name
            try:
                n = len(read_dividend_file(self.dividend_file))
            except ValueError as e:
                ok = False
                self.dividends_label.setText(f"<span style='color:#c62828'>{name}</span>")
                self.message.setText(f"<span style='color:#c62828'>Dividend file: {' '.join(str(e).split())}</span>")
            else:
                self.dividends_label.setText(f"{name} ({n} dividend{'s' if n != 1 else ''})")
            self._last_dir = str(Path(self.dividend_file).parent)
        self.dividends_label.setToolTip(self.dividend_file or "No cash dividends: the carry takes them")
        self._update_buttons()
        return ok

    def _file_chosen(self, index: int) -> None:
        path = self.file_combo.itemData(index)
        if path:
            self._load(path)

    def _load(self, path: str) -> bool:
        try:
            df, kind = backend.load_table(path)
        except (OSError, ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
            self.df, self.kind, self.path = None, "", ""
            self.file_info.setText(f"<span style='color:#c62828'>{e}</span>")
            self._update_buttons()
            return False
        self.df, self.kind, self.path = df, kind, path
        self._last_dir = str(Path(path).parent)
        if not self.is_running():
            self.progress.setRange(0, max(1, len(df)))
            self.progress.setValue(0)
        if kind == "chain":
            n_exp = df["expiry"].nunique()
            self.file_info.setText(f"{df['underlying'].iloc[0] if len(df) else ''} option chain: {len(df):,} contracts, "
                                   f"{n_exp} expiries, quoted {df['quote_date'].iloc[0] if len(df) else ''}, "
                                   f"spot {df['underlying_price'].iloc[0] if len(df) else ''}, "
                                   f"{', '.join(sorted(df['style'].astype(str).unique()))}")
        else:
            self.file_info.setText(f"Portfolio: {len(df):,} rows (rate, dividend yield and volatility from the file)")
        self._update_buttons()
        return True

    # ------------------------------------------------------------------ model

    def _model_chosen(self, _index: int = 0) -> None:
        key = self.model_combo.currentData()
        self.eps.setEnabled(key == "mlmc")

    def set_daemon_state(self, state: backend.DaemonState) -> None:
        """Follow the daemon: models its engine offers, and Run only while it is up."""
        if self.is_running() and state.up != self._daemon_up:
            self.message.setText("Pricing on the daemon…" if state.up else
                                 "<span style='color:#c62828'>The daemon is not answering: the request in flight "
                                 "fails after its reply timeout unless it comes back (Cancel stops the run "
                                 "then).</span>")
        self._daemon_up = state.up
        if state.up and isinstance(state.status.get("devices"), list):
            self._daemon_devices = [str(d) for d in state.status["devices"]]
        methods = state.methods()
        if methods != self._methods:
            self._methods = methods
            self._apply_models(backend.model_availability(methods))
        if self.outcome is None and not self.is_running():  # before the first run: say what to do
            self.message.setText("Choose a file and press Run." if state.up else
                                 "The daemon is down: start it on the Status tab, then press Run.")
        self._update_buttons()

    def _apply_models(self, avail: dict[str, tuple[str | None, str]]) -> None:
        model = self.model_combo.model()
        for i in range(self.model_combo.count()):
            key = self.model_combo.itemData(i)
            name, tip = avail.get(key, (None, "not available"))
            model.item(i).setEnabled(name is not None)
            self.model_combo.setItemData(i, tip, Qt.ItemDataRole.ToolTipRole)
        if not model.item(self.model_combo.currentIndex()).isEnabled():
            self.model_combo.setCurrentIndex(0)

    def engine_name(self, key: str) -> str | None:
        """The engine method name for model ``key`` (None when unavailable)."""
        return backend.model_availability(self._methods or backend.DaemonState(False).methods())[key][0]

    def settings(self) -> backend.BatchSettings:
        """The settings the next run uses."""
        key = self.model_combo.currentData()
        return backend.BatchSettings(model=key, engine_name=self.engine_name(key) or key, steps=self.steps.value(),
                                     rate=self.rate.value(), dividend_yield=self.dividend.value(),
                                     eps=self.eps.value(), device=self.device.currentText(),
                                     carry=self.carry.currentData(), quote_time=self.quote_time.text().strip(),
                                     fit_surface=self.fit_surface.isChecked(), dividend_file=self.dividend_file)

    # ------------------------------------------------------------------ run / cancel

    def is_running(self) -> bool:
        """Whether a batch runs now."""
        return self.runner is not None

    def _update_buttons(self) -> None:
        running = self.is_running()
        down = self._daemon_up is False
        self.run_button.setEnabled(not running and self.df is not None and not down)
        self.run_button.setToolTip("The daemon is down: start it on the Status tab" if down else
                                   "Price the file on the daemon")
        self.cancel_button.setEnabled(running and not self.runner.cancel_event.is_set())
        for w in (self.file_combo, self.open_button, self.model_combo, self.steps, self.eps, self.device):
            w.setEnabled(not running)
        for w in (self.rate, self.carry, self.dividend, self.quote_time, self.fit_surface, self.dividends_button):
            w.setEnabled(not running and self.kind == "chain")
        self.dividends_clear.setEnabled(not running and bool(self.dividend_file))
        if not running:
            self.eps.setEnabled(self.model_combo.currentData() == "mlmc")

    def run(self) -> None:
        """Start pricing the chosen file on the daemon (returns at once)."""
        if self.is_running() or self.df is None:
            return
        self.pool.waitForDone()  # the last runner has emitted finished; let its run() return first
        settings = self.settings()
        if self.kind == "chain":
            try:
                settings.check()
            except ValueError as e:
                self.message.setText(f"<span style='color:#c62828'>Not started: {e}</span>")
                return
        hint = settings.device if settings.device != "auto" else (
            self._daemon_devices[0] if len(self._daemon_devices) == 1 else "auto")
        runner = BatchRunner(self.df, self.kind, self.client, settings, self.path, device_hint=hint)
        runner.signals.progress.connect(self._progress)
        runner.signals.stage.connect(self._stage)
        runner.signals.request.connect(self.request_timed)
        runner.signals.finished.connect(self._finished)
        self.runner = self._last_runner = runner  # a reference until the next run (the pool does not hold one)
        self.progress.setRange(0, max(1, len(self.df)))
        self.progress.setValue(0)
        self.message.setText(f"Pricing {Path(self.path).name} on the daemon…")
        self._update_buttons()
        self.pool.start(runner)

    def cancel(self) -> None:
        """Stop the run after the request in flight (the rows done so far are kept)."""
        if self.runner is None:
            return
        self.runner.cancel()
        self.message.setText("Cancelling after the request in flight…")
        self._update_buttons()

    def _stage(self, text: str) -> None:
        if self.runner is not None and not self.runner.cancel_event.is_set():
            self.message.setText(text)

    def _progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)

    def _finished(self, outcome: backend.BatchOutcome) -> None:
        self.runner = None
        self.outcome = outcome
        self.progress.setValue(outcome.done)
        self.show_results(outcome)
        style = ("color:#c62828" if outcome.error else
                 "color:#ef6c00" if outcome.cancelled or outcome.surface_error else "color:#2e7d32")
        self.message.setText(f"<span style='{style}'>{outcome.summary()}</span>")
        self._update_buttons()
        self.job_finished.emit(outcome)

    # ------------------------------------------------------------------ results

    def show_results(self, outcome: backend.BatchOutcome) -> None:
        """Fill the table, the status filter and the smile (with the fit, when the run has a
        surface) from ``outcome``."""
        self.surface = outcome.surface
        df = outcome.df[ordered_columns(list(outcome.df.columns), outcome.kind)]
        self.table_model.set_frame(df)
        self.table.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.table.resizeColumnsToContents()
        for c in range(self.table_model.columnCount()):
            if self.table.columnWidth(c) > 220:
                self.table.setColumnWidth(c, 220)
        current = self.status_filter.currentData()
        self.status_filter.blockSignals(True)
        self.status_filter.clear()
        self.status_filter.addItem(f"All statuses ({len(df):,})", "")
        for status, count in sorted(outcome.by_status.items(), key=lambda kv: (kv[0] != "ok", -kv[1])):
            self.status_filter.addItem(f"{status} ({count:,})", status)
        i = self.status_filter.findData(current)
        self.status_filter.setCurrentIndex(max(i, 0))
        self.status_filter.blockSignals(False)
        self.proxy.set_status(self.status_filter.currentData() or None)
        self.export_button.setEnabled(len(df) > 0)
        self.forward_model.set_frame(backend.forward_view(outcome.forwards))
        self.forward_table.resizeColumnsToContents()
        self._fill_expiries(df if outcome.kind == "chain" else pd.DataFrame())
        self._count_shown()

    def _count_shown(self, *_args) -> None:
        total = self.table_model.rowCount()
        self.shown_label.setText(f"{self.proxy.rowCount():,} of {total:,} rows shown" if total else "")

    def _fill_expiries(self, df: pd.DataFrame) -> None:
        current = self.expiry_combo.currentData()
        self.expiry_combo.blockSignals(True)
        self.expiry_combo.clear()
        exps = backend.expiries(df)
        quote = pd.to_datetime(df["quote_date"].iloc[0]) if len(df) and "quote_date" in df else None
        for exp, n in exps:
            days = f"{(pd.to_datetime(exp) - quote).days} d, " if quote is not None else ""
            self.expiry_combo.addItem(f"{exp} ({days}{n} IVs)", exp)
        i = self.expiry_combo.findData(current)
        if i < 0 and exps:  # default: the expiry with the most solved IVs
            i = int(np.argmax([n for _, n in exps]))
        self.expiry_combo.setCurrentIndex(i)
        self.expiry_combo.setEnabled(bool(exps))
        self.expiry_combo.blockSignals(False)
        self.plot_smile()

    def _forward_clicked(self, index) -> None:
        """Plot the smile of the expiry of the forward table's clicked row."""
        frame = self.forward_model.frame()
        if index.isValid() and index.row() < len(frame):
            i = self.expiry_combo.findData(str(frame["expiry"].iloc[index.row()]))
            if i >= 0:
                self.expiry_combo.setCurrentIndex(i)

    def fitted_slice(self, expiry: str | None):
        """The last run's fitted slice (:class:`optiond.surface.model.Slice`) of ``expiry``, or
        None (no surface, or the fit left that expiry out)."""
        if self.surface is None or not expiry:
            return None
        return next((sl for sl in self.surface.slices if sl.expiry == str(expiry)), None)

    def plot_smile(self, *_args) -> None:
        """Plot the chosen expiry's smile: the out-of-the-money mid IV per strike (``iv_otm``)
        as points with bars from the bid IV to the ask IV, the fitted SVI smile
        ``sqrt(w(k) / T)`` as a line over the quoted range (when the run has a surface), the
        file's quoted IVs for comparison, and the expiry's forward marked; x is the strike or
        ln(K/F), y the IV in vol points (%)."""
        p = self.smile_plot
        p.clear()
        exp = self.expiry_combo.currentData()
        df = self.table_model.frame()
        if not exp or df.empty:
            p.setTitle("Implied-volatility smile (run a chain first)")
            return
        s = backend.smile(df, exp)
        log_x = self.axis_combo.currentData() == "log_moneyness"
        p.setLabel("bottom", "ln(K/F)" if log_x else "strike")
        x = s.log_moneyness if log_x else s.strike
        qk, qv = s.quoted
        if qk.size and (not log_x or np.isfinite(s.forward)):
            qx = np.log(qk / s.forward) if log_x else qk
            p.plot(qx, 100 * qv, name="quoted in the file", pen=None, symbol="x", symbolSize=5,
                   symbolPen=pg.mkPen((120, 120, 120)), symbolBrush=pg.mkBrush(120, 120, 120))
        if x.size:
            bars = np.isfinite(s.iv_bid) | np.isfinite(s.iv_ask)  # from the bid IV (or the mid) to the ask IV
            if bars.any():
                iv = s.iv[bars]
                p.addItem(pg.ErrorBarItem(x=x[bars], y=100 * iv, beam=0.0, pen=pg.mkPen((230, 81, 0), width=1.5),
                                          top=100 * np.nan_to_num(s.iv_ask[bars] - iv),
                                          bottom=100 * np.nan_to_num(iv - s.iv_bid[bars])))
            p.plot(x, 100 * s.iv, name="OTM IV (mid), bid–ask bars", pen=None,
                   symbol="o", symbolSize=5, symbolBrush=pg.mkBrush(25, 118, 210), symbolPen=None)
        sl = self.fitted_slice(exp)
        if sl is not None:  # over the quoted range, else the range the fit used
            k = s.log_moneyness[np.isfinite(s.log_moneyness)]
            a, b = (k.min(), k.max()) if k.size >= 2 else tuple(sl.stats.get("fit_k_range") or (-0.1, 0.1))
            kk = np.linspace(a - 0.05 * (b - a), b + 0.05 * (b - a), 200)
            with np.errstate(invalid="ignore"):  # the slice's smile: its corrected curve where it has one
                fit = np.sqrt(np.maximum(sl.total_variance(kk), 0.0) / sl.T)
            p.plot(kk if log_x else sl.forward * np.exp(kk), 100 * fit, name="SVI fit",
                   pen=pg.mkPen((198, 40, 40), width=2))
        if np.isfinite(s.forward):
            p.addItem(pg.InfiniteLine(0.0 if log_x else s.forward, angle=90,
                                      pen=pg.mkPen((80, 80, 80), style=Qt.PenStyle.DashLine),
                                      label=f"forward {s.forward:.2f}",
                                      labelOpts={"position": 0.95, "color": (80, 80, 80)}))
        name = df["underlying"].iloc[0] if "underlying" in df and len(df) else ""
        p.setTitle(f"{name} {exp}: smile (out-of-the-money side)")
        p.enableAutoRange()
        if x.size >= 2:  # frame the smile itself: the file's stray quotes and the wings' wide bars may run off
            lo, hi = np.nanmin(s.iv), np.nanmax(s.iv)
            pad = 0.08 * (hi - lo) + 0.005
            p.setYRange(100 * (lo - pad), 100 * (hi + pad), padding=0)

    # ------------------------------------------------------------------ export

    def export_dialog(self) -> None:
        """Ask where to write the rows shown, then write them."""
        stem = Path(self.outcome.path).stem if self.outcome and self.outcome.path else "results"
        path, _ = QFileDialog.getSaveFileName(self, "Export results", str(Path(self._last_dir) / f"{stem}_priced.csv"),
                                              "CSV files (*.csv)")
        if path:
            self.export_csv(path)

    def export_csv(self, path: str | Path) -> int:
        """Write the rows shown (filtered, in the order shown, every column) to ``path``, whole
        or not at all (:func:`optiond.files.write_with`); return the number of rows written (0,
        and a message saying why, when the file cannot be written)."""
        df = self.proxy.visible_frame()
        try:
            write_with(path, lambda f: df.to_csv(f, index=False), newline="")
        except OSError as e:  # the file at path, if any, is as it was
            self.message.setText(f"<span style='color:#c62828'>Cannot write {path}: {e.strerror or e}</span>")
            return 0
        self.message.setText(f"Wrote {len(df):,} rows to {path}")
        return len(df)

    # ------------------------------------------------------------------ settings and shutdown

    def save_settings(self, s: QSettings) -> None:
        """Remember the file list, the chosen file, model and settings."""
        recent = [self.file_combo.itemData(i) for i in range(self.file_combo.count())]
        bundled = {str(p) for p in backend.bundled_files()}
        s.setValue("batch/recent", [p for p in recent if p and p not in bundled][:MAX_RECENT])
        s.setValue("batch/file", self.path)
        s.setValue("batch/model", self.model_combo.currentData())
        s.setValue("batch/steps", self.steps.value())
        s.setValue("batch/rate", self.rate.value())
        s.setValue("batch/dividend_yield", self.dividend.value())
        s.setValue("batch/carry", self.carry.currentData())
        s.setValue("batch/quote_time", self.quote_time.text())
        s.setValue("batch/fit_surface", self.fit_surface.isChecked())
        s.setValue("batch/dividend_file", self.dividend_file)
        s.setValue("batch/smile_x", self.axis_combo.currentData())
        s.setValue("batch/right_split", self.right_split.saveState())
        s.setValue("batch/eps", self.eps.value())
        s.setValue("batch/device", self.device.currentText())
        s.setValue("batch/last_dir", self._last_dir)
        s.setValue("batch/split", self.split.saveState())

    def load_settings(self, s: QSettings) -> None:
        """Restore what :meth:`save_settings` wrote (missing or bad values keep the defaults)."""
        recent = s.value("batch/recent", [])
        if isinstance(recent, str):  # a one-element list comes back as a string from INI files
            recent = [recent]
        for path in reversed([p for p in recent or [] if p and Path(p).is_file()]):
            if self.file_combo.findData(path) < 0:
                self.file_combo.insertItem(0, Path(path).name, path)
                self.file_combo.setItemData(0, path, Qt.ItemDataRole.ToolTipRole)
        self.steps.setValue(int(s.value("batch/steps", self.steps.value(), type=int)))
        self.rate.setValue(float(s.value("batch/rate", self.rate.value(), type=float)))
        self.dividend.setValue(float(s.value("batch/dividend_yield", self.dividend.value(), type=float)))
        for combo, key in ((self.carry, "batch/carry"), (self.axis_combo, "batch/smile_x")):
            i = combo.findData(str(s.value(key, combo.currentData())))
            if i >= 0:
                combo.setCurrentIndex(i)
        self.quote_time.setText(str(s.value("batch/quote_time", "") or ""))
        self.fit_surface.setChecked(bool(s.value("batch/fit_surface", True, type=bool)))
        dividend_file = str(s.value("batch/dividend_file", "") or "")
        if dividend_file and Path(dividend_file).is_file():
            self.set_dividend_file(dividend_file)
        self.eps.setValue(float(s.value("batch/eps", self.eps.value(), type=float)))
        i = self.device.findText(str(s.value("batch/device", "auto")))
        if i >= 0:
            self.device.setCurrentIndex(i)
        i = self.model_combo.findData(str(s.value("batch/model", "binomial")))
        if i >= 0 and self.model_combo.model().item(i).isEnabled():
            self.model_combo.setCurrentIndex(i)
        last_dir = s.value("batch/last_dir", "")
        if last_dir and Path(str(last_dir)).is_dir():
            self._last_dir = str(last_dir)
        path = s.value("batch/file", "")
        if path and Path(str(path)).is_file():
            self.set_file(str(path))
        split = s.value("batch/split")
        if split is not None:
            self.split.restoreState(split)
        right = s.value("batch/right_split")
        if right is not None:
            self.right_split.restoreState(right)
        self._update_buttons()

    def shutdown(self, wait_ms: int = 10000) -> None:
        """Cancel a run in progress and wait for its thread (closing the window)."""
        if self.runner is not None:
            self.runner.cancel()
        self.pool.waitForDone(wait_ms)
