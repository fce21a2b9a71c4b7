"""From checked rows to priced values: the worksheet functions' requests and where they are
priced.

* **Requests**: the rows the pre-checks (:mod:`optiond.addin.checks`) let through go in ONE
  request, or one per MLMC seed, ADI scheme, BBSR flag or spectral accuracy setting; the
  request's :class:`~optiond.models.Method` (uniform steps, eps and payoff, ``extrapolate`` and
  ``accuracy`` travel in it); a ``HESTON_*`` call's European rows go in their own request to the
  semi-analytic engine (``method="heston"``), its American rows to ADI, one per scheme; the reply's columns a function shows
  (:func:`_ask` does all of it for one call's rows). A ``BOPM_*`` call's cash-dividend
  schedule, one for all its rows, travels as the (m,) schedule columns.
* **In this process or the daemon** (:func:`_request`): answered from the cache
  (:mod:`optiond.addin.cache`) when it can; a CRR or Black–Scholes request of at most
  ``OPTIOND_LOCAL_NODES`` tree nodes (default :data:`LOCAL_MAX_NODES`; a semi-analytic Heston
  price counts one) is priced here by the
  engine (:class:`optiond.pricer.LocalPricer`), the rest by the daemon client (:func:`_client`
  behind :class:`optiond.pricer.DaemonPricer`, which prices in-process itself when no daemon
  answers unless ``OPTIOND_FALLBACK=0``); a failed request as cell text.
* **One call's cells** (:func:`_compute`): the parsed cells priced and laid out, and the
  short path of one clean CRR or Black–Scholes price cell (:func:`_one_price_cell`)."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from ..daemon.client import DaemonUnavailable, get_client
from ..models import DIVIDEND_FIELDS, MAX_STEPS, InvalidInputError, Method
from ..pricer import DaemonPricer, LocalPricer
from . import table
from .cache import _cache, _env_on, _request_key
from .cells import _row_text, _shape_result, error_text
from .checks import _pre_checks
from .table import GREEK_COLUMNS, Function


def _client() -> Any:
    """The daemon client: :func:`optiond.daemon.client.get_client` (tests replace this)."""
    return get_client()


#: what :class:`DaemonUnavailable` says when no daemon runs at all (no connection file, or none
#: listening at its address); any other reason is a daemon that runs but did not answer
_NOT_RUNNING = ("no connection file", "cannot connect", "not running")


def daemon_down_reason(e: Exception | None) -> str:
    """Why no daemon answered, for a cell: "no optiond daemon is running; ..." where none runs,
    else the client's own reason (a reply that did not come in time, a silent heartbeat), so a
    busy daemon is not reported as a missing one."""
    text = "" if e is None else str(e)
    if not text or any(s in text for s in _NOT_RUNNING):
        return "no optiond daemon is running; start one with: optiond serve"
    return f"the optiond daemon did not answer: {text}"


def _daemon_down_text(spec: Function | None = None, e: Exception | None = None) -> str:
    if spec is not None and spec.method == "surface":  # nothing to fall back on: the surfaces live there
        if e is None or any(s in str(e) for s in _NOT_RUNNING):
            return error_text("surfaces live in the optiond daemon and none is running; start it with: optiond serve")
    return error_text(daemon_down_reason(e))


def _failure_text(e: Exception, spec: Function | None = None) -> str:
    """A failed request (not a failed row) as cell text: for a surface function the daemon's
    answer as it is (an unknown name, a stale handle), or a bad input under its Excel name."""
    if isinstance(e, DaemonUnavailable):
        return _daemon_down_text(spec, e)
    if spec is not None and spec.method == "surface":
        return _row_text(spec, str(e)) if isinstance(e, InvalidInputError) else error_text(str(e))
    return error_text(f"pricing failed: {e}")


@functools.lru_cache(maxsize=256)
def _method(name: str, greeks: bool, steps: int | None = None, setting: Any = None) -> Method:
    """The (cached) method of a request: ``name``, ``greeks``, the one N of the call if any, and
    the call's request-wide setting of :data:`_SETTINGS` if any (``extrapolate`` of a binomial
    function, ``accuracy`` of a spectral one)."""
    kw: dict[str, Any] = {} if steps is None else {"steps": steps}
    if setting is not None:
        kw[_SETTING_OF[name]] = setting
    return Method(name=name, greeks=greeks, **kw)


#: the columns that are settings of a whole request (a range holding several values is priced
#: by one request per value): MLMC seed, ADI scheme, BBSR extrapolate, spectral accuracy
_SETTINGS = ("seed", "scheme", "extrapolate", "accuracy")
#: the setting of each method whose request-wide value :func:`_method` takes
_SETTING_OF = {"binomial": "extrapolate", "spectral": "accuracy"}


def _setting(value: Any) -> Any:
    """A setting cell's value as the Method takes it (a NumPy bool or str as Python's)."""
    return value.item() if isinstance(value, np.generic) else value


def _uniform_steps(steps: np.ndarray) -> int | None:
    """The one valid whole number of steps all rows ask for, else None (then the steps travel
    as a column and the schema checks each row)."""
    if not steps.size:
        return None
    first = steps.flat[0]
    if not (np.isfinite(first) and first == math.floor(first) and 1 <= first <= MAX_STEPS) or not (steps == first).all():
        return None
    return int(first)


#: the split value of a HESTON_* call's European rows: priced by the semi-analytic engine
#: (``method="heston"``), the American ones by ADI with their scheme
HESTON_EUROPEAN = "european"


@functools.lru_cache(maxsize=1)
def _heston_method() -> Method:
    return Method(name="heston", greeks=False)


@functools.lru_cache(maxsize=16)
def _adi_method(scheme: str) -> Method:
    # one grid with exactly these steps, as the function table documents and budgets it
    return Method(name="adi", greeks=False, scheme=scheme, grid=table.HESTON_GRID, time_steps=table.HESTON_TIME_STEPS,
                  richardson=False, steps_per_year=0.0)


def _steps_column(steps: np.ndarray) -> np.ndarray:
    """Whole step counts as int64; anything else stays float for the schema to reject."""
    whole = np.isfinite(steps) & (steps == np.floor(steps)) & (np.abs(steps) < 2.0 ** 62)
    return steps.astype(np.int64) if whole.all() else steps


def _uniform(v: Any) -> Any:
    """An array holding one value in every row as that value (one label travels as one value)."""
    if isinstance(v, np.ndarray) and v.size and (v == v[0]).all():
        return v[0]
    return v


def _requests(spec: Function, cols: dict[str, np.ndarray], n: int) -> Iterator[tuple]:
    """The requests that price n checked rows: ``(rows or None for all, columns, method,
    prices)``. One, unless the rows ask for different values of a setting of the whole request
    (:data:`_SETTINGS`: MLMC seeds, ADI schemes, BBSR or not, spectral accuracies): then one
    per value."""
    req = dict(cols)
    prices = req.pop("price", None)
    steps = req.pop("steps", None)
    split = None
    for f in _SETTINGS:  # a function has at most one of them
        v = req.pop(f, None)
        split = v if split is None else split
    if spec.method == "adi" and split is not None:  # European rows: the semi-analytic engine, whatever the scheme
        split = np.where(np.asarray(req.get("style")) == "european", HESTON_EUROPEAN, split).astype(object)
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
        for f in DIVIDEND_FIELDS:  # one schedule in every row: the engine's (m,) column; else (n, m)
            if f in sub and sub[f].ndim == 2 and _same_rows(sub[f]):
                sub[f] = np.ascontiguousarray(sub[f][0])
        p = prices if rows is None or prices is None else prices[rows]
        st = steps if rows is None or steps is None else steps[rows]
        yield rows, sub, _request_method(spec, sub, st, setting), p


def _same_rows(a: np.ndarray) -> bool:
    """Whether every row of a 2-D array equals the first (NaN equal to NaN)."""
    return a.shape[0] <= 1 or bool(((a == a[:1]) | (np.isnan(a) & np.isnan(a[:1]))).all())


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
        if setting == HESTON_EUROPEAN:
            return _heston_method()
        return _adi_method(str(setting))
    setting = None if setting is None else _setting(setting)
    if spec.op == "iv":
        if steps is None:
            return _method(spec.method, False, None, setting)
        if steps.size and (steps == steps[0]).all():
            return _method(spec.method, False, int(steps[0]), setting)
        return dataclasses.replace(_method(spec.method, False, None, setting), steps=_steps_column(steps))
    if steps is not None:
        one = _uniform_steps(steps)
        if one is not None:  # the usual case: one N for the call, in the (cached) method
            return _method(spec.method, spec.op == "greeks", one, setting)
        req["steps"] = _steps_column(steps)
    return _method(spec.method, spec.op == "greeks", None, setting)


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


_QUICK_METHODS = frozenset({"binomial", "black-scholes"})


def _local_work(spec: Function, method: Method, req: Mapping[str, Any], n: int) -> float:
    """Tree nodes of a request (the closed forms, Black–Scholes and semi-analytic Heston, count
    one a row); inf for what only the daemon prices (MLMC, Heston ADI, per-row steps or methods)."""
    if method.name == "heston":
        return float(n)
    if spec.method not in _QUICK_METHODS or "steps" in req or "method" in req:
        return math.inf
    if spec.method == "black-scholes":
        return float(n)
    return n * float(table.bopm_tree_nodes(method.steps, spec.op))


_LOCAL = LocalPricer()


def _request(spec: Function, req: dict[str, Any], method: Method, prices: Any, n: int) -> tuple[np.ndarray, list]:
    """ONE request (from the cache when it can): ``(values, errors)``, values (n, c) with c
    the reply's columns: the Greeks, (price, std_error) for MLMC, else one."""
    if n == 1:  # one cell: scalars, for the pricers' one-contract path (in-process and in the daemon)
        req = {k: v if k in DIVIDEND_FIELDS else _one(v) for k, v in req.items()}
        prices = None if prices is None else _one(prices)
    use_cache = _env_on("OPTIOND_CACHE")
    key = _request_key("iv" if spec.op == "iv" else "price", method, req, prices) if use_cache else None
    hit = _cache.get(key) if use_cache else None
    if hit is not None:
        return hit
    local = _local_work(spec, method, req, n) <= _local_max_nodes()
    pricer = _LOCAL if local else DaemonPricer(_client(), _env_on("OPTIOND_FALLBACK"))
    if spec.op == "iv":
        vol, status = pricer.implied_vol(prices, req, method)  # the (vol, status text) pair
        vals = np.asarray(vol, dtype=np.float64).reshape(-1, 1)
        errs = [None if s == "ok" else _row_text(spec, s) for s in np.asarray(status).tolist()]
    else:
        res = pricer.price_table(req, method)
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


def _send(spec: Function, cols: dict[str, np.ndarray], n: int) -> tuple[np.ndarray, list]:
    """Price n checked rows in ONE request (one per MLMC seed or ADI scheme when the rows
    differ in those), from the cache when it can: ``(values (n, k), errors)``."""
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
    return got, got_err


def _ask(spec: Function, cols: dict[str, np.ndarray], m: int,
         send: Callable[[Function, dict, int], tuple[np.ndarray, list]] = _send) -> tuple[np.ndarray, list]:
    """Price m parsed rows: ``(values (m, k) float64, errors)`` with errors a list of m cell
    texts (None where the row is fine).

    The rows the pre-checks refuse are not sent; ``send`` answers the rest (:func:`_send`, or
    a surface function's daemon request); raises whatever the client raises."""
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
    got, got_err = send(spec, cols, n)
    if rows is None:
        return got, got_err
    values[rows] = got
    for j, i in enumerate(rows.tolist()):
        errors[i] = got_err[j]
    return values, errors


# ---- one call's cells -------------------------------------------------------------------

def _one_price_cell(spec: Function, cells: Mapping[str, Any]) -> tuple[Any, bool] | None:
    """One cell of a CRR or Black–Scholes price function (``BOPM_PUT``, ``BS_CALL``, ...) whose
    arguments all read cleanly (``cells`` from :func:`optiond.addin.cells._parse_cells`, without
    an error): ``(cell value, complete)`` as :func:`_compute` would give it, by the same
    request (:func:`_request`) without the range machinery; None for anything else (N outside
    the schema or the work limit): the general path then answers, with its messages."""
    cols = dict(cells)
    setting = None
    for f in _SETTINGS:
        setting = cols.pop(f, setting)
    method = _method(spec.method, False, None, setting)
    N = cols.pop("steps", None)
    if N is not None:
        if not (math.isfinite(N) and N == math.floor(N) and 1 <= N <= MAX_STEPS
                and float(table.bopm_tree_nodes(N, spec.op)) <= table.BOPM_MAX_TREE_NODES):
            return None
        method = _method(spec.method, False, int(N), setting)
    cols.update(spec.fixed)
    try:
        vals, errs = _request(spec, cols, method, None, 1)
    except Exception as e:
        return _failure_text(e), False
    if errs[0] is not None:
        return errs[0], True
    x = float(vals[0, 0])
    return (x if math.isfinite(x) else None), True


def _compute(spec: Function, shape: tuple, cols: dict[str, np.ndarray], cell_err: np.ndarray,
             ask: Callable[[Function, dict, int], tuple[np.ndarray, list]] = _ask) -> tuple[Any, bool]:
    """Price the cells without an error and lay the answer out: ``(result, complete)``,
    complete False when the request itself failed (then nothing is cached). ``ask`` answers
    the rows (:func:`_ask`, or a surface function's request)."""
    n = cell_err.shape[0]
    k = len(GREEK_COLUMNS) if spec.op == "greeks" else 1
    out = np.full((n, k), None, dtype=object)
    complete = True
    has_err = cell_err.astype(bool)
    ok = np.flatnonzero(~has_err)
    if ok.size:
        sub = cols if ok.size == n else {f: v[ok] for f, v in cols.items()}
        try:
            vals, errs = ask(spec, sub, ok.size)
        except Exception as e:
            out[ok, :] = _failure_text(e, spec)
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
