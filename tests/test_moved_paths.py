"""Old import paths and names kept for one release: each still works, warns
(DeprecationWarning) and gives the very object at its new place."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import numpy as np
import pytest


# --------------------------------------------------------------------------- the MLMC and ADI methods' rooms

MLMC_ADI_MOVES = [
    ("optiond.kernels.mlmc_cpu", "optiond.kernels.mlmc.cpu"),
    ("optiond.kernels.mlmc_gpu", "optiond.kernels.mlmc.gpu"),
    ("optiond.kernels.philox", "optiond.kernels.mlmc.philox"),
    ("optiond.kernels.adi_cpu", "optiond.kernels.adi"),  # the earlier front door: the front door
    ("optiond.kernels.adi_gpu", "optiond.kernels.adi.gpu"),
]


@pytest.mark.parametrize("old, new", MLMC_ADI_MOVES)
def test_mlmc_adi_old_path_warns_and_is_the_new_module(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)


def test_mlmc_adi_old_names_still_resolve(monkeypatch):
    """What callers read from the old modules is still there (same objects as the new homes)."""
    for old in ("optiond.kernels.mlmc_cpu", "optiond.kernels.mlmc_gpu", "optiond.kernels.adi_cpu"):
        monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning):
        adi_cpu, mlmc_cpu, mlmc_gpu = (importlib.import_module(f"optiond.kernels.{m}") for m in ("adi_cpu", "mlmc_cpu", "mlmc_gpu"))
    from optiond.kernels import gpu
    from optiond.kernels.adi import cpu
    from optiond.kernels.mlmc import level0

    assert mlmc_cpu.level0_mean is level0.level0_mean and mlmc_cpu.PAYOFF_CODES is level0.PAYOFF_CODES
    assert mlmc_gpu.gpu_available is gpu.available and mlmc_gpu.device_count is gpu.device_count
    assert adi_cpu.hhw_price is cpu.hhw_price and adi_cpu.GPU_MIN_BATCH == 8 and callable(adi_cpu.heston_price_batch)


def test_optiond_kernels_mlmc_keeps_its_names():
    """``optiond.kernels.mlmc`` became a package: what was imported from the module is still there."""
    from optiond.kernels import mlmc

    for name in ("MLMCResult", "MLMCTestReport", "chunk_layout", "make_sampler", "mlmc_adaptive", "mlmc_price",
                 "mlmc_price_batch", "mlmc_test", "exact_level0_mean", "level_cost", "regression_exponent",
                 "MAX_CHUNKS", "DEFAULT_N0", "DEFAULT_L_MIN", "DEFAULT_L_MAX", "DEFAULT_THETA", "ALPHA_MAX",
                 "NSTAT", "PAYOFF_CODES", "PAYOFF_NAMES", "CPUSampler", "level0_mean", "unit_size", "seed_key"):
        assert hasattr(mlmc, name), name


# ---- the work model: optiond.limits -> optiond.costs ---------------------------------

_LIMITS_MOVED = ("IV_TREES", "GREEK_TREES", "BYTES_PER_OPTION", "DEFAULT_NS_PER_NODE", "CLOSED_FORM_WORK",
                 "MLMC_STEPS_EPS2", "COST_MODELS", "adi_work", "mlmc_path_steps", "row_weights", "tree_nodes",
                 "tree_nodes_rows", "tree_work_rows")


@pytest.mark.parametrize("name", _LIMITS_MOVED)
def test_limits_work_model_names_warn_and_are_the_costs_objects(name):
    from optiond import costs
    from optiond import limits

    with pytest.warns(DeprecationWarning, match=f"optiond.costs.{name}"):
        old = getattr(limits, name)
    assert old is getattr(costs, name)


def test_limits_costed_tree_work_rows_keeps_its_per_option_limit():
    from optiond import costs
    from optiond import limits

    with pytest.warns(DeprecationWarning, match="optiond.costs.costed_tree_work_rows"):
        old = limits.costed_tree_work_rows
    steps = np.array([100, 2_000_000])  # the second is over max_tree_nodes: it costs nothing
    want = costs.costed_tree_work_rows(steps, False, caps=limits.DEFAULT_LIMITS)
    assert want[1] == 0.0 and want[0] == costs.tree_nodes(100)
    np.testing.assert_array_equal(old(steps, False), want)
    np.testing.assert_array_equal(old(steps, False, "implied_vol"), costs.tree_work_rows(steps, False, "implied_vol"))


def test_limits_kept_names_do_not_warn():
    from optiond import limits

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in ("Cost", "DEFAULT_LIMITS", "Limits", "LimitExceeded", "estimate", "row_limit_errors"):
            getattr(limits, name)
    with pytest.raises(AttributeError):
        limits.no_such_name  # noqa: B018


def test_addin_table_generator_command_still_runs_and_warns():
    proc = subprocess.run([sys.executable, "-m", "optiond.addin.table", "--reference"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# optiond worksheet functions")
    assert "DeprecationWarning" in proc.stderr and "optiond.addin.generate" in proc.stderr


# --------------------------------------------------------------------------- the daemon's rooms

DAEMON_MOVES = [("optiond.daemon.pricing_ops", "optiond.daemon.pricing"), ("optiond.daemon.limits", "optiond.limits")]


@pytest.mark.parametrize("old, new", DAEMON_MOVES)
def test_daemon_old_path_warns_and_is_the_new_module(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)


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
