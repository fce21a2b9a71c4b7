"""Reading the worksheet functions' cells, and the texts the cells show.

* **Messages**: :func:`error_text` (``#optiond: <message>``, at most Excel's 255 characters),
  values as a message shows them, and the engine's (or the daemon's) row errors and
  implied-volatility statuses as cell text under the argument's Excel name.
* **Reading Excel values**: one parser per kind of argument (number, kind, exercise style,
  TRUE/FALSE flag, spectral accuracy setting, MLMC payoff, ADI scheme, text, quote time, settlement), each giving the value, "empty", or
  an error text; an argument as a
  0-D or 2-D array; the arguments of one call parsed and broadcast into columns with the first
  error of each cell (:func:`_parse_cells` and :func:`_read_cells` for single cells,
  :func:`_read_ranges` for ranges);
  ``PARITY_FORWARD``'s strips and single numbers; ``BOPM_*``'s cash-dividend schedule (one
  for the whole call, :func:`_schedule`); single cells of any kind (:func:`_single`,
  ``SURFACE_*``'s name, quote time, settlement) and a pasted chain (:func:`_chain_table`);
* **The result**: the priced cells laid out in the broadcast shape (:func:`_shape_result`).

A problem of the whole call (not of one cell) raises :class:`_Problem`, whose text becomes the
result. The worksheet functions themselves are in :mod:`optiond.addin.functions`.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..greek_units import UNITS
from ..models import (AMERICAN, DIVIDEND_FIELDS, KIND_CODES, KIND_NAMES, MAX_DIVIDENDS, STYLE_CODES, STYLE_NAMES,
                      InvalidInputError, Method)
from . import dates, table
from .cache import _env_on
from .table import EXCEL_TEXT_LIMIT, NUMERIC_PARSES, Function


ERROR_PREFIX = "#optiond: "
#: Excel's error values, as xlwings (``err_to_str``) and ``formulas`` hand them over
EXCEL_ERRORS = frozenset({"#DIV/0!", "#N/A", "#NAME?", "#NULL!", "#NUM!", "#REF!", "#VALUE!", "#SPILL!", "#CALC!",
                          "#FIELD!", "#GETTING_DATA", "#BLOCKED!", "#CONNECT!", "#BUSY!", "#UNKNOWN!", "#EMPTY!"})
#: the most options one call may broadcast to (an Excel sheet's row count)
MAX_CELLS = 1_048_576
#: the environment switch of the unit guards (:func:`unit_slips`): ``OPTIOND_UNITS_CHECK=0``
#: (or false, no, off) turns them off for the Excel session
UNITS_CHECK_ENV = "OPTIOND_UNITS_CHECK"
#: the largest |rate| and |dividend yield|, volatility and T (years) the unit guards let through
MAX_DECIMAL_RATE = 1.0
MAX_DECIMAL_VOLATILITY = 5.0
MAX_YEARS = 50.0


# ---- messages ------------------------------------------------------------------------------

def error_text(message: str) -> str:
    """``#optiond: <message>`` on one line, cut to Excel's 255 characters."""
    text = ERROR_PREFIX + " ".join(str(message).split())
    return text if len(text) <= EXCEL_TEXT_LIMIT else text[: EXCEL_TEXT_LIMIT - 3] + "..."


def _show(v: Any) -> str:
    """A value as a short message shows it: 100, -5, 0.25, nan, TRUE, "abc"."""
    if isinstance(v, (bool, np.bool_)):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float, np.integer, np.floating)):
        return f"{float(v):.10g}"
    s = str(v)
    return '"' + (s if len(s) <= 24 else s[:21] + "...") + '"'


_P_MESSAGE = re.compile(r"CRR probability p=(\S+) outside \[0,\s*1\]")
_IV_MESSAGES = {
    "below-intrinsic": "price is below the lowest model value (intrinsic value): no implied volatility",
    "no-solution": "price is above the model value at the highest volatility: no implied volatility",
    "not-converged": "implied volatility did not converge",
    "invalid": "invalid input",
    "american-not-supported": "American exercise needs the binomial tree",
}


_ROW_ERROR = re.compile(r"^(?P<field>[a-z_0-9]+)(?:\[row \d+\])?\s*=\s*(?P<value>.*?): (?P<reason>.*)$", re.S)


def _row_text(spec: Function, message: str) -> str:
    """A row error of the engine (or the daemon) as cell text, with Excel's argument names.

    The schema's row errors read ``field=value: reason`` (:attr:`optiond.models.RowError.message`),
    a kernel's ``field = value: reason`` (:class:`optiond.models.InvalidInputError`),
    implied-volatility statuses ``invalid: field=value: reason``."""
    message = str(message or "pricing failed")
    m = _P_MESSAGE.search(message)
    if m:
        return error_text(f"CRR probability p={m.group(1)} outside [0,1]: increase N")
    if message.startswith("invalid: "):
        message = message[len("invalid: "):]
    m = _ROW_ERROR.match(message)
    if m:
        name = next((a.name for a in spec.args if a.field == m["field"]), m["field"])
        value = m["value"]
        try:
            value = _show(float(value))
        except ValueError:
            pass
        reason = re.sub(r"\s*\(and \d+ more invalid rows?\)$", "", m["reason"])
        if re.match(r"not an? ", reason):  # "not a finite number" -> "must be a finite number"
            reason = "must be " + re.sub(r"^not an? ", "a ", reason)
        if m["field"] in DIVIDEND_FIELDS and value in ("nan", "None"):  # a schedule's order: no one value
            return error_text(f"{name}: {reason}")
        return error_text(f"{name}{':' if m['field'] in DIVIDEND_FIELDS else ''} {reason}, got {value}")
    return error_text(_IV_MESSAGES.get(message, message))


# ---- unit guards ---------------------------------------------------------------------------

def units_check_on() -> bool:
    """Whether the unit guards are on: unless ``OPTIOND_UNITS_CHECK`` is 0, false, no or off."""
    return _env_on(UNITS_CHECK_ENV)


def _slip(field: str, name: str, x: float) -> str | None:
    """The message of one value that looks typed in the wrong unit, or None."""
    off = f" (if meant, set {UNITS_CHECK_ENV}=0)"
    if field in ("rate", "dividend_yield") and abs(x) > MAX_DECIMAL_RATE:
        return f"{name}={_show(x)} looks like percent: enter {_show(x / 100)}{off}"
    if field == "volatility" and x > MAX_DECIMAL_VOLATILITY:
        return f"{name}={_show(x)} looks like vol points: enter {_show(x / 100)}{off}"
    if field == "expiry" and x > MAX_YEARS:
        return f"{name}={_show(x)} is over {MAX_YEARS:g} years: T is in years (days/365 = {x / 365:.4g}) or a date{off}"
    return None


def check_units(field: str, name: str, x: Any) -> None:
    """The unit guards of :func:`unit_slips` on one value of a whole call (PARITY_FORWARD's T
    and rate, a chain fit's rate, a curve's zero rates: ``field`` ``expiry`` or ``rate``):
    raises :class:`_Problem` with the message; nothing for None, a non-finite value or with the
    guards off."""
    if isinstance(x, float) and math.isfinite(x) and units_check_on():
        text = _slip(field, name, x)
        if text is not None:
            raise _Problem(text)


def unit_slips(spec: Function, cols: Mapping[str, np.ndarray]) -> dict[int, str]:
    """The unit guards, the one place every worksheet function's cells pass: the rows whose
    rate or dividend yield is above 1 in size (percent typed for a decimal: 4.5 for 0.045),
    whose volatility is above 5 (vol points: 20 for 0.2), or whose T is over 50 years (days
    typed for years), each with its cell text (``#optiond: r=4.5 looks like percent: enter
    0.045 ...``); none when ``OPTIOND_UNITS_CHECK=0``. ``cols`` are the call's columns
    (T in years, after a date T is resolved); columns that are not float (a handle's) are
    not checked."""
    out: dict[int, str] = {}
    if not units_check_on():
        return out
    for a in spec.args:
        v = cols.get(a.field)
        if a.field not in ("rate", "dividend_yield", "volatility", "expiry") or not isinstance(v, np.ndarray) \
                or v.dtype != np.float64:
            continue
        with np.errstate(invalid="ignore"):
            bad = np.isfinite(v) & (np.abs(v) > min(MAX_DECIMAL_RATE, MAX_DECIMAL_VOLATILITY, MAX_YEARS))
        for i in np.flatnonzero(bad).tolist():
            text = _slip(a.field, a.name, float(v[i]))
            if text is not None and i not in out:
                out[i] = error_text(text)
    return out


# ---- reading Excel values ------------------------------------------------------------------

class _Problem(Exception):
    """A problem of the whole call (not of one cell); its text becomes the result."""


_EMPTY = object()


def _is_empty(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def _number(v: Any, name: str) -> Any:
    """A cell as a float, :data:`_EMPTY`, or an error message (a str)."""
    t = type(v)
    if t is float or t is int:
        return float(v)
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, (bool, np.bool_)):
        return error_text(f"{name} must be a number, got {_show(v)}")
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
        return error_text(f"{name} must be a number, got {_show(s)}")
    if isinstance(v, (_dt.date, _dt.time, _dt.timedelta)):
        return error_text(f"{name} must be a number, got a date or time")
    return error_text(f"{name} must be a number")


def _kind(v: Any, name: str) -> Any:
    """A cell as "put" / "call", :data:`_EMPTY`, or an error message."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, str):
        s = v.strip()
        code = KIND_CODES.get(s.lower())
        if code is not None:
            return KIND_NAMES[code]
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
    return error_text(f'{name} must be "put" or "call", got {_show(v)}')


def _flag(v: Any, name: str) -> Any:
    """A cell as True / False, :data:`_EMPTY`, or an error message.

    TRUE/FALSE, 1/0 and the texts TRUE, FALSE are accepted."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)) and v in (0, 1):
        return v == 1
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "false"):
            return s == "true"
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
    return error_text(f"{name} must be TRUE or FALSE, got {_show(v)}")


def _american(v: Any, name: str) -> Any:
    """A cell as "american" / "european", :data:`_EMPTY`, or an error message.

    What :func:`_flag` reads (TRUE american), and the texts american, european."""
    if isinstance(v, str) and v.strip().lower() in STYLE_CODES:
        return STYLE_NAMES[STYLE_CODES[v.strip().lower()]]
    x = _flag(v, name)
    if isinstance(x, bool):
        return STYLE_NAMES[AMERICAN] if x else STYLE_NAMES[1 - AMERICAN]
    return x


def _accuracy(v: Any, name: str) -> Any:
    """A cell as a spectral accuracy setting ("fast", "accurate", "high-precision"; "high" and
    any case, spaces or underscores as :class:`optiond.models.Method` reads them),
    :data:`_EMPTY`, or an error message."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, str):
        s = v.strip()
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
        try:
            return Method(name="spectral", accuracy=s).accuracy
        except InvalidInputError:
            pass
    return error_text(f"{name} must be " + ", ".join(f'"{a}"' for a in table.ACCURACY_NAMES[:-1])
                      + f' or "{table.ACCURACY_NAMES[-1]}", got {_show(v)}')


def _payoff(v: Any, name: str) -> Any:
    """A cell as "vanilla" / "digital" / "asian", :data:`_EMPTY`, or an error message."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, str):
        s = v.strip().lower()
        if s in table.PAYOFF_NAMES:
            return s
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
    return error_text(f'{name} must be "vanilla", "digital" or "asian", got {_show(v)}')


_SCHEME_ALIASES = {"douglas": "do", "craig-sneyd": "cs", "modified-craig-sneyd": "mcs", "hundsdorfer-verwer": "hv"}


def _scheme(v: Any, name: str) -> Any:
    """A cell as an ADI scheme ("mcs", "hv", "cs", "do"; the long names too), :data:`_EMPTY`,
    or an error message."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, str):
        s = "-".join(v.strip().lower().replace("_", " ").replace("-", " ").split())
        s = _SCHEME_ALIASES.get(s, s)
        if s in table.SCHEME_NAMES:
            return s
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
    return error_text(f'{name} must be "mcs", "hv", "cs" or "do", got {_show(v)}')


def _text(v: Any, name: str) -> Any:
    """A text cell (a name or a handle) stripped, :data:`_EMPTY`, or an error message (a cell
    that shows an optiond error, such as a SURFACE_FIT that failed, passes its reason on)."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, str):
        s = v.strip()
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
        if s.startswith(ERROR_PREFIX.strip()):
            return error_text(f"{name} is an error: {s[len(ERROR_PREFIX):].strip()}")
        return s
    return error_text(f"{name} must be text, got {_show(v)}")


#: Excel's day zero: a date cell's serial number counts days from it
_EXCEL_EPOCH = _dt.datetime(1899, 12, 30)


def _time(v: Any, name: str) -> Any:
    """A quote time as the chain job reads it (``HH:MM[:SS]`` or an ISO 8601 timestamp),
    :data:`_EMPTY`, or an error message. A time cell (a fraction of a day, or a time) gives
    ``HH:MM:SS``, a date-and-time cell its ISO form."""
    from ..market.clock import check_quote_time

    if _is_empty(v):
        return _EMPTY
    if isinstance(v, (bool, np.bool_)):
        return error_text(f"{name} must be a time, got {_show(v)}")
    if isinstance(v, (int, float, np.integer, np.floating)) and 0 <= v < 1:  # to the second, as Excel shows it
        v = (_EXCEL_EPOCH + _dt.timedelta(seconds=round(float(v) * 86400.0))).time()
    if isinstance(v, _dt.datetime) and v.date() <= _EXCEL_EPOCH.date() + _dt.timedelta(days=1):
        v = v.time()  # a time cell that came over as a date on Excel's day zero
    if isinstance(v, (_dt.time, _dt.datetime)):
        return v.replace(microsecond=0).isoformat()
    if isinstance(v, str):
        s = v.strip()
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
        try:
            check_quote_time(s)
        except ValueError:
            return error_text(f'{name} must be "HH:MM" or an ISO 8601 timestamp, got {_show(s)}')
        return s
    return error_text(f'{name} must be "HH:MM", a time or an ISO 8601 timestamp, got {_show(v)}')


def _settlement(v: Any, name: str) -> Any:
    """A cell as "am" / "pm", :data:`_EMPTY`, or an error message."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, str) and v.strip().lower() in ("am", "pm"):
        return v.strip().lower()
    if isinstance(v, str) and v.strip().upper() in EXCEL_ERRORS:
        return error_text(f"{name} is {v.strip().upper()}")
    return error_text(f'{name} must be "am" or "pm", got {_show(v)}')


def _expiry(v: Any, name: str) -> Any:
    """A T cell: years, or a date (an Excel serial, :mod:`optiond.addin.dates`), as a float;
    :data:`_EMPTY`, or an error message (the number parser's words)."""
    if _is_empty(v):
        return _EMPTY
    x = dates.expiry_cell(v)
    return _number(v, name) if x is None else x


def _valuation(v: Any, name: str) -> Any:
    """A valuation cell: an Excel serial (float), NaN when empty (now), or an error message."""
    x = dates.valuation_cell(v)
    if x is not None:
        return x
    if isinstance(v, str) and v.strip().upper() in EXCEL_ERRORS:
        return error_text(f"{name} is {v.strip().upper()}")
    return error_text(f"{name} must be a date, a date and time or empty (now), got {_show(v)}")


def _units(v: Any, name: str) -> Any:
    """A cell as a Greek unit system ("raw", "trader"), :data:`_EMPTY`, or an error message."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, str):
        s = v.strip()
        if s.lower() in UNITS:
            return s.lower()
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
    return error_text(f'{name} must be "raw" or "trader", got {_show(v)}')


_PARSERS: Mapping[str, Callable[[Any, str], Any]] = {"number": _number, "expiry": _expiry, "date": _valuation,
                                                     "units": _units, "kind": _kind, "american": _american,
                                                     "flag": _flag, "accuracy": _accuracy, "payoff": _payoff,
                                                     "scheme": _scheme, "text": _text,
                                                     "time": _time, "settlement": _settlement}


def _grid(value: Any, name: str) -> np.ndarray:
    """An argument as a 0-D or 2-D array (1-D sequences become a column)."""
    if isinstance(value, np.ndarray):
        a = value
    elif isinstance(value, (list, tuple)):
        try:
            a = np.asarray(value, dtype=object)
        except ValueError:
            a = None
        if a is None or any(isinstance(x, (list, tuple, np.ndarray)) for x in a.flat):
            raise _Problem(f"{name}: the rows of the range differ in length")
    else:
        a = np.empty((), dtype=object)
        a[()] = value
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    if a.ndim > 2:
        raise _Problem(f"{name} has more than two dimensions")
    if a.size == 0:
        raise _Problem(f"{name} is an empty range")
    return a


def _read(arg: table.Arg, value: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """Parse one argument: ``(values, errors)`` of the argument's own shape; ``values`` float64
    for numbers, object ("put", "american"...) otherwise; ``errors`` an object array of
    messages (None where fine), or None when every cell is fine."""
    a = _grid(value, arg.name)
    numeric = arg.parse in NUMERIC_PARSES
    if arg.parse in ("number", "expiry") and a.dtype.kind in "fiu":
        return a.astype(np.float64), None  # non-finite values are caught by the schema's checks
    parse = _PARSERS[arg.parse]
    flat = a.ravel()
    vals = np.empty(flat.shape[0], dtype=np.float64 if numeric else object)
    errs = None
    for i, v in enumerate(flat.tolist()):
        x = parse(v, arg.name)
        if x is _EMPTY:
            if arg.optional and arg.default is not None:  # a None default: required unless a handle fills it
                x = parse(arg.default, arg.name)
            else:
                x = error_text(f"{arg.name} is required (empty cell)")
        if isinstance(x, str) and x.startswith(ERROR_PREFIX):
            if errs is None:
                errs = np.full(flat.shape[0], None, dtype=object)
            errs[i] = x
            x = math.nan if numeric else ""
        vals[i] = x
    return vals.reshape(a.shape), (None if errs is None else errs.reshape(a.shape))


def _strip(arg: table.Arg, value: Any) -> np.ndarray:
    """A strip argument (one row or one column) as a 1-D float array, NaN for empty cells.

    Raises:
        _Problem: a block of several rows and columns, text or an Excel error in a cell."""
    a = _grid(value, arg.name)
    if a.ndim == 2 and min(a.shape) > 1:
        raise _Problem(f"{arg.name} must be one row or one column, got {a.shape[0]}x{a.shape[1]}")
    out = np.empty(a.size, dtype=np.float64)
    for i, v in enumerate(a.ravel().tolist()):
        x = _number(v, arg.name)
        if isinstance(x, str):
            raise _Problem(x[len(ERROR_PREFIX):])
        out[i] = math.nan if x is _EMPTY else x
    return out


def _single(arg: table.Arg, value: Any) -> Any:
    """A single-cell argument, parsed by its rule: the value, or its default when empty and
    optional.

    Raises:
        _Problem: a range, a cell the rule refuses, a required empty cell."""
    a = _grid(value, arg.name)
    if a.size != 1:
        raise _Problem(f"{arg.name} must be a single cell")
    x = _PARSERS[arg.parse](a.ravel()[0], arg.name)
    if isinstance(x, str) and x.startswith(ERROR_PREFIX):
        raise _Problem(x[len(ERROR_PREFIX):])
    if x is _EMPTY:
        if arg.optional:
            return arg.default
        raise _Problem(f"{arg.name} is required (empty cell)")
    return x


def _scalar(arg: table.Arg, value: Any) -> float | None:
    """A single-cell number argument: a finite float, or None when empty and optional.

    Raises:
        _Problem: a range, text, an Excel error, a non-finite number, a required empty cell."""
    x = _single(arg, value)
    if x is not None and not math.isfinite(x):
        raise _Problem(f"{arg.name} must be a finite number, got {_show(x)}")
    return x


def _chain_cell(v: Any, date: bool) -> Any:
    """One cell of a pasted chain as the chain job reads it: blanks and Excel errors as None,
    dates (date cells, or their serial numbers in a date column) as ``YYYY-MM-DD``, a date and
    time in ISO form."""
    if _is_empty(v) or (isinstance(v, str) and v.strip().upper() in EXCEL_ERRORS):
        return None
    if isinstance(v, _dt.datetime):
        return v.date().isoformat() if date and v.time() == _dt.time() else v.isoformat()
    if isinstance(v, _dt.date):
        return v.isoformat()
    if date and isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        return (_EXCEL_EPOCH + _dt.timedelta(days=float(v))).date().isoformat()
    return v.strip() if isinstance(v, str) else v


def _chain_table(arg: table.Arg, value: Any, columns: Sequence[str], required: Sequence[str],
                 dates: Sequence[str]) -> Any:
    """A pasted chain (a range whose first row names the columns) as a pandas DataFrame of
    the named ``columns`` (others are ignored; header cells compared stripped and lower-case),
    without its empty rows; cells as :func:`_chain_cell` reads them (``dates`` the date
    columns).

    Raises:
        _Problem: not a range with a header and a row, a column named twice, a ``required``
            column missing."""
    import pandas as pd

    a = _grid(value, arg.name)
    if a.ndim != 2 or a.shape[0] < 2:
        raise _Problem(f"{arg.name} must be a range: a header row naming the chain's columns and a row per contract")
    header = [str(h).strip().lower() if isinstance(h, str) else "" for h in a[0].tolist()]
    keep = [j for j, h in enumerate(header) if h in columns]
    names = [header[j] for j in keep]
    twice = sorted({h for h in names if names.count(h) > 1})
    if twice:
        raise _Problem(f"{arg.name} names the column{'s' if len(twice) > 1 else ''} {', '.join(twice)} twice")
    missing = [c for c in required if c not in names]
    if missing:
        raise _Problem(f"{arg.name} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}: its first "
                       f"row must name the columns of a chain CSV")
    rows = [[_chain_cell(r[j], header[j] in dates) for j in keep] for r in a[1:].tolist()]
    rows = [r for r in rows if any(v is not None for v in r)]
    if not rows:
        raise _Problem(f"{arg.name} has a header and no contract")
    return pd.DataFrame(rows, columns=names)


def _chain_fit(spec: Function, values: Sequence[Any]) -> tuple[Any, Any, dict]:
    """``(name, chain, market)`` of a function that fits a pasted chain (``SURFACE_FIT``,
    ``HESTON_FIT``), from its first five arguments ``name, chain_range, quote_time, rate,
    settlement``: the name cell as it is, the chain as a DataFrame of the chain CSV's columns
    (:func:`_chain_table`), and the market fields given (``quote_time``, ``rate``,
    ``settlement``; empty cells left out: the chain job's defaults).

    Raises:
        _Problem: a bad cell (its text names the argument)."""
    from .. import chain

    name_arg, chain_arg, time_arg, rate_arg, settlement_arg = spec.args[:5]
    name = _single(name_arg, values[0])
    df = _chain_table(chain_arg, values[1], chain.CHAIN_COLUMNS + chain.OPTIONAL_CHAIN_COLUMNS, chain.CHAIN_COLUMNS,
                      ("quote_date", "expiry"))
    market = {"quote_time": _single(time_arg, values[2]), "rate": _scalar(rate_arg, values[3]),
              "settlement": _single(settlement_arg, values[4])}
    check_units("rate", rate_arg.name, market["rate"])
    return name, df, {k: v for k, v in market.items() if v is not None}


def _schedule(spec: Function, values: Sequence[Any]) -> tuple[dict[str, np.ndarray], str | None]:
    """The call's cash-dividend schedule, from its ``schedule`` arguments (``div_times``,
    ``div_amounts``): ``(columns, error)``.

    Each argument is one row or one column of numbers, blank cells padding; the two are paired
    by position and the positions blank in both are dropped. The schedule is ONE for every
    option of the call (it does not broadcast against the other arguments).

    Returns:
        ``({"dividend_times": t, "dividend_amounts": a}, None)`` with t (years from now) and a
        (currency units) float64 arrays of one length m <= :data:`~optiond.models.MAX_DIVIDENDS`
        (NaN where only one of a pair is blank: the engine's check names it); ``({}, None)``
        when both are omitted or blank (the call without dividends); ``({}, text)`` when the
        schedule cannot be read: a block of several rows and columns, text or an Excel error
        in a cell, only one of the two given, more than ``MAX_DIVIDENDS`` dividends. The value
        checks (amounts >= 0, ascending ex-dates before each option's expiry, a sum below its
        spot) are the engine's, per row (:func:`optiond.models.validate_dividends`).
    """
    args = [(a, values[i] if i < len(values) else None) for i, a in enumerate(spec.args) if a.parse == "schedule"]
    if not args:
        return {}, None
    (times_arg, times), (amounts_arg, amounts) = args
    try:
        t, a = _strip(times_arg, times), _strip(amounts_arg, amounts)
    except _Problem as p:
        return {}, error_text(str(p))
    m = max(t.size, a.size)
    t, a = (np.concatenate([x, np.full(m - x.size, math.nan)]) for x in (t, a))
    keep = ~(np.isnan(t) & np.isnan(a))
    t, a = t[keep], a[keep]
    if not t.size:
        return {}, None
    if np.isnan(a).all():
        return {}, error_text(f"{amounts_arg.name} is missing: give the cash amount of each {times_arg.name} ex-date")
    if np.isnan(t).all():
        return {}, error_text(f"{times_arg.name} is missing: give the ex-date of each {amounts_arg.name} amount")
    if t.size > MAX_DIVIDENDS:
        return {}, error_text(f"{times_arg.name}: at most {MAX_DIVIDENDS} dividends, got {t.size}")
    return {times_arg.field: t, amounts_arg.field: a}, None


def _parse_cells(spec: Function, values: Sequence[Any]) -> tuple[dict[str, Any], str | None]:
    """Single-cell arguments, each parsed once: ``(values by field, error)``, the values Python
    scalars (NaN or "" where a cell is bad) and the error the first cell text in argument
    order, or None. A cash-dividend schedule (:func:`_schedule`) comes as its two 1-D columns,
    absent without one. Trailing arguments left out of ``values`` read as empty cells."""
    cells: dict[str, Any] = {}
    err = None
    for i, a in enumerate(spec.args):
        v = values[i] if i < len(values) else None
        if a.parse == "schedule":
            continue
        parse = _PARSERS[a.parse]
        x = parse(v, a.name)
        if x is _EMPTY:
            x = parse(a.default, a.name) if a.optional and a.default is not None else \
                error_text(f"{a.name} is required (empty cell)")
        if isinstance(x, str) and x.startswith(ERROR_PREFIX):
            err = err or x
            x = math.nan if a.parse in NUMERIC_PARSES else ""
        cells[a.field] = x
    valuation = cells.pop("valuation", math.nan)
    if dates.is_date(cells.get("expiry")):
        cells["expiry"], date_err = dates.years(cells["expiry"], valuation)
        err = err or (None if date_err is None else error_text(date_err))
    if err is None:
        slips = unit_slips(spec, {f: np.array([x], dtype=np.float64) for f, x in cells.items()
                                  if type(x) is float})
        err = slips.get(0)
    schedule, schedule_err = _schedule(spec, values)
    cells.update(schedule)
    return cells, err or schedule_err


def _cell_columns(spec: Function, cells: Mapping[str, Any],
                  err: str | None) -> tuple[tuple, dict[str, np.ndarray], np.ndarray]:
    """What :func:`_read_ranges` gives (shape ``()``), from :func:`_parse_cells`' result."""
    cols = {a.field: np.array([cells[a.field]], dtype=np.float64 if a.parse in NUMERIC_PARSES else object)
            for a in spec.args if a.parse != "schedule" and a.field in cells}
    cols.update({f: cells[f].reshape(1, -1) for f in DIVIDEND_FIELDS if f in cells})
    cell_err = np.empty(1, dtype=object)
    cell_err[0] = err
    return (), cols, cell_err


def _read_cells(spec: Function, values: Sequence[Any]) -> tuple[tuple, dict[str, np.ndarray], np.ndarray]:
    """Single-cell arguments: the fast path of :func:`_read_ranges` (shape ``()``)."""
    return _cell_columns(spec, *_parse_cells(spec, values))


def _read_ranges(spec: Function, values: Sequence[Any]) -> tuple[tuple, dict[str, np.ndarray], np.ndarray]:
    """Parse and broadcast the arguments: ``(shape, columns, cell errors)``, the columns and
    errors flattened row-major (errors: the first of each cell in argument order, or None). A
    cash-dividend schedule (:func:`_schedule`) does not broadcast: its columns are (n, m),
    the one schedule in every row, and a schedule that cannot be read is every cell's error
    (after the cell's own)."""
    args = [a for a in spec.args if a.parse != "schedule"]
    read = [_read(a, v) for a, v in zip(spec.args, values) if a.parse != "schedule"]
    try:
        shape = np.broadcast_shapes(*(v.shape for v, _ in read))
    except ValueError:
        shapes = ", ".join(f"{a.name} {'x'.join(map(str, v.shape)) or '1x1'}" for a, (v, _) in zip(args, read))
        raise _Problem(f"the ranges' shapes do not match ({shapes}): give one row, one column or ranges of "
                       "the same shape") from None
    n = math.prod(shape)
    if n > MAX_CELLS:
        raise _Problem(f"{n:,} options in one call: at most {MAX_CELLS:,}")
    cell_err = np.full(n, None, dtype=object)
    cols: dict[str, np.ndarray] = {}
    for a, (v, e) in zip(args, read):
        cols[a.field] = np.broadcast_to(v, shape).ravel()
        if e is not None:
            e = np.broadcast_to(e, shape).ravel()
            fill = e.astype(bool) & ~cell_err.astype(bool)
            cell_err[fill] = e[fill]
    valuation = cols.pop("valuation", None)
    if "expiry" in cols:  # date T: years from the valuation (dates.py)
        cols["expiry"], date_errs = dates.resolve(cols["expiry"], valuation)
        for i, text in date_errs.items():
            cell_err[i] = cell_err[i] or error_text(text)
    for i, text in unit_slips(spec, cols).items():
        cell_err[i] = cell_err[i] or text
    schedule, schedule_err = _schedule(spec, values)
    for f, v in schedule.items():
        cols[f] = np.broadcast_to(v, (n, v.size))
    if schedule_err is not None:
        cell_err[~cell_err.astype(bool)] = schedule_err
    return shape, cols, cell_err


# ---- laying out the result ----------------------------------------------------------------

def _as_cell(x: Any) -> Any:
    return float(x) if isinstance(x, (float, np.floating)) else x


def _shape_result(spec: Function, out: np.ndarray, shape: tuple[int, ...]) -> Any:
    """The cells' values (n, k) laid out as the call's result: a value for one cell, else a
    list of rows of the broadcast shape (one row of k per option for ``BOPM_GREEKS``)."""
    if spec.op == "greeks":
        return [[_as_cell(x) for x in row] for row in out.tolist()]
    if shape == ():
        return _as_cell(out[0, 0])
    return [[_as_cell(x) for x in row] for row in out[:, 0].reshape(shape).tolist()]
