"""Where the daemon's connection file lives, and writing/reading it safely.

The connection file (JSON, as Jupyter's kernel files) tells clients how to reach the daemon
and holds the HMAC key, so it is created with mode 0600 from the start (``os.open`` with the
mode, written to a temporary name, then renamed over the final name: a reader never sees a
half-written file and the key is never readable by others, not even for a moment).

Location, first match wins: an explicit path; the ``OPTIOND_CONNECTION_FILE`` environment
variable; ``daemon.json`` in the user's runtime directory (platformdirs), or in the user's
config directory where the platform has no per-user runtime directory (Linux without
``XDG_RUNTIME_DIR``, where platformdirs would fall back to a shared /tmp).
"""

from __future__ import annotations

import functools
import json
import os
import stat
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import platformdirs

from ..files import private_dir, write_atomic
from .protocol import SIGNATURE_SCHEME

ENV_VAR = "OPTIOND_CONNECTION_FILE"
FILE_NAME = "daemon.json"
APP = "optiond"

#: keys every connection file has
REQUIRED_KEYS = ("transport", "ip", "shell_port", "iopub_port", "hb_port", "control_port", "signature_scheme", "key")


class ConnectionFileError(RuntimeError):
    """The connection file is missing, unreadable or malformed."""


@functools.lru_cache(maxsize=1)
def default_dir() -> Path:
    """The per-user directory for the connection file (runtime dir, else config dir)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runtime = platformdirs.user_runtime_dir(APP, appauthor=False)
    if caught:  # platformdirs fell back to a shared location: use the config dir instead
        return Path(platformdirs.user_config_dir(APP, appauthor=False))
    return Path(runtime)


def connection_file(path: str | os.PathLike | None = None) -> Path:
    """The connection file path: ``path`` if given, else ``$OPTIOND_CONNECTION_FILE``, else
    ``<user runtime dir>/optiond/daemon.json`` (see the module docstring)."""
    if path:
        return Path(path)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return default_dir() / FILE_NAME


#: the directory of the daemon's data (its kept objects go to ``objects`` in it)
DATA_DIR_ENV = "OPTIOND_DATA_DIR"


def objects_dir(path: str | os.PathLike | None = None) -> Path:
    """Where the daemon keeps its named objects across restarts: ``path`` if given, else
    ``$OPTIOND_DATA_DIR/objects``, else ``objects`` in the user's data directory
    (platformdirs: ``~/.local/share/optiond/objects`` on Linux,
    ``%LOCALAPPDATA%\\optiond\\objects`` on Windows)."""
    if path:
        return Path(path)
    env = os.environ.get(DATA_DIR_ENV)
    base = Path(env) if env else Path(platformdirs.user_data_dir(APP, appauthor=False))
    return base / "objects"


def log_file(conn_file: Path) -> Path:
    """Where a detached daemon writes its log: beside its connection file, ``<stem>.log``."""
    return conn_file.with_suffix(".log")


def write_connection_file(path: Path, info: dict[str, Any]) -> None:
    """Write ``info`` as JSON to ``path`` atomically with mode 0600 (its directory and any
    missing parents created 0700, :func:`optiond.files.private_dir`).

    Raises:
        OSError: the directory or file cannot be created.
    """
    path = Path(path)
    private_dir(path.parent)
    _write_atomic(path, json.dumps(info, indent=2) + "\n")


def read_connection_file(path: Path) -> dict[str, Any]:
    """Read and check a connection file.

    Returns:
        the JSON map (ports as ints, ``key`` as str).

    Raises:
        FileNotFoundError: no file (no daemon was started, or it stopped).
        ConnectionFileError: unreadable or missing keys / wrong scheme.
    """
    try:
        with open(path, "r", encoding="utf-8") as f:
            info = json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        raise ConnectionFileError(f"cannot read connection file {path}: {e}") from None
    if not isinstance(info, dict):
        raise ConnectionFileError(f"connection file {path} is not a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in info]
    if missing:
        raise ConnectionFileError(f"connection file {path} lacks {', '.join(missing)}")
    if info["signature_scheme"] != SIGNATURE_SCHEME:
        raise ConnectionFileError(f"connection file {path}: unsupported signature scheme {info['signature_scheme']!r}")
    if info["transport"] != "tcp" or not all(isinstance(info[k], int) for k in REQUIRED_KEYS if k.endswith("_port")):
        raise ConnectionFileError(f"connection file {path}: expected tcp transport and integer ports")
    if not isinstance(info["key"], str) or not info["key"]:
        raise ConnectionFileError(f"connection file {path}: empty key")
    return info


def remove_connection_file(path: Path, key: str | None = None) -> bool:
    """Remove the connection file; with ``key``, only if it still holds that key (so a daemon
    that stops never deletes the file of a newer one). Returns whether a file was removed."""
    path = Path(path)
    if key is not None:
        try:
            if read_connection_file(path).get("key") != key:
                return False
        except (FileNotFoundError, ConnectionFileError):
            return False
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def endpoint(info: dict[str, Any], port_name: str = "shell_port") -> str:
    """``tcp://ip:port`` for one of the connection file's ports."""
    return f"{info['transport']}://{info['ip']}:{info[port_name]}"


#: longest Unix-domain socket path used (Linux allows 107 bytes, macOS 103)
MAX_IPC_PATH = 100
#: ``OPTIOND_TRANSPORT=tcp`` makes clients use TCP even where the daemon offers a Unix socket
TRANSPORT_ENV = "OPTIOND_TRANSPORT"


def ipc_socket_path(conn_file: Path, pid: int, channel: str = "shell") -> Path:
    """Where the daemon's Unix-domain socket of ``channel`` (``shell``, ``control``, ``hb``)
    goes: beside the connection file (``<name>-<pid>.sock`` for the shell,
    ``<name>-<pid>-<channel>.sock`` for the others) when that directory is private to the user
    (mode 0700, as :func:`write_connection_file` creates it) and the path is short enough,
    else in a fresh private directory under the system temp directory (``tempfile.mkdtemp``:
    mode 0700).

    Raises:
        OSError: no directory could be created.
    """
    conn_file = Path(conn_file)
    private_dir(conn_file.parent)
    path = conn_file.parent / (f"{conn_file.stem}-{pid}.sock" if channel == "shell" else
                               f"{conn_file.stem}-{pid}-{channel}.sock")
    private = stat.S_IMODE(os.stat(conn_file.parent).st_mode) & 0o077 == 0
    if not private or len(os.fsencode(path)) > MAX_IPC_PATH:
        path = Path(tempfile.mkdtemp(prefix="optiond-")) / f"{channel}.sock"
    try:
        os.unlink(path)  # a stale socket of a killed daemon with this pid
    except FileNotFoundError:
        pass
    return path


def remove_ipc_socket(path: Path) -> None:
    """Remove the daemon's Unix socket (and its private temp directory, if it made one)."""
    path = Path(path)
    try:
        os.unlink(path)
    except OSError:
        pass
    parent = path.parent
    if parent.name.startswith("optiond-") and parent.parent == Path(tempfile.gettempdir()):
        try:
            parent.rmdir()
        except OSError:
            pass


def shell_endpoint(info: dict[str, Any], channel: str = "shell") -> str:
    """The URL of a channel (``shell``, ``control``, ``hb``) for a client on this host: the
    daemon's Unix socket where it offers one (``<channel>_ipc``), the socket file is there,
    and ``$OPTIOND_TRANSPORT`` is not ``tcp``; else ``tcp://ip:<channel>_port``. (Over the
    Unix socket, which only this user can open, key-less peers flooding the TCP ports cannot
    get in the way of ``optiond status`` or ``stop``.)"""
    ipc = info.get(f"{channel}_ipc")
    if (isinstance(ipc, str) and ipc.startswith("ipc://") and os.name == "posix"
            and os.environ.get(TRANSPORT_ENV, "").lower() != "tcp" and os.path.exists(ipc[6:])):
        return ipc
    return endpoint(info, f"{channel}_port")


class DaemonRunning(RuntimeError):
    """Another daemon holds the lock of this connection file; ``pid`` is its process id (None
    when it could not be read)."""

    def __init__(self, conn_file: Path, pid: int | None):
        self.pid = pid
        self.connection_file = conn_file
        who = f"pid {pid}" if pid else "pid unknown"
        super().__init__(f"a daemon already runs ({who}) with connection file {conn_file}; stop it first "
                         f"(optiond stop{f' --pid {pid}' if pid else ''})")


def lock_file(conn_file: Path) -> Path:
    """The lock held by the daemon that owns ``conn_file``: ``<name>.lock`` beside it."""
    conn_file = Path(conn_file)
    return conn_file.with_name(conn_file.name + ".lock")


def pid_file(conn_file: Path) -> Path:
    """The pid of the daemon that holds :func:`lock_file`: ``<name>.pid`` beside it."""
    conn_file = Path(conn_file)
    return conn_file.with_name(conn_file.name + ".pid")


def _read_pid(path: Path) -> int | None:
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isdigit() else None


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` with mode 0600 as a whole (:func:`optiond.files.write_atomic`:
    a temporary file renamed over it, so a reader sees the old file or the new one, never half
    of it; the temporary is removed on failure). Raises OSError (:class:`optiond.files.WriteError`)."""
    write_atomic(path, text, perms=0o600)


def pid_running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (POSIX; elsewhere: exists)."""
    if pid <= 0:
        return False
    if os.name == "nt":
        import ctypes  # noqa: PLC0415

        handle = ctypes.windll.kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        ctypes.windll.kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        ctypes.windll.kernel32.CloseHandle(handle)
        return code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) does not run
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


class DaemonLock:
    """The exclusive lock that makes one daemon the owner of a connection file, for its whole
    life (:mod:`filelock`: ``flock`` on POSIX, ``LockFileEx`` on Windows; the operating system
    frees it when the process ends, however it ends). The owner's pid goes to
    :func:`pid_file` so that a refused daemon can name it.

    Args:
        conn_file: the connection file (the lock and pid files go beside it).

    Raises (:meth:`acquire`):
        DaemonRunning: another process holds the lock.
        OSError: the directory or lock file cannot be created.
    """

    #: how long a refused daemon waits for the owner, just started, to write its pid
    PID_WAIT_S = 2.0

    def __init__(self, conn_file: str | os.PathLike):
        self.connection_file = Path(conn_file)
        self.path = lock_file(self.connection_file)
        self.pid_path = pid_file(self.connection_file)
        self._lock = None
        self._inode: int | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def acquire(self) -> None:
        """Take the lock now or raise :class:`DaemonRunning` naming the owner's pid."""
        import filelock  # noqa: PLC0415

        private_dir(self.path.parent)
        lock = filelock.FileLock(str(self.path), mode=0o600, thread_local=False, fallback_to_soft=False)
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            raise DaemonRunning(self.connection_file, self.owner()) from None
        self._lock = lock
        self._inode = os.stat(self.path).st_ino
        _write_atomic(self.pid_path, f"{os.getpid()}\n")

    def owner(self) -> int | None:
        """The pid of the process holding the lock as its pid file says (waiting up to
        :attr:`PID_WAIT_S` for an owner that has just started to write it), or None."""
        deadline = time.monotonic() + self.PID_WAIT_S
        while True:
            pid = _read_pid(self.pid_path)
            if (pid is not None and pid != os.getpid() and pid_running(pid)) or time.monotonic() >= deadline:
                return pid
            time.sleep(0.02)

    def still_held(self) -> bool:
        """Whether the lock file at :attr:`path` is still the one locked (not deleted or
        replaced) and the pid file names this process."""
        if self._lock is None:
            return False
        try:
            same = os.stat(self.path).st_ino == self._inode
        except OSError:
            return False
        return same and _read_pid(self.pid_path) == os.getpid()

    def renew(self) -> None:
        """After :meth:`still_held` said no: take the lock at :attr:`path` again (a fresh file
        if it was deleted) and rewrite the pid file; the old lock is released.

        Raises:
            DaemonRunning: another daemon took the path meanwhile.
        """
        old = self._lock
        try:
            if old is not None and os.path.exists(self.path) and os.stat(self.path).st_ino == self._inode:
                _write_atomic(self.pid_path, f"{os.getpid()}\n")  # only the pid file went missing
                return
        except OSError:
            pass
        self._lock = None
        try:
            self.acquire()
        except DaemonRunning:
            self._lock = old
            raise
        if old is not None:
            old.release(force=True)

    def release(self) -> None:
        """Remove the pid file (if still this process's) and release the lock."""
        if self._lock is None:
            return
        if _read_pid(self.pid_path) == os.getpid():
            try:
                os.unlink(self.pid_path)
            except OSError:
                pass
        self._lock.release(force=True)
        self._lock = None
