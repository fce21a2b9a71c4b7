"""``optiond serve``, ``optiond status`` and ``optiond stop``.

``register(subparsers)`` adds the three commands to the ``optiond`` CLI. The module also runs
on its own (``python -m optiond.daemon.commands serve ...``), which is how ``serve --detach``
starts the background daemon.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from . import paths

EXIT_OK, EXIT_DOWN, EXIT_FAILED = 0, 1, 2


def _client(args: argparse.Namespace, timeout: float, retries: int = 0):
    from .client import Client

    return Client(args.connection_file, timeout=timeout, retries=retries)


def _print_err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground, or with ``--detach`` in the background."""
    conn = paths.connection_file(args.connection_file)
    if args.detach:
        return _detach(conn, args)
    from .server import serve

    def ready(server) -> None:
        _print_err(f"optiond daemon {server.info['version']} (pid {server.pid}) serving on "
                   f"{paths.endpoint(server.info)}; connection file {conn}")

    try:
        return serve(conn, warmup=not args.no_warmup, on_ready=ready)
    except (RuntimeError, OSError) as e:  # another daemon runs already; cannot write the file
        _print_err(f"optiond serve: {e}")
        return EXIT_FAILED


def _detach(conn: Path, args: argparse.Namespace) -> int:
    """Start ``serve`` in a new session, detached from this terminal; return once it answers."""
    from .client import Client, DaemonUnavailable

    try:
        pid = Client(conn, timeout=1.0, retries=0).status()["pid"]
        _print_err(f"optiond daemon already running (pid {pid}); connection file {conn}")
        return EXIT_OK
    except DaemonUnavailable:
        pass
    log_path = Path(args.log_file) if args.log_file else paths.log_file(conn)
    log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "optiond.daemon.commands", *(["-v"] * args.verbose), "serve",
           "--connection-file", str(conn)]
    if args.no_warmup:
        cmd.append("--no-warmup")
    kw: dict = {}
    if os.name == "nt":
        flags = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
        kw["creationflags"] = flags
    else:
        kw["start_new_session"] = True
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, close_fds=True, **kw)
    finally:
        os.close(fd)
    client = Client(conn, timeout=0.5, retries=0)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            _print_err(f"optiond serve --detach: the daemon exited with code {code}; see {log_path}")
            return EXIT_FAILED
        try:
            info = client.ping()
            if info.get("pid") == proc.pid:
                _print_err(f"optiond daemon started (pid {proc.pid}); connection file {conn}; log {log_path}")
                return EXIT_OK
        except DaemonUnavailable:
            pass
        time.sleep(0.05)
    _print_err(f"optiond serve --detach: no answer within {args.wait:g} s (pid {proc.pid}); see {log_path}")
    return EXIT_FAILED


# ---------------------------------------------------------------------- status / stop


def _format_status(st: dict) -> str:
    by_op = ", ".join(f"{k} {v}" for k, v in sorted(st.get("by_op", {}).items()))
    lines = [
        f"optiond daemon {st.get('version')}: running",
        f"  pid             {st.get('pid')}",
        f"  uptime          {st.get('uptime_s', 0.0):.1f} s",
        f"  devices         {', '.join(st.get('devices', []))}",
        f"  requests served {st.get('requests_served')}" + (f" ({by_op})" if by_op else ""),
        f"  errors          {st.get('errors')} (auth failures {st.get('auth_failures')}, "
        f"malformed {st.get('malformed')})",
        f"  endpoint        {st.get('endpoint')}",
        f"  connection file {st.get('connection_file')}",
    ]
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    """Print the daemon's state; exit 1 when no daemon answers."""
    from .client import DaemonUnavailable

    try:
        st = _client(args, args.timeout).status()
    except DaemonUnavailable as e:
        if args.json:
            print(json.dumps({"running": False, "reason": str(e)}))
        else:
            _print_err(f"optiond daemon: not running\n  {e}")
        return EXIT_DOWN
    st.pop("status", None)
    print(json.dumps({"running": True, **st}, indent=2) if args.json else _format_status(st))
    return EXIT_OK


def _process_gone(pid: int) -> bool | None:
    """True when ``pid`` has exited (or is a zombie), False when it runs, None when unknown."""
    if os.name == "nt":
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie of a detached daemon whose parent has not reaped it yet
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def cmd_stop(args: argparse.Namespace) -> int:
    """Ask the daemon to shut down, wait for it, and remove its connection file."""
    from .client import DaemonUnavailable

    conn = paths.connection_file(args.connection_file)
    client = _client(args, min(args.timeout, 5.0))
    try:
        pid = client.shutdown()["pid"]
    except DaemonUnavailable as e:
        removed = paths.remove_connection_file(conn) if conn.exists() else False
        _print_err(f"optiond daemon: not running\n  {e}" + ("\n  removed its stale connection file" if removed else ""))
        return EXIT_DOWN
    deadline = time.monotonic() + args.timeout
    stopped = False
    while time.monotonic() < deadline:
        gone = _process_gone(pid)
        if gone or (gone is None and not conn.exists()):
            stopped = True
            break
        time.sleep(0.05)
    paths.remove_connection_file(conn)
    if not stopped:
        _print_err(f"optiond daemon (pid {pid}) acknowledged the shutdown but still runs after {args.timeout:g} s")
        return EXIT_FAILED
    _print_err(f"optiond daemon (pid {pid}) stopped")
    return EXIT_OK


# ---------------------------------------------------------------------- registration


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve``, ``status`` and ``stop`` to the ``optiond`` command line."""
    conn_help = (f"connection file (default: ${paths.ENV_VAR}, else {paths.FILE_NAME} in the per-user runtime "
                 f"directory)")
    p = subparsers.add_parser("serve", help="run the pricing daemon",
                              description="Run the pricing daemon on 127.0.0.1 (ports and key in the connection file).")
    p.add_argument("--detach", action="store_true", help="run in the background; return once it answers")
    p.add_argument("--connection-file", help=conn_help)
    p.add_argument("--log-file", help="log of a detached daemon (default: beside the connection file)")
    p.add_argument("--wait", type=float, default=60.0, help="seconds --detach waits for the daemon (default 60)")
    p.add_argument("--no-warmup", action="store_true", help="skip pricing a few options at start")
    p.set_defaults(func=cmd_serve)

    p = subparsers.add_parser("status", help="show whether the daemon runs, and its state (exit 1 when down)")
    p.add_argument("--connection-file", help=conn_help)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for an answer (default 2)")
    p.set_defaults(func=cmd_status)

    p = subparsers.add_parser("stop", help="shut the daemon down cleanly")
    p.add_argument("--connection-file", help=conn_help)
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for it to exit (default 15)")
    p.set_defaults(func=cmd_stop)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m optiond.daemon.commands`` (the daemon commands only)."""
    parser = argparse.ArgumentParser(prog="optiond", description="optiond daemon commands")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    register(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(args.verbose, 2), format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_FAILED
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
