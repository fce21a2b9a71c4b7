"""``optiond`` command line.

Each group of commands lives in its own module exposing ``register(subparsers)``; this file
only lists them, with each command's one-line help, so features add commands without touching
each other. A module is imported only to run one of its commands (or show its ``--help``):
``optiond --help``, ``--version``, ``status`` and ``stop`` load no numerical library.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from . import __version__

#: the modules that add sub-commands (each has ``register(subparsers)``), each with the
#: commands it adds and their one-line help as ``optiond --help`` lists them (the module's own
#: ``add_parser(help=...)`` says the same: tests/test_startup.py checks it)
COMMANDS: dict[str, dict[str, str]] = {
    "optiond.commands.pricing": {"price": "price a portfolio CSV",
                                 "chain": "implied vols, prices and Greeks for an option chain CSV"},
    "optiond.daemon.commands": {"serve": "run the pricing daemon",
                                "status": "show whether the daemon runs, and its state (exit 1 when down)",
                                "stop": "shut the daemon down cleanly"},
    "optiond.commands.warmup": {"warmup": "compile every pricing kernel into the on-disk cache (once, at install)"},
    "optiond.commands.service": {"service": "service-manager glue (systemd unit, Windows service)"},
    "optiond.commands.mlmc": {"mlmc-test": "Giles' MLMC convergence and complexity report (mlmc_test)"},
    "optiond.commands.panel": {"panel": "desktop panel: daemon status, timings, batch runs, surface"},
    "optiond.commands.calibrate": {"calibrate": "measure the CPU/GPU crossovers of the binomial pricer"},
    "optiond.commands.objects": {"objects": "named market objects kept in the daemon (fitted surfaces)"},
    "optiond.commands.heston": {"heston-fit": "fit the Heston model to a European option chain CSV"},
}
#: the modules, in the order ``optiond --help`` lists their commands
COMMAND_MODULES = list(COMMANDS)


class Parser(argparse.ArgumentParser):
    """argparse's parser (and its sub-commands' parsers) with a usage error as one line on
    stderr and exit status :data:`EXIT_INPUT`, as every other input error: an unknown option,
    a missing argument, or an option value its ``type`` refuses
    (:mod:`optiond.commands.options`)."""

    def error(self, message: str):  # noqa: D401 (argparse's hook)
        self.exit(EXIT_INPUT, f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``optiond`` parser. ``command``: only the module of that command registers its
    commands (the others are listed by name and help, their modules not imported; ``""``: none
    registers); None: every module registers (the whole parser)."""
    parser = Parser(prog="optiond", description="Option pricing on CPU and GPU: CLI, daemon and tools.")
    parser.add_argument("--version", action="version", version=f"optiond {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module, commands in COMMANDS.items():
        if command is None or command in commands:
            importlib.import_module(module).register(sub)
        else:
            for name, text in commands.items():
                sub.add_parser(name, help=text, add_help=False)
    return parser


def command_of(argv: list[str]) -> str:
    """The sub-command named in ``argv`` (the first word not an option: the global options
    take no value), or ``""``."""
    return next((a for a in argv if not a.startswith("-")), "")


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None, *, no_command: int = 2) -> int:
    """Parse ``argv``, set up console logging from ``-v`` and run the chosen command's
    ``func``; the one runner of every optiond entry point (this CLI, ``python -m
    optiond.daemon.commands``). Returns the exit status (``no_command`` when none was given,
    130 on Ctrl-C; :data:`EXIT_INPUT` for a usage error, 0 after ``--help``)."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # the one line is out (Parser.error); the status is returned, as every other
        return e.code if isinstance(e.code, int) else EXIT_INPUT
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
    except Exception as e:  # noqa: BLE001 (the expected ones become one line; the rest propagate)
        if getattr(args, "debug", False):
            raise
        found = expected_error(e, args)
        if found is None:
            raise
        code, text = found
        command = getattr(args, "command", None)
        print(f"optiond{' ' + command if command else ''}: {' '.join(text.split())}", file=sys.stderr)
        return code


#: exit status of an expected error: bad input (file, column, option, row limits of the whole table)
EXIT_INPUT = 2
#: no daemon answered, or it stopped the work (refused, cancelled, deadline)
EXIT_DAEMON = 3


def expected_error(e: BaseException, args: argparse.Namespace | None = None) -> tuple[int, str] | None:
    """The exit status and one-line message of an error the user can act on, or None for a bug.

    Expected: :class:`optiond.models.InvalidInputError`, :class:`optiond.columns.TableFileError`
    and the daemon's answer that it holds no such object (``UnknownObject``, ``StaleHandle``,
    ``WrongKind``) (exit :data:`EXIT_INPUT`); the daemon client's
    :class:`DaemonUnavailable` and :class:`DaemonError` family (refused, cancelled, deadline) and
    the daemon's :class:`LimitExceeded` (exit :data:`EXIT_DAEMON`); an output file that cannot
    be written, :class:`optiond.files.WriteError` (a full disk, no permission, no directory; the
    previous file is kept) (exit :data:`EXIT_INPUT`, as a bad output path); another
    :class:`OSError` (exit 1). With ``--daemon-only`` the message says how
    to get a daemon or price without one.
    """
    from .columns import TableFileError
    from .files import WriteError
    from .models import InvalidInputError

    if isinstance(e, (InvalidInputError, TableFileError, WriteError)):
        return EXIT_INPUT, str(e)
    if type(e).__module__.startswith("optiond.daemon"):  # the client is imported only where used
        from .daemon.client import DaemonError, DaemonUnavailable
        from .limits import LimitExceeded

        if isinstance(e, DaemonUnavailable):
            hint = ""
            if getattr(args, "daemon_only", False):
                hint = ("" if "optiond serve" in str(e) else "; start one with 'optiond serve --detach'") + \
                       ("; or drop --daemon-only to price in this process")
            return EXIT_DAEMON, f"no daemon: {e}{hint}"
        if isinstance(e, DaemonError) and e.ename in ("UnknownObject", "StaleHandle", "WrongKind"):
            return EXIT_INPUT, str(e)
        if isinstance(e, DaemonError):
            return EXIT_DAEMON, f"the daemon {'refused' if e.ename in ('LimitExceeded', 'DaemonDraining') else 'stopped'} " \
                                f"the request: {e}"
        if isinstance(e, LimitExceeded):
            return EXIT_DAEMON, str(e)
    if isinstance(e, OSError):
        return 1, f"{e.strerror or e}" + (f": {e.filename}" if getattr(e, "filename", None) else "")
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run(build_parser(command_of(argv)), argv)


if __name__ == "__main__":
    sys.exit(main())
