"""Turning scalars and sequences into equal-length contiguous NumPy columns; reading a CSV of
named columns (:func:`read_csv_table`)."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np


def as_columns(*cols, dtype=np.float64):
    """Broadcast scalars and 1-D sequences to contiguous, writeable arrays of one length n.

    Each item is a value, or a ``(value, dtype)`` pair to override ``dtype`` for that column.

    Raises:
        ValueError: a column is not 0-D or 1-D, or lengths differ.
    """
    pairs = [c if isinstance(c, tuple) else (c, dtype) for c in cols]
    arrs = [np.asarray(v) for v, _ in pairs]
    lengths = {a.shape[0] for a in arrs if a.ndim == 1}
    if any(a.ndim > 1 for a in arrs) or len(lengths) > 1:
        raise ValueError(f"columns must be scalars or 1-D of one length, got shapes {[a.shape for a in arrs]}")
    n = lengths.pop() if lengths else 1
    return [np.full(n, a, dtype=dt) if a.ndim == 0 else kernel_column(a, dt) for a, (_, dt) in zip(arrs, pairs)]


def kernel_column(a, dtype) -> np.ndarray:
    """``a`` as a contiguous array of ``dtype``, copied when it is read-only (a column of a
    copy-on-write DataFrame, a buffer decoded from the wire, a broadcast view): numba types a
    read-only array apart from a writeable one and compiles a kernel again for every pattern of
    read-only arguments."""
    out = np.ascontiguousarray(a, dtype=dtype)
    return out if out.flags.writeable else out.copy()


def unknown_columns(names: Iterable[str], known: Iterable[str]) -> list[str]:
    """The names of ``names`` outside ``known``, in their order: the one rule for columns nobody
    reads, which the file readers list for a warning (:func:`read_csv_table`) and
    :func:`optiond.engine.price_table` refuses."""
    known_set = known if isinstance(known, (set, frozenset)) else set(known)
    return [c for c in names if c not in known_set]


class TableFileError(ValueError):
    """A CSV file that cannot be read as a table: missing or unreadable, empty, not CSV, or with
    a column name given twice. The message names the file and what is wrong."""


def read_csv_table(path: str, known: Sequence[str]):
    """Read a CSV of named columns, refusing duplicate column names.

    pandas renames a second ``spot`` to ``spot.1`` (and the first silently wins), so the header
    row is read as written, with the csv module, before pandas reads the file.

    Args:
        path: the CSV file (UTF-8, a byte-order mark allowed).
        known: the column names the caller reads; any other is listed in
            ``df.attrs["ignored_columns"]`` (in file order) for the caller to warn about.

    Returns:
        A :class:`pandas.DataFrame`.

    Raises:
        TableFileError: the file cannot be read, is empty (no header), is not CSV, or names a
            column twice.
    """
    import csv

    import pandas as pd

    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f), None)
        if not header or all(not h.strip() for h in header):
            raise TableFileError(f"{path} is empty: expected a header row naming the columns")
        seen: dict[str, int] = {}
        for name in header:
            seen[name.strip()] = seen.get(name.strip(), 0) + 1
        dups = [k for k, c in seen.items() if c > 1]
        if dups:
            raise TableFileError(f"{path}: column{'s' if len(dups) > 1 else ''} {', '.join(map(repr, dups))} "
                                 f"given more than once; keep one of each")
        df = pd.read_csv(path, encoding="utf-8-sig")
    except TableFileError:
        raise
    except (OSError, UnicodeDecodeError, csv.Error, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise TableFileError(f"cannot read {path}: {e}") from None
    df.columns = [str(c).strip() for c in df.columns]
    df.attrs["ignored_columns"] = unknown_columns(df.columns, known)
    return df
