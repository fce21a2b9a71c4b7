"""The best inside share any arbitrage-free smile can reach on one expiry's quotes: a
mixed-integer LP over undiscounted call prices (the yardstick of a fit's inside share).

On one expiry, with ``x_i = K_i / F_T`` the quoted strikes over the forward (sorted,
distinct) and each quote's band ``[iv_bid, iv_ask]`` turned into undiscounted call prices over
the forward, ``[lo_i, hi_i]`` (:func:`optiond.surface.calls.black_call`; a put's band is the
call's by put-call parity, at the same volatility), the programme is::

    maximise    sum z_i                         (z_i binary: quote i is inside)
    subject to  lo_i - (1 - z_i) <= c_i <= hi_i + (1 - z_i)      (big-M = 1: 0 <= c <= 1)
                s_j = (c_{j+1} - c_j) / (x_{j+1} - x_j),  -1 <= s_j <= s_{j+1} <= 0
                (c_0 - 1) / x_0 <= s_0,  c_0 >= 1 - x_0,  c_{n-1} >= 0

the conditions of a call price curve without static arbitrage on the quoted strikes (Carr &
Madan 2005, "A note on sufficient conditions for no arbitrage", Finance Research Letters 2:
decreasing, convex, slopes in [-1, 0], ``c(0) = 1``): a curve with these values at the strikes
extends to an arbitrage-free smile between and beyond them (linear between the strikes, flat
beyond the last), and conversely. Optionally the density has a log-Lipschitz bound:
with ``p_j`` the density at the ``j``-th inner strike (second difference of ``c``),
``p_{j+1} <= exp(L |k_{j+1} - k_j|) p_j`` and the reverse (``k = ln x``): a smooth density,
not one concentrated on a few strikes. Solved by HiGHS (``scipy.optimize.milp``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from .calls import black_call

#: HiGHS's time limit per expiry, seconds (the answer is then the best found, ``optimal`` False)
TIME_LIMIT = 10.0


@dataclass(frozen=True)
class Achievable:
    """One expiry's achievable share.

    Attributes:
        count: the most quotes inside their band (the best HiGHS found).
        quotes: the quotes given.
        bound: HiGHS's upper bound on ``count`` (== count when optimal).
        optimal: the count is proven the most.
        inside: per quote (in the order given), inside in the best solution, shape (n,) bool.
        calls: the solution's undiscounted call prices over the forward, shape (n,).
    """

    count: int
    quotes: int
    bound: int
    optimal: bool
    inside: np.ndarray
    calls: np.ndarray

    @property
    def share(self) -> float:
        return self.count / self.quotes if self.quotes else float("nan")


def call_constraints(x: np.ndarray, lipschitz: float | None = None) -> tuple[coo_matrix, np.ndarray, np.ndarray]:
    """The no-arbitrage rows ``lo <= A c <= hi`` on call prices ``c`` at sorted distinct
    ``x`` (shape (n,)): slopes in [-1, 0], convexity, the boundary at ``x = 0``, ``c_{n-1} >= 0``
    (and the density's log-Lipschitz bound ``lipschitz`` when given). Returns ``(A, lo, hi)``
    with ``A`` of shape (m, n)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    h = np.diff(x)
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def add(entries, a, b):
        nonlocal r
        for j, v in entries:
            rows.append(r)
            cols.append(j)
            vals.append(v)
        lo.append(a)
        hi.append(b)
        r += 1

    for j in range(n - 1):  # -1 <= s_j <= 0
        add([(j, -1.0 / h[j]), (j + 1, 1.0 / h[j])], -1.0, 0.0)
    for j in range(n - 2):  # s_{j+1} - s_j >= 0
        add([(j, 1.0 / h[j]), (j + 1, -1.0 / h[j] - 1.0 / h[j + 1]), (j + 2, 1.0 / h[j + 1])], 0.0, np.inf)
    # from (0, 1) to (x_0, c_0): slope >= -1 and <= s_0
    add([(0, 1.0)], max(1.0 - x[0], 0.0), np.inf)
    if n > 1:
        add([(0, 1.0 / x[0] + 1.0 / h[0]), (1, -1.0 / h[0])], -np.inf, 1.0 / x[0])
    add([(n - 1, 1.0)], 0.0, np.inf)
    if lipschitz is not None and n > 3:
        # p_j at inner strike j+1: 2 (s_{j+1} - s_j) / (x_{j+2} - x_j); ratio of neighbours bounded
        k = np.log(x)

        def p(j):
            f = 2.0 / (x[j + 2] - x[j])
            return [(j, f / h[j]), (j + 1, -f / h[j] - f / h[j + 1]), (j + 2, f / h[j + 1])]

        for j in range(n - 3):
            e = float(np.exp(lipschitz * (k[j + 2] - k[j + 1])))
            a, b = p(j), p(j + 1)
            add([(c, -e * v) for c, v in a] + list(b), -np.inf, 0.0)  # p_{j+1} - e p_j <= 0
            add(list(a) + [(c, -e * v) for c, v in b], -np.inf, 0.0)  # p_j - e p_{j+1} <= 0
    A = coo_matrix((vals, (rows, cols)), shape=(r, n))
    A.sum_duplicates()
    return A, np.array(lo), np.array(hi)


@contextlib.contextmanager
def quiet_stdout():
    """File descriptor 1 sent to the null device for the block: HiGHS's MIP solver prints
    debugging lines there itself (not through its ``disp`` option), which would mix into a
    command's output. Not for threads that print meanwhile."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no real stdout (captured): nothing to guard
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def achievable(x, iv_bid, iv_ask, T: float, *, lipschitz: float | None = None,
               time_limit: float = TIME_LIMIT) -> Achievable:
    """The most quotes of one expiry an arbitrage-free smile lies inside (module docstring).

    Args:
        x: strikes over the forward, ``K / F_T``, shape (n,), distinct and > 0 (any order).
        iv_bid, iv_ask: each quote's implied volatilities at bid and ask, annualised decimals,
            shape (n,); ``iv_bid <= iv_ask``.
        T: time to expiry, years (> 0).
        lipschitz: the density's log-Lipschitz constant (per unit of log-moneyness), or None
            for none (the widest bound).
        time_limit: HiGHS's limit, seconds.

    Returns:
        :class:`Achievable`.

    Raises:
        ValueError: arrays of different shapes, strikes not distinct and > 0, a band not
            finite with ``iv_bid <= iv_ask``, or ``T <= 0``.
    """
    x, b, a = (np.asarray(v, dtype=np.float64) for v in (x, iv_bid, iv_ask))
    if not (x.shape == b.shape == a.shape and x.ndim == 1):
        raise ValueError("x, iv_bid and iv_ask must be 1-D arrays of one length")
    if not (T > 0):
        raise ValueError(f"time to expiry must be > 0, got {T}")
    if not (np.all(np.isfinite(x)) and np.all(x > 0)) or np.unique(x).size != x.size:
        raise ValueError("strikes over the forward must be finite, > 0 and distinct")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(a)) and np.all(b >= 0) and np.all(a >= b)):
        raise ValueError("each band needs finite 0 <= iv_bid <= iv_ask")
    n = x.size
    if n == 0:
        return Achievable(0, 0, 0, True, np.zeros(0, bool), np.zeros(0))
    o = np.argsort(x)
    xs = x[o]
    sq = np.sqrt(T)
    lo_c, hi_c = black_call(xs, b[o] * sq), black_call(xs, a[o] * sq)
    A, alo, ahi = call_constraints(xs, lipschitz)
    # in units of the median half-spread above the intrinsic value, c = floor + scale u: the
    # solver's tolerances are then shares of a spread, not of the forward
    floor = np.maximum(1.0 - xs, 0.0)
    scale = max(float(np.median(0.5 * (hi_c - lo_c))), 1e-12)
    lu, hu = (lo_c - floor) / scale, (hi_c - floor) / scale
    top = (1.0 - floor) / scale
    Af = A @ floor
    arb_lo, arb_hi = (alo - Af) / scale, (ahi - Af) / scale
    m_up, m_lo = np.maximum(top - hu, 0.0), np.maximum(lu, 0.0)  # the big-Ms: u in [0, top]
    # variables: u (n), z (n); u_i + m_up z_i <= hu_i + m_up ; u_i - m_lo z_i >= lu_i - m_lo
    I = np.eye(n)
    band = LinearConstraint(np.block([[I, np.diag(m_up)], [I, -np.diag(m_lo)]]),
                            np.r_[np.full(n, -np.inf), lu - m_lo], np.r_[hu + m_up, np.full(n, np.inf)])
    arb = LinearConstraint(np.hstack([A.toarray(), np.zeros((A.shape[0], n))]), arb_lo, arb_hi)
    cost = np.r_[np.zeros(n), -np.ones(n)]
    with quiet_stdout():
        res = milp(cost, constraints=[band, arb], integrality=np.r_[np.zeros(n), np.ones(n)],
                   bounds=Bounds(np.zeros(2 * n), np.r_[top, np.ones(n)]),
                   options={"time_limit": float(time_limit)})
    if res.x is None:  # nothing found in the time (never infeasible: z = 0 and c intrinsic is a point)
        return Achievable(0, n, n, False, np.zeros(n, bool), np.full(n, np.nan))
    u = res.x[:n]
    z = res.x[n:] > 0.5
    # polish: the quotes it counts as bounds on u, an LP (the big-M rows hold only to the
    # integrality tolerance times M)
    with quiet_stdout():
        pol = milp(np.zeros(n), constraints=[LinearConstraint(A.toarray(), arb_lo, arb_hi)],
                   bounds=Bounds(np.where(z, lu, 0.0), np.where(z, hu, top)))
    if pol.x is not None:
        u = pol.x
    tol = 1e-6  # a millionth of a half-spread
    inside_sorted = (u >= lu - tol) & (u <= hu + tol)
    inside = np.empty(n, bool)
    inside[o] = inside_sorted
    calls = np.empty(n)
    calls[o] = floor + scale * u
    bound = getattr(res, "mip_dual_bound", None)
    ub = n if bound is None or not np.isfinite(bound) else int(np.floor(-bound + 1e-6))
    count = int(inside.sum())
    return Achievable(count, n, max(min(ub, n), count), bool(res.status == 0), inside, calls)

__all__ = ["Achievable", "TIME_LIMIT", "achievable", "call_constraints", "quiet_stdout"]
