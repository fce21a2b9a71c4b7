"""The Timings tab: recent request latencies by model and device (live chart) and the last jobs."""

from __future__ import annotations

import time
from collections import deque

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QHeaderView, QLabel, QSplitter, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from . import backend

HEARTBEAT_SERIES = "status (heartbeat) · control channel"
JOB_COLUMNS = ("finished", "file", "model", "rows", "device", "elapsed (s)", "throughput (rows/s)", "outcome")


def series_name(t: backend.RequestTiming) -> str:
    """The chart series of a request: method, operation and device."""
    return f"{t.method} {t.op} · {t.device}"


class TimingsTab(QWidget):
    """A log-scale chart of request latencies in milliseconds (one series per method,
    operation and device, the last ``window_s`` seconds, x in seconds before now) and a table
    of the last ``max_jobs`` batch jobs."""

    def __init__(self, parent=None, window_s: float = 600.0, max_points: int = 2000, max_jobs: int = 100):
        super().__init__(parent)
        self.window_s, self.max_points, self.max_jobs = window_s, max_points, max_jobs
        self.series: dict[str, deque] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._dirty = False

        self.plot = pg.PlotWidget()
        self.plot.setTitle("Request latency (round trip seen by the panel)")
        self.plot.setLabel("left", "latency (ms)")
        self.plot.setLabel("bottom", "time (s), 0 = now")
        self.plot.setLogMode(y=True)
        self.plot.showGrid(x=True, y=True, alpha=0.3)
        self.legend = self.plot.addLegend(offset=(10, 10))

        self.jobs = QTableWidget(0, len(JOB_COLUMNS))
        self.jobs.setHorizontalHeaderLabels(list(JOB_COLUMNS))
        self.jobs.verticalHeader().setVisible(False)
        self.jobs.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.jobs.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.jobs.horizontalHeader().setStretchLastSection(True)
        self.jobs.setSortingEnabled(False)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.plot)
        jobs_box = QWidget()
        jl = QVBoxLayout(jobs_box)
        jl.setContentsMargins(0, 0, 0, 0)
        jl.addWidget(QLabel("Last jobs"))
        jl.addWidget(self.jobs)
        split.addWidget(jobs_box)
        split.setSizes([420, 240])
        layout = QVBoxLayout(self)
        layout.addWidget(split)

        self._timer = QTimer(self)  # redraw at most twice a second, however many requests arrive
        self._timer.setInterval(500)
        self._timer.timeout.connect(self.redraw)
        self._timer.start()

    # ------------------------------------------------------------------ inputs

    def _add(self, name: str, at: float, seconds: float) -> None:
        points = self.series.get(name)
        if points is None:
            points = self.series[name] = deque(maxlen=self.max_points)
        points.append((at, max(seconds, 1e-6)))
        self._dirty = True

    def add_request(self, t: backend.RequestTiming) -> None:
        """Record one pricing request's round trip."""
        self._add(series_name(t), t.at, t.wall_s)

    def add_heartbeat(self, state: backend.DaemonState) -> None:
        """Record the status round trip of a poll (when the daemon answered)."""
        if state.up and state.round_trip_s is not None:
            self._add(HEARTBEAT_SERIES, state.checked_at, state.round_trip_s)

    def add_job(self, outcome: backend.BatchOutcome) -> None:
        """Put a finished (or cancelled, or failed) batch at the top of the jobs table."""
        outcome_text = "cancelled" if outcome.cancelled else ("failed: " + outcome.error) if outcome.error else "done"
        thr = outcome.throughput
        cells = (time.strftime("%H:%M:%S"), outcome.path.rsplit("/", 1)[-1], outcome.model,
                 f"{outcome.done:,} / {outcome.total:,}", outcome.device or backend.NA, f"{outcome.elapsed_s:.3f}",
                 backend.NA if thr != thr else f"{thr:,.0f}", outcome_text)
        self.jobs.insertRow(0)
        for c, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if 3 <= c <= 6:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.jobs.setItem(0, c, item)
        while self.jobs.rowCount() > self.max_jobs:
            self.jobs.removeRow(self.jobs.rowCount() - 1)

    # ------------------------------------------------------------------ drawing

    def redraw(self, force: bool = False) -> None:
        """Redraw the chart if anything arrived since the last time (drops points older
        than ``window_s``)."""
        if not self.series or not (force or self._dirty or self.isVisible()):
            return  # (x is relative to now, so a visible chart is redrawn even without new points)
        self._dirty = False
        now = time.time()
        cutoff = now - self.window_s
        for i, (name, points) in enumerate(self.series.items()):
            while points and points[0][0] < cutoff:
                points.popleft()
            curve = self._curves.get(name)
            if curve is None:
                color = pg.mkColor(150, 150, 150) if name == HEARTBEAT_SERIES else pg.intColor(len(self._curves), hues=8)
                curve = self.plot.plot([], [], name=name, pen=pg.mkPen(color, width=1), symbol="o", symbolSize=5,
                                       symbolBrush=color, symbolPen=None)
                self._curves[name] = curve
            if points:
                xs, ys = zip(*points)
                curve.setData([x - now for x in xs], [1000.0 * y for y in ys])
            else:
                curve.setData([], [])

    def point_count(self, name: str | None = None) -> int:
        """Points held for one series (or all)."""
        if name is not None:
            return len(self.series.get(name, ()))
        return sum(len(p) for p in self.series.values())
