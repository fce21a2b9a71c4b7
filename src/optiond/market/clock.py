"""Time to expiry from timestamps, Cboe's convention.

Cboe (VIX white paper, "Step 1"; also its published implied volatilities) measures the time to
expiry in minutes, from the quote time to the settlement time, over the minutes of a 365-day
year:

    T = minutes(quote -> settlement) / 525,600.

* **Quote time**: a per-row ``quote_time`` (ISO 8601 with a UTC offset, e.g.
  ``2026-02-13T10:50:00-05:00``, or ``HH:MM`` in exchange time on the row's quote date), a
  chain-wide default, or, when neither is given, the quote date's close, 16:00
  America/New_York.
* **Settlement**: ``pm`` (default) settles at the 16:00 America/New_York close of the expiry
  date (equity and ETF options, SPXW and other PM-settled index series); ``am`` at the 09:30
  open (AM-settled index series: standard SPX, NDX and RUT monthlies, whose settlement value is
  computed from the opening prints). The rule is per row: a ``settlement`` column, else the
  chain-wide default.
* Minutes are real elapsed minutes between the two instants (UTC difference), so a daylight
  saving change inside the interval counts as the hour it is; Cboe's day count (1,440 minutes
  per calendar day between the two days) differs by at most 60 minutes, 1.1e-4 years.

A contract whose settlement instant lies after the quote instant has T > 0 and is priced, a
0DTE contract included (quoted at 10:50 on its PM expiry day: 310 minutes).
"""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

#: the exchange clock of US listed options
EXCHANGE_TZ = ZoneInfo("America/New_York")
#: minutes in a 365-day year: T = minutes / MINUTES_PER_YEAR
MINUTES_PER_YEAR = 525_600.0
#: settlement times in exchange time, by settlement style
SETTLEMENT_TIMES = {"pm": dt.time(16, 0), "am": dt.time(9, 30)}
#: the default quote time when a chain gives none: the close of the quote date
DEFAULT_QUOTE_TIME = dt.time(16, 0)

_HHMM = re.compile(r"^\s*(\d{1,2}):(\d{2})(?::(\d{2}))?\s*$")


def parse_clock_time(text: str) -> dt.time:
    """``HH:MM`` or ``HH:MM:SS`` (24-hour exchange time) as a :class:`datetime.time`.

    Raises:
        ValueError: not of that form, or out of range.
    """
    m = _HHMM.match(str(text))
    if not m:
        raise ValueError(f"quote time {text!r}: expected HH:MM (exchange time) or an ISO 8601 timestamp with offset")
    h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if not (0 <= h < 24 and 0 <= mi < 60 and 0 <= s < 60):
        raise ValueError(f"quote time {text!r}: hour, minute or second out of range")
    return dt.time(h, mi, s)


def check_quote_time(text: str) -> None:
    """Check a chain-wide quote time (``HH:MM[:SS]`` or an ISO 8601 timestamp).

    Raises:
        ValueError: neither form.
    """
    if _HHMM.match(str(text)):
        parse_clock_time(str(text))
        return
    try:
        ok = not pd.isna(pd.Timestamp(str(text).strip()))
    except (ValueError, TypeError):
        ok = False
    if not ok:
        raise ValueError(f"quote time {text!r}: expected HH:MM (exchange time) or an ISO 8601 timestamp with offset")


def quote_instant(quote_date: object, quote_time: object = None) -> pd.Timestamp:
    """The UTC instant of one quote.

    Args:
        quote_date: the quote date (``YYYY-MM-DD`` or a date-like).
        quote_time: ``None``/blank (16:00 exchange time on ``quote_date``), ``HH:MM[:SS]``
            exchange time on ``quote_date``, or an ISO 8601 timestamp; one without an offset is
            read as exchange time.

    Raises:
        ValueError: an unparsable date or time, or an ISO timestamp on another date than
            ``quote_date`` (in exchange time).
    """
    day = pd.Timestamp(quote_date)
    if pd.isna(day):
        raise ValueError(f"quote date {quote_date!r} is not a date")
    day = day.date()
    if quote_time is None or (isinstance(quote_time, float) and np.isnan(quote_time)) or str(quote_time).strip() == "":
        clock = DEFAULT_QUOTE_TIME
    elif _HHMM.match(str(quote_time)):
        clock = parse_clock_time(str(quote_time))
    else:
        try:
            ts = pd.Timestamp(str(quote_time).strip())
        except (ValueError, TypeError) as e:
            raise ValueError(f"quote time {quote_time!r}: expected HH:MM (exchange time) or an ISO 8601 timestamp "
                             f"with offset") from e
        if pd.isna(ts):
            raise ValueError(f"quote time {quote_time!r} is not a time")
        ts = ts.tz_localize(EXCHANGE_TZ) if ts.tzinfo is None else ts
        if ts.tz_convert(EXCHANGE_TZ).date() != day:
            raise ValueError(f"quote time {quote_time!r} falls on another day than the quote date {day}")
        return ts.tz_convert("UTC")
    return pd.Timestamp(dt.datetime.combine(day, clock), tz=EXCHANGE_TZ).tz_convert("UTC")


def settlement_instant(expiry: object, settlement: object = "pm") -> pd.Timestamp:
    """The UTC instant a contract settles: its expiry date at the settlement time.

    Args:
        expiry: the expiry date (``YYYY-MM-DD`` or a date-like).
        settlement: ``"am"`` (09:30 exchange time) or ``"pm"`` (16:00), case-insensitive;
            blank means ``"pm"``.

    Raises:
        ValueError: an unparsable date or an unknown settlement style.
    """
    day = pd.Timestamp(expiry)
    if pd.isna(day):
        raise ValueError(f"expiry {expiry!r} is not a date")
    style = settlement_style(settlement)
    return pd.Timestamp(dt.datetime.combine(day.date(), SETTLEMENT_TIMES[style]), tz=EXCHANGE_TZ).tz_convert("UTC")


def settlement_style(value: object) -> str:
    """``"am"`` or ``"pm"`` from a cell (blank: ``"pm"``). Raises ValueError otherwise."""
    if value is None or (isinstance(value, float) and np.isnan(value)) or str(value).strip() == "":
        return "pm"
    style = str(value).strip().lower()
    if style not in SETTLEMENT_TIMES:
        raise ValueError(f"settlement {value!r}: expected 'am' or 'pm'")
    return style


def years_between(start: pd.Timestamp, end: pd.Timestamp) -> float:
    """Elapsed minutes from ``start`` to ``end`` over 525,600 (negative when end is earlier)."""
    return (end - start).total_seconds() / 60.0 / MINUTES_PER_YEAR


def _as_list(values) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)  # a Series' tolist is C-fast


def expiry_years(quote_date: pd.Series, expiry: pd.Series, quote_time: pd.Series | str | None = None,
                 settlement: pd.Series | str | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Time to expiry of every row of a chain, in years of 525,600 minutes.

    Args:
        quote_date, expiry: per-row dates, shape (n,).
        quote_time: per-row quote times (see :func:`quote_instant`), or one for every row.
        settlement: per-row ``am``/``pm``, or one for every row (blank: ``pm``).

    Returns:
        ``(T, quote_utc, errors)``: T float64 shape (n,) (NaN where a cell does not parse),
        the quote instants as ISO strings (UTC), and one message per row ("" when fine).
        Never raises for a bad cell: the row's message says what is wrong.
    """
    n = len(quote_date)
    qd, ex = _as_list(quote_date), _as_list(expiry)
    qt = [quote_time] * n if quote_time is None or isinstance(quote_time, str) else _as_list(quote_time)
    st = [settlement] * n if settlement is None or isinstance(settlement, str) else _as_list(settlement)
    # a chain repeats a few (date, time, expiry, settlement) tuples: each distinct one is
    # parsed once (a NaN cell may count as several: each NaN object is its own key)
    seen: dict[tuple, int] = {}
    which = np.fromiter((seen.setdefault(k, len(seen)) for k in zip(qd, qt, ex, st)), dtype=np.int64, count=n)
    distinct = list(seen)
    first = np.full(len(distinct), -1, dtype=np.int64)
    first[which[::-1]] = np.arange(n - 1, -1, -1)  # the first row of each distinct tuple
    Tu = np.full(len(distinct), np.nan)
    stamps_u: list[str] = [""] * len(distinct)
    errors_u: list[str] = [""] * len(distinct)
    for u, i in enumerate(first.tolist()):
        try:
            q = quote_instant(qd[i], qt[i])
            s = settlement_instant(ex[i], st[i])
            Tu[u], stamps_u[u] = years_between(q, s), q.isoformat()
        except ValueError as e:
            errors_u[u] = str(e)
    T = Tu[which] if n else np.full(0, np.nan)
    stamps = np.asarray(stamps_u, dtype=object)[which] if n else np.empty(0, dtype=object)
    errors = np.asarray(errors_u, dtype=object)[which].tolist() if n else []
    return T, stamps, errors
