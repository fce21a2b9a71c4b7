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
import warnings
from pathlib import Path
from typing import Any

import platformdirs

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


def log_file(conn_file: Path) -> Path:
    """Where a detached daemon writes its log: beside its connection file, ``<stem>.log``."""
    return conn_file.with_suffix(".log")


def write_connection_file(path: Path, info: dict[str, Any]) -> None:
    """Write ``info`` as JSON to ``path`` atomically with mode 0600 (directory 0700 if created).

    Raises:
        OSError: the directory or file cannot be created.
    """
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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


def ipc_socket_path(conn_file: Path, pid: int) -> Path:
    """Where the daemon's Unix-domain shell socket goes: beside the connection file when that
    directory is private to the user (mode 0700, as :func:`write_connection_file` creates it)
    and the path is short enough, else in a fresh private directory under the system temp
    directory (``tempfile.mkdtemp``: mode 0700).

    Raises:
        OSError: no directory could be created.
    """
    conn_file = Path(conn_file)
    conn_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = conn_file.parent / f"{conn_file.stem}-{pid}.sock"
    private = stat.S_IMODE(os.stat(conn_file.parent).st_mode) & 0o077 == 0
    if not private or len(os.fsencode(path)) > MAX_IPC_PATH:
        path = Path(tempfile.mkdtemp(prefix="optiond-")) / "shell.sock"
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


def shell_endpoint(info: dict[str, Any]) -> str:
    """The shell channel's URL for a client on this host: the daemon's Unix socket where it
    offers one (``shell_ipc``), the socket file is there, and ``$OPTIOND_TRANSPORT`` is not
    ``tcp``; else ``tcp://ip:shell_port``."""
    ipc = info.get("shell_ipc")
    if (isinstance(ipc, str) and ipc.startswith("ipc://") and os.name == "posix"
            and os.environ.get(TRANSPORT_ENV, "").lower() != "tcp" and os.path.exists(ipc[6:])):
        return ipc
    return endpoint(info)
