"""``optiond serve``, ``optiond status`` and ``optiond stop``.

``register(subparsers)`` adds the three commands to the ``optiond`` CLI. The module also runs
on its own (``python -m optiond.daemon.commands serve ...``), which is how ``serve --detach``
and ``serve --workers R`` start the daemon.

``optiond serve --workers R`` runs the daemon as an MPI job of R ranks on this host: it
replaces itself by ``mpiexec -n R python -m optiond.daemon.commands serve ...`` (MPICH's
``mpiexec.gforker`` beside this Python's ``mpiexec``, else that ``mpiexec``, else the one on
PATH), with the environment of :func:`optiond.daemon.pool.loopback_env`, so that no process of
the pool listens beyond loopback. Under a service
manager the main process is then ``mpiexec``: the unit needs ``NotifyAccess=all``
(``optiond service unit --workers R`` writes it). ``mpiexec -n R optiond serve`` with the
site's MPI does the same across hosts.
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

from ..commands import options
from ..files import private_dir
from . import paths

EXIT_OK, EXIT_DOWN, EXIT_FAILED = 0, 1, 2
#: /metrics, /healthz and /readyz on 127.0.0.1 (a free port instead when this one is taken)
DEFAULT_METRICS_PORT = 9464
METRICS_PORT_ENV = "OPTIOND_METRICS_PORT"


def _client(args: argparse.Namespace, timeout: float, retries: int = 0):
    from .client import Client

    return Client(args.connection_file, timeout=timeout, retries=retries)


def _print_err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- serve


def _serve_argv(args: argparse.Namespace, conn: Path) -> list[str]:
    """The ``serve`` arguments to pass on to a detached or MPI-launched daemon."""
    argv = ["serve", "--connection-file", str(conn)]
    if args.no_warmup:
        argv.append("--no-warmup")
    for names in getattr(args, "warmup_only", None) or ():
        argv += ["--warmup-only", names]
    for flag in ("no_cache", "no_coalesce", "no_access_log", "no_persist"):
        if getattr(args, flag, False):
            argv.append("--" + flag.replace("_", "-"))
    for opt in ("coalesce", "metrics_port", "log_dir", "max_options", "max_tree_nodes", "max_request_s",
                "max_connections", "objects_dir", "max_objects_mib"):
        v = getattr(args, opt, None)
        if v is not None:
            argv += ["--" + opt.replace("_", "-"), str(v)]
    return argv


def _limits(args: argparse.Namespace):
    from ..limits import Limits

    kw = {}
    if args.max_options is not None:
        kw["max_options"] = args.max_options
    if args.max_tree_nodes is not None:
        kw["max_tree_nodes"] = args.max_tree_nodes
    if args.max_request_s is not None:
        kw["max_request_s"] = args.max_request_s
    mib = getattr(args, "max_objects_mib", None)
    if mib is not None:
        if not 0 < mib < 2**40:  # NaN fails too
            raise SystemExit(f"optiond serve: --max-objects-mib must be a number of MiB > 0, not {mib}")
        kw["max_objects_bytes"] = int(mib * 2**20)
    return Limits(**kw)


def _warmup_setting(args: argparse.Namespace) -> bool | list[str]:
    """``Server(warmup=...)``: False with --no-warmup, the names of --warmup-only, else True (all)."""
    if args.no_warmup:
        return False
    names = [n for o in (getattr(args, "warmup_only", None) or ()) for n in o.split(",") if n.strip()]
    return names or True


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the daemon in the foreground, or with ``--detach`` in the background, or with
    ``--workers R`` as an MPI job of R ranks."""
    warm = _warmup_setting(args)
    if isinstance(warm, list):
        from ..kernels.warmup import select

        try:
            select(warm)
        except ValueError as e:
            _print_err(f"optiond serve: --warmup-only: {e}")
            return EXIT_FAILED
    conn = paths.connection_file(args.connection_file)
    if args.detach:
        return _detach(conn, args)
    if args.workers and args.workers > 1:
        from . import pool

        if not pool.launched_by_mpi():
            return _exec_mpi(args, conn)
    from .server import serve

    root = logging.getLogger()
    for h in root.handlers:  # the console keeps its level when the JSON log takes INFO records
        if h.level == logging.NOTSET:
            h.setLevel(root.level)

    def ready(server) -> None:
        extra = f"; {len(server.ranks)} MPI ranks" if len(server.ranks) > 1 else ""
        metrics = f"; metrics {server.http.url}/metrics" if server.http else ""
        _print_err(f"optiond daemon {server.info['version']} (pid {server.pid}) serving on "
                   f"{paths.endpoint(server.info)}; connection file {conn}{extra}{metrics}")

    metrics_port = args.metrics_port
    if metrics_port is None:
        env = os.environ.get(METRICS_PORT_ENV, "")
        metrics_port = int(env) if env.lstrip("-").isdigit() else DEFAULT_METRICS_PORT
    if metrics_port < 0:
        metrics_port = None
    try:
        return serve(conn, warmup=warm, on_ready=ready, mpi=True if args.mpi else None,
                     limits=_limits(args), cache_entries=0 if args.no_cache else 4096,
                     coalesce="never" if args.no_coalesce else (args.coalesce or "auto"), metrics_port=metrics_port, log_dir=args.log_dir,
                     access_log=not args.no_access_log, max_connections=args.max_connections,
                     objects_dir=args.objects_dir, persist_objects=not args.no_persist)
    except (RuntimeError, OSError) as e:  # another daemon runs already; cannot write the file
        _print_err(f"optiond serve: {e}")
        return EXIT_FAILED


def _exec_mpi(args: argparse.Namespace, conn: Path) -> int:
    """Replace this process by ``mpiexec -n R ... serve`` (rank 0 serves, R-1 workers)."""
    import importlib.util

    from . import pool

    if importlib.util.find_spec("mpi4py") is None:
        _print_err("optiond serve --workers: needs mpi4py and an MPI (pip install mpi4py mpich, or the site's MPI)")
        return EXIT_FAILED
    try:
        cmd = pool.mpiexec_command(args.workers, [*(["-v"] * args.verbose), *_serve_argv(args, conn), "--mpi"])
    except RuntimeError as e:
        _print_err(f"optiond serve --workers: {e}")
        return EXIT_FAILED
    warning = pool.launcher_warning(cmd[0])
    if warning:
        _print_err(f"optiond serve --workers: warning: {warning}")
    env = {**os.environ, **pool.loopback_env()}  # a one-host pool listens on loopback only
    if pool.BACKOFF_ENV not in env:
        env[pool.BACKOFF_ENV] = pool.default_backoff()
    if env.get("WATCHDOG_PID") == str(os.getpid()):
        env.pop("WATCHDOG_PID")  # the watchdog pings come from rank 0, a grandchild of this pid
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execve(cmd[0], cmd, env)  # keeps the pid: a service manager still sees its main process
    return subprocess.call(cmd, env=env)


def _detach(conn: Path, args: argparse.Namespace) -> int:
    """Start ``serve`` in a new session, detached from this terminal; return once it answers."""
    from .client import Client, DaemonUnavailable

    try:
        pid = Client(conn, timeout=1.0, retries=0).status()["pid"]
        _print_err(f"optiond daemon already running (pid {pid}); connection file {conn}")
        return EXIT_OK
    except DaemonUnavailable:
        pass
    try:
        old_key = paths.read_connection_file(conn).get("key")  # a stale file: wait for a new one
    except (FileNotFoundError, paths.ConnectionFileError):
        old_key = None
    log_path = Path(args.log_file) if args.log_file else paths.log_file(conn)
    private_dir(log_path.parent)
    cmd = [sys.executable, "-m", "optiond.daemon.commands", *(["-v"] * args.verbose), *_serve_argv(args, conn)]
    if args.workers and args.workers > 1:
        cmd += ["--workers", str(args.workers)]
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
            owner = paths.DaemonLock(conn).owner()  # another start won the connection file's lock
            if owner is not None and owner != proc.pid and paths.pid_running(owner):
                _print_err(f"optiond daemon already running (pid {owner}); connection file {conn}")
                return EXIT_OK
            _print_err(f"optiond serve --detach: the daemon exited with code {code}; see {log_path}")
            return EXIT_FAILED
        try:
            info = client.ping()
            # the daemon answering is this one: same pid, or (under --workers, where rank 0 is a
            # grandchild of ``mpiexec``) a connection file written after the launch
            if info.get("pid") == proc.pid or paths.read_connection_file(conn).get("key") != old_key:
                _print_err(f"optiond daemon started (pid {info.get('pid')}); connection file {conn}; log {log_path}")
                return EXIT_OK
        except (DaemonUnavailable, FileNotFoundError, paths.ConnectionFileError):
            pass
        time.sleep(0.05)
    _print_err(f"optiond serve --detach: no answer within {args.wait:g} s (pid {proc.pid}; it may still be "
               f"compiling its kernels on a cold cache: 'optiond warmup' does that ahead); see {log_path}")
    return EXIT_FAILED


# ---------------------------------------------------------------------- status / stop


def _format_status(st: dict) -> str:
    by_op = ", ".join(f"{k} {v}" for k, v in sorted(st.get("by_op", {}).items()))
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(st.get("requests_by_outcome", {}).items()))
    cache = st.get("cache") or {}
    objects = st.get("objects") or {}
    mem = "; ".join(f"{m.get('device')}: {m.get('used', 0) / 2**30:.1f} / {m.get('total', 0) / 2**30:.1f} GiB"
                    for m in st.get("gpu_memory") or [])
    lines = [
        f"optiond daemon {st.get('version')}: running ({st.get('state', 'serving')})",
        f"  pid             {st.get('pid')}",
        f"  uptime          {st.get('uptime_s', 0.0):.1f} s",
        f"  devices         {', '.join(st.get('devices', []))}" + (f" ({mem})" if mem else ""),
        f"  MPI ranks       {st.get('mpi_ranks', 1)} ({st.get('mpi_workers_alive', 0)} of "
        f"{st.get('mpi_workers', 0)} workers alive)",
        f"  requests served {st.get('requests_served')}" + (f" ({by_op})" if by_op else ""),
        f"  outcomes        {outcomes or 'none yet'}",
        f"  queue depth     {st.get('queue_depth', 0)} ({st.get('jobs_running', 0)} running)",
        f"  cache           {100 * float(st.get('cache_hit_ratio') or 0):.1f} % hits "
        f"({cache.get('entries', 0)} entries)",
        f"  objects         {objects.get('objects', 0)} ({objects.get('bytes', 0) / 1e3:.0f} kB; optiond objects list)",
        f"  errors          {st.get('errors')} (auth failures {st.get('auth_failures')}, "
        f"malformed {st.get('malformed')})",
        f"  endpoint        {st.get('endpoint')}",
        f"  metrics         {st.get('metrics_url') or 'off'}",
        f"  log             {st.get('log_file') or 'off'}",
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


def _daemon_command_line(pid: int) -> str | None:
    """The command line of process ``pid`` (POSIX), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        pass
    try:
        out = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _signal_daemon(pid: int) -> str | None:
    """Send SIGTERM to the daemon ``pid`` (it then stops cleanly); an error message, or None."""
    import signal

    if os.name != "posix":
        return (f"cannot reach pid {pid} without its connection file on this system; pass the daemon's "
                f"--connection-file")
    cmd = _daemon_command_line(pid)
    if cmd is None or not paths.pid_running(pid):
        return f"no process with pid {pid}"
    if "optiond" not in cmd or " serve" not in f" {cmd} ":
        return f"pid {pid} is not an optiond daemon ({cmd[:80]})"
    try:
        os.kill(pid, signal.SIGTERM)
    except PermissionError:
        return f"pid {pid} belongs to another user"
    except ProcessLookupError:
        return f"no process with pid {pid}"
    return None


def cmd_stop(args: argparse.Namespace) -> int:
    """Ask the daemon to shut down, wait for it, and remove its connection file. With
    ``--pid``, the daemon of that pid: by its connection file when that names it, else by a
    SIGTERM (POSIX), after checking that the pid is an ``optiond serve`` process."""
    from .client import DaemonUnavailable

    conn = paths.connection_file(args.connection_file)
    try:
        named = paths.read_connection_file(conn).get("pid")
    except (FileNotFoundError, paths.ConnectionFileError):
        named = None
    if args.pid is not None and named != args.pid:
        err = _signal_daemon(args.pid)
        if err is not None:
            _print_err(f"optiond stop --pid: {err}")
            return EXIT_DOWN if err.startswith("no process") else EXIT_FAILED
        pid = args.pid
    else:
        client = _client(args, min(args.timeout, 5.0))
        try:
            pid = client.shutdown()["pid"]
        except DaemonUnavailable as e:
            removed = paths.remove_connection_file(conn) if conn.exists() else False
            _print_err(f"optiond daemon: not running\n  {e}" +
                       ("\n  removed its stale connection file" if removed else ""))
            return EXIT_DOWN
    deadline = time.monotonic() + args.timeout
    stopped = False
    while time.monotonic() < deadline:
        if not paths.pid_running(pid):
            stopped = True
            break
        time.sleep(0.05)
    if args.pid is None or named == pid:
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
    p.add_argument("--wait", type=options.positive, default=60.0, help="seconds --detach waits for the daemon (default 60)")
    p.add_argument("--no-warmup", action="store_true",
                   help="serve at once, without loading every pricing kernel first (the first request of each "
                        "method then pays for it)")
    p.add_argument("--warmup-only", action="append", metavar="NAME[,NAME]",
                   help="warm up these targets of 'optiond warmup --list' only (repeatable; default: all)")
    p.add_argument("--workers", type=options.non_negative_int, default=0, metavar="R",
                   help="run as an MPI job of R ranks on this host (rank 0 serves; needs mpi4py and an mpiexec)")
    p.add_argument("--mpi", action="store_true", help="this process is one rank of an MPI job (set by --workers)")
    p.add_argument("--metrics-port", type=options.port, default=None,
                   help=f"port of /metrics, /healthz, /readyz on 127.0.0.1 (default ${METRICS_PORT_ENV}, else "
                        f"{DEFAULT_METRICS_PORT}, or a free one when that is taken; 0: a free one; -1: off); the "
                        f"connection file and 'optiond status' give the port in use")
    p.add_argument("--log-dir", help="directory of the JSON-lines log (default: $OPTIOND_LOG_DIR, else the user "
                                     "log directory)")
    p.add_argument("--no-access-log", action="store_true", help="log errors only, not every request")
    p.add_argument("--objects-dir", help="where the named objects (curves, dividends, Heston sets, surfaces) are kept "
                                         "across restarts (default: $OPTIOND_DATA_DIR/objects, else the user data dir)")
    p.add_argument("--no-persist", action="store_true", help="keep the named objects in memory only")
    p.add_argument("--no-cache", action="store_true", help="do not answer repeated requests from the cache")
    p.add_argument("--coalesce", choices=("auto", "always", "never"),
                   help="price concurrent one-option requests together: 'auto' (default) where a GPU can take "
                        "them in one launch, 'always', 'never' (on a CPU each is cheaper alone)")
    p.add_argument("--no-coalesce", action="store_true", help="the same as --coalesce never")
    p.add_argument("--max-options", type=options.count, help="rows per request (default 1,000,000)")
    p.add_argument("--max-connections", type=options.count, metavar="N",
                   help="peer connections per port at most; more are closed at once (default: an equal share "
                        "of what the open-files limit leaves after a reserve for the daemon)")
    p.add_argument("--max-tree-nodes", type=options.positive, help="CRR tree nodes per request (default 6e11: one N = 1e6 tree fits)")
    p.add_argument("--max-request-s", type=options.positive, help="longest time a request may take, seconds (default 600)")
    p.add_argument("--max-objects-mib", type=options.positive, metavar="MIB",
                   help="the named objects' budget: their documents' size in all, MiB (default 256; the daemon's "
                        "memory for them is a few times that); a put over it is refused before it is read")
    p.set_defaults(func=cmd_serve)

    p = subparsers.add_parser("status", help="show whether the daemon runs, and its state (exit 1 when down)")
    p.add_argument("--connection-file", help=conn_help)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeout", type=options.positive, default=2.0, help="seconds to wait for an answer (default 2)")
    p.set_defaults(func=cmd_status)

    p = subparsers.add_parser("stop", help="shut the daemon down cleanly")
    p.add_argument("--connection-file", help=conn_help)
    p.add_argument("--timeout", type=options.positive, default=15.0, help="seconds to wait for it to exit (default 15)")
    p.add_argument("--pid", type=options.count, help="the daemon of this pid (as 'optiond status' or a refused 'serve' name "
                                           "it), even when its connection file is gone or names another")
    p.set_defaults(func=cmd_stop)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m optiond.daemon.commands`` (the daemon commands only)."""
    from ..cli import Parser, run  # the shared parser and runner (cli imports the other command modules lazily)

    parser = Parser(prog="optiond", description="optiond daemon commands")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    register(sub)
    return run(parser, argv, no_command=EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())
