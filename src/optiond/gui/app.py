"""Entry point of the panel: ``optiond panel`` and the GUI script ``optiond-panel``."""

from __future__ import annotations

import argparse
import signal
import sys

TABS = ("status", "timings", "batch", "surface")


def build_parser() -> argparse.ArgumentParser:
    """The panel's own options (Qt's, such as ``-platform offscreen``, pass through)."""
    p = argparse.ArgumentParser(prog="optiond-panel", description="optiond desktop panel: daemon and GPU status, "
                                "request timings, batch runs of option chains and portfolios, the fitted "
                                "volatility surface.")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the panel's options to ``p`` (shared with ``optiond panel``)."""
    p.add_argument("--connection-file", help="the daemon's connection file (default: $OPTIOND_CONNECTION_FILE, "
                   "else the per-user default, as the client finds it)")
    p.add_argument("--tab", choices=TABS, help="open on this tab (default: the last one used)")
    p.add_argument("--quit-after", type=float, metavar="SECONDS",
                   help="close the panel by itself after this many seconds (a start-up check for IT and tests)")


def run(args: argparse.Namespace, qt_args: list[str] | None = None) -> int:
    """Show the panel until it is closed; return the exit code."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from .window import APPLICATION, ORGANIZATION, MainWindow

    app = QApplication.instance() or QApplication([sys.argv[0], *(qt_args or [])])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    win = MainWindow(args.connection_file)
    if args.tab:
        win.tabs.setCurrentIndex(TABS.index(args.tab))
    win.show()
    # Ctrl+C in the terminal closes the window cleanly: Python handles signals only between
    # Qt events, so a timer wakes the interpreter a few times a second
    signal.signal(signal.SIGINT, lambda *_: win.close())
    if args.quit_after is not None:
        QTimer.singleShot(max(0, int(args.quit_after * 1000)), win.close)
    wake = QTimer()
    wake.timeout.connect(lambda: None)
    wake.start(250)
    try:
        return int(app.exec())
    finally:
        wake.stop()
        win.shutdown()


def start(args: argparse.Namespace, qt_args: list[str] | None = None) -> int:
    """:func:`run` once Qt can start: exit 2 with a one-line hint on standard error, before Qt
    is loaded, when the gui extra is not installed or when Qt would start on X11 (xcb) and
    system libraries its xcb plugin needs are missing (where Qt itself would abort)."""
    try:
        import PySide6  # noqa: F401
    except ImportError as e:
        print(f"optiond panel needs the gui extra: pip install 'optiond[gui]' ({e})", file=sys.stderr)
        return 2
    from . import desktop

    problem = desktop.check(qt_args=qt_args or ())
    if problem:
        print(f"optiond panel: {problem}", file=sys.stderr)
        return 2
    return run(args, qt_args)


def main(argv: list[str] | None = None) -> int:
    """``optiond-panel [--connection-file PATH] [--tab TAB] [--quit-after SECONDS]``."""
    args, qt_args = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    return start(args, qt_args)


if __name__ == "__main__":
    sys.exit(main())
