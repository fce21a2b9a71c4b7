"""The pricing schema: contract, market, method and result, in batch (column) form.

A batch is a set of equal-length NumPy columns, not a list of objects, so kernels take
arrays in and give arrays out. Every front end (CLI, daemon, Excel functions, panel) builds
the same :class:`Batch` and :class:`Method`, and validation happens once, here, when a batch
is constructed.

Units throughout: ``expiry`` in years (ACT/365 from the quote date), ``rate``,
``dividend_yield`` and ``volatility`` as annualised decimals (0.05 = 5 %), continuously
compounded.

Row-level validation (:func:`validate_columns`) returns every bad row with its reason, so a
batch front end can mark those rows and still price the rest; :meth:`Batch.from_columns`
raises :class:`InvalidInputError` on the first one.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

import numpy as np

PUT, CALL = 0, 1
EUROPEAN, AMERICAN = 0, 1
KIND_CODES = {"put": PUT, "p": PUT, "call": CALL, "c": CALL}
STYLE_CODES = {"european": EUROPEAN, "e": EUROPEAN, "eu": EUROPEAN, "american": AMERICAN, "a": AMERICAN, "us": AMERICAN}
KIND_NAMES = ("put", "call")
STYLE_NAMES = ("european", "american")

MAX_VOLATILITY = 10.0
MAX_STEPS = 10_000_000
METHODS = ("binomial", "black-scholes", "mlmc", "adi", "spectral", "heston", "auto")
#: the method name that picks a method per row (:func:`auto_methods`)
AUTO = "auto"
#: accuracy settings of the spectral American engine (``kernels/spectral/cpu.py``, ACCURACY)
SPECTRAL_ACCURACIES = ("fast", "accurate", "high-precision")
#: ADI schemes (in 't Hout & Foulon 2010): Douglas, Craig–Sneyd, Modified Craig–Sneyd, Hundsdorfer–Verwer
ADI_SCHEMES = ("do", "cs", "mcs", "hv")
#: the Heston model's extra market columns (Heston 1993): initial variance, mean reversion,
#: long-run variance, volatility of variance, spot–variance correlation
HESTON_FIELDS = ("v0", "kappa", "long_run_variance", "xi", "correlation")
#: the Heston inputs' earlier column names (they clashed with the Greeks theta and rho), read for
#: one release with a DeprecationWarning: earlier name -> name
HESTON_RENAMED = {"theta": "long_run_variance", "rho": "correlation"}
#: the cash-dividend schedule's columns: per row up to MAX_DIVIDENDS ex-dates (years from the
#: valuation) and cash amounts (currency units), padded with NaN times
DIVIDEND_FIELDS = ("dividend_times", "dividend_amounts")
MAX_DIVIDENDS = 8
#: MLMC payoff families (with the row's kind: vanilla call/put, digital call/put, Asian call/put)
PAYOFFS = ("vanilla", "digital", "asian")
PRECISIONS = ("fp64", "fp32")
DEVICES = ("auto", "cpu", "gpu")

#: Columns of a pricing batch, in the order the CLI reads and writes them.
CONTRACT_FIELDS = ("kind", "style", "strike", "expiry")
MARKET_FIELDS = ("spot", "rate", "dividend_yield", "volatility")
#: the Greeks of a result, in the order of every Greeks row and column: delta dV/dS, gamma
#: d2V/dS2, theta dV/dt (per year), vega (per 1.00 of volatility), rho (per 1.00 of rate),
#: dividend_rho dV/dq (per 1.00 of continuous dividend yield)
GREEK_FIELDS = ("delta", "gamma", "theta", "vega", "rho", "dividend_rho")
RESULT_FIELDS = ("price",) + GREEK_FIELDS + ("status", "error", "device")


class InvalidInputError(ValueError):
    """A value failed validation. ``field``, ``row`` (None for a scalar) and ``value`` say which."""

    def __init__(self, field: str, row: int | None, value: Any, reason: str, others: int = 0):
        self.field, self.row, self.value, self.reason = field, row, value, reason
        where = field if row is None else f"{field}[row {row}]"
        msg = f"{where} = {value!r}: {reason}"
        if others:
            msg += f" (and {others} more invalid row{'s' if others > 1 else ''})"
        super().__init__(msg)


@dataclass(frozen=True)
class RowError:
    """One invalid row: its index, the offending field and value, and a short reason."""

    row: int
    field: str
    value: Any
    reason: str

    @property
    def message(self) -> str:
        return f"{self.field}={self.value!r}: {self.reason}"


def _codes(values: Any, table: Mapping[str, int], name: str, n: int) -> tuple[np.ndarray, list[RowError]]:
    """Map kind/style labels (strings, or already-integer codes) to int8 codes; -1 when unknown."""
    arr = np.asarray(values)
    if arr.ndim == 0 and arr.dtype.kind in "USO":  # one label for every row: look it up once
        code = table.get(str(arr.item()).strip().lower()) if arr.item() is not None else None
        if code is not None:
            return np.full(n, code, dtype=np.int8), []
    if arr.ndim == 0:
        arr = np.full(n, arr.item(), dtype=arr.dtype)
    out = np.full(arr.shape[0], -1, dtype=np.int8)
    errors: list[RowError] = []
    valid_codes = set(table.values())
    if arr.dtype.kind in "iub":
        ok = np.isin(arr, list(valid_codes))
        out[ok] = arr[ok]
        for i in np.flatnonzero(~ok):
            errors.append(RowError(int(i), name, arr[i].item(), f"unknown {name}"))
        return out, errors
    # a long column is factorized by pandas in C (None and NaN: -1) and each distinct label
    # looked up once (a chain repeats two or three labels thousands of times); a short one is
    # looked up cell by cell
    which, distinct = None, None
    if arr.shape[0] >= 256:
        import pandas as pd

        try:
            which, distinct = pd.factorize(pd.Series(arr, dtype=object), use_na_sentinel=True)
        except TypeError:  # unhashable cells (lists)
            pass
    if which is None:
        which, distinct = np.arange(arr.shape[0]), arr
    looked = np.array([table.get(str(v).strip().lower(), -1) for v in distinct] + [-1], dtype=np.int8)
    out[:] = looked[which]  # which == -1 picks the trailing -1
    bad = np.flatnonzero(out < 0)
    expected = sorted(set(k for k in table if len(k) > 2))
    for i, v in zip(bad.tolist(), arr[bad].tolist()):  # plain Python values in the messages
        errors.append(RowError(i, name, v, f"unknown {name}; expected one of {expected}"))
    return out, errors


def _float_column(values: Any, name: str, n: int) -> tuple[np.ndarray, list[RowError]]:
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = np.full(n, arr.item() if arr.dtype.kind != "O" else arr.item())
    if arr.dtype.kind in "fiub":
        out = arr.astype(np.float64, copy=False)
        return out, []
    # strings / objects: convert element-wise so one bad cell marks one row
    out = np.empty(arr.shape[0], dtype=np.float64)
    errors = []
    for i, v in enumerate(arr.tolist()):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            out[i] = np.nan
            errors.append(RowError(i, name, v, "not a number"))
    return out, errors


def pd_numeric(values: Any) -> np.ndarray:
    """Values as float64 where they parse, NaN elsewhere (never raises)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "fiub":
        return arr.astype(np.float64)
    flat = [v for v in np.atleast_1d(arr).tolist()]
    out = np.empty(len(flat))
    for i, v in enumerate(flat):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            out[i] = np.nan
    return out.reshape(arr.shape)


def _column_length(columns: Mapping[str, Any]) -> int:
    n = None
    for name, v in columns.items():
        a = np.asarray(v)
        if a.ndim > 1:
            raise InvalidInputError(name, None, f"array of shape {a.shape}", "columns must be one-dimensional")
        if a.ndim == 1:
            if n is None:
                n = a.shape[0]
            elif a.shape[0] != n:
                raise InvalidInputError(name, None, f"length {a.shape[0]}", f"column lengths differ (expected {n})")
    return 1 if n is None else n


def heston_columns(columns: Mapping[str, Any]) -> dict[str, Any]:
    """``columns`` as a dict with the Heston inputs under their names (:data:`HESTON_FIELDS`):
    a Heston table (one with ``v0``) that still names the long-run variance ``theta`` or the
    correlation ``rho`` (:data:`HESTON_RENAMED`) has them renamed, with a DeprecationWarning.
    Elsewhere ``theta`` and ``rho`` are the Greeks' names and are left alone."""
    columns = dict(columns)
    if "v0" in columns:
        for old, new in HESTON_RENAMED.items():
            if old in columns and new not in columns:
                warnings.warn(f"the Heston input column {old!r} is now {new!r} ({old!r} names the Greek); "
                              f"the old name goes in the next release", DeprecationWarning, stacklevel=3)
                columns[new] = columns.pop(old)
    return columns


def validate_columns(columns: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], list[RowError]]:
    """Coerce and check the eight contract/market columns of a batch.

    Args:
        columns: mapping with keys ``kind, style, spot, strike, expiry, rate, dividend_yield,
            volatility``; each a scalar or a 1-D sequence of length n (scalars broadcast).
            ``kind`` is ``"put"``/``"call"`` (or 0/1), ``style`` ``"european"``/``"american"``
            (or 0/1). ``style`` defaults to american, ``dividend_yield`` to 0. Optional: the
            Heston columns (:data:`HESTON_FIELDS`) and a cash-dividend schedule
            (:data:`DIVIDEND_FIELDS`, checked by :func:`validate_dividends`).

    Returns:
        ``(arrays, errors)``: the coerced columns (float64, kind/style as int8 codes, -1 where
        unknown) and one :class:`RowError` per invalid row (the first problem found in it).

    Raises:
        InvalidInputError: a missing column, a 2-D column or columns of different lengths
            (problems of the whole batch, not of one row).
    """
    columns = heston_columns(columns)
    columns.setdefault("style", "american")
    columns.setdefault("dividend_yield", 0.0)
    if columns.get("v0") is not None:
        # Heston rows need no Black–Scholes volatility: a blank one carries sqrt(v0) for reference
        with np.errstate(invalid="ignore"):
            v0 = pd_numeric(columns["v0"])
            ref = np.where(np.isfinite(v0) & (v0 > 0), np.sqrt(np.abs(v0)), np.nan)
            if columns.get("volatility") is None:
                columns["volatility"] = np.where(np.isnan(ref), 0.2, ref)
            else:
                vol = pd_numeric(columns["volatility"])
                if np.ndim(vol) and np.isnan(vol).any():
                    fill = np.isnan(vol) & ~np.isnan(np.broadcast_to(ref, vol.shape))
                    # the other cells as given: a bad one is reported as written ('abc', not nan)
                    raw = np.asarray(columns["volatility"])
                    merged = vol.copy() if raw.dtype.kind in "fiub" else raw.astype(object)
                    merged[fill] = np.broadcast_to(ref, vol.shape)[fill]
                    columns["volatility"] = merged
    for name in CONTRACT_FIELDS + MARKET_FIELDS:
        if name not in columns:
            raise InvalidInputError(name, None, None, "missing column")
    n = _column_length({k: columns[k] for k in CONTRACT_FIELDS + MARKET_FIELDS})
    div_rows = np.ndim(columns.get("dividend_times")) == 2 and np.shape(columns["dividend_times"])[0]
    if div_rows and div_rows != n:
        if any(np.ndim(columns[k]) for k in CONTRACT_FIELDS + MARKET_FIELDS):
            raise InvalidInputError("dividend_times", None, f"{div_rows} schedules",
                                    f"one schedule per row expected ({n} rows), or one for all")
        n = int(div_rows)  # scalar columns broadcast over one schedule per row
    errors: list[RowError] = []
    out: dict[str, np.ndarray] = {}
    out["kind"], e = _codes(columns["kind"], KIND_CODES, "kind", n)
    errors += e
    out["style"], e = _codes(columns["style"], STYLE_CODES, "style", n)
    errors += e
    for name in ("spot", "strike", "expiry", "rate", "dividend_yield", "volatility"):
        out[name], e = _float_column(columns[name], name, n)
        errors += e
        col = out[name]
        positive = name in ("spot", "strike", "expiry", "volatility")
        with np.errstate(invalid="ignore"):
            fine = np.isfinite(col) if not positive else (col > 0) & (col <= (MAX_VOLATILITY if name == "volatility" else np.inf))
        if fine.all():  # the common case: one vectorised pass, no per-row work
            continue
        already = {err.row for err in e}
        for i in np.flatnonzero(~fine).tolist():
            v = float(col[i])
            if i in already:
                continue
            if not np.isfinite(v):
                errors.append(RowError(i, name, v, "not a finite number"))
            elif v <= 0:
                errors.append(RowError(i, name, v, "must be > 0"))
            else:
                errors.append(RowError(i, name, v, f"must be <= {MAX_VOLATILITY:g}"))
    heston = [f for f in HESTON_FIELDS if f in columns and columns[f] is not None]
    if heston:
        if len(heston) != len(HESTON_FIELDS):
            missing = [f for f in HESTON_FIELDS if f not in heston]
            raise InvalidInputError(missing[0], None, None, f"Heston needs all of {list(HESTON_FIELDS)}")
        blank = np.ones(n, dtype=bool)  # rows with no Heston value at all are not Heston rows
        for name in HESTON_FIELDS:
            blank &= np.isnan(pd_numeric(np.broadcast_to(np.asarray(columns[name], dtype=object), (n,))))
        for name in HESTON_FIELDS:
            out[name], e = _float_column(columns[name], name, n)
            e = [x for x in e if not blank[x.row]]
            errors += e
            col = out[name]
            lo, strict = {"v0": (0.0, False), "kappa": (0.0, True), "long_run_variance": (0.0, False),
                          "xi": (0.0, True), "correlation": (-1.0, False)}[name]
            with np.errstate(invalid="ignore"):
                fine = np.isfinite(col) & ((col > lo) if strict else (col >= lo)) & \
                    ((col <= 1.0) if name == "correlation" else True)
            already = {err.row for err in e}
            for i in np.flatnonzero(~fine & ~blank).tolist():
                if i not in already:
                    v = float(col[i])
                    why = ("not a finite number" if not np.isfinite(v) else
                           "must be between -1 and 1" if name == "correlation" else f"must be {'>' if strict else '>='} 0")
                    errors.append(RowError(i, name, v, why))
    if columns.get("dividend_times") is not None or columns.get("dividend_amounts") is not None:
        out["dividend_times"], out["dividend_amounts"], e = validate_dividends(
            columns.get("dividend_times"), columns.get("dividend_amounts"), out["spot"], out["expiry"])
        errors += e
    # keep the first problem per row, in row order
    first: dict[int, RowError] = {}
    for err in errors:
        first.setdefault(err.row, err)
    return out, [first[r] for r in sorted(first)]


def _float_like(values: Any) -> np.ndarray:
    """:func:`pd_numeric` of an array or nested list, keeping its shape (a float array as it is)."""
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    return pd_numeric(arr) if arr.dtype.kind in "fiub" else pd_numeric(arr.ravel()).reshape(arr.shape)


def validate_dividends(times: Any, amounts: Any, spot: np.ndarray, expiry: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, list[RowError]]:
    """Coerce and check cash-dividend schedules (the spot model's ex-dates and amounts).

    Args:
        times: ex-dates in years from the valuation, shape (n, m) (one schedule per row) or
            (m,) (one for every row); NaN pads a shorter schedule.
        amounts: cash amounts (currency units), the same shape; NaN or 0 where ``times`` pads.
        spot, expiry: the rows' validated spot and expiry, shape (n,).

    Returns:
        ``(times, amounts, errors)`` as float64 arrays of shape (n, m) and one
        :class:`RowError` per bad row, naming the field: an amount < 0 or not finite, an
        ex-date < 0 or after the expiry, ex-dates not in ascending order, more than
        :data:`MAX_DIVIDENDS` dividends, or dividends before expiry whose sum is not below the
        spot.

    Raises:
        InvalidInputError: only one of the two given, shapes that differ, or more than 2-D.
    """
    n = spot.shape[0]
    if times is None or amounts is None:
        raise InvalidInputError("dividend_amounts" if amounts is None else "dividend_times", None, None,
                                "cash dividends need both dividend_times and dividend_amounts")
    t, a = _float_like(times), _float_like(amounts)
    if t.shape != a.shape or t.ndim not in (1, 2):
        raise InvalidInputError("dividend_times", None, None,
                                f"dividend_times {t.shape} and dividend_amounts {a.shape} must be one shape, (n, m) or (m,)")
    errors: list[RowError] = []
    # the count per schedule is checked before any (n, m) array is built: a schedule longer than
    # MAX_DIVIDENDS is cleared (its row an error), and the padding after the last dividend of any
    # row is cut, so the arrays below are never wider than the request's longest usable schedule
    pad = np.isnan(t) & (np.isnan(a) | (a == 0.0))
    count = (~pad).sum(axis=-1)
    if t.ndim == 1:
        if count > MAX_DIVIDENDS:  # one schedule for every row: the request's own limit
            raise InvalidInputError("dividend_times", None, int(count),
                                    f"at most {MAX_DIVIDENDS} dividends per option (one schedule for every row)")
    else:
        over = np.flatnonzero(count > MAX_DIVIDENDS)
        for i in over.tolist():
            errors.append(RowError(int(i), "dividend_times", float(count[i]), f"at most {MAX_DIVIDENDS} dividends per option"))
        if over.size:
            pad[over] = True
    used = np.flatnonzero(~pad.reshape(-1, pad.shape[-1]).all(axis=0))
    width = int(used[-1]) + 1 if used.size else 1
    t = np.array(np.broadcast_to(np.atleast_2d(t[..., :width]), (n, width)))
    a = np.array(np.broadcast_to(np.atleast_2d(a[..., :width]), (n, width)))
    pad = np.array(np.broadcast_to(np.atleast_2d(pad[..., :width]), (n, width)))
    t[pad] = np.nan
    a[pad] = 0.0
    with np.errstate(invalid="ignore"):
        ordered = np.where(pad, np.inf, t)
        checks = [
            ("dividend_amounts", ~pad & ~(np.isfinite(a) & (a >= 0.0)), "must be a finite amount >= 0"),
            ("dividend_times", ~pad & ~np.isfinite(t), "an amount needs a finite ex-date"),
            ("dividend_times", ~pad & (t < 0.0), "ex-date before the valuation (years < 0)"),
            ("dividend_times", ~pad & (t > expiry[:, None]), "ex-date after the expiry"),
        ]
    for field, bad, why in checks:
        for i, j in zip(*np.nonzero(bad)):
            v = float(a[i, j] if field == "dividend_amounts" else t[i, j])
            errors.append(RowError(int(i), field, v, f"dividend {int(j) + 1}: {why}"))
    with np.errstate(invalid="ignore"):
        unsorted = np.flatnonzero((np.diff(ordered, axis=1) < 0).any(axis=1)) if t.shape[1] > 1 else []
        paid = np.where(~pad & (t < expiry[:, None]), a, 0.0).sum(axis=1)
    for i in unsorted:
        errors.append(RowError(int(i), "dividend_times", float("nan"), "ex-dates must be in ascending order"))
    for i in np.flatnonzero(paid >= spot):
        errors.append(RowError(int(i), "dividend_amounts", float(paid[i]),
                               f"dividends before expiry sum to {paid[i]:g}, not below the spot {spot[i]:g}"))
    return t, a, errors


def per_row(name: str, value: Any, n: int) -> bool:
    """Whether the request column ``name`` holds one entry per row of an ``n``-row table, so a
    part of the table takes its rows: a 1-D array of length n, or for a cash-dividend column
    (:data:`DIVIDEND_FIELDS`) a 2-D (n, m) schedule (a 1-D one is one schedule for every row)."""
    if not isinstance(value, np.ndarray):
        return False
    return value.shape[:1] == (n,) and value.ndim == (2 if name in DIVIDEND_FIELDS else 1)


def scalar_row(columns: Mapping[str, Any]) -> tuple | None:
    """The one-contract fast path: ``(kind, style, spot, strike, expiry, rate, dividend_yield,
    volatility)`` as Python values when every column is a scalar that certainly passes
    :func:`validate_columns`; None otherwise (then the general path reports any error, so the
    rules and messages live in one place)."""
    if any(columns.get(f) is not None for f in DIVIDEND_FIELDS):
        return None
    try:
        k, st = columns["kind"], columns.get("style", "american")
        kind = KIND_CODES.get(k.strip().lower()) if isinstance(k, str) else (int(k) if k in (0, 1) else None)
        style = STYLE_CODES.get(st.strip().lower()) if isinstance(st, str) else (int(st) if st in (0, 1) else None)
        vals = [float(columns[f]) for f in ("spot", "strike", "expiry", "rate")] + [
            float(columns.get("dividend_yield", 0.0)), float(columns["volatility"])]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if kind is None or style is None or not all(math.isfinite(v) for v in vals):
        return None
    S, K, T, r, q, sigma = vals
    if S <= 0 or K <= 0 or T <= 0 or sigma <= 0 or sigma > MAX_VOLATILITY:
        return None
    return kind, style, S, K, T, r, q, sigma


def validate_steps(steps: Any, n: int) -> tuple[np.ndarray, list[RowError]]:
    """Coerce a per-option number of CRR steps (scalar or length-n) to int64 and check 1 <= steps <= 1e7."""
    arr = np.asarray(steps)
    if arr.ndim == 0:
        arr = np.full(n, arr.item())
    if arr.ndim != 1 or arr.shape[0] != n:
        raise InvalidInputError("steps", None, f"shape {arr.shape}", f"expected a scalar or {n} values")
    if arr.dtype.kind in "iu" and arr.shape[0] and int(arr.min()) >= 1 and int(arr.max()) <= MAX_STEPS:
        return arr.astype(np.int64, copy=False), []
    errors: list[RowError] = []
    vals, e = _float_column(arr, "steps", n)
    errors += e
    item = lambda x: x.item() if hasattr(x, "item") else x  # noqa: E731
    for i in np.flatnonzero(np.isfinite(vals) & ~np.isin(np.arange(n), [x.row for x in e])):
        v = vals[i]
        if v != np.floor(v):
            errors.append(RowError(int(i), "steps", item(arr[i]), "must be a whole number"))
        elif v < 1 or v > MAX_STEPS:
            errors.append(RowError(int(i), "steps", int(v), f"must be between 1 and {MAX_STEPS:.0e}"))
    errors += [RowError(int(i), "steps", item(arr[i]), "not a finite number") for i in np.flatnonzero(~np.isfinite(vals)) if int(i) not in {x.row for x in e}]
    out = np.where(np.isfinite(vals) & (vals >= 1) & (vals <= MAX_STEPS), vals, 1).astype(np.int64)
    return out, sorted(errors, key=lambda x: x.row)


@dataclass(frozen=True)
class Contracts:
    """What is priced. Arrays of shape (n,): ``kind`` int8 (0 put, 1 call), ``style`` int8
    (0 european, 1 american), ``strike`` (currency units) and ``expiry`` (years), float64."""

    kind: np.ndarray
    style: np.ndarray
    strike: np.ndarray
    expiry: np.ndarray


@dataclass(frozen=True)
class Market:
    """The model inputs, arrays of shape (n,), float64: ``spot`` (currency units), ``rate``,
    ``dividend_yield`` and ``volatility`` (annualised decimals, continuous); for the Heston
    model also ``v0`` and ``long_run_variance`` (variances, annualised; the model's v0 and
    theta), ``kappa`` (mean-reversion speed, per year), ``xi`` (volatility of variance) and
    ``correlation`` (of the spot with its variance, -1..1; the model's rho), else None; with
    cash dividends (the spot model) ``dividend_times`` (years from the valuation) and
    ``dividend_amounts`` (currency units), shape (n, m), NaN times padding (else None)."""

    spot: np.ndarray
    rate: np.ndarray
    dividend_yield: np.ndarray
    volatility: np.ndarray
    v0: np.ndarray | None = None
    kappa: np.ndarray | None = None
    long_run_variance: np.ndarray | None = None
    xi: np.ndarray | None = None
    correlation: np.ndarray | None = None
    dividend_times: np.ndarray | None = None
    dividend_amounts: np.ndarray | None = None


@dataclass(frozen=True)
class Batch:
    """A validated batch of n contracts with their market inputs. Build with :meth:`from_columns`."""

    contracts: Contracts
    market: Market

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any] | None = None, **kw: Any) -> "Batch":
        """Validate and build a batch from columns (see :func:`validate_columns`).

        Raises:
            InvalidInputError: naming the field, the row and the value of the first invalid
                row, and how many other rows are invalid.
        """
        cols = dict(columns or {}, **kw)
        arrays, errors = validate_columns(cols)
        if errors:
            e = errors[0]
            raise InvalidInputError(e.field, e.row, e.value, e.reason, others=len(errors) - 1)
        return cls._from_valid(arrays)

    @classmethod
    def _from_valid(cls, a: Mapping[str, np.ndarray]) -> "Batch":
        c = Contracts(*(np.ascontiguousarray(a[k]) for k in CONTRACT_FIELDS))
        m = Market(*(np.ascontiguousarray(a[k]) for k in MARKET_FIELDS),
                   **{k: np.ascontiguousarray(a[k]) for k in HESTON_FIELDS + DIVIDEND_FIELDS if a.get(k) is not None})
        return cls(c, m)

    def __len__(self) -> int:
        return int(self.contracts.strike.shape[0])

    def __getattr__(self, name: str) -> np.ndarray:
        # batch.spot, batch.kind ... read through to the contract / market columns
        for part in ("contracts", "market"):
            obj = object.__getattribute__(self, part)
            if name in obj.__dataclass_fields__:
                return getattr(obj, name)
        raise AttributeError(name)

    def columns(self) -> dict[str, np.ndarray]:
        """The eight columns as a dict of arrays (kind/style as int8 codes)."""
        return {f.name: getattr(self.contracts, f.name) for f in fields(Contracts)} | {
            f.name: getattr(self.market, f.name) for f in fields(Market) if getattr(self.market, f.name) is not None
        }

    def take(self, idx: np.ndarray | Sequence[int]) -> "Batch":
        """The sub-batch of rows ``idx`` (already valid, so not re-checked)."""
        idx = np.asarray(idx, dtype=np.int64)
        return Batch._from_valid({k: v[idx] for k, v in self.columns().items()})

    def replace(self, **cols: np.ndarray) -> "Batch":
        """A copy with some columns replaced (e.g. a bumped volatility); the new batch is validated."""
        return Batch.from_columns(self.columns() | cols)


def auto_methods(style: np.ndarray, cash: np.ndarray) -> np.ndarray:
    """The method ``"auto"`` gives each row, an object array of shape (n,):

    * ``"spectral"``: American rows with a continuous carry only (no cash dividends), the
      spectral engine (Andersen, Lake & Offengenden 2016; it sends rows outside its method,
      the double-boundary regimes, on to the tree itself);
    * ``"binomial"``: rows with cash dividends, American or European (the CRR tree's spot
      model; the closed form has no cash dividends);
    * ``"black-scholes"``: European rows without cash dividends, the closed form.

    Args:
        style: (n,) style codes (:data:`AMERICAN`, :data:`EUROPEAN`; an unknown code, -1, is
            read as American: such a row is invalid and priced by nobody).
        cash: (n,) bool, the row has at least one cash dividend.
    """
    style = np.asarray(style)
    out = object_full(style.shape[0], "spectral")
    out[style == EUROPEAN] = "black-scholes"
    out[np.asarray(cash, dtype=bool)] = "binomial"
    return out


@dataclass(frozen=True)
class Method:
    """How to price: the method and its settings (each setting is read by its method only).

    Attributes:
        name: one of :data:`METHODS`:

            * ``"binomial"``: the CRR tree (Cox, Ross & Rubinstein 1979), European or American,
              price and Greeks, on the CPU or a GPU (``kernels/binomial``);
            * ``"black-scholes"``: the closed form (Black & Scholes 1973, Merton 1973 with a
              dividend yield), European only (``kernels/black_scholes.py``);
            * ``"mlmc"``: adaptive multilevel Monte Carlo (Giles 2008, Milstein scheme),
              European-style vanilla, digital and Asian payoffs, price and standard error
              (``kernels/mlmc``);
            * ``"adi"``: the Heston model by ADI finite differences (in 't Hout & Foulon 2010),
              European or American, price, delta, gamma and theta (``kernels/adi``); needs the
              Heston columns of :data:`HESTON_FIELDS`;
            * ``"spectral"``: American options by Andersen, Lake & Offengenden (2016), the
              fixed-point iteration for the exercise boundary with Chebyshev collocation, price
              and Greeks (``kernels/spectral``); European rows by the closed form, rows outside
              the method (cash dividends, double-boundary regimes) on the CRR tree;
            * ``"heston"``: European options under Heston by the semi-analytic formula (Lewis
              2000's single integral of the "little trap" characteristic function of Albrecher
              et al. 2007, adaptive Gauss–Kronrod), price and Greeks (``kernels/heston``);
              needs the Heston columns; American rows are errors (they take ``"adi"``).
            * ``"auto"``: a method per row (:func:`auto_methods`): ``spectral`` for American
              rows with a continuous carry and no cash dividends, ``binomial`` for rows with
              cash dividends, ``black-scholes`` for European rows.

            Aliases: ``bs``/``bsm`` for black-scholes; ``crr``/``bopm``/``tree`` for binomial;
            ``alo``/``qdfp`` for spectral.
        steps: CRR time steps, a scalar or one per option (1 ... 1e7).
        precision: ``"fp64"`` (default) or ``"fp32"`` (GPU only, N <= 1e4).
        device: ``"auto"``, ``"cpu"`` or ``"gpu"``.
        greeks: compute delta, gamma, theta, vega and rho as well as the price.
        iv_tolerance: absolute tolerance on the volatility when solving implied volatilities.
        extrapolate: binomial only: the converged tree value, Broadie & Detemple's smoothing
            with two-point Richardson extrapolation ("BBSR",
            :func:`optiond.kernels.binomial.cpu.crr_batch`), for prices, Greeks and implied vols
            (not with cash dividends, whose rounding to the tree's levels it does not cancel).
        eps: MLMC target root-mean-square error, currency units, > 0 (scalar or one per
            option).
        payoff: MLMC payoff family, ``"vanilla"``, ``"digital"`` (cash-or-nothing paying 1) or
            ``"asian"`` (arithmetic average); the row's kind makes it a call or a put.
        seed: MLMC random seed (the Philox key): a fixed seed gives a reproducible estimate.
        scheme: ADI scheme, ``"do"`` (Douglas), ``"cs"`` (Craig–Sneyd), ``"mcs"`` (Modified
            Craig–Sneyd, default) or ``"hv"`` (Hundsdorfer–Verwer).
        grid: ADI grid nodes ``(n_spot, n_variance)`` (default 160 x 80).
        time_steps: ADI time steps, the least count when ``steps_per_year`` > 0 (default 50);
            rannacher: implicit (Rannacher) start-up half steps.
        steps_per_year: ADI time steps per year of expiry (default 80): each option gets the
            smallest of ``time_steps * sqrt(2)^k`` steps that is at least this times its expiry;
            0 keeps ``time_steps`` for every expiry.
        richardson: ADI: extrapolate over ``grid`` and its half (half the steps) (default on).
            The default ADI settings are within 6.2e-3 of the analytic European Heston price
            over hard parameter sets (kappa 0.5-2, xi 0.5-1.5, rho -0.9-0, T 0.25-2, K/S
            0.8-1.2, S = 100, v0 = theta = 0.04; 3.4e-4 at T = 0.25; 6.3e-4 on the T = 10
            sets with xi = 1) and within 8.5e-5 of Ikonen & Toivanen's published American
            values (``optiond.kernels.adi.defaults``).
        accuracy: spectral accuracy setting, one of :data:`SPECTRAL_ACCURACIES` (``"fast"``,
            ``"accurate"`` (default), ``"high-precision"``; ``"high"`` is an alias).
    """

    name: str = "binomial"
    steps: Any = 1000
    precision: str = "fp64"
    device: str = "auto"
    greeks: bool = True
    iv_tolerance: float = 1e-12
    extrapolate: bool = False
    eps: Any = 0.01
    payoff: str = "vanilla"
    seed: int = 0
    scheme: str = "mcs"
    grid: tuple = (160, 80)
    time_steps: int = 50
    rannacher: int = 2
    steps_per_year: float = 80.0
    richardson: bool = True
    accuracy: str = "accurate"

    def __post_init__(self) -> None:
        name = str(self.name).strip().lower().replace("_", "-")
        if name in ("bs", "bsm", "blackscholes"):
            name = "black-scholes"
        if name in ("crr", "bopm", "tree"):
            name = "binomial"
        if name in ("alo", "qdfp"):
            name = "spectral"
        if name not in METHODS:
            raise InvalidInputError("method", None, self.name, f"unknown method; expected one of {list(METHODS)}")
        object.__setattr__(self, "name", name)
        if self.precision not in PRECISIONS:
            raise InvalidInputError("precision", None, self.precision, f"expected one of {list(PRECISIONS)}")
        if self.device not in DEVICES:
            raise InvalidInputError("device", None, self.device, f"expected one of {list(DEVICES)}")
        scheme = str(self.scheme).strip().lower().replace("_", "-")
        scheme = {"douglas": "do", "craig-sneyd": "cs", "modified-craig-sneyd": "mcs", "hundsdorfer-verwer": "hv"}.get(scheme, scheme)
        if scheme not in ADI_SCHEMES:
            raise InvalidInputError("scheme", None, self.scheme, f"unknown ADI scheme; expected one of {list(ADI_SCHEMES)}")
        object.__setattr__(self, "scheme", scheme)
        accuracy = str(self.accuracy).strip().lower().replace("_", "-").replace(" ", "-")
        accuracy = "high-precision" if accuracy in ("high", "highprecision") else accuracy
        if accuracy not in SPECTRAL_ACCURACIES:
            raise InvalidInputError("accuracy", None, self.accuracy,
                                    f"unknown spectral accuracy; expected one of {list(SPECTRAL_ACCURACIES)}")
        object.__setattr__(self, "accuracy", accuracy)
        try:
            grid = tuple(int(g) for g in self.grid)
        except (TypeError, ValueError):
            grid = ()
        if len(grid) != 2 or min(grid) < 5:
            raise InvalidInputError("grid", None, self.grid, "expected two node counts (spot, variance), each >= 5")
        object.__setattr__(self, "grid", grid)
        for name in ("time_steps", "rannacher"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < (1 if name == "time_steps" else 0):
                raise InvalidInputError(name, None, v, "expected a whole number >= " + ("1" if name == "time_steps" else "0"))
        spy = self.steps_per_year
        if isinstance(spy, (bool, np.bool_)) or not isinstance(spy, (int, float, np.integer, np.floating)) \
                or not (math.isfinite(float(spy)) and 0.0 <= float(spy) <= 1e6):
            raise InvalidInputError("steps_per_year", None, spy, "expected a number in [0, 1e6]")
        object.__setattr__(self, "steps_per_year", float(spy))
        if not isinstance(self.richardson, (bool, np.bool_)):
            raise InvalidInputError("richardson", None, self.richardson, "expected true or false")
        object.__setattr__(self, "richardson", bool(self.richardson))
        payoff = str(self.payoff).strip().lower()
        if payoff not in PAYOFFS:
            raise InvalidInputError("payoff", None, self.payoff, f"unknown payoff; expected one of {list(PAYOFFS)}")
        object.__setattr__(self, "payoff", payoff)
        eps = np.asarray(self.eps, dtype=np.float64) if not isinstance(self.eps, str) else np.array(np.nan)
        if not (np.all(np.isfinite(eps)) and np.all(eps > 0)):
            raise InvalidInputError("eps", None, self.eps, "MLMC target error must be a finite number > 0")
        if not isinstance(self.seed, (int, np.integer)) or int(self.seed) < 0:
            raise InvalidInputError("seed", None, self.seed, "expected a whole number >= 0")
        if not (isinstance(self.iv_tolerance, (int, float)) and 0 < float(self.iv_tolerance) <= 0.01):
            raise InvalidInputError("iv_tolerance", None, self.iv_tolerance, "expected a number in (0, 0.01]")
        if np.ndim(self.steps) == 0:
            s, errs = validate_steps(self.steps, 1)
            if errs:
                raise InvalidInputError("steps", None, errs[0].value, errs[0].reason)
            object.__setattr__(self, "steps", int(s[0]))

    def steps_for(self, n: int) -> np.ndarray:
        """Per-option steps as an int64 array of length n.

        Raises:
            InvalidInputError: a step count out of range or of the wrong length.
        """
        s, errs = validate_steps(self.steps, n)
        if errs:
            e = errs[0]
            raise InvalidInputError("steps", e.row, e.value, e.reason, others=len(errs) - 1)
        return s


def _nan(n: int) -> np.ndarray:
    return np.full(n, np.nan)


def object_full(shape: int | tuple, value: Any) -> np.ndarray:
    """An object array holding ``value`` everywhere (one shared reference). ``np.full(n, "ok",
    dtype=object)`` goes through a NumPy string array and makes one new Python string per
    element: ten times slower (10 ms for 200,000 rows)."""
    out = np.empty(shape, dtype=object)
    out.fill(value)
    return out


@dataclass
class Result:
    """Prices and Greeks for a batch, arrays of shape (n,).

    ``price`` in currency units; ``delta`` (dV/dS), ``gamma`` (d2V/dS2), ``theta`` (dV/dt per
    year of calendar time, so usually negative), ``vega`` (dV/dvolatility, per 1.00 of
    volatility), ``rho`` (dV/drate, per 1.00 of rate) and ``dividend_rho`` (dV/dq, per 1.00 of
    continuous dividend yield). NaN where not computed or where the row failed. ``status`` is ``"ok"`` or ``"error"`` per row with ``error`` the reason;
    ``device`` names what priced it (``"cpu"``, ``"gpu:0 ..."``) and ``via`` whether it ran
    ``"in-process"`` or on the ``"daemon"``. A column may be a read-only array (the NaN Greeks
    of a daemon's prices-only reply share one); :meth:`mark_error` copies such a column first.
    ``method``: where set (object array (n,), e.g. by :func:`optiond.pricer.price_portfolio`),
    the method that priced each row (:func:`optiond.engine.row_methods`; ``""`` where none did).
    """

    price: np.ndarray
    delta: np.ndarray
    gamma: np.ndarray
    theta: np.ndarray
    vega: np.ndarray
    rho: np.ndarray
    dividend_rho: np.ndarray
    status: np.ndarray
    error: np.ndarray
    device: str = "cpu"
    via: str = "in-process"
    elapsed_s: float = 0.0
    diagnostics: dict = field(default_factory=dict)
    std_error: np.ndarray | None = None
    method: np.ndarray | None = None

    @classmethod
    def empty(cls, n: int, device: str = "cpu") -> "Result":
        return cls(*(_nan(n) for _ in range(1 + len(GREEK_FIELDS))), status=object_full(n, "ok"), error=object_full(n, ""), device=device)

    def __len__(self) -> int:
        return int(self.price.shape[0])

    @property
    def ok(self) -> np.ndarray:
        return self.status == "ok"

    def mark_error(self, rows: Sequence[int] | np.ndarray, messages: Sequence[str] | str) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        if isinstance(messages, str):
            messages = [messages] * len(rows)
        for name in ("price",) + GREEK_FIELDS:  # a read-only column (a daemon's "no Greeks") is copied first
            if len(rows) and not getattr(self, name).flags.writeable:
                setattr(self, name, np.array(getattr(self, name)))
        for r, m in zip(rows.tolist(), messages):
            self.status[r] = "error"
            self.error[r] = m
            for name in ("price",) + GREEK_FIELDS:
                getattr(self, name)[r] = np.nan
            if self.std_error is not None:
                self.std_error[r] = np.nan
            if self.method is not None:
                self.method[r] = ""

    def columns(self) -> dict[str, np.ndarray]:
        """price, the Greeks, status, error and device as columns of length n (and ``std_error``,
        ``method`` where set)."""
        out = {k: getattr(self, k) for k in ("price",) + GREEK_FIELDS}
        if self.std_error is not None:
            out["std_error"] = self.std_error
        out |= {"status": self.status, "error": self.error, "device": np.full(len(self), self.device, dtype=object)}
        if self.method is not None:
            out["method"] = self.method
        return out

    def scatter(self, into: "Result", rows: np.ndarray) -> None:
        """Write this result's rows into ``into`` at positions ``rows``, with its device and
        its diagnostics (a GPU fallback's note among them) merged into ``into``'s."""
        for k in ("price",) + GREEK_FIELDS + ("status", "error"):
            getattr(into, k)[rows] = getattr(self, k)
        into.device = self.device
        into.diagnostics.update(self.diagnostics)
        if self.std_error is not None:
            if into.std_error is None:
                into.std_error = np.full(len(into), np.nan)
            into.std_error[rows] = self.std_error


#: implied-volatility statuses: the root finders' codes in order (``IV_STATUS_NAMES[code]``),
#: then the engine's own
IV_STATUS_NAMES = ("ok", "below-intrinsic", "no-solution", "not-converged", "invalid")
IV_STATUSES = IV_STATUS_NAMES + ("american-not-supported",)


@dataclass
class ImpliedVol:
    """Implied volatilities of a batch, arrays of shape (n,): the one result of every implied
    volatility solve (engine, daemon reply, pricer adapters).

    ``vol``: annualised decimal volatilities, NaN where there is none. ``status`` per row, one
    of :data:`IV_STATUSES` (``ok``; ``below-intrinsic``: the price is under the exercise value;
    ``no-solution``: above what any volatility in the bracket gives; ``not-converged``;
    ``invalid``: an input was invalid; ``american-not-supported``: the closed form was asked
    for an American option). ``error``: the reason for a non-ok row, ``""`` when none is known
    (for ``invalid``: ``"<field>=<value>: <reason>"``). ``device`` names what solved it
    (``"cpu"``, ``"gpu:0 ..."``), ``via`` whether it ran ``"in-process"`` or on the ``"daemon"``.

    For callers of the earlier ``(vol, status)`` pair it unpacks as ``vol, status_text`` (see
    :meth:`status_text`), so ``vol, status = engine.implied_vol_table(...)`` keeps working.
    """

    vol: np.ndarray
    status: np.ndarray
    error: np.ndarray
    device: str = "cpu"
    via: str = "in-process"
    diagnostics: dict = field(default_factory=dict)

    @classmethod
    def from_codes(cls, vol: np.ndarray, codes: np.ndarray, device: str = "cpu") -> "ImpliedVol":
        """From a root finder's status codes (indices into :data:`IV_STATUS_NAMES`)."""
        status = np.asarray(IV_STATUS_NAMES, dtype=object)[np.asarray(codes, dtype=np.int64)]
        return cls(np.asarray(vol, dtype=np.float64), status, object_full(status.shape[0], ""), device=device)

    @classmethod
    def empty(cls, n: int, status: str = "invalid", device: str = "cpu") -> "ImpliedVol":
        return cls(_nan(n), object_full(n, status), object_full(n, ""), device=device)

    def __len__(self) -> int:
        return int(self.vol.shape[0])

    @property
    def ok(self) -> np.ndarray:
        return self.status == "ok"

    @classmethod
    def from_status_text(cls, vol: Any, text: Any, device: str = "cpu", via: str = "in-process") -> "ImpliedVol":
        """The inverse of :meth:`status_text`: from volatilities and the earlier status strings
        (``"invalid: strike=-1: must be > 0"``), each split at its first ``": "`` into a status
        of :data:`IV_STATUSES` and the reason; a string whose head is no such status stays whole."""
        text = np.array(text, dtype=object).reshape(-1)
        status, error = text.copy(), object_full(text.shape[0], "")
        for i in np.flatnonzero(text != "ok").tolist():
            head, sep, reason = str(text[i]).partition(": ")
            if sep and head in IV_STATUSES:
                status[i], error[i] = head, reason
        return cls(np.asarray(vol, dtype=np.float64), status, error, device=device, via=via)

    def status_text(self) -> np.ndarray:
        """Status and reason as one string per row, the earlier form: ``"invalid: strike=-1: must
        be > 0"`` where a reason is known, else the status alone."""
        out = self.status.copy()
        for i in np.flatnonzero(self.error != "").tolist():
            out[i] = f"{self.status[i]}: {self.error[i]}"
        return out

    def __iter__(self):
        return iter((self.vol, self.status_text()))

    def __getitem__(self, i: int) -> np.ndarray:
        """``iv[0]`` the volatilities, ``iv[1]`` the status text: the earlier pair, indexed."""
        return (self.vol, self.status_text())[i]

    def scatter(self, into: "ImpliedVol", rows: np.ndarray) -> None:
        """Write this result's rows into ``into`` at positions ``rows``, with its device and
        its diagnostics (a GPU fallback's note among them) merged into ``into``'s."""
        for k in ("vol", "status", "error"):
            getattr(into, k)[rows] = getattr(self, k)
        into.device = self.device
        into.diagnostics.update(self.diagnostics)
