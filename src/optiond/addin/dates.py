"""Dates for T: a worksheet function's time to expiry given as the expiry date.

Every ``T`` argument takes a year fraction or a date, cell by cell:

* **A year fraction**: a number below :data:`DATE_MIN_SERIAL` (1000 years: no option lives
  that long), used as it is.
* **A date**: a date cell (xlwings hands it over as a ``datetime``), an Excel serial number
  of at least :data:`DATE_MIN_SERIAL` (days since 1899-12-30, the 1900 date system: 1000 is
  1902-09-26), or ISO text (``2026-03-20``, ``2026-03-20T10:30``). It is the expiry: T runs
  from the valuation instant to the expiry instant, in minutes over 525,600 (the chain job's
  clock, :mod:`optiond.market.clock`).

Instants, the chain job's rules: a date alone is its 16:00 New York close (the expiry: the
chain's default PM settlement, :func:`optiond.market.clock.settlement_instant`; the valuation:
a quote date without a time, :func:`optiond.market.clock.quote_instant`); a date with a time
of day is that time in New York. The valuation is the optional ``valuation`` argument (a date,
a date and time, a serial or ISO text), or, when it is empty, the machine's clock now,
truncated to the minute (so the cells of one recalculation agree). A valuation at or after the
expiry is the cell's error; with a year-fraction T the valuation is not used.

A date T gives, to the last bit, the price of the year fraction
``clock.years_between(valuation instant, expiry instant)``.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

import numpy as np
import pandas as pd

from ..market import clock

#: a T of at least this is an Excel date serial (1902-09-26); below it, years
DATE_MIN_SERIAL = 1000.0
#: Excel's day zero (1900 date system; serials from 61 on, the dates of any expiry)
EXCEL_EPOCH = _dt.datetime(1899, 12, 30)
_DAY = _dt.timedelta(days=1)


def _serial(v: Any) -> float | None:
    """A date-like cell as an Excel serial (days since :data:`EXCEL_EPOCH`, the fraction the
    time of day in New York), None when it is not date-like. An aware datetime is converted
    to New York time first."""
    if isinstance(v, str):
        try:
            v = _dt.datetime.fromisoformat(v.strip())
        except ValueError:
            return None
    if isinstance(v, np.datetime64):
        v = pd.Timestamp(v).to_pydatetime()
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(clock.EXCHANGE_TZ).replace(tzinfo=None)
        return (v - EXCEL_EPOCH) / _DAY
    if isinstance(v, _dt.date):
        return float((v - EXCEL_EPOCH.date()).days)
    return None


def expiry_cell(v: Any) -> Any:
    """A ``T`` cell: a float (years, or an Excel serial >= :data:`DATE_MIN_SERIAL` for a
    date), or None when it is neither a number nor a date (the caller's number parser then
    words the error)."""
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    s = _serial(v)
    if s is None:
        return None
    return s if s >= DATE_MIN_SERIAL else math.nan


def valuation_cell(v: Any) -> Any:
    """A ``valuation`` cell: an Excel serial (float), NaN when empty (now), or None when it is
    not a date."""
    if v is None or (isinstance(v, str) and not v.strip()):
        return math.nan
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v) if (math.isnan(v) or v >= DATE_MIN_SERIAL) else None
    return _serial(v)


def is_date(T: Any) -> bool:
    """Whether a parsed T (:func:`expiry_cell`) is a date serial."""
    return isinstance(T, float) and T >= DATE_MIN_SERIAL


def now_serial() -> float:
    """The machine's clock now, in New York time, truncated to the minute, as an Excel serial."""
    t = _dt.datetime.now(clock.EXCHANGE_TZ).replace(second=0, microsecond=0, tzinfo=None)
    return (t - EXCEL_EPOCH) / _DAY


def _wall(serial: float) -> _dt.datetime:
    """An Excel serial as a New York wall-clock time, to the second."""
    return EXCEL_EPOCH + _dt.timedelta(seconds=round(serial * 86400.0))


def expiry_instant(serial: float) -> pd.Timestamp:
    """The UTC instant of an expiry serial: a whole date at the chain's default PM settlement
    (16:00 New York), a date and time at that time in New York."""
    t = _wall(serial)
    if serial == math.floor(serial):
        return clock.settlement_instant(t.date(), "pm")
    return pd.Timestamp(t, tz=clock.EXCHANGE_TZ).tz_convert("UTC")


def valuation_instant(serial: float) -> pd.Timestamp:
    """The UTC instant of a valuation serial: a whole date at its 16:00 New York close (a quote
    date without a time), a date and time at that time in New York."""
    t = _wall(serial)
    if serial == math.floor(serial):
        return clock.quote_instant(t.date())
    return pd.Timestamp(t, tz=clock.EXCHANGE_TZ).tz_convert("UTC")


def _show(serial: float) -> str:
    t = _wall(serial)
    if serial == math.floor(serial):
        t = _dt.datetime.combine(t.date(), clock.SETTLEMENT_TIMES["pm"])
    return t.strftime("%Y-%m-%d %H:%M")


def years(expiry: float, valuation: float, now: float | None = None) -> tuple[float, str | None]:
    """T in years from the valuation serial (NaN: ``now``, by default :func:`now_serial`) to
    the expiry serial, by the chain's clock: ``(T, None)``, or ``(NaN, message)`` when the
    valuation is not before the expiry."""
    is_now = math.isnan(valuation)
    v = (now_serial() if now is None else now) if is_now else valuation
    T = clock.years_between(valuation_instant(v), expiry_instant(expiry))
    if not T > 0.0:
        return math.nan, (f"valuation {_show(v)}{' (now)' if is_now else ''} is not before the expiry "
                          f"{_show(expiry)} New York time")
    return T, None


def resolve(expiry: np.ndarray, valuation: np.ndarray | None) -> tuple[np.ndarray, dict[int, str]]:
    """The T column with its date rows in years (:func:`years`): ``(T float64 (n,), {row:
    message})``; each distinct (expiry, valuation) pair is computed once, "now" once for the
    whole column. Year-fraction rows are returned as they are."""
    T = np.array(expiry, dtype=np.float64)
    rows = np.flatnonzero(T >= DATE_MIN_SERIAL)
    errors: dict[int, str] = {}
    if not rows.size:
        return T, errors
    val = np.full(T.shape[0], np.nan) if valuation is None else np.asarray(valuation, dtype=np.float64)
    seen: dict[tuple[float, float | None], tuple[float, str | None]] = {}
    now = now_serial()
    for i in rows.tolist():
        v = float(val[i])
        key = (float(T[i]), None if math.isnan(v) else v)  # NaN keys would never match
        got = seen.get(key)
        if got is None:
            got = seen[key] = years(key[0], v, now)
        T[i] = got[0]
        if got[1] is not None:
            errors[i] = got[1]
    return T, errors


def cache_stamp(has_date: bool, valuation: float) -> float | None:
    """What a cached single-cell answer must also be keyed on: the current minute when T is a
    date and the valuation is now, else None."""
    return now_serial() if has_date and math.isnan(valuation) else None
