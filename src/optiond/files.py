"""Whole files or none: the one way optiond writes a file, and makes its own directories.

Every file the product writes (the CLI's outputs, the surface JSON, the pictures, the panel's
export, the daemon's connection, pid and object files, the calibration) goes through
:func:`atomic_open`: the bytes go to a temporary file in the target's directory (so the rename
stays on one file system), are flushed and ``fsync``-ed, and the temporary is renamed over the
target with :func:`os.replace` (atomic on POSIX and Windows). A reader sees the previous file
or the new one, never a part; on any failure (a full disk, no permission, no directory, an
exception of the writer itself) the temporary is removed, the previous file stays as it was
and :class:`WriteError` names the target, not the temporary.

An existing target that is not a regular file (``/dev/null``, a named pipe, a terminal) is
written in place, as a stream: it cannot be replaced, and holds no previous content to keep.
A symbolic link is followed: the file it points to is replaced, the link stays.

:func:`private_dir` makes the product's own directories (configuration, data, logs, runtime)
mode 0700 whatever the umask, and leaves directories that already exist alone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Any, Callable, Iterator

#: the mode of the directories :func:`private_dir` creates
PRIVATE_DIR_MODE = 0o700


class WriteError(OSError):
    """A file could not be written whole; the previous file at that path, if any, is unchanged.

    ``errno`` and ``strerror`` are the cause's, ``filename`` the target path (never the
    temporary's); ``str()`` is ``cannot write PATH: REASON``.
    """

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror or 'error'}"


def _target(path: str | os.PathLike) -> Path:
    """The file to replace: ``path``, or where it points if it is a symbolic link."""
    p = Path(os.fspath(path))
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def _is_stream(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists and is, or links to, something other than a regular file or a
    directory (a device, a pipe, a socket; ``/dev/stdout``)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _open_temp(target: Path, binary: bool, perms: int | None, encoding: str | None,
               newline: str | None) -> tuple[IO, Path]:
    """A new temporary file beside ``target``, opened for writing, and its path.

    Its mode: ``perms`` if given, else that of the existing ``target``, else 0666 less the
    umask (as :func:`open` creates a file)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = target.with_name(f".{target.name[:200]}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666 if perms is None else perms)
            break
        except FileExistsError:
            continue
    try:
        if perms is None:
            with contextlib.suppress(OSError):
                os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))  # keep the previous file's mode
        f = os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else encoding,
                      newline=None if binary else newline)
    except BaseException:
        os.close(fd)
        _remove(tmp)
        raise
    return f, tmp


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _sync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; best effort, some file systems refuse)."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_error(e: OSError, target: Path) -> WriteError:
    return WriteError(e.errno or errno.EIO, e.strerror or str(e), str(target))


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                newline: str | None = None, perms: int | None = None) -> Iterator[IO]:
    """Open ``path`` for writing as a whole: write to the file object yielded; the file
    replaces ``path`` when the ``with`` block ends without an exception.

    Args:
        path: the file to write (its directory must exist).
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        encoding, newline: of a text file, as :func:`open` (CSV writers want ``newline=""``).
        perms: the new file's permission bits (``0o600`` for a private file); default that of
            the file it replaces, else 0666 less the umask.

    Raises:
        WriteError: the temporary file could not be created, written, synced or renamed (a
            full disk, no permission, no such directory, ``path`` a directory); nothing
            changed at ``path``.
        ValueError: ``mode`` is not ``"w"`` or ``"wb"``.
        Any exception of the ``with`` block, after the temporary is removed.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode {mode!r}; 'w' or 'wb'")
    binary = mode == "wb"
    if _is_stream(path):
        target = Path(os.fspath(path))
        try:
            f = open(target, mode, encoding=None if binary else encoding, newline=None if binary else newline)
        except OSError as e:
            raise _write_error(e, target) from e
        try:
            with f:
                yield f
        except WriteError:
            raise
        except OSError as e:
            raise _write_error(e, target) from e
        return
    target = _target(path)
    try:
        f, tmp = _open_temp(target, binary, perms, encoding, newline)
    except OSError as e:
        raise _write_error(e, target) from e
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            f.close()  # closes the descriptor even when its last flush fails again
        _remove(tmp)
        if isinstance(e, OSError) and not isinstance(e, WriteError):
            raise _write_error(e, target) from e
        raise
    _sync_dir(target.parent)


def write_atomic(path: str | os.PathLike, data: str | bytes, *, encoding: str = "utf-8",
                 perms: int | None = None) -> None:
    """Write ``data`` (text, encoded with ``encoding``, or bytes) to ``path`` as a whole
    (:func:`atomic_open`; raises as it does)."""
    with atomic_open(path, "wb" if isinstance(data, (bytes, bytearray, memoryview)) else "w",
                     encoding=encoding, perms=perms) as f:
        f.write(data)


def write_with(path: str | os.PathLike, writer: Callable[[IO], Any], *, binary: bool = False,
               encoding: str | None = "utf-8", newline: str | None = None, perms: int | None = None) -> Any:
    """Call ``writer(file)`` on a temporary file opened for ``path`` (text, or bytes with
    ``binary``) and put the result at ``path`` as a whole (:func:`atomic_open`; raises as it
    does, and whatever ``writer`` raises). Returns what ``writer`` returns. For writers that
    take a file object: ``df.to_csv(f, index=False)`` (with ``newline=""``), ``json.dump(doc,
    f)``, ``figure.savefig(f, format="png")`` (``binary=True``; the format given, since the
    file object has no suffix to tell it)."""
    with atomic_open(path, "wb" if binary else "w", encoding=encoding, newline=newline, perms=perms) as f:
        return writer(f)


def private_dir(path: str | os.PathLike) -> Path:
    """Make directory ``path`` and its missing parents, each one it creates mode 0700 whatever
    the umask (a chmod after the mkdir); a directory that already exists is left as it is.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: a directory cannot be created, or ``path`` (or a parent) is not a directory.
    """
    p = Path(os.fspath(path))
    missing = []
    d = p
    while not os.path.lexists(d) and d.parent != d:
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another process
        os.chmod(d, PRIVATE_DIR_MODE)
    if not p.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(p))
    return p


__all__ = ["PRIVATE_DIR_MODE", "WriteError", "atomic_open", "private_dir", "write_atomic", "write_with"]
