"""The worksheet functions' request cache: a bounded, thread-safe LRU map from a canonical
request (operation, method and columns) to its answer, and the settings read from the
environment (``OPTIOND_CACHE=0`` turns the cache off). :func:`clear_cache` empties it,
:func:`cache_info` reports hits, misses and size; both are also importable from
:mod:`optiond.addin.functions`."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from typing import Any, Mapping

import numpy as np

from ..models import Method


#: the cache: at most this many requests, holding at most this many rows in all
CACHE_MAX_ENTRIES = 4096
CACHE_MAX_ROWS = 2_000_000

_FALSE_WORDS = {"0", "false", "no", "off"}


def _env_on(name: str, default: bool = True) -> bool:
    v = os.environ.get(name)
    return default if v is None or not v.strip() else v.strip().lower() not in _FALSE_WORDS


# ---- the cache -----------------------------------------------------------------------------

class _Cache:
    """A bounded LRU map from a canonical request to its normalised answer (thread-safe)."""

    def __init__(self, max_entries: int = CACHE_MAX_ENTRIES, max_rows: int = CACHE_MAX_ROWS):
        self.max_entries, self.max_rows = max_entries, max_rows
        self._d: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._rows = 0
        self.hits = self.misses = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            item = self._d.get(key)
            if item is None:
                self.misses += 1
                return None
            self._d.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Any, value: Any, rows: int) -> None:
        if rows > self.max_rows:
            return
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self._rows -= old[1]
            self._d[key] = (value, rows)
            self._rows += rows
            while len(self._d) > self.max_entries or self._rows > self.max_rows:
                _, (_, r) = self._d.popitem(last=False)
                self._rows -= r

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._rows = 0
            self.hits = self.misses = 0

    def info(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "entries": len(self._d), "rows": self._rows,
                    "max_entries": self.max_entries, "max_rows": self.max_rows}


_cache = _Cache()


def clear_cache() -> None:
    """Forget every cached answer, so the next recalculation prices again."""
    _cache.clear()


def cache_info() -> dict[str, Any]:
    """Cache statistics (hits, misses, entries, rows, limits) and whether it is ``enabled``
    (``OPTIOND_CACHE`` not set to 0)."""
    return _cache.info() | {"enabled": _env_on("OPTIOND_CACHE")}


#: the plain scalar types a one-cell request carries: keyed by type and value, without an array
_SCALARS = (float, int, str, bool)


def _array_key(v: Any) -> tuple:
    if type(v) in _SCALARS:
        return ("s", type(v), v)
    a = np.ascontiguousarray(v)
    if a.dtype == object:
        return ("O", a.shape, tuple(a.ravel().tolist()))
    return (a.dtype.str, a.shape, a.tobytes())


#: the method's field names, in order (read once)
_METHOD_FIELDS = tuple(f.name for f in dataclasses.fields(Method))


def _method_key(method: Method) -> tuple:
    return tuple(_array_key(v) if isinstance(v, np.ndarray) else v for v in (getattr(method, f) for f in _METHOD_FIELDS))


def _request_key(op: str, method: Method, columns: Mapping[str, Any], prices: Any) -> tuple:
    return (op, _method_key(method), tuple((k, _array_key(columns[k])) for k in sorted(columns)),
            None if prices is None else _array_key(prices))
