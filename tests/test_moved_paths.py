"""Old import paths and names kept for one release: each still works, warns
(DeprecationWarning) and gives the very object at its new place."""

from __future__ import annotations

import importlib

import pytest


# ---- the pricer adapter's old names (now in optiond.pricer) -----------------------------------

@pytest.mark.parametrize("module,old,new", [
    ("optiond.chain", "LocalPricer", "optiond.pricer.LocalPricer"),
    ("optiond.chain", "Pricer", "optiond.pricer.Pricer"),
    ("optiond.commands.pricing", "ClientPricer", "optiond.commands.pricing.daemon_pricer"),
])
def test_old_pricer_names_warn_and_are_the_new_ones(module, old, new):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        got = getattr(mod, old)
    where, _, name = new.rpartition(".")
    assert got is getattr(importlib.import_module(where), name)
    with pytest.warns(DeprecationWarning):
        exec(f"from {module} import {old} as imported", ns := {})
    assert ns["imported"] is got
    with pytest.raises(AttributeError):
        getattr(mod, "NoSuchName")
