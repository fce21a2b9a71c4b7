"""Old import paths of moved modules keep working for one release: importing one warns
(DeprecationWarning naming the new path) and yields the new module object itself."""

from __future__ import annotations

import importlib
import sys

import pytest


# --------------------------------------------------------------------------- the binomial method's room

BINOMIAL_MOVES = [
    ("optiond.kernels.binomial_cpu", "optiond.kernels.binomial.cpu"),
    ("optiond.kernels.binomial_gpu", "optiond.kernels.binomial.gpu"),
    ("optiond.kernels.binomial_pipeline_gpu", "optiond.kernels.binomial.pipeline"),
    ("optiond.kernels.binomial_iv_gpu", "optiond.kernels.binomial.iv_gpu"),
    ("optiond.kernels.dispatch", "optiond.kernels.binomial.plan"),
    ("optiond.kernels.gpu_timer", "optiond.kernels.binomial.timer"),
]


@pytest.mark.parametrize("old, new", BINOMIAL_MOVES)
def test_binomial_old_path_warns_and_is_the_new_module(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)
