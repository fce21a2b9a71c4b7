"""The work model (optiond.costs) is the one the daemon, the client and the add-in count with."""

from __future__ import annotations

import numpy as np
import pytest

from optiond import costs
from optiond.addin import table
from optiond import limits
from optiond.models import Method

CELL = {"kind": "put", "style": "american", "spot": 100.0, "strike": 100.0, "expiry": 1.0, "rate": 0.03,
        "volatility": 0.2}


@pytest.mark.parametrize("greeks", [False, True])
@pytest.mark.parametrize("op", ["price", "implied_vol"])
@pytest.mark.parametrize("N", [1, 100, 1000, 1_000_000])
def test_one_tree_cost_is_the_estimate_of_one_option(N, greeks, op):
    got = costs.one_tree_cost(N, greeks, op, 0.7, limits.DEFAULT_LIMITS)
    want = limits.estimate(op, CELL, Method(steps=N, greeks=greeks), 1, ns_per_node=0.7)
    assert want == costs.estimate(op, CELL, Method(steps=N, greeks=greeks), 1, ns_per_node=0.7,
                                  caps=limits.DEFAULT_LIMITS)
    over = op == "price" and costs.tree_work_rows(N, greeks) > limits.DEFAULT_LIMITS.max_tree_nodes
    if over:  # a row error: no work, no time (the short path still holds its N in the memory)
        assert got.work == want.work == 0 and got.cpu_s == want.cpu_s == 0 and got.max_steps == N
    else:
        assert got == want


def test_the_caps_leave_out_rows_over_a_per_option_limit():
    cols = dict(CELL, steps=np.array([100, 2_000_000]))  # 2e6 steps: 1e12 nodes, over max_tree_nodes
    capped = costs.estimate("price", cols, Method(greeks=False), 2, caps=limits.DEFAULT_LIMITS)
    assert capped.work == costs.tree_nodes(100) and capped.max_steps == 100
    assert costs.estimate("price", cols, Method(greeks=False), 2).work == costs.tree_nodes([100, 2_000_000])


def test_the_addin_counts_trees_as_the_daemon_does():
    """The add-in's counts and the work model's against the closed form: a CRR tree of N steps
    has (N + 1)(N + 2) / 2 nodes; Greeks take 7 trees (the price and six bumps: vega, rho, dividend rho), an implied
    volatility 50 (the root find's trees); an ADI Heston solve n_spot x n_variance x steps cells."""
    steps = np.array([1.0, 10.0, 1000.0])
    nodes = np.array([3.0, 66.0, 501501.0])
    np.testing.assert_array_equal(table.bopm_tree_nodes(steps), nodes)
    np.testing.assert_array_equal(table.bopm_tree_nodes(steps, "greeks"), 7 * nodes)
    np.testing.assert_array_equal(table.bopm_tree_nodes(steps, "iv"), 50 * nodes)
    np.testing.assert_array_equal(table.bopm_tree_nodes(steps), costs.tree_work_rows(steps, False))
    np.testing.assert_array_equal(table.bopm_tree_nodes(steps, "greeks"), costs.tree_work_rows(steps, True))
    np.testing.assert_array_equal(table.bopm_tree_nodes(steps, "iv"), costs.tree_work_rows(steps, False, "implied_vol"))
    assert (table.BOPM_GREEK_TREES, table.BOPM_IV_TREES) == (costs.GREEK_TREES, costs.IV_TREES) == (7, 50)
    assert table.heston_grid_work(3) == 3 * 200 * 100 * 100  # three options on the 200 x 100 grid, 100 steps
    assert table.heston_grid_work(3) == 3 * costs.adi_grid_work(table.HESTON_GRID, table.HESTON_TIME_STEPS)[1]


def test_every_method_has_a_work_model_and_the_spectral_one_scales_with_accuracy_and_greeks():
    from optiond import costs
    from optiond.models import METHODS, Method

    assert set(METHODS) <= set(costs.COST_MODELS)
    cols = {"spot": [100.0] * 8}
    work = {acc: costs.estimate("price", cols, Method(name="spectral", accuracy=acc, greeks=False), 8).work
            for acc in ("fast", "accurate", "high-precision")}
    assert work == {acc: 8 * costs.SPECTRAL_WORK[acc] for acc in work}
    greeks = costs.estimate("price", cols, Method(name="spectral", accuracy="fast"), 8).work
    iv = costs.estimate("implied_vol", cols, Method(name="spectral", accuracy="fast"), 8).work
    assert greeks == 7 * work["fast"] and iv == 8 * work["fast"]  # price + vega, rho, dividend rho pairs


def test_adi_work_counts_the_step_ladder_and_the_richardson_pair():
    """The default ADI (160 x 80, 50 steps, 80 a year, Richardson) costs per row the fine grid's
    cells times the row's ladder steps (50 at half a year, 800 at ten years), times 9/8 for
    the half grid with half the steps; a single fixed grid costs grid x time_steps a row."""
    from optiond import costs
    from optiond.models import Method

    m = Method(name="adi")
    cols = {"expiry": np.array([0.5, 10.0])}
    work, _ = costs.COST_MODELS["adi"][1](m, cols, 2, "price", None)
    assert work == 160 * 80 * (50 + 800) * 1.125
    single = Method(name="adi", grid=(200, 100), time_steps=100, steps_per_year=0.0, richardson=False)
    assert costs.COST_MODELS["adi"][1](single, cols, 2, "price", None)[0] == 2 * 200 * 100 * 100
