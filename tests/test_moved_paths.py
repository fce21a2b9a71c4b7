"""Old import paths kept for one release: each still works, warns, and reaches the new object."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

# ---- the work model: optiond.daemon.limits -> optiond.costs ---------------------------------

_LIMITS_MOVED = ("IV_TREES", "GREEK_TREES", "BYTES_PER_OPTION", "DEFAULT_NS_PER_NODE", "CLOSED_FORM_WORK",
                 "MLMC_STEPS_EPS2", "COST_MODELS", "adi_work", "mlmc_path_steps", "row_weights", "tree_nodes",
                 "tree_nodes_rows", "tree_work_rows")


@pytest.mark.parametrize("name", _LIMITS_MOVED)
def test_limits_work_model_names_warn_and_are_the_costs_objects(name):
    from optiond import costs
    from optiond.daemon import limits

    with pytest.warns(DeprecationWarning, match=f"optiond.costs.{name}"):
        old = getattr(limits, name)
    assert old is getattr(costs, name)


def test_limits_costed_tree_work_rows_keeps_its_per_option_limit():
    from optiond import costs
    from optiond.daemon import limits

    with pytest.warns(DeprecationWarning, match="optiond.costs.costed_tree_work_rows"):
        old = limits.costed_tree_work_rows
    steps = np.array([100, 2_000_000])  # the second is over max_tree_nodes: it costs nothing
    want = costs.costed_tree_work_rows(steps, False, caps=limits.DEFAULT_LIMITS)
    assert want[1] == 0.0 and want[0] == costs.tree_nodes(100)
    np.testing.assert_array_equal(old(steps, False), want)
    np.testing.assert_array_equal(old(steps, False, "implied_vol"), costs.tree_work_rows(steps, False, "implied_vol"))


def test_limits_kept_names_do_not_warn():
    from optiond.daemon import limits

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
