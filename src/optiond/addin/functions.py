"""optiond's Excel worksheet functions (xlwings user-defined functions).

``BOPM_PUT``, ``BOPM_CALL``, ``BS_PUT``, ``BS_CALL``, ``BOPM_IV``, ``BOPM_GREEKS``; the
multilevel Monte Carlo prices ``MLMC_CALL``, ``MLMC_PUT``, ``MLMC_ASIAN_CALL``,
``MLMC_DIGITAL_CALL`` and their standard error ``MLMC_STDERR``; the Heston ADI prices
``HESTON_CALL`` and ``HESTON_PUT``; ``PARITY_FORWARD``, the forward and discount factor of a
pasted strip of call and put prices (a put-call parity fit, computed in this process: the
rules below on ranges, requests, the cache and the daemon are those of the pricing
functions). Their arguments, descriptions and defaults are in
:mod:`optiond.addin.table` (the one table), which also builds the xlwings decorators. On
Windows with Excel, xlwings calls them from the workbook; anywhere else they are plain Python
functions with the same behaviour.

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
  Excel error value, an unknown kind, payoff or scheme) are caught here and never sent, and so
  are the values the engine would only reject after working (MLMC ``eps`` <= 0, a ``seed``
  that is not a whole number >= 0, ``sigma`` over the MLMC kernels' 5, the work limits); the
  value checks (> 0, finite, N from 1 to 1e7, the CRR probability in [0, 1], Heston
  ``rho`` in [-1, 1]...) are the schema's (:mod:`optiond.models`), made where the request is
  priced, and come back per row under the argument's Excel name. A problem of the whole call
  (ranges that do not broadcast) returns one message; a request that fails as a whole (daemon
  down with the fall-back off) puts its message in every cell it was to price, and is not
  cached.
* **Work limits.** One call may ask for a bounded amount of work (the constants and estimates
  in :mod:`optiond.addin.table`: tree nodes for ``BOPM_*``, an eps floor and estimated path
  steps for ``MLMC_*``, grid-cell updates for ``HESTON_*``), so a cell cannot freeze Excel. A
  row over a limit on its own gets a text in its own cell; rows over it only together get the
  call's text in each of their cells; both point to the panel and ``optiond price``.
* **One request per range**, with two exceptions: ``seed`` (MLMC) and ``scheme`` (ADI) are
  settings of a whole request, so a range holding several seeds or schemes is priced by one
  request per distinct value.
* **MLMC.** The estimate is a deterministic function of the inputs and ``seed`` (default 0),
  so a recalculation gives the same number. ``MLMC_STDERR`` with the same arguments (and the
  ``kind`` and ``payoff`` of the price) is the standard error of that same run: the two share
  one cached request, so the pair costs one run.
* **Daemon first, except where a round trip costs more than the work.** Requests go through
  :func:`optiond.daemon.client.get_client`; when no daemon answers, the client prices
  in-process (set ``OPTIOND_FALLBACK=0`` to get an error message instead). A CRR or
  Black–Scholes request of at most ``OPTIOND_LOCAL_NODES`` tree nodes in all (default
  :data:`LOCAL_MAX_NODES` = 2e5, about 70 us of one core; a loopback round trip to the daemon
  measured 150-400 us) is priced in this process by the same engine, with the same bits, as
  the daemon would (a single ``=BOPM_PUT`` with N up to ~630, a range of a few small trees);
  larger CRR work, MLMC and Heston go to the daemon (its GPU, MPI pool and shared cache).
  ``OPTIOND_LOCAL_NODES=0`` sends everything to the daemon.
* **Cache.** Identical requests (the same canonical columns and method) are answered from a
  bounded in-memory LRU cache. :func:`clear_cache` empties it (forcing the next
  recalculation to price again); ``OPTIOND_CACHE=0`` in the environment turns it off.
  :func:`cache_info` reports hits, misses and size.

:func:`register_formulas` registers the functions with the ``formulas`` package, which
recalculates ``.xlsx`` workbooks without Excel.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import math
import os
import re
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import xlwings as xw

from ..daemon.client import DaemonUnavailable, get_client
from ..market.forwards import ExpiryPairs, parity_fit
from ..models import AMERICAN, KIND_CODES, KIND_NAMES, MAX_STEPS, STYLE_CODES, STYLE_NAMES, Method, validate_steps
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


def _method_key(method: Method) -> tuple:
    return tuple(_array_key(v) if isinstance(v, np.ndarray) else v
                 for v in (getattr(method, f.name) for f in dataclasses.fields(method)))


def _request_key(op: str, method: Method, columns: Mapping[str, Any], prices: Any) -> tuple:
    return (op, _method_key(method), tuple((k, _array_key(columns[k])) for k in sorted(columns)),
            None if prices is None else _array_key(prices))


# ---- pricing -------------------------------------------------------------------------------

def _client() -> Any:
    """The daemon client: :func:`optiond.daemon.client.get_client` (tests replace this)."""
    return get_client()


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


def _daemon_down_text() -> str:
    return error_text("no optiond daemon is running; start one with: optiond serve")


def _failure_text(e: Exception) -> str:
    """A failed request (not a failed row) as cell text."""
    if isinstance(e, DaemonUnavailable):
        return _daemon_down_text()
    return error_text(f"pricing failed: {e}")


@functools.lru_cache(maxsize=256)
@functools.lru_cache(maxsize=256)
def _method(name: str, greeks: bool, steps: int | None = None) -> Method:
    return Method(name=name, greeks=greeks) if steps is None else Method(name=name, greeks=greeks, steps=steps)


def _uniform_steps(steps: np.ndarray) -> int | None:
    """The one valid whole number of steps all rows ask for, else None (then the steps travel
    as a column and the schema checks each row)."""
    if not steps.size:
        return None
    first = steps.flat[0]
    if not (np.isfinite(first) and first == math.floor(first) and 1 <= first <= MAX_STEPS) or not (steps == first).all():
        return None
    return int(first)


@functools.lru_cache(maxsize=16)
def _adi_method(scheme: str) -> Method:
    return Method(name="adi", greeks=False, scheme=scheme, grid=table.HESTON_GRID, time_steps=table.HESTON_TIME_STEPS)


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


#: Excel numbers hold whole numbers exactly up to 2^53: the largest seed a cell can carry
_MAX_SEED = float(2 ** 53)


def _mlmc_checks(spec: Function, cols: Mapping[str, np.ndarray], out: dict[int, str]) -> None:
    """Per-row MLMC checks the engine does not make before it works: sigma within the kernel's
    range, eps finite and > 0 and not below the worksheet floor, a whole seed >= 0."""
    name = {a.field: a.name for a in spec.args}
    S, sig, eps, seed = cols["spot"], cols["volatility"], cols["eps"], cols["seed"]
    digital = _payoffs(spec, cols, S.shape[0]) == "digital"
    with np.errstate(invalid="ignore"):
        for i in np.flatnonzero(np.isfinite(sig) & (sig > table.MLMC_MAX_VOLATILITY)).tolist():
            out.setdefault(i, error_text(f"{name['volatility']} must be <= {table.MLMC_MAX_VOLATILITY:g} for MLMC, "
                                         f"got {_show(sig[i])}"))
        for i in np.flatnonzero(~(np.isfinite(eps) & (eps > 0))).tolist():
            out.setdefault(i, error_text(f"{name['eps']} must be {'> 0' if np.isfinite(eps[i]) else 'a finite number'}"
                                         f", got {_show(eps[i])}"))
        scale = np.where(digital, 1.0, S)
        floor = table.MLMC_MIN_EPS_REL * scale
        low = np.isfinite(eps) & (eps > 0) & np.isfinite(scale) & (scale > 0) & (eps < floor)
        for i in np.flatnonzero(low).tolist():
            what = f"{table.MLMC_MIN_EPS_REL:g} for a digital paying 1" if digital[i] else \
                f"{table.MLMC_MIN_EPS_REL:g} x S = {floor[i]:.4g}"
            out.setdefault(i, error_text(f"{name['eps']}={_show(eps[i])} is below the worksheet floor of {what}; for "
                                         f"a smaller error {table.OVER_LIMIT_ADVICE}"))
        bad = ~(np.isfinite(seed) & (seed >= 0) & (seed <= _MAX_SEED) & (seed == np.floor(seed)))
    for i in np.flatnonzero(bad).tolist():
        out.setdefault(i, error_text(f"{name['seed']} must be a whole number >= 0, got {_show(seed[i])}"))


def _payoffs(spec: Function, cols: Mapping[str, np.ndarray], n: int) -> np.ndarray:
    """The MLMC payoff family of each row (object array of n)."""
    p = cols.get("payoff", spec.fixed.get("payoff", "vanilla"))
    return np.broadcast_to(np.asarray(p, dtype=object), (n,))


def _work(spec: Function, cols: Mapping[str, np.ndarray], n: int) -> tuple[np.ndarray, float, str] | None:
    """``(work per row, limit, unit)`` of the call's method (0 for rows the engine will reject
    as invalid anyway), or None for a method without a work limit."""
    if spec.method == "binomial":
        N = cols["steps"]
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(N) & (N >= 1) & (N <= MAX_STEPS) & (N == np.floor(N))
        return np.where(ok, table.bopm_tree_nodes(np.where(ok, N, 0.0), spec.op), 0.0), table.BOPM_MAX_TREE_NODES, \
            "tree nodes"
    if spec.method == "mlmc":
        S, T, r, q, sig, eps = (cols[f] for f in ("spot", "expiry", "rate", "dividend_yield", "volatility", "eps"))
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(S + T + r + q + sig) & (S > 0) & (T > 0) & (sig > 0) & np.isfinite(eps) & (eps > 0)
            w = table.mlmc_path_steps(_payoffs(spec, cols, n), S, T, r, q, sig, np.where(ok, eps, 1.0))
        return np.where(ok, w, 0.0), table.MLMC_MAX_PATH_STEPS, "path steps"
    if spec.method == "adi":
        return np.full(n, table.heston_grid_work(1)), table.HESTON_MAX_GRID_WORK, "grid-cell updates"
    return None


def _over_limit(spec: Function, cols: Mapping[str, np.ndarray], out: dict[int, str]) -> None:
    """The per-call work limit: rows over it on their own get their own text; when the other
    rows together are over it, each of them gets the call's text."""
    n = cols["spot"].shape[0]
    w = _work(spec, cols, n)
    if w is None:
        return
    work, limit, unit = w
    alive = np.ones(n, dtype=bool)
    if out:
        alive[list(out)] = False
    name = {a.field: a.name for a in spec.args}
    fix = {"binomial": "lower N, ", "mlmc": "raise eps, ", "adi": ""}[spec.method]
    for i in np.flatnonzero(alive & (work > limit)).tolist():
        which = (f"{name['steps']}={_show(cols['steps'][i])}" if spec.method == "binomial" else
                 f"{name['eps']}={_show(cols['eps'][i])}" if spec.method == "mlmc" else "one option")
        out[i] = error_text(f"{which} needs about {work[i]:.2g} {unit}, over the worksheet limit of {limit:.2g} per "
                            f"call; {fix}or {table.OVER_LIMIT_ADVICE}")
        alive[i] = False
    total = float(work[alive].sum())
    if total > limit:
        k = int(alive.sum())
        text = error_text(f"this call needs about {total:.2g} {unit} for {k} options, over the worksheet limit of "
                          f"{limit:.2g}; {fix}split the range, or {table.OVER_LIMIT_ADVICE}")
        for i in np.flatnonzero(alive).tolist():
            out[i] = text


def _pre_checks(spec: Function, cols: Mapping[str, np.ndarray]) -> dict[int, str]:
    """Rows that are not sent, with their cell text: checks the engine does not make per row
    (implied-volatility prices and N, MLMC eps and seed) and the work limits."""
    out = _iv_checks(spec, cols) if spec.op == "iv" else {}
    if spec.method == "mlmc":
        _mlmc_checks(spec, cols, out)
    _over_limit(spec, cols, out)
    return out


def _uniform(v: Any) -> Any:
    """An array holding one value in every row as that value (one label travels as one value)."""
    if isinstance(v, np.ndarray) and v.size and (v == v[0]).all():
        return v[0]
    return v


def _requests(spec: Function, cols: dict[str, np.ndarray], n: int) -> Iterator[tuple]:
    """The requests that price n checked rows: ``(rows or None for all, columns, method,
    prices)``. One, unless the rows ask for different MLMC seeds or ADI schemes (settings of
    the whole request): then one per seed or scheme."""
    req = dict(cols)
    prices = req.pop("price", None)
    steps = req.pop("steps", None)
    split = req.pop("seed", None)
    scheme = req.pop("scheme", None)
    split = scheme if split is None else split
    for f, v in spec.fixed.items():
        req[f] = v
    if split is None or (split == split[0]).all():
        parts = [(None, None if split is None else split[0])]
    else:
        firsts = sorted(np.unique(split, return_index=True)[1].tolist())
        parts = [(np.flatnonzero(split == split[i]), split[i]) for i in firsts]
    for rows, setting in parts:
        sub = req if rows is None else {k: v[rows] if isinstance(v, np.ndarray) else v for k, v in req.items()}
        for f in ("kind", "style", "payoff"):
            if f in sub:
                sub[f] = _uniform(sub[f])
        p = prices if rows is None or prices is None else prices[rows]
        st = steps if rows is None or steps is None else steps[rows]
        yield rows, sub, _request_method(spec, sub, st, setting), p


def _request_method(spec: Function, req: dict[str, Any], steps: np.ndarray | None, setting: Any) -> Method:
    """The request's :class:`Method`; moves uniform MLMC ``eps`` and ``payoff`` columns and
    the steps into it (or the steps into ``req``)."""
    if spec.method == "mlmc":
        eps = req.pop("eps")
        one = _uniform(eps)
        if isinstance(one, np.ndarray):  # per-row eps; the method's (the daemon costs with it) is the smallest
            req["eps"] = eps
            one = eps.min()
        payoff = _uniform(req.pop("payoff"))
        if isinstance(payoff, np.ndarray):
            req["payoff"] = payoff
            payoff = "vanilla"
        return Method(name="mlmc", greeks=False, eps=float(one), payoff=str(payoff), seed=int(setting))
    if spec.method == "adi":
        return _adi_method(str(setting))
    if spec.op == "iv":
        if steps is None:
            return _method(spec.method, False)
        if steps.size and (steps == steps[0]).all():
            return _method(spec.method, False, int(steps[0]))
        return Method(name=spec.method, greeks=False, steps=_steps_column(steps))
    if steps is not None:
        one = _uniform_steps(steps)
        if one is not None:  # the usual case: one N for the call, in the (cached) method
            return _method(spec.method, spec.op == "greeks", one)
        req["steps"] = _steps_column(steps)
    return _method(spec.method, spec.op == "greeks")


def _std_error(res: Any, n: int) -> np.ndarray:
    """The MLMC standard errors of a result (``Result.std_error``, or ``diagnostics["std_error"]``
    from a daemon that sends them there); NaN where there are none."""
    se = getattr(res, "std_error", None)
    if se is None:
        se = (getattr(res, "diagnostics", None) or {}).get("std_error")
    a = None if se is None else np.asarray(se, dtype=np.float64)
    return a if a is not None and a.shape == (n,) else np.full(n, np.nan)


def _width(spec: Function) -> int:
    return len(GREEK_COLUMNS) if spec.op == "greeks" else 1


def _one(v: Any) -> Any:
    """A one-row column as a Python scalar (other values unchanged)."""
    if isinstance(v, np.ndarray) and v.shape == (1,):
        return v.item()
    return v.item() if isinstance(v, np.generic) else v


#: CRR tree nodes of one request under which the Excel functions price in this process (see
#: the module docstring; ``OPTIOND_LOCAL_NODES`` overrides, 0 turns it off)
LOCAL_MAX_NODES = 2e5


def _local_max_nodes() -> float:
    v = os.environ.get("OPTIOND_LOCAL_NODES")
    try:
        return LOCAL_MAX_NODES if v is None or not v.strip() else float(v)
    except ValueError:
        return LOCAL_MAX_NODES


def _local_work(spec: Function, method: Method, req: Mapping[str, Any], n: int) -> float:
    """Tree nodes of a request (the closed form counts one a row); inf for what only the
    daemon prices (MLMC, Heston ADI, per-row steps or methods)."""
    if spec.method not in _QUICK_METHODS or "steps" in req or "method" in req:
        return math.inf
    if spec.method == "black-scholes":
        return float(n)
    return n * float(table.bopm_tree_nodes(method.steps, spec.op))


class _InProcess:
    """The client's API on this process's engine (the same calls the daemon makes)."""

    @staticmethod
    def price_table(columns: Mapping[str, Any], method: Method, **_: Any) -> Any:
        from .. import engine

        return engine.price_table(columns, method)

    @staticmethod
    def implied_vol(prices: Any, columns: Mapping[str, Any], method: Method, **_: Any) -> Any:
        from .. import engine

        return engine.implied_vol_table(prices, columns, method)


_LOCAL = _InProcess()


def _request(spec: Function, req: dict[str, Any], method: Method, prices: Any, n: int) -> tuple[np.ndarray, list]:
    """ONE request (from the cache when it can): ``(values, errors)``, values (n, c) with c
    the reply's columns: the Greeks, (price, std_error) for MLMC, else one."""
    if n == 1:  # one cell: scalars, for the pricers' one-contract path (in-process and in the daemon)
        req = {k: _one(v) for k, v in req.items()}
        prices = None if prices is None else _one(prices)
    use_cache = _env_on("OPTIOND_CACHE")
    key = _request_key("iv" if spec.op == "iv" else "price", method, req, prices) if use_cache else None
    hit = _cache.get(key) if use_cache else None
    if hit is not None:
        return hit
    fallback = _env_on("OPTIOND_FALLBACK")
    client = _LOCAL if _local_work(spec, method, req, n) <= _local_max_nodes() else _client()
    if spec.op == "iv":
        vol, status = client.implied_vol(prices, req, method, fallback=fallback)
        vals = np.asarray(vol, dtype=np.float64).reshape(-1, 1)
        errs = [None if s == "ok" else _row_text(spec, s) for s in np.asarray(status).tolist()]
    else:
        res = client.price_table(req, method, fallback=fallback)
        if method.name == "mlmc":
            vals = np.stack([np.asarray(res.price, dtype=np.float64), _std_error(res, len(res.price))], axis=1)
        else:
            names = GREEK_COLUMNS if spec.op == "greeks" else ("price",)
            vals = np.stack([np.asarray(getattr(res, f), dtype=np.float64) for f in names], axis=1)
        errs = [None if s == "ok" else _row_text(spec, e) for s, e in zip(np.asarray(res.status).tolist(),
                                                                         np.asarray(res.error).tolist())]
    if vals.shape[0] != n or len(errs) != n:
        raise RuntimeError(f"the pricer answered {vals.shape[0]} rows for {n}")
    if use_cache and not (method.name == "mlmc" and _lacks_std_error(vals, errs)):
        _cache.put(key, (vals, errs), n)
    return vals, errs


def _lacks_std_error(vals: np.ndarray, errs: list) -> bool:
    """An MLMC reply without the standard error of a priced row (an older daemon): not cached,
    so an updated daemon is asked again."""
    return any(e is None and not np.isfinite(se) for e, se in zip(errs, vals[:, 1].tolist()))


_NO_STDERR = "the optiond daemon sent no standard error; update it and restart it (optiond serve)"


def _select(spec: Function, vals: np.ndarray, errs: list) -> tuple[np.ndarray, list]:
    """The function's columns of a reply: MLMC's price or its standard error."""
    if spec.method != "mlmc":
        return vals, errs
    if spec.op == "price":
        return vals[:, :1], errs
    se = vals[:, 1:2]
    missing = ~np.isfinite(se[:, 0]) & np.isfinite(vals[:, 0])
    if missing.any():
        errs = [error_text(_NO_STDERR) if e is None and miss else e for e, miss in zip(errs, missing.tolist())]
    return se, errs


def _ask(spec: Function, cols: dict[str, np.ndarray], m: int) -> tuple[np.ndarray, list]:
    """Price m parsed rows: ``(values (m, k) float64, errors)`` with errors a list of m cell
    texts (None where the row is fine).

    The rows the pre-checks refuse are not sent; the rest go in ONE request (one per MLMC
    seed or ADI scheme when the rows differ in those). Answers from the cache when it can;
    raises whatever the client raises."""
    errors: list = [None] * m
    values = np.full((m, _width(spec)), np.nan)
    refused = _pre_checks(spec, cols)
    rows = None
    if refused:
        for i, text in refused.items():
            errors[i] = text
        keep = np.ones(m, dtype=bool)
        keep[list(refused)] = False
        rows = np.flatnonzero(keep)
        cols = {f: v[keep] for f, v in cols.items()}
    n = m if rows is None else int(rows.size)
    if n == 0:
        return values, errors
    got = np.full((n, _width(spec)), np.nan)
    got_err: list = [None] * n
    for part, req, method, prices in _requests(spec, cols, n):
        vals, errs = _select(spec, *_request(spec, req, method, prices, n if part is None else int(part.size)))
        if part is None:
            got, got_err = vals, list(errs)
        else:
            got[part] = vals
            for j, i in enumerate(part.tolist()):
                got_err[i] = errs[j]
    if rows is None:
        return got, got_err
    values[rows] = got
    for j, i in enumerate(rows.tolist()):
        errors[i] = got_err[j]
    return values, errors


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


def parity_forward(spec: Function, values: Sequence[Any]) -> list[list[float]]:
    """PARITY_FORWARD's body: the forward F and discount factor D of one expiry from a strip
    of European call and put prices, by :func:`optiond.market.forwards.parity_fit` with
    every strike weighted equally (a pasted strip has no spreads: each pair gets the spread
    ``table.PARITY_SPREAD_REL`` x the median strike).

    Args:
        spec: the table entry (its argument names label the messages).
        values: ``(strikes, call_mids, put_mids, T, rate)``: three strips of one row or one
            column each and of one length (currency units; a strike with an empty strike,
            call or put cell is left out), T in years (> 0), rate annual continuously
            compounded or None (then D is fitted too).

    Returns:
        ``[[F, D]]``, one row (F in the currency of the strikes).

    Raises:
        _Problem: any bad input (its text becomes the cell's ``#optiond:`` message).
    """
    strikes_arg, calls_arg, puts_arg, t_arg, rate_arg = spec.args
    k, c, p = (_strip(a, v) for a, v in zip(spec.args[:3], values[:3]))
    if not (k.size == c.size == p.size):
        raise _Problem(f"{strikes_arg.name}, {calls_arg.name} and {puts_arg.name} must have the same length, got "
                       f"{k.size}, {c.size} and {p.size}")
    T = _scalar(t_arg, values[3])
    if T <= 0:
        raise _Problem(f"{t_arg.name} must be > 0, got {_show(T)}")
    rate = _scalar(rate_arg, values[4])
    keep = np.isfinite(k) & np.isfinite(c) & np.isfinite(p)
    k, c, p = k[keep], c[keep], p[keep]
    for arg, x, low in ((strikes_arg, k, "> 0"), (calls_arg, c, ">= 0"), (puts_arg, p, ">= 0")):
        bad = np.flatnonzero(x <= 0 if low == "> 0" else x < 0)
        if bad.size:
            raise _Problem(f"{arg.name} must be {low}, got {_show(x[bad[0]])}")
    if np.unique(k).size != k.size:
        raise _Problem(f"{strikes_arg.name} has a strike twice")
    order = np.argsort(k)
    k, c, p = k[order], c[order], p[order]
    spread = np.full(k.size, table.PARITY_SPREAD_REL * float(np.median(k)) if k.size else 1.0)
    try:
        fit = parity_fit(ExpiryPairs(k, c, p, spread, spread), T,
                         None if rate is None else math.exp(-rate * T))
    except ValueError as e:
        raise _Problem(f"{e}" + (f" (or give {rate_arg.name} to fit the forward alone)" if rate is None else "")) \
            from None
    if not (math.isfinite(fit.forward) and fit.forward > 0):
        raise _Problem("no positive forward fits these prices")
    return [[fit.forward, fit.discount]]


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
        if spec.op == "forward":
            return parity_forward(spec, values)
        key = None
        if all(type(v) in _CELL_TYPES for v in values):
            if _env_on("OPTIOND_CACHE"):
                # single cells: the call itself is the key (types included: TRUE is not 1)
                key = ("cells", spec.name, tuple((type(v), v) for v in values))
                hit = _cache.get(key)
                if hit is not None:
                    return hit[0]
            quick = _one_price_cell(spec, values) if spec.op == "price" and spec.method in _QUICK_METHODS else None
            if quick is not None:
                result, complete = quick
                if key is not None and complete:
                    _cache.put(key, (result,), 1)
                return result
            shape, cols, cell_err = _read_cells(spec, values)
        else:
            shape, cols, cell_err = _read_ranges(spec, values)
        result, complete = _compute(spec, shape, cols, cell_err)
        if key is not None and complete and result != error_text(_NO_STDERR):
            _cache.put(key, (result,), 1)
        return result
    except _Problem as p:
        return error_text(str(p))
    except Exception as e:  # never a traceback in a cell
        return error_text(f"{type(e).__name__}: {e}")


_CELL_TYPES = frozenset({float, int, str, bool, type(None)})
_QUICK_METHODS = frozenset({"binomial", "black-scholes"})


def _one_price_cell(spec: Function, values: Sequence[Any]) -> tuple[Any, bool] | None:
    """One cell of a CRR or Black–Scholes price function (``BOPM_PUT``, ``BS_CALL``, ...) whose
    arguments all read cleanly: ``(cell value, complete)`` as :func:`_compute` would give it,
    by the same request (:func:`_request`) without the range machinery; None for anything
    else (a bad argument, N outside the schema or the work limit): the general path then
    answers, with its messages."""
    cols: dict[str, Any] = {}
    for a, v in zip(spec.args, values):
        x = _PARSERS[a.parse](v, a.name)
        if x is _EMPTY:
            if not a.optional:
                return None
            x = _PARSERS[a.parse](a.default, a.name)
        if type(x) is str and x.startswith(ERROR_PREFIX):
            return None
        cols[a.field] = x
    method = _method(spec.method, False)
    N = cols.pop("steps", None)
    if N is not None:
        if not (math.isfinite(N) and N == math.floor(N) and 1 <= N <= MAX_STEPS
                and float(table.bopm_tree_nodes(N, spec.op)) <= table.BOPM_MAX_TREE_NODES):
            return None
        method = _method(spec.method, False, int(N))
    cols.update(spec.fixed)
    try:
        vals, errs = _request(spec, cols, method, None, 1)
    except Exception as e:
        return _failure_text(e), False
    if errs[0] is not None:
        return errs[0], True
    x = float(vals[0, 0])
    return (x if math.isfinite(x) else None), True


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


@_udf
def MLMC_CALL(S, K, T, r, sigma, eps, q=None, seed=None):
    return evaluate("MLMC_CALL", (S, K, T, r, sigma, eps, q, seed))


@_udf
def MLMC_PUT(S, K, T, r, sigma, eps, q=None, seed=None):
    return evaluate("MLMC_PUT", (S, K, T, r, sigma, eps, q, seed))


@_udf
def MLMC_ASIAN_CALL(S, K, T, r, sigma, eps, q=None, seed=None):
    return evaluate("MLMC_ASIAN_CALL", (S, K, T, r, sigma, eps, q, seed))


@_udf
def MLMC_DIGITAL_CALL(S, K, T, r, sigma, eps, q=None, seed=None):
    return evaluate("MLMC_DIGITAL_CALL", (S, K, T, r, sigma, eps, q, seed))


@_udf
def MLMC_STDERR(S, K, T, r, sigma, eps, q=None, seed=None, kind=None, payoff=None):
    return evaluate("MLMC_STDERR", (S, K, T, r, sigma, eps, q, seed, kind, payoff))


@_udf
def HESTON_CALL(S, K, T, r, q, v0, kappa, theta, xi, rho, american=None, scheme=None):
    return evaluate("HESTON_CALL", (S, K, T, r, q, v0, kappa, theta, xi, rho, american, scheme))


@_udf
def HESTON_PUT(S, K, T, r, q, v0, kappa, theta, xi, rho, american=None, scheme=None):
    return evaluate("HESTON_PUT", (S, K, T, r, q, v0, kappa, theta, xi, rho, american, scheme))


@_udf
def PARITY_FORWARD(strikes, call_mids, put_mids, T, rate=None):
    return evaluate("PARITY_FORWARD", (strikes, call_mids, put_mids, T, rate))


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
