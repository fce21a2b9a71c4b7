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
  ``max_objects_bytes`` of their serialised size (canonical JSON) in all, the store's byte
  budget (``optiond serve --max-objects-mib``; the Python objects take a few times that in
  memory); a put over either is refused with :class:`optiond.limits.LimitExceeded` and
  changes nothing (the daemon refuses one by its size before decoding it:
  :meth:`ObjectStore.check_room`, :mod:`optiond.daemon.object_ops`).
* **Handles are never reused.** :meth:`ObjectStore.drop` frees a name; the version counts of
  the last :data:`DROPPED_MEMORY` dropped names are kept, and a count forgotten beyond them
  raises the store's *floor*: every later version of any name is above the floor, so a handle
  of a dropped or forgotten object never resolves to a later one. With a directory the floor
  and the *high-water mark* (the highest version the store ever gave) are kept in
  ``versions.json``; at start a store whose last run may have given a version it did not
  write (an object file that does not read, a write that failed, a crash between the two)
  raises its floor to the high-water mark.
* **Thread safety**: the live objects are behind one lock, held for no disk work; the puts
  and drops of a store with a directory are one at a time (their writes in order). The
  payloads are never changed after a put (a put replaces the entry).
* **Wanted puts**: a put may carry a :class:`Claim` (a fit's request: deadline, cancel); it is
  made only if the claim still holds when it is made, checked atomically with the publish, so
  a client told that its fit failed never finds the fit's object live.
* **Same document, same version**: a put that carries a ``digest`` (a fingerprint of the
  kind and document, :func:`optiond.daemon.object_kinds.digest`) equal to the live version's
  changes nothing and returns the live entry, so a sheet that recalculates the cell that
  makes an object does not bump its version (and recalculate every cell that reads it).
* **Persistence** (:meth:`ObjectStore.open`): a daemon keeps its objects in a directory
  (:func:`optiond.daemon.paths.objects_dir`: ``objects`` in the user's data directory, or
  ``$OPTIOND_DATA_DIR/objects``), one JSON file per name (``<sha256 of the name>.json``:
  format, name, kind, version, creation time, document), written atomically (a temporary
  file renamed over the old one) after each put and removed by a drop; the version counts of
  dropped names go to ``dropped.json``, the floor and high-water mark to ``versions.json``
  (written before a version is given: a put whose mark cannot be written is refused with
  :class:`NotWritten` and changes nothing). At start the store reads the small files at once
  and the large ones (over :data:`LAZY_FILE_BYTES`) on a background thread, so a daemon
  serves while they load (a look-up of one still loading is :class:`ObjectLoading`). A file
  that does not read (not JSON, a bad document) is logged and skipped, never a crash; objects
  over the bounds are skipped, the newest kept. The directory is locked (``objects.lock``,
  :mod:`filelock`) by one store for its life: a second daemon on the same directory keeps its
  objects in memory only, and logs so. An object whose file cannot be written (a full disk)
  stays live in memory and its entry says so (``persisted`` False, shown by the listings).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import gc
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
#: names whose version count is kept after they were dropped (the oldest forgotten first, each
#: raising the store's floor)
DROPPED_MEMORY = 4096
#: the format tag of a persisted object's file, and of the dropped names' file
FILE_FORMAT = "optiond.object"
FILE_FORMAT_VERSION = 1
DROPPED_FILE = "dropped.json"
VERSIONS_FILE = "versions.json"
VERSIONS_FORMAT = "optiond.object-versions"
LOCK_FILE = "objects.lock"
#: object files larger than this (bytes) are read on a background thread at start
LAZY_FILE_BYTES = 1 << 20
#: bytes of an object file's start that hold its name, kind, version and creation time
_HEADER_BYTES = 4096


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


class ObjectLoading(ObjectError):
    """The object's file is still being read back after a start."""

    ename = "ObjectLoading"


class NotWritten(ObjectError):
    """A put refused because the store could not record its version on disk."""

    ename = "NotWritten"


class Claim:
    """Whether the request that makes an object still wants it: a put that carries one is made
    only if :meth:`take` succeeds, under the store's put lock, right before the object is
    published. The request's runner calls :meth:`cancel` when it answers the client with an
    error (a deadline passed, the daemon stopping): after that nothing is published; once
    taken, a cancel fails (the runner then answers with the work's own outcome).

    Args:
        deadline: ``time.monotonic()`` after which the request is no longer wanted (inf: none).
    """

    def __init__(self, deadline: float = float("inf")):
        self.deadline = deadline
        self._lock = threading.Lock()
        self.state = "open"  # then "taken" or "cancelled"
        self.reason = ""

    def cancel(self, reason: str) -> bool:
        """Give the request up; False when its object was already published."""
        with self._lock:
            if self.state == "taken":
                return False
            if self.state == "open":
                self.state, self.reason = "cancelled", reason
            return True

    def take(self) -> None:
        """Commit to publishing (once the deadline has not passed and no cancel came).

        Raises:
            TimeoutError: the deadline has passed.
            concurrent.futures.CancelledError: cancelled (``reason`` says why).
        """
        from concurrent.futures import CancelledError

        with self._lock:
            if self.state == "open" and time.monotonic() >= self.deadline:
                self.state, self.reason = "cancelled", "deadline"
            if self.state == "cancelled":
                if self.reason == "deadline":
                    raise TimeoutError("the request's deadline passed before its object was kept")
                raise CancelledError(self.reason)
            self.state = "taken"


_gc_lock = threading.Lock()
_gc_state = {"paused": 0, "was_enabled": False}


@contextlib.contextmanager
def quiet_gc():
    """Pause Python's cyclic garbage collector while a large object is decoded, built and kept,
    then freeze what is live (:func:`gc.freeze`): the millions of small objects of a large
    document would otherwise make each full collection hold the interpreter for a long time,
    during the put and after it, whatever thread triggers it (objects have no reference
    cycles: reference counting frees them when dropped). Nests across threads."""
    with _gc_lock:
        if _gc_state["paused"] == 0:
            _gc_state["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_state["paused"] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_state["paused"] -= 1
            if _gc_state["paused"] == 0:
                gc.freeze()
                if _gc_state["was_enabled"]:
                    gc.enable()


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
        payload: the object itself (a :class:`optiond.surface.Surface` for kind ``surface`` ),
            never changed once stored.
        nbytes: its serialised size (bytes), counted against ``max_objects_bytes``.
        summary: a few plain fields for listings (JSON-ready).
        created: when it was stored, seconds since the epoch.
        digest: the fingerprint of its kind and document, or None (then every put bumps).
        persisted: True when its file was written, False when that failed (it lives in
            memory only), None for a store without a directory.
    """

    name: str
    kind: str
    version: int
    payload: Any
    nbytes: int
    summary: dict
    created: float
    digest: str | None = None
    persisted: bool | None = None

    @property
    def handle(self) -> str:
        return handle(self.name, self.version)

    def listing(self) -> dict[str, Any]:
        """The entry as a listing shows it: ``name``, ``kind``, ``version``, ``handle``,
        ``created`` (ISO 8601, UTC), ``bytes``, ``summary`` and ``persisted``."""
        created = _dt.datetime.fromtimestamp(self.created, _dt.timezone.utc).isoformat(timespec="seconds")
        return {"name": self.name, "kind": self.kind, "version": self.version, "handle": self.handle,
                "created": created, "bytes": self.nbytes, "summary": dict(self.summary), "persisted": self.persisted}


@dataclasses.dataclass(frozen=True)
class _Pending:
    """A large object file still being read at start: what its first bytes say."""

    name: str
    kind: str
    version: int
    created: float
    path: Path
    nbytes: int


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
        self._loading: dict[str, _Pending] = {}
        self._floor = 0  # every later version is above it
        self._high = 0  # the highest version given
        self._unsaved = False  # a file of this run could not be written
        self._bytes = 0
        self._lock = threading.Lock()
        self._put_lock = threading.RLock()
        self.directory: Path | None = None
        self._dir_lock: Any = None
        self._loader: threading.Thread | None = None
        #: counts the changes (puts of a new version, drops, reads from a directory): a reader that
        #: remembers look-ups checks it
        self.generation = 0

    def put(self, name: str, kind: str, payload: Any, nbytes: int, summary: dict | None = None,
            digest: str | None = None, *, claim: Claim | None = None, document: Any = None) -> Entry:
        """Store ``payload`` as the next version of ``name`` (version 1 for a new name); with
        ``digest`` equal to the live version's, change nothing and return the live entry.

        Args:
            claim: the request that makes it (:class:`Claim`): taken right before the publish;
                nothing is stored when it no longer holds.
            document: the object's canonical JSON text (:func:`optiond.daemon.object_kinds.canonical`),
                written to the directory as is (default: made from the payload).

        Returns:
            the new :class:`Entry` (its ``handle`` is what a client shows; ``persisted``
            False when its file could not be written).

        Raises:
            InvalidInputError: a bad name, or an unknown kind.
            WrongKind: ``name`` holds an object of another kind (drop it first).
            LimitExceeded: over ``max_objects`` (``limit`` of that name) or over
                ``max_objects_bytes``; nothing is changed.
            NotWritten: the version could not be recorded in the directory; nothing is changed.
            TimeoutError, concurrent.futures.CancelledError: ``claim`` no longer holds.
        """
        name = check_name(name)
        if kind not in KINDS:
            raise InvalidInputError("kind", None, kind, f"expected one of {list(KINDS)}")
        with self._put_lock:
            with self._lock:
                old = self._live.get(name)
                if old is not None and old.kind != kind:
                    raise WrongKind(f"{name} holds a {old.kind}, not a {kind}: drop it first or choose another name")
                if old is not None and digest is not None and old.digest == digest:
                    return old
                pending = self._loading.get(name)
                if old is None and pending is None and len(self._live) + len(self._loading) >= self.max_objects:
                    n = len(self._live) + len(self._loading)
                    raise LimitExceeded("max_objects", n + 1, self.max_objects,
                                        f"the daemon holds {n} objects, its limit; drop one "
                                        f"(optiond objects drop NAME) or restart it")
                total = self._bytes - (old.nbytes if old else pending.nbytes if pending else 0) + int(nbytes)
                if total > self.max_bytes:
                    raise LimitExceeded("max_objects_bytes", total, self.max_bytes,
                                        f"{name} ({int(nbytes) / 2**20:.1f} MiB) would take the daemon's objects to "
                                        f"{total / 2**20:.1f} MiB, over its limit of {self.max_bytes / 2**20:.0f} MiB")
                last = old.version if old else pending.version if pending else self._dropped.get(name, 0)
                version = max(last, self._floor) + 1
                directory = self.directory
            if claim is not None:
                claim.take()
            persisted = None
            if directory is not None:
                try:  # first the mark: a version given is never given again, whatever happens next
                    self._write_versions(directory, max(self._high, version), dirty=True)
                except OSError as e:
                    raise NotWritten(f"{handle(name, version)} not kept: cannot record its version in {directory}: "
                                     f"{e}") from None
            entry = Entry(name, kind, version, payload, int(nbytes), dict(summary or {}), time.time(), digest)
            if directory is not None:
                persisted = self._save(directory, entry, document)
                entry = dataclasses.replace(entry, persisted=persisted)
            with self._lock:
                self._live[name] = entry
                self._loading.pop(name, None)
                self._dropped.pop(name, None)
                self._bytes = total
                self._high = max(self._high, version)
                self.generation += 1
            if persisted is False:
                self._unsaved = True
            if directory is not None and not self._unsaved:
                try:
                    self._write_versions(directory, self._high, dirty=False)
                except OSError:
                    pass  # the mark stays dirty: the next start raises its floor
            return entry

    def check_room(self, name: str | None, nbytes: int, reserved: int = 0) -> None:
        """Refuse, before any work, a put of about ``nbytes`` under ``name`` that cannot fit in
        ``max_objects_bytes`` beside the live objects (but the one it replaces; every one when
        the name is not known yet, None) and ``reserved`` bytes of puts under way.

        Raises:
            LimitExceeded: ``max_objects_bytes``.
        """
        with self._lock:
            old = None if name is None else self._live.get(name)
            used = self._bytes - (old.nbytes if old is not None else 0) + int(reserved)
        if used + int(nbytes) > self.max_bytes:
            raise LimitExceeded("max_objects_bytes", used + int(nbytes), self.max_bytes,
                                f"{name or 'the object'} ({int(nbytes) / 2**20:.1f} MiB) would take the daemon's objects to "
                                f"{(used + int(nbytes)) / 2**20:.1f} MiB (puts under way included), over its limit "
                                f"of {self.max_bytes / 2**20:.1f} MiB (max_objects_bytes)")

    def get(self, ref: str, kind: str | None = None) -> Entry:
        """The live object a bare name or a handle names (of ``kind``, if given).

        Raises:
            InvalidInputError: ``ref`` is neither a name nor a handle.
            UnknownObject: no live object of that name.
            StaleHandle: a handle whose version is not the live one.
            WrongKind: the object is not of ``kind``.
            ObjectLoading: its file is still being read after a start.
        """
        name, version = parse_ref(ref)
        with self._lock:
            entry = self._live.get(name)
            loading = entry is None and name in self._loading
            held = sorted(self._live) if entry is None else []
        what = kind or "object"
        if loading:
            raise ObjectLoading(f"the {what} {name} is still being read from disk after the daemon's start; "
                                "try again in a moment")
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
            InvalidInputError, UnknownObject, StaleHandle, ObjectLoading: as :meth:`get`.
        """
        entry = self.get(ref)
        with self._put_lock:
            with self._lock:
                if self._live.get(entry.name) is not entry:  # replaced or dropped meanwhile
                    raise StaleHandle(f"{entry.handle} changed while being dropped; try again")
                del self._live[entry.name]
                self._bytes -= entry.nbytes
                self.generation += 1
                self._forget_count(entry.name, entry.version)
                directory, dropped = self.directory, dict(self._dropped)
            if directory is not None:
                self._forget(directory, entry.name, dropped)
        return entry

    def _forget_count(self, name: str, version: int) -> None:
        """Remember ``name``'s last version as dropped (under ``self._lock``); a count pushed out
        of :data:`DROPPED_MEMORY` raises the floor."""
        self._dropped[name] = version
        while len(self._dropped) > DROPPED_MEMORY:
            self._floor = max(self._floor, self._dropped.popitem(last=False)[1])

    def stats(self) -> dict[str, int]:
        """``objects`` (live), ``bytes`` (their size in all), the two limits and where they are
        kept (``persisted``: the directory, or None); ``loading``, files still being read at start."""
        with self._lock:
            out = {"objects": len(self._live), "bytes": self._bytes, "max_objects": self.max_objects,
                   "max_objects_bytes": self.max_bytes,
                   "persisted": None if self.directory is None else str(self.directory)}
            if self._loading:
                out["loading"] = len(self._loading)
            return out

    def versions(self) -> dict[str, int]:
        """``floor`` and ``high_water`` (see the module docstring)."""
        with self._lock:
            return {"floor": self._floor, "high_water": self._high}

    # ------------------------------------------------------------------ persistence

    def open(self, directory: str | os.PathLike) -> int:
        """Keep the objects in ``directory`` from now on (see the module docstring): lock it,
        read back the objects and version counts it holds (the large files on a background
        thread), and write every later put and drop there. Returns how many objects were read
        at once; 0, with a warning logged, when another store holds the directory's lock or it
        cannot be created (the objects then live in memory only)."""
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
        entries, pending, dropped, marks, bad = _read_directory(directory)
        with self._put_lock, self._lock:
            self.directory = directory
            for name, version in dropped.items():
                if name not in self._live:
                    self._dropped[name] = max(version, self._dropped.get(name, 0))
            seen = [e.version for e in entries] + [p.version for p in pending] + list(dropped.values())
            self._high = max([self._high, marks.get("high_water", 0), *seen])
            self._floor = max(self._floor, marks.get("floor", 0))
            if bad or marks.get("dirty"):  # a version of the last run may be lost: go above them all
                self._floor = max(self._floor, self._high)
            kept = 0
            for e in sorted([*entries, *pending], key=lambda e: e.created, reverse=True):  # the newest first
                if e.name in self._live or e.name in self._loading:
                    continue
                if (len(self._live) + len(self._loading) >= self.max_objects
                        or self._bytes + e.nbytes > self.max_bytes):
                    log.warning("objects: %s from %s skipped: over the daemon's object limits",
                                handle(e.name, e.version), directory)
                    self._forget_count(e.name, e.version)
                    continue
                self._dropped.pop(e.name, None)
                if isinstance(e, _Pending):
                    self._loading[e.name] = e
                else:
                    self._live[e.name] = e
                    kept += 1
                self._bytes += e.nbytes
                self.generation += 1
            high, floor = self._high, self._floor
            late = sorted(self._loading.values(), key=lambda p: p.created, reverse=True)
        try:
            self._write_versions(directory, high, dirty=False, floor=floor)
        except OSError as e:
            log.warning("objects: cannot write %s in %s: %s", VERSIONS_FILE, directory, e)
        if kept:
            log.info("objects: %d read back from %s", kept, directory)
        if late:
            self._loader = threading.Thread(target=self._load_late, args=(late,), name="optiond-objects-load",
                                            daemon=True)
            self._loader.start()
        return kept

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """Wait for the background reading of :meth:`open`; whether it is done."""
        t = self._loader
        if t is not None:
            t.join(timeout)
        return t is None or not t.is_alive()

    def _load_late(self, pending: list) -> None:
        """Background thread: read the large files :meth:`open` left, newest first."""
        with quiet_gc():
            self._load_each(pending)
        log.info("objects: the large files of %s read", self.directory)

    def _load_each(self, pending: list) -> None:
        for p in pending:
            if self.directory is None:
                return
            with self._lock:
                if self._loading.get(p.name) is not p:  # made again or dropped meanwhile
                    continue
            try:
                e = _read_file(p.path)
                if (e.name, e.version) != (p.name, p.version):
                    raise ValueError(f"holds {e.handle}, its start {handle(p.name, p.version)}")
            except Exception as err:  # noqa: BLE001 (a bad file is skipped whatever is wrong with it)
                log.warning("objects: %s skipped: %s", p.path, err)
                e = None
            with self._put_lock, self._lock:
                if self._loading.get(p.name) is not p:
                    continue
                del self._loading[p.name]
                self._bytes -= p.nbytes
                if e is None or self._bytes + e.nbytes > self.max_bytes:
                    self._forget_count(p.name, p.version)  # its version stays given
                    continue
                self._live[e.name] = e
                self._bytes += e.nbytes
                self.generation += 1

    def close(self) -> None:
        """Stop writing to the directory and release its lock (the files stay)."""
        with self._put_lock, self._lock:
            self.directory = None
            lock, self._dir_lock = self._dir_lock, None
            self._loading.clear()
        if lock is not None:
            lock.release(force=True)

    def _write_versions(self, directory: Path, high: int, dirty: bool, floor: int | None = None) -> None:
        """Write ``versions.json`` (raises OSError)."""
        from .paths import _write_atomic

        doc = {"format": VERSIONS_FORMAT, "high_water": int(high),
               "floor": int(self._floor if floor is None else floor), "dirty": bool(dirty or self._unsaved)}
        _write_atomic(directory / VERSIONS_FILE, json.dumps(doc))

    def _save(self, directory: Path, entry: Entry, document: str | None) -> bool:
        """Write ``entry`` to the directory; whether it was written (a failure is logged)."""
        from . import object_kinds
        from .paths import _write_atomic

        try:
            if document is None:
                document = object_kinds.canonical(object_kinds.document(entry.kind, entry.payload))
            head = json.dumps({"format": FILE_FORMAT, "format_version": FILE_FORMAT_VERSION, "name": entry.name,
                               "kind": entry.kind, "version": entry.version, "created": entry.created})
            _write_atomic(directory / _file_name(entry.name), f'{head[:-1]}, "document": {document}}}')
            return True
        except (OSError, ValueError, TypeError) as e:
            log.warning("objects: cannot write %s to %s: %s (it stays in memory)", entry.handle, directory, e)
            try:  # an older version's file must not come back at the next start
                (directory / _file_name(entry.name)).unlink(missing_ok=True)
            except OSError:
                pass
            return False

    def _forget(self, directory: Path, name: str, dropped: dict) -> None:
        """Remove ``name``'s file and record the version counts."""
        from .paths import _write_atomic

        try:
            (directory / _file_name(name)).unlink(missing_ok=True)
            _write_atomic(directory / DROPPED_FILE, json.dumps(dropped))
            self._write_versions(directory, self._high, dirty=False)
        except OSError as e:
            log.warning("objects: cannot record the drop of %s in %s: %s", name, directory, e)


def _file_name(name: str) -> str:
    """The file of ``name`` in a store's directory (a hash: names differ only in case, or hold
    ``/`` and ``:``, on any file system)."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:32] + ".json"


def _check_head(doc: Any, path: Path) -> tuple[str, str, int, float]:
    """``(name, kind, version, created)`` of an object file's map.

    Raises:
        ValueError, InvalidInputError: not an object file, or one under another name's file.
    """
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise ValueError(f"not an {FILE_FORMAT} file")
    name, kind, version = check_name(doc.get("name")), doc.get("kind"), doc.get("version")
    if path.name != _file_name(name):
        raise ValueError(f"holds {name}, whose file is {_file_name(name)}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version {version!r} is not a whole number >= 1")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {list(KINDS)}")
    return name, kind, version, float(doc.get("created"))


_JSON = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _loads(text: str, at: int = 0, depth: int = 0) -> tuple[Any, int]:
    """``(value, end)``: the JSON value at ``text[at:]`` as :func:`json.loads` reads it, its
    maps and arrays of the first levels an item at a time (no single call holds the
    interpreter for the whole of a large file).

    Raises:
        ValueError: not JSON.
    """
    at = _SPACE.match(text, at).end()
    opening = text[at:at + 1]
    if not ((opening == "{" and depth < 2) or (opening == "[" and depth < 3)):
        return _JSON.raw_decode(text, at)
    closing = "}" if opening == "{" else "]"
    out: Any = {} if opening == "{" else []
    at = _SPACE.match(text, at + 1).end()
    if text[at:at + 1] == closing:
        return out, at + 1
    while True:
        if opening == "{":
            key, at = _JSON.raw_decode(text, at)
            at = _SPACE.match(text, at).end()
            if not isinstance(key, str) or text[at:at + 1] != ":":
                raise ValueError(f"expected a key and ':' at {at}")
            out[key], at = _loads(text, at + 1, depth + 1)
        else:
            item, at = _loads(text, at, depth + 1)
            out.append(item)
        at = _SPACE.match(text, at).end()
        sep = text[at:at + 1]
        if sep == closing:
            return out, at + 1
        if sep != ",":
            raise ValueError(f"expected ',' or {closing!r} at {at}")
        at = _SPACE.match(text, at + 1).end()


def _read_file(path: Path) -> Entry:
    """The entry an object file holds (raises on a bad file)."""
    from . import object_kinds

    text = path.read_text(encoding="utf-8")
    doc, end = _loads(text)
    if _SPACE.match(text, end).end() != len(text):
        raise ValueError(f"extra data at {end}")
    name, kind, version, created = _check_head(doc, path)
    payload = object_kinds.build(kind, doc.get("document"))
    canonical = object_kinds.document(kind, payload)
    return Entry(name, kind, version, payload, len(object_kinds.canonical(canonical)),
                 object_kinds.summary(kind, payload), created, object_kinds.digest(kind, canonical), True)


def _read_head(path: Path, size: int) -> _Pending:
    """What a large object file's first bytes say (our writer puts the document last)."""
    with open(path, "rb") as f:
        text = f.read(_HEADER_BYTES).decode("utf-8", errors="replace")
    at = text.find(', "document":')
    if at < 0:
        raise ValueError("no object header in its first bytes")
    name, kind, version, created = _check_head(json.loads(text[:at] + "}"), path)
    return _Pending(name, kind, version, created, path, size)


def _read_directory(directory: Path) -> tuple[list[Entry], list[_Pending], dict[str, int], dict, int]:
    """The entries, the large files' headers, the dropped version counts, the version marks
    and how many object files did not read, of a store's directory; what does not read is
    logged and skipped."""
    entries: list[Entry] = []
    pending: list[_Pending] = []
    bad = 0
    for path in sorted(directory.glob("*.json")):
        if path.name in (DROPPED_FILE, VERSIONS_FILE):
            continue
        try:
            size = path.stat().st_size
            if size > LAZY_FILE_BYTES:
                pending.append(_read_head(path, size))
            else:
                entries.append(_read_file(path))
        except Exception as e:  # noqa: BLE001 (a bad file is skipped whatever is wrong with it)
            log.warning("objects: %s skipped: %s", path, e)
            bad += 1
    dropped: dict[str, int] = {}
    marks: dict = {}
    for name in (DROPPED_FILE, VERSIONS_FILE):
        path = directory / name
        if not path.exists():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if name == DROPPED_FILE:
                dropped = {str(k): int(v) for k, v in doc.items() if isinstance(v, int) and not isinstance(v, bool)}
            elif isinstance(doc, dict) and doc.get("format") == VERSIONS_FORMAT:
                marks = {k: int(doc[k]) for k in ("high_water", "floor", "dirty") if isinstance(doc.get(k), (int, bool))}
            else:
                raise ValueError(f"not an {VERSIONS_FORMAT} file")
        except Exception as e:  # noqa: BLE001
            log.warning("objects: %s skipped: %s", path, e)
            bad += 1  # version counts may be lost: the floor goes above every version seen
    return entries, pending, dropped, marks, bad


__all__ = ["DROPPED_MEMORY", "FILE_FORMAT", "KINDS", "LAZY_FILE_BYTES", "Claim", "Entry", "NotWritten", "ObjectError",
           "ObjectLoading", "ObjectStore", "StaleHandle", "UnknownObject", "WrongKind", "check_name", "handle",
           "parse_ref", "quiet_gc"]
