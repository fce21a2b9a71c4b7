"""One market per underlying.

A chain file may hold several underlyings (a trader concatenates the files of a book): each
underlying has its own spot, forwards and carry, so :func:`optiond.chain.solve_market` solves
each one's market on its own rows only (:func:`solve_each`), and no row is ever priced on
another underlying's spot.

The ``underlying`` cell is the symbol, compared without surrounding spaces and without case
(``spy`` and ``SPY`` are one underlying). A cell that is not a symbol marks its row ``invalid``
with the reason and the rest of the chain still prices: longer than :data:`MAX_SYMBOL_CHARS`
characters, a control character, or blank where other rows name an underlying (a chain whose
``underlying`` cells are all blank is one unnamed underlying); in a chain of more than
:data:`MAX_UNDERLYINGS`, the rows of those with the fewest rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from .chain_market import ChainMarket

#: the longest symbol: OCC roots have at most 6 characters, vendor tickers ("BRK.B", "SPX Index",
#: "RDSA LN Equity") stay well under this; anything longer is not a symbol
MAX_SYMBOL_CHARS = 32
#: underlyings named in full in a message, the rest counted
NAMED_IN_MESSAGES = 5
#: most underlyings of one chain (each market costs a few milliseconds however few its rows, so
#: a file of a million one-row "underlyings" would otherwise cost an hour): those with the most
#: rows get a market, the rows of the rest are invalid
MAX_UNDERLYINGS = 1000


@dataclass
class Underlyings:
    """The underlyings of a chain: ``names`` (distinct valid symbols, upper-cased, in order of
    first appearance; ``""`` for a chain whose cells are all blank), ``code`` (per row, shape
    (n,), the index into ``names``, -1 where the cell is not a symbol) and ``error`` (per row,
    shape (n,), object: why the cell is not a symbol, "" where it is)."""

    names: list[str]
    code: np.ndarray
    error: np.ndarray

    def rows(self, i: int) -> np.ndarray:
        """The row indices of underlying ``names[i]`` (ascending)."""
        return np.flatnonzero(self.code == i)

    def text(self) -> str:
        """The underlyings for a message: ``SPY, QQQ`` (the first few, then a count)."""
        return describe(self.names)


def describe(names: list[str]) -> str:
    """``names`` for a one-line message: the first :data:`NAMED_IN_MESSAGES`, then how many more."""
    shown = ", ".join(n or "(blank)" for n in names[:NAMED_IN_MESSAGES])
    more = len(names) - NAMED_IN_MESSAGES
    return shown + (f" and {more} more" if more > 0 else "")


def symbol_problem(name: str) -> str:
    """Why the stripped cell ``name`` is not a symbol ("" when it is; blank is judged by the
    caller)."""
    if len(name) > MAX_SYMBOL_CHARS:
        return (f"underlying {name[:12]!r}... is {len(name):,} characters long, not a symbol "
                f"(at most {MAX_SYMBOL_CHARS})")
    if not name.isprintable():
        return f"underlying {name[:MAX_SYMBOL_CHARS]!r} holds a control character, not a symbol"
    return ""


def split(column: pd.Series) -> Underlyings:
    """The underlyings of a chain's ``underlying`` column (see the module docstring).

    Args:
        column: one cell per row, shape (n,) (text; a blank cell NaN or "").

    Returns:
        :class:`Underlyings`. Never raises: a bad cell only marks its row.
    """
    which, distinct = pd.factorize(pd.Series(column, dtype=object), use_na_sentinel=True)
    key = [str(v).strip().upper() for v in distinct] + [""]  # the last: NaN cells (code -1)
    problem = [symbol_problem(k) for k in key]
    names: list[str] = []
    index: dict[str, int] = {}
    for k, p in zip(key, problem):
        if k and not p and k not in index:
            index[k] = len(names)
            names.append(k)
    if not names:  # no cell names one: the blank cells are one unnamed underlying
        names, index = [""], {"": 0}
    blank = f"the underlying cell is blank (the chain holds {describe(names)})"
    code_of = np.array([index.get(k, -1) if not p else -1 for k, p in zip(key, problem)], dtype=np.int64)
    error_of = np.array([p or (blank if k not in index else "") for k, p in zip(key, problem)], dtype=object)
    code, error = code_of[which], error_of[which]
    if len(names) > MAX_UNDERLYINGS:  # keep those with the most rows (the first seen among equals)
        rows = np.bincount(code[code >= 0], minlength=len(names))
        keep = np.sort(np.argsort(-rows, kind="stable")[:MAX_UNDERLYINGS])
        new = np.full(len(names), -1, dtype=np.int64)
        new[keep] = np.arange(keep.size)
        dropped = (code >= 0) & (new[np.maximum(code, 0)] < 0)
        error[dropped] = (f"the chain holds {len(names):,} underlyings, more than {MAX_UNDERLYINGS:,}: those with "
                          f"the most rows are priced, this one's are not (split the file)")
        code = np.where(code >= 0, new[np.maximum(code, 0)], -1)
        names = [names[i] for i in keep.tolist()]
    return Underlyings(names, code, error)


def one_underlying(column: pd.Series, what: str) -> str:
    """The chain's single underlying, for a step that takes one (a surface or Heston fit).

    Raises:
        ValueError: the chain holds several underlyings (one line naming them and ``what``).
    """
    u = split(column)
    if len(u.names) > 1:
        raise ValueError(f"{what} takes one underlying; the chain holds {len(u.names)} ({u.text()}): "
                         f"split the file by underlying")
    return u.names[0] if u.names else ""


def solve_each(df: pd.DataFrame, solve: Callable[[pd.DataFrame], ChainMarket], *, one_only: str = "",
               table_columns: list[str]) -> ChainMarket:
    """The market of a chain, each underlying's solved on its own rows.

    Args:
        df: the chain (an ``underlying`` column and what ``solve`` reads), n rows.
        solve: the market of a chain of one underlying (:func:`optiond.chain.solve_market`'s
            per-underlying solve): a :class:`ChainMarket` of the rows it is given, its table
            without the ``underlying`` column.
        one_only: when not "", what takes a single underlying (a dividend file): a chain of
            several is then refused.
        table_columns: the market table's columns (``underlying`` first), for a chain without rows.

    Returns:
        :class:`ChainMarket` of the n rows, its table's first column ``underlying``; rows whose
        cell is not a symbol have no market (group -1, their reason in ``clock_error``).

    Raises:
        ValueError: several underlyings and ``one_only`` (one line naming them).
    """
    u = split(df["underlying"]) if "underlying" in df.columns else Underlyings([""], np.zeros(len(df), np.int64),
                                                                                np.full(len(df), "", dtype=object))
    if one_only and len(u.names) > 1:
        raise ValueError(f"{one_only} is for one underlying; the chain holds {len(u.names)} ({u.text()}): "
                         f"split the file by underlying")
    if len(u.names) <= 1 and not u.error.any():  # the common case: no copy of the chain
        m = solve(df)
        m.table.insert(0, "underlying", u.names[0] if u.names else "")
        return m
    parts = []
    for i, name in enumerate(u.names):
        rows = u.rows(i)
        if rows.size:
            m = solve(df.iloc[rows].reset_index(drop=True))
            m.table.insert(0, "underlying", name)
            parts.append((rows, m))
    return ChainMarket.combine(len(df), parts, u.error, table_columns)
