"""The panel's main window: the Status, Timings, Batch and Surface tabs, wired to the status
monitor and the batch client, with settings remembered between runs (QSettings)."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QSettings
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QLabel, QMainWindow, QTabWidget

from .. import __version__
from ..daemon import paths
from . import backend
from .batch_tab import BatchTab
from .status_tab import StatusTab
from .surface_tab import SurfaceTab
from .timings_tab import TimingsTab
from .workers import StatusMonitor

ORGANIZATION = "optiond"
APPLICATION = "panel"

pg.setConfigOptions(background="w", foreground="k", antialias=True)


def default_settings() -> QSettings:
    """The panel's settings store (per user: the registry on Windows, an INI file elsewhere)."""
    return QSettings(ORGANIZATION, APPLICATION)


class MainWindow(QMainWindow):
    """The panel.

    Args:
        connection_file: the daemon's connection file; default as the client finds it
            (``$OPTIOND_CONNECTION_FILE``, else the per-user default), resolved once.
        settings: where to remember things (default :func:`default_settings`).
        poll_ms: status poll interval.
        batch_timeout_s: reply timeout of one batch request (a chunk is sized to about half
            a second, so this only matters when the daemon hangs).
    """

    def __init__(self, connection_file: str | Path | None = None, settings: QSettings | None = None, *,
                 poll_ms: int = 1000, batch_timeout_s: float = 120.0):
        super().__init__()
        from ..daemon.client import Client

        self.connection_file = paths.connection_file(connection_file)
        self.settings = settings if settings is not None else default_settings()
        self.setWindowTitle(f"optiond panel {__version__} - {self.connection_file}")
        self.batch_client = Client(self.connection_file, timeout=batch_timeout_s, retries=0)
        self._closed = False

        self.tabs = QTabWidget()
        self.status_tab = StatusTab(self.connection_file)
        self.timings_tab = TimingsTab()
        self.batch_tab = BatchTab(self.batch_client)
        self.surface_tab = SurfaceTab()
        self.tabs.addTab(self.status_tab, "Status")
        self.tabs.addTab(self.timings_tab, "Timings")
        self.tabs.addTab(self.batch_tab, "Batch")
        self.tabs.addTab(self.surface_tab, "Surface")
        self.setCentralWidget(self.tabs)
        self.daemon_label = QLabel("Daemon: checking…")
        self.statusBar().addPermanentWidget(self.daemon_label)

        self.batch_tab.request_timed.connect(self.timings_tab.add_request)
        self.batch_tab.job_finished.connect(self.timings_tab.add_job)
        self.batch_tab.job_finished.connect(self.surface_tab.show_outcome)
        self.batch_tab.job_finished.connect(lambda o: self.statusBar().showMessage(o.summary(), 15000))

        self.monitor = StatusMonitor(self.connection_file, interval_ms=poll_ms)
        self.monitor.state.connect(self._on_state)

        self.resize(1280, 820)
        self.load_settings()
        self.monitor.start_in_thread()

    def _on_state(self, state: backend.DaemonState) -> None:
        if self._closed:
            return
        self.status_tab.show_state(state)
        self.timings_tab.add_heartbeat(state)
        self.batch_tab.set_daemon_state(state)
        f = state.fields()
        self.daemon_label.setText(f"Daemon up · {f['version']} · {f['engine_devices']}" if state.up else "Daemon down")

    # ------------------------------------------------------------------ settings

    def load_settings(self) -> None:
        """Restore the window's geometry, tab, the Batch tab's choices and the Surface tab's split."""
        s = self.settings
        geometry = s.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        self.tabs.setCurrentIndex(int(s.value("window/tab", 0, type=int)))
        self.batch_tab.load_settings(s)
        self.surface_tab.load_settings(s)

    def save_settings(self) -> None:
        """Remember the window's geometry, tab, the Batch tab's choices and the Surface tab's split."""
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/tab", self.tabs.currentIndex())
        self.batch_tab.save_settings(s)
        self.surface_tab.save_settings(s)
        s.sync()

    # ------------------------------------------------------------------ closing

    def shutdown(self) -> None:
        """Save settings, cancel a batch, stop the monitor and close the clients (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.save_settings()
        self.batch_tab.shutdown()
        self.monitor.stop_thread()
        self.batch_client.close()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)
