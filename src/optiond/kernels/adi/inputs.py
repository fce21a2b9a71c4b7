"""Validation of the ADI pricers' inputs, shared by the CPU (:mod:`.cpu`) and GPU (:mod:`.gpu`)
paths and the front door: every bad value raises :class:`optiond.models.InvalidInputError`
naming the field, the value and the reason, in the same order on every path.

Units: ``expiry`` in years, ``rate``, ``dividend_yield`` continuously compounded annual
decimals; ``v0`` and ``theta`` are variances (0.04 = 20 % volatility), ``kappa`` per year,
``xi`` the volatility of variance, ``rho`` the spot-variance correlation.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...models import InvalidInputError
from .solver import scheme_code

KINDS = {"put": 0, "p": 0, "call": 1, "c": 1}
STYLES = {"european": "european", "e": "european", "eu": "european", "american": "american", "a": "american",
          "us": "american", "bermudan": "bermudan", "b": "bermudan"}
MAX_GRID = 20_000
MAX_TIME_STEPS = 1_000_000
#: the columns of a Heston batch, in argument order
BATCH_FIELDS = ("kind", "style", "spot", "strike", "expiry", "rate", "dividend_yield", "v0", "kappa", "theta", "xi", "rho")
#: the per-option results of a Heston pricer
RESULT_KEYS = ("price", "delta", "gamma", "theta", "dv0")


def parse_kind(kind: Any) -> int:
    """0 (put) or 1 (call) from ``"put"``/``"call"`` (or 0/1)."""
    if isinstance(kind, (int, np.integer)) and int(kind) in (0, 1):
        return int(kind)
    k = KINDS.get(str(kind).strip().lower())
    if k is None:
        raise InvalidInputError("kind", None, kind, "expected 'put' or 'call'")
    return k


def parse_style(style: Any) -> str:
    """``"european"``, ``"american"`` or ``"bermudan"`` (codes 0/1: european/american)."""
    if isinstance(style, (int, np.integer)) and int(style) in (0, 1):
        return ("european", "american")[int(style)]
    s = STYLES.get(str(style).strip().lower())
    if s is None:
        raise InvalidInputError("style", None, style, "expected 'european', 'american' or 'bermudan'")
    return s


def parse_number(name: str, value: Any, lo: float | None = None, hi: float | None = None, strict_lo: bool = True) -> float:
    """A finite float in ``(lo, hi]`` (``[lo, hi]`` with ``strict_lo=False``; None: no bound)."""
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


def parse_grid(grid: Sequence[int], nd: int) -> tuple:
    """``nd`` whole node counts, each 5..:data:`MAX_GRID`."""
    try:
        g = tuple(int(x) for x in grid)
    except (TypeError, ValueError):
        raise InvalidInputError("grid", None, grid, f"expected {nd} node counts") from None
    if len(g) != nd or any(x < 5 or x > MAX_GRID for x in g) or any(float(a) != b for a, b in zip(grid, g)):
        raise InvalidInputError("grid", None, grid, f"expected {nd} whole node counts, each 5..{MAX_GRID}")
    return g


def parse_steps(time_steps: Any, rannacher: Any) -> tuple[int, int]:
    """``(time_steps, rannacher)`` as whole numbers (1..:data:`MAX_TIME_STEPS`, 0..1000)."""
    n = parse_number("time_steps", time_steps, 1, MAX_TIME_STEPS, strict_lo=False)
    r = parse_number("rannacher", rannacher, 0, 1000, strict_lo=False)
    if n != int(n) or r != int(r):
        raise InvalidInputError("time_steps" if n != int(n) else "rannacher", None, time_steps if n != int(n) else rannacher,
                                "must be a whole number")
    return int(n), int(r)


def parse_scheme(scheme: Any) -> int:
    """The scheme code (:func:`optiond.kernels.adi.solver.scheme_code`) of a name or code."""
    try:
        return scheme_code(scheme)
    except ValueError as e:
        raise InvalidInputError("scheme", None, scheme, str(e)) from None


def heston_params(spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho) -> dict:
    """The contract and Heston parameters as checked floats (a dict by name)."""
    return dict(
        spot=parse_number("spot", spot, 0.0), strike=parse_number("strike", strike, 0.0),
        expiry=parse_number("expiry", expiry, 0.0, 100.0),
        rate=parse_number("rate", rate, -1.0, 1.0), dividend_yield=parse_number("dividend_yield", dividend_yield, -1.0, 1.0),
        v0=parse_number("v0", v0, 0.0, 25.0, strict_lo=False), kappa=parse_number("kappa", kappa, 0.0, 1000.0, strict_lo=False),
        theta=parse_number("theta", theta, 0.0, 25.0, strict_lo=False), xi=parse_number("xi", xi, 0.0, 100.0, strict_lo=False),
        rho=parse_number("rho", rho, -1.0, 1.0, strict_lo=False),
    )


def exercise_taus(style: str, expiry: float, exercise_dates) -> tuple:
    """Times to maturity of the Bermudan exercise dates (``()`` for other styles)."""
    if style != "bermudan":
        return ()
    if exercise_dates is None or len(exercise_dates) == 0:
        raise InvalidInputError("exercise_dates", None, exercise_dates, "bermudan exercise needs dates (years from now)")
    t = np.asarray(exercise_dates, dtype=np.float64)
    if np.any(~np.isfinite(t)) or np.any(t < 0) or np.any(t > expiry * (1 + 1e-12)):
        raise InvalidInputError("exercise_dates", None, exercise_dates, f"dates must lie in [0, expiry={expiry:g}]")
    return tuple(expiry - t)


def heston_inputs(kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho, grid, time_steps,
                  rannacher, scheme, exercise_dates) -> tuple:
    """One Heston option's inputs checked in order: ``(kind, style, params, (n_s, n_v),
    time_steps, rannacher, scheme code, exercise taus)``."""
    k, st = parse_kind(kind), parse_style(style)
    p = heston_params(spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho)
    g = parse_grid(grid, 2)
    N, R = parse_steps(time_steps, rannacher)
    code = parse_scheme(scheme)
    return k, st, p, g, N, R, code, exercise_taus(st, p["expiry"], exercise_dates)


def broadcast(cols: dict) -> tuple[dict, int]:
    """Scalars and 1-D columns of one length n as 1-D columns of length n, and n."""
    arrs = {k: np.asarray(v) for k, v in cols.items()}
    lengths = {a.shape[0] for a in arrs.values() if a.ndim == 1}
    if any(a.ndim > 1 for a in arrs.values()) or len(lengths) > 1:
        raise InvalidInputError("columns", None, {k: a.shape for k, a in arrs.items()}, "scalars or 1-D columns of one length")
    n = lengths.pop() if lengths else 1
    return {k: (np.full(n, a.item(), dtype=a.dtype) if a.ndim == 0 else a) for k, a in arrs.items()}, n


def batch_inputs(values: Sequence, scheme: Any, grid: Sequence[int], time_steps: Any, rannacher: Any) -> tuple:
    """A Heston batch's columns (``values`` in :data:`BATCH_FIELDS` order) and its shared
    settings checked in order: ``(columns, n, scheme code, (n_s, n_v), time_steps, rannacher)``."""
    cols, n = broadcast(dict(zip(BATCH_FIELDS, values)))
    code = parse_scheme(scheme)
    g = parse_grid(grid, 2)
    N, R = parse_steps(time_steps, rannacher)
    return cols, n, code, g, N, R


def parse_device(device: Any) -> str:
    """``"cpu"``, ``"gpu"`` or ``"auto"``."""
    dev = str(device).lower()
    if dev not in ("cpu", "gpu", "auto"):
        raise InvalidInputError("device", None, device, "expected 'cpu', 'gpu' or 'auto'")
    return dev
