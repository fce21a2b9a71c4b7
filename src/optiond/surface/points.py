"""Volatilities and prices at points ``(K, T)`` of a fitted surface, the fit of a priced chain
that keeps each expiry's spot, and the check of a surface document.

What the daemon's surface requests answer (``SURFACE_VOL`` and ``SURFACE_PRICE`` in Excel),
computed here so that the daemon and a script give the same numbers:

* :func:`fit_chain`: :func:`optiond.surface.fit.fit_surface` of the chain job's output, each
  slice with the spot its expiry was priced on (schema 1.1), which American prices need;
* :func:`vols`: the surface's implied volatility at each point (:meth:`Surface.vol`, through
  :func:`optiond.surface.theo.fitted_vol`);
* :func:`prices`: the price and Greeks at that volatility, priced as
  :func:`optiond.surface.theo.apply_surface` prices a chain's theo values (the CRR tree for
  American rows, the closed form for European ones);
* :func:`checked_surface`: a surface document (JSON text or its map) read and checked.

**The rule in time.** A point's ``T`` must lie within the surface's expiries,
``[T_first, T_last]`` (:func:`optiond.surface.theo.time_range`, the rule of the chain's theo
values): a surface fitted to quotes says nothing beyond its first and last expiry, so a point
outside is that row's error, never an extrapolation. In strike any ``K > 0`` is answered: the
SVI wings beyond the quoted strikes are the fit's own extrapolation, within Lee's bound.

**The market at T.** ``F_T`` is :meth:`Surface.forward`, ``r_T`` :meth:`Surface.rate` (both
log-linear in T between slices), ``S`` :meth:`Surface.spot` and the carry
``q = r_T - ln(F_T / S) / T``, so that ``S exp((r_T - q) T) = F_T``. A European price is then
Black-76 on ``F_T`` discounted at ``r_T`` whatever ``S`` is (a surface without spots prices
Europeans on ``S = F_T exp(-r_T T)``); an American price depends on the spot through the early
exercise, so on a surface without spots (schema 1.0) it is that row's error.

Row errors read ``field=value: reason`` (:class:`optiond.models.RowError`), the fields being
``strike``, ``expiry``, ``kind`` and ``style``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from .. import pricer as _pricer
from ..chain import DEFAULT_STEPS
from ..market.underlyings import one_underlying
from ..models import (GREEK_FIELDS, KIND_CODES, KIND_NAMES, STYLE_CODES, STYLE_NAMES, ImpliedVol, Result, RowError,
                      object_full, pd_numeric)
from .fit import fit_surface
from .model import Surface
from .theo import THEO_GREEKS, apply_surface, fitted_vol, time_range


def fit_chain(chain_out: pd.DataFrame, **kw: Any) -> Surface:
    """:func:`optiond.surface.fit.fit_surface` of a priced chain, each slice's ``spot`` set to
    the median ``spot`` of its expiry's rows (the price the chain job priced them on; None
    where no row has a finite one).

    Args:
        chain_out: :func:`optiond.chain.price_chain`'s output.
        kw: ``underlying``, ``quote_time`` as :func:`~optiond.surface.fit.fit_surface`.

    Raises:
        ValueError: as :func:`~optiond.surface.fit.fit_surface` (a missing column, no expiry
            with enough quotes), or a chain of several underlyings.
    """
    if "underlying" in chain_out.columns:  # the chain's one symbol names the surface (not an invalid row's cell)
        kw.setdefault("underlying", one_underlying(chain_out["underlying"], "a surface fit") or None)
    surface = fit_surface(chain_out, **kw)
    spot = pd.to_numeric(chain_out["spot"], errors="coerce") if "spot" in chain_out.columns else None
    medians = {} if spot is None else spot.groupby(chain_out["expiry"].astype(str)).median().to_dict()
    for s in surface.slices:
        S = medians.get(s.expiry, math.nan)
        s.spot = float(S) if math.isfinite(S) and S > 0 else None
    return surface


def checked_surface(doc: str | Mapping[str, Any]) -> Surface:
    """A surface from its JSON text or map (:meth:`Surface.to_dict`), checked.

    Raises:
        ValueError: not JSON, not an ``optiond.surface`` document of this major version, a
            missing or mistyped field, no slice, or a slice whose numbers cannot be a fit's
            (T, forward or sigma not > 0, rate not finite, b < 0, |rho| >= 1, a spot not > 0),
            with the reason.
    """
    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except ValueError as e:
            raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, Mapping):
        raise ValueError(f"a surface document is a JSON object, not {type(doc).__name__}")
    try:
        surface = Surface.from_dict(dict(doc))
    except KeyError as e:
        raise ValueError(f"missing field {e} in the surface document") from None
    except (TypeError, AttributeError) as e:
        raise ValueError(f"a field of the surface document has the wrong type ({e})") from None
    if not surface.slices:
        raise ValueError("the surface document has no slice")
    for s in surface.slices:
        p = s.svi
        checks = ((math.isfinite(s.T) and s.T > 0, "T must be a finite number > 0"),
                  (math.isfinite(s.forward) and s.forward > 0, "forward must be a finite number > 0"),
                  (math.isfinite(s.rate), "rate must be a finite number"),
                  (all(math.isfinite(float(x)) for x in p), "the SVI parameters must be finite numbers"),
                  (p.b >= 0 and p.sigma > 0 and abs(p.rho) < 1, "SVI needs b >= 0, sigma > 0 and |rho| < 1"),
                  (s.spot is None or (math.isfinite(s.spot) and s.spot > 0), "spot must be a finite number > 0"))
        for ok, why in checks:
            if not ok:
                raise ValueError(f"slice {s.expiry!r}: {why}")
    return surface


def _points(surface: Surface, strike: Any, expiry: Any) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """The points as float arrays of one length n (scalars broadcast) and each bad row's
    message: a strike or T that is not a finite number > 0, a T outside the surface's
    expiries."""
    K, T = (np.atleast_1d(pd_numeric(v)).astype(np.float64) for v in (strike, expiry))
    K, T = (np.array(a) for a in np.broadcast_arrays(K, T))
    if K.ndim != 1:
        raise ValueError("strike and expiry must be scalars or 1-D of one length")
    lo, hi = time_range(surface)
    span = (f"must lie within the surface's expiries, {surface.slices[0].T:.6g} to {surface.slices[-1].T:.6g} "
            f"years (no extrapolation in time)")
    errors: dict[int, str] = {}
    for field, x in (("strike", K), ("expiry", T)):
        with np.errstate(invalid="ignore"):
            bad = ~(np.isfinite(x) & (x > 0))
            if field == "expiry":
                bad |= ~((x >= lo) & (x <= hi))
        for i in np.flatnonzero(bad).tolist():
            v = float(x[i])
            why = "not a finite number" if not math.isfinite(v) else "must be > 0" if v <= 0 else span
            errors.setdefault(i, RowError(i, field, v, why).message)
    return K, T, errors


def vols(surface: Surface, strike: Any, expiry: Any, deadline: float | None = None) -> ImpliedVol:
    """The surface's implied volatility at each ``(K, T)``.

    Args:
        surface: the fitted surface.
        strike: K, currency units: a scalar or shape (n,).
        expiry: T, years: a scalar or shape (n,) (scalars broadcast).
        deadline: a :func:`time.monotonic` instant to stop at (None: none).

    Returns:
        :class:`optiond.models.ImpliedVol`: ``vol`` annualised decimals, :meth:`Surface.vol`
        at each point; ``status`` ``"invalid"`` with the reason in ``error`` for a strike or T
        that is not a finite number > 0, a T outside the surface's expiries (see the module
        docstring), or a point where the surface's total variance is negative.

    Raises:
        ValueError: ``strike`` and ``expiry`` of different lengths, or not 1-D.
        TimeoutError: ``deadline`` passed first.
    """
    K, T, errors = _points(surface, strike, expiry)
    n = K.shape[0]
    vol = fitted_vol(pd.DataFrame({"strike": K, "expiry_years": T}), surface, deadline)
    status, error = object_full(n, "ok"), object_full(n, "")
    for i in np.flatnonzero(~np.isfinite(vol)).tolist():
        status[i] = "invalid"
        error[i] = errors.get(i) or RowError(i, "strike", float(K[i]), "the surface's total variance is negative "
                                                                          "here").message
    return ImpliedVol(vol, status, error, device="cpu")


def _labels(values: Any, codes: Mapping[str, int], names: tuple[str, ...], n: int) -> np.ndarray:
    """Kind or style cells as their names (``"call"``, ``"american"``...), "" where unknown."""
    cells = np.broadcast_to(np.asarray(values, dtype=object), (n,))
    out = object_full(n, "")
    for i, v in enumerate(cells.tolist()):
        code = codes.get(v.strip().lower()) if isinstance(v, str) else None
        if code is not None:
            out[i] = names[code]
    return out


def prices(surface: Surface, strike: Any, expiry: Any, kind: Any, style: Any = "american",
           pricer: _pricer.Pricer | None = None, steps: int = DEFAULT_STEPS) -> Result:
    """The price and Greeks of each option at the surface's volatility at its ``(K, T)``, on
    the surface's forward, rate and spot at T (the module docstring's market).

    Args:
        surface: the fitted surface.
        strike: K, currency units; expiry: T, years; kind: ``"call"``/``"put"``; style:
            ``"american"``/``"european"``: each a scalar or shape (n,) (scalars broadcast).
        pricer: in-process engine (default) or a daemon client; one ``price_table`` call per
            exercise style (:func:`optiond.surface.theo.apply_surface`).
        steps: CRR steps of American prices.

    Returns:
        :class:`optiond.models.Result`: ``price`` in currency units and the Greeks
        (:class:`~optiond.models.Result`'s units) at the surface's volatility; ``status``
        ``"error"`` with the reason in ``error`` for a bad strike or T (as :func:`vols`), an
        unknown kind or style, an American option on a surface without spots, or a point the
        pricer gives no value for.

    Raises:
        ValueError: ``strike`` and ``expiry`` of different lengths, or not 1-D.
    """
    K, T, errors = _points(surface, strike, expiry)
    n = K.shape[0]
    kinds = _labels(kind, KIND_CODES, KIND_NAMES, n)
    styles = _labels(style, STYLE_CODES, STYLE_NAMES, n)
    for field, labels, given in (("kind", kinds, kind), ("style", styles, style)):
        cells = np.broadcast_to(np.asarray(given, dtype=object), (n,))
        expected = "'call' or 'put'" if field == "kind" else "'american' or 'european'"
        for i in np.flatnonzero(labels == "").tolist():
            errors.setdefault(i, RowError(i, field, cells[i], f"unknown {field}; expected {expected}").message)
    F, r, S = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    good = np.array([i not in errors for i in range(n)], dtype=bool)
    for t in np.unique(T[good]).tolist():
        rows = good & (T == t)
        Ft, rt, spot = surface.forward(t), surface.rate(t), surface.spot(t)
        F[rows], r[rows], S[rows] = Ft, rt, Ft * math.exp(-rt * t) if spot is None else spot
        if spot is None:
            for i in np.flatnonzero(rows & (styles == "american")).tolist():
                errors[i] = RowError(i, "style", "american", "the surface has no spot (a schema 1.0 document), which "
                                     "an American price needs; fit it again, or price it European").message
    res = Result.empty(n)
    rows = np.array([i for i in range(n) if i not in errors], dtype=np.int64)
    if rows.size:
        Tr = T[rows]
        frame = pd.DataFrame({"type": kinds[rows], "style": styles[rows], "strike": K[rows], "expiry_years": Tr,
                              "spot": S[rows], "rate": r[rows], "dividend_yield": r[rows] - np.log(F[rows] / S[rows]) / Tr,
                              "mid": np.nan})
        out = apply_surface(frame, surface, pricer, steps=steps, method="binomial")  # American: the CRR tree, as documented
        res.device = out.attrs.get("device", res.device)
        res.price[rows] = out["theo"].to_numpy()
        for g, col in zip(GREEK_FIELDS, THEO_GREEKS):
            getattr(res, g)[rows] = out[col].to_numpy()
        iv = out["iv_fit"].to_numpy()
        for j in np.flatnonzero(~np.isfinite(res.price[rows])).tolist():
            i = int(rows[j])
            errors[i] = RowError(i, "strike", float(K[i]), f"no price at the surface's volatility {iv[j]:.6g} "
                                                          f"here").message
    if errors:
        bad = sorted(errors)
        res.mark_error(bad, [errors[i] for i in bad])
    return res


__all__ = ["checked_surface", "fit_chain", "prices", "vols"]
