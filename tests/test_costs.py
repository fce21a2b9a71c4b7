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


def _drift_book(n: int, rate=1.0) -> dict:
    """n American puts with r = 1: |r - q| sqrt(T) = 1 > sigma = 0.2, drift-dominated."""
    return dict(kind="put", style="american", spot=100.0, strike=np.linspace(60.0, 140.0, n), expiry=1.0, rate=rate,
                dividend_yield=0.0, volatility=0.2)


@pytest.mark.parametrize("greeks", [False, True])
def test_drift_dominated_spectral_rows_cost_their_tree(greeks):
    """Issue 32, item 11: the spectral door prices drift-dominated rows on the CRR tree, so the
    work model costs them as the same rows with method binomial (the old model costed them at
    the ALO engine's price, some 30 times less); rows the door keeps cost the ALO engine."""
    n = 200
    spectral = Method(name="spectral", accuracy="fast", steps=1000, greeks=greeks)
    tree = Method(name="binomial", steps=1000, greeks=greeks)
    for name in ("spectral", "auto"):
        got = costs.estimate("price", _drift_book(n), spectral if name == "spectral" else
                             Method(name="auto", accuracy="fast", steps=1000, greeks=greeks), n)
        want = costs.estimate("price", _drift_book(n), tree, n)
        assert got.work == want.work == n * 1001 * 1002 / 2 * costs.trees(greeks) and got.max_steps == 1000, name
    calm = costs.estimate("price", _drift_book(n, rate=0.05), spectral, n)  # 0.05 < 0.2: the ALO engine
    assert calm.work == n * costs.SPECTRAL_WORK["fast"] * costs.SPECTRAL_SOLVES["greeks" if greeks else "price"]
    # one route per row, the spectral door's own predicate
    from optiond.kernels.spectral import ROUTE_METHODS

    book = _drift_book(4)
    book.update(rate=[1.0, 0.05, 0.05, -0.01], dividend_yield=[0.0, 0.0, 0.0, -0.02],
                style=["american", "american", "european", "american"])
    routes = [ROUTE_METHODS[c] for c in costs.spectral_routes(book, 4)]
    assert routes == ["binomial", "spectral", "black-scholes", "binomial"]


def test_an_oversized_drift_dominated_batch_is_refused_before_it_is_priced(daemon):
    """The limits refuse by the cost: 100,000 drift-dominated rows need about 5e10 tree nodes,
    seconds of work, over a 1 s deadline: the daemon refuses the request as it arrives (at the
    ALO price, the old cost, 6e9, they were accepted and ran on the tree). The refusal names
    the deadline and says the estimate, which is the tree's."""
    from optiond.daemon.client import RequestRefused

    n = 100_000
    cost = limits.estimate("price", _drift_book(n), Method(name="spectral", greeks=False), n)
    assert cost.work == n * 1001 * 1002 / 2
    with pytest.raises(limits.LimitExceeded) as e:
        limits.Limits().check(cost, 1.0)
    assert e.value.limit == "deadline_s"
    with daemon.client() as client:
        with pytest.raises(RequestRefused, match="deadline"):
            client.price_table(_drift_book(n), Method(name="spectral", greeks=False), fallback=False, deadline_s=1.0,
                               as_job=False)


def test_an_american_range_of_drift_dominated_rows_is_over_the_worksheet_limit():
    """AMERICAN_PUT over 50,000 cells with r = 1: every row goes to the tree (N = 1000, 5e5
    nodes each, 2.5e10 in all, over AMERICAN_MAX_WORK = 2e10), so the call is refused before
    anything is sent (at the ALO price, 3e9, it was sent and ran on the tree in Excel)."""
    from optiond.addin import checks
    spec = table.BY_NAME["AMERICAN_PUT"]
    n = 50_000
    cols = {"spot": np.full(n, 100.0), "strike": np.linspace(60.0, 140.0, n), "expiry": np.ones(n), "rate": np.ones(n),
            "volatility": np.full(n, 0.2), "dividend_yield": np.zeros(n), "accuracy": np.full(n, "accurate", dtype=object)}
    out = checks._pre_checks(spec, cols)
    assert len(out) == n and "worksheet limit" in out[0] and "2.5e+10" in out[0], out[0]
    cols["rate"] = np.full(n, 0.05)  # the ALO engine's rows: 3e9, within the limit
    assert checks._pre_checks(spec, cols) == {}


def test_implied_vols_the_spectral_door_surely_sends_to_the_tree_cost_their_tree():
    """An implied volatility's drift split is by price: a put with r = 1 priced at its European
    value at sigma = 0.3 is under the American price at v* = 1 (the European one at v* is
    already above it), so the door solves it on the tree and it costs the tree's IV; a price
    above the European price at v* may stay with the ALO engine and costs that; without the
    prices the split is left to the solve."""
    from optiond.kernels import black_scholes

    n = 100
    book = _drift_book(n)
    del book["volatility"]
    low = black_scholes.bs_price_greeks(np.zeros(n, dtype=np.int8), np.full(n, 100.0), book["strike"], np.ones(n),
                                        np.ones(n), np.zeros(n), np.full(n, 0.3))["price"]
    high = black_scholes.bs_price_greeks(np.zeros(n, dtype=np.int8), np.full(n, 100.0), book["strike"], np.ones(n),
                                         np.ones(n), np.zeros(n), np.full(n, 1.5))["price"]
    spectral = Method(name="spectral", accuracy="fast", steps=300)
    tree_iv = costs.estimate("implied_vol", book, Method(name="binomial", steps=300), n).work
    assert tree_iv == n * 301 * 302 / 2 * costs.IV_TREES
    assert costs.estimate("implied_vol", {**book, "price": low}, spectral, n).work == tree_iv
    alo_iv = n * costs.SPECTRAL_WORK["fast"] * costs.SPECTRAL_SOLVES["implied_vol"]
    assert costs.estimate("implied_vol", {**book, "price": high}, spectral, n).work == alo_iv
    assert costs.estimate("implied_vol", book, spectral, n).work == alo_iv
