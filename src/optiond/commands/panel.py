"""``optiond panel``: the desktop panel (needs the ``gui`` extra: PySide6, pyqtgraph,
nvidia-ml-py). The same program is installed as the GUI script ``optiond-panel``."""

from __future__ import annotations

import argparse


def cmd_panel(args: argparse.Namespace) -> int:
    """Open the panel; exit 2 with a one-line hint when the gui extra or a system library Qt
    needs is missing."""
    from ..gui import app

    return app.start(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``optiond panel`` to the CLI."""
    from ..gui import app

    p = sub.add_parser("panel", help="desktop panel: daemon status, timings, batch runs, surface",
                       description="Desktop panel: daemon up/down (with a button to start it), GPUs, request "
                                   "timings, and batch runs of option chains and portfolios on the daemon with "
                                   "progress, Cancel, a results table, the implied-volatility smile and CSV export; "
                                   "the volatility surface fitted on a chain (heatmap, fit statistics per expiry).")
    app.add_arguments(p)
    p.set_defaults(func=cmd_panel)
