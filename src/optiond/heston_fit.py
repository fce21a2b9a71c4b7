"""Heston calibration: (v0, kappa, theta, xi, rho) of one underlying fitted to its European smiles.

The fit (:func:`fit_heston`) is weighted least squares by :func:`scipy.optimize.least_squares`
(trust-region reflective, box bounds :data:`BOUNDS`), the model priced by the semi-analytic
engine (:mod:`optiond.kernels.heston`: Lewis's single integral of the "little trap"
characteristic function) on each expiry's forward ``F_T`` and discount factor ``D_T`` — the
quantities the chain job solves per expiry from the quotes themselves
(:mod:`optiond.market.forwards`) — so no spot, rate or dividend assumption enters.

Residuals (``residual``), one per out-of-the-money quote:

* ``"price"`` (default): ``(C_model - C_market) / vega_market``, the price error divided by
  the Black vega at the market's implied volatility: to first order the implied-volatility
  error, without an implied-volatility solve per evaluation (vega-weighted least squares, as
  in Christoffersen, Heston & Jacobs 2009 and Cui, del Baño Rollin & Germano 2017, §5);
* ``"vol"``: the exact implied-volatility error ``IV(C_model) - IV_market`` (Black inversion of
  every model price; the error QuantLib's ``HestonModelHelper`` with ``ImpliedVolError`` uses).

Weights (``weights``): ``"none"``; ``"spread"`` (each residual divided by half the quote's
bid–ask implied-volatility spread, floored at :data:`MIN_HALF_SPREAD`: a quote counts in
proportion to how precisely the market pins it). Reported errors are always in implied-volatility
points (100 x decimal), model IV minus market IV, per expiry (RMS) and in total (sum of squares).

Feller condition ``2 kappa theta >= xi^2`` (the variance never reaches zero): always reported
(:attr:`HestonFit.feller`); with ``feller=True`` it is imposed by fitting ``xi = f sqrt(2 kappa
theta)`` with ``f`` in (0, 1].

American chains (``exercise="american"``, :func:`fit_heston`): the residual is the American
price error over the Black vega, ``(P_model - P_mid) / vega_market`` (in vol points to first
order), every contract priced by the ADI solver (:mod:`optiond.kernels.adi`) on the expiry's
spot, rate and carry (``q = r - ln(F/S)/T``): each evaluation of the residuals is ONE batched
ADI solve of all the selected contracts, and each Jacobian one batched solve of all of them at
the five bumped parameter vectors (forward differences), on the GPU when one is present, else
on the CPU with a warning (minutes for hundreds of contracts). Two stages: the optimiser starts
on a coarse single grid (:data:`AMERICAN_COARSE`), then refines from there on the ADI default
(:data:`AMERICAN_FINAL`, the two-grid Richardson pair of :mod:`optiond.kernels.adi.defaults`:
within 1e-4 of published American references), so the parameters are those of the accurate
pricer. Reported model IVs of an American fit are first order: ``iv_market + (P_model -
P_mid) / vega``.

Inputs come from the chain job (:func:`quotes_from_chain`: per expiry, the out-of-the-money mids'
implied volatilities, strikes, ``T``, ``F_T`` and ``D_T``) or are built directly
(:class:`ExpiryQuotes`). Outputs: :class:`HestonFit` (parameters, SSE, the errors per expiry,
the Feller status, the optimiser's report) and the picture of market against model smiles
(:func:`smiles_figure`, :func:`plot_fit`).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .files import write_with

# the kernels (numba) are imported by the functions that price: ``optiond heston-fit --help``
# reads this module's defaults without them

#: the parameters, in the order of every vector here
PARAMS = ("v0", "kappa", "theta", "xi", "rho")
#: box bounds of the fit (v0 and theta annualised variances, kappa per year, xi, rho)
BOUNDS = {"v0": (1e-4, 4.0), "kappa": (1e-3, 30.0), "theta": (1e-4, 4.0), "xi": (1e-3, 6.0), "rho": (-0.999, 0.999)}
#: the default start (a moderate equity-index set)
START = {"v0": 0.04, "kappa": 2.0, "theta": 0.04, "xi": 0.8, "rho": -0.7}
#: the price integral's absolute tolerance during the fit (the error bound of a price is
#: ``2 FIT_TOL D sqrt(F K) / pi``, about 1e-8 of the forward, i.e. ~1e-6 vol points at the
#: bundled SPX chain's vegas; the SPX fit's parameters agree with a fit at 1e-10 to five
#: digits); the reported errors are recomputed at the engine's default :data:`cpu.TOL`
FIT_TOL = 1e-8
#: the least half bid-ask spread (IV decimal) of the spread weights
MIN_HALF_SPREAD = 0.0025
#: quotes of the chain: expiries of at least this many days, strikes within this many
#: at-the-money standard deviations (``|k| <= K_SD * atm_iv * sqrt(T)``, at least ``K_MIN``)
MIN_DAYS = 7.0
K_SD = 3.0
K_MIN = 0.05
#: most quotes kept per expiry (evenly in k) from a chain
MAX_PER_EXPIRY = 40
RESIDUALS = ("price", "vol")
WEIGHTS = ("none", "spread")
EXERCISES = ("european", "american")
#: the American fit's first stage: a coarse single ADI grid (its prices err ~1e-3)
AMERICAN_COARSE = dict(grid=(80, 40), time_steps=26, steps_per_year=40.0, richardson=False)


def _american_final() -> dict:
    """:data:`AMERICAN_FINAL`, read from :mod:`optiond.kernels.adi.defaults`."""
    from .kernels.adi import defaults as adi_defaults

    return dict(grid=adi_defaults.GRID, time_steps=adi_defaults.MIN_TIME_STEPS,
                steps_per_year=adi_defaults.STEPS_PER_YEAR, richardson=adi_defaults.RICHARDSON)


def __getattr__(name: str) -> Any:
    """``AMERICAN_FINAL``: the American fit's last stage, the ADI default (Richardson over
    160 x 80 and 80 x 40), built on first use (its defaults live beside the ADI kernels)."""
    if name == "AMERICAN_FINAL":
        return _american_final()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: relative forward-difference step of the American fit's Jacobian (floor 1e-3 absolute)
AMERICAN_FD_STEP = 1e-3
#: least-squares stopping rules: European; the American fit's last stage and its coarse stage
EUROPEAN_STOPS = dict(xtol=1e-10, ftol=1e-12, gtol=1e-10)
AMERICAN_STOPS = dict(xtol=1e-8, ftol=1e-10, gtol=1e-8)
AMERICAN_COARSE_STOPS = dict(xtol=1e-6, ftol=1e-6, gtol=1e-6)


@dataclass
class ExpiryQuotes:
    """One expiry's quotes: strikes ``strike`` (currency units), the market implied
    volatilities ``iv`` (annualised decimals) of the out-of-the-money side, ``kind`` (1 call,
    0 put; default: the call for ``K >= F``, the put below), optional bid/ask IVs (for the
    spread weights and the picture); ``T`` in years, ``forward`` F_T, ``discount`` D_T. An
    American fit also needs ``spot`` (the carry is ``r - ln(F/S)/T``) and ``price``, the
    quotes' mid prices (currency units)."""

    expiry: str
    T: float
    forward: float
    discount: float
    strike: np.ndarray
    iv: np.ndarray
    kind: np.ndarray | None = None
    iv_bid: np.ndarray | None = None
    iv_ask: np.ndarray | None = None
    spot: float | None = None
    price: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.strike = np.asarray(self.strike, dtype=np.float64).reshape(-1)
        self.iv = np.asarray(self.iv, dtype=np.float64).reshape(-1)
        if self.kind is None:
            self.kind = (self.strike >= self.forward).astype(np.int8)
        self.kind = np.asarray(self.kind, dtype=np.int8).reshape(-1)
        for name in ("iv_bid", "iv_ask", "price"):
            v = getattr(self, name)
            setattr(self, name, np.full(self.strike.shape, np.nan) if v is None
                    else np.asarray(v, dtype=np.float64).reshape(-1))
        if not (math.isfinite(self.T) and self.T > 0 and math.isfinite(self.forward) and self.forward > 0
                and math.isfinite(self.discount) and self.discount > 0):
            raise ValueError(f"expiry {self.expiry}: T, forward and discount must be finite and > 0 "
                             f"(got {self.T}, {self.forward}, {self.discount})")
        if self.iv.shape != self.strike.shape or self.kind.shape != self.strike.shape:
            raise ValueError(f"expiry {self.expiry}: strike, iv and kind need one value per quote")
        if not (np.all(np.isfinite(self.strike)) and np.all(self.strike > 0)
                and np.all(np.isfinite(self.iv)) and np.all(self.iv > 0)):
            raise ValueError(f"expiry {self.expiry}: strikes and implied volatilities must be finite and > 0")


@dataclass
class HestonFit:
    """A calibration's result.

    ``params``: v0, kappa, theta (annualised variances and per year), xi, rho. ``sse``: the sum
    over quotes of the squared IV error in vol points (100 x decimal; model minus market).
    ``rms_vol_pts``: the RMS error in vol points over all quotes. ``expiries``: per expiry
    ``expiry, T, quotes, rms_vol_pts, max_vol_pts``. ``feller``: ``2 kappa theta - xi^2``
    (``value``), ``satisfied`` and ``imposed``. ``residual``, ``weights``: the fit's settings;
    ``nfev``, ``status``, ``message``: the optimiser's report; ``elapsed_s`` the fit's time.
    ``quotes``: per quote ``expiry, T, strike, k = ln(K/F), iv_market, iv_model, iv_bid,
    iv_ask`` (the picture's data). ``exercise``: the model's exercise; an American fit also
    reports ``solves`` (batched ADI solves) and ``device``."""

    params: dict
    sse: float
    rms_vol_pts: float
    expiries: list
    feller: dict
    residual: str
    weights: str
    nfev: int
    status: int
    message: str
    elapsed_s: float
    quotes: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    exercise: str = "european"
    solves: int = 0
    device: str = "cpu"

    def row(self) -> list[float]:
        """``[v0, kappa, theta, xi, rho, sse]``: the fit as one worksheet row."""
        return [self.params[p] for p in PARAMS] + [self.sse]

    def to_dict(self) -> dict:
        """The result as JSON-ready data (without the per-quote table)."""
        d = asdict(self)
        d.pop("quotes", None)
        return d


def _forward_columns(e: ExpiryQuotes) -> tuple:
    """The engine's columns that price on ``F`` and ``D``: spot F, r = q = -ln(D)/T."""
    r = -math.log(e.discount) / e.T
    return e.forward, r, r


def black_prices(quotes: Sequence[ExpiryQuotes], vol: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """Black (1976) prices ``D Black(F, K, sigma, T)`` of every quote (at the market IVs, or at
    ``vol``, one array per expiry), concatenated in expiry order."""
    from .kernels import black_scholes

    out = []
    for j, e in enumerate(quotes):
        S, r, q = _forward_columns(e)
        sig = e.iv if vol is None else vol[j]
        out.append(black_scholes.bs_price_greeks(e.kind, S, e.strike, e.T, r, q, sig)["price"])
    return np.concatenate(out) if out else np.empty(0)


class _Problem:
    """The stacked quotes of every expiry, in the engine's columns, with the chunk plan made
    once (the parameters are common to all rows, so each expiry's strikes share chunks)."""

    def __init__(self, quotes: Sequence[ExpiryQuotes], tol: float) -> None:
        self.quotes = list(quotes)
        self.tol = tol
        cols = [[], [], [], [], [], []]
        for e in self.quotes:
            S, r, q = _forward_columns(e)
            m = e.strike.size
            for c, v in zip(cols, (e.kind, np.full(m, S), e.strike, np.full(m, e.T), np.full(m, r), np.full(m, q))):
                c.append(np.asarray(v))
        self.kind = np.ascontiguousarray(np.concatenate(cols[0]).astype(np.int8))
        self.S, self.K, self.T, self.r, self.q = (np.ascontiguousarray(np.concatenate(c).astype(np.float64))
                                                  for c in cols[1:])
        self.n = self.S.size
        from .kernels.heston import cpu as heston_cpu

        ones = np.ones(self.n)
        self._price_chunks = heston_cpu.price_chunks
        self.order, self.starts = heston_cpu.plan_chunks(self.T, ones, ones, ones, ones, ones)
        self.sizes = [e.strike.size for e in self.quotes]

    def prices(self, p: np.ndarray, tol: float | None = None) -> np.ndarray:
        v0, kappa, theta, xi, rho = (np.full(self.n, float(x)) for x in p)
        out, _ = self._price_chunks(self.kind, self.S, self.K, self.T, self.r, self.q, v0, kappa, theta, xi, rho,
                                         self.order, self.starts, False, float(tol or self.tol))
        return out[0]

    def model_vols(self, prices: np.ndarray) -> np.ndarray:
        from .kernels import black_scholes

        vol, _ = black_scholes.bs_implied_vol(prices, self.kind, self.S, self.K, self.T, self.r, self.q)
        return vol


def _to_params(x: np.ndarray, feller: bool) -> np.ndarray:
    p = np.array(x, dtype=np.float64)
    if feller:  # x[3] = f in (0, 1]: xi = f sqrt(2 kappa theta)
        p[3] = x[3] * math.sqrt(2.0 * x[1] * x[2])
    return p


class _AmericanProblem:
    """The stacked American quotes on their expiries' spot, rate and carry, priced by ADI: one
    batched solve per call of :meth:`prices`, for any number of parameter vectors at once."""

    def __init__(self, quotes: Sequence[ExpiryQuotes], device: str) -> None:
        self.quotes = list(quotes)
        cols = [[], [], [], [], [], [], []]
        for e in self.quotes:
            if e.spot is None or not (math.isfinite(e.spot) and e.spot > 0):
                raise ValueError(f"expiry {e.expiry}: an American fit needs the spot")
            if not np.all(np.isfinite(e.price)):
                raise ValueError(f"expiry {e.expiry}: an American fit needs every quote's mid price")
            r = -math.log(e.discount) / e.T
            q = r - math.log(e.forward / e.spot) / e.T
            m = e.strike.size
            for c, v in zip(cols, (e.kind, np.full(m, e.spot), e.strike, np.full(m, e.T), np.full(m, r), np.full(m, q),
                                   e.price)):
                c.append(np.asarray(v))
        self.kind = np.concatenate(cols[0]).astype(np.int8)
        self.S, self.K, self.T, self.r, self.q, self.mid = (np.concatenate(c).astype(np.float64) for c in cols[1:])
        self.n = self.S.size
        self.sizes = [e.strike.size for e in self.quotes]
        self.device = device
        self.solves = 0

    def prices(self, P: np.ndarray, settings: dict) -> np.ndarray:
        """American prices, shape (m, n), for the m parameter vectors ``P`` (m, 5): one batched
        ADI solve of m x n contracts."""
        from .kernels import adi

        P = np.atleast_2d(np.asarray(P, dtype=np.float64))
        m = P.shape[0]
        rep = lambda a: np.tile(a, m)  # noqa: E731
        par = [np.repeat(P[:, k], self.n) for k in range(5)]
        out = adi.heston_price_batch(rep(self.kind), "american", rep(self.S), rep(self.K), rep(self.T), rep(self.r),
                                     rep(self.q), *par, device=self.device, **settings)
        self.solves += 1
        return np.asarray(out["price"], dtype=np.float64).reshape(m, self.n)


def _american_device(device: str) -> str:
    """``"gpu"`` when asked or (``"auto"``) when one is present; else ``"cpu"`` with a warning."""
    import warnings

    from .kernels import gpu as kernel_gpu

    if device == "gpu" or (device == "auto" and kernel_gpu.available()):
        return "gpu"
    warnings.warn("no GPU: the American Heston fit prices every contract by ADI on the CPU; expect minutes for "
                  "hundreds of contracts (a GPU takes seconds)", RuntimeWarning, stacklevel=3)
    return "cpu"


def _start_and_bounds(start, bounds, feller: bool) -> tuple:
    b = dict(BOUNDS, **(bounds or {}))
    lo = np.array([b[p][0] for p in PARAMS])
    hi = np.array([b[p][1] for p in PARAMS])
    x0 = np.array([START[p] for p in PARAMS]) if start is None else (
        np.array([start[p] for p in PARAMS], dtype=np.float64) if isinstance(start, dict)
        else np.asarray(start, dtype=np.float64))
    if feller:
        lo[3], hi[3] = 1e-3, 1.0
        x0[3] = x0[3] / math.sqrt(2.0 * x0[1] * x0[2])
    return np.clip(x0, lo + 1e-12 * (hi - lo), hi - 1e-12 * (hi - lo)), lo, hi


def fit_heston(quotes: Sequence[ExpiryQuotes], *, start: dict | Sequence[float] | None = None,
               residual: str = "price", weights: str = "none", feller: bool = False,
               bounds: dict | None = None, tol: float = FIT_TOL, max_nfev: int = 200,
               xtol: float | None = None, ftol: float | None = None, gtol: float | None = None,
               exercise: str = "european", device: str = "auto") -> HestonFit:
    """Fit (v0, kappa, theta, xi, rho) to the quotes of one underlying (module docstring).

    Args:
        quotes: one :class:`ExpiryQuotes` per expiry (at least 5 quotes in all).
        start: the first guess (a dict of :data:`PARAMS` or a 5-sequence), default :data:`START`
            (clipped into the bounds).
        residual: ``"price"`` (vega-scaled price error) or ``"vol"`` (exact IV error; European
            only).
        weights: ``"none"`` or ``"spread"`` (divide by half the bid/ask IV spread).
        feller: impose ``2 kappa theta >= xi^2``.
        bounds: per parameter ``(lo, hi)``, default :data:`BOUNDS`.
        tol: the price integral's tolerance during the fit (:data:`FIT_TOL`; European).
        max_nfev, xtol, ftol, gtol: :func:`scipy.optimize.least_squares`'s stopping rules (each
            stage of an American fit); default 1e-10, 1e-12, 1e-10 (European) or
            :data:`AMERICAN_STOPS` (the last American stage; the coarse stage stops at
            :data:`AMERICAN_COARSE_STOPS`).
        exercise: ``"european"`` (the semi-analytic engine) or ``"american"`` (ADI on the
            quotes' ``spot`` and mid ``price``; :data:`AMERICAN_COARSE`, then
            :data:`AMERICAN_FINAL`).
        device: American fit: ``"auto"`` (the GPU when present), ``"gpu"`` or ``"cpu"``.

    Returns:
        :class:`HestonFit` (European: errors recomputed at the engine's default tolerance;
        American: at :data:`AMERICAN_FINAL`, ``nfev`` counting both stages).

    Raises:
        ValueError: an unknown residual, weights or exercise, fewer than 5 quotes, a start
            outside the bounds' reach, or American quotes without spot or mid prices.
    """
    from scipy.optimize import least_squares

    if residual not in RESIDUALS:
        raise ValueError(f"residual must be one of {list(RESIDUALS)}, not {residual!r}")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {list(WEIGHTS)}, not {weights!r}")
    if exercise not in EXERCISES:
        raise ValueError(f"exercise must be one of {list(EXERCISES)}, not {exercise!r}")
    if exercise == "american" and residual != "price":
        raise ValueError("the American fit takes price residuals (an American IV inversion per evaluation is not done)")
    quotes = [e for e in quotes if e.strike.size]
    n = sum(e.strike.size for e in quotes)
    if n < len(PARAMS):
        raise ValueError(f"a Heston fit needs at least {len(PARAMS)} quotes, got {n}")
    t0 = time.perf_counter()
    stops = dict(AMERICAN_STOPS if exercise == "american" else EUROPEAN_STOPS)
    stops.update({k: v for k, v in (("xtol", xtol), ("ftol", ftol), ("gtol", gtol)) if v is not None})
    x0, lo, hi = _start_and_bounds(start, bounds, feller)
    prob = _Problem(quotes, tol)
    iv_mkt = np.concatenate([e.iv for e in quotes])
    S, K, T, r, q = prob.S, prob.K, prob.T, prob.r, prob.q
    from .kernels import black_scholes

    vega = black_scholes.bs_price_greeks(prob.kind, S, K, T, r, q, iv_mkt)["vega"]
    if weights == "spread":
        spread = np.concatenate([0.5 * (e.iv_ask - e.iv_bid) for e in quotes])
        scale = 1.0 / np.maximum(np.where(np.isfinite(spread), spread, MIN_HALF_SPREAD), MIN_HALF_SPREAD)
    else:
        scale = np.ones(n)
    scale = scale * 100.0  # residuals in vol points
    vega_floor = np.maximum(vega, 1e-12 * S)
    if exercise == "american":
        return _fit_american(quotes, x0, lo, hi, scale / vega_floor, iv_mkt, vega_floor, feller, weights, max_nfev,
                             stops, _american_device(device), t0)
    c_mkt = black_prices(quotes)

    def fun(x: np.ndarray) -> np.ndarray:
        c = prob.prices(_to_params(x, feller))
        if residual == "price":
            return scale * (c - c_mkt) / vega_floor
        iv = prob.model_vols(c)
        # a model price outside the Black range: the vega-scaled price error stands in
        bad = ~np.isfinite(iv)
        d = iv - iv_mkt
        if bad.any():
            d[bad] = (c[bad] - c_mkt[bad]) / vega_floor[bad]
        return scale * d

    sol = least_squares(fun, x0, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=max_nfev, **stops)
    p = _to_params(sol.x, feller)
    from .kernels.heston import cpu as heston_cpu

    iv_model = prob.model_vols(prob.prices(p, heston_cpu.TOL))
    return _result(quotes, prob.sizes, p, iv_model, iv_mkt, feller, residual, weights, int(sol.nfev), sol, t0)


def _fit_american(quotes, x0, lo, hi, w, iv_mkt, vega, feller, weights, max_nfev, stops, device, t0) -> HestonFit:
    """The two-stage American fit (module docstring); ``w`` the residual weight per quote."""
    from scipy.optimize import least_squares

    prob = _AmericanProblem(quotes, device)
    nfev = 0
    sol = None
    final = _american_final()
    for settings, st in ((AMERICAN_COARSE, AMERICAN_COARSE_STOPS), (final, stops)):
        last = {}

        def fun(x: np.ndarray, settings=settings, last=last) -> np.ndarray:
            res = w * (prob.prices(_to_params(x, feller)[None, :], settings)[0] - prob.mid)
            last.update(x=np.array(x), res=res)
            return res

        def jac(x: np.ndarray, settings=settings, last=last) -> np.ndarray:
            res0 = last["res"] if "x" in last and np.array_equal(last["x"], x) else fun(x)
            h = AMERICAN_FD_STEP * np.maximum(np.abs(x), 1.0)
            h = np.where(x + h > hi, -h, h)  # stay inside the bounds
            X = x[None, :] + np.diag(h)
            P = np.array([_to_params(xk, feller) for xk in X])
            res = w[None, :] * (prob.prices(P, settings) - prob.mid[None, :])
            return ((res - res0[None, :]) / h[:, None]).T

        sol = least_squares(fun, x0, jac=jac, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=max_nfev, **st)
        nfev += int(sol.nfev)
        x0 = np.clip(sol.x, lo + 1e-12 * (hi - lo), hi - 1e-12 * (hi - lo))
    p = _to_params(sol.x, feller)
    model = prob.prices(p[None, :], final)[0]
    iv_model = iv_mkt + (model - prob.mid) / vega  # first order (module docstring)
    return _result(quotes, prob.sizes, p, iv_model, iv_mkt, feller, "price", weights, nfev, sol, t0,
                   exercise="american", solves=prob.solves, device=device)


def _result(quotes, sizes, p, iv_model, iv_mkt, feller, residual, weights, nfev, sol, t0, **extra) -> HestonFit:
    """The :class:`HestonFit` of parameters ``p``: errors per expiry and the per-quote table."""
    err = (iv_model - iv_mkt) * 100.0
    rows, pos = [], 0
    table = []
    for e, m in zip(quotes, sizes):
        d = err[pos:pos + m]
        rows.append({"expiry": e.expiry, "T": e.T, "quotes": int(m),
                     "rms_vol_pts": float(np.sqrt(np.nanmean(d ** 2))), "max_vol_pts": float(np.nanmax(np.abs(d)))})
        table.append(pd.DataFrame({"expiry": e.expiry, "T": e.T, "strike": e.strike, "k": np.log(e.strike / e.forward),
                                   "iv_market": e.iv, "iv_model": iv_model[pos:pos + m], "iv_bid": e.iv_bid,
                                   "iv_ask": e.iv_ask}))
        pos += m
    params = dict(zip(PARAMS, (float(v) for v in p)))
    fv = 2.0 * params["kappa"] * params["theta"] - params["xi"] ** 2
    return HestonFit(params=params, sse=float(np.nansum(err ** 2)), rms_vol_pts=float(np.sqrt(np.nanmean(err ** 2))),
                     expiries=rows, feller={"value": fv, "satisfied": bool(fv >= 0.0), "imposed": bool(feller)},
                     residual=residual, weights=weights, nfev=nfev, status=int(sol.status),
                     message=str(sol.message), elapsed_s=time.perf_counter() - t0,
                     quotes=pd.concat(table, ignore_index=True), **extra)


def quotes_from_chain(chain_out: pd.DataFrame, *, min_days: float = MIN_DAYS, k_sd: float = K_SD,
                      k_min: float = K_MIN, max_per_expiry: int = MAX_PER_EXPIRY,
                      european_only: bool = True) -> list[ExpiryQuotes]:
    """The fit's quotes from the chain job's output (:func:`optiond.chain.price_chain`): per
    expiry of at least ``min_days`` days, the out-of-the-money contracts (puts below ``F_T``,
    calls at or above) with a solved mid IV (status ``ok``) and ``|ln(K/F_T)| <= max(k_sd *
    atm_iv * sqrt(T), k_min)``, at most ``max_per_expiry`` of them evenly over ``k``;
    ``D_T = exp(-rate * T)`` from the expiry's solved rate; ``spot`` and the mid ``price`` too
    where the output has them (an American fit needs them).

    Raises:
        ValueError: a missing column, a chain of several underlyings, or American contracts
            with ``european_only`` (their prices hold an early-exercise premium the European
            engine does not have).
    """
    from .chain import labels
    from .market.underlyings import one_underlying
    from .surface.fit import otm_mask

    need = ("expiry", "type", "strike", "expiry_years", "forward", "rate", "iv", "iv_bid", "iv_ask", "status")
    missing = [c for c in need if c not in chain_out.columns]
    if missing:
        raise ValueError(f"the chain output is missing columns {missing}")
    if "underlying" in chain_out.columns:
        one_underlying(chain_out["underlying"], "a Heston fit")
    if european_only and "style" in chain_out.columns and (labels(chain_out["style"]) == "american").any():
        raise ValueError("the chain holds American contracts; the European Heston fit takes European chains only")

    def col(name: str) -> np.ndarray:
        return pd.to_numeric(chain_out[name], errors="coerce").to_numpy(dtype=np.float64)

    T, F, r, K, iv, ib, ia = (col(c) for c in ("expiry_years", "forward", "rate", "strike", "iv", "iv_bid", "iv_ask"))
    S = col("spot") if "spot" in chain_out.columns else np.full(len(chain_out), np.nan)
    mid = col("mid") if "mid" in chain_out.columns else np.full(len(chain_out), np.nan)
    kind = labels(chain_out["type"])
    usable = (chain_out["status"].to_numpy() == "ok") & np.isfinite(iv) & (iv > 0) & otm_mask(chain_out, F, kind)
    out: list[ExpiryQuotes] = []
    code, names = pd.factorize(chain_out["expiry"], sort=False)
    for e in range(len(names)):
        g = np.flatnonzero((code == e) & usable)
        if g.size == 0:
            continue
        Te, Fe, re = float(T[g[0]]), float(F[g[0]]), float(r[g[0]])
        if not (Te * 365.0 >= min_days and math.isfinite(Fe) and Fe > 0 and math.isfinite(re)):
            continue
        k = np.log(K[g] / Fe)
        o = np.argsort(k)
        atm = float(np.interp(0.0, k[o], iv[g][o]))
        keep = g[np.abs(k) <= max(k_sd * atm * math.sqrt(Te), k_min)]
        keep = keep[np.argsort(K[keep])]
        if keep.size > max_per_expiry:
            keep = keep[np.unique(np.round(np.linspace(0, keep.size - 1, max_per_expiry)).astype(int))]
        if keep.size < 3:
            continue
        Se = float(S[g[0]])
        out.append(ExpiryQuotes(str(names[e]), Te, Fe, math.exp(-re * Te), K[keep], iv[keep],
                                (kind[keep] == "call").astype(np.int8), ib[keep], ia[keep],
                                spot=Se if math.isfinite(Se) and Se > 0 else None, price=mid[keep]))
    out.sort(key=lambda q: q.T)
    return out


def smiles_figure(fit: HestonFit, title: str = ""):
    """Market against model smiles, one panel per expiry: the bid/ask IV bars, the market mid
    IVs (dots) and the fitted Heston model's IVs (line) against ``k = ln(K / F_T)``; the RMS
    error of the expiry in each panel's title. A matplotlib ``Figure`` (Agg canvas, no pyplot)."""
    from .surface.plots import finish_smiles, small_multiples

    groups = list(fit.quotes.groupby("expiry", sort=False))
    fig, axes = small_multiples(len(groups))
    rms = {e["expiry"]: e["rms_vol_pts"] for e in fit.expiries}
    for ax, (name, q) in zip(axes.flat, groups):
        q = q.sort_values("k")
        two = np.isfinite(q["iv_bid"]) & np.isfinite(q["iv_ask"])
        ax.vlines(q["k"][two], 100 * q["iv_bid"][two], 100 * q["iv_ask"][two], color="0.6", linewidth=1.0,
                  label="bid/ask IV")
        ax.plot(q["k"], 100 * q["iv_market"], ".", color="C0", markersize=3, label="market mid IV")
        ax.plot(q["k"], 100 * q["iv_model"], "-", color="C3", linewidth=1.2, label="Heston")
        ax.set_title(f"{name}  T={q['T'].iloc[0]:.3f}  rms {rms.get(name, float('nan')):.2f}", fontsize=8, y=1.0)
        ax.tick_params(labelsize=7)
    finish_smiles(fig, axes, len(groups), 3)
    p = fit.params
    fig.suptitle(f"{title} Heston fit\nv0={p['v0']:.4f} kappa={p['kappa']:.3f} theta={p['theta']:.4f} "
                 f"xi={p['xi']:.3f} rho={p['rho']:.3f}; RMS {fit.rms_vol_pts:.2f} vol pts".strip(), fontsize=9)
    return fig


def plot_fit(fit: HestonFit, directory: str | Path, name: str = "heston") -> list[Path]:
    """Write :func:`smiles_figure` as ``<name>_heston_smiles.png`` and ``.svg`` into
    ``directory`` (created with its parents), each whole or not at all
    (:func:`optiond.files.write_with`); returns the paths. Raises OSError."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    fig = smiles_figure(fit, name)
    paths = []
    for fmt in ("png", "svg"):
        path = d / f"{name}_heston_smiles.{fmt}"
        write_with(path, lambda f, fmt=fmt: fig.savefig(f, format=fmt, dpi=110), binary=True)
        paths.append(path)
    return paths


__all__ = ["AMERICAN_COARSE", "AMERICAN_FINAL", "BOUNDS", "ExpiryQuotes", "HestonFit", "PARAMS", "START", "black_prices",
           "fit_heston", "plot_fit", "quotes_from_chain", "smiles_figure"]
