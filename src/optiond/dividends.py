"""Cash-dividend schedules from text and files: the one parser of the front ends.

The engine takes a schedule as two float columns (:data:`optiond.models.DIVIDEND_FIELDS`):
ex-dates in years from the valuation and cash amounts in currency units, shape (n, m) with NaN
padding. This module turns what people write into those arrays:

* a portfolio cell (``optiond price``'s ``dividends`` column, the panel's portfolios):
  ``WHEN:AMOUNT;WHEN:AMOUNT;...`` where ``WHEN`` is an ex-date ``YYYY-MM-DD`` or a number of
  years from the valuation, and ``AMOUNT`` a cash amount (:func:`parse_schedule`,
  :func:`schedule_columns`); a blank cell is no dividend;
* a dividend file (``optiond chain --dividends``, the panel's "Dividends..." file): a CSV with
  columns ``ex_date,amount`` (:func:`read_dividend_file`), turned into each chain contract's
  schedule by :func:`chain_schedules`.

**Date rule** (one function, :func:`ex_date_years`): a stock goes ex-dividend at the open, so
an ex-date is the instant 09:30 America/New_York on that day, and its time in years is the
chain's clock (:func:`optiond.market.clock.years_between`: elapsed minutes from the valuation
instant over 525,600, Actual/365). A portfolio's valuation instant is ``--valuation``
(:func:`valuation_instant`: a date is its 16:00 close, or an ISO 8601 timestamp); its
``expiry`` column stays in years from that instant. A chain's valuation instant is each row's
quote instant.

The checks of a schedule (amounts >= 0, ex-dates inside [0, expiry], ascending, at most
:data:`~optiond.models.MAX_DIVIDENDS`, sum below the spot) are
:func:`optiond.models.validate_dividends`'; the parser only reads, and counts a cell's entries
before it reads them (a cell over the limit is its row's error, and no row is padded to it).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .market import clock
from .models import MAX_DIVIDENDS, RowError

#: the portfolio column of per-row schedules
DIVIDENDS_COLUMN = "dividends"
#: the columns of a dividend file
DIVIDEND_FILE_COLUMNS = ("ex_date", "amount")
#: the instant of an ex-date: the open, when the stock first trades without the dividend
EX_TIME = clock.SETTLEMENT_TIMES["am"]

_DATE = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")


def _timestamp(text: Any, problem: str) -> pd.Timestamp:
    """``pd.Timestamp(text)``, or ValueError(``problem``) when it is not a time."""
    try:
        ts = pd.Timestamp(text)
    except (ValueError, TypeError) as e:
        raise ValueError(problem) from e
    if pd.isna(ts):
        raise ValueError(problem)
    return ts


def valuation_instant(text: Any) -> pd.Timestamp:
    """The UTC instant a portfolio is valued at, from ``YYYY-MM-DD`` (16:00 New York, the
    close, as a chain without a quote time) or an ISO 8601 timestamp (without an offset: New
    York time).

    Raises:
        ValueError: text that is neither.
    """
    s = str(text).strip()
    if _DATE.match(s):
        return clock.quote_instant(s)
    ts = _timestamp(s, f"valuation {text!r}: expected YYYY-MM-DD or an ISO 8601 timestamp")
    day = (ts.tz_convert(clock.EXCHANGE_TZ) if ts.tzinfo is not None else ts).date()
    return clock.quote_instant(day, s)


def ex_date_years(valuation: pd.Timestamp, ex_date: Any) -> float:
    """Years from ``valuation`` (a UTC instant) to the ex-date ``ex_date`` (``YYYY-MM-DD`` or a
    date) at :data:`EX_TIME` New York: minutes over 525,600, negative when already past.

    Raises:
        ValueError: an ex-date that is not a date.
    """
    day = _timestamp(ex_date, f"ex-date {ex_date!r} is not a date (YYYY-MM-DD)")
    ex = pd.Timestamp(dt.datetime.combine(day.date(), EX_TIME), tz=clock.EXCHANGE_TZ).tz_convert("UTC")
    return clock.years_between(valuation, ex)


def _blank(cell: Any) -> bool:
    return cell is None or (isinstance(cell, float) and math.isnan(cell)) or str(cell).strip() == ""


def parse_schedule(cell: Any, valuation: pd.Timestamp | None = None) -> tuple[list[float], list[float]]:
    """One schedule from a cell ``WHEN:AMOUNT;WHEN:AMOUNT;...``.

    Args:
        cell: the text; ``WHEN`` an ex-date ``YYYY-MM-DD`` or years from the valuation,
            ``AMOUNT`` currency units; blank (or NaN): no dividend. A trailing ``;`` is fine.
        valuation: the UTC valuation instant (:func:`valuation_instant`), needed by ex-dates.

    Returns:
        ``(times, amounts)``: years and currency units, in the cell's order (not checked: see
        :func:`optiond.models.validate_dividends`).

    Raises:
        ValueError: an entry without ``:``, a ``WHEN`` that is neither a date nor a number, an
            ex-date with no valuation, or an amount that is not a number.
    """
    if _blank(cell):
        return [], []
    times, amounts = [], []
    for entry in str(cell).split(";"):
        if not entry.strip():
            continue
        when, sep, amount = entry.rpartition(":")
        if not sep or not when.strip():
            raise ValueError(f"{entry.strip()!r}: expected WHEN:AMOUNT (YYYY-MM-DD:amount or years:amount)")
        if _DATE.match(when):
            if valuation is None:
                raise ValueError(f"ex-date {when.strip()} needs a valuation date (--valuation)")
            t = ex_date_years(valuation, when.strip())
        else:
            try:
                t = float(when)
            except ValueError:
                raise ValueError(f"{when.strip()!r}: not a date (YYYY-MM-DD) or a number of years") from None
        try:
            a = float(amount)
        except ValueError:
            raise ValueError(f"amount {amount.strip()!r} is not a number") from None
        times.append(t)
        amounts.append(a)
    return times, amounts


def pad_schedules(schedules: Sequence[tuple[Sequence[float], Sequence[float]]], width: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per-row ``(times, amounts)`` lists as the engine's two (n, m) float64 arrays: m the
    longest schedule (at least 1) or ``width`` if smaller, times NaN and amounts 0 where a
    row's schedule is shorter; a row longer than ``width`` keeps its first ``width`` entries
    (None: every entry)."""
    m = max((len(t) for t, _ in schedules), default=0) or 1
    m = m if width is None else max(1, min(m, int(width)))
    times = np.full((len(schedules), m), np.nan)
    amounts = np.zeros((len(schedules), m))
    for i, (t, a) in enumerate(schedules):
        times[i, :min(len(t), m)] = t[:m]
        amounts[i, :min(len(a), m)] = a[:m]
    return times, amounts


def entry_count(cell: Any) -> int:
    """The number of ``WHEN:AMOUNT`` entries of a schedule cell (:func:`parse_schedule`'s
    format; blank entries and a blank cell count 0), counted without reading them."""
    if _blank(cell):
        return 0
    return sum(1 for entry in str(cell).split(";") if entry.strip())


def _clipped(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def schedule_columns(cells: Sequence[Any], valuation: pd.Timestamp | None = None
                     ) -> tuple[np.ndarray, np.ndarray, list[RowError]]:
    """A portfolio's ``dividends`` column as the engine's schedule columns.

    Args:
        cells: one cell per row (see :func:`parse_schedule`), shape (n,).
        valuation: the UTC valuation instant, for cells with ex-dates.

    Returns:
        ``(dividend_times, dividend_amounts, errors)``: float64 arrays (n, m) (:func:`pad_schedules`,
        m <= :data:`~optiond.models.MAX_DIVIDENDS`) and one :class:`~optiond.models.RowError`
        (field ``dividends``) per cell that does not parse or has more than ``MAX_DIVIDENDS``
        entries (counted before they are read: :func:`entry_count`); that row's schedule is
        left empty. Never raises.
    """
    schedules, errors = [], []
    for i, cell in enumerate(list(cells)):
        k = entry_count(cell)
        if k > MAX_DIVIDENDS:
            schedules.append(([], []))
            errors.append(RowError(i, DIVIDENDS_COLUMN, _clipped(str(cell)),
                                   f"{k} dividends, at most {MAX_DIVIDENDS} per option"))
            continue
        try:
            schedules.append(parse_schedule(cell, valuation))
        except ValueError as e:
            schedules.append(([], []))
            errors.append(RowError(i, DIVIDENDS_COLUMN, cell, str(e)))
    t, a = pad_schedules(schedules)
    return t, a, errors


def read_dividend_file(path: str) -> pd.DataFrame:
    """A dividend file: CSV columns ``ex_date`` (``YYYY-MM-DD``) and ``amount`` (currency units).

    Returns:
        The rows sorted by ex-date, columns ``ex_date`` (:class:`datetime.date`) and ``amount``
        (float).

    Raises:
        ValueError: the file cannot be read, lacks a column, or a row's ex-date is not a date
            or its amount not a finite number >= 0 (the message names the file, row and field).
    """
    from .columns import read_csv_table

    df = read_csv_table(path, DIVIDEND_FILE_COLUMNS)
    missing = [c for c in DIVIDEND_FILE_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}; expected {','.join(DIVIDEND_FILE_COLUMNS)}")
    dates, amounts = [], []
    for i, (d, a) in enumerate(zip(df["ex_date"].tolist(), df["amount"].tolist()), start=1):
        if _blank(d) or not _DATE.match(str(d)) or pd.isna(pd.Timestamp(str(d).strip())):
            raise ValueError(f"{path} row {i}: ex_date={d!r}: expected a date YYYY-MM-DD")
        try:
            v = float(a)
        except (TypeError, ValueError):
            v = math.nan
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{path} row {i}: amount={a!r}: expected a cash amount >= 0")
        dates.append(pd.Timestamp(str(d).strip()).date())
        amounts.append(v)
    out = pd.DataFrame({"ex_date": dates, "amount": amounts})
    return out.sort_values("ex_date", kind="stable").reset_index(drop=True)


def chain_schedules(divs: pd.DataFrame, quote_instants: Sequence[Any], T: np.ndarray,
                    width: int | None = MAX_DIVIDENDS + 1) -> tuple[np.ndarray, np.ndarray]:
    """Each chain contract's schedule: the dividends of ``divs`` (:func:`read_dividend_file`)
    that go ex after the contract's quote instant and before its expiry.

    Args:
        divs: ``ex_date``, ``amount`` rows.
        quote_instants: per-row UTC quote instants (ISO strings or timestamps; "" where the row's
            time cells did not parse), shape (n,).
        T: per-row years to expiry (the chain's clock), shape (n,).
        width: the most entries a row keeps (:func:`pad_schedules`): by default one more than
            :data:`~optiond.models.MAX_DIVIDENDS`, enough for the engine to refuse a row over
            that limit (:func:`optiond.models.validate_dividends`) without n x (dividends in the
            file) floats; None: every entry (a few rows, e.g. one per expiry).

    Returns:
        ``(dividend_times, dividend_amounts)``, float64 (n, m) (:func:`pad_schedules`): years
        from each row's quote instant (0 < t < T) and currency units.
    """
    years_by_quote: dict[Any, np.ndarray] = {}
    amounts = divs["amount"].to_numpy(dtype=np.float64)
    schedules = []
    for q, Ti in zip(list(quote_instants), np.asarray(T, dtype=np.float64).tolist()):
        if _blank(q) or not math.isfinite(Ti):
            schedules.append(([], []))
            continue
        if q not in years_by_quote:
            start = pd.Timestamp(q)
            years_by_quote[q] = np.array([ex_date_years(start, d) for d in divs["ex_date"]], dtype=np.float64)
        t = years_by_quote[q]
        keep = (t > 0.0) & (t < Ti)
        k = np.flatnonzero(keep)[:width]
        schedules.append((t[k].tolist(), amounts[k].tolist()))
    return pad_schedules(schedules, width)


def present_value(times: np.ndarray, amounts: np.ndarray, rate: np.ndarray | float) -> np.ndarray:
    """Per row, the present value of a schedule at a flat continuously compounded ``rate``:
    ``sum_j D_j exp(-r t_j)`` over the row's dividends (NaN times skipped), shape (n,)."""
    t = np.atleast_2d(np.asarray(times, dtype=np.float64))
    a = np.atleast_2d(np.asarray(amounts, dtype=np.float64))
    r = np.asarray(rate, dtype=np.float64).reshape(-1, 1) if np.ndim(rate) else float(rate)
    with np.errstate(invalid="ignore"):
        pv = np.where(np.isnan(t), 0.0, a * np.exp(-r * np.where(np.isnan(t), 0.0, t)))
    return pv.sum(axis=1)
