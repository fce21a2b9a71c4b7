"""A fitted volatility surface: one raw-SVI slice per expiry with the market it was fitted on
and the fit's statistics, its JSON form (versioned schema), and volatility at any (K, T).

Between two slices the total variance is interpolated linearly in T at fixed
log-moneyness ``k = ln(K / F_T)`` (Gatheral & Jacquier 2014, §5: the interpolation keeps the
absence of calendar arbitrage when the slices are ordered, ``w(k, t1) <= w(k, t2)``), and the
forward ``F_T`` log-linearly in T, and the discount factor too (``r_T T`` linear in T); before
the first slice the first slice's total variance is scaled by ``T / T1``; after the last, the
last slice's ``k``-shape at ``w T / T_n``.

Schema 1.1 adds each slice's ``spot`` (the underlying price the chain job priced that expiry
on), which an American price at the surface's volatility needs; a 1.0 document reads with no
spot (``None``), and a 1.0 reader skips the field.

Schema 2.0 adds each slice's ``curve`` (:class:`optiond.surface.correction.Curve`: the nodes
``x = K / F_T`` and undiscounted call prices over the forward of the arbitrage-free correction
towards the quotes; the SVI slice is its prior and its wings beyond the nodes). A slice with a
curve is that curve; one without (a 1.x document) is its SVI slice. A 1.x reader would read a
2.0 document's priors only, so the major version changed; this reader reads both.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..files import write_atomic
from .calls import black_call
from .correction import Curve
from .svi import SVI, total_variance

#: the JSON schema's name and version (a reader refuses another major version)
SCHEMA = "optiond.surface"
SCHEMA_VERSION = "2.0"
#: the major versions a reader accepts
READS = ("1", "2")


@dataclass
class Slice:
    """One expiry's fitted smile.

    Attributes:
        expiry: the expiry's label (``YYYY-MM-DD``).
        T: time to expiry, years (the chain job's clock).
        forward: the expiry's forward ``F_T`` (currency units).
        rate: the zero rate to the expiry (annualised, continuously compounded).
        svi: raw SVI parameters in total variance (:class:`optiond.surface.svi.SVI`).
        stats: the fit's statistics (errors in vol points, share of mids inside the fitted
            bid/ask, confidence in [0, 1], the arbitrage checks' results, quotes used).
        spot: the underlying price the expiry was priced on (currency units; the implied spot
            of an American chain), or None where unknown (a schema 1.0 document).
        curve: the arbitrage-free correction towards the quotes (the slice's smile where
            given; ``svi`` is then its prior and its wings), or None (the SVI slice alone).
    """

    expiry: str
    T: float
    forward: float
    rate: float
    svi: SVI
    stats: dict = field(default_factory=dict)
    spot: float | None = None
    curve: Curve | None = None

    def total_variance(self, k) -> np.ndarray:
        """``w(k)`` at log-moneyness ``k`` (any shape): the curve's where there is one."""
        if self.curve is not None:
            return self.curve.total_variance(k)
        return total_variance(self.svi, k)

    def fitted_range(self) -> tuple[float, float] | None:
        """The quoted ``(k_min, k_max)`` the slice was fitted on (``stats["fit_k_range"]``), or
        None where unknown; beyond it the slice is extrapolated."""
        r = self.stats.get("fit_k_range") if self.stats else None
        return (float(r[0]), float(r[1])) if r and len(r) == 2 and None not in r else None

    def atm_vol(self) -> float:
        """The at-the-money (``k = 0``) implied volatility, annualised decimal; NaN where the
        total variance there is not positive."""
        w0 = float(self.total_variance(0.0))
        return math.sqrt(w0 / self.T) if w0 > 0 else float("nan")


@dataclass
class Surface:
    """Slices ordered by ``T`` (strictly increasing), the underlying and the chain's quote time."""

    underlying: str
    quote_time: str
    slices: list[Slice]
    #: how the slices were fitted: "svi" (raw SVI per expiry) or "svi+correction" (the SVI prior
    #: corrected towards the quotes, :mod:`optiond.surface.correction`)
    method: str = "svi"
    stats: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.slices = sorted(self.slices, key=lambda s: s.T)
        Ts = [s.T for s in self.slices]
        if any(b <= a for a, b in zip(Ts, Ts[1:])):
            raise ValueError("a surface needs one slice per expiry with distinct times to expiry")
        for a, b in zip(self.slices, self.slices[1:]):  # a curve's floor: the earlier slice's curve
            if b.curve is not None and b.curve.floored and b.curve.floor is None:
                if a.curve is None:
                    raise ValueError(f"slice {b.expiry!r}: its curve is floored by the earlier slice, which has none")
                b.curve.floor = a.curve

    def _through_slices(self, y: Any, T: float) -> float:
        """``y`` (one value per slice) at ``T``: linear in T between the slices, extended along
        the nearest two slices' slope beyond them (flat with one slice)."""
        return float(self._through_slices_at(y, np.array([T], dtype=np.float64))[0])

    def _through_slices_at(self, y: Any, T: np.ndarray) -> np.ndarray:
        """:meth:`_through_slices` at each of the times ``T`` (float array), one search for all."""
        Ts = np.array([s.T for s in self.slices])
        y = np.asarray(y, dtype=np.float64)
        if len(Ts) == 1:
            return np.full(np.shape(T), y[0])
        j = np.clip(np.searchsorted(Ts, T), 1, len(Ts) - 1)
        slope = (y[j] - y[j - 1]) / (Ts[j] - Ts[j - 1])
        return y[j - 1] + slope * (T - Ts[j - 1])

    def forward(self, T: float) -> float:
        """``F_T``: log-linear in T through the slices' forwards, extended along the nearest
        two slices' slope beyond them (flat with one slice)."""
        return math.exp(self._through_slices(np.log([s.forward for s in self.slices]), T))

    def rate(self, T: float) -> float:
        """``r_T``, the zero rate to ``T`` > 0 (annualised, continuously compounded): ``r_T T``
        (minus the log discount factor) linear in T through the slices', extended as
        :meth:`forward` is; at a slice's T its own rate (to rounding)."""
        return self._through_slices([s.rate * s.T for s in self.slices], T) / T

    def spot(self, T: float) -> float | None:
        """The underlying price to price an expiry ``T`` on: the slices' spots (one value for an
        American chain, whose expiries all price on its implied spot) linear in T between the
        slices, flat beyond them; None when a slice has no spot (schema 1.0)."""
        spots = [s.spot for s in self.slices]
        if any(x is None for x in spots):
            return None
        return float(np.interp(T, [s.T for s in self.slices], spots))

    def total_variance(self, k, T: float) -> np.ndarray:
        """``w(k, T)``: total implied variance at log-moneyness ``k`` (array) and time ``T`` > 0."""
        s = self.slices
        if T <= s[0].T:
            return s[0].total_variance(k) * (T / s[0].T)
        if T >= s[-1].T:
            return s[-1].total_variance(k) * (T / s[-1].T)
        j = int(np.searchsorted([x.T for x in s], T))
        lo, hi = s[j - 1], s[j]
        t = (T - lo.T) / (hi.T - lo.T)
        return (1.0 - t) * lo.total_variance(k) + t * hi.total_variance(k)

    def vol(self, strike, T: float) -> np.ndarray:
        """Implied volatility (annualised decimal) at ``strike`` (array, currency units) and ``T``."""
        k = np.log(np.asarray(strike, dtype=np.float64) / self.forward(T))
        w = self.total_variance(k, T)
        with np.errstate(invalid="ignore"):
            return np.sqrt(np.where(w >= 0, w, np.nan) / T)

    def vols(self, strike: Any, T: Any, deadline: float | None = None) -> np.ndarray:
        """Implied volatility (annualised decimal) at each point ``(strike[i], T[i])``: what
        :meth:`vol` gives each point alone, for any number of distinct ``T``.

        Each point reads one slice (before the first or after the last) or two (between them,
        weights ``1 - t`` and ``t``); the points are grouped by slice with one sort and every
        slice's smile is evaluated once, on all the points that read it, so the work is
        O(n log n) in the points whatever the number of distinct ``T``.

        Args:
            strike: K, currency units, and ``T``: years > 0; arrays of one shape (or
                broadcasting), float.
            deadline: a :func:`time.monotonic` instant, checked between slices; None: none.

        Returns:
            float64 array of the broadcast shape; NaN where the total variance is negative.

        Raises:
            TimeoutError: ``deadline`` passed before every slice was evaluated.
        """
        K, Tq = np.broadcast_arrays(np.asarray(strike, dtype=np.float64), np.asarray(T, dtype=np.float64))
        shape, K, Tq = K.shape, K.ravel(), Tq.ravel()
        n, sl = K.size, self.slices
        Ts = np.array([s.T for s in sl])
        k = np.log(K / np.exp(self._through_slices_at(np.log([s.forward for s in sl]), Tq)))
        with np.errstate(invalid="ignore"):
            first = Tq <= Ts[0]
            last = ~first & (Tq >= Ts[-1])
        inside = np.flatnonzero(~first & ~last)
        j = np.searchsorted(Ts, Tq[inside])  # Ts[j - 1] < T < Ts[j]
        t = (Tq[inside] - Ts[j - 1]) / (Ts[j] - Ts[j - 1])
        ends = np.flatnonzero(first | last)
        end_slice = np.where(first[ends], 0, len(sl) - 1)
        # (point, slice, weight) of every read; sorted by slice, a point's lower slice comes first
        point = np.concatenate([ends, inside, inside])
        slice_ = np.concatenate([end_slice, j - 1, j])
        weight = np.concatenate([Tq[ends] / Ts[end_slice], 1.0 - t, t])
        order = np.argsort(slice_, kind="stable")
        point, slice_, weight = point[order], slice_[order], weight[order]
        bounds = np.searchsorted(slice_, np.arange(len(sl) + 1))
        part = np.empty(point.size)
        for i, s in enumerate(sl):
            a, b = bounds[i], bounds[i + 1]
            if a == b:
                continue
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the surface's volatilities at {n} points took longer than the request's deadline")
            part[a:b] = weight[a:b] * s.total_variance(k[point[a:b]])
        w = np.bincount(point, weights=part, minlength=n)
        with np.errstate(invalid="ignore"):
            return np.sqrt(np.where(w >= 0, w, np.nan) / Tq).reshape(shape)

    def extrapolated(self, strike, T: float) -> np.ndarray:
        """Whether the surface is extrapolated at ``strike`` (array, currency units) and ``T``:
        ``k = ln(K / F_T)`` outside the quoted range a slice was fitted on
        (:meth:`Slice.fitted_range`), for the slice at ``T`` or either slice ``T`` lies between
        (the nearest slice before the first or after the last); False where a slice has no
        range recorded. Shape of ``strike``, bool."""
        k = np.log(np.asarray(strike, dtype=np.float64) / self.forward(T))
        s = self.slices
        Ts = np.array([x.T for x in s])
        j = int(np.searchsorted(Ts, T))
        near = [s[min(j, len(s) - 1)]] if j == 0 or j >= len(s) or Ts[j] == T else [s[j - 1], s[j]]
        out = np.zeros(k.shape, dtype=bool)
        for x in near:
            r = x.fitted_range()
            if r is not None:
                out |= (k < r[0]) | (k > r[1])
        return out

    def density(self, strike, T: float) -> np.ndarray:
        """The risk-neutral density of the underlying at ``T`` at ``strike`` (array, currency
        units; per unit of currency): ``d^2 C / dK^2`` of the undiscounted call
        ``C = F_T c(K / F_T, sqrt(w))`` at the surface's total variance, by central
        differences with a step of ``1e-4 K`` (Breeden & Litzenberger 1978). NaN where the
        total variance is not positive."""
        K = np.asarray(strike, dtype=np.float64)
        F = self.forward(T)
        h = 1e-4 * K

        def call(k_abs):
            w = self.total_variance(np.log(k_abs / F), T)
            with np.errstate(invalid="ignore"):
                return F * black_call(k_abs / F, np.sqrt(np.where(w > 0, w, np.nan)))

        return (call(K + h) - 2.0 * call(K) + call(K - h)) / (h * h)

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, "underlying": self.underlying,
                "quote_time": self.quote_time, "method": self.method, "stats": self.stats,
                "slices": [{"expiry": s.expiry, "T": s.T, "forward": s.forward, "rate": s.rate, "spot": s.spot,
                            "svi": s.svi._asdict(), "curve": None if s.curve is None else s.curve.to_dict(),
                            "stats": s.stats} for s in self.slices]}

    def to_json(self, path: str | None = None) -> str:
        text = json.dumps(json_ready(self.to_dict()), indent=1, allow_nan=False)
        if path is not None:
            write_atomic(path, text + "\n")
        return text

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Surface":
        """The surface of :meth:`to_dict`.

        Raises:
            ValueError: not an ``optiond.surface`` document, or another major version.
        """
        if d.get("schema") != SCHEMA or str(d.get("version", "")).split(".")[0] not in READS:
            raise ValueError(f"not an {SCHEMA} document of version {' or '.join(v + '.x' for v in READS)}")
        slices = []
        for s in d["slices"]:
            p = SVI(**s["svi"])
            c = s.get("curve")
            curve = None if c is None else Curve.from_dict(c, p)  # a floor: linked by __post_init__
            slices.append(Slice(s["expiry"], float(s["T"]), float(s["forward"]), float(s["rate"]), p,
                                dict(s.get("stats", {})), None if s.get("spot") is None else float(s["spot"]), curve))
        return cls(d["underlying"], d["quote_time"], slices, d.get("method", "svi"), dict(d.get("stats", {})))

    @classmethod
    def from_json(cls, text_or_path: str) -> "Surface":
        text = text_or_path
        if not text_or_path.lstrip().startswith("{"):
            with open(text_or_path, encoding="utf-8") as f:
                text = f.read()
        return cls.from_dict(json.loads(text))


def load(path: str) -> Surface:
    """The surface a JSON file holds (:meth:`Surface.from_json`; schema 1.x or 2.x): then
    ``.vol(K, T)``, ``.total_variance(k, T)``, ``.density(K, T)``, ``.extrapolated(K, T)``.

    Raises:
        OSError: the file cannot be read. ValueError: not JSON, or not an ``optiond.surface``
        document of a version this reader reads.
    """
    with open(path, encoding="utf-8") as f:
        return Surface.from_json(f.read())


def json_ready(obj: Any) -> Any:
    """JSON-ready: NumPy scalars and arrays as Python numbers and lists, NaN and inf as None."""
    t = type(obj)
    if t is float:  # the common leaves first (a large document has millions)
        return obj if math.isfinite(obj) else None
    if t is str or t is int or t is bool or obj is None:
        return obj
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_ready(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


__all__ = ["SCHEMA", "SCHEMA_VERSION", "Slice", "Surface", "json_ready", "load"]
