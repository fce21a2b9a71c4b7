"""A zero-rate curve: continuously compounded zero rates by tenor.

The curve holds points ``(t_i, r_i)`` (tenor in years, rate as an annualised decimal,
continuously compounded, so the discount factor is ``D(t) = exp(-r(t) t)``). Between points
the *log discount* ``r·t`` is linear in t (piecewise-constant instantaneous forward rates, the
"raw" interpolation of Hagan & West, "Interpolation methods for curve construction", Applied
Mathematical Finance 13(2), 2006, §3); beyond the ends the zero rate is flat (the first
point's rate before it, the last point's after it).

A file (``--rates FILE.csv``) has the columns ``days,rate``: calendar days to the tenor
(converted to years over 365, the chain's clock) and the continuously compounded zero rate.
US desks take it from the Treasury's daily par yield curve (bills to 1 year), converted to
continuous compounding, or from SOFR futures/OIS; any consistent zero curve will do.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: days per year of the chain's clock (525,600 minutes)
DAYS_PER_YEAR = 365.0


class CurveError(ValueError):
    """A rate curve that cannot be used (its message says why, naming the row)."""


@dataclass(frozen=True)
class ZeroCurve:
    """Zero rates ``rates[i]`` (annualised, continuously compounded) at tenors ``years[i]``
    (strictly increasing, >= 0). Build with :meth:`flat`, :meth:`from_points` or
    :meth:`from_csv`."""

    years: np.ndarray
    rates: np.ndarray
    source: str = ""

    @classmethod
    def flat(cls, rate: float) -> "ZeroCurve":
        """One rate at every tenor."""
        r = float(rate)
        if not np.isfinite(r):
            raise CurveError(f"rate {rate!r} is not a finite number")
        return cls(np.array([0.0]), np.array([r]), source=f"flat {r:g}")

    @classmethod
    def from_points(cls, days, rates, source: str = "") -> "ZeroCurve":
        """From tenors in calendar days and zero rates (annual decimals).

        Raises:
            CurveError: no point, a blank or non-numeric cell (a gap), negative or repeated
                days, or a rate outside (-1, 1) (a percentage such as 4.3 for 4.3 % is refused).
        """
        d = pd.to_numeric(pd.Series(days, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
        r = pd.to_numeric(pd.Series(rates, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
        if d.size == 0:
            raise CurveError(f"{source or 'rate curve'}: no points")
        if d.size != r.size:
            raise CurveError(f"{source or 'rate curve'}: {d.size} tenors but {r.size} rates")
        where = source or "rate curve"
        for i in range(d.size):
            if not np.isfinite(d[i]):
                raise CurveError(f"{where}: row {i + 1}: days {days[i]!r} is blank or not a number")
            if not np.isfinite(r[i]):
                raise CurveError(f"{where}: row {i + 1}: rate {rates[i]!r} is blank or not a number")
            if d[i] < 0:
                raise CurveError(f"{where}: row {i + 1}: days {d[i]:g} is negative")
            if not -1.0 < r[i] < 1.0:
                raise CurveError(f"{where}: row {i + 1}: rate {r[i]:g} is not an annual decimal (0.043 for 4.3 %)")
        order = np.argsort(d, kind="stable")
        d, r = d[order], r[order]
        if np.any(np.diff(d) == 0):
            dup = d[np.flatnonzero(np.diff(d) == 0)[0]]
            raise CurveError(f"{where}: days {dup:g} appears twice")
        return cls(d / DAYS_PER_YEAR, r, source=source)

    @classmethod
    def from_csv(cls, path: str) -> "ZeroCurve":
        """Read a ``days,rate`` CSV (header required).

        Raises:
            CurveError: unreadable file, missing columns, or any problem of :meth:`from_points`.
        """
        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise CurveError(f"rate curve {path}: cannot read: {e}") from e
        cols = {c.strip().lower(): c for c in df.columns}
        if "days" not in cols or "rate" not in cols:
            raise CurveError(f"rate curve {path}: expected columns days,rate; found {list(df.columns)}")
        return cls.from_points(df[cols["days"]].tolist(), df[cols["rate"]].tolist(), source=str(path))

    def zero_rate(self, t) -> np.ndarray:
        """Zero rate at tenors ``t`` (years, array-like, >= 0): linear in r·t between points,
        flat beyond the ends."""
        t = np.asarray(t, dtype=np.float64)
        if self.years.size == 1:
            return np.full(t.shape, self.rates[0])
        lo, hi = self.years[0], self.years[-1]
        rt = np.interp(t, self.years, self.rates * self.years)
        with np.errstate(invalid="ignore", divide="ignore"):
            inner = rt / t
        return np.where(t <= lo, self.rates[0], np.where(t >= hi, self.rates[-1], inner))

    def zero_rate_one(self, t: float) -> float:
        """:meth:`zero_rate` at one tenor ``t`` (years), without NumPy's cost per call (a
        worksheet cell): the same arithmetic as ``np.interp``, so the same bits."""
        ys = self.years.tolist()
        rs = self.rates.tolist()
        t = float(t)
        if len(ys) == 1 or t <= ys[0]:
            return rs[0]
        if t >= ys[-1]:
            return rs[-1]
        if t != t:
            return t
        j = bisect.bisect_right(ys, t) - 1
        if t == ys[j]:
            return rs[j] * ys[j] / t
        lo, hi = rs[j] * ys[j], rs[j + 1] * ys[j + 1]
        slope = (hi - lo) / (ys[j + 1] - ys[j])
        return (slope * (t - ys[j]) + lo) / t

    def discount(self, t) -> np.ndarray:
        """Discount factors ``exp(-r(t) t)`` at tenors ``t`` (years)."""
        t = np.asarray(t, dtype=np.float64)
        return np.exp(-self.zero_rate(t) * t)
