"""Black–Scholes–Merton closed forms with a continuous dividend yield, and European implied
volatility.

Price and Greeks follow Merton (1973), "Theory of Rational Option Pricing", with the
dividend-yield form in Hull, *Options, Futures and Other Derivatives* (10th ed.), §17.4 and
§19 (the Greek letters). All inputs are arrays of shape (n,) (scalars broadcast):

* ``kind``: int8 codes, 0 put, 1 call (see :mod:`optiond.models`);
* ``spot``, ``strike`` in currency units; ``expiry`` in years;
* ``rate``, ``dividend_yield``, ``volatility`` annualised, continuously compounded decimals.

Greek units: delta dV/dS, gamma d2V/dS2, theta dV/dt per year of calendar time, vega per 1.00
of volatility, rho per 1.00 of rate.

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
from .rootfind import B, FB, IV_ABOVE, IV_BELOW, IV_INVALID, IV_NOT_CONVERGED, IV_OK, brent_init, brent_step

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
    else:
        n1, n2 = _ncdf(-d1), _ncdf(-d2)
        price = K * dfr * n2 - S * dfq * n1
        delta = -dfq * n1
        theta = decay + r * K * dfr * n2 - q * S * dfq * n1
        rho = -K * T * dfr * n2
    out[0, i] = price
    out[1, i] = delta
    out[2, i] = gamma
    out[3, i] = theta
    out[4, i] = vega
    out[5, i] = rho


@nb.njit(cache=True, nogil=True)
def _bs_batch(kind, S, K, T, r, q, sigma):
    n = S.shape[0]
    out = np.empty((6, n))
    for i in range(n):
        _bs_all(kind[i] == 1, S[i], K[i], T[i], r[i], q[i], sigma[i], out, i)
    return out


def bs_price_greeks(kind, spot, strike, expiry, rate, dividend_yield, volatility):
    """Black–Scholes–Merton price and Greeks for arrays of European options.

    Args:
        kind: int codes, shape (n,) (0 put, 1 call).
        spot, strike, expiry, rate, dividend_yield, volatility: float arrays, shape (n,).

    Returns:
        dict of float64 arrays, shape (n,): ``price, delta, gamma, theta, vega, rho``.
    """
    kind, S, K, T, r, q, s = as_columns((kind, np.int8), spot, strike, expiry, rate, dividend_yield, volatility)
    out = _bs_batch(kind, S, K, T, r, q, s)
    return dict(zip(("price", "delta", "gamma", "theta", "vega", "rho"), out))


@nb.njit(cache=True, nogil=True)
def _bs_iv_batch(target, kind, S, K, T, r, q, lo, hi):
    n = S.shape[0]
    vol = np.full(n, np.nan)
    status = np.zeros(n, dtype=np.int8)
    st = np.empty(8)
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
        brent_init(st, lo, hi, flo, fhi)
        status[i] = IV_NOT_CONVERGED
        for _ in range(200):
            if brent_step(st, 1e-14, ftol):
                status[i] = IV_OK
                break
            st[FB] = bs_price_one(c, S[i], K[i], T[i], r[i], q[i], st[B]) - target[i]
        vol[i] = st[B]
    return vol, status


def bs_implied_vol(price, kind, spot, strike, expiry, rate, dividend_yield, lo=MIN_IV, hi=MAX_IV):
    """European implied volatility by Brent's bracketed root find on the closed form.

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
    """European implied volatilities of ``prices`` (shape (n,)) by Brent on the closed form over
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
