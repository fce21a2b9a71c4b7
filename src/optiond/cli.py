"""``optiond`` command line.

Each group of commands lives in its own module exposing ``register(subparsers)``; this file
only lists them, so features add commands without touching each other.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from . import __version__

#: modules that add sub-commands (each has ``register(subparsers)``)
COMMAND_MODULES = [
    "optiond.commands.pricing",   # price, chain
    "optiond.daemon.commands",    # serve, status, stop
    "optiond.commands.service",   # service unit / windows
    "optiond.commands.mlmc",      # mlmc-test
    "optiond.commands.panel",     # panel (PySide6)
    "optiond.commands.calibrate", # calibrate (GPU/CPU crossovers)
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="optiond", description="Option pricing on CPU and GPU: CLI, daemon and tools.")
    parser.add_argument("--version", action="version", version=f"optiond {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None, *, no_command: int = 2) -> int:
    """Parse ``argv``, set up console logging from ``-v`` and run the chosen command's
    ``func``; the one runner of every optiond entry point (this CLI, ``python -m
    optiond.daemon.commands``). Returns the exit status (``no_command`` when none was given,
    130 on Ctrl-C)."""
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for h in logging.getLogger().handlers:  # the console keeps this level when a JSON log wants INFO
        h.setLevel(level)
    if not getattr(args, "func", None):
        parser.print_help()
        return no_command
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
