"""The daemon's named market objects: the one owner of every object a client keeps in the
daemon by name (zero curves, cash-dividend schedules, Heston parameter sets and fitted
volatility surfaces: :mod:`optiond.daemon.object_kinds`), each with a version. The Excel
add-in keeps its own store of this class when no daemon answers.

* **Names and handles.** An object lives under a name the client gives (``SPY``, ``spx-am``:
  1 to 64 of ``A-Za-z0-9_.:/-``, case-sensitive; names are shared by every kind). Each put
  under a name makes a new version, 1 for the first; the handle ``NAME#0003`` names one version
  (:func:`handle`; at least four digits). A cell that shows the handle of the object it made
  changes text when the object is made again, so Excel recalculates the cells that refer to it.
* **Look-ups** (:meth:`ObjectStore.get`): by bare name, the live (latest) version; by handle,
  that version, which must be the live one: an older one is a :class:`StaleHandle` error that
  names the live handle (a number the store never gave out: the same error, saying the
  daemon may have restarted); a name the store does not hold is :class:`UnknownObject`, listing
  the names it holds; a handle of another kind is :class:`WrongKind`.
* **Bounds** (:class:`optiond.limits.Limits`): at most ``max_objects`` live objects and
  ``max_objects_bytes`` of their serialised size in all; a put over either is refused with
  :class:`optiond.limits.LimitExceeded` and changes nothing. :meth:`ObjectStore.drop` frees a
  name; its version count is kept, so a handle of the dropped object never resolves to a later one.
* **Thread safety**: every method takes one lock; the payloads are never changed after a put
  (a put replaces the entry).
* **Same document, same version**: a put that carries a ``digest`` (a fingerprint of the
  kind and document, :func:`optiond.daemon.object_kinds.digest`) equal to the live version's
  changes nothing and returns the live entry, so a sheet that recalculates the cell that
  makes an object does not bump its version (and recalculate every cell that reads it).
* **Persistence** (:meth:`ObjectStore.open`): a daemon keeps its objects in a directory
  (:func:`optiond.daemon.paths.objects_dir`: ``objects`` in the user's data directory, or
  ``$OPTIOND_DATA_DIR/objects``), one JSON file per name (``<sha256 of the name>.json``:
  format, name, kind, version, creation time, document), written atomically (a temporary
  file renamed over the old one) after each put and removed by a drop; the version counts of
  dropped names go to ``dropped.json``. At start the store reads them back, so handles and
  versions continue after a restart. A file that does not read (not JSON, a bad document) is
  logged and skipped, never a crash; objects over the bounds are skipped, the newest kept. The
  directory is locked (``objects.lock``, :mod:`filelock`) by one store for its life: a second
  daemon on the same directory keeps its objects in memory only, and logs so. A write that
  fails (a full disk) is logged; the object stays live in memory.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..files import private_dir
from ..limits import LimitExceeded, Limits
from ..models import InvalidInputError
from .object_kinds import KINDS

log = logging.getLogger("optiond.daemon.objects")
#: a name: what the client gives; a handle: the name and a version after ``#``
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
HANDLE_PATTERN = re.compile(r"(?P<name>[^#]+)#(?P<version>[0-9]{1,9})")
#: digits of a handle's version (more once a name passes 9999 versions)
VERSION_DIGITS = 4
#: names whose version count is kept after they were dropped (the oldest forgotten first)
DROPPED_MEMORY = 4096
#: the format tag of a persisted object's file, and of the dropped names' file
FILE_FORMAT = "optiond.object"
FILE_FORMAT_VERSION = 1
DROPPED_FILE = "dropped.json"
LOCK_FILE = "objects.lock"


class ObjectError(LookupError):
    """A look-up that found no live object of the kind asked for; ``ename`` names the case."""

    ename = "ObjectError"


class UnknownObject(ObjectError):
    """No object of that name is live."""

    ename = "UnknownObject"


class StaleHandle(ObjectError):
    """A handle of a version that is not the live one."""

    ename = "StaleHandle"


class WrongKind(ObjectError):
    """The object is of another kind than the one asked for."""

    ename = "WrongKind"


def handle(name: str, version: int) -> str:
    """``NAME#0003``: the handle of version ``version`` of ``name``."""
    return f"{name}#{version:0{VERSION_DIGITS}d}"


def check_name(name: Any) -> str:
    """``name`` stripped, if it is a valid object name.

    Raises:
        InvalidInputError: not a string of 1 to 64 of ``A-Za-z0-9_.:/-`` (field ``name``).
    """
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name.strip()):
        raise InvalidInputError("name", None, name if isinstance(name, (str, int, float)) else type(name).__name__,
                                "must be 1 to 64 of the characters A-Z a-z 0-9 _ . : / -")
    return name.strip()


def parse_ref(ref: Any) -> tuple[str, int | None]:
    """``(name, version)`` of a bare name (version None) or a handle ``NAME#0003``.

    Raises:
        InvalidInputError: neither form (field ``name``).
    """
    text = ref.strip() if isinstance(ref, str) else ref
    m = HANDLE_PATTERN.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        return check_name(text), None
    return check_name(m["name"]), int(m["version"])


@dataclasses.dataclass(frozen=True)
class Entry:
    """One version of one object.

    Attributes:
        name, kind, version: what it is (``handle`` joins name and version).
        payload: the object itself (a :class:`optiond.surface.Surface` for kind ``surface``),
            never changed once stored.
        nbytes: its serialised size (bytes), counted against ``max_objects_bytes``.
        summary: a few plain fields for listings (JSON-ready).
        created: when it was stored, seconds since the epoch.
        digest: the fingerprint of its kind and document, or None (then every put bumps).
    """

    name: str
    kind: str
    version: int
    payload: Any
    nbytes: int
    summary: dict
    created: float
    digest: str | None = None

    @property
    def handle(self) -> str:
        return handle(self.name, self.version)

    def listing(self) -> dict[str, Any]:
        """The entry as a listing shows it: ``name``, ``kind``, ``version``, ``handle``,
        ``created`` (ISO 8601, UTC), ``bytes`` and ``summary``."""
        created = _dt.datetime.fromtimestamp(self.created, _dt.timezone.utc).isoformat(timespec="seconds")
        return {"name": self.name, "kind": self.kind, "version": self.version, "handle": self.handle,
                "created": created, "bytes": self.nbytes, "summary": dict(self.summary)}


class ObjectStore:
    """The named, versioned objects of one daemon (see the module docstring).

    Args:
        limits: ``max_objects`` and ``max_objects_bytes`` are read from it.
    """

    def __init__(self, limits: Limits | None = None):
        lim = limits or Limits()
        self.max_objects, self.max_bytes = int(lim.max_objects), int(lim.max_objects_bytes)
        self._live: dict[str, Entry] = {}
        self._dropped: OrderedDict[str, int] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.directory: Path | None = None
        self._dir_lock: Any = None
        #: counts the changes (puts of a new version, drops, reads from a directory): a reader that
        #: remembers look-ups checks it
        self.generation = 0

    def put(self, name: str, kind: str, payload: Any, nbytes: int, summary: dict | None = None,
            digest: str | None = None) -> Entry:
        """Store ``payload`` as the next version of ``name`` (version 1 for a new name); with
        ``digest`` equal to the live version's, change nothing and return the live entry.

        Returns:
            the new :class:`Entry` (its ``handle`` is what a client shows).

        Raises:
            InvalidInputError: a bad name, or an unknown kind.
            WrongKind: ``name`` holds an object of another kind (drop it first).
            LimitExceeded: over ``max_objects`` (``limit`` of that name) or over
                ``max_objects_bytes``; nothing is changed.
        """
        name = check_name(name)
        if kind not in KINDS:
            raise InvalidInputError("kind", None, kind, f"expected one of {list(KINDS)}")
        with self._lock:
            old = self._live.get(name)
            if old is not None and old.kind != kind:
                raise WrongKind(f"{name} holds a {old.kind}, not a {kind}: drop it first or choose another name")
            if old is not None and digest is not None and old.digest == digest:
                return old
            if old is None and len(self._live) >= self.max_objects:
                raise LimitExceeded("max_objects", len(self._live) + 1, self.max_objects,
                                    f"the daemon holds {len(self._live)} objects, its limit; drop one "
                                    f"(optiond objects drop NAME) or restart it")
            total = self._bytes - (old.nbytes if old else 0) + int(nbytes)
            if total > self.max_bytes:
                raise LimitExceeded("max_objects_bytes", total, self.max_bytes,
                                    f"{name} ({int(nbytes) / 2**20:.1f} MiB) would take the daemon's objects to "
                                    f"{total / 2**20:.1f} MiB, over its limit of {self.max_bytes / 2**20:.0f} MiB")
            version = (old.version if old else self._dropped.pop(name, 0)) + 1
            entry = Entry(name, kind, version, payload, int(nbytes), dict(summary or {}), time.time(), digest)
            self._live[name] = entry
            self._bytes = total
            self.generation += 1
            self._save(entry)
            return entry

    def get(self, ref: str, kind: str | None = None) -> Entry:
        """The live object a bare name or a handle names (of ``kind``, if given).

        Raises:
            InvalidInputError: ``ref`` is neither a name nor a handle.
            UnknownObject: no live object of that name.
            StaleHandle: a handle whose version is not the live one.
            WrongKind: the object is not of ``kind``.
        """
        name, version = parse_ref(ref)
        with self._lock:
            entry = self._live.get(name)
            held = sorted(self._live)
        what = kind or "object"
        if entry is None:
            names = ", ".join(held[:8]) + (", ..." if len(held) > 8 else "") if held else "none"
            raise UnknownObject(f"no {what} named {name} in the daemon (it holds: {names})"
                                + ("; it may have restarted since: make it again" if version else ""))
        if version is not None and version != entry.version:
            why = ("a later version replaced it" if version < entry.version
                   else "the daemon never made it (it may have restarted since)")
            raise StaleHandle(f"stale handle {handle(name, version)}: {why}; the live one is {entry.handle}")
        if kind is not None and entry.kind != kind:
            raise WrongKind(f"{entry.handle} is a {entry.kind}, not a {kind}")
        return entry

    def list(self) -> list[Entry]:
        """The live objects, by name."""
        with self._lock:
            return [self._live[n] for n in sorted(self._live)]

    def drop(self, ref: str) -> Entry:
        """Forget the object a name (or its live handle) names; return its last entry.

        Raises:
            InvalidInputError, UnknownObject, StaleHandle: as :meth:`get`.
        """
        entry = self.get(ref)
        with self._lock:
            if self._live.get(entry.name) is not entry:  # replaced or dropped meanwhile
                raise StaleHandle(f"{entry.handle} changed while being dropped; try again")
            del self._live[entry.name]
            self._bytes -= entry.nbytes
            self.generation += 1
            self._dropped[entry.name] = entry.version
            while len(self._dropped) > DROPPED_MEMORY:
                self._dropped.popitem(last=False)
            self._forget(entry.name)
        return entry

    def stats(self) -> dict[str, int]:
        """``objects`` (live), ``bytes`` (their size in all) and the two limits."""
        with self._lock:
            return {"objects": len(self._live), "bytes": self._bytes, "max_objects": self.max_objects,
                    "max_objects_bytes": self.max_bytes,
                    "persisted": None if self.directory is None else str(self.directory)}

    # ------------------------------------------------------------------ persistence

    def open(self, directory: str | os.PathLike) -> int:
        """Keep the objects in ``directory`` from now on (see the module docstring): lock it,
        read back the objects and version counts it holds, and write every later put and drop
        there. Returns how many objects were read; 0, with a warning logged, when another
        store holds the directory's lock or it cannot be created (the objects then live in
        memory only)."""
        import filelock

        directory = Path(directory)
        try:
            private_dir(directory)
            lock = filelock.FileLock(str(directory / LOCK_FILE), mode=0o600, thread_local=False)
            lock.acquire(timeout=0)
        except filelock.Timeout:
            log.warning("objects: another daemon keeps its objects in %s; this one keeps them in memory only",
                        directory)
            return 0
        except OSError as e:
            log.warning("objects: cannot use %s (%s); objects are kept in memory only", directory, e)
            return 0
        self._dir_lock = lock
        entries, dropped = _read_directory(directory)
        with self._lock:
            self.directory = directory
            for name, version in dropped.items():
                if name not in self._live:
                    self._dropped[name] = max(version, self._dropped.get(name, 0))
            kept = 0
            for e in sorted(entries, key=lambda e: e.created, reverse=True):  # the newest first
                if e.name in self._live:
                    continue
                if len(self._live) >= self.max_objects or self._bytes + e.nbytes > self.max_bytes:
                    log.warning("objects: %s from %s skipped: over the daemon's object limits", e.handle, directory)
                    continue
                self._dropped.pop(e.name, None)
                self._live[e.name] = e
                self._bytes += e.nbytes
                self.generation += 1
                kept += 1
        if kept:
            log.info("objects: %d read back from %s", kept, directory)
        return kept

    def close(self) -> None:
        """Stop writing to the directory and release its lock (the files stay)."""
        with self._lock:
            self.directory = None
            lock, self._dir_lock = self._dir_lock, None
        if lock is not None:
            lock.release(force=True)

    def _save(self, entry: Entry) -> None:
        """Write ``entry`` to the directory (under ``self._lock``); a failure is logged."""
        if self.directory is None:
            return
        from . import object_kinds
        from .paths import _write_atomic

        try:
            doc = {"format": FILE_FORMAT, "format_version": FILE_FORMAT_VERSION, "name": entry.name,
                   "kind": entry.kind, "version": entry.version, "created": entry.created,
                   "document": object_kinds.document(entry.kind, entry.payload)}
            _write_atomic(self.directory / _file_name(entry.name), json.dumps(doc, allow_nan=False))
        except (OSError, ValueError, TypeError) as e:
            log.warning("objects: cannot write %s to %s: %s (it stays in memory)", entry.handle, self.directory, e)

    def _forget(self, name: str) -> None:
        """Remove ``name``'s file and record its version count (under ``self._lock``)."""
        if self.directory is None:
            return
        from .paths import _write_atomic

        try:
            (self.directory / _file_name(name)).unlink(missing_ok=True)
            _write_atomic(self.directory / DROPPED_FILE, json.dumps(dict(self._dropped)))
        except OSError as e:
            log.warning("objects: cannot record the drop of %s in %s: %s", name, self.directory, e)


def _file_name(name: str) -> str:
    """The file of ``name`` in a store's directory (a hash: names differ only in case, or hold
    ``/`` and ``:``, on any file system)."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:32] + ".json"


def _read_directory(directory: Path) -> tuple[list[Entry], dict[str, int]]:
    """The entries and dropped version counts a store's directory holds; what does not read is
    logged and skipped."""
    from . import object_kinds

    entries: list[Entry] = []
    for path in sorted(directory.glob("*.json")):
        if path.name == DROPPED_FILE:
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
                raise ValueError(f"not an {FILE_FORMAT} file")
            name, kind, version = check_name(doc.get("name")), doc.get("kind"), doc.get("version")
            if path.name != _file_name(name):
                raise ValueError(f"holds {name}, whose file is {_file_name(name)}")
            if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                raise ValueError(f"version {version!r} is not a whole number >= 1")
            created = float(doc.get("created"))
            payload = object_kinds.build(kind, doc.get("document"))
            canonical = object_kinds.document(kind, payload)
            entries.append(Entry(name, kind, version, payload, len(object_kinds.canonical(canonical)),
                                 object_kinds.summary(kind, payload), created, object_kinds.digest(kind, canonical)))
        except Exception as e:  # noqa: BLE001 (a bad file is skipped whatever is wrong with it)
            log.warning("objects: %s skipped: %s", path, e)
    dropped: dict[str, int] = {}
    path = directory / DROPPED_FILE
    if path.exists():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            dropped = {str(k): int(v) for k, v in doc.items() if isinstance(v, int) and not isinstance(v, bool)}
        except Exception as e:  # noqa: BLE001
            log.warning("objects: %s skipped: %s", path, e)
    return entries, dropped


__all__ = ["DROPPED_MEMORY", "FILE_FORMAT", "KINDS", "Entry", "ObjectError", "ObjectStore", "StaleHandle", "UnknownObject",
           "WrongKind", "check_name", "handle", "parse_ref"]
