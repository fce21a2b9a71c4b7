"""Black–Scholes–Merton closed forms with a continuous dividend yield, and European implied
volatility.

Price and Greeks follow Merton (1973), "Theory of Rational Option Pricing", with the
dividend-yield form in Hull, *Options, Futures and Other Derivatives* (10th ed.), §17.4 and
§19 (the Greek letters). All inputs are arrays of shape (n,) (scalars broadcast):

* ``kind``: int8 codes, 0 put, 1 call (see :mod:`optiond.models`);
* ``spot``, ``strike`` in currency units; ``expiry`` in years;
* ``rate``, ``dividend_yield``, ``volatility`` annualised, continuously compounded decimals.

Greek units: delta dV/dS, gamma d2V/dS2, theta dV/dt per year of calendar time, vega per 1.00
of volatility, rho per 1.00 of rate, dividend rho dV/dq per 1.00 of dividend yield
(``-T S e^{-qT} N(d1)`` for a call, ``T S e^{-qT} N(-d1)`` for a put: the closed form's derivative in q).

Inputs are assumed validated by :mod:`optiond.models`; these kernels do not re-check them.

The method's front door (the kernel contract the engine calls, as ``kernels/binomial``,
``kernels/mlmc`` and ``kernels/adi`` do): :data:`GPU` (False: the closed form runs on the CPU),
:func:`wants_gpu`, :func:`price` (a :class:`~optiond.models.Result`; American rows marked as
errors) and :func:`implied_vol` (an :class:`~optiond.models.ImpliedVol`; American rows
``american-not-supported``).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from ..columns import as_columns
from ..models import AMERICAN, GREEK_FIELDS, Batch, ImpliedVol, Method, Result
from .rootfind import IV_ABOVE, IV_BELOW, IV_INVALID, IV_OK
from .warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
MIN_IV, MAX_IV = 1e-6, 10.0


@nb.njit(cache=True, nogil=True)
def _ncdf(x):
    return 0.5 * math.erfc(-x / _SQRT2)


@nb.njit(cache=True, nogil=True)
def bs_price_one(is_call, S, K, T, r, q, sigma):
    """Black–Scholes–Merton price of one European option (scalar)."""
    sq = sigma * math.sqrt(T)
    dfq = math.exp(-q * T)
    dfr = math.exp(-r * T)
    if sq <= 0.0:
        fwd = S * dfq - K * dfr
        return max(fwd, 0.0) if is_call else max(-fwd, 0.0)
    d1 = (math.log(S / K) + (r - q) * T) / sq + 0.5 * sq
    d2 = d1 - sq
    if is_call:
        return S * dfq * _ncdf(d1) - K * dfr * _ncdf(d2)
    return K * dfr * _ncdf(-d2) - S * dfq * _ncdf(-d1)


@nb.njit(cache=True, nogil=True)
def _bs_all(is_call, S, K, T, r, q, sigma, out, i):
    sqt = math.sqrt(T)
    sq = sigma * sqt
    dfq = math.exp(-q * T)
    dfr = math.exp(-r * T)
    d1 = (math.log(S / K) + (r - q) * T) / sq + 0.5 * sq
    d2 = d1 - sq
    pdf = _INV_SQRT_2PI * math.exp(-0.5 * d1 * d1)
    gamma = dfq * pdf / (S * sq)
    vega = S * dfq * pdf * sqt
    decay = -S * dfq * pdf * sigma / (2.0 * sqt)
    if is_call:
        n1, n2 = _ncdf(d1), _ncdf(d2)
        price = S * dfq * n1 - K * dfr * n2
        delta = dfq * n1
        theta = decay - r * K * dfr * n2 + q * S * dfq * n1
        rho = K * T * dfr * n2
        drho = -S * T * dfq * n1
    else:
        n1, n2 = _ncdf(-d1), _ncdf(-d2)
        price = K * dfr * n2 - S * dfq * n1
        delta = -dfq * n1
        theta = decay + r * K * dfr * n2 - q * S * dfq * n1
        rho = -K * T * dfr * n2
        drho = S * T * dfq * n1
    out[0, i] = price
    out[1, i] = delta
    out[2, i] = gamma
    out[3, i] = theta
    out[4, i] = vega
    out[5, i] = rho
    out[6, i] = drho


@nb.njit(cache=True, nogil=True)
def _bs_batch(kind, S, K, T, r, q, sigma):
    n = S.shape[0]
    out = np.empty((7, n))
    for i in range(n):
        _bs_all(kind[i] == 1, S[i], K[i], T[i], r[i], q[i], sigma[i], out, i)
    return out


@nb.njit(cache=True, nogil=True)
def bs_one(is_call, S, K, T, r, q, sigma):
    """Price and Greeks of ONE European option, the scalars of :func:`bs_price_greeks` (the same
    kernel, the same bits): ``(price, delta, gamma, theta, vega, rho, dividend_rho)``."""
    out = np.empty((7, 1))
    _bs_all(is_call, S, K, T, r, q, sigma, out, 0)
    return out[0, 0], out[1, 0], out[2, 0], out[3, 0], out[4, 0], out[5, 0], out[6, 0]


def bs_price_greeks(kind, spot, strike, expiry, rate, dividend_yield, volatility):
    """Black–Scholes–Merton price and Greeks for arrays of European options.

    Args:
        kind: int codes, shape (n,) (0 put, 1 call).
        spot, strike, expiry, rate, dividend_yield, volatility: float arrays, shape (n,).

    Returns:
        dict of float64 arrays, shape (n,): ``price`` and :data:`~optiond.models.GREEK_FIELDS`
        (``delta, gamma, theta, vega, rho, dividend_rho``).
    """
    kind, S, K, T, r, q, s = as_columns((kind, np.int8), spot, strike, expiry, rate, dividend_yield, volatility)
    out = _bs_batch(kind, S, K, T, r, q, s)
    return dict(zip(("price",) + GREEK_FIELDS, out))


# ------------------------------------------------------------------ implied volatility

#: Newton steps of one implied volatility at most (it converges in 3 to 12; past that, bisection
#: in the bracket has halved it to the last bit long before)
IV_MAX_ITER = 100


@nb.njit(cache=True, nogil=True)
def _norm_call(x, s):
    """Normalised Black call ``b(x, s) = e^{x/2} N(x/s + s/2) - e^{-x/2} N(x/s - s/2)`` (the
    undiscounted call over sqrt(F K), x = ln(F/K), s = sigma sqrt(T)); at the money
    ``erf(s / sqrt(8))`` exactly."""
    if s <= 0.0:
        return max(math.exp(0.5 * x) - math.exp(-0.5 * x), 0.0)
    if x == 0.0:
        return math.erf(s / (2.0 * _SQRT2))
    h = x / s
    return math.exp(0.5 * x) * _ncdf(h + 0.5 * s) - math.exp(-0.5 * x) * _ncdf(h - 0.5 * s)


@nb.njit(cache=True, nogil=True)
def _norm_iv(beta, x):
    """The s = sigma sqrt(T) > 0 with ``_norm_call(x, s) == beta``, for an out-of-the-money
    x <= 0 and 0 < beta < e^{x/2}.

    Jaeckel (2015), "Let's be rational", Wilmott 2015(75): the curve splits at the inflection
    point s_c = sqrt(2|x|) of b(s); below it (b < b(s_c)) Newton runs on ln b, above it on b
    itself, both increasing and concave in s there, so Newton from the left climbs to the root
    without overshooting and converges quadratically; each step is kept inside the bracket
    [lo, hi] that the signs maintain (bisection otherwise). Stops when a step is below 2 ulps of
    s. Start: above s_c, s_c itself (left of the root); below it, the leading asymptote
    ln b ~ -x^2 / (2 s^2), i.e. s = |x| / sqrt(-2 ln beta), clamped into the bracket."""
    sc = math.sqrt(-2.0 * x)
    bc = _norm_call(x, sc)
    lower = beta < bc
    lo, hi = 0.0, math.inf
    if lower:
        hi = sc
        s = -x / math.sqrt(-2.0 * math.log(beta)) if beta < 1.0 else 0.5 * sc
        if not (0.0 < s < sc):
            s = 0.5 * sc
        lb = math.log(beta)
    else:
        lo = sc
        s = sc if sc > 0.0 else beta * math.sqrt(2.0 * math.pi)  # at the money: b(s) <= s / sqrt(2 pi)
        lb = 0.0
    for _ in range(IV_MAX_ITER):
        b = _norm_call(x, s)
        vega = math.exp(0.5 * x - 0.5 * (x / s + 0.5 * s) ** 2) * _INV_SQRT_2PI  # db/ds
        if lower:
            f = math.log(b) - lb if b > 0.0 else -math.inf
            fp = vega / b if b > 0.0 else math.inf
        else:
            f = b - beta
            fp = vega
        if f == 0.0:
            return s
        if f < 0.0:
            lo = s
        else:
            hi = s
        step = -f / fp if (fp > 0.0 and math.isfinite(fp) and math.isfinite(f)) else math.nan
        nxt = s + step
        if not (lo < nxt < hi):  # outside the bracket (or no step): bisect it
            nxt = 0.5 * (lo + hi) if math.isfinite(hi) else 2.0 * s
            step = nxt - s
        if abs(step) <= 4.0 * 2.220446049250313e-16 * s:
            return nxt
        s = nxt
    return s


@nb.njit(cache=True, nogil=True)
def _bs_iv_batch(target, kind, S, K, T, r, q, lo, hi):
    n = S.shape[0]
    vol = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int8)
    for i in range(n):
        if not (np.isfinite(target[i]) and target[i] >= 0.0):
            status[i] = IV_INVALID
            continue
        c = kind[i] == 1
        flo = bs_price_one(c, S[i], K[i], T[i], r[i], q[i], lo) - target[i]
        fhi = bs_price_one(c, S[i], K[i], T[i], r[i], q[i], hi) - target[i]
        ftol = 1e-13 * max(1.0, target[i])
        if flo > ftol:
            status[i] = IV_BELOW
            continue
        if fhi < -ftol:
            status[i] = IV_ABOVE
            continue
        # normalised: x = ln(F/K), beta = price / (e^{-rT} sqrt(F K)), then out of the money by
        # put-call parity (b_put(x) = b_call(-x); an in-the-money price less its intrinsic value)
        sqt = math.sqrt(T[i])
        x = math.log(S[i] / K[i]) + (r[i] - q[i]) * T[i]
        beta = target[i] / (math.exp(-r[i] * T[i]) * math.sqrt(S[i] * K[i]) * math.exp(0.5 * (r[i] - q[i]) * T[i]))
        if (x > 0.0) == c:  # in the money
            beta -= abs(math.exp(0.5 * x) - math.exp(-0.5 * x))
        ax = -abs(x)
        if beta <= _norm_call(ax, lo * sqt):
            v = lo
        elif beta >= _norm_call(ax, hi * sqt):
            v = hi
        else:
            v = min(max(_norm_iv(beta, ax) / sqt, lo), hi)
        vol[i] = v
        status[i] = IV_OK
    return vol, status


def bs_implied_vol(price, kind, spot, strike, expiry, rate, dividend_yield, lo=MIN_IV, hi=MAX_IV):
    """European implied volatility from the closed form: the price normalised (x = ln(F/K),
    the undiscounted price over sqrt(F K)) and taken out of the money by put-call parity, then
    Newton on the normalised Black price, in ln b below the inflection point and in b above,
    inside a bracket (:func:`_norm_iv`, after Jaeckel 2015, "Let's be rational"). Precision:
    the volatility whose closed-form price is the given price to the last bits: the round
    trip volatility -> price -> volatility agrees to 1e-12 relative for out-of-the-money
    options (moneyness 0.5 to 2, T from a day to 10 years, volatility 10 % to 150 %); for an
    in-the-money option the price's own rounding, against its time value, bounds what any
    method can recover.

    Args:
        price: option prices, shape (n,), currency units.
        kind, spot, strike, expiry, rate, dividend_yield: as :func:`bs_price_greeks`.
        lo, hi: the volatility bracket (annualised decimals), default 1e-6 ... 10.

    Returns:
        ``(vol, status)``: float64 (NaN where none) and int8 status codes from
        :mod:`optiond.kernels.rootfind` (``IV_OK``; ``IV_BELOW`` when the price is below the
        value at the lowest volatility, i.e. below the no-arbitrage intrinsic bound;
        ``IV_ABOVE`` when above the value at the highest; ``IV_INVALID`` for a negative or
        non-finite price). Never raises for an unreachable price.
    """
    p, kind, S, K, T, r, q = as_columns(price, (kind, np.int8), spot, strike, expiry, rate, dividend_yield)
    return _bs_iv_batch(p, kind, S, K, T, r, q, float(lo), float(hi))


# --------------------------------------------------------------------------- the front door

#: the closed form has no GPU path
GPU = False


def wants_gpu(batch: Batch, method: Method) -> bool:
    """Never: the closed form is cheaper than a transfer."""
    return False


def price(batch: Batch, method: Method, device: str = "cpu") -> Result:
    """Prices (and Greeks when ``method.greeks``) of a validated batch, shape (n,) each;
    American rows are marked as errors (the closed form prices European exercise only).
    ``device`` is ignored (CPU)."""
    n = len(batch)
    res = Result.empty(n)
    am = np.flatnonzero(batch.style == AMERICAN)
    if am.size:
        res.mark_error(am, "black-scholes prices European exercise only; use method=binomial for american")
    good = np.flatnonzero(res.ok)
    if good.size == 0:
        return res
    sub = batch if good.size == n else batch.take(good)
    out = bs_price_greeks(sub.kind, sub.spot, sub.strike, sub.expiry, sub.rate, sub.dividend_yield, sub.volatility)
    for name in ("price",) + GREEK_FIELDS:
        getattr(res, name)[good] = out[name] if (method.greeks or name == "price") else np.nan
    return res


def implied_vol(prices: np.ndarray, batch: Batch, method: Method, device: str = "cpu", lo=MIN_IV,
                hi=MAX_IV) -> ImpliedVol:
    """European implied volatilities of ``prices`` (shape (n,)) on the closed form
    (:func:`bs_implied_vol`) over
    the full bracket [:data:`MIN_IV`, :data:`MAX_IV`] (a narrower hint ``lo``, ``hi`` is not
    needed: the closed form is cheap); American rows ``american-not-supported``. ``device`` is
    ignored (CPU)."""
    vol, code = bs_implied_vol(prices, batch.kind, batch.spot, batch.strike, batch.expiry, batch.rate,
                               batch.dividend_yield)
    iv = ImpliedVol.from_codes(vol, code)
    am = batch.style == AMERICAN
    iv.vol[am] = np.nan
    iv.status[am] = "american-not-supported"
    return iv
