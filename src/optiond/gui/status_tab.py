"""The Status tab: is the daemon up, what is it, and how are the GPUs."""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QProcess, Qt, Signal
from PySide6.QtWidgets import (QFormLayout, QGridLayout, QGroupBox, QHBoxLayout, QHeaderView, QLabel, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from . import backend, devices

#: (group title, [(field key, label)]) in display order
GROUPS = (
    ("Daemon", (("version", "Version"), ("pid", "Process id"), ("uptime", "Uptime"), ("heartbeat", "Status round trip"),
                ("requests", "Requests served"), ("errors", "Errors"), ("engine_devices", "Engine devices"),
                ("endpoint", "Endpoint"), ("connection_file", "Connection file"))),
    ("Workers", (("mpi_ranks", "MPI ranks alive"), ("cpu_threads", "CPU threads"), ("queue_depth", "Queue depth"),
                 ("cache_hit_ratio", "Cache hit ratio"), ("gpu_memory", "GPU memory (daemon)"))),
    ("GPU software", (("cuda_version", "CUDA"), ("cupy_version", "CuPy"))),
)

_UP_STYLE = "color: white; background: #2e7d32; padding: 6px 12px; border-radius: 4px; font-size: 16pt; font-weight: bold"
_DOWN_STYLE = "color: white; background: #c62828; padding: 6px 12px; border-radius: 4px; font-size: 16pt; font-weight: bold"
_UNKNOWN_STYLE = "color: black; background: #bdbdbd; padding: 6px 12px; border-radius: 4px; font-size: 16pt"


class StatusTab(QWidget):
    """Daemon up/down with a Start button, its facts, the workers and the GPUs.

    ``values`` maps each field key (see :data:`GROUPS`, plus ``state``, ``reason`` and
    ``gpu_summary``) to the label showing it; :meth:`show_state` fills them in.
    """

    #: emitted with (exit code, output) when a daemon started by the button has returned
    start_finished = Signal(int, str)

    def __init__(self, connection_file: Path, parent=None):
        super().__init__(parent)
        self.connection_file = Path(connection_file)
        self.state: backend.DaemonState | None = None
        self.values: dict[str, QLabel] = {}
        self._process: QProcess | None = None

        banner = QHBoxLayout()
        self.values["state"] = state = QLabel("Checking…")
        state.setStyleSheet(_UNKNOWN_STYLE)
        banner.addWidget(state)
        self.start_button = QPushButton("Start daemon")
        self.start_button.setToolTip(f"optiond serve --detach --connection-file {self.connection_file}")
        self.start_button.clicked.connect(self.start_daemon)
        self.start_button.setVisible(False)
        banner.addWidget(self.start_button)
        banner.addStretch(1)
        self.values["reason"] = reason = QLabel("")
        reason.setWordWrap(True)
        reason.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        grid = QGridLayout()
        for i, (title, rows) in enumerate(GROUPS):
            box = QGroupBox(title)
            form = QFormLayout(box)
            for key, label in rows:
                value = QLabel(backend.NA)
                value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                value.setWordWrap(True)
                self.values[key] = value
                form.addRow(label + ":", value)
            row, col, rowspan = ((0, 0, 2), (0, 1, 1), (1, 1, 1))[i]  # Daemon on the left, the rest beside it
            grid.addWidget(box, row, col, rowspan, 1)

        gpu_box = QGroupBox("GPUs (NVML)")
        gpu_layout = QVBoxLayout(gpu_box)
        self.values["gpu_summary"] = summary = QLabel(backend.NA)
        summary.setStyleSheet("font-size: 12pt")
        summary.setWordWrap(True)
        gpu_layout.addWidget(summary)
        self.gpu_table = QTableWidget(0, 5)
        self.gpu_table.setHorizontalHeaderLabels(["GPU", "Name", "Memory used / total", "Utilisation", "Temperature"])
        self.gpu_table.verticalHeader().setVisible(False)
        self.gpu_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.gpu_table.horizontalHeader().setStretchLastSection(True)
        self.gpu_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.gpu_table.setMaximumHeight(220)
        gpu_layout.addWidget(self.gpu_table)

        layout = QVBoxLayout(self)
        layout.addLayout(banner)
        layout.addWidget(reason)
        layout.addLayout(grid)
        layout.addWidget(gpu_box)
        layout.addStretch(1)

    # ------------------------------------------------------------------ state

    def show_state(self, state: backend.DaemonState) -> None:
        """Show one reading (called on the GUI thread for every poll)."""
        self.state = state
        texts = state.fields()
        for key, text in texts.items():
            if key in self.values:
                self.values[key].setText(text)
        self.values["state"].setStyleSheet(_UP_STYLE if state.up else _DOWN_STYLE)
        starting = self._process is not None
        self.values["reason"].setText("" if state.up else (state.reason if not starting else "Starting the daemon…"))
        self.start_button.setVisible(not state.up)
        self.start_button.setEnabled(not state.up and not starting)
        self._show_gpus(state.gpus)

    def _show_gpus(self, snap: devices.GpuSnapshot) -> None:
        self.gpu_table.setVisible(bool(snap.gpus))
        self.gpu_table.setRowCount(len(snap.gpus))
        for r, g in enumerate(snap.gpus):
            mem = (f"{devices.format_bytes(g.memory_used)} / {devices.format_bytes(g.memory_total)}"
                   + (f" ({100 * g.memory_used / g.memory_total:.0f} %)" if g.memory_used is not None and g.memory_total else ""))
            cells = (str(g.index), g.name, mem, backend.NA if g.utilization is None else f"{g.utilization} %",
                     backend.NA if g.temperature is None else f"{g.temperature} °C")
            for c, text in enumerate(cells):
                item = self.gpu_table.item(r, c)
                if item is None:
                    self.gpu_table.setItem(r, c, QTableWidgetItem(text))
                elif item.text() != text:
                    item.setText(text)
        if snap.gpus and snap.driver_version:
            self.values["gpu_summary"].setText(f"{len(snap.gpus)} GPU{'s' if len(snap.gpus) > 1 else ''}, "
                                               f"driver {snap.driver_version}")

    # ------------------------------------------------------------------ start button

    def start_command(self) -> list[str]:
        """The command the Start button runs: ``optiond serve --detach`` on this panel's
        connection file (through this Python, so the same installation serves)."""
        return [sys.executable, "-m", "optiond.daemon.commands", "serve", "--detach", "--connection-file",
                str(self.connection_file)]

    def start_daemon(self) -> None:
        """Start the daemon in the background (a QProcess: the GUI does not wait for it)."""
        if self._process is not None:
            return
        cmd = self.start_command()
        proc = QProcess(self)
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        proc.finished.connect(self._started)
        proc.errorOccurred.connect(self._start_error)
        self._process = proc
        self.start_button.setEnabled(False)
        self.values["reason"].setText("Starting the daemon…")
        proc.start(cmd[0], cmd[1:])

    def _start_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self._process is not None:
            self._started(-1, QProcess.ExitStatus.CrashExit)

    def _started(self, code: int, status: QProcess.ExitStatus) -> None:
        proc, self._process = self._process, None
        if proc is None:
            return
        out = bytes(proc.readAll().data()).decode(errors="replace").strip()
        proc.deleteLater()
        ok = code == 0 and status == QProcess.ExitStatus.NormalExit
        self.values["reason"].setText(out if not ok else f"{out}\nWaiting for the first heartbeat…")
        self.start_button.setEnabled(not (self.state and self.state.up))
        self.start_finished.emit(code, out)
