"""Static-arbitrage checks of raw-SVI slices and of a surface.

* **Butterfly** (Gatheral & Jacquier 2014, "Arbitrage-free SVI volatility surfaces",
  Quantitative Finance 14(1), §2, eq. (2.1) and Lemma 2.2): a slice is free of butterfly
  arbitrage iff ``g(k) >= 0`` everywhere (with ``w > 0``). Checked on a dense grid
  (:func:`check_grid`: one unit of ``k`` beyond the quoted range on each side, at least
  ``[-1.5, 1.5]``), the grid's minimum refined on a finer grid between its neighbours.
* **Lee's moment bound** (Lee 2004, "The moment formula for implied volatility at extreme
  strikes", Mathematical Finance 14(3)): the wings' slopes ``b (1 +- rho) <= 2``, i.e.
  ``b (1 + |rho|) <= 2``.
* **Minimum variance** ``a + b sigma sqrt(1 - rho^2) >= 0`` (Gatheral 2004).
* **Calendar** (Gatheral & Jacquier 2014, §2, Definition 2.1 / Lemma 2.1): ``w(k, t)``
  non-decreasing in ``t`` at every ``k``; checked between consecutive slices on the grid.

Each check returns a :class:`Check` (``ok``, the worst value and where it occurs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from .svi import SVI, density_g, lee_slopes, min_variance, total_variance

#: the grid's fixed span and its extension beyond the quoted range (log-moneyness)
GRID_SPAN = 1.5
GRID_MARGIN = 1.0
GRID_POINTS = 2001
#: points of the refinement around the grid's minimum of g
REFINE_POINTS = 1001


@dataclass(frozen=True)
class Check:
    """One check's result.

    Attributes:
        name: ``butterfly``, ``lee``, ``min_variance`` or ``calendar``.
        ok: no violation (the value at or beyond its bound, within ``tol``).
        value: butterfly: min ``g``; lee: ``b (1 + |rho|)`` (bound 2); min_variance: the minimum
            total variance; calendar: min over ``k`` of ``w(k, t_{i+1}) - w(k, t_i)``.
        where: the ``k`` of the worst value (None for lee).
        tol: the tolerance ``ok`` used.
    """

    name: str
    ok: bool
    value: float
    where: float | None = None
    tol: float = 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "value": self.value, "where": self.where, "tol": self.tol}


def check_span(k_min: float = 0.0, k_max: float = 0.0) -> tuple[float, float]:
    """The checks' span of ``k``: ``(min(-1.5, k_min - 1), max(1.5, k_max + 1))``.

    Raises:
        ValueError: a quoted range that is not finite or has ``k_max < k_min``.
    """
    if not (math.isfinite(k_min) and math.isfinite(k_max)) or k_max < k_min:
        raise ValueError(f"quoted range must be finite with k_min <= k_max, got [{k_min}, {k_max}]")
    return min(-GRID_SPAN, k_min - GRID_MARGIN), max(GRID_SPAN, k_max + GRID_MARGIN)


def check_grid(k_min: float = 0.0, k_max: float = 0.0, n: int = GRID_POINTS) -> np.ndarray:
    """The check's ``k`` grid (shape ``(n,)``) over :func:`check_span`."""
    return np.linspace(*check_span(k_min, k_max), n)


def butterfly(p: SVI, k_min: float = 0.0, k_max: float = 0.0, *, tol: float = 0.0) -> Check:
    """Butterfly check of a slice: min of Gatheral & Jacquier's ``g`` on :func:`check_grid`,
    refined on a grid of :data:`REFINE_POINTS` between the grid neighbours of the grid minimum
    (two grid steps in :data:`REFINE_POINTS` - 1, a step of ``L x 1e-6`` in ``k`` on a grid of
    span ``L``: the minimum found is within ``max |g''| L^2 x 1.25e-13`` of the true one). A slice whose total variance is not positive on the grid fails with
    ``value = -inf``."""
    p = SVI(*map(float, p))
    k = check_grid(k_min, k_max)
    g = density_g(p, k)  # NaN where w <= 0
    if np.isnan(g).any():
        return Check("butterfly", False, float("-inf"), float(k[int(np.argmin(total_variance(p, k)))]), tol)
    i = int(np.argmin(g))
    fine = np.linspace(k[max(i - 1, 0)], k[min(i + 1, len(k) - 1)], REFINE_POINTS)
    gf = density_g(p, fine)
    j = int(np.argmin(gf))
    gk, gv = (float(fine[j]), float(gf[j])) if gf[j] < g[i] else (float(k[i]), float(g[i]))
    return Check("butterfly", gv >= -tol, gv, gk, tol)


def lee(p: SVI, *, tol: float = 0.0) -> Check:
    """Lee's moment bound: ``b (1 + |rho|) <= 2`` (both wings' slopes at most 2)."""
    v = max(lee_slopes(SVI(*map(float, p))))
    return Check("lee", v <= 2.0 + tol, float(v), None, tol)


def min_var(p: SVI, *, tol: float = 0.0) -> Check:
    """Non-negative minimum total variance; ``where`` is the ``k`` of the minimum,
    ``m - rho sigma / sqrt(1 - rho^2)``."""
    p = SVI(*map(float, p))
    v = min_variance(p)
    where = p.m - p.rho * p.sigma / np.sqrt(max(1.0 - p.rho * p.rho, 1e-300))
    return Check("min_variance", v >= -tol, float(v), float(where), tol)


def calendar(p1: SVI, p2: SVI, k_min: float = 0.0, k_max: float = 0.0, *, tol: float = 0.0) -> Check:
    """Calendar check between an earlier slice ``p1`` and a later ``p2``: min over the grid of
    ``w2(k) - w1(k)`` (negative: the slices cross, calendar arbitrage) and where it occurs."""
    k = check_grid(k_min, k_max)
    d = total_variance(SVI(*map(float, p2)), k) - total_variance(SVI(*map(float, p1)), k)
    i = int(np.argmin(d))
    return Check("calendar", bool(d[i] >= -tol), float(d[i]), float(k[i]), tol)


def calendar_curves(c1, c2, k_min: float = 0.0, k_max: float = 0.0, *, tol: float = 0.0) -> Check:
    """Calendar check between an earlier corrected slice ``c1`` and a later ``c2``
    (:class:`optiond.surface.correction.Curve`): min over the grid of ``c2(x) - c1(x)``, the
    undiscounted call prices over the forward at ``x = e^k`` (non-negative exactly where
    ``w2(k) >= w1(k)``), and where it occurs."""
    k = check_grid(k_min, k_max)
    x = np.exp(k)
    d = c2.calls(x) - c1.calls(x)
    i = int(np.argmin(d))
    return Check("calendar", bool(d[i] >= -tol), float(d[i]), float(k[i]), tol)


def check_slice(p: SVI, k_min: float = 0.0, k_max: float = 0.0, *, tol: float = 0.0) -> dict[str, Check]:
    """The three per-slice checks: ``{"butterfly", "lee", "min_variance"}`` -> :class:`Check`."""
    return {"butterfly": butterfly(p, k_min, k_max, tol=tol), "lee": lee(p, tol=tol),
            "min_variance": min_var(p, tol=tol)}


def curve_butterfly(curve, *, tol: float = 0.0) -> Check:
    """Butterfly check of a corrected slice (:class:`optiond.surface.correction.Curve`): the
    smallest second derivative of its call prices between its end nodes (piecewise constant,
    exact); beyond them the curve is its SVI prior, which :func:`check_slice` checks."""
    v = curve.min_density()
    return Check("butterfly_curve", v >= -tol, v, None, tol)


def check_surface(surface, *, tol: float = 0.0) -> dict:
    """All checks of a :class:`~optiond.surface.model.Surface`: ``{"slices": [per-slice
    checks], "calendar": [Check between slice i and i + 1], "ok": bool}``. The quoted range of a
    slice is read from its ``stats["k_min"]``, ``stats["k_max"]`` (0 when absent). A slice with
    a corrected curve adds :func:`curve_butterfly` to its prior's checks, and the calendar
    between two such slices is :func:`calendar_curves` over both curves' node ranges."""
    rng = [(float(s.stats.get("k_min", 0.0)), float(s.stats.get("k_max", 0.0))) for s in surface.slices]
    per = [check_slice(s.svi, *r, tol=tol) for s, r in zip(surface.slices, rng)]
    for d, s in zip(per, surface.slices):
        if s.curve is not None:
            d["butterfly_curve"] = curve_butterfly(s.curve, tol=tol)
    cal = []
    for a, b, ra, rb in zip(surface.slices, surface.slices[1:], rng, rng[1:]):
        if a.curve is not None and b.curve is not None:
            lo = min(ra[0], rb[0], a.curve.k_range()[0], b.curve.k_range()[0])
            hi = max(ra[1], rb[1], a.curve.k_range()[1], b.curve.k_range()[1])
            cal.append(calendar_curves(a.curve, b.curve, lo, hi, tol=tol))
        else:
            cal.append(calendar(a.svi, b.svi, min(ra[0], rb[0]), max(ra[1], rb[1]), tol=tol))
    ok = all(c.ok for d in per for c in d.values()) and all(c.ok for c in cal)
    return {"slices": per, "calendar": cal, "ok": ok}


__all__ = ["Check", "butterfly", "calendar", "calendar_curves", "curve_butterfly", "check_grid", "check_span", "check_slice", "check_surface", "lee", "min_var"]
