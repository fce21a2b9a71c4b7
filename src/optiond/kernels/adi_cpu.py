"""ADI finite-difference pricers on the CPU (numba): Heston (2-D), Heston-Hull-White (3-D) and
a generic 2-D / 3-D convection-diffusion-reaction solver with mixed derivatives.

Entry points:

* :func:`heston_price` / :func:`heston_price_batch`: European, American and Bermudan puts and
  calls under Heston (1993); price, delta, gamma, theta and ``dv0`` (dV/dv0) at the spot.
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

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from ..models import InvalidInputError, object_full
from .adi import heston as _heston
from .adi import hhw as _hhw
from .adi.operators import BC, PDE  # noqa: F401  (re-exported for the generic solver)
from .adi.solver import DEFAULT_THETA, SCHEME_NAMES, Solution, point_values, scheme_code, solve  # noqa: F401

__all__ = ["heston_price", "heston_price_batch", "hhw_price", "solve", "PDE", "BC", "Solution", "DEFAULT_THETA"]

KINDS = {"put": 0, "p": 0, "call": 1, "c": 1}
STYLES = {"european": "european", "e": "european", "eu": "european", "american": "american", "a": "american",
          "us": "american", "bermudan": "bermudan", "b": "bermudan"}
MAX_GRID = 20_000
#: with ``device="auto"``, batches of at least this many options go to the GPU when one is there
GPU_MIN_BATCH = 8
MAX_TIME_STEPS = 1_000_000


def _kind(kind: Any) -> int:
    if isinstance(kind, (int, np.integer)) and int(kind) in (0, 1):
        return int(kind)
    k = KINDS.get(str(kind).strip().lower())
    if k is None:
        raise InvalidInputError("kind", None, kind, "expected 'put' or 'call'")
    return k


def _style(style: Any) -> str:
    if isinstance(style, (int, np.integer)) and int(style) in (0, 1):
        return ("european", "american")[int(style)]
    s = STYLES.get(str(style).strip().lower())
    if s is None:
        raise InvalidInputError("style", None, style, "expected 'european', 'american' or 'bermudan'")
    return s


def _num(name: str, value: Any, lo: float | None = None, hi: float | None = None, strict_lo: bool = True) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(name, None, value, "not a number") from None
    if not math.isfinite(x):
        raise InvalidInputError(name, None, value, "not a finite number")
    if lo is not None and (x <= lo if strict_lo else x < lo):
        raise InvalidInputError(name, None, value, f"must be {'>' if strict_lo else '>='} {lo:g}")
    if hi is not None and x > hi:
        raise InvalidInputError(name, None, value, f"must be <= {hi:g}")
    return x


def _grid(grid: Sequence[int], nd: int) -> tuple:
    try:
        g = tuple(int(x) for x in grid)
    except (TypeError, ValueError):
        raise InvalidInputError("grid", None, grid, f"expected {nd} node counts") from None
    if len(g) != nd or any(x < 5 or x > MAX_GRID for x in g) or any(float(a) != b for a, b in zip(grid, g)):
        raise InvalidInputError("grid", None, grid, f"expected {nd} whole node counts, each 5..{MAX_GRID}")
    return g


def _steps(time_steps: Any, rannacher: Any) -> tuple[int, int]:
    n = _num("time_steps", time_steps, 1, MAX_TIME_STEPS, strict_lo=False)
    r = _num("rannacher", rannacher, 0, 1000, strict_lo=False)
    if n != int(n) or r != int(r):
        raise InvalidInputError("time_steps" if n != int(n) else "rannacher", None, time_steps if n != int(n) else rannacher,
                                "must be a whole number")
    return int(n), int(r)


def _scheme(scheme: Any) -> int:
    try:
        return scheme_code(scheme)
    except ValueError as e:
        raise InvalidInputError("scheme", None, scheme, str(e)) from None


def _heston_params(spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho) -> dict:
    return dict(
        spot=_num("spot", spot, 0.0), strike=_num("strike", strike, 0.0), expiry=_num("expiry", expiry, 0.0, 100.0),
        rate=_num("rate", rate, -1.0, 1.0), dividend_yield=_num("dividend_yield", dividend_yield, -1.0, 1.0),
        v0=_num("v0", v0, 0.0, 25.0, strict_lo=False), kappa=_num("kappa", kappa, 0.0, 1000.0, strict_lo=False),
        theta=_num("theta", theta, 0.0, 25.0, strict_lo=False), xi=_num("xi", xi, 0.0, 100.0, strict_lo=False),
        rho=_num("rho", rho, -1.0, 1.0, strict_lo=False),
    )


def _exercise_taus(style: str, expiry: float, exercise_dates) -> tuple:
    if style != "bermudan":
        return ()
    if exercise_dates is None or len(exercise_dates) == 0:
        raise InvalidInputError("exercise_dates", None, exercise_dates, "bermudan exercise needs dates (years from now)")
    t = np.asarray(exercise_dates, dtype=np.float64)
    if np.any(~np.isfinite(t)) or np.any(t < 0) or np.any(t > expiry * (1 + 1e-12)):
        raise InvalidInputError("exercise_dates", None, exercise_dates, f"dates must lie in [0, expiry={expiry:g}]")
    return tuple(expiry - t)


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
                 rannacher: int = 2, device: str = "cpu", exercise_dates: Sequence[float] | None = None,
                 scheme_theta: float | None = None, v_max_bc: str = "linear", s_max: float | None = None,
                 v_max: float | None = None, return_grid: bool = False) -> dict:
    """Price one vanilla option under Heston by ADI finite differences.

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
        device: ``"cpu"``, ``"gpu"`` (CuPy; European/American on the default domain) or
            ``"auto"`` (the CPU: one 2-D problem does not fill a GPU; batches go to the GPU,
            see :func:`heston_price_batch`).
        v_max_bc, s_max, v_max: boundary condition at v = V and domain overrides (see
            :mod:`optiond.kernels.adi.heston`).
        return_grid: also return ``s``, ``v`` and ``values`` (the solution on the grid).

    Returns:
        dict: ``price, delta, gamma, theta, dv0`` (floats) and ``grid, time_steps, scheme,
        scheme_theta, elapsed_s, device, s_max, v_max``.

    Raises:
        InvalidInputError: a bad argument (field, value and reason in the message).
    """
    k, st = _kind(kind), _style(style)
    p = _heston_params(spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho)
    n_s, n_v = _grid(grid, 2)
    N, R = _steps(time_steps, rannacher)
    code = _scheme(scheme)
    taus = _exercise_taus(st, p["expiry"], exercise_dates)
    dev = str(device).lower()
    if dev not in ("cpu", "gpu", "auto"):
        raise InvalidInputError("device", None, device, "expected 'cpu', 'gpu' or 'auto'")
    if dev == "gpu":
        if st == "bermudan" or v_max_bc != "linear" or s_max is not None or v_max is not None or return_grid:
            raise InvalidInputError("device", None, device,
                                    "the GPU path prices European and American options on the default domain only")
        from . import adi_gpu

        res = adi_gpu.heston_price_batch(k, st, p["spot"], p["strike"], p["expiry"], p["rate"], p["dividend_yield"],
                                         p["v0"], p["kappa"], p["theta"], p["xi"], p["rho"], scheme=code,
                                         grid=(n_s, n_v), time_steps=N, rannacher=R, scheme_theta=scheme_theta)
        if res["status"][0] != "ok":
            raise InvalidInputError("device", None, device, str(res["error"][0]))
        out = {key: float(res[key][0]) for key in RESULT_KEYS}
        out.update(grid=(n_s, n_v), time_steps=N, scheme=SCHEME_NAMES[code], scheme_theta=res["scheme_theta"],
                   elapsed_s=res["elapsed_s"], device=res["device"])
        return out
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


BATCH_FIELDS = ("kind", "style", "spot", "strike", "expiry", "rate", "dividend_yield", "v0", "kappa", "theta", "xi", "rho")
RESULT_KEYS = ("price", "delta", "gamma", "theta", "dv0")


def _broadcast(cols: dict) -> tuple[dict, int]:
    arrs = {k: np.asarray(v) for k, v in cols.items()}
    lengths = {a.shape[0] for a in arrs.values() if a.ndim == 1}
    if any(a.ndim > 1 for a in arrs.values()) or len(lengths) > 1:
        raise InvalidInputError("columns", None, {k: a.shape for k, a in arrs.items()}, "scalars or 1-D columns of one length")
    n = lengths.pop() if lengths else 1
    return {k: (np.full(n, a.item(), dtype=a.dtype) if a.ndim == 0 else a) for k, a in arrs.items()}, n


def heston_price_batch(kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho,
                       scheme: str = "mcs", grid: Sequence[int] = (200, 100), time_steps: int = 100,
                       rannacher: int = 2, device: str = "cpu", threads: int | None = None) -> dict:
    """Price a batch of Heston options (columns: scalars or 1-D arrays of one length n).

    European and American rows only (Bermudan needs per-row dates: use :func:`heston_price`).
    On the CPU the options are priced in parallel threads (the numba kernels release the
    GIL); ``device="gpu"`` (or ``"auto"`` with a GPU present and at least ``GPU_MIN_BATCH``
    options) sends the whole batch to :func:`optiond.kernels.adi_gpu.heston_price_batch`.

    Returns:
        dict of arrays of length n: ``price, delta, gamma, theta, dv0`` (float64, NaN on failed
        rows), ``status`` (``"ok"``/``"error"``) and ``error`` (the reason), plus ``device`` and
        ``elapsed_s``.

    Raises:
        InvalidInputError: columns of different lengths, or a bad scheme/grid/steps (these
            concern the whole batch; bad values in a row only mark that row).
    """
    cols, n = _broadcast(dict(zip(BATCH_FIELDS, (kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho))))
    code = _scheme(scheme)
    g = _grid(grid, 2)
    N, R = _steps(time_steps, rannacher)
    dev = str(device).lower()
    if dev not in ("cpu", "gpu", "auto"):
        raise InvalidInputError("device", None, device, "expected 'cpu', 'gpu' or 'auto'")
    if dev == "gpu" or (dev == "auto" and n >= GPU_MIN_BATCH):
        from . import adi_gpu

        if dev == "gpu" or adi_gpu.available():
            return adi_gpu.heston_price_batch(*(cols[f] for f in BATCH_FIELDS), scheme=code, grid=g, time_steps=N, rannacher=R)
    out = {k: np.full(n, np.nan) for k in RESULT_KEYS}
    status = object_full(n, "ok")
    error = object_full(n, "")
    t0 = time.perf_counter()

    def one(i: int) -> None:
        try:
            st = _style(cols["style"][i])
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
    k, st = _kind(kind), _style(style)
    p = _heston_params(spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho)
    a = _num("hw_a", hw_a, 0.0, 100.0)
    sr = _num("hw_sigma", hw_sigma, 0.0, 10.0, strict_lo=False)
    rsr = _num("rho_sr", rho_sr, -1.0, 1.0, strict_lo=False)
    rvr = _num("rho_vr", rho_vr, -1.0, 1.0, strict_lo=False)
    n_s, n_v, n_r = _grid(grid, 3)
    N, R = _steps(time_steps, rannacher)
    code = _scheme(scheme)
    taus = _exercise_taus(st, p["expiry"], exercise_dates)
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
