"""The units the Greeks are shown in: ``raw`` (the engine's) or ``trader`` (a desk's).

Every pricer returns the Greeks of :data:`optiond.models.GREEK_FIELDS` in ``raw`` units:
delta dV/dS, gamma d2V/dS2, theta dV/dt per year of calendar time, vega per 1.00 of
volatility, rho per 1.00 of rate, dividend_rho per 1.00 of dividend yield. A desk quotes
them in ``trader`` units instead: theta per calendar day (raw / 365), vega per volatility
point (raw / 100: 0.20 -> 0.21), rho and dividend rho per 1 % of rate or yield (raw / 100);
delta and gamma are the same in both.

The one place the Excel functions (their ``units`` argument and header row) and the command
line (``optiond price`` and ``optiond chain``, ``--greeks raw|trader``) read the factors and
the names from. Raw columns keep their plain names (``theta``); trader columns say their unit
(``theta_per_day``), so a file never leaves its unit unstated.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .models import GREEK_FIELDS

#: the unit systems, the engine's first
UNITS = ("raw", "trader")
#: what a Greek is divided by to go from raw to trader units (days a year for theta)
TRADER_DIVISORS: Mapping[str, float] = {"delta": 1.0, "gamma": 1.0, "theta": 365.0, "vega": 100.0, "rho": 100.0,
                                        "dividend_rho": 100.0}
#: the column name of each Greek in trader units (raw units: the plain name)
TRADER_NAMES: Mapping[str, str] = {"delta": "delta", "gamma": "gamma", "theta": "theta_per_day",
                                   "vega": "vega_per_vol_point", "rho": "rho_per_pct",
                                   "dividend_rho": "dividend_rho_per_pct"}
#: a header row's label of each Greek, by unit system (Excel's ``header`` row)
LABELS: Mapping[str, Mapping[str, str]] = {
    "raw": {"delta": "delta", "gamma": "gamma", "theta": "theta (per year)", "vega": "vega (per 1.00 vol)",
            "rho": "rho (per 1.00)", "dividend_rho": "dividend rho (per 1.00)"},
    "trader": {"delta": "delta", "gamma": "gamma", "theta": "theta (per day)", "vega": "vega (per vol point)",
               "rho": "rho (per 1%)", "dividend_rho": "dividend rho (per 1%)"},
}
assert set(TRADER_DIVISORS) == set(TRADER_NAMES) == set(GREEK_FIELDS)


def check_units(units: str) -> str:
    """``units`` lower-cased and stripped, if one of :data:`UNITS`.

    Raises:
        ValueError: any other value.
    """
    u = str(units).strip().lower()
    if u not in UNITS:
        raise ValueError(f'units must be "raw" or "trader", got {units!r}')
    return u


def divisors(units: str, fields: tuple[str, ...] = GREEK_FIELDS) -> np.ndarray:
    """The divisor of each of ``fields`` in ``units`` (all 1 for ``raw``), float64 shape (k,)."""
    if check_units(units) == "raw":
        return np.ones(len(fields))
    return np.array([TRADER_DIVISORS[f] for f in fields])


def column_name(field: str, units: str) -> str:
    """The output column of the Greek ``field`` in ``units``: ``theta`` raw, ``theta_per_day``
    trader."""
    return field if check_units(units) == "raw" else TRADER_NAMES[field]


def convert_frame(df, units: str, prefixes: tuple[str, ...] = ("",)):
    """``df`` (a pandas DataFrame of results) with its Greek columns in ``units``: every column
    ``<prefix><greek>`` (``model_theta``, ``theo_vega`` ...) divided and renamed
    (``model_theta_per_day``); ``df`` itself for ``raw``."""
    if check_units(units) == "raw":
        return df
    out = df.copy()
    renames = {}
    for p in prefixes:
        for g in GREEK_FIELDS:
            name = p + g
            if name in out.columns and TRADER_DIVISORS[g] != 1.0:
                out[name] = out[name] / TRADER_DIVISORS[g]
                renames[name] = p + TRADER_NAMES[g]
    return out.rename(columns=renames)


__all__ = ["LABELS", "TRADER_DIVISORS", "TRADER_NAMES", "UNITS", "check_units", "column_name", "convert_frame",
           "divisors"]
