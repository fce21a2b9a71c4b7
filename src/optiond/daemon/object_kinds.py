"""The kinds of named market object the object store keeps (:mod:`optiond.daemon.objects`),
each as a document (a JSON-ready map: what travels over the wire and what the data directory
holds) and as the object the pricing rows read.

=============  ======================================================  ==========================================
kind           document                                                object
=============  ======================================================  ==========================================
``curve``      ``{"days": [...], "rates": [...]}``: tenors in calendar  :class:`optiond.market.curve.ZeroCurve`:
               days (> = 0, distinct), zero rates as annual decimals,   log discount linear in t between points
               continuously compounded                                  (Hagan & West 2006, "raw"), flat beyond
``dividends``  ``{"ex_dates": [...], "amounts": [...]}``: ex-dates as   :class:`CashDividends`
               years from now (numbers) or ``YYYY-MM-DD`` dates (not
               mixed), ascending; cash amounts >= 0 (currency units);
               1 to :data:`MAX_SCHEDULE` dividends
``heston``     ``{"v0", "kappa", "theta", "xi", "rho"}``; a set that   :class:`HestonParameters`
               came from a calibration adds ``"fit"``:
               ``{"rms_vol_pts", "sse", "quotes", "expiries"}``
               (:class:`HestonFitQuality`)
``surface``    an ``optiond.surface`` document                          :class:`optiond.surface.Surface`
               (:meth:`~optiond.surface.Surface.to_dict`)
=============  ======================================================  ==========================================

:func:`build` checks a document and makes the object (an :class:`optiond.models.InvalidInputError`
naming the field says what is wrong), :func:`document` gives it back, :func:`summary` the few
plain fields a listing shows (with ``text``, one line for a cell), :func:`digest` a fingerprint of
the document (two puts of the same document under one name make one version).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import re
from typing import Any, Mapping

import numpy as np

from ..market.curve import DAYS_PER_YEAR, CurveError, ZeroCurve
from ..models import MAX_DIVIDENDS, InvalidInputError

#: the kinds, in the order listings name them
KINDS = ("curve", "dividends", "heston", "surface")
#: the most dividends one schedule object holds (an option still takes at most
#: :data:`optiond.models.MAX_DIVIDENDS` before its expiry)
MAX_SCHEDULE = 64
#: the most points one curve holds
MAX_CURVE_POINTS = 1000
#: the Heston parameters, in the order of the worksheet functions
HESTON_PARAMETERS = ("v0", "kappa", "theta", "xi", "rho")

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclasses.dataclass(frozen=True)
class CashDividends:
    """A cash-dividend schedule: ``ex_dates`` (years from the valuation, or ISO dates) and
    ``amounts`` (currency units), ascending.

    The spot model on the CRR tree (:data:`optiond.models.DIVIDEND_FIELDS`): S drops by the
    amount on each ex-date. A date counts from the valuation instant to 09:30 New York on that
    day (:func:`optiond.dividends.ex_date_years`)."""

    ex_dates: tuple
    amounts: tuple

    @property
    def dated(self) -> bool:
        return bool(self.ex_dates) and isinstance(self.ex_dates[0], str)

    def years(self, valuation: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """``(times, amounts)`` float64 (m,): ex-dates in years from ``valuation`` (a UTC
        ``pandas.Timestamp``; default now, for dated schedules only)."""
        a = np.asarray(self.amounts, dtype=np.float64)
        if not self.dated:
            return np.asarray(self.ex_dates, dtype=np.float64), a
        import pandas as pd

        from ..dividends import ex_date_years

        at = pd.Timestamp.now(tz="UTC") if valuation is None else valuation
        return np.array([ex_date_years(at, d) for d in self.ex_dates], dtype=np.float64), a

    def rows(self, expiry: np.ndarray, valuation: Any = None) -> tuple[np.ndarray, np.ndarray] | None:
        """Each row's schedule, shape (n, m) NaN-padded (the engine's columns): the dividends
        with an ex-date in ``[0, T]`` of the row's T (years, shape (n,)); a past ex-date is
        already in the spot. A row keeps at most ``MAX_DIVIDENDS + 1`` of them, enough for the
        engine to refuse a row over :data:`optiond.models.MAX_DIVIDENDS`
        (:func:`optiond.models.validate_dividends`) without n x :data:`MAX_SCHEDULE` floats.
        None when no row has one."""
        t, a = self.years(valuation)
        T = np.asarray(expiry, dtype=np.float64).reshape(-1)
        with np.errstate(invalid="ignore"):
            keep = (t[None, :] >= 0.0) & (t[None, :] <= T[:, None])
        m = min(int(keep.sum(axis=1).max()) if keep.size else 0, MAX_DIVIDENDS + 1)
        if m == 0:
            return None
        times = np.full((T.size, m), np.nan)
        amounts = np.full((T.size, m), np.nan)
        for i in range(T.size):
            j = np.flatnonzero(keep[i])[:m]
            times[i, : j.size], amounts[i, : j.size] = t[j], a[j]
        return times, amounts


@dataclasses.dataclass(frozen=True)
class HestonFitQuality:
    """How well a calibrated Heston set fits the quotes it was fitted to
    (:class:`optiond.heston_fit.HestonFit`): ``rms_vol_pts``, the RMS implied-volatility error
    in vol points (100 x decimal, model minus market), ``sse`` the sum of the squared errors
    (vol points^2), over ``quotes`` quotes of ``expiries`` expiries."""

    rms_vol_pts: float
    sse: float
    quotes: int
    expiries: int


@dataclasses.dataclass(frozen=True)
class HestonParameters:
    """The Heston model's v0 (initial variance), kappa (mean reversion, per year), theta
    (long-run variance), xi (volatility of variance) and rho (spot-variance correlation);
    ``fit``, the calibration's quality when the set came from one (``HESTON_FIT``), else None."""

    v0: float
    kappa: float
    theta: float
    xi: float
    rho: float
    fit: HestonFitQuality | None = None

    @property
    def feller(self) -> bool:
        """Whether 2 kappa theta >= xi^2 (the variance stays off zero)."""
        return 2.0 * self.kappa * self.theta >= self.xi ** 2

    def values(self) -> tuple[float, ...]:
        """The five parameters in :data:`HESTON_PARAMETERS` order."""
        return (self.v0, self.kappa, self.theta, self.xi, self.rho)


# ---------------------------------------------------------------------------- checks


def _numbers(doc: Mapping[str, Any], key: str, *, low: int = 1, high: int) -> list:
    v = doc.get(key)
    if not isinstance(v, (list, tuple)) or not low <= len(v) <= high:
        raise InvalidInputError(key, None, type(v).__name__ if not isinstance(v, (list, tuple)) else f"{len(v)} values",
                                f"must be a list of {low} to {high} values")
    return list(v)


def _finite(x: Any, key: str, i: int | None = None) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise InvalidInputError(key, i, x, "must be a finite number")
    return float(x)


def _curve(doc: Mapping[str, Any]) -> ZeroCurve:
    days = [_finite(x, "days", i) for i, x in enumerate(_numbers(doc, "days", high=MAX_CURVE_POINTS))]
    rates = _numbers(doc, "rates", high=MAX_CURVE_POINTS)
    if len(rates) != len(days):
        raise InvalidInputError("rates", None, f"{len(rates)} rates", f"one rate per tenor: {len(days)} tenors")
    rates = [_finite(x, "rates", i) for i, x in enumerate(rates)]
    try:
        return ZeroCurve.from_points(days, rates, source="curve")
    except CurveError as e:
        raise InvalidInputError("curve", None, f"{len(days)} points", str(e).removeprefix("curve: ")) from None


def _dividends(doc: Mapping[str, Any]) -> CashDividends:
    when = _numbers(doc, "ex_dates", high=MAX_SCHEDULE)
    amounts = _numbers(doc, "amounts", high=MAX_SCHEDULE)
    if len(amounts) != len(when):
        raise InvalidInputError("amounts", None, f"{len(amounts)} amounts", f"one amount per ex-date: {len(when)}")
    dated = [isinstance(x, str) for x in when]
    if any(dated) and not all(dated):
        raise InvalidInputError("ex_dates", None, "dates and years", "give every ex-date as a date or every one in years")
    if all(dated):
        keys = []
        for i, x in enumerate(when):
            try:
                keys.append(_dt.date.fromisoformat(x.strip()) if _DATE.fullmatch(x.strip()) else None)
            except ValueError:
                keys.append(None)
            if keys[-1] is None:
                raise InvalidInputError("ex_dates", i, x, "must be a date YYYY-MM-DD")
        when = [d.isoformat() for d in keys]
    else:
        when = keys = [_finite(x, "ex_dates", i) for i, x in enumerate(when)]
        for i, x in enumerate(when):
            if x < 0:
                raise InvalidInputError("ex_dates", i, x, "must be >= 0 years from now")
    for i in range(1, len(keys)):
        if keys[i] < keys[i - 1]:
            raise InvalidInputError("ex_dates", i, when[i], "ex-dates must be in ascending order")
    amounts = [_finite(x, "amounts", i) for i, x in enumerate(amounts)]
    for i, x in enumerate(amounts):
        if x < 0:
            raise InvalidInputError("amounts", i, x, "must be >= 0")
    return CashDividends(tuple(when), tuple(amounts))


def _heston(doc: Mapping[str, Any]) -> HestonParameters:
    v = {k: _finite(doc.get(k), k) for k in HESTON_PARAMETERS}
    for k, strict in (("v0", False), ("kappa", True), ("theta", False), ("xi", True)):
        if v[k] < 0 or (strict and v[k] == 0):
            raise InvalidInputError(k, None, v[k], f"must be {'>' if strict else '>='} 0")
    if not -1.0 <= v["rho"] <= 1.0:
        raise InvalidInputError("rho", None, v["rho"], "must be between -1 and 1")
    return HestonParameters(**v, fit=_fit_quality(doc.get("fit")))


def _fit_quality(doc: Any) -> HestonFitQuality | None:
    """A Heston document's ``fit`` map (None when absent): errors >= 0, counts whole >= 1."""
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        raise InvalidInputError("fit", None, type(doc).__name__, "must be a map of rms_vol_pts, sse, quotes, expiries")
    errors = {k: _finite(doc.get(k), f"fit.{k}") for k in ("rms_vol_pts", "sse")}
    counts = {}
    for k in ("quotes", "expiries"):
        x = _finite(doc.get(k), f"fit.{k}")
        if x < 1 or x != int(x):
            raise InvalidInputError(f"fit.{k}", None, x, "must be a whole number >= 1")
        counts[k] = int(x)
    for k, x in errors.items():
        if x < 0:
            raise InvalidInputError(f"fit.{k}", None, x, "must be >= 0")
    return HestonFitQuality(**errors, **counts)


def _surface(doc: Mapping[str, Any]) -> Any:
    from ..surface import points

    try:
        return points.checked_surface(doc)
    except ValueError as e:
        raise InvalidInputError("surface", None, "the document", str(e)) from None


_BUILD = {"curve": _curve, "dividends": _dividends, "heston": _heston, "surface": _surface}


def check_kind(kind: Any) -> str:
    """``kind`` if it is one of :data:`KINDS`.

    Raises:
        InvalidInputError: another value (field ``kind``).
    """
    if kind not in KINDS:
        raise InvalidInputError("kind", None, kind, f"expected one of {list(KINDS)}")
    return kind


def build(kind: str, doc: Any) -> Any:
    """The object of kind ``kind`` a document describes, checked (see the module docstring).

    Raises:
        InvalidInputError: an unknown kind, a document that is not a map, or a bad field
            (named in the error: ``days``, ``rates``, ``ex_dates``, ``amounts``, a Heston
            parameter, ``surface``).
    """
    check_kind(kind)
    if not isinstance(doc, Mapping):
        raise InvalidInputError("document", None, type(doc).__name__, f"a {kind} document must be a map")
    return _BUILD[kind](doc)


def document(kind: str, obj: Any) -> dict:
    """The JSON-ready document of an object :func:`build` made."""
    if kind == "curve":
        return {"days": [float(x) for x in np.asarray(obj.years) * DAYS_PER_YEAR],
                "rates": [float(x) for x in obj.rates]}
    if kind == "dividends":
        return {"ex_dates": list(obj.ex_dates), "amounts": [float(x) for x in obj.amounts]}
    if kind == "heston":  # the five numbers, and the fit's quality only when there is one
        doc = {k: getattr(obj, k) for k in HESTON_PARAMETERS}
        if obj.fit is not None:
            doc["fit"] = dataclasses.asdict(obj.fit)
        return doc
    from ..surface.model import json_ready

    return json_ready(obj.to_dict())


def canonical(doc: Any) -> str:
    """A document as canonical JSON text (sorted keys, no spaces): what is stored and hashed.
    The text of ``json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)``,
    made a container element at a time where a container is large (no single call holds the
    interpreter for the whole of a large document).

    Raises:
        ValueError: a NaN or infinity; TypeError: a value JSON cannot hold.
    """
    parts: list[str] = []
    _canonical(doc, parts)
    return "".join(parts)


def _canonical(obj: Any, out: list) -> None:
    if isinstance(obj, dict) and len(obj) > _CHUNK_ITEMS:
        out.append("{")
        for i, k in enumerate(sorted(obj)):
            if not isinstance(k, str):
                raise TypeError(f"keys must be str, not {type(k).__name__}")
            out.append(("," if i else "") + json.dumps(k) + ":")
            _canonical(obj[k], out)
        out.append("}")
    elif isinstance(obj, (list, tuple)) and len(obj) > _CHUNK_ITEMS:
        out.append("[")
        for i, v in enumerate(obj):
            if i:
                out.append(",")
            _canonical(v, out)
        out.append("]")
    elif isinstance(obj, dict) and any(isinstance(v, (dict, list, tuple)) and len(v) > _CHUNK_ITEMS
                                       for v in obj.values()):
        _canonical_items(obj, out)
    else:
        out.append(json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False))


def _canonical_items(obj: dict, out: list) -> None:
    """A small map holding a large container: its keys one by one."""
    out.append("{")
    for i, k in enumerate(sorted(obj)):
        out.append(("," if i else "") + json.dumps(k) + ":")
        _canonical(obj[k], out)
    out.append("}")


#: containers of more items than this are encoded an item at a time by :func:`canonical`
_CHUNK_ITEMS = 64


def digest(kind: str, doc: Any, text: str | None = None) -> str:
    """A fingerprint of a kind and document (SHA-256 of its canonical JSON; ``text``, that
    JSON when the caller has it already)."""
    return hashlib.sha256((kind + "\n" + (canonical(doc) if text is None else text)).encode()).hexdigest()


def _pct(x: float) -> str:
    return f"{100.0 * x:.4g}%"


def summary(kind: str, obj: Any) -> dict:
    """A few plain fields of an object for listings (JSON-ready), ``text`` among them: one
    short line such as ``5 points, 30 to 3650 days, 4.1% to 4.45%``."""
    if kind == "curve":
        days = np.asarray(obj.years) * DAYS_PER_YEAR
        out = {"points": int(days.size), "days_first": float(days[0]), "days_last": float(days[-1]),
               "rate_min": float(np.min(obj.rates)), "rate_max": float(np.max(obj.rates))}
        span = f"{out['days_first']:g} to {out['days_last']:g} days" if days.size > 1 else f"{out['days_first']:g} days"
        rates = (_pct(out["rate_min"]) if out["rate_min"] == out["rate_max"]
                 else f"{_pct(out['rate_min'])} to {_pct(out['rate_max'])}")
        out["text"] = f"{days.size} point{'s' if days.size > 1 else ''}, {span}, {rates}"
        return out
    if kind == "dividends":
        first, last = obj.ex_dates[0], obj.ex_dates[-1]
        out = {"dividends": len(obj.amounts), "first": first, "last": last, "total": float(sum(obj.amounts)),
               "dated": obj.dated}

        def when(x: Any) -> str:
            return x if obj.dated else f"{x:g} years"

        n = len(obj.amounts)
        span = when(first) if n == 1 else f"{when(first)} to {when(last)}"
        out["text"] = f"{n} dividend{'s' if n > 1 else ''}, {span}, {out['total']:g} in all"
        return out
    if kind == "heston":
        out = {k: getattr(obj, k) for k in HESTON_PARAMETERS} | {"feller": obj.feller}
        out["text"] = ", ".join(f"{k} {getattr(obj, k):g}" for k in HESTON_PARAMETERS) + \
            ("" if obj.feller else " (Feller condition fails)")
        if obj.fit is not None:
            out |= dataclasses.asdict(obj.fit)
            out["text"] += (f"; fit RMS {obj.fit.rms_vol_pts:.3g} vol pts, SSE {obj.fit.sse:.3g} over "
                            f"{obj.fit.quotes} quotes, {obj.fit.expiries} expiries")
        return out
    from .surface_op import describe

    return describe(obj)[0]


# ---------------------------------------------------------------------------- in a store


def put_document(store: Any, name: str, kind: str, doc: Any, claim: Any = None) -> Any:
    """Check ``doc`` and keep the object as the next version of ``name`` in ``store`` (an
    :class:`optiond.daemon.objects.ObjectStore`), unless the live version holds the same
    document (then that entry). ``claim``: the request's
    :class:`~optiond.daemon.objects.Claim`, taken right before the object is kept. Returns the
    :class:`~optiond.daemon.objects.Entry`.

    Raises:
        InvalidInputError: as :func:`build`, or a bad name.
        WrongKind, LimitExceeded, NotWritten: as :meth:`~optiond.daemon.objects.ObjectStore.put`.
        TimeoutError, concurrent.futures.CancelledError: ``claim`` no longer holds.
    """
    obj = build(kind, doc)
    text = canonical(document(kind, obj))
    return store.put(name, kind, obj, len(text), summary(kind, obj), digest(kind, None, text), claim=claim,
                     document=text)


def entry_content(entry: Any, with_document: bool = True) -> dict:
    """An entry as the ``object_put`` and ``object_get`` replies carry it: its listing
    (``name``, ``kind``, ``version``, ``handle``, ``created`` ISO 8601, ``bytes``,
    ``summary``), ``created_s`` (seconds since the epoch: with the handle, what names this
    very object) and, with ``with_document``, its ``document``."""
    out = entry.listing()
    out["created_s"] = entry.created
    if with_document:
        out["document"] = document(entry.kind, entry.payload)
    return out


__all__ = ["HESTON_PARAMETERS", "KINDS", "MAX_CURVE_POINTS", "MAX_SCHEDULE", "CashDividends", "HestonFitQuality",
           "HestonParameters", "build", "canonical", "check_kind", "digest", "document", "entry_content", "put_document", "summary"]
