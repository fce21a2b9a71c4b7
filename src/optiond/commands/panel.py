"""``optiond panel``: the desktop panel (needs the ``gui`` extra: PySide6, pyqtgraph,
nvidia-ml-py). The same program is installed as the GUI script ``optiond-panel``."""

from __future__ import annotations

import argparse
import sys


def cmd_panel(args: argparse.Namespace) -> int:
    """Open the panel; exit 2 with a hint when the gui extra is missing."""
    try:
        from ..gui import app
        import PySide6  # noqa: F401
    except ImportError as e:
        print(f"optiond panel needs the gui extra: pip install 'optiond[gui]' ({e})", file=sys.stderr)
        return 2
    return app.run(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``optiond panel`` to the CLI."""
    from ..gui import app

    p = sub.add_parser("panel", help="desktop panel: daemon status, timings, batch runs",
                       description="Desktop panel: daemon up/down (with a button to start it), GPUs, request "
                                   "timings, and batch runs of option chains and portfolios on the daemon with "
                                   "progress, Cancel, a results table, the implied-volatility smile and CSV export.")
    app.add_arguments(p)
    p.set_defaults(func=cmd_panel)
