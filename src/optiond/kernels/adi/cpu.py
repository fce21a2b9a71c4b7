"""The gold reference of the ADI method: finite-difference pricers on the CPU (numba) for Heston
(2-D), Heston-Hull-White (3-D) and a generic 2-D / 3-D convection-diffusion-reaction solver with
mixed derivatives.

Entry points:

* :func:`heston_price` / :func:`heston_price_batch`: European, American and Bermudan puts and
  calls under Heston (1993); price, delta, gamma, theta and ``dv0`` (dV/dv0) at the spot. (The
  front door :mod:`optiond.kernels.adi` adds the choice of device.)
* :func:`hhw_price`: the same under Heston-Hull-White (stochastic short rate).
* :func:`solve` with :class:`PDE` / :class:`BC`: any 2-D or 3-D PDE
  ``u_tau = sum a_i u_ii + sum b_ij u_ij + sum c_i u_i - r u`` with coefficient functions of the
  coordinates and time to maturity.

Method (details and sources in :mod:`optiond.kernels.adi.solver` and
:mod:`optiond.kernels.adi.operators`): second-order finite differences on non-uniform
sinh-stretched grids (in 't Hout & Foulon 2010, §2.2) with the strike on a node; the Douglas,
Craig-Sneyd, Modified Craig-Sneyd and Hundsdorfer-Verwer ADI schemes (in 't Hout & Foulon 2010,
§3) with the mixed derivatives explicit; a Rannacher start (Douglas theta = 1 half steps);
Ikonen-Toivanen operator splitting for American exercise; Thomas line solves in numba.

Units: ``expiry`` in years, ``rate``, ``dividend_yield`` continuously compounded annual
decimals; ``v0`` and ``theta`` are variances (0.04 = 20 % volatility), ``kappa`` per year,
``xi`` the volatility of variance, ``rho`` the spot-variance correlation. Greeks: ``delta`` =
dV/dS, ``gamma`` = d2V/dS2, ``theta`` = dV/dt per year of calendar time, ``dv0`` = dV/dv0.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from ...models import InvalidInputError, object_full
from . import heston as _heston
from . import hhw as _hhw
from .inputs import (BATCH_FIELDS, RESULT_KEYS, batch_inputs, exercise_taus, heston_inputs, heston_params, parse_grid,
                     parse_kind, parse_number, parse_scheme, parse_steps, parse_style)
from .operators import BC, PDE  # noqa: F401  (re-exported for the generic solver)
from .solver import DEFAULT_THETA, SCHEME_NAMES, Solution, point_values, solve  # noqa: F401

__all__ = ["heston_price", "heston_price_batch", "hhw_price", "solve", "PDE", "BC", "Solution", "DEFAULT_THETA"]


def _greeks(axes, sol: Solution, point) -> dict:
    pv = point_values(axes, sol.values, point)
    rt = point_values(axes, sol.rate_of_change, point)["value"]
    out = {"price": pv["value"], "delta": pv["d0"], "gamma": pv["d00"], "theta": -rt, "dv0": pv["d1"]}
    if len(axes) == 3:
        out["dr0"] = pv["d2"]
    return out


def heston_price(kind: Any, style: Any, spot: float, strike: float, expiry: float, rate: float,
                 dividend_yield: float, v0: float, kappa: float, theta: float, xi: float, rho: float,
                 scheme: str = "mcs", grid: Sequence[int] = (200, 100), time_steps: int = 100,
                 rannacher: int = 2, exercise_dates: Sequence[float] | None = None,
                 scheme_theta: float | None = None, v_max_bc: str = "linear", s_max: float | None = None,
                 v_max: float | None = None, return_grid: bool = False) -> dict:
    """Price one vanilla option under Heston by ADI finite differences on the CPU.

    Args:
        kind: ``"put"`` / ``"call"`` (or 0 / 1).
        style: ``"european"``, ``"american"`` (Ikonen-Toivanen) or ``"bermudan"`` (then
            ``exercise_dates``, years from now in ``[0, expiry]``).
        spot, strike: > 0, currency units. expiry: years (> 0).
        rate, dividend_yield: continuously compounded annual decimals.
        v0, kappa, theta, xi, rho: Heston initial variance, mean-reversion speed, long-run
            variance, volatility of variance, correlation.
        scheme: ``"do"``, ``"cs"``, ``"mcs"`` (default) or ``"hv"``; ``scheme_theta`` overrides
            the scheme's default theta (1/2, 1/2, 1/3, 1/2 + sqrt(3)/6).
        grid: ``(n_s, n_v)`` node counts. time_steps: uniform steps before refinement.
        rannacher: initial steps replaced by two Douglas theta = 1 half steps each.
        v_max_bc, s_max, v_max: boundary condition at v = V and domain overrides (see
            :mod:`optiond.kernels.adi.heston`).
        return_grid: also return ``s``, ``v`` and ``values`` (the solution on the grid).

    Returns:
        dict: ``price, delta, gamma, theta, dv0`` (floats) and ``grid, time_steps, scheme,
        scheme_theta, elapsed_s, device, s_max, v_max``.

    Raises:
        InvalidInputError: a bad argument (field, value and reason in the message).
    """
    k, st, p, (n_s, n_v), N, R, code, taus = heston_inputs(kind, style, spot, strike, expiry, rate, dividend_yield, v0,
                                                          kappa, theta, xi, rho, grid, time_steps, rannacher, scheme,
                                                          exercise_dates)
    s_ax, v_ax = _heston.heston_grids(p["spot"], p["strike"], p["expiry"], p["v0"], p["kappa"], p["theta"], p["xi"],
                                      n_s, n_v, s_max=s_max, v_max=v_max)
    if not (s_ax[0] <= p["spot"] <= s_ax[-1]) or not (p["v0"] <= v_ax[-1]):
        raise InvalidInputError("spot", None, spot, "spot or v0 outside the grid: raise s_max / v_max")
    pde = _heston.heston_pde(s_ax, v_ax, k, st, p["strike"], p["rate"], p["dividend_yield"], p["kappa"], p["theta"],
                             p["xi"], p["rho"], v_max_bc=v_max_bc)
    pay = _heston.payoff(s_ax, n_v, k, p["strike"])
    t0 = time.perf_counter()
    sol = solve(pde, pay, p["expiry"], N, code, scheme_theta, R, exercise=st, obstacle=pay, exercise_taus=taus)
    out = _greeks((s_ax, v_ax), sol, (p["spot"], p["v0"]))
    out.update(grid=(n_s, n_v), time_steps=N, scheme=SCHEME_NAMES[code], scheme_theta=sol.info["theta"],
               elapsed_s=time.perf_counter() - t0, device="cpu", s_max=float(s_ax[-1]), v_max=float(v_ax[-1]))
    if return_grid:
        out.update(s=s_ax, v=v_ax, values=sol.values, lam=sol.lam)
    return out


def heston_price_batch(kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho,
                       scheme: str = "mcs", grid: Sequence[int] = (200, 100), time_steps: int = 100,
                       rannacher: int = 2, threads: int | None = None) -> dict:
    """Price a batch of Heston options on the CPU (columns: scalars or 1-D arrays of one length n).

    European and American rows only (Bermudan needs per-row dates: use :func:`heston_price`).
    The options are priced in parallel threads (the numba kernels release the GIL).

    Returns:
        dict of arrays of length n: ``price, delta, gamma, theta, dv0`` (float64, NaN on failed
        rows), ``status`` (``"ok"``/``"error"``) and ``error`` (the reason), plus ``device`` and
        ``elapsed_s``.

    Raises:
        InvalidInputError: columns of different lengths, or a bad scheme/grid/steps (these
            concern the whole batch; bad values in a row only mark that row).
    """
    cols, n, code, g, N, R = batch_inputs((kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi,
                                           rho), scheme, grid, time_steps, rannacher)
    out = {k: np.full(n, np.nan) for k in RESULT_KEYS}
    status = object_full(n, "ok")
    error = object_full(n, "")
    t0 = time.perf_counter()

    def one(i: int) -> None:
        try:
            st = parse_style(cols["style"][i])
            if st == "bermudan":
                raise InvalidInputError("style", i, "bermudan", "use heston_price for bermudan exercise")
            r = heston_price(cols["kind"][i], st, *(cols[f][i] for f in BATCH_FIELDS[2:]), scheme=code, grid=g,
                             time_steps=N, rannacher=R)
            for k in RESULT_KEYS:
                out[k][i] = r[k]
        except (ValueError, ArithmeticError) as e:
            status[i] = "error"
            error[i] = str(e)

    workers = max(1, min(n, threads or os.cpu_count() or 1))
    if workers == 1:
        for i in range(n):
            one(i)
    else:
        with ThreadPoolExecutor(workers) as ex:
            list(ex.map(one, range(n)))
    out.update(status=status, error=error, device="cpu", elapsed_s=time.perf_counter() - t0)
    return out


def hhw_price(kind: Any, style: Any, spot: float, strike: float, expiry: float, rate: float, dividend_yield: float,
              v0: float, kappa: float, theta: float, xi: float, rho: float, hw_a: float, hw_sigma: float,
              rho_sr: float = 0.0, rho_vr: float = 0.0, scheme: str = "hv", grid: Sequence[int] = (60, 30, 20),
              time_steps: int = 50, rannacher: int = 2, exercise_dates: Sequence[float] | None = None,
              scheme_theta: float | None = None, return_grid: bool = False) -> dict:
    """Price one vanilla option under Heston-Hull-White by 3-D ADI.

    The short rate follows Hull-White ``dr = (b(t) - a r) dt + sigma_r dW_3`` fitted to a flat
    curve at ``rate`` (continuous); see :mod:`optiond.kernels.adi.hhw`.

    Args:
        hw_a, hw_sigma: Hull-White mean reversion (> 0) and volatility (>= 0).
        rho_sr, rho_vr: correlations of the short rate with the spot and with the variance.
        grid: ``(n_s, n_v, n_r)``. Other arguments as :func:`heston_price`.

    Returns:
        dict: ``price, delta, gamma, theta, dv0, dr0`` (dV/dr0 along the short-rate axis, the
        curve held fixed) and ``grid, time_steps, scheme, elapsed_s, device``.

    Raises:
        InvalidInputError: a bad argument.
    """
    k, st = parse_kind(kind), parse_style(style)
    p = heston_params(spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho)
    a = parse_number("hw_a", hw_a, 0.0, 100.0)
    sr = parse_number("hw_sigma", hw_sigma, 0.0, 10.0, strict_lo=False)
    rsr = parse_number("rho_sr", rho_sr, -1.0, 1.0, strict_lo=False)
    rvr = parse_number("rho_vr", rho_vr, -1.0, 1.0, strict_lo=False)
    n_s, n_v, n_r = parse_grid(grid, 3)
    N, R = parse_steps(time_steps, rannacher)
    code = parse_scheme(scheme)
    taus = exercise_taus(st, p["expiry"], exercise_dates)
    s_ax, v_ax, r_ax = _hhw.hhw_grids(p["spot"], p["strike"], p["expiry"], p["v0"], p["kappa"], p["theta"], p["xi"],
                                      p["rate"], a, sr, n_s, n_v, n_r)
    pde = _hhw.hhw_pde(s_ax, v_ax, r_ax, k, st, p["strike"], p["expiry"], p["rate"], p["dividend_yield"], p["kappa"],
                       p["theta"], p["xi"], p["rho"], a, sr, rsr, rvr)
    pay2 = _heston.payoff(s_ax, n_v, k, p["strike"])
    pay = np.ascontiguousarray(np.repeat(pay2[:, :, None], n_r, axis=2))
    t0 = time.perf_counter()
    sol = solve(pde, pay, p["expiry"], N, code, scheme_theta, R, exercise=st, obstacle=pay, exercise_taus=taus)
    out = _greeks((s_ax, v_ax, r_ax), sol, (p["spot"], p["v0"], p["rate"]))
    out.update(grid=(n_s, n_v, n_r), time_steps=N, scheme=SCHEME_NAMES[code], scheme_theta=sol.info["theta"],
               elapsed_s=time.perf_counter() - t0, device="cpu")
    if return_grid:
        out.update(s=s_ax, v=v_ax, r=r_ax, values=sol.values)
    return out
