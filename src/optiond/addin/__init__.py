"""optiond in Excel: the worksheet functions (xlwings user-defined functions).

* :mod:`optiond.addin.table`: the one table of functions, arguments, descriptions and
  defaults, which builds the xlwings decorators;
* :mod:`optiond.addin.generate`: the VBA modules and the documentation, generated from the
  table (``python -m optiond.addin.generate --write-vba`` regenerates ``addin/vba/``);
* :mod:`optiond.addin.functions`: the functions themselves (``BOPM_PUT``, ``BOPM_CALL``,
  ``BS_PUT``, ``BS_CALL``, ``BOPM_IV``, ``BOPM_GREEKS``, ``MLMC_CALL``, ``MLMC_PUT``,
  ``MLMC_ASIAN_CALL``, ``MLMC_DIGITAL_CALL``, ``MLMC_STDERR``, ``HESTON_CALL``,
  ``HESTON_PUT``, ``PARITY_FORWARD``, ``SURFACE_FIT``, ``SURFACE_VOL``, ``SURFACE_PRICE``),
  :func:`~optiond.addin.functions.evaluate` (the body of every one) and their registration
  with the ``formulas`` package (:func:`register_formulas`);
* :mod:`optiond.addin.surfaces`: the functions on surfaces the daemon keeps by name;
* :mod:`optiond.addin.cells`: reading the cells (parsing, validating, broadcasting) and the
  ``#optiond:`` texts the cells show;
* :mod:`optiond.addin.checks`: the rows not sent (per-row checks, the work limits);
* :mod:`optiond.addin.pricing`: the requests, priced in this process or by the daemon;
* :mod:`optiond.addin.cache`: their request cache (:func:`clear_cache`; ``OPTIOND_CACHE=0``
  turns it off).

xlwings' ``UDF_MODULES`` setting names ``optiond.addin.functions``. The names below are
imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {name: "functions" for name in ("BOPM_CALL", "BOPM_GREEKS", "BOPM_IV", "BOPM_PUT", "BS_CALL", "BS_PUT",
                                           "HESTON_CALL", "HESTON_PUT", "MLMC_ASIAN_CALL", "MLMC_CALL",
                                           "MLMC_DIGITAL_CALL", "MLMC_PUT", "MLMC_STDERR", "PARITY_FORWARD",
                                           "SURFACE_FIT", "SURFACE_PRICE", "SURFACE_VOL", "WORKSHEET_FUNCTIONS",
                                           "cache_info", "clear_cache", "register_formulas")}
_EXPORTS["FUNCTIONS"] = "table"

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
