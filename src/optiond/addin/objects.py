"""Named market objects in the worksheet functions: making them (``OPTIOND_CURVE``,
``OPTIOND_DIVIDENDS``, ``OPTIOND_HESTON``), fitting a Heston set to a pasted chain
(``HESTON_FIT``), listing them (``OPTIOND_OBJECTS``), and reading a handle where a pricing
function takes a number: the one place the add-in resolves handles.

**Making.** ``OPTIOND_CURVE(name, days_or_dates, rates)`` and the others check their cells
here (a bad one: ``#optiond: rates: ...`` naming the argument), then keep the object in the
daemon (:meth:`optiond.daemon.client.Client.put_object`), shared by every workbook on the
machine and kept across daemon restarts (in the user's data directory); the cell shows its
handle, ``USD#0003``. Making it again with other values bumps the version, so the cells that
refer to the handle's cell see new text and recalculate; with the same values the handle
stays (a recalculation of the sheet does not bump every object). Without a daemon the object
is kept in this process (an :class:`optiond.daemon.objects.ObjectStore` of its own, the
daemon's class) and its handle says so: ``USD#0001@local``. Local objects live as long as
this process (Excel): a restarted Excel rebuilds them by recalculating the cells that make
them; they are never sent to a daemon.

**Fitting.** ``HESTON_FIT(name, chain_range, [quote_time], [rate], [settlement], [feller])``
reads the pasted chain as ``SURFACE_FIT`` does and sends it in one ``heston_fit`` request
(:mod:`optiond.daemon.heston_op`): the chain job, the European Heston fit
(:func:`optiond.heston_fit.fit_heston`, default residual and weights) and a ``heston`` object
holding the parameters and the fit's quality (its RMS error in vol points and SSE, shown by
``OPTIOND_OBJECTS``); the cell shows the handle. Without a daemon the same request runs in this
process on the local store (``SPX-H#0001@local``). A chain with American contracts is refused
in the cell, before any work (their early-exercise premium is not in the European model; the
American fit takes minutes: ``optiond heston-fit --american``). The cell is never answered from
the add-in's cache: a refit bumps the version unless it finds the same parameters.

**Reading.** Where a pricing function takes (cell by cell, :data:`HANDLE_KINDS`):

* ``r``: a ``curve`` handle: each option's r is the curve's zero rate at its T,
  continuously compounded (:meth:`optiond.market.curve.ZeroCurve.zero_rate`), so the price is
  the flat-rate price at that rate;
* ``q`` of the ``BOPM_*`` and ``AMERICAN_*`` functions: a ``dividends`` handle: each option
  gets the schedule's cash dividends with an ex-date from now to its T (the spot model on the
  CRR tree; a date counts from now, :func:`optiond.dividends.ex_date_years`), with no yield;
  not with ``div_times``/``div_amounts`` too. Other functions (the closed form, MLMC, Heston)
  say that the schedule needs the tree;
* ``sigma``: a ``surface`` handle: each option's volatility is the surface's at its K and T
  (:func:`optiond.surface.points.vols`; a T outside the surface's expiries is that cell's
  error);
* ``v0`` of ``HESTON_*``: a ``heston`` handle, with ``kappa``, ``theta``, ``xi`` and ``rho``
  left out.

A handle is one cell (it applies to every option of a range call); a bare name reads the live
version. The handle must be the live version: an older one shows ``#optiond: r: stale handle
USD#0001: a later version replaced it; the live one is USD#0002``, an unknown name says which
names exist. The add-in keeps what it read from the daemon for :data:`REFRESH_S` seconds (one
round trip per name then, so 10,000 cells on one handle cost one), except after it makes or
drops an object itself, which it sees at once; a handle newer than what it read is asked for
at once. The cache of answers is keyed by the handle's version (and creation time), so a bump
recalculates.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import re
import threading
import time
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from ..daemon import heston_op, object_kinds
from ..daemon.client import DaemonError, DaemonUnavailable
from ..daemon.objects import HANDLE_PATTERN, NAME_PATTERN, ObjectError, ObjectStore, check_name, parse_ref
from ..models import DIVIDEND_FIELDS, InvalidInputError
from . import pricing
from .cache import _env_on
from .cells import (_EXCEL_EPOCH, ERROR_PREFIX, EXCEL_ERRORS, _chain_fit, _grid, _Problem, _row_text, _show, _single,
                    error_text)
from .table import Function

#: the marker a handle of this process's own store ends with
LOCAL_MARK = "@local"
#: seconds the add-in trusts what it read from the daemon about a name (see the module docstring)
REFRESH_S = 1.0
#: the fields a handle may stand in for, and the kinds each takes
HANDLE_KINDS = {"rate": "curve", "dividend_yield": "dividends", "volatility": "surface", "v0": "heston"}
#: each kind in a message
KIND_WORDS = {"curve": "curve", "dividends": "cash-dividend schedule", "heston": "Heston set", "surface": "surface"}
#: the methods whose ``q`` takes a dividend schedule (the engine's cash-dividend methods)
DIVIDEND_METHODS = ("binomial", "spectral")
#: a number at least this large, in an ex-date or tenor cell, is an Excel date serial
#: (10,000 is 1927-05-18): what a date cell is when its format is lost
DATE_SERIAL_MIN = 10_000.0
#: the columns of OPTIOND_OBJECTS
LISTING_COLUMNS = ("handle", "kind", "summary", "created")
#: the placeholder each field takes while the cells are read (then replaced per row)
_PLACEHOLDER = {"rate": 0.0, "dividend_yield": 0.0, "volatility": 0.2}
#: decoded objects of the daemon by (handle, created), at most this many
_PAYLOADS_MAX = 256

_local = ObjectStore()
_lock = threading.Lock()
#: name -> what the daemon said of it: (content without document, payload, monotonic time)
_seen: dict[str, tuple[dict, Any, float]] = {}
_payloads: OrderedDict[tuple[str, float], Any] = OrderedDict()
#: ref text -> (stamp, Resolved): a look-up remembered while its stamp holds (the local store and
#: its generation, or the monotonic time until which the daemon's answer is trusted)
_memo: dict[str, tuple[Any, "Resolved"]] = {}
_MEMO_MAX = 4096


def local_store() -> ObjectStore:
    """This process's own store (the objects made while no daemon answered)."""
    return _local


def forget() -> None:
    """Forget what was read from the daemon and every local object (tests; a new session)."""
    global _local
    with _lock:
        _seen.clear()
        _payloads.clear()
        _memo.clear()
        _local = ObjectStore()


# ---- looking objects up ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Resolved:
    """A live object: its ``handle`` as a cell shows it (``@local`` for this process's),
    ``kind``, the object itself and ``key`` (what names this very object, for cache keys)."""

    handle: str
    kind: str
    payload: Any
    key: tuple


def _is_ref(text: str) -> bool:
    """Whether a text cell reads as a name or a handle (not a number, not an error)."""
    s = text.strip()
    if s.endswith(LOCAL_MARK):
        s = s[: -len(LOCAL_MARK)]
    if not s or not (HANDLE_PATTERN.fullmatch(s) or NAME_PATTERN.fullmatch(s)):
        return False
    try:
        float(s)
    except ValueError:
        return True
    return False


def _remember(content: dict, payload: Any) -> None:
    with _lock:
        _memo.clear()
        _seen[content["name"]] = (content, payload, time.monotonic())
        _payloads[(content["handle"], content["created_s"])] = payload
        while len(_payloads) > _PAYLOADS_MAX:
            _payloads.popitem(last=False)


def _from_daemon(name: str, version: int | None) -> Resolved:
    """The live object ``name`` in the daemon (fresh within :data:`REFRESH_S`).

    Raises:
        DaemonUnavailable, DaemonError (UnknownObject...), ObjectError (StaleHandle).
    """
    seen = _seen.get(name)
    if seen is None or time.monotonic() - seen[2] > REFRESH_S or (version is not None and version > seen[0]["version"]):
        known = None if seen is None else (seen[0]["handle"], seen[0]["created_s"])
        content = pricing._client().get_object(name, known=known)
        doc = content.pop("document", None)
        key = (content["handle"], content["created_s"])
        payload = _payloads.get(key) if doc is None else None
        if payload is None:
            if doc is None:  # we no longer hold it: ask again, whole
                content = pricing._client().get_object(name)
                doc = content.pop("document")
            payload = object_kinds.build(content["kind"], doc)
        _remember(content, payload)
        seen = _seen[name]
    content, payload = seen[0], seen[1]
    live = content["version"]
    if version is not None and version != live:
        why = ("a later version replaced it" if version < live
               else "the daemon never made it (it may have restarted since)")
        raise ObjectError(f"stale handle {name}#{version:04d}: {why}; the live one is {content['handle']}")
    return Resolved(content["handle"], content["kind"], payload, (content["handle"], content["created_s"]))


def _from_local(ref: str) -> Resolved:
    try:
        e = _local.get(ref)
    except ObjectError as err:
        raise type(err)(str(err).replace("the daemon never made it (it may have restarted since)",
                                         "this Excel never made it (it may have restarted since)")) from None
    return Resolved(e.handle + LOCAL_MARK, e.kind, e.payload, (e.handle + LOCAL_MARK, e.created))


def lookup(ref: str) -> Resolved:
    """The live object a name or handle names: a handle ending in ``@local`` in this process's
    store; any other in the daemon, and a bare name there first, then here. Remembered while
    nothing changed (the local store's generation; the daemon's answer for :data:`REFRESH_S`).

    Raises:
        _Problem: unknown, stale, or a daemon handle while no daemon answers (the text says
            which and what to do).
    """
    hit = _memo.get(ref)
    if hit is not None:
        store, generation, until = hit[0]
        if store is _local and generation == _local.generation and time.monotonic() < until:
            return hit[1]
    local, generation = _local, _local.generation
    res = _lookup(ref.strip())
    if ref.strip().endswith(LOCAL_MARK):
        until = math.inf  # the local store alone answers: valid while it does not change
    elif res.key[0].endswith(LOCAL_MARK):
        until = time.monotonic() + REFRESH_S  # a bare name no daemon had: ask the daemon again later
    else:
        seen = _seen.get(res.handle.partition("#")[0])
        until = -math.inf if seen is None else seen[2] + REFRESH_S
    if len(_memo) >= _MEMO_MAX:
        _memo.clear()
    _memo[ref] = ((local, generation, until), res)
    return res


def _lookup(ref: str) -> Resolved:
    try:
        if ref.endswith(LOCAL_MARK):
            try:
                return _from_local(ref[: -len(LOCAL_MARK)])
            except ObjectError as e:
                raise _Problem(str(e).replace("in the daemon", "in this Excel").replace(
                    "; it may have restarted since: make it again", "; recalculate the cell that makes it")) from None
        name, version = parse_ref(ref)
        try:
            return _from_daemon(name, version)
        except DaemonUnavailable as e:
            if not _env_on("OPTIOND_FALLBACK"):
                raise _Problem(pricing.daemon_down_reason(e)) from None
            if version is not None:
                raise _Problem(f"{ref} is kept by the optiond daemon, which is not running: start it (optiond serve) "
                               "or recalculate the cell that makes it (this Excel then keeps it, @local)") from None
            try:
                return _from_local(name)
            except ObjectError as e:
                raise _Problem(str(e).replace("in the daemon", "in this Excel (no daemon is running)")) from None
        except DaemonError as e:
            if version is None and getattr(e, "ename", "") == "UnknownObject":
                try:
                    return _from_local(name)
                except ObjectError:
                    pass
            raise _Problem(str(e)) from None
        except ObjectError as e:
            raise _Problem(str(e)) from None
    except InvalidInputError as e:
        raise _Problem(f"{ref!r} is neither a name nor a handle NAME#0003: {e.reason}") from None


# ---- handles in the pricing functions ---------------------------------------------------------

@dataclasses.dataclass
class Bound:
    """The handles of one call: ``values`` with each handle cell replaced by a number the
    cells parse (the Heston set's own numbers, else a placeholder that :meth:`fill_cells` or
    :meth:`fill_columns` replaces per row), ``key`` naming the objects' versions (for the cache)."""

    values: tuple
    key: tuple
    fills: list  # (arg, Resolved), for the rate, dividend_yield and volatility arguments

    def fill_cells(self, spec: Function, cells: dict, err: str | None) -> str | None:
        """Put each handle's value into one call's single cells (:func:`optiond.addin.cells._parse_cells`'
        result); returns the cell's error (the first, as before, else a handle's)."""
        T = np.array([cells.get("expiry", math.nan)], dtype=np.float64)
        for arg, res in self.fills:
            if arg.field == "rate":
                cells["rate"] = res.payload.zero_rate_one(T[0])
            elif arg.field == "dividend_yield":
                rows = res.payload.rows(T) if np.isfinite(T[0]) else None
                if rows is not None:
                    cells[DIVIDEND_FIELDS[0]], cells[DIVIDEND_FIELDS[1]] = rows[0][0], rows[1][0]
            elif arg.field == "volatility":
                vol, text = self._vols(spec, res, np.array([cells.get("strike", math.nan)]), T)
                cells["volatility"] = float(vol[0])
                err = err or text[0]
        return err

    def fill_columns(self, spec: Function, cols: dict, cell_err: np.ndarray) -> None:
        """Put each handle's values into one call's columns (:func:`optiond.addin.cells._read_ranges`'
        result), row by row; a row the object cannot answer gets its error."""
        T = cols["expiry"]
        for arg, res in self.fills:
            if arg.field == "rate":
                cols["rate"] = np.asarray(res.payload.zero_rate(T), dtype=np.float64)
            elif arg.field == "dividend_yield":
                rows = res.payload.rows(np.where(np.isfinite(T), T, -1.0))
                if rows is not None:
                    cols[DIVIDEND_FIELDS[0]], cols[DIVIDEND_FIELDS[1]] = rows
            elif arg.field == "volatility":
                vol, text = self._vols(spec, res, cols["strike"], T)
                cols["volatility"] = vol
                for i, t in enumerate(text):
                    if t is not None and cell_err[i] is None:
                        cell_err[i] = t

    @staticmethod
    def _vols(spec: Function, res: Resolved, K: np.ndarray, T: np.ndarray) -> tuple[np.ndarray, list]:
        from ..surface import points

        K, T = np.broadcast_arrays(np.asarray(K, dtype=np.float64), np.asarray(T, dtype=np.float64))
        fine = np.isfinite(K) & np.isfinite(T)  # a bad K or T already has its own error
        vol = np.full(K.shape, 0.2)
        text: list = [None] * K.size
        if fine.any():
            iv = points.vols(res.payload, K[fine], T[fine])
            rows = np.flatnonzero(fine)
            vol[rows] = np.where(np.asarray(iv.status) == "ok", iv.vol, 0.2)
            for j, (s, e) in enumerate(zip(np.asarray(iv.status).tolist(), np.asarray(iv.error).tolist())):
                if s != "ok":
                    name = next(a.name for a in spec.args if a.field == "volatility")
                    text[int(rows[j])] = error_text(f"{name} ({res.handle}): "
                                                    f"{_row_text(spec, e)[len(ERROR_PREFIX):]}")
        return vol, text


_CANDIDATES: dict[str, tuple] = {}


def _candidates(spec: Function) -> tuple:
    """The arguments of ``spec`` that may hold a handle: ``(index, arg, kind)``."""
    got = _CANDIDATES.get(spec.name)
    if got is None or got[0] is not spec:
        got = _CANDIDATES[spec.name] = (spec, () if spec.method in ("parity", "surface", "objects") else tuple(
            (i, a, HANDLE_KINDS[a.field]) for i, a in enumerate(spec.args) if a.field in HANDLE_KINDS
            and a.parse == "number" and (HANDLE_KINDS[a.field] != "heston" or spec.method == "adi")))
    return got[1]


def bind(spec: Function, values: Sequence[Any]) -> Bound | None:
    """The handles among one call's arguments (see the module docstring), looked up: None
    when there is none (the call is as before).

    Raises:
        _Problem: a handle that does not resolve, of another kind, in a range, in ``q`` of a
            function without cash dividends, beside ``div_times``/``div_amounts``, or with
            ``kappa``...``rho`` given beside a Heston handle.
    """
    found = []
    for i, a, kind in _candidates(spec):
        v = values[i]
        if type(v) is not str:
            v = _one_cell(v)
        if type(v) is str and v in _memo:  # a handle seen before: no more checks of its text
            found.append((i, a, kind, v))
        elif isinstance(v, str):
            s = v.strip()
            if s.startswith(ERROR_PREFIX.strip()):
                raise _Problem(f"{a.name} is an error: {s[len(ERROR_PREFIX):].strip()}")
            if s.upper() not in EXCEL_ERRORS and _is_ref(s):
                found.append((i, a, kind, s))
        elif isinstance(v, (list, tuple, np.ndarray)) and _range_has_handle(v):
            raise _Problem(f"{a.name}: a handle must be one cell (it applies to every option of the call)")
    if not found:
        return None
    values = list(values)
    key: list = []
    fills: list = []
    for i, a, kind, ref in found:
        try:
            res = lookup(ref)
        except _Problem as p:
            prefix = f"{a.name} must be a number or a {KIND_WORDS[kind]}'s handle: " if "#" not in ref else f"{a.name}: "
            raise _Problem(prefix + str(p)) from None
        if res.kind != kind:
            raise _Problem(f"{a.name}: {res.handle} is a {KIND_WORDS[res.kind]}, not a {KIND_WORDS[kind]}")
        key.append((a.field, res.key))
        if kind == "heston":
            rest = [j for j, b in enumerate(spec.args) if b.field in ("kappa", "long_run_variance", "xi", "correlation")]
            given = [spec.args[j].name for j in rest if j < len(values) and not _blank_range(values[j])]
            if given:
                raise _Problem(f"{', '.join(given)} must be left out when {a.name} is a Heston handle ({res.handle})")
            for j, x in zip([i] + rest, res.payload.values()):
                values[j] = _like(values[j] if j < len(values) else None, x)
            continue
        if kind == "dividends":
            if spec.method not in DIVIDEND_METHODS:
                raise _Problem(f"{a.name}: {res.handle} is a cash-dividend schedule, which only the CRR tree prices: "
                               "use BOPM_ or AMERICAN_ functions, or give a yield")
            sched = [j for j, b in enumerate(spec.args) if b.parse == "schedule"]
            if any(j < len(values) and not _blank_range(values[j]) for j in sched):
                raise _Problem(f"give the cash dividends as {a.name} ({res.handle}) or as "
                               f"{', '.join(spec.args[j].name for j in sched)}, not both")
            if res.payload.dated:
                key.append(("valuation", _dt.date.today().isoformat()))
        values[i] = _like(values[i], _PLACEHOLDER[a.field])
        fills.append((a, res))
    return Bound(tuple(values), tuple(key), fills)


def _one_cell(v: Any) -> Any:
    """The value of a one-cell range (xlwings and ``formulas`` hand a cell over as [[x]]),
    else ``v``."""
    if isinstance(v, (list, tuple)) and len(v) == 1:
        v = v[0]
        if isinstance(v, (list, tuple)) and len(v) == 1:
            return v[0]
        return v if not isinstance(v, (list, tuple)) else [v]
    if isinstance(v, np.ndarray) and v.size == 1:
        return v.ravel()[0]
    return v


def _like(original: Any, x: Any) -> Any:
    """``x`` in the shape of a one-cell argument: [[x]] where it came as a one-cell range."""
    return [[x]] if isinstance(original, (list, tuple, np.ndarray)) else x


def _blank(v: Any) -> bool:
    v = _one_cell(v)
    return v is None or (isinstance(v, str) and not v.strip())


def _blank_range(v: Any) -> bool:
    if isinstance(v, (list, tuple, np.ndarray)):
        return all(_blank(x) for x in np.asarray(v, dtype=object).ravel().tolist())
    return _blank(v)


def _range_has_handle(v: Any) -> bool:
    try:
        flat = np.asarray(v, dtype=object).ravel().tolist()
    except ValueError:
        return False
    return any(isinstance(x, str) and "#" in x and HANDLE_PATTERN.fullmatch(x.strip().removesuffix(LOCAL_MARK))
               for x in flat)


# ---- making and listing objects ---------------------------------------------------------------

_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")


def _cells(arg: Any, value: Any) -> list:
    """A row or column of cells as a list, empty cells dropped from the end.

    Raises:
        _Problem: a block of several rows and columns."""
    a = _grid(value, arg.name)
    if a.ndim == 2 and min(a.shape) > 1:
        raise _Problem(f"{arg.name} must be one row or one column, got {a.shape[0]}x{a.shape[1]}")
    out = a.ravel().tolist()
    while out and _blank(out[-1]):
        out.pop()
    return out


def _date_or_number(arg: Any, i: int, v: Any) -> Any:
    """An ex-date or tenor cell: a float, or an ISO date (a date cell, ``YYYY-MM-DD`` text, a
    number >= :data:`DATE_SERIAL_MIN` read as an Excel date serial)."""
    if isinstance(v, _dt.datetime):
        return v.date().isoformat()
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        x = float(v)
        if math.isfinite(x) and x >= DATE_SERIAL_MIN:
            return (_EXCEL_EPOCH + _dt.timedelta(days=x)).date().isoformat()
        return x
    if isinstance(v, str) and _DATE_TEXT.fullmatch(v.strip()):
        return v.strip()
    raise _Problem(f"{arg.name}: cell {i + 1} must be a number or a date, got {v!r}"[:200])


def _number_cell(arg: Any, i: int, v: Any) -> float:
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    raise _Problem(f"{arg.name}: cell {i + 1} must be a number, got {v!r}"[:200])


def _curve_document(spec: Function, values: Sequence[Any]) -> dict:
    days_arg, rates_arg = spec.args[1:3]
    when = [_date_or_number(days_arg, i, v) for i, v in enumerate(_cells(days_arg, values[1]))]
    rates = [_number_cell(rates_arg, i, v) for i, v in enumerate(_cells(rates_arg, values[2]))]
    today = _dt.date.today()
    days = [float((_dt.date.fromisoformat(w) - today).days) if isinstance(w, str) else w for w in when]
    return {"days": days, "rates": rates}


def _dividends_document(spec: Function, values: Sequence[Any]) -> dict:
    when_arg, amounts_arg = spec.args[1:3]
    return {"ex_dates": [_date_or_number(when_arg, i, v) for i, v in enumerate(_cells(when_arg, values[1]))],
            "amounts": [_number_cell(amounts_arg, i, v) for i, v in enumerate(_cells(amounts_arg, values[2]))]}


def _heston_document(spec: Function, values: Sequence[Any]) -> dict:
    out = {}
    for arg, key, v in zip(spec.args[1:], object_kinds.HESTON_PARAMETERS, values[1:]):
        x = _single(arg, v)
        if not math.isfinite(x):
            raise _Problem(f"{arg.name} must be a finite number")
        out[key] = x
    return out


_DOCUMENTS = {"curve": _curve_document, "dividends": _dividends_document, "heston": _heston_document}
#: a document field's argument, by the position of the function's arguments
_DOC_ARG = {"days": 1, "rates": 2, "ex_dates": 1, "amounts": 2,
            **{k: i + 1 for i, k in enumerate(object_kinds.HESTON_PARAMETERS)}}


def _name(spec: Function, value: Any) -> str:
    """The checked name cell of a function that makes an object (its first argument).

    Raises:
        _Problem: not a name."""
    name = _single(spec.args[0], value)
    try:
        return check_name(name)
    except InvalidInputError as e:
        raise _Problem(f"{spec.args[0].name} {e.reason}, got {_show(name)}") from None


def make(spec: Function, values: Sequence[Any]) -> str:
    """OPTIOND_CURVE, OPTIOND_DIVIDENDS, OPTIOND_HESTON: the handle of the object kept, in
    the daemon or (no daemon) here, or the reason it was not."""
    kind = spec.fixed["object_kind"]
    name = _name(spec, values[0])
    doc = _DOCUMENTS[kind](spec, values)
    try:
        payload = object_kinds.build(kind, doc)  # checked here: no round trip for a bad cell
    except InvalidInputError as e:
        if e.field == "curve":  # the curve's own check: its reason names the row and the value
            arg = spec.args[2 if "rate" in e.reason else 1]
            raise _Problem(f"{arg.name}: {e.reason}") from None
        arg = spec.args[_DOC_ARG.get(e.field, 1)]
        where = "" if e.row is None else f"cell {e.row + 1}: "
        raise _Problem(f"{arg.name}: {where}{e.reason}, got {e.value!r}"[:200]) from None
    doc = object_kinds.document(kind, payload)
    try:
        content = pricing._client().put_object(name, kind, doc)
    except DaemonUnavailable as e:
        if not _env_on("OPTIOND_FALLBACK"):
            return pricing._daemon_down_text(None, e)
        try:
            entry = object_kinds.put_document(_local, name, kind, doc)
        except (ObjectError, InvalidInputError, ValueError) as e:
            raise _Problem(str(e)) from None
        return entry.handle + LOCAL_MARK
    except (DaemonError, InvalidInputError) as e:
        raise _Problem(str(e)) from None
    _remember(content, payload)
    return str(content["handle"])


def _fit_problem(spec: Function, e: Exception) -> _Problem:
    """A refused fit as the cell's reason: a bad input under its Excel argument's name."""
    if isinstance(e, InvalidInputError):
        arg = next((a.name for a in spec.args if a.field == e.field), e.field)
        return _Problem(f"{arg} {e.reason}")
    return _Problem(str(e))


def fit(spec: Function, values: Sequence[Any]) -> str:
    """HESTON_FIT: the handle of the Heston set fitted to the pasted chain and kept, in the
    daemon or (no daemon) here, or the reason it was not (see the module docstring)."""
    _, df, market = _chain_fit(spec, values)
    name = _name(spec, values[0])
    feller = bool(_single(spec.args[5], values[5]))
    american = heston_op.american_reason(df)
    if american is not None:
        raise _Problem(f"{spec.args[1].name} {american}")
    try:
        content = pricing._client().fit_heston(name, df, feller=feller, **market)
    except DaemonUnavailable as e:
        if not _env_on("OPTIOND_FALLBACK"):
            return pricing._daemon_down_text(None, e)
        try:
            content = heston_op.fit_here(_local, name, df, market, feller)
        except (ObjectError, ValueError) as e:  # InvalidInputError and LimitExceeded among them
            raise _fit_problem(spec, e) from None
        return content["handle"] + LOCAL_MARK
    except (DaemonError, InvalidInputError) as e:
        raise _fit_problem(spec, e) from None
    doc = content.pop("document")
    _remember(content, object_kinds.build(heston_op.KIND, doc))
    return str(content["handle"])


def listing() -> list[list]:
    """OPTIOND_OBJECTS: a header row (:data:`LISTING_COLUMNS`) and a row per live object, the
    daemon's then this process's (handles ending in ``@local``); the summary of a daemon object
    whose file could not be written says so."""
    rows: list[list] = []
    note = None
    try:
        objs = pricing._client().objects()
    except DaemonUnavailable:
        objs, note = [], "no daemon: local objects only"
    for o in objs:
        text = (o.get("summary") or {}).get("text", "")
        if o.get("persisted") is False:
            text += " (in memory only: the daemon could not write it to disk)"
        rows.append([o["handle"], o["kind"], text, o["created"]])
    for e in _local.list():
        o = e.listing()
        rows.append([o["handle"] + LOCAL_MARK, o["kind"], o["summary"].get("text", ""), o["created"]])
    head = list(LISTING_COLUMNS)
    if note:
        head[-1] = f"created ({note})"
    return [head] + (rows or [["(none)", "", "", ""]])


def evaluate(spec: Function, values: Sequence[Any]) -> Any:
    """The body of an object function (``spec.method == "objects"``)."""
    if spec.op == "list":
        return listing()
    if spec.op == "fit":
        return fit(spec, values)
    return make(spec, values)


__all__ = ["DATE_SERIAL_MIN", "HANDLE_KINDS", "LISTING_COLUMNS", "LOCAL_MARK", "REFRESH_S", "Bound", "Resolved",
           "bind", "evaluate", "fit", "forget", "listing", "local_store", "lookup", "make"]
