"""The arbitrage-free correction of an SVI slice towards its quotes, in call prices (after
Fengler 2009, "Arbitrage-free smoothing of the implied volatility surface", Quantitative
Finance 9(4): call prices at the strikes under convexity, monotonicity and calendar
constraints), and the convex curve through the corrected prices.

**The curve.** A corrected slice is a set of nodes ``x_0 < ... < x_N`` (``x = K / F_T``: the
quoted strikes, wing nodes beyond the outermost quotes at :data:`WING` in log-moneyness, and
nodes every :data:`EXTEND_STEP` out to the neighbouring expiries' ranges) with undiscounted
call prices over the forward ``c_j`` (:mod:`optiond.surface.calls`). Between the nodes the
curve is Schumaker's (1983, "On shape-preserving quadratic spline interpolation", SIAM J.
Numer. Anal. 20(4)) C1 quadratic spline with node slopes ``d_j`` inside ``[s_{j-1}, s_j]``
(the chords' slopes, their length-weighted mean) and one knot per interval where the slope
equals the chord's: convex wherever the chords are, so its density (``c''``, piecewise
constant) is never negative. Beyond the end nodes the curve is the SVI prior's own (Lee's
wings: the prior passes Lee's moment bound), joined with equal value and slope. So every
corrected slice is free of butterfly arbitrage by construction, and its wings are the prior's.

**The programme** (one LP per expiry, HiGHS: one model per expiry through HiGHS's own Python
interface, whose reweighting rounds change only costs and start from the last optimal basis;
``scipy.optimize.milp`` without integer variables where that interface is not importable; an
L1 objective, each quote's terms in its own half-spreads), over ``c_j``:

* at each quote, the distance above its ask and below its bid, weight 1, and the distance to
  its mid, weight :data:`MID_WEIGHT` (the fit stays inside ``[bid, ask]`` first); then
  up to :data:`REWEIGHT` rounds (fewer once every quote is inside or a round brings none in)
  with each quote's distance outside its band weighted by
  ``1 / (distance + REWEIGHT_EPS)`` of the round before (reweighted L1, Candes, Wakin & Boyd
  2008, "Enhancing sparsity by reweighted l1 minimization", J. Fourier Anal. Appl. 14): the
  L1 fit spreads a violation over many quotes, the reweighted one keeps more of them inside;
* the change of the correction's slope at each node (``c - c_prior``'s second difference
  times the local spacing), weight :data:`SMOOTH_WEIGHT`: where the quotes say nothing the
  correction stays linear and the prior's shape stays;
* at the wing nodes, the distance to the prior, weight :data:`WING_WEIGHT`;
* constraints: chord slopes non-decreasing, the end nodes on the prior with slopes that join
  it convexly (``s_0 >= c_prior'(x_0)``, ``s_{N-1} <= c_prior'(x_N)``, so every slope lies in
  the prior's ``[-1, 0]``);
* calendar: ``c_j >= c_prev(x_j)`` (plus :data:`CALENDAR_MARGIN` of the earlier curve's time
  value) at every node against the earlier expiry's corrected curve; and at a node this
  expiry has no quote around, ``c_j`` at most the bid of the first later expiry quoted there
  (``caps``): a sparse expiry's wings borrow from the next expiry quoted there instead of
  lifting it above its bids. Where these bounds cannot hold together the LP is solved without
  them (``info["bounds_held"]`` False).

The curve never goes below the earlier expiry's (:attr:`Curve.floor`: the larger of the two
prices, itself convex, decreasing with slopes in ``[-1, 0]``), so the calendar condition holds
exactly everywhere, not to the LP's tolerance or only at the nodes.

The LP's solution is made exactly convex afterwards (a weighted isotonic regression of the
chord slopes, ``scipy.optimize.isotonic_regression``, which keeps the end values), so the
density is non-negative to the last bit rather than to the LP's tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import njit
from scipy.optimize import Bounds, LinearConstraint, isotonic_regression, milp
from scipy.sparse import coo_matrix

try:  # HiGHS's own Python interface: one model kept across the reweighting rounds (hot starts)
    from highspy import Highs as _Highs, HighsLp as _HighsLp, HighsModelStatus as _HighsStatus
    from highspy import MatrixFormat as _MatrixFormat
except ImportError:  # pragma: no cover - the same interface as SciPy ships it (SciPy >= 1.15)
    try:
        from scipy.optimize._highspy._core import _Highs, HighsLp as _HighsLp, HighsModelStatus as _HighsStatus
        from scipy.optimize._highspy._core import MatrixFormat as _MatrixFormat
    except ImportError:
        _Highs = None
from scipy.special import ndtr

from .calls import black_call, implied_total_sd
from .svi import SVI, derivatives
from ..kernels.warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

_SQRT2 = math.sqrt(2.0)

#: weights of the objective (per half-spread of the quote; see the module docstring)
MID_WEIGHT = 0.05
SMOOTH_WEIGHT = 0.02
WING_WEIGHT = 0.05
#: rounds of reweighting the quotes' distances outside their bands by 1 / (distance + eps)
#: (in half-spreads): the L1 fit's count of quotes inside towards the most
REWEIGHT = 2
REWEIGHT_EPS = 0.2
#: wing nodes beyond the outermost quotes (log-moneyness steps); the last is the junction
WING = (0.05, 0.1, 0.2, 0.35, 0.5)
#: the spacing of the wing nodes that extend a slice to the earlier curve's ends (log-moneyness)
EXTEND_STEP = 0.25
#: wing nodes closer than this in log-moneyness are one
WING_GAP = 1e-3
#: the calendar's margin: a later curve's price at a node exceeds the earlier one's by this
#: share of the earlier one's time value
CALENDAR_MARGIN = 1e-4
#: the smallest half-spread a quote's terms are measured in (undiscounted call over F)
MIN_HALF_SPREAD = 1e-7
#: nodes closer than this in x are merged (the first kept)
MIN_GAP = 1e-9


def prior_calls(p: SVI, x) -> tuple[np.ndarray, np.ndarray]:
    """The SVI prior's undiscounted call over the forward at ``x = K / F`` (shape (n,)) and its
    slope ``dc/dx = -N(d2) + phi(d1) w'(k) / (2 s x)`` (``s = sqrt(w)``)."""
    x = np.asarray(x, dtype=np.float64)
    k = np.log(x)
    w, w1, _ = derivatives(p, k)
    s = np.sqrt(np.maximum(w, 1e-300))
    d1 = -k / s + 0.5 * s
    c = black_call(x, s)
    slope = -ndtr(d1 - s) + np.exp(-0.5 * d1 * d1) / math.sqrt(2.0 * math.pi) * w1 / (2.0 * s * x)
    return c, slope


@dataclass
class Curve:
    """A corrected slice's call curve (module docstring): nodes ``x`` (K / F, increasing),
    call prices ``c`` at them, and the prior beyond them."""

    x: np.ndarray
    c: np.ndarray
    prior: SVI
    #: the earlier expiry's curve this one never goes below (calendar, exactly), or None
    floor: "Curve | None" = None
    #: read from a document whose curve had a floor, not linked yet (:class:`~optiond.surface.model.Surface` links it)
    floored: bool = False

    def __post_init__(self) -> None:
        self.x = np.asarray(self.x, dtype=np.float64)
        self.c = np.asarray(self.c, dtype=np.float64)
        self.d0, self.dN = map(float, prior_calls(self.prior, self.x[[0, -1]])[1])
        h = np.diff(self.x)
        s = np.maximum.accumulate(np.diff(self.c) / h)  # convex chords (rounding of a convex c)
        d = np.empty(self.x.size)
        d[1:-1] = (h[1:] * s[:-1] + h[:-1] * s[1:]) / (h[:-1] + h[1:])
        d[1:-1] = np.clip(d[1:-1], s[:-1], s[1:])  # rounding: inside its chords, exactly
        d[0], d[-1] = min(self.d0, s[0]), max(self.dN, s[-1])
        self.s, self.d, self.h = s, d, h

    def min_density(self) -> float:
        """The smallest second derivative of the curve between its end nodes (piecewise
        constant: ``(s_j - d_j) / a`` and ``(d_{j+1} - s_j) / b`` on each interval's two
        pieces); >= 0 exactly when the chords are convex."""
        d1, d2 = self.d[:-1], self.d[1:]
        lo = np.minimum(self.s - d1, d2 - self.s)
        return float(lo.min()) if lo.size else 0.0

    def k_range(self) -> tuple[float, float]:
        return float(math.log(self.x[0])), float(math.log(self.x[-1]))

    def _chain(self) -> tuple:
        """This curve and its floors as flat arrays for :func:`_chain_calls` (cached)."""
        if getattr(self, "_flat", None) is None or self._flat[0] is not self.floor:
            levels, c = [], self
            while c is not None:
                levels.append(c)
                c = c.floor
            off = np.cumsum([0] + [lv.x.size for lv in levels])
            pad = [np.r_[lv.s, 0.0] for lv in levels]
            self._flat = (self.floor, np.concatenate([lv.x for lv in levels]), np.concatenate([lv.c for lv in levels]),
                          np.concatenate(pad), np.concatenate([lv.d for lv in levels]), off.astype(np.int64),
                          np.array([list(map(float, lv.prior)) for lv in levels]))
        return self._flat[1:]

    def calls(self, x) -> np.ndarray:
        """Undiscounted call over the forward at ``x`` (any shape): the curve's own, or the
        earlier expiry's where that is higher (:attr:`floor`; the larger of two convex,
        decreasing curves with slopes in [-1, 0] is one too)."""
        x = np.asarray(x, dtype=np.float64)
        X, C, S, D, off, P = self._chain()
        return _chain_calls(x.ravel(), X, C, S, D, off, P, off.size - 1).reshape(x.shape)

    def own_calls(self, x) -> np.ndarray:
        """The curve's own call prices at ``x`` (any shape), without its floor."""
        x = np.asarray(x, dtype=np.float64)
        X, C, S, D, off, P = self._chain()
        return _chain_calls(x.ravel(), X, C, S, D, off, P, 1).reshape(x.shape)

    def total_variance(self, k) -> np.ndarray:
        """``w(k)`` from the curve's call prices (Black's inverse), any shape; NaN where the
        price leaves Black's range."""
        k = np.asarray(k, dtype=np.float64)
        x = np.exp(k)
        s = implied_total_sd(x, self.calls(x))
        return s * s

    def to_dict(self) -> dict:
        return {"x": self.x.tolist(), "c": self.c.tolist(), "floor": self.floor is not None}

    @classmethod
    def from_dict(cls, d: dict, prior: SVI) -> "Curve":
        """The curve of :meth:`to_dict` on its prior.

        Raises:
            ValueError: ``x`` and ``c`` not of one length >= 2, ``x`` not increasing and > 0,
                or ``c`` not finite.
        """
        x, c = np.asarray(d["x"], dtype=np.float64), np.asarray(d["c"], dtype=np.float64)
        if x.ndim != 1 or x.shape != c.shape or x.size < 2:
            raise ValueError("a curve needs x and c of one length, at least 2")
        if not (np.all(np.isfinite(x)) and np.all(x > 0) and np.all(np.diff(x) > 0) and np.all(np.isfinite(c))):
            raise ValueError("a curve needs finite x > 0, increasing, and finite c")
        return cls(x, c, prior, floored=bool(d.get("floor", False)))



@njit(cache=True)
def _prior_call(p, x):
    """The raw-SVI prior ``p = (a, b, rho, m, sigma)``'s undiscounted call over the forward at ``x``."""
    k = math.log(x)
    d = k - p[3]
    w = p[0] + p[1] * (p[2] * d + math.sqrt(d * d + p[4] * p[4]))
    if not (w > 0.0):
        return max(1.0 - x, 0.0)
    s = math.sqrt(w)
    d1 = -k / s + 0.5 * s
    return 0.5 * math.erfc(-d1 / _SQRT2) - x * 0.5 * math.erfc(-(d1 - s) / _SQRT2)


@njit(cache=True)
def _chain_calls(x, X, C, S, D, off, P, levels):
    """The largest of the first ``levels`` curves (a curve and its floors, flat: nodes ``X``,
    prices ``C``, chord slopes ``S`` (padded), node slopes ``D``, curve ``l`` at
    ``off[l]:off[l + 1]``, priors ``P``) at each ``x``: Schumaker's quadratic between a curve's
    nodes, its prior beyond them."""
    out = np.empty(x.size)
    for i in range(x.size):
        xv = x[i]
        best = -np.inf
        for lv in range(levels):
            o0, o1 = off[lv], off[lv + 1]
            if xv < X[o0] or xv > X[o1 - 1]:
                v = _prior_call(P[lv], xv)
            else:
                lo, hi = o0, o1 - 1  # the interval [X[lo], X[lo + 1]] holding xv
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if X[mid] <= xv:
                        lo = mid
                    else:
                        hi = mid
                h = X[lo + 1] - X[lo]
                sl, d1, d2 = S[lo], D[lo], D[lo + 1]
                t = xv - X[lo]
                if d2 - d1 > 0.0:
                    a = min(max(h * (d2 - sl) / (d2 - d1), 0.0), h)
                    if t <= a:
                        v = C[lo] + d1 * t + ((sl - d1) * t * t / (2.0 * a) if a > 0.0 else 0.0)
                    else:
                        u, b = t - a, h - a
                        v = C[lo] + 0.5 * (d1 + sl) * a + sl * u + ((d2 - sl) * u * u / (2.0 * b) if b > 0.0 else 0.0)
                else:
                    v = C[lo] + sl * t
            if v > best:
                best = v
        out[i] = best
    return out

class _LP:
    """The programme ``min cost @ v, rlo <= A v <= rhi, lb <= v <= ub`` on one HiGHS model
    kept between solves, so a round that changes only the costs or the bounds starts from the
    last optimal basis (HiGHS's hot start); through ``scipy.optimize.milp`` where HiGHS's own
    interface is not importable. :meth:`solve` returns the solution (shape (nv,)) or None
    and sets :attr:`status` (0 optimal, else not)."""

    def __init__(self, cost, A, rlo, rhi, lb, ub) -> None:
        self.cost, self.A, self.rlo, self.rhi = cost.copy(), A, rlo, rhi
        self.lb, self.ub = lb.copy(), ub.copy()
        self.status = 1
        self.h = None
        if _Highs is None:
            return
        A = A.tocsc()
        lp = _HighsLp()
        lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = self.cost, self.lb, self.ub
        lp.row_lower_, lp.row_upper_ = rlo, rhi
        m = lp.a_matrix_
        m.format_, m.num_col_, m.num_row_ = _MatrixFormat.kColwise, A.shape[1], A.shape[0]
        m.start_, m.index_, m.value_ = A.indptr, A.indices, A.data
        h = _Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("presolve", "off")  # small, sparse LPs: presolve costs more than it saves
        h.passModel(lp)
        self.h = h

    def set_cost(self, idx: np.ndarray, values: np.ndarray) -> None:
        self.cost[idx] = values
        if self.h is not None:
            self.h.changeColsCost(idx.size, idx.astype(np.int32), np.asarray(values, dtype=np.float64))

    def set_bounds(self, idx: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:
        self.lb[idx], self.ub[idx] = lower, upper
        if self.h is not None:
            self.h.changeColsBounds(idx.size, idx.astype(np.int32), np.asarray(lower, dtype=np.float64),
                                    np.asarray(upper, dtype=np.float64))

    def solve(self) -> np.ndarray | None:
        if self.h is None:
            res = milp(self.cost, constraints=[LinearConstraint(self.A, self.rlo, self.rhi)],
                       bounds=Bounds(self.lb, self.ub))
            self.status = int(res.status)
            return res.x
        self.h.run()
        ok = self.h.getModelStatus() == _HighsStatus.kOptimal
        self.status = 0 if ok else 1
        return np.array(self.h.getSolution().col_value) if ok else None


def bid_calls(k, iv_bid, iv_mid, T: float) -> Callable[[np.ndarray], np.ndarray]:
    """An expiry's bids as a function of ``x = K / F``: the bid implied volatility (the mid
    where there is no bid) interpolated linearly in ``k = ln x`` between the quotes ``k``
    (shape (n,)), as an undiscounted call over the forward at ``T``; what a cap at ``x`` needs
    (an earlier expiry below it never lifts this one above its bids)."""
    k = np.asarray(k, dtype=np.float64)
    iv = np.where(np.isfinite(iv_bid), iv_bid, iv_mid)
    o = np.argsort(k)
    k, iv = k[o], iv[o]
    sq = math.sqrt(T)
    return lambda x: black_call(x, np.interp(np.log(x), k, iv) * sq)


def correct_slice(prior: SVI, T: float, x, iv_bid, iv_ask, iv_mid, *, prev: Curve | None = None,
                  caps: list[tuple[Callable, tuple[float, float]]] | None = None) -> tuple[Curve, dict]:
    """One expiry's corrected curve (module docstring): the LP (:func:`_correct`), then
    :attr:`Curve.floor` set to ``prev`` (the calendar condition, exactly).

    Args, Returns, Raises: as :func:`_correct`; ``info`` also has ``floor_gap`` (how far the
    floor lifts the curve at both curves' nodes and the midpoints between them, call over F)
    and ``floor_share`` (the share of those points where it does).
    """
    curve, info = _correct(prior, T, x, iv_bid, iv_ask, iv_mid, prev=prev, caps=caps)
    if prev is None:
        return curve, info
    xs = np.union1d(curve.x, prev.x)  # both curves' nodes and the midpoints between them
    xs = np.r_[xs, 0.5 * (xs[1:] + xs[:-1])]
    gap = prev.calls(xs) - curve.own_calls(xs)
    info["floor_gap"] = float(max(np.max(gap), 0.0))
    info["floor_share"] = float(np.mean(gap > 0.0))
    curve.floor = prev  # what is left of a crossing (between nodes, to the LP's tolerance)
    return curve, info


def _correct(prior: SVI, T: float, x, iv_bid, iv_ask, iv_mid, *, prev: Curve | None = None,
             caps: list[tuple[Callable, tuple[float, float]]] | None = None) -> tuple[Curve, dict]:
    """One expiry's corrected curve (module docstring).

    Args:
        prior: the expiry's SVI slice (arbitrage-free; its wings are the curve's beyond the nodes).
        T: time to expiry, years.
        x: the quotes' ``K / F_T``, shape (n,), > 0.
        iv_bid, iv_ask, iv_mid: the quotes' implied volatilities (annualised decimals), shape
            (n,); NaN bid or ask: open on that side.
        prev: the earlier expiry's corrected curve: a lower bound at every node (calendar).
        caps: the later expiries' bids as undiscounted calls over the forward (a function of
            ``x``, :func:`bid_calls`) with their quoted ``(k_min, k_max)``, in order of T: at a
            node this expiry has no quote around, the first of them quoted there is an upper
            bound (a sparse expiry's wings borrow from the next expiry quoted there instead of
            lifting it above its bids through the calendar).

    Returns:
        ``(Curve, info)``: ``info`` has ``status`` (HiGHS's), ``calendar_slack`` (the largest
        calendar slack used, call over F) and ``nodes``.

    Raises:
        ValueError: fewer than 2 quotes, or arrays of different shapes.
    """
    x, bid, ask, mid = (np.asarray(v, dtype=np.float64) for v in (x, iv_bid, iv_ask, iv_mid))
    if not (x.shape == bid.shape == ask.shape == mid.shape and x.ndim == 1) or x.size < 2:
        raise ValueError("x, iv_bid, iv_ask and iv_mid must be 1-D of one length, at least 2 quotes")
    o = np.argsort(x, kind="stable")
    x, bid, ask, mid = x[o], bid[o], ask[o], mid[o]
    keep = np.r_[True, np.diff(x) > MIN_GAP]
    x, bid, ask, mid = x[keep], bid[keep], ask[keep], mid[keep]
    n = x.size
    sq = math.sqrt(T)
    lo = np.where(np.isfinite(bid), black_call(x, np.nan_to_num(bid) * sq), np.nan)
    hi = np.where(np.isfinite(ask), black_call(x, np.nan_to_num(ask) * sq), np.nan)
    cm = black_call(x, mid * sq)
    half = np.where(np.isfinite(lo) & np.isfinite(hi), 0.5 * (hi - lo), np.nan)
    fallback = np.nanmedian(half) if np.isfinite(half).any() else 1e-4
    half = np.maximum(np.where(np.isfinite(half), half, np.maximum(fallback, 0.02 * cm)), MIN_HALF_SPREAD)
    k_lo, k_hi = math.log(x[0]), math.log(x[-1])
    kl, kr = k_lo - np.array(WING[::-1]), k_hi + np.array(WING)
    caps = caps or []
    ends = ([prev.k_range()] if prev is not None else []) + [r for _, r in caps]
    for pl, pr in ends:  # the wings reach the neighbours' ends: beyond them all, prior against prior
        if pl < kl[0]:
            kl = np.r_[np.linspace(pl, kl[0], int(math.ceil((kl[0] - pl) / EXTEND_STEP)) + 1)[:-1], kl]
        if pr > kr[-1]:
            kr = np.r_[kr, np.linspace(kr[-1], pr, int(math.ceil((pr - kr[-1]) / EXTEND_STEP)) + 1)[1:]]
    kl = kl[np.r_[np.diff(kl) > WING_GAP, True]]  # an extension's end close to a wing node: one node
    kr = kr[np.r_[True, np.diff(kr) > WING_GAP]]
    left, right = np.exp(kl), np.exp(kr)
    xq = x
    X = np.r_[left, x, right]
    N = X.size
    q = np.searchsorted(X, xq)  # the quotes' nodes
    wing = np.r_[np.arange(left.size), np.arange(N - right.size, N)]
    P, Pd = prior_calls(prior, X)
    scale = float(np.median(half))  # the LP's price unit: c = P + scale * y
    h = np.diff(X)
    hbar = 0.5 * (h[:-1] + h[1:])
    nw = wing.size
    # variables: y (N) | a+, a- (n each, inside the band) | b+, b- (n each, beyond it)
    #            | t+, t- (N - 2 each: the correction's slope change) | g+, g- (nw each: wing pull)
    o_a, o_b, o_t, o_g = N, N + 2 * n, N + 4 * n, N + 4 * n + 2 * (N - 2)
    nv = o_g + 2 * nw
    w_q = scale / half
    cost = np.concatenate([np.zeros(N), MID_WEIGHT * w_q, MID_WEIGHT * w_q, (1 + MID_WEIGHT) * w_q,
                           (1 + MID_WEIGHT) * w_q, np.full(2 * (N - 2), SMOOTH_WEIGHT), np.full(2 * nw, WING_WEIGHT)])
    lb, ub = np.zeros(nv), np.full(nv, np.inf)
    lb[:N], ub[:N] = -np.inf, np.inf
    lb[[0, N - 1]] = ub[[0, N - 1]] = 0.0  # end nodes on the prior
    # each quote: y_q = (cm - P) / scale + (a+ - a-) + (b+ - b-), a+ <= (hi - cm), a- <= (cm - lo)
    ub[o_a:o_a + n] = np.where(np.isfinite(hi), np.maximum(hi - cm, 0.0) / scale, np.inf)
    ub[o_a + n:o_a + 2 * n] = np.where(np.isfinite(lo), np.maximum(cm - lo, 0.0) / scale, np.inf)
    ii = np.arange(n)
    one = np.ones(N)
    rows = [(np.tile(ii, 5), np.concatenate([q, o_a + ii, o_a + n + ii, o_b + ii, o_b + n + ii]),
             np.repeat([1.0, -1.0, 1.0, -1.0, 1.0], n))]
    rlo, rhi = [(cm - P[q]) / scale], [(cm - P[q]) / scale]
    r0 = n
    # each inner node: hbar (D2 y) = t+ - t-; convexity of P + scale y: t+ - t- >= -hbar D2 P / scale
    jj = np.arange(N - 2)
    d2 = np.stack([1.0 / h[:-1], -1.0 / h[:-1] - 1.0 / h[1:], 1.0 / h[1:]], axis=1) * hbar[:, None]
    rows.append((np.tile(r0 + jj, 5), np.concatenate([jj, jj + 1, jj + 2, o_t + jj, o_t + N - 2 + jj]),
                 np.concatenate([d2[:, 0], d2[:, 1], d2[:, 2], -one[:N - 2], one[:N - 2]])))
    rlo.append(np.zeros(N - 2))
    rhi.append(np.zeros(N - 2))
    L = -(d2[:, 0] * P[:-2] + d2[:, 1] * P[1:-1] + d2[:, 2] * P[2:]) / scale
    lb[o_t:o_t + N - 2] = np.maximum(L, 0.0)
    ub[o_t + N - 2:o_t + 2 * (N - 2)] = np.maximum(-L, 0.0)
    r0 += N - 2
    # the wing nodes' distance to the prior: y_j = g+ - g-
    kk = np.arange(nw)
    rows.append((np.tile(r0 + kk, 3), np.concatenate([wing, o_g + kk, o_g + nw + kk]),
                 np.concatenate([one[:nw], -one[:nw], one[:nw]])))
    rlo.append(np.zeros(nw))
    rhi.append(np.zeros(nw))
    r0 += nw
    # junctions: s_0 >= P'(x_0), s_{N-2} <= P'(x_N), slopes of P + scale y
    sP0, sPN = (P[1] - P[0]) / h[0], (P[-1] - P[-2]) / h[-1]
    rows.append((np.array([r0, r0, r0 + 1, r0 + 1]), np.array([0, 1, N - 2, N - 1]),
                 np.array([-scale / h[0], scale / h[0], -scale / h[-1], scale / h[-1]])))
    rlo.append(np.array([Pd[0] - sP0, -np.inf]))
    rhi.append(np.array([np.inf, Pd[-1] - sPN]))
    r0 += 2
    if prev is not None:  # calendar: c_j >= cprev_j + a margin of its time value (the ends: on the prior)
        cprev = prev.calls(X)
        cprev = cprev + CALENDAR_MARGIN * np.maximum(cprev - np.maximum(1.0 - X, 0.0), 0.0)
        lb[:N] = (cprev - P) / scale
        lb[[0, N - 1]] = 0.0  # the end nodes stay on the prior (the floor keeps the calendar there)
    if caps:  # the first later expiry quoted at a node caps this one's unquoted wings there
        kX = np.log(X)
        free = (kX < k_lo) | (kX > k_hi)
        free[[0, N - 1]] = False
        top = np.full(N, np.inf)
        for cap, (c_lo, c_hi) in caps:
            where = free & (kX >= c_lo) & (kX <= c_hi)
            if where.any():
                top[where] = cap(X[where])
                free &= ~where
        ub[:N] = np.where(np.isfinite(top), np.maximum((top - P) / scale, lb[:N]), ub[:N])
    ri, ci, vi = (np.concatenate(part) for part in zip(*rows))
    A = coo_matrix((vi, (ri, ci)), shape=(r0, nv))
    lp = _LP(cost, A, np.concatenate(rlo), np.concatenate(rhi), lb, ub)
    sol = lp.solve()
    bounded = prev is not None or bool(caps)
    if sol is None and bounded:  # the bounds cannot hold: without them (the floor keeps the calendar)
        inner = np.arange(1, N - 1)
        lp.set_bounds(inner, np.full(N - 2, -np.inf), np.full(N - 2, np.inf))
        sol = lp.solve()
        bounded = False
    status = lp.status
    ib = np.arange(o_b, o_b + 2 * n)
    outside = n + 1
    for _ in range(int(REWEIGHT)):  # reweighted L1 (Candes, Wakin & Boyd 2008): towards the most quotes inside
        if sol is None:
            break
        cq = P[q] + scale * sol[q]
        v = (np.maximum(np.nan_to_num(cq - hi, nan=0.0), 0.0) + np.maximum(np.nan_to_num(lo - cq, nan=0.0), 0.0)) / half
        now = int(np.count_nonzero(v > 1e-6))
        if now == 0 or now >= outside:  # every quote inside already, or the last round brought none in
            break
        outside = now
        wq = (1 + MID_WEIGHT) * w_q / (v + REWEIGHT_EPS)
        lp.set_cost(ib, np.r_[wq, wq])
        again = lp.solve()
        if again is not None:
            sol = again
    y = np.zeros(N) if sol is None else sol[:N]
    c = P + scale * y
    c = _convex(X, c, Pd[0], Pd[-1])
    return Curve(X, c, prior), {"status": status, "nodes": N, "bounds_held": bounded}


def _convex(X: np.ndarray, c: np.ndarray, d0: float, dN: float) -> np.ndarray:
    """``c`` with exactly non-decreasing chord slopes inside ``[max(d0, -1), min(dN, 0)]`` and
    the end values kept (weighted isotonic regression of the slopes, weights the spacings)."""
    h = np.diff(X)
    s = np.diff(c) / h
    s = isotonic_regression(s, weights=h, increasing=True).x
    s = np.clip(s, max(d0, -1.0), min(dN, 0.0))
    out = np.empty_like(c)
    out[0] = c[0]
    out[1:] = c[0] + np.cumsum(s * h)
    # the clip's change (the LP's tolerance) as a ramp: both ends on their values again
    out += (c[-1] - out[-1]) * (X - X[0]) / (X[-1] - X[0])
    out[-1] = c[-1]
    return out


__all__ = ["Curve", "bid_calls", "correct_slice", "prior_calls"]
