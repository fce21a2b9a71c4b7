"""Reading the worksheet functions' cells, and the texts the cells show.

* **Messages**: :func:`error_text` (``#optiond: <message>``, at most Excel's 255 characters),
  values as a message shows them, and the engine's (or the daemon's) row errors and
  implied-volatility statuses as cell text under the argument's Excel name.
* **Reading Excel values**: one parser per kind of argument (number, kind, exercise style,
  MLMC payoff, ADI scheme), each giving the value, "empty", or an error text; an argument as a
  0-D or 2-D array; the arguments of one call parsed and broadcast into columns with the first
  error of each cell (:func:`_parse_cells` and :func:`_read_cells` for single cells,
  :func:`_read_ranges` for ranges);
  ``PARITY_FORWARD``'s strips and single numbers;
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

from ..models import AMERICAN, KIND_CODES, KIND_NAMES, STYLE_CODES, STYLE_NAMES
from . import table
from .table import EXCEL_TEXT_LIMIT, Function


ERROR_PREFIX = "#optiond: "
#: Excel's error values, as xlwings (``err_to_str``) and ``formulas`` hand them over
EXCEL_ERRORS = frozenset({"#DIV/0!", "#N/A", "#NAME?", "#NULL!", "#NUM!", "#REF!", "#VALUE!", "#SPILL!", "#CALC!",
                          "#FIELD!", "#GETTING_DATA", "#BLOCKED!", "#CONNECT!", "#BUSY!", "#UNKNOWN!", "#EMPTY!"})
#: the most options one call may broadcast to (an Excel sheet's row count)
MAX_CELLS = 1_048_576


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
        return error_text(f"{name} {reason}, got {value}")
    return error_text(_IV_MESSAGES.get(message, message))


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


def _american(v: Any, name: str) -> Any:
    """A cell as "american" / "european", :data:`_EMPTY`, or an error message.

    TRUE/FALSE, 1/0 and the texts TRUE, FALSE, american, european are accepted."""
    if _is_empty(v):
        return _EMPTY
    if isinstance(v, (bool, np.bool_)):
        return STYLE_NAMES[AMERICAN] if v else STYLE_NAMES[1 - AMERICAN]
    if isinstance(v, (int, float, np.integer, np.floating)) and v in (0, 1):
        return STYLE_NAMES[AMERICAN] if v == 1 else STYLE_NAMES[1 - AMERICAN]
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "false"):
            return STYLE_NAMES[AMERICAN] if s == "true" else STYLE_NAMES[1 - AMERICAN]
        if s in STYLE_CODES:
            return STYLE_NAMES[STYLE_CODES[s]]
        if s.upper() in EXCEL_ERRORS:
            return error_text(f"{name} is {s.upper()}")
    return error_text(f"{name} must be TRUE or FALSE, got {_show(v)}")


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


_PARSERS: Mapping[str, Callable[[Any, str], Any]] = {"number": _number, "kind": _kind, "american": _american,
                                                     "payoff": _payoff, "scheme": _scheme}


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
    if arg.parse == "number" and a.dtype.kind in "fiu":
        return a.astype(np.float64), None  # non-finite values are caught by the schema's checks
    parse = _PARSERS[arg.parse]
    flat = a.ravel()
    vals = np.empty(flat.shape[0], dtype=np.float64 if arg.parse == "number" else object)
    errs = None
    for i, v in enumerate(flat.tolist()):
        x = parse(v, arg.name)
        if x is _EMPTY:
            if arg.optional:
                x = parse(arg.default, arg.name)
            else:
                x = error_text(f"{arg.name} is required (empty cell)")
        if isinstance(x, str) and x.startswith(ERROR_PREFIX):
            if errs is None:
                errs = np.full(flat.shape[0], None, dtype=object)
            errs[i] = x
            x = math.nan if arg.parse == "number" else ""
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


def _scalar(arg: table.Arg, value: Any) -> float | None:
    """A single-cell number argument: a finite float, or None when empty and optional.

    Raises:
        _Problem: a range, text, an Excel error, a non-finite number, a required empty cell."""
    a = _grid(value, arg.name)
    if a.size != 1:
        raise _Problem(f"{arg.name} must be a single cell")
    x = _number(a.ravel()[0], arg.name)
    if isinstance(x, str):
        raise _Problem(x[len(ERROR_PREFIX):])
    if x is _EMPTY:
        if arg.optional:
            return None
        raise _Problem(f"{arg.name} is required (empty cell)")
    if not math.isfinite(x):
        raise _Problem(f"{arg.name} must be a finite number, got {_show(x)}")
    return x


def _parse_cells(spec: Function, values: Sequence[Any]) -> tuple[dict[str, Any], str | None]:
    """Single-cell arguments, each parsed once: ``(values by field, error)``, the values Python
    scalars (NaN or "" where a cell is bad) and the error the first cell text in argument
    order, or None."""
    cells: dict[str, Any] = {}
    err = None
    for a, v in zip(spec.args, values):
        parse = _PARSERS[a.parse]
        x = parse(v, a.name)
        if x is _EMPTY:
            x = parse(a.default, a.name) if a.optional else error_text(f"{a.name} is required (empty cell)")
        if isinstance(x, str) and x.startswith(ERROR_PREFIX):
            err = err or x
            x = math.nan if a.parse == "number" else ""
        cells[a.field] = x
    return cells, err


def _cell_columns(spec: Function, cells: Mapping[str, Any],
                  err: str | None) -> tuple[tuple, dict[str, np.ndarray], np.ndarray]:
    """What :func:`_read_ranges` gives (shape ``()``), from :func:`_parse_cells`' result."""
    cols = {a.field: np.array([cells[a.field]], dtype=np.float64 if a.parse == "number" else object)
            for a in spec.args}
    cell_err = np.empty(1, dtype=object)
    cell_err[0] = err
    return (), cols, cell_err


def _read_cells(spec: Function, values: Sequence[Any]) -> tuple[tuple, dict[str, np.ndarray], np.ndarray]:
    """Single-cell arguments: the fast path of :func:`_read_ranges` (shape ``()``)."""
    return _cell_columns(spec, *_parse_cells(spec, values))


def _read_ranges(spec: Function, values: Sequence[Any]) -> tuple[tuple, dict[str, np.ndarray], np.ndarray]:
    """Parse and broadcast the arguments: ``(shape, columns, cell errors)``, the columns and
    errors flattened row-major (errors: the first of each cell in argument order, or None)."""
    read = [_read(a, v) for a, v in zip(spec.args, values)]
    try:
        shape = np.broadcast_shapes(*(v.shape for v, _ in read))
    except ValueError:
        shapes = ", ".join(f"{a.name} {'x'.join(map(str, v.shape)) or '1x1'}" for a, (v, _) in zip(spec.args, read))
        raise _Problem(f"the ranges' shapes do not match ({shapes}): give one row, one column or ranges of "
                       "the same shape") from None
    n = math.prod(shape)
    if n > MAX_CELLS:
        raise _Problem(f"{n:,} options in one call: at most {MAX_CELLS:,}")
    cell_err = np.full(n, None, dtype=object)
    cols: dict[str, np.ndarray] = {}
    for a, (v, e) in zip(spec.args, read):
        cols[a.field] = np.broadcast_to(v, shape).ravel()
        if e is not None:
            e = np.broadcast_to(e, shape).ravel()
            fill = e.astype(bool) & ~cell_err.astype(bool)
            cell_err[fill] = e[fill]
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
