"""One daemon per connection file: the daemon holds the file's lock for its whole life. Ten
simultaneous ``optiond serve --detach`` leave exactly one daemon, which ``optiond stop`` stops;
a second ``serve`` is refused with the owner's pid; a lock held by a process killed with
SIGKILL is free again; a deleted connection file is written again; ``optiond stop --pid`` reaches
a daemon whatever its connection file says, and refuses a pid that is no daemon.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from optiond.daemon import paths

from conftest import start_daemon, stop_daemon

COMMANDS = [sys.executable, "-m", "optiond.daemon.commands"]
posix_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists processes from /proc")


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMANDS, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def serving(conn: Path) -> list[int]:
    """Pids of the ``serve`` processes (not ``--detach`` launchers) for ``conn``, from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "serve" in argv and str(conn) in argv and "--detach" not in argv and paths.pid_running(int(d)):
            out.append(int(d))
    return out


def wait_until(pred, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    return pred()


@posix_proc
@pytest.mark.slow
def test_ten_simultaneous_starts_leave_one_daemon_and_stop_leaves_none(tmp_path):
    conn = tmp_path / "daemon.json"
    env = {**os.environ, paths.ENV_VAR: str(conn), "OPTIOND_LOG_DIR": str(tmp_path / "logs"),
           "OPTIOND_METRICS_PORT": "0"}
    starts = [subprocess.Popen([*COMMANDS, "serve", "--detach", "--no-warmup", "--wait", "90"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
              for _ in range(10)]
    try:
        outs = [p.communicate(timeout=150) for p in starts]
        codes = [p.returncode for p in starts]
        assert codes == [0] * 10, outs
        running = wait_until(lambda: len(serving(conn)) == 1 and serving(conn), 10)
        assert running and len(running) == 1, serving(conn)
        (pid,) = running
        assert paths.read_connection_file(conn)["pid"] == pid
        # every start names that one daemon: it started it, or found it running
        for _, err in outs:
            assert f"(pid {pid})" in err, err
        r = run_cli("stop", "--connection-file", str(conn))
        assert r.returncode == 0, r.stderr
        assert wait_until(lambda: not serving(conn), 15), serving(conn)
        assert not paths.pid_running(pid) and not conn.exists()
    finally:
        for p in starts:
            if p.poll() is None:
                p.kill()
        for pid in serving(conn):  # never leave a daemon behind, even when an assertion failed
            os.kill(pid, 15)


def test_second_serve_is_refused_naming_the_pid_and_a_killed_owner_frees_the_lock(tmp_path):
    conn = tmp_path / "daemon.json"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from optiond.daemon import paths
        lock = paths.DaemonLock({str(conn)!r})
        lock.acquire()
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(paths.DaemonRunning) as e:
            paths.DaemonLock(conn).acquire()
        assert e.value.pid == holder.pid and f"pid {holder.pid}" in str(e.value)
        r = run_cli("serve", "--no-warmup", "--metrics-port", "-1", "--connection-file", str(conn))
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.strip() == (f"optiond serve: a daemon already runs (pid {holder.pid}) with connection file "
                                    f"{conn}; stop it first (optiond stop --pid {holder.pid})")
        holder.kill()  # SIGKILL: no clean-up ran; the operating system frees the lock
        holder.wait(timeout=10)
        lock = paths.DaemonLock(conn)
        lock.acquire()
        assert paths.pid_file(conn).read_text().strip() == str(os.getpid())
        lock.release()
        assert not paths.pid_file(conn).exists()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=10)


def test_deleted_connection_file_is_written_again(tmp_path):
    handle = start_daemon(tmp_path, "--no-warmup")
    try:
        info = paths.read_connection_file(handle.connection_file)
        handle.connection_file.unlink()
        assert wait_until(handle.connection_file.exists, 15)
        again = paths.read_connection_file(handle.connection_file)
        assert again == info  # the same daemon, ports and key: its clients reach it as before
        assert handle.client(timeout=5.0).ping()["pid"] == handle.daemon_pid
        handle.connection_file.write_text("{}")  # overwritten by something else: corrected too
        assert wait_until(lambda: handle.connection_file.read_text() != "{}", 15)
        assert paths.read_connection_file(handle.connection_file)["key"] == info["key"]
        assert handle.log().count("writing it again") == 2
    finally:
        stop_daemon(handle)


@pytest.mark.skipif(os.name != "posix", reason="stop --pid signals the daemon (POSIX)")
def test_stop_by_pid_reaches_a_daemon_its_connection_file_does_not_name(tmp_path):
    handle = start_daemon(tmp_path, "--no-warmup")
    other = tmp_path / "elsewhere.json"  # a connection file that names no daemon
    try:
        pid = handle.daemon_pid
        r = run_cli("stop", "--pid", str(os.getpid()), "--connection-file", str(other))
        assert r.returncode == 2 and "is not an optiond daemon" in r.stderr and "Traceback" not in r.stderr
        assert paths.pid_running(os.getpid())
        r = run_cli("stop", "--pid", "999999999", "--connection-file", str(other))
        assert r.returncode == 1 and "no process with pid 999999999" in r.stderr
        r = run_cli("stop", "--pid", str(pid), "--connection-file", str(other))
        assert r.returncode == 0 and f"(pid {pid}) stopped" in r.stderr, r.stderr
        assert handle.process.wait(timeout=15) == 0  # SIGTERM: a clean stop, its own file removed
        assert not handle.connection_file.exists() and not paths.pid_file(handle.connection_file).exists()
    finally:
        stop_daemon(handle)
