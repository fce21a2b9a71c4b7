"""``optiond service``: service-manager glue for IT.

* ``optiond service unit [--exec PATH]`` prints the systemd user unit (``Type=notify``,
  watchdog, restart on failure) that ``installer/install.sh`` installs;
* ``optiond service windows ...`` is the Windows service entry point (pywin32's
  ``HandleCommandLine``: install / start / stop / remove), used by ``installer/install.ps1``.
"""

from __future__ import annotations

import argparse
import shutil
import sys

WATCHDOG_SEC = 30

UNIT_TEMPLATE = """\
[Unit]
Description=optiond option-pricing daemon (ZeroMQ on 127.0.0.1)
After=network.target

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec} serve
ExecStop={exec} stop
Restart=on-failure
RestartSec=2
WatchdogSec={watchdog}
TimeoutStartSec=60
# the daemon binds loopback only; no privileges needed
NoNewPrivileges=yes
PrivateTmp=yes

[Install]
WantedBy=default.target
"""


def unit_text(executable: str) -> str:
    """The systemd unit for a daemon started as ``{executable} serve``."""
    return UNIT_TEMPLATE.format(exec=executable, watchdog=WATCHDOG_SEC)


def _cmd_unit(args: argparse.Namespace) -> int:
    exe = args.exec or shutil.which("optiond") or f"{sys.executable} -m optiond.cli"
    sys.stdout.write(unit_text(exe))
    return 0


def _cmd_windows(args: argparse.Namespace) -> int:
    try:
        from ..daemon import winservice
    except ImportError as e:  # pywin32 missing, or not Windows
        print(f"optiond service windows: needs Windows and pywin32 ({e})", file=sys.stderr)
        return 2
    return winservice.handle_command_line([sys.argv[0]] + args.rest)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("service", help="service-manager glue (systemd unit, Windows service)")
    ss = p.add_subparsers(dest="service_command", metavar="WHAT")
    u = ss.add_parser("unit", help="print the systemd user unit")
    u.add_argument("--exec", help="path of the optiond executable (default: the one on PATH)")
    u.set_defaults(func=_cmd_unit)
    w = ss.add_parser("windows", help="install/start/stop/remove the Windows service (pywin32)")
    w.add_argument("rest", nargs=argparse.REMAINDER, help="pywin32 service arguments, e.g. install, start")
    w.set_defaults(func=_cmd_windows)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
