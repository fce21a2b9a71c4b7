"""Work the panel does off the GUI thread.

* :class:`StatusMonitor` lives on a :class:`QThread` of its own and reads the daemon's status
  and the GPUs once a second (a :class:`QTimer` in that thread), emitting a
  :class:`optiond.gui.backend.DaemonState` each time. A daemon that stops answering shows as
  down on the next tick: its client has a 1 s reply timeout, no retries, and gives up at once
  when the connection file is gone (a clean shutdown removes it).
* :class:`BatchRunner` is a :class:`QRunnable` for a :class:`QThreadPool`: it runs
  :func:`optiond.gui.backend.run_batch` and reports progress, each request's timing and the
  outcome through Qt signals, which Qt delivers on the GUI thread.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
from PySide6.QtCore import QObject, QRunnable, QThread, QTimer, Signal, Slot

from . import backend, devices


class StatusMonitor(QObject):
    """Polls the daemon (``status`` on its control channel) and NVML every ``interval_ms``.

    Use :meth:`start_in_thread` and :meth:`stop_thread`; ``state`` fires with each reading.
    """

    state = Signal(object)

    def __init__(self, connection_file: str | Path, interval_ms: int = 1000, timeout_s: float = 1.0):
        super().__init__()
        self.connection_file = Path(connection_file)
        self.interval_ms = int(interval_ms)
        self.timeout_s = float(timeout_s)
        self._client = None
        self._timer: QTimer | None = None
        self._cupy: str | None = None
        self._thread: QThread | None = None

    # ---- runs in the monitor thread

    @Slot()
    def _begin(self) -> None:
        from ..daemon.client import Client

        self._client = Client(self.connection_file, timeout=self.timeout_s, retries=0, down_s=0.0,
                              connect_timeout=min(0.5, self.timeout_s))
        self._cupy = devices.cupy_version()
        self._timer = QTimer(self)
        self._timer.setInterval(self.interval_ms)
        self._timer.timeout.connect(self.poll)
        self._timer.start()
        self.poll()

    @Slot()
    def poll(self) -> None:
        """Read the daemon and the GPUs once and emit ``state``."""
        if self._client is None:
            return
        self.state.emit(backend.read_state(self._client, timeout=self.timeout_s, cupy_local=self._cupy))

    @Slot()
    def _end(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._thread is not None:
            self._thread.quit()

    # ---- called from the GUI thread

    def start_in_thread(self) -> None:
        """Move to a new thread and start polling."""
        self._thread = QThread()
        self._thread.setObjectName("optiond-status")
        self.moveToThread(self._thread)
        self._thread.started.connect(self._begin)
        self._thread.start()

    def stop_thread(self, wait_ms: int = 5000) -> None:
        """Stop polling, close the client and end the thread (waits for a poll in progress)."""
        t = self._thread
        if t is None:
            return
        if t.isRunning():
            QTimer.singleShot(0, self, self._end)  # queued into the monitor thread
            t.wait(wait_ms)
        self._thread = None


class BatchSignals(QObject):
    """Signals of a :class:`BatchRunner` (a QRunnable is no QObject)."""

    progress = Signal(int, int)      # rows done, rows in all
    request = Signal(object)         # backend.RequestTiming
    finished = Signal(object)        # backend.BatchOutcome
    stage = Signal(str)              # what the run does now (market solve, pricing)


class BatchRunner(QRunnable):
    """One batch run on a pool thread; :meth:`cancel` stops it between chunks (and asks the
    daemon to drop the request in flight when the client can)."""

    def __init__(self, df: pd.DataFrame, kind: str, client, settings: backend.BatchSettings, path: str = "",
                 device_hint: str = "daemon"):
        super().__init__()
        self.setAutoDelete(False)
        self.signals = BatchSignals()
        self.cancel_event = threading.Event()
        self.df, self.kind, self.client, self.settings, self.path = df, kind, client, settings, path
        self.device_hint = device_hint
        self._pricers: list[backend.PanelPricer] = []

    def run(self) -> None:
        """Price the batch (on the pool thread) and emit ``finished`` whatever happens."""
        try:
            outcome = backend.run_batch(self.df, self.kind, self.client, self.settings, cancel=self.cancel_event,
                                        progress=self.signals.progress.emit, on_request=self.signals.request.emit,
                                        path=self.path, pricer_out=self._pricers, device_hint=self.device_hint,
                                        stage=self.signals.stage.emit)
        except Exception as e:  # noqa: BLE001 (the GUI must always hear back)
            outcome = backend.BatchOutcome(self.path, self.kind, self.settings.model, len(self.df), 0,
                                           self.df.iloc[:0], 0.0, error=f"{type(e).__name__}: {e}")
        self.signals.finished.emit(outcome)

    def cancel(self) -> None:
        """Stop after the request in flight; ask the daemon to cancel it when it can."""
        self.cancel_event.set()
        for p in self._pricers:
            if p.can_cancel_remote:  # a network call: keep it off the GUI thread
                threading.Thread(target=p.cancel_remote, name="optiond-cancel", daemon=True).start()
