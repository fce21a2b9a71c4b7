"""``optiond service``: service-manager glue for IT.

* ``optiond service unit [--exec PATH] [--workers R] [--metrics-port P]`` prints the systemd
  user unit (``Type=notify``, watchdog, restart on failure) that ``installer/install.sh``
  installs. With ``--workers R`` the daemon runs as an MPI job of R ranks: the main process is
  then ``mpiexec`` and the readiness and watchdog messages come from rank 0, so the unit says
  ``NotifyAccess=all``; a rank that dies ends the job and systemd restarts it. The daemon's
  metrics port is 9464 unless ``--metrics-port`` says otherwise (see ``optiond serve``). The
  unit raises the open-files limit (``LimitNOFILE``, :data:`NOFILE` or the hard limit of the
  shell that generates it where lower; ``--nofile N`` sets another): every peer connection
  costs the daemon a descriptor, and its connection budget is what the limit leaves after a
  reserve (:mod:`optiond.daemon.connections`);
* ``optiond service windows ...`` is the Windows service entry point (pywin32's
  ``HandleCommandLine``: install / start / stop / remove), used by ``installer/install.ps1``.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from . import options

WATCHDOG_SEC = 30
#: the unit's open-files limit (soft and hard), where the generating shell's hard limit allows
NOFILE = 65536

UNIT_TEMPLATE = """\
[Unit]
Description=optiond option-pricing daemon (ZeroMQ on 127.0.0.1)
After=network.target

[Service]
Type=notify
NotifyAccess={notify_access}
ExecStart={exec} serve{serve_args}
ExecStop={exec} stop
Restart=on-failure
RestartSec=2
WatchdogSec={watchdog}
TimeoutStartSec=60
# every peer connection costs a descriptor: room for many clients and a flood of idle ones
LimitNOFILE={nofile}
# the daemon binds loopback only; no privileges needed
NoNewPrivileges=yes
PrivateTmp=yes

[Install]
WantedBy=default.target
"""


def default_nofile() -> int:
    """:data:`NOFILE`, or this process's hard open-files limit where lower (a user unit may not
    raise the limit above its manager's hard limit: systemd would refuse to start it)."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return NOFILE
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return NOFILE if hard == resource.RLIM_INFINITY else max(1024, min(NOFILE, int(hard)))


def unit_text(executable: str, workers: int = 0, metrics_port: int | None = None, nofile: int | None = None) -> str:
    """The systemd unit for a daemon started as ``{executable} serve`` (``workers``: an MPI
    job of that many ranks; ``metrics_port``: another port for /metrics than the daemon's
    default; ``nofile``: its ``LimitNOFILE``, default :func:`default_nofile`)."""
    serve_args = ""
    if metrics_port is not None:
        serve_args += f" --metrics-port {int(metrics_port)}"
    if workers and workers > 1:
        serve_args += f" --workers {int(workers)}"
    return UNIT_TEMPLATE.format(exec=executable, watchdog=WATCHDOG_SEC, serve_args=serve_args,
                                nofile=int(nofile) if nofile else default_nofile(),
                                notify_access="all" if workers and workers > 1 else "main")


def _cmd_unit(args: argparse.Namespace) -> int:
    exe = args.exec or shutil.which("optiond") or f"{sys.executable} -m optiond.cli"
    if args.nofile is not None and args.nofile < 64:
        print("optiond service unit: --nofile must be at least 64", file=sys.stderr)
        return 2
    sys.stdout.write(unit_text(exe, args.workers, args.metrics_port, args.nofile))
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
    u.add_argument("--workers", type=options.non_negative_int, default=0, metavar="R", help="run the daemon as an MPI job of R ranks")
    u.add_argument("--metrics-port", type=options.port, default=None,
                   help="port of /metrics, /healthz, /readyz on 127.0.0.1 (default: the daemon's, 9464)")
    u.add_argument("--nofile", type=options.count, default=None, metavar="N",
                   help=f"the unit's open-files limit, LimitNOFILE (default {NOFILE}, or the hard limit here if lower)")
    u.set_defaults(func=_cmd_unit)
    w = ss.add_parser("windows", help="install/start/stop/remove the Windows service (pywin32)")
    w.add_argument("rest", nargs=argparse.REMAINDER, help="pywin32 service arguments, e.g. install, start")
    w.set_defaults(func=_cmd_windows)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
