"""optiond's Excel worksheet functions (xlwings user-defined functions).

``BOPM_PUT``, ``BOPM_CALL``, ``BS_PUT``, ``BS_CALL``, ``BOPM_IV``, ``BOPM_GREEKS`` (an optional
``extrapolate``, TRUE for the converged tree value, BBSR); the American prices of the spectral
engine (Andersen, Lake & Offengenden 2016) ``AMERICAN_PUT``, ``AMERICAN_CALL`` and their
implied volatility ``AMERICAN_IV`` (an optional ``accuracy`` setting); the
multilevel Monte Carlo prices ``MLMC_CALL``, ``MLMC_PUT``, ``MLMC_ASIAN_CALL``,
``MLMC_DIGITAL_CALL`` and their standard error ``MLMC_STDERR``; the Heston ADI prices
``HESTON_CALL`` and ``HESTON_PUT``; ``PARITY_FORWARD``, the forward and discount factor of a
pasted strip of call and put prices (a put-call parity fit, computed in this process: the
rules below on ranges, requests, the cache and the daemon are those of the pricing
functions); ``SURFACE_FIT``, ``SURFACE_VOL`` and ``SURFACE_PRICE`` on volatility surfaces the
daemon keeps by name and version (:mod:`optiond.addin.surfaces`: ranges broadcast and a bad
cell marks its own cell as below, but they are never cached nor computed in this process);
``OPTIOND_CURVE``, ``OPTIOND_DIVIDENDS``, ``OPTIOND_HESTON``, ``HESTON_FIT`` (a Heston set
fitted to a pasted European chain) and ``OPTIOND_OBJECTS``, which make and list market objects
kept by name and version, whose handles the pricing functions take in place of ``r``, ``q``,
``sigma`` and the Heston parameters (:mod:`optiond.addin.objects`; never cached). Their
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
  Excel error value, an unknown kind, payoff or scheme) are caught here and never sent, and so
  are the values the engine would only reject after working (MLMC ``eps`` <= 0, a ``seed``
  that is not a whole number >= 0, ``sigma`` over the MLMC kernels' 5, the work limits); the
  value checks (> 0, finite, N from 1 to 1e7, the CRR probability in [0, 1], Heston
  ``rho`` in [-1, 1]...) are the schema's (:mod:`optiond.models`), made where the request is
  priced, and come back per row under the argument's Excel name. The **unit guards**
  (:func:`optiond.addin.cells.unit_slips`, for every function's ``r``, ``q``, ``sigma`` and
  ``T`` cells; :func:`~optiond.addin.cells.check_units` for PARITY_FORWARD's ``T`` and
  ``rate`` and the chain fits' ``rate``; OPTIOND_CURVE checks its own rates) refuse what is most likely a slip, saying what was probably meant: |r| or |q|
  above 1 (percent: ``#optiond: r=5 looks like percent: enter 0.05 ...``), ``sigma`` above 5
  (vol points), ``T`` over 50 years (days); ``OPTIOND_UNITS_CHECK=0`` in the environment turns
  them off (xlwings functions take no keyword arguments, and an extra trailing argument on
  every function would shift the wizard's). An implied volatility of a price with no time
  value (within 1e-9 of its value at volatility 0) is an error, never a floored volatility.
  Excel's ``ISERROR``/``IFERROR`` do not see text: ``OPTIOND_ERROR(cell)`` gives an error
  cell's message and ``""`` for any other cell (``=OPTIOND_ERROR(A1)=""`` is the test), since
  xlwings' COM worksheet functions cannot return an Excel error value. A problem of the whole call
  (ranges that do not broadcast) returns one message; a request that fails as a whole (daemon
  down with the fall-back off) puts its message in every cell it was to price, and is not
  cached.
* **Cash dividends** (``BOPM_PUT``, ``BOPM_CALL``, ``BOPM_IV``, ``BOPM_GREEKS``): the optional
  trailing ``div_times`` (ex-dates, years from now) and ``div_amounts`` (cash, in the currency
  of S) are each a row or column of up to 8 cells, blank cells padding; they do NOT broadcast:
  they are ONE schedule for every option of the call, sent as the engine's (m,) schedule
  columns (:data:`optiond.models.DIVIDEND_FIELDS`, the spot model on the CRR tree), in the
  request and so in its cache key. A schedule that cannot be read (text in a cell, only one
  of the two, more than 8) marks every cell of the call with ``#optiond: div_times ...`` or
  ``#optiond: div_amounts ...``; the engine's checks (:func:`optiond.models.validate_dividends`:
  amounts >= 0, ascending ex-dates within each option's T, a sum below its S) mark only the
  rows they concern. Without the two arguments the request is exactly the one without
  dividends.
* **Work limits.** One call may ask for a bounded amount of work (the constants and estimates
  in :mod:`optiond.addin.table`: tree nodes for ``BOPM_*``, an eps floor and estimated path
  steps for ``MLMC_*``, grid-cell updates for ``HESTON_*``, the spectral engine's work for
  ``AMERICAN_*``), so a cell cannot freeze Excel. A
  row over a limit on its own gets a text in its own cell; rows over it only together get the
  call's text in each of their cells; both point to the panel and ``optiond price``.
* **One request per range**, with four exceptions: ``seed`` (MLMC), ``scheme`` (ADI),
  ``extrapolate`` (BOPM_*) and ``accuracy`` (AMERICAN_*) are settings of a whole request, so a
  range holding several of their values is priced by one request per distinct value (each
  in the request's method, and so in its cache key).
* **MLMC.** The estimate is a deterministic function of the inputs and ``seed`` (default 0),
  so a recalculation gives the same number. ``MLMC_STDERR`` with the same arguments (and the
  ``kind`` and ``payoff`` of the price) is the standard error of that same run: the two share
  one cached request, so the pair costs one run.
* **Daemon first, except where a round trip costs more than the work.** Requests go through
  :func:`optiond.daemon.client.get_client`; when no daemon answers, the client prices
  in-process (set ``OPTIOND_FALLBACK=0`` to get an error message instead). A CRR or
  Black–Scholes request of at most ``OPTIOND_LOCAL_NODES`` tree nodes in all (default
  :data:`LOCAL_MAX_NODES` = 2e5, less work than a loopback round trip to the daemon costs:
  BENCHMARKS.md, "The daemon") is priced in this process by the same engine, with the same bits, as
  the daemon would (a single ``=BOPM_PUT`` with N up to ~630, a range of a few small trees);
  larger CRR work, MLMC and Heston go to the daemon (its GPU, MPI pool and shared cache).
  ``OPTIOND_LOCAL_NODES=0`` sends everything to the daemon.
* **Cache.** Identical requests (the same canonical columns and method) are answered from a
  bounded in-memory LRU cache. :func:`clear_cache` empties it (forcing the next
  recalculation to price again); ``OPTIOND_CACHE=0`` in the environment turns it off.
  :func:`cache_info` reports hits, misses and size.

:func:`register_formulas` registers the functions with the ``formulas`` package, which
recalculates ``.xlsx`` workbooks without Excel.

Where the code is: this module holds the worksheet functions, :func:`evaluate` (the body of
every one), ``PARITY_FORWARD``'s fit and the ``formulas`` registration;
:mod:`optiond.addin.cells` reads the cells (each cell of a call parsed once), words the
messages and lays out the result; :mod:`optiond.addin.checks` makes the per-row checks and the
work limits; :mod:`optiond.addin.pricing` builds the requests and prices them in this process
or through the daemon; :mod:`optiond.addin.cache` is the cache. :func:`error_text`,
:func:`clear_cache`, :func:`cache_info`, :data:`LOCAL_MAX_NODES` and the limits' constants are
importable from here too.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from typing import Any, Callable, Sequence

import numpy as np
import xlwings as xw

from .. import greek_units
from ..market.forwards import ExpiryPairs, parity_fit
from . import dates, objects, surfaces, table
from .cache import _cache, _env_on
from .cells import (_cell_columns, _parse_cells, _Problem, _read_ranges, _scalar, _show, _single, _strip, check_units,
                    error_text, units_check_on)
from .pricing import _NO_STDERR, _QUICK_METHODS, _compute, _one_price_cell
from .table import Function

# importable from here too (the add-in's users and its tests read them from this module)
from .cache import CACHE_MAX_ENTRIES, CACHE_MAX_ROWS, _Cache, cache_info, clear_cache  # noqa: F401
from .cells import ERROR_PREFIX, EXCEL_ERRORS, MAX_CELLS, UNITS_CHECK_ENV, _read_cells  # noqa: F401
from .pricing import LOCAL_MAX_NODES  # noqa: F401


def parity_forward(spec: Function, values: Sequence[Any]) -> list[list[float]]:
    """PARITY_FORWARD's body: the forward F and discount factor D of one expiry from a strip
    of European call and put prices, by :func:`optiond.market.forwards.parity_fit` with
    every strike weighted equally (a pasted strip has no spreads: each pair gets the spread
    ``table.PARITY_SPREAD_REL`` x the median strike).

    Args:
        spec: the table entry (its argument names label the messages).
        values: ``(strikes, call_mids, put_mids, T, rate, valuation)``: three strips of one row
            or one column each and of one length (currency units; a strike with an empty
            strike, call or put cell is left out), T in years (> 0) or the expiry date
            (:mod:`optiond.addin.dates`, from ``valuation``), rate annual continuously
            compounded or None (then D is fitted too).

    Returns:
        ``[[F, D]]``, one row (F in the currency of the strikes).

    Raises:
        _Problem: any bad input (its text becomes the cell's ``#optiond:`` message).
    """
    strikes_arg, calls_arg, puts_arg, t_arg, rate_arg, valuation_arg = spec.args
    k, c, p = (_strip(a, v) for a, v in zip(spec.args[:3], values[:3]))
    if not (k.size == c.size == p.size):
        raise _Problem(f"{strikes_arg.name}, {calls_arg.name} and {puts_arg.name} must have the same length, got "
                       f"{k.size}, {c.size} and {p.size}")
    T = _scalar(t_arg, values[3])
    if dates.is_date(T):
        valuation = _single(valuation_arg, values[5])
        T, problem = dates.years(T, math.nan if valuation is None else valuation)
        if problem:
            raise _Problem(problem)
    if T <= 0:
        raise _Problem(f"{t_arg.name} must be > 0, got {_show(T)}")
    rate = _scalar(rate_arg, values[4])
    check_units("expiry", t_arg.name, float(T))
    check_units("rate", rate_arg.name, rate)
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


def error_message(cell: Any) -> Any:
    """OPTIOND_ERROR's body: the message of each cell of ``cell`` (a value, or a 2-D list as
    xlwings reads a range): the text after ``#optiond: `` of an optiond error
    (:func:`error_text`), an Excel error value's own text (``#N/A``), or ``""`` for a cell
    that holds no error (a number, a handle, an empty cell). A 1x1 range gives a single
    value, a larger one a 2-D list of its shape."""
    def one(v: Any) -> str:
        if isinstance(v, str):
            s = v.strip()
            if s.startswith(ERROR_PREFIX.strip()):
                return s[len(ERROR_PREFIX.strip()):].strip()
            if s.upper() in EXCEL_ERRORS:
                return s.upper()
        return ""

    if isinstance(cell, (list, tuple, np.ndarray)):
        rows = [list(r) if isinstance(r, (list, tuple, np.ndarray)) else [r] for r in cell]
        out = [[one(v) for v in r] for r in rows]
        return out[0][0] if len(out) == 1 and len(out[0]) == 1 else out
    return one(cell)


def evaluate(spec: Function | str, values: Sequence[Any]) -> Any:
    """Evaluate worksheet function ``spec`` on its argument values (in the table's order).

    This is the body of every worksheet function; see the module docstring for the rules.
    Trailing optional arguments may be left out of ``values`` (they read as empty cells).

    Returns:
        a float (None for no value, or an error text) when every argument is a single cell
        (a one-row list for ``BOPM_GREEKS``); otherwise a list of rows (a 2-D list) of those.
    """
    spec = table.BY_NAME[spec] if isinstance(spec, str) else spec
    try:
        if len(values) < len(spec.args) and all(a.optional for a in spec.args[len(values):]):
            values = tuple(values) + (None,) * (len(spec.args) - len(values))  # omitted trailing optionals
        if len(values) != len(spec.args):
            raise _Problem(f"{spec.name} takes {len(spec.args)} arguments, got {len(values)}")
        if spec.op == "forward":
            return parity_forward(spec, values)
        if spec.method == "surface":  # never cached, never in this process: surfaces.py
            return surfaces.evaluate(spec, values)
        if spec.method == "objects":  # making, fitting and listing market objects: objects.py (never cached)
            return objects.evaluate(spec, values)
        if spec.op == "message":  # OPTIOND_ERROR: the message of an error cell
            return error_message(values[0])
        if spec.op == "greeks":  # the Greeks in raw units, then in the call's units and with its header
            return _greeks(spec, values)
        return _evaluate(spec, values)
    except _Problem as p:
        return error_text(str(p))
    except Exception as e:  # never a traceback in a cell
        return error_text(f"{type(e).__name__}: {e}")


def _greeks(spec: Function, values: Sequence[Any]) -> Any:
    """A Greeks function (``BOPM_GREEKS``, ``BS_GREEKS``): the rows of raw Greeks
    (:func:`_evaluate` without the trailing ``units`` and ``header``), divided into the call's
    units (:mod:`optiond.greek_units`) and under a header row of labels with units when
    ``header`` is TRUE."""
    units_arg, header_arg = spec.args[-2:]
    units, header = _single(units_arg, values[-2]), _single(header_arg, values[-1])
    raw = _evaluate(dataclasses.replace(spec, args=spec.args[:-2]), values[:-2])
    if isinstance(raw, str):  # a problem of the whole call
        return raw
    div = greek_units.divisors(units, table.GREEK_COLUMNS).tolist()
    rows = [[x / d if type(x) is float else x for x, d in zip(row, div)] for row in raw]
    if header:
        rows.insert(0, [greek_units.LABELS[units][g] for g in table.GREEK_COLUMNS])
    return rows


def _evaluate(spec: Function, values: Sequence[Any]) -> Any:
    """:func:`evaluate`'s body for the functions priced by a request (values complete)."""
    try:
        bound = objects.bind(spec, values)  # handles in r, q, sigma, v0: looked up once per call
        if bound is not None:
            values = bound.values
        key = None
        if all(type(v) in _CELL_TYPES or isinstance(v, _dt.date) for v in values):
            if _env_on("OPTIOND_CACHE"):
                # single cells: the call itself is the key (types included: TRUE is not 1), the
                # minute when T is a date valued now, and the versions of the objects its handles name
                key = ("cells", spec.name, tuple((type(v), v) for v in values), _now_stamp(spec, values),
                       bound and bound.key, units_check_on())
                hit = _cache.get(key)
                if hit is not None:
                    return hit[0]
            cells, err = _parse_cells(spec, values)  # each cell parsed once, for either path
            if bound is not None:
                err = bound.fill_cells(spec, cells, err)
            if err is None and spec.op == "price" and spec.method in _QUICK_METHODS:
                quick = _one_price_cell(spec, cells)
                if quick is not None:
                    result, complete = quick
                    if key is not None and complete:
                        _cache.put(key, (result,), 1)
                    return result
            shape, cols, cell_err = _cell_columns(spec, cells, err)
        else:
            shape, cols, cell_err = _read_ranges(spec, values)
            if bound is not None:
                bound.fill_columns(spec, cols, cell_err)
        result, complete = _compute(spec, shape, cols, cell_err)
        if key is not None and complete and result != error_text(_NO_STDERR):
            _cache.put(key, (result,), 1)
        return result
    except _Problem as p:
        return error_text(str(p))
    except Exception as e:  # never a traceback in a cell
        return error_text(f"{type(e).__name__}: {e}")


_CELL_TYPES = frozenset({float, int, str, bool, type(None)})


def _now_stamp(spec: Function, values: Sequence[Any]) -> float | None:
    """The current minute when the call's T is a date valued now (its answer changes with the
    clock), else None: part of a single-cell call's cache key."""
    f = [a.field for a in spec.args]
    if "valuation" not in f:
        return None
    T = dates.expiry_cell(values[f.index("expiry")])
    v = dates.valuation_cell(values[f.index("valuation")])
    return dates.cache_stamp(dates.is_date(T), math.nan if v is None else v)


# ---- the worksheet functions ---------------------------------------------------------------
# Each takes exactly the table's arguments (optional ones default to None: the table holds the
# defaults); table.decorate checks that, sets the docstring to the table's description and
# applies @xw.arg / @xw.func.

def _udf(impl: Callable) -> Callable:
    return table.decorate(table.BY_NAME[impl.__name__], impl, func=xw.func, arg=xw.arg)


@_udf
def BOPM_PUT(S, K, T, r, sigma, N, q=None, american=None, div_times=None, div_amounts=None, extrapolate=None,
             valuation=None):
    return evaluate("BOPM_PUT", (S, K, T, r, sigma, N, q, american, div_times, div_amounts, extrapolate, valuation))


@_udf
def BOPM_CALL(S, K, T, r, sigma, N, q=None, american=None, div_times=None, div_amounts=None, extrapolate=None,
              valuation=None):
    return evaluate("BOPM_CALL", (S, K, T, r, sigma, N, q, american, div_times, div_amounts, extrapolate, valuation))


@_udf
def BS_PUT(S, K, T, r, sigma, q=None, valuation=None):
    return evaluate("BS_PUT", (S, K, T, r, sigma, q, valuation))


@_udf
def BS_CALL(S, K, T, r, sigma, q=None, valuation=None):
    return evaluate("BS_CALL", (S, K, T, r, sigma, q, valuation))


@_udf
def BS_IV(price, S, K, T, r, q=None, kind=None, valuation=None):
    return evaluate("BS_IV", (price, S, K, T, r, q, kind, valuation))


@_udf
def BS_GREEKS(S, K, T, r, sigma, q=None, kind=None, valuation=None, units=None, header=None):
    return evaluate("BS_GREEKS", (S, K, T, r, sigma, q, kind, valuation, units, header))


@_udf
def BOPM_IV(price, S, K, T, r, q=None, kind=None, N=None, american=None, div_times=None, div_amounts=None,
            extrapolate=None, valuation=None):
    return evaluate("BOPM_IV", (price, S, K, T, r, q, kind, N, american, div_times, div_amounts, extrapolate,
                                valuation))


@_udf
def BOPM_GREEKS(S, K, T, r, sigma, N, q=None, kind=None, american=None, div_times=None, div_amounts=None,
                extrapolate=None, valuation=None, units=None, header=None):
    return evaluate("BOPM_GREEKS", (S, K, T, r, sigma, N, q, kind, american, div_times, div_amounts, extrapolate,
                                    valuation, units, header))


@_udf
def AMERICAN_PUT(S, K, T, r, sigma, q=None, accuracy=None, valuation=None):
    return evaluate("AMERICAN_PUT", (S, K, T, r, sigma, q, accuracy, valuation))


@_udf
def AMERICAN_CALL(S, K, T, r, sigma, q=None, accuracy=None, valuation=None):
    return evaluate("AMERICAN_CALL", (S, K, T, r, sigma, q, accuracy, valuation))


@_udf
def AMERICAN_IV(price, S, K, T, r, q=None, kind=None, accuracy=None, valuation=None):
    return evaluate("AMERICAN_IV", (price, S, K, T, r, q, kind, accuracy, valuation))


@_udf
def MLMC_CALL(S, K, T, r, sigma, eps, q=None, seed=None, valuation=None):
    return evaluate("MLMC_CALL", (S, K, T, r, sigma, eps, q, seed, valuation))


@_udf
def MLMC_PUT(S, K, T, r, sigma, eps, q=None, seed=None, valuation=None):
    return evaluate("MLMC_PUT", (S, K, T, r, sigma, eps, q, seed, valuation))


@_udf
def MLMC_ASIAN_CALL(S, K, T, r, sigma, eps, q=None, seed=None, valuation=None):
    return evaluate("MLMC_ASIAN_CALL", (S, K, T, r, sigma, eps, q, seed, valuation))


@_udf
def MLMC_DIGITAL_CALL(S, K, T, r, sigma, eps, q=None, seed=None, valuation=None):
    return evaluate("MLMC_DIGITAL_CALL", (S, K, T, r, sigma, eps, q, seed, valuation))


@_udf
def MLMC_STDERR(S, K, T, r, sigma, eps, q=None, seed=None, kind=None, payoff=None, valuation=None):
    return evaluate("MLMC_STDERR", (S, K, T, r, sigma, eps, q, seed, kind, payoff, valuation))


@_udf
def HESTON_CALL(S, K, T, r, q, v0, kappa=None, theta=None, xi=None, rho=None, american=None, scheme=None,
                valuation=None):
    return evaluate("HESTON_CALL", (S, K, T, r, q, v0, kappa, theta, xi, rho, american, scheme, valuation))


@_udf
def HESTON_PUT(S, K, T, r, q, v0, kappa=None, theta=None, xi=None, rho=None, american=None, scheme=None,
                valuation=None):
    return evaluate("HESTON_PUT", (S, K, T, r, q, v0, kappa, theta, xi, rho, american, scheme, valuation))


@_udf
def PARITY_FORWARD(strikes, call_mids, put_mids, T, rate=None, valuation=None):
    return evaluate("PARITY_FORWARD", (strikes, call_mids, put_mids, T, rate, valuation))


@_udf
def SURFACE_FIT(name, chain_range, quote_time=None, rate=None, settlement=None):
    return evaluate("SURFACE_FIT", (name, chain_range, quote_time, rate, settlement))


@_udf
def SURFACE_VOL(name, K, T, valuation=None):
    return evaluate("SURFACE_VOL", (name, K, T, valuation))


@_udf
def SURFACE_PRICE(name, K, T, kind, american=None, valuation=None):
    return evaluate("SURFACE_PRICE", (name, K, T, kind, american, valuation))


@_udf
def OPTIOND_CURVE(name, days_or_dates, rates):
    return evaluate("OPTIOND_CURVE", (name, days_or_dates, rates))


@_udf
def OPTIOND_DIVIDENDS(name, ex_dates, amounts):
    return evaluate("OPTIOND_DIVIDENDS", (name, ex_dates, amounts))


@_udf
def OPTIOND_HESTON(name, v0, kappa, theta, xi, rho):
    return evaluate("OPTIOND_HESTON", (name, v0, kappa, theta, xi, rho))


@_udf
def HESTON_FIT(name, chain_range, quote_time=None, rate=None, settlement=None, feller=None):
    return evaluate("HESTON_FIT", (name, chain_range, quote_time, rate, settlement, feller))


@_udf
def OPTIOND_ERROR(cell):
    return evaluate("OPTIOND_ERROR", (cell,))


@_udf
def OPTIOND_OBJECTS():
    return evaluate("OPTIOND_OBJECTS", ())


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
