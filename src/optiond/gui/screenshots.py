"""Regenerate the README's screenshots of the panel from real runs on a running daemon.

    optiond serve --detach
    python -m optiond.gui.screenshots docs/          # writes docs/panel_{status,timings,batch,surface}.png

It prices the bundled TSLA chain, starts the SPY chain at 2,000 steps and cancels it after a
few seconds (so the Timings tab shows several jobs and outcomes), then prices the SPY chain's
expiries up to :data:`FRONT_LAST_EXPIRY` (a file of their own) and shows them on the Batch tab:
the forward table, the smile of :data:`SMILE_EXPIRY` with its fit, the table filtered to its ok
rows; the Surface tab shows their fitted surface with the pointer at the forward of the middle
expiry. The Yahoo files are priced at their snapshot time (:data:`QUOTE_TIME`)
with the default carry (parity). Without a display it renders offscreen. The user's panel
settings are not touched (a temporary settings file is used).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

#: the bundled Yahoo files' snapshot time (examples/data/README.md)
QUOTE_TIME = "10:50"
#: the SPY chain's expiries priced for the Batch tab's screenshot: up to this one
FRONT_LAST_EXPIRY = "2026-03-20"
#: the expiry whose smile the screenshot shows
SMILE_EXPIRY = "2026-03-20"
#: the tabs saved, in the window's order
TABS = ("status", "timings", "batch", "surface")


def _wait(app, cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        app.processEvents()
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def _point_at(tab) -> None:
    """Move the pointer over the Surface tab's map at the forward (k = 0) of the middle expiry."""
    import math

    from PySide6.QtCore import QPointF
    from PySide6.QtTest import QTest

    if tab.surface is None:
        return
    sl = tab.surface.slices[len(tab.surface.slices) // 2]
    view = tab.plot
    QTest.mouseMove(view.viewport(), view.mapFromScene(view.getPlotItem().vb.mapViewToScene(
        QPointF(0.0, math.log10(sl.T)))))


def main(argv: list[str] | None = None) -> int:
    """Run the jobs and save the screenshots of :data:`TABS`; exit 1 if the daemon is down."""
    p = argparse.ArgumentParser(prog="python -m optiond.gui.screenshots", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", nargs="?", default="docs")
    p.add_argument("--connection-file", help="the daemon's connection file (default as the client finds it)")
    p.add_argument("--size", default="1280x820", help="window size, WIDTHxHEIGHT")
    args = p.parse_args(argv)
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QSettings
    from PySide6.QtWidgets import QApplication

    from ..files import write_atomic
    from . import backend
    from .window import MainWindow

    data = backend.bundled_data_dir()
    if data is None:
        print("the bundled chains (examples/data) are not found", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication([sys.argv[0]])
    with tempfile.TemporaryDirectory() as tmp:
        win = MainWindow(args.connection_file, QSettings(str(Path(tmp) / "panel.ini"), QSettings.Format.IniFormat))
        w, h = (int(v) for v in args.size.split("x"))
        win.resize(w, h)
        win.show()
        try:
            if not _wait(app, lambda: win.status_tab.state is not None and win.status_tab.state.up, 15):
                print(f"no daemon answers on {win.connection_file}: start one with 'optiond serve --detach'",
                      file=sys.stderr)
                return 1
            tab = win.batch_tab
            win.tabs.setCurrentIndex(2)
            spy = backend.load_table(data / "spy_chain_2026-02-13.csv")[0]
            front = Path(tmp) / "spy_chain_2026-02-13_front.csv"
            spy[spy["expiry"].astype(str) <= FRONT_LAST_EXPIRY].to_csv(front, index=False)
            tab.quote_time.setText(QUOTE_TIME)
            for path, steps, cancel_after in ((data / "tsla_chain_2026-02-13.csv", 500, None),
                                              (data / "spy_chain_2026-02-13.csv", 2000, 3.0),
                                              (front, 500, None)):
                tab.set_file(path)
                tab.steps.setValue(steps)
                tab.run()
                if cancel_after is not None:
                    _wait(app, lambda: False, cancel_after)
                    tab.cancel()
                _wait(app, lambda: not tab.is_running(), 600)
                print(tab.outcome.summary())
            i = tab.expiry_combo.findData(SMILE_EXPIRY)  # the same expiry in the smile and the table
            if i >= 0:
                tab.expiry_combo.setCurrentIndex(i)
                tab.filter_edit.setText(SMILE_EXPIRY)
            tab.status_filter.setCurrentIndex(max(0, tab.status_filter.findData("ok")))
            out = Path(args.out_dir)
            out.mkdir(parents=True, exist_ok=True)
            for index, name in enumerate(TABS):
                win.tabs.setCurrentIndex(index)
                _wait(app, lambda: False, 1.2)
                if name == "surface":
                    _point_at(win.surface_tab)
                    _wait(app, lambda: False, 0.3)
                path = out / f"panel_{name}.png"
                png = QByteArray()
                buf = QBuffer(png)
                buf.open(QIODevice.OpenModeFlag.WriteOnly)
                if not win.grab().save(buf, "PNG"):
                    print(f"cannot render {path}", file=sys.stderr)
                    return 2
                try:
                    write_atomic(path, bytes(png.data()))  # a whole picture or the previous one
                except OSError as e:
                    print(e, file=sys.stderr)
                    return 2
                print(f"wrote {path}")
        finally:
            win.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
