"""Vectorised exp, log and the normal distribution function for the spectral engine's CPU
kernels (numba): branch-free polynomial and rational forms that the compiler vectorises, over
lengths padded to :data:`PAD`; their accuracies are in each docstring. The GPU kernels
(``spectral.cu``) take the same rational Phi (Cody's coefficients) and the device's exp and log.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# W. J. Cody (1969), "Rational Chebyshev approximations for the error function", Math. Comp.
# 23(107), 631-637 (the coefficients of his CALERF, ACM TOMS Algorithm 715): erf on
# |y| <= 0.46875, erfc(y) e^{y^2} on (0.46875, 4] and on (4, inf).
_CA = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03,
       1.85777706184603153e-1)
_CB = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_CC = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
       8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
       2.15311535474403846e-8)
_CD = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
       3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03)
_CP = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
       6.58749161529837803e-4, 1.63153871373020978e-2)
_CQ = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
       2.33520497626869185e-3)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


@nb.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _erf_small(y):
    """erf(y) for |y| <= 0.46875 (Cody's first rational, in y^2)."""
    z = y * y
    num = _CA[4] * z
    den = z
    for i in range(3):
        num = (num + _CA[i]) * z
        den = (den + _CB[i]) * z
    return y * (num + _CA[3]) / (den + _CB[3])


@nb.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _erfcx_mid(y):
    """erfc(y) e^{y^2} for 0.46875 < y <= 4 (Cody's second rational)."""
    num = _CC[8] * y
    den = y
    for i in range(7):
        num = (num + _CC[i]) * y
        den = (den + _CD[i]) * y
    return (num + _CC[7]) / (den + _CD[7])


@nb.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _erfcx_big(y):
    """erfc(y) e^{y^2} for y > 4 (Cody's third rational, in 1 / y^2)."""
    z = 1.0 / (y * y)
    num = _CP[5] * z
    den = z
    for i in range(4):
        num = (num + _CP[i]) * z
        den = (den + _CQ[i]) * z
    return (_INV_SQRT_PI - z * (num + _CP[4]) / (den + _CQ[4])) / y


@nb.njit(cache=True, nogil=True, error_model="numpy")
def ncdf_e(x, ex):
    """The normal distribution function Phi(x), given ``ex = exp(-x^2 / 2)`` (which the caller
    also needs for the density): Cody's rational approximations of erf / erfc (module
    constants), so a (Phi, phi) pair costs one exp. Relative error of the tail a few 1e-16
    (plus ``x^2 / 2`` times the rounding of ``ex``)."""
    y = abs(x) * (1.0 / _SQRT2)
    if y <= 0.46875:
        erf = _erf_small(y)
        return 0.5 + 0.5 * erf if x >= 0.0 else 0.5 - 0.5 * erf
    tail = 0.5 * ex * (_erfcx_mid(y) if y <= 4.0 else _erfcx_big(y))  # Phi(-|x|) = erfc(|x| / sqrt 2) / 2
    return tail if x < 0.0 else 1.0 - tail


_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238      # ln 2 split (Cody & Waite): the high part has 32 bits
_LN2_LO = 1.9082149292705877e-10
#: 1/12!, ..., 1/1!, 1/0!: Taylor coefficients of e^r after 1/13! (Horner)
_EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(12, -1, -1))
#: 1/23, 1/21, ..., 1/3: atanh(t) / t = sum t^{2k} / (2k + 1) after 1/25 (Horner in t^2)
_ATANH_SERIES = tuple(1.0 / k for k in range(23, 2, -2))


#: the vector passes' lengths are rounded up to this (twice AVX-512's eight doubles)
PAD = 16


@nb.njit(cache=True, nogil=True, inline="always")
def padded(n, a, b, c):
    """n rounded up to :data:`PAD`, at most the shortest of the three arrays (and at least n)."""
    return max(n, min((n + PAD - 1) // PAD * PAD, a.shape[0], b.shape[0], c.shape[0]))


@nb.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def vexp(x, out, kb, n):
    """``out[:n] = exp(x[:n])`` in a loop the compiler vectorises (no libm call): x = k ln 2 +
    r with |r| <= ln 2 / 2 (Cody-Waite reduction), e^r by its Taylor polynomial of degree 13
    (truncation below 5e-18), 2^k built in the exponent bits (``kb``, int64 scratch). Relative
    error a few 1e-16; x < -708 gives 0 (no subnormals). The pass runs over ``n`` rounded up to
    :data:`PAD` where the arrays have room (short loops otherwise run in their scalar remainder):
    the entries past n are scratch."""
    n = padded(n, x, out, kb)
    for i in range(n):
        xi = max(x[i], -708.0)
        kf = math.floor(xi * _LOG2E + 0.5)
        r = (xi - kf * _LN2_HI) - kf * _LN2_LO
        e = 1.0 / 6227020800.0                              # 1/13!
        for c in _EXP_TAYLOR:
            e = e * r + c
        out[i] = e if x[i] > -708.0 else 0.0
        kb[i] = (np.int64(kf) + 1023) << 52
    sc = kb.view(np.float64)
    for i in range(n):
        out[i] *= sc[i]



@nb.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def vlog(x, out, kb, n):
    """``out[:n] = ln(x[:n])`` (x positive and normal) in loops the compiler vectorises: x =
    2^e m with m in [sqrt(1/2), sqrt(2)) from the bits (``kb``, int64 scratch), ln m =
    2 atanh((m - 1) / (m + 1)) by its series to s^25 (truncation below 1e-19). About one ulp.
    Padded as :func:`vexp`."""
    n = padded(n, x, out, kb)
    xb = x.view(np.int64)
    for i in range(n):
        bits = xb[i]
        kb[i] = (bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000    # the mantissa, in [1, 2)
        out[i] = (bits >> 52) - 1023
    mv = kb.view(np.float64)
    for i in range(n):
        m = mv[i]
        big = m > 1.4142135623730951
        m = 0.5 * m if big else m
        e = out[i] + 1.0 if big else out[i]
        t = (m - 1.0) / (m + 1.0)
        z = t * t
        c = 1.0 / 25.0
        for a in _ATANH_SERIES:
            c = c * z + a
        out[i] = (e * _LN2_LO + (2.0 * t + 2.0 * t * z * c)) + e * _LN2_HI

@nb.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def vncdf(x, ex, out, n):
    """``out[:n] = Phi(x[:n])`` given ``ex[:n] = exp(-x^2 / 2)``: :func:`ncdf_e` without
    branches (Cody's rationals, then a select), so the loop vectorises; the third rational
    (|x| > 4 sqrt 2) only where some argument needs it. Padded as :func:`vexp`."""
    big = 0.0
    for i in range(n):
        big = max(big, abs(x[i]))
    n = padded(n, x, ex, out)  # (the entries past n are scratch, whatever their branch)
    if big * (1.0 / _SQRT2) <= 4.0:  # no argument in the third rational's range: two rationals
        for i in range(n):
            xi = x[i]
            y = abs(xi) * (1.0 / _SQRT2)
            erf = _erf_small(y)
            small = 0.5 + 0.5 * erf if xi >= 0.0 else 0.5 - 0.5 * erf
            tail = 0.5 * ex[i] * _erfcx_mid(y)
            far = tail if xi < 0.0 else 1.0 - tail
            out[i] = small if y <= 0.46875 else far
        return
    for i in range(n):
        xi = x[i]
        y = abs(xi) * (1.0 / _SQRT2)
        erf = _erf_small(y)
        small = 0.5 + 0.5 * erf if xi >= 0.0 else 0.5 - 0.5 * erf
        tail = 0.5 * ex[i] * (_erfcx_mid(y) if y <= 4.0 else _erfcx_big(max(y, 4.0)))
        far = tail if xi < 0.0 else 1.0 - tail
        out[i] = small if y <= 0.46875 else far

@nb.njit(cache=True, nogil=True, error_model="numpy")
def _Phi(x):
    return ncdf_e(x, math.exp(-0.5 * x * x))



@nb.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def one_minus_exp(x, ex):
    """``1 - e^{-x}`` for x >= 0 given ``ex = e^{-x}``: the difference from x = 1e-3 up
    (relative error under 1e-13), the Taylor series to x^4 below (truncation under 1e-17
    relative); branch-free, so loops over it vectorise (the GPU takes the same form)."""
    series = x * (1.0 - x * (0.5 - x * (1.0 / 6.0 - x * (1.0 / 24.0))))
    return series if x < 1e-3 else 1.0 - ex
