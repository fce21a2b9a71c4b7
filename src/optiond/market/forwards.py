"""Forward and carry per expiry, solved from the option chain itself.

Every vendor that publishes implied volatilities (Cboe's VIX methodology, OptionMetrics IvyDB,
ORATS) takes the forward from the options, not from the underlying's print: the print is
often stale against the option quotes, and the dividend and borrow carried to each expiry are
not observable elsewhere.

* **European chains** (SPX, NDX): put–call parity ``C - P = D (F - K)`` holds strike by strike.
  :func:`parity_fit` fits it over the expiry's two-sided strikes near the money, each
  weighted by the inverse of its quote spread and robust to outliers (Huber loss, minimised
  exactly by :func:`huber_regression`): the forward ``F`` and, without a rate curve, the
  discount factor ``D`` (the implied rate ``-ln D / T``). With a curve, ``D`` is the curve's
  and only ``F`` is fitted (a weighted, robust form of Cboe's rule ``F = K* + e^{RT}(C - P)``
  at the strike where ``|C - P|`` is smallest, :func:`cboe_forward`).
* **American chains**: parity is only an inequality. :func:`solve_carry` takes the rate from
  the curve and solves, per expiry, the residual carry ``q`` (dividend plus borrow; ORATS'
  "residual yield") at which the call and put implied volatilities of the near-the-money
  strike pairs agree: the vega-weighted median of ``iv_call - iv_put`` is zero. It is a 1-D
  root find per expiry (Brent, started from the parity estimate and bracketed by Newton steps
  of slope ``sqrt(T) / phi(d1)``), run for all expiries together: each iteration is ONE batched
  implied-volatility solve over every pending pair of the chain (on a GPU, one launch:
  :mod:`optiond.kernels.binomial.iv_gpu`). The carry also absorbs a stale underlying print.

The forward of an expiry is ``F = S exp((r - q) T)`` with the carry ``q`` in both cases, so a
row priced with ``(spot, rate, dividend_yield) = (S, r, q)`` is priced on that forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable

import numpy as np

from ..kernels.brent import A, B, C, FB, brent_init, brent_step

#: strikes used per expiry by the parity fit (nearest the first forward estimate)
PARITY_STRIKES = 20
#: strike pairs used per expiry by the American carry solve (nearest the forward)
CARRY_PAIRS = 8
#: fewest pairs for a parity fit of F and D (two unknowns) / of F alone / for a carry solve
MIN_PAIRS_FIT, MIN_PAIRS_FORWARD, MIN_PAIRS_CARRY = 3, 1, 1
#: implied rates outside this band mean a failed fit (sparse or stale quotes): the curve's rate is used
IMPLIED_RATE_BAND = (-0.05, 0.25)
#: the carry solve's tolerances: on the carry (annual decimal) and on the median IV difference
CARRY_XTOL, CARRY_FTOL = 1e-9, 1e-8
#: carry solve limits: bracket expansions, Brent steps, and the largest |q - q0| searched
CARRY_EXPANSIONS, CARRY_ITERATIONS, CARRY_SPAN = 12, 40, 4.0


@dataclass
class ExpiryPairs:
    """The two-sided call/put quotes of one expiry at common strikes.

    All arrays have shape (m,), sorted by strike: ``strike``; ``call_mid``, ``put_mid`` and
    ``call_spread``, ``put_spread`` (ask - bid) in currency.
    """

    strike: np.ndarray
    call_mid: np.ndarray
    put_mid: np.ndarray
    call_spread: np.ndarray
    put_spread: np.ndarray

    def __len__(self) -> int:
        return int(self.strike.size)

    def take(self, idx: np.ndarray) -> "ExpiryPairs":
        return ExpiryPairs(*(getattr(self, f.name)[idx] for f in fields(self)))

    def nearest(self, forward: float, m: int) -> "ExpiryPairs":
        """The ``m`` pairs whose strikes are nearest ``forward`` in log-moneyness, by strike."""
        if len(self) <= m:
            return self
        idx = np.sort(np.argsort(np.abs(np.log(self.strike / forward)), kind="stable")[:m])
        return self.take(idx)


@dataclass
class ParityFit:
    """A put–call parity fit of one expiry: ``forward`` F, ``discount`` D, the ``pairs`` used,
    the RMS residual in half-spreads (``rms_spreads``), and whether D was fitted
    (``implied_discount``) or given."""

    forward: float
    discount: float
    pairs: int
    rms_spreads: float
    implied_discount: bool


def cboe_forward(strike, call_mid, put_mid, T: float, rate: float) -> tuple[float, float]:
    """Cboe's forward rule (VIX white paper, Step 1): at the strike ``K*`` where the call and
    put mids differ least, ``F = K* + exp(R T) (C - P)``.

    Args:
        strike, call_mid, put_mid: shape (m,), currency.
        T: years to expiry; rate: annualised, continuously compounded.

    Returns:
        ``(F, K*)``.

    Raises:
        ValueError: no strike.
    """
    k = np.asarray(strike, dtype=np.float64)
    diff = np.asarray(call_mid, dtype=np.float64) - np.asarray(put_mid, dtype=np.float64)
    if k.size == 0:
        raise ValueError("cboe_forward needs at least one strike")
    i = int(np.argmin(np.abs(diff)))
    return float(k[i] + math.exp(rate * T) * diff[i]), float(k[i])


#: iterations of the Huber regression (each one weighted least-squares solve); real expiries
#: settle their inlier set in a handful
HUBER_ITERATIONS = 100


def huber_regression(A: np.ndarray, b: np.ndarray, scale: float = 1.0,
                     max_iter: int = HUBER_ITERATIONS) -> tuple[np.ndarray, np.ndarray]:
    """The minimiser of Huber's loss ``sum_i rho(r_i)``, ``r = A x - b``, ``rho(r) = r^2 / 2``
    for ``|r| <= scale`` and ``scale (|r| - scale / 2)`` beyond (Huber 1964, the M-estimator of
    location/regression with his "proposal 2" loss).

    The finite Newton method of Madsen & Nielsen ("Finite algorithms for robust linear
    regression", BIT 30, 1990): from the least-squares fit, each step solves exactly for the
    current partition into inliers ``|r_i| <= scale`` and outliers (the point where the gradient
    ``sum_in r_i a_i + scale sum_out sign(r_i) a_i`` vanishes: one linear solve); a step that
    keeps the partition and the outliers' signs is the global minimum (the loss is convex), else
    it is halved until the loss falls (a re-weighted step, weights ``min(1, scale / |r_i|)``,
    where too few inliers are left to solve). Exact data give the exact solution (to rounding).

    Args:
        A: design, shape (m, p), m >= p; b: shape (m,).
        scale: Huber's threshold, in the units of ``r``.
        max_iter: re-weighted solves at most.

    Returns:
        ``(x (p,), r (m,))``: the solution and its residuals.

    Raises:
        ValueError: A without full column rank among the rows with weight.
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    col = np.linalg.norm(A, axis=0)
    if not np.all(col > 0):
        raise ValueError("the robust fit has fewer independent quotes than unknowns")
    A = A / col  # equilibrated columns: the normal equations stay well conditioned

    def solve(rows: np.ndarray, weights: np.ndarray, rhs_shift: np.ndarray) -> np.ndarray | None:
        Aw = A[rows] * weights[rows, None]
        try:
            return np.linalg.solve(Aw.T @ A[rows], Aw.T @ b[rows] - rhs_shift)
        except np.linalg.LinAlgError:
            return None

    every = np.ones(b.shape[0], dtype=bool)
    ones = np.ones(b.shape[0])
    zero = np.zeros(A.shape[1])

    def loss(v: np.ndarray) -> float:
        z = np.abs(A @ v - b)
        return float(np.sum(np.where(z <= scale, 0.5 * z * z, scale * (z - 0.5 * scale))))

    x = solve(every, ones, zero)  # least squares: the start
    if x is None:
        raise ValueError("the robust fit has fewer independent quotes than unknowns")
    for _ in range(max_iter):
        r = A @ x - b
        inl = np.abs(r) <= scale
        out = ~inl
        sgn = np.sign(r[out])
        # the exact minimiser for this partition: least squares on the inliers with the
        # outliers' constant pull scale * sign(r) * a moved to the right-hand side
        x_e = solve(inl, ones, scale * (sgn @ A[out])) if inl.sum() >= A.shape[1] else None
        if x_e is None:  # too few inliers for that: a re-weighted step instead
            x_e = solve(every, np.minimum(1.0, scale / np.maximum(np.abs(r), 1e-300)), zero)
            if x_e is None:
                raise ValueError("the robust fit has fewer independent quotes than unknowns")
        r_e = A @ x_e - b
        inl_e = np.abs(r_e) <= scale
        if np.array_equal(inl_e, inl) and np.array_equal(np.sign(r_e[out]), sgn):
            return x_e / col, r_e
        # a Newton step for the convex loss: halve it until the loss falls
        f0, step = loss(x), x_e - x
        t = 1.0
        while t > 1e-12 and loss(x + t * step) >= f0:
            t *= 0.5
        if t <= 1e-12:  # no descent along the step: x is the minimum to rounding
            return x / col, A @ x - b
        x = x + t * step
    return x / col, A @ x - b


def parity_fit(pairs: ExpiryPairs, T: float, discount: float | None = None, *,
               strikes: int = PARITY_STRIKES) -> ParityFit:
    """Fit put–call parity ``C - P = D (F - K)`` over the strikes nearest the money.

    Each strike's residual is divided by its half-spread ``(spread_C + spread_P) / 2`` (at
    least 0.005, half a cent), so a wide quote counts less, and the loss is Huber's with scale
    1 (residuals past one half-spread count linearly: a stale or off-market strike cannot
    drag the fit), minimised exactly (:func:`huber_regression`). With D unknown the model is
    linear in ``(D (F - Kbar), D)``, ``Kbar`` the mean strike (centred, so the two columns
    are far from collinear).

    Args:
        pairs: the expiry's two-sided pairs.
        T: years to expiry (> 0).
        discount: D when known (from a rate curve): only F is fitted; None: F and D both.
        strikes: how many strikes nearest the first forward estimate enter the fit.

    Returns:
        :class:`ParityFit`. A fitted D can come out <= 0 on quotes that carry no information
        on it (the caller checks the implied rate); F is then NaN.

    Raises:
        ValueError: too few pairs (3 to fit F and D, 1 for F alone), or strikes that cannot
            separate F from D.
    """
    need = MIN_PAIRS_FORWARD if discount is not None else MIN_PAIRS_FIT
    if len(pairs) < need:
        raise ValueError(f"{len(pairs)} two-sided strike pair(s); the parity fit needs {need}")
    guess_rate = -math.log(discount) / T if discount is not None else 0.0
    f0, _ = cboe_forward(pairs.strike, pairs.call_mid, pairs.put_mid, T, guess_rate)
    if not (np.isfinite(f0) and f0 > 0):
        f0 = float(np.median(pairs.strike))
    near = pairs.nearest(f0, strikes)
    K = near.strike
    y = near.call_mid - near.put_mid
    s = np.maximum(0.5 * (near.call_spread + near.put_spread), 0.005)
    if discount is not None:
        D = float(discount)
        # D F - (y + D K) = residual: one unknown
        x, r = huber_regression((D / s)[:, None], (y + D * K) / s)
        return ParityFit(float(x[0]), D, int(K.size), float(np.sqrt(np.mean(r * r))), False)
    kbar = float(np.mean(K))
    A = np.column_stack([1.0 / s, -(K - kbar) / s])
    x, r = huber_regression(A, y / s)
    D = float(x[1])
    F = kbar + float(x[0]) / D if D > 0 else float("nan")
    return ParityFit(F, D, int(K.size), float(np.sqrt(np.mean(r * r))), True)


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The weighted median, interpolated: sorted by value, each value stands at the middle of
    its weight block on the cumulative-weight axis, and the median is the value linearly
    interpolated at half the total weight (the values at the ends beyond the first/last
    middle). Equal weights give the ordinary median; it is continuous in the values (so a root
    find on it meets no jump when two values swap order). NaN without a positive weight."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = np.isfinite(v) & np.isfinite(w) & (w > 0)
    v, w = v[keep], w[keep]
    if v.size == 0:
        return float("nan")
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    mids = np.cumsum(w) - 0.5 * w
    return float(np.interp(0.5 * w.sum(), mids, v))


def vega_weights(strike, sigma, forward: float, T: float) -> np.ndarray:
    """Black–Scholes vega per unit of forward and discount, ``phi(d1) sqrt(T)``, at strikes
    ``strike`` and volatilities ``sigma`` (shape (m,)): the weights of the call–put IV
    comparison (an IV difference matters in proportion to the price it moves)."""
    k = np.asarray(strike, dtype=np.float64)
    sq = np.asarray(sigma, dtype=np.float64) * math.sqrt(T)
    with np.errstate(divide="ignore", invalid="ignore"):
        d1 = np.log(forward / k) / sq + 0.5 * sq
        w = np.exp(-0.5 * d1 * d1) * 0.3989422804014327 * math.sqrt(T)
    return np.where(np.isfinite(w), w, 0.0)


def call_put_residual(strike, iv_call, iv_put, forward: float, T: float, max_pairs: int = 0) -> float:
    """The vega-weighted median of ``iv_call - iv_put`` over the strike pairs (shape (m,))
    where both are finite, optionally over the ``max_pairs`` nearest ``forward`` only; the
    quantity the carry solve drives to zero. NaN without a pair."""
    k = np.asarray(strike, dtype=np.float64)
    c, p = np.asarray(iv_call, dtype=np.float64), np.asarray(iv_put, dtype=np.float64)
    ok = np.flatnonzero(np.isfinite(c) & np.isfinite(p))
    if max_pairs and ok.size > max_pairs:
        ok = ok[np.argsort(np.abs(np.log(k[ok] / forward)), kind="stable")[:max_pairs]]
    if ok.size == 0:
        return float("nan")
    return weighted_median(c[ok] - p[ok], vega_weights(k[ok], 0.5 * (c[ok] + p[ok]), forward, T))


#: ``f(prices, kind, T, rate, dividend_yield, strike, lo, hi[, spot=]) -> (vol, ok)``: the
#: batched American implied-volatility solve the carry search calls once per iteration (kind 1 =
#: call; ``lo``/``hi`` a per-row bracket hint, NaN for none, as :func:`optiond.engine.implied_vol`;
#: ``spot`` per row, instead of the solver's own, for ``solve_carry(spot_carry=...)``)
IVSolver = Callable[..., tuple[np.ndarray, np.ndarray]]


@dataclass
class CarryResult:
    """The carry solve of one expiry: the residual carry ``q`` (annual decimal), the weighted
    median IV difference left at it (``residual``, decimal vol), the ``pairs`` used, the
    number of batched IV solves it took (``evaluations``) and whether it ``converged``
    (a message in ``note`` when not)."""

    q: float
    residual: float
    pairs: int
    evaluations: int
    converged: bool
    note: str = ""


class _Search:
    """One expiry's root find of ``f(q) = wmedian(iv_call - iv_put)``, which increases with q.

    Phases: evaluate q0; step by Newton with slope ``sqrt(T)/phi(d1)`` (European vega algebra)
    and double the step until f changes sign; then Brent (reverse communication,
    :mod:`optiond.kernels.brent`) inside the bracket.
    """

    def __init__(self, q0: float, slope: float):
        self.q0, self.slope = q0, max(slope, 1e-6)
        self.next_q: float | None = q0
        self.points: list[tuple[float, float]] = []
        self.state: np.ndarray | None = None
        self.done = False
        self.note = ""
        self.step = 0.0
        self.evaluations = 0
        self.result_q: float | None = None
        self.result_f = float("nan")

    def tell(self, f: float) -> None:
        q = self.next_q
        self.evaluations += 1
        if not np.isfinite(f):
            self.done, self.note = True, f"no call/put pair has both implied volatilities at q={q:.6g}"
            return
        if abs(f) <= CARRY_FTOL:
            self.points.append((q, f))
            self._finish(q, f)
            return
        if self.state is not None:  # Brent
            self.state[FB] = f
            if brent_step(self.state, CARRY_XTOL, CARRY_FTOL):
                self._finish(float(self.state[B]), float(self.state[FB]))
            elif self.evaluations >= CARRY_ITERATIONS:
                self.done = True
                self.note = (f"carry search not converged after {self.evaluations} evaluations "
                             f"(bracket {self.state[A]:.6g} .. {self.state[C]:.6g})")
            else:
                self.next_q = float(self.state[B])
            return
        self.points.append((q, f))
        if len(self.points) == 1:
            self.step = -f / self.slope
        else:
            (qa, fa), (qb, fb) = self.points[-2], self.points[-1]
            if (fa > 0) != (fb > 0):
                self.state = np.empty(8)
                brent_init(self.state, qa, qb, fa, fb)
                if brent_step(self.state, CARRY_XTOL, CARRY_FTOL):
                    self._finish(float(self.state[B]), float(self.state[FB]))
                else:
                    self.next_q = float(self.state[B])
                return
            if len(self.points) > CARRY_EXPANSIONS or abs(q - self.q0) > CARRY_SPAN:
                self.done, self.note = True, f"no sign change of the call-put IV difference within q0 {self.q0:+.4f} +/- {abs(q - self.q0):.3g}"
                return
            self.step *= 2.0
        self.next_q = q + self.step

    def _finish(self, q: float, f: float) -> None:
        self.done, self.next_q = True, q
        self.points.append((q, f))
        self.result_q, self.result_f = q, f


def solve_carry(pairs: list[ExpiryPairs], spot: float, T: np.ndarray, rate: np.ndarray, q0: np.ndarray,
                iv_solver: IVSolver, *, max_pairs: int = CARRY_PAIRS,
                spot_carry: float | None = None) -> list[CarryResult]:
    """The residual carry of every expiry of an American chain, all expiries together.

    For each expiry e, ``q_e`` solves ``wmedian_i(iv_call_i(q) - iv_put_i(q); vega_i) = 0``
    over its ``max_pairs`` strike pairs nearest the forward estimate ``S exp((r - q0) T)``;
    the vega weights are Black–Scholes vegas at the pair's mean implied volatility at q0
    (fixed, so the objective is continuous in q). Pairs whose call or put has no implied
    volatility at q0 are left out.

    Args:
        pairs: per expiry, its two-sided strike pairs.
        spot: the underlying price of the chain (currency).
        T, rate, q0: per expiry, shape (E,): years to expiry, the curve's zero rate, and the
            starting carry (from :func:`parity_fit` with the curve's discount).
        iv_solver: the batched American IV solve (see :data:`IVSolver`).
        max_pairs: pairs per expiry.
        spot_carry: solve for the spot instead, at this carry: the search's ``q`` becomes the
            carry *equivalent* to pricing at spot ``spot exp((spot_carry - q) T)`` with carry
            ``spot_carry`` (the same forward), and each evaluation prices there
            (``iv_solver(..., spot=...)``). The spot is then ``spot exp((spot_carry - q) T)``
            from the result's ``q``; one root find instead of a search over nested carry solves.

    Returns:
        one :class:`CarryResult` per expiry; an expiry without a usable pair, or whose search
        finds no sign change, has ``converged=False`` and NaN ``q`` (the caller interpolates).
    """
    E = len(pairs)
    out: list[CarryResult | None] = [None] * E
    used: list[ExpiryPairs] = []
    weights: list[np.ndarray] = []
    searches: list[_Search | None] = []
    for e in range(E):
        fwd = spot * math.exp((rate[e] - q0[e]) * T[e])
        p = pairs[e].nearest(fwd, max_pairs) if len(pairs[e]) else pairs[e]
        used.append(p)
        weights.append(np.ones(len(p)))
        if len(p) < MIN_PAIRS_CARRY or not (T[e] > 0) or not np.isfinite(q0[e]):
            out[e] = CarryResult(float("nan"), float("nan"), len(p), 0, False, "no two-sided call/put pair near the money")
            searches.append(None)
            continue
        searches.append(_Search(float(q0[e]), math.sqrt(T[e]) / 0.3989422804014327))
    first = True
    last: list[tuple[float, np.ndarray, np.ndarray] | None] = [None] * E
    while True:
        todo = [e for e in range(E) if searches[e] is not None and not searches[e].done]
        if not todo:
            break
        qs = np.array([searches[e].next_q for e in todo])
        if spot_carry is None:
            diffs = _iv_differences([used[e] for e in todo], T[todo], rate[todo], qs, iv_solver,
                                    [last[e] for e in todo])
        else:
            spots = spot * np.exp((spot_carry - qs) * T[todo])
            diffs = _iv_differences([used[e] for e in todo], T[todo], rate[todo], np.full(qs.size, spot_carry),
                                    iv_solver, [last[e] for e in todo], spots=spots, search_q=qs)
        for k, e in enumerate(todo):
            d, ivc, ivp = diffs[k]
            if first:
                # fix the pair set and the vega weights at q0
                ok = np.isfinite(d)
                used[e] = used[e].take(np.flatnonzero(ok))
                fwd = spot * math.exp((rate[e] - q0[e]) * T[e])
                weights[e] = vega_weights(used[e].strike, 0.5 * (ivc[ok] + ivp[ok]), fwd, T[e])
                d = d[ok]
                if d.size and weights[e].sum() > 0:
                    # Newton slope from the pairs' vega algebra: d(iv_c - iv_p)/dq = sqrt(T)/phi(d1)
                    phi = float(np.sum(weights[e] * weights[e]) / weights[e].sum()) / math.sqrt(T[e])
                    searches[e].slope = math.sqrt(T[e]) / max(phi, 1e-3)
                ivc, ivp = ivc[ok], ivp[ok]
            last[e] = (float(qs[k]), ivc, ivp)
            searches[e].tell(weighted_median(d, weights[e]) if d.size else float("nan"))
        first = False
    for e in range(E):
        s = searches[e]
        if s is None:
            continue
        if s.note or s.result_q is None:
            out[e] = CarryResult(float("nan"), float("nan"), len(used[e]), s.evaluations, False, s.note or "not converged")
        else:
            out[e] = CarryResult(s.result_q, s.result_f, len(used[e]), s.evaluations, True)
    return out  # type: ignore[return-value]


def _iv_differences(pairs: list[ExpiryPairs], T: np.ndarray, rate: np.ndarray, q: np.ndarray,
                    iv_solver: IVSolver, last: list | None = None, spots: np.ndarray | None = None,
                    search_q: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``iv_call - iv_put`` per pair of every expiry at its carry ``q[e]``: ONE batched solve.

    ``last[e]``: ``(q, iv_call, iv_put)`` of the expiry's previous evaluation, or None; its
    volatilities bracket this one's (a carry step of dq moves an IV by about
    ``dq sqrt(T) N(d1) / phi(d1)``), which shortens the root finds. ``spots``: per expiry, the
    spot to price at (``iv_solver(..., spot=...)``) instead of the solver's own, with
    ``search_q`` the search's (equivalent) carries, which ``last`` compares against."""
    sizes = [len(p) for p in pairs]
    m = int(sum(sizes))
    if m == 0:
        return [(np.empty(0), np.empty(0), np.empty(0)) for _ in pairs]
    per = np.repeat(np.arange(len(pairs)), sizes)
    strike = np.concatenate([p.strike for p in pairs])
    prices = np.concatenate([np.concatenate([p.call_mid for p in pairs]), np.concatenate([p.put_mid for p in pairs])])
    kind = np.concatenate([np.ones(m, np.int8), np.zeros(m, np.int8)])
    lo, hi = np.full(2 * m, np.nan), np.full(2 * m, np.nan)
    qe = q if search_q is None else search_q
    if last is not None:
        start = 0
        for e, n in enumerate(sizes):
            prev = last[e]
            if prev is not None and prev[1].size == n:
                w = 0.005 + 4.0 * abs(qe[e] - prev[0]) * math.sqrt(T[e])
                for off, iv in ((0, prev[1]), (m, prev[2])):
                    sl = slice(off + start, off + start + n)
                    lo[sl], hi[sl] = np.maximum(iv - w, 1e-4), iv + w
            start += n
    extra = {} if spots is None else {"spot": np.tile(np.asarray(spots, dtype=np.float64)[per], 2)}
    vol, ok = iv_solver(prices, kind, np.tile(T[per], 2), np.tile(rate[per], 2), np.tile(q[per], 2),
                        np.tile(strike, 2), lo, hi, **extra)
    vol = np.where(ok, vol, np.nan)
    ivc, ivp = vol[:m], vol[m:]
    out = []
    start = 0
    for n in sizes:
        c, p = ivc[start:start + n], ivp[start:start + n]
        out.append((c - p, c, p))
        start += n
    return out


def interpolate_in_time(T: np.ndarray, values: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Fill the unknown entries of ``values`` (per expiry) linearly in T from the known ones,
    flat beyond the first and last known expiry. All NaN when none is known."""
    out = np.asarray(values, dtype=np.float64).copy()
    known = np.asarray(known, dtype=bool) & np.isfinite(out)
    if not known.any():
        return np.full_like(out, np.nan)
    order = np.argsort(T[known])
    out[~known] = np.interp(T[~known], T[known][order], out[known][order])
    return out
