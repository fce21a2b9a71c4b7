"""The daemon's named market objects: the one owner of every object a client keeps in the
daemon by name (a fitted volatility surface first; zero curves, dividend schedules and Heston
parameter sets are kinds to come), each with a version.

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

Objects live in the daemon's memory: a restart starts with none, and versions count from 1
again. Keeping them in the user's data directory across restarts is a later step; the entries
(kind, version, payload with a JSON form, creation time) carry what that needs.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import threading
import time
from collections import OrderedDict
from typing import Any

from ..limits import LimitExceeded, Limits
from ..models import InvalidInputError

#: the kinds of object the daemon keeps
KINDS = ("surface",)
#: a name: what the client gives; a handle: the name and a version after ``#``
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
HANDLE_PATTERN = re.compile(r"(?P<name>[^#]+)#(?P<version>[0-9]{1,9})")
#: digits of a handle's version (more once a name passes 9999 versions)
VERSION_DIGITS = 4
#: names whose version count is kept after they were dropped (the oldest forgotten first)
DROPPED_MEMORY = 4096


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
    """

    name: str
    kind: str
    version: int
    payload: Any
    nbytes: int
    summary: dict
    created: float

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

    def put(self, name: str, kind: str, payload: Any, nbytes: int, summary: dict | None = None) -> Entry:
        """Store ``payload`` as the next version of ``name`` (version 1 for a new name).

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
            entry = Entry(name, kind, version, payload, int(nbytes), dict(summary or {}), time.time())
            self._live[name] = entry
            self._bytes = total
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
            self._dropped[entry.name] = entry.version
            while len(self._dropped) > DROPPED_MEMORY:
                self._dropped.popitem(last=False)
        return entry

    def stats(self) -> dict[str, int]:
        """``objects`` (live), ``bytes`` (their size in all) and the two limits."""
        with self._lock:
            return {"objects": len(self._live), "bytes": self._bytes, "max_objects": self.max_objects,
                    "max_objects_bytes": self.max_bytes}


__all__ = ["DROPPED_MEMORY", "KINDS", "Entry", "ObjectError", "ObjectStore", "StaleHandle", "UnknownObject",
           "WrongKind", "check_name", "handle", "parse_ref"]
