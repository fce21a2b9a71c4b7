"""optiond's Excel worksheet functions (xlwings user-defined functions).

``BOPM_PUT``, ``BOPM_CALL``, ``BS_PUT``, ``BS_CALL``, ``BOPM_IV`` and ``BOPM_GREEKS``; their
arguments, descriptions and defaults are in :mod:`optiond.addin.table` (the one table), which
also builds the xlwings decorators. On Windows with Excel, xlwings calls them from the
workbook; anywhere else they are plain Python functions with the same behaviour.

Behaviour, the same for every function:

* **Ranges broadcast.** Any argument may be a cell or a range (a 2-D list from xlwings, a list
  or a NumPy array from Python; a 1-D sequence counts as a column). The arguments are
  broadcast against each other as NumPy does (a column of strikes with scalar rest gives a
  column; a row of volatilities against a column of strikes gives a grid) and the whole range
  is priced by ONE request to the daemon. The result has the broadcast shape;
  ``BOPM_GREEKS`` gives one row of five Greeks per option, options in row-major order. All
  arguments single cells: a single value (a one-row list for ``BOPM_GREEKS``).
* **Errors are cell text**, never a traceback: a bad value gives a short message of at most
  255 characters starting with ``#optiond:`` in its own cell (for ``BOPM_GREEKS`` in each
  cell of its row), e.g. ``#optiond: K must be > 0, got -5``; the other cells are priced.
  Empty cells (``None``) take the argument's default where it is optional and are an error
  where it is required. Cells that are not of the argument's type (text for a number, an
  Excel error value, an unknown kind) are caught here and never sent; the value checks
  (> 0, finite, N from 1 to 1e7, the CRR probability in [0, 1]) are the schema's
  (:mod:`optiond.models`), made where the request is priced, and come back per row under the
  argument's Excel name. A problem of the whole call (ranges that do not broadcast) returns
  one message; a request that fails as a whole (daemon down with the fall-back off) puts its
  message in every cell it was to price, and is not cached.
* **Daemon first.** Requests go through :func:`optiond.daemon.client.get_client`; when no
  daemon answers, the client prices in-process (set ``OPTIOND_FALLBACK=0`` to get an error
  message instead).
* **Cache.** Identical requests (the same canonical columns and method) are answered from a
  bounded in-memory LRU cache. :func:`clear_cache` empties it (forcing the next
  recalculation to price again); ``OPTIOND_CACHE=0`` in the environment turns it off.
  :func:`cache_info` reports hits, misses and size.

:func:`register_formulas` registers the functions with the ``formulas`` package, which
recalculates ``.xlsx`` workbooks without Excel.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import os
import re
import threading
from collections import OrderedDict
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import xlwings as xw

from ..daemon.client import DaemonUnavailable, get_client
from ..models import AMERICAN, KIND_CODES, KIND_NAMES, STYLE_CODES, STYLE_NAMES, Method, validate_steps
from . import table
from .table import EXCEL_TEXT_LIMIT, GREEK_COLUMNS, Function

ERROR_PREFIX = "#optiond: "
#: Excel's error values, as xlwings (``err_to_str``) and ``formulas`` hand them over
EXCEL_ERRORS = frozenset({"#DIV/0!", "#N/A", "#NAME?", "#NULL!", "#NUM!", "#REF!", "#VALUE!", "#SPILL!", "#CALC!",
                          "#FIELD!", "#GETTING_DATA", "#BLOCKED!", "#CONNECT!", "#BUSY!", "#UNKNOWN!", "#EMPTY!"})
#: the most options one call may broadcast to (an Excel sheet's row count)
MAX_CELLS = 1_048_576
#: the cache: at most this many requests, holding at most this many rows in all
CACHE_MAX_ENTRIES = 4096
CACHE_MAX_ROWS = 2_000_000

_FALSE_WORDS = {"0", "false", "no", "off"}


def _env_on(name: str, default: bool = True) -> bool:
    v = os.environ.get(name)
    return default if v is None or not v.strip() else v.strip().lower() not in _FALSE_WORDS


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


_PARSERS: Mapping[str, Callable[[Any, str], Any]] = {"number": _number, "kind": _kind, "american": _american}


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


def _array_key(v: Any) -> tuple:
    a = np.ascontiguousarray(v)
    if a.dtype == object:
        return ("O", a.shape, tuple(a.ravel().tolist()))
    return (a.dtype.str, a.shape, a.tobytes())


def _request_key(op: str, method: Method, columns: Mapping[str, Any], prices: Any) -> tuple:
    steps = method.steps if np.ndim(method.steps) == 0 else _array_key(method.steps)
    return (op, method.name, steps, method.greeks, method.precision, method.device,
            tuple((k, _array_key(columns[k])) for k in sorted(columns)),
            None if prices is None else _array_key(prices))


# ---- pricing -------------------------------------------------------------------------------

def _client() -> Any:
    """The daemon client: :func:`optiond.daemon.client.get_client` (tests replace this)."""
    return get_client()


_ROW_ERROR = re.compile(r"^(?P<field>[a-z_]+)=(?P<value>.*?): (?P<reason>.*)$", re.S)


def _row_text(spec: Function, message: str) -> str:
    """A row error of the engine (or the daemon) as cell text, with Excel's argument names.

    The schema's row errors read ``field=value: reason`` (:attr:`optiond.models.RowError.message`),
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
        reason = m["reason"]
        if not reason.startswith("must"):  # "not a finite number" -> "must be a finite number"
            reason = "must be " + re.sub(r"^not an? ", "a ", reason)
        return error_text(f"{name} {reason}, got {value}")
    return error_text(_IV_MESSAGES.get(message, message))


def _daemon_down_text() -> str:
    return error_text("no optiond daemon is running; start one with: optiond serve")


def _failure_text(e: Exception) -> str:
    """A failed request (not a failed row) as cell text."""
    if isinstance(e, DaemonUnavailable):
        return _daemon_down_text()
    return error_text(f"pricing failed: {e}")


@functools.lru_cache(maxsize=256)
def _method(name: str, greeks: bool, steps: int | None = None) -> Method:
    return Method(name=name, greeks=greeks) if steps is None else Method(name=name, greeks=greeks, steps=steps)


def _steps_column(steps: np.ndarray) -> np.ndarray:
    """Whole step counts as int64; anything else stays float for the schema to reject."""
    whole = np.isfinite(steps) & (steps == np.floor(steps)) & (np.abs(steps) < 2.0 ** 62)
    return steps.astype(np.int64) if whole.all() else steps


def _iv_checks(spec: Function, cols: Mapping[str, np.ndarray]) -> dict[int, str]:
    """What the implied-volatility engine does not check per row: the price (finite, > 0)
    and N (:func:`optiond.models.validate_steps`; a bad N fails the whole engine call)."""
    out: dict[int, str] = {}
    name = {a.field: a.name for a in spec.args}
    p = cols["price"]
    for i in np.flatnonzero(~(np.isfinite(p) & (p > 0))).tolist():
        out[i] = error_text(f"{name['price']} must be {'> 0' if np.isfinite(p[i]) else 'a finite number'}, "
                            f"got {_show(p[i])}")
    if "steps" in cols:
        for e in validate_steps(cols["steps"], p.shape[0])[1]:
            out.setdefault(e.row, _row_text(spec, e.message))
    return out


def _ask(spec: Function, cols: dict[str, np.ndarray], m: int) -> tuple[np.ndarray, list]:
    """Price m parsed rows in ONE request: ``(values (m, k) float64, errors)`` with errors a
    list of m cell texts (None where the row is fine).

    Answers from the cache when it can; raises whatever the client raises."""
    req = dict(cols)
    prices = req.pop("price", None)
    steps = req.pop("steps", None)
    for f, v in spec.fixed.items():
        req[f] = v
    for f in ("kind", "style"):  # one label for every row travels as one value
        v = req.get(f)
        if isinstance(v, np.ndarray) and v.size and (v == v[0]).all():
            req[f] = v[0]
    errors: list = [None] * m
    if spec.op == "iv":
        for i, text in _iv_checks(spec, cols).items():
            errors[i] = text
        keep = np.array([e is None for e in errors], dtype=bool)
        if not keep.all():  # leave the rows the engine would reject out of the request
            prices = prices[keep]
            req = {k: v[keep] if np.ndim(v) else v for k, v in req.items()}
            steps = None if steps is None else steps[keep]
        if steps is None:
            method = _method(spec.method, False)
        elif steps.size and (steps == steps[0]).all():
            method = _method(spec.method, False, int(steps[0]))
        else:
            method = Method(name=spec.method, greeks=False, steps=_steps_column(steps))
    else:
        keep = None
        if steps is not None:
            req["steps"] = _steps_column(steps)
        method = _method(spec.method, spec.op == "greeks")
    n = m if keep is None else int(keep.sum())
    k = len(GREEK_COLUMNS) if spec.op == "greeks" else 1
    values = np.full((m, k), np.nan)
    if n == 0:
        return values, errors

    use_cache = _env_on("OPTIOND_CACHE")
    key = _request_key(spec.op, method, req, prices) if use_cache else None
    hit = _cache.get(key) if use_cache else None
    if hit is not None:
        vals, errs = hit
    else:
        fallback = _env_on("OPTIOND_FALLBACK")
        client = _client()
        if spec.op == "iv":
            vol, status = client.implied_vol(prices, req, method, fallback=fallback)
            vals = np.asarray(vol, dtype=np.float64).reshape(-1, 1)
            errs = [None if s == "ok" else _row_text(spec, s) for s in np.asarray(status).tolist()]
        else:
            res = client.price_table(req, method, fallback=fallback)
            names = GREEK_COLUMNS if spec.op == "greeks" else ("price",)
            vals = np.stack([np.asarray(getattr(res, f), dtype=np.float64) for f in names], axis=1)
            errs = [None if s == "ok" else _row_text(spec, e) for s, e in zip(np.asarray(res.status).tolist(),
                                                                             np.asarray(res.error).tolist())]
        if vals.shape[0] != n or len(errs) != n:
            raise RuntimeError(f"the pricer answered {vals.shape[0]} rows for {n}")
        if use_cache:
            _cache.put(key, (vals, errs), n)
    if keep is None:
        return vals, list(errs)
    values[keep] = vals
    for i, e in zip(np.flatnonzero(keep).tolist(), errs):
        errors[i] = e
    return values, errors


def evaluate(spec: Function | str, values: Sequence[Any]) -> Any:
    """Evaluate worksheet function ``spec`` on its argument values (in the table's order).

    This is the body of every worksheet function; see the module docstring for the rules.

    Returns:
        a float (None for no value, or an error text) when every argument is a single cell
        (a one-row list for ``BOPM_GREEKS``); otherwise a list of rows (a 2-D list) of those.
    """
    spec = table.BY_NAME[spec] if isinstance(spec, str) else spec
    try:
        if len(values) != len(spec.args):
            raise _Problem(f"{spec.name} takes {len(spec.args)} arguments, got {len(values)}")
        key = None
        if all(type(v) in _CELL_TYPES for v in values):
            if _env_on("OPTIOND_CACHE"):
                # single cells: the call itself is the key (types included: TRUE is not 1)
                key = ("cells", spec.name, tuple((type(v), v) for v in values))
                hit = _cache.get(key)
                if hit is not None:
                    return hit[0]
            shape, cols, cell_err = _read_cells(spec, values)
        else:
            shape, cols, cell_err = _read_ranges(spec, values)
        result, complete = _compute(spec, shape, cols, cell_err)
        if key is not None and complete:
            _cache.put(key, (result,), 1)
        return result
    except _Problem as p:
        return error_text(str(p))
    except Exception as e:  # never a traceback in a cell
        return error_text(f"{type(e).__name__}: {e}")


_CELL_TYPES = frozenset({float, int, str, bool, type(None)})


def _read_cells(spec: Function, values: Sequence[Any]) -> tuple[tuple, dict[str, np.ndarray], np.ndarray]:
    """Single-cell arguments: the fast path of :func:`_read_ranges` (shape ``()``)."""
    cols: dict[str, np.ndarray] = {}
    err = None
    for a, v in zip(spec.args, values):
        parse = _PARSERS[a.parse]
        x = parse(v, a.name)
        if x is _EMPTY:
            x = parse(a.default, a.name) if a.optional else error_text(f"{a.name} is required (empty cell)")
        if isinstance(x, str) and x.startswith(ERROR_PREFIX):
            err = err or x
            x = math.nan if a.parse == "number" else ""
        cols[a.field] = np.array([x], dtype=np.float64 if a.parse == "number" else object)
    cell_err = np.empty(1, dtype=object)
    cell_err[0] = err
    return (), cols, cell_err


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


def _compute(spec: Function, shape: tuple, cols: dict[str, np.ndarray], cell_err: np.ndarray) -> tuple[Any, bool]:
    """Price the cells without an error and lay the answer out: ``(result, complete)``,
    complete False when the request itself failed (then nothing is cached)."""
    n = cell_err.shape[0]
    k = len(GREEK_COLUMNS) if spec.op == "greeks" else 1
    out = np.full((n, k), None, dtype=object)
    complete = True
    has_err = cell_err.astype(bool)
    ok = np.flatnonzero(~has_err)
    if ok.size:
        sub = cols if ok.size == n else {f: v[ok] for f, v in cols.items()}
        try:
            vals, errs = _ask(spec, sub, ok.size)
        except Exception as e:
            out[ok, :] = _failure_text(e)
            complete = False
        else:
            cells = vals.astype(object)
            cells[~np.isfinite(vals)] = None  # an empty cell where the pricer gives no value
            for i, e in enumerate(errs):
                if e is not None:
                    cells[i, :] = e
            out[ok] = cells
    bad = np.flatnonzero(has_err)
    if bad.size:
        out[bad, :] = cell_err[bad, None]
    return _shape_result(spec, out, shape), complete


def _as_cell(x: Any) -> Any:
    return float(x) if isinstance(x, (float, np.floating)) else x


def _shape_result(spec: Function, out: np.ndarray, shape: tuple[int, ...]) -> Any:
    if spec.op == "greeks":
        return [[_as_cell(x) for x in row] for row in out.tolist()]
    if shape == ():
        return _as_cell(out[0, 0])
    return [[_as_cell(x) for x in row] for row in out[:, 0].reshape(shape).tolist()]


# ---- the worksheet functions ---------------------------------------------------------------
# Each takes exactly the table's arguments (optional ones default to None: the table holds the
# defaults); table.decorate checks that, sets the docstring to the table's description and
# applies @xw.arg / @xw.func.

def _udf(impl: Callable) -> Callable:
    return table.decorate(table.BY_NAME[impl.__name__], impl, func=xw.func, arg=xw.arg)


@_udf
def BOPM_PUT(S, K, T, r, sigma, N, q=None, american=None):
    return evaluate("BOPM_PUT", (S, K, T, r, sigma, N, q, american))


@_udf
def BOPM_CALL(S, K, T, r, sigma, N, q=None, american=None):
    return evaluate("BOPM_CALL", (S, K, T, r, sigma, N, q, american))


@_udf
def BS_PUT(S, K, T, r, sigma, q=None):
    return evaluate("BS_PUT", (S, K, T, r, sigma, q))


@_udf
def BS_CALL(S, K, T, r, sigma, q=None):
    return evaluate("BS_CALL", (S, K, T, r, sigma, q))


@_udf
def BOPM_IV(price, S, K, T, r, q=None, kind=None, N=None, american=None):
    return evaluate("BOPM_IV", (price, S, K, T, r, q, kind, N, american))


@_udf
def BOPM_GREEKS(S, K, T, r, sigma, N, q=None, kind=None, american=None):
    return evaluate("BOPM_GREEKS", (S, K, T, r, sigma, N, q, kind, american))


#: the worksheet functions by Excel name
WORKSHEET_FUNCTIONS: dict[str, Callable] = {f.name: globals()[f.name] for f in table.FUNCTIONS}


# ---- recalculating workbooks without Excel (the formulas package) -------------------------

def _from_formulas(v: Any) -> Any:
    """A ``formulas`` argument as xlwings would pass it: ranges as 2-D lists, empty cells as
    None, Excel errors as their text ("#DIV/0!")."""
    import schedula as sh
    from formulas.ranges import Ranges
    from formulas.tokens.operand import XlError

    def cell(x: Any) -> Any:
        if x is sh.EMPTY:
            return None
        if isinstance(x, XlError):
            return str(x)
        return x.item() if isinstance(x, np.generic) else x

    if isinstance(v, Ranges):
        v = v.value
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            return cell(v[()])
        return [[cell(x) for x in row] for row in np.atleast_2d(v).tolist()]
    return cell(v)


def formulas_functions() -> dict[str, Callable]:
    """The worksheet functions wrapped for the ``formulas`` package (upper-case names).

    A result of several cells needs an array formula in the workbook (openpyxl's
    ``ArrayFormula``) spanning the result's shape."""
    out = {}
    for name, f in WORKSHEET_FUNCTIONS.items():
        def wrapper(*args: Any, _f: Callable = f) -> Any:
            return _f(*(_from_formulas(a) for a in args))

        wrapper.__name__ = wrapper.__qualname__ = name
        wrapper.__doc__ = f.__doc__
        out[name] = wrapper
    return out


def register_formulas() -> dict[str, Callable]:
    """Register the worksheet functions in ``formulas.get_functions()`` (so an
    ``ExcelModel`` loaded afterwards evaluates ``=BOPM_PUT(...)``); returns what it added."""
    import formulas

    funcs = formulas_functions()
    formulas.get_functions().update(funcs)
    return funcs
