"""What a pricing request costs: the one work model, for the daemon's limits, the client's
choice of a job, the engine's per-row checks and the Excel functions' budgets.

Work is counted in each method's own unit:

* CRR binomial: tree nodes, ``(N+1)(N+2)/2`` a tree (:func:`tree_nodes_rows`), times
  :data:`GREEK_TREES` with Greeks (the price, and a bumped pair of trees each for vega, rho and
  the dividend rho)
  and times :data:`IV_TREES` for an implied volatility (one tree per root-finder step)
  (:func:`tree_work_rows`);
* MLMC: path steps, about ``MLMC_STEPS_EPS2 / eps**2`` an option (:func:`mlmc_path_steps`;
  Giles' MLMC with a Milstein scheme costs O(eps^-2)), or the payoff-aware upper bound the
  worksheet functions use (:func:`mlmc_path_steps_bound`);
* ADI: grid-cell updates, ``n_spot * n_variance * time_steps`` an option, and grid nodes
  ``n_spot * n_variance`` (the memory of one solve) (:func:`adi_work`);
* a closed form: :data:`CLOSED_FORM_WORK` units a price; the semi-analytic Heston engine:
  :data:`HESTON_WORK` units a price.

:func:`estimate` costs a whole request (a :class:`Cost`: work, single-core seconds, memory);
new pricing methods add their work function to :data:`COST_MODELS`. The limits themselves
(how much work a request or a row may ask for) are :mod:`optiond.limits`; the
functions here take them as ``caps`` where a row over a per-option limit, which is a row
error and never priced, costs nothing.

Units: work in tree nodes (or the method's own unit), time in seconds, memory in bytes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from .models import (AMERICAN, KIND_CODES, MAX_STEPS, STYLE_CODES, Method, _codes, _float_like, auto_methods,
                     pd_numeric, validate_steps)

#: tree evaluations per implied volatility (Brent's method to 1e-12 takes 30 to 60)
IV_TREES = 50
#: trees per option with Greeks (price; vega, rho and dividend rho each from a bumped pair)
GREEK_TREES = 7
#: memory per option row while a request is handled: the columns as received, decoded and
#: coerced (3 x 9 x 8 B), the result block, its copy in the reply and the row status (~200 B)
BYTES_PER_OPTION = 450
#: default single-core CRR speed (ns per tree node) until the daemon measures its own
DEFAULT_NS_PER_NODE = 0.3
#: work units of one closed-form price (compared with tree nodes)
CLOSED_FORM_WORK = 200.0
#: MLMC path steps per option are about this over eps squared (measured: a vanilla put at
#: S = K = 100, sigma = 0.2, T = 1 took 1.9e6 path steps for eps = 0.01)
MLMC_STEPS_EPS2 = 200.0
#: :func:`mlmc_path_steps_bound`: path steps per unit of payoff variance over eps^2 (fitted on
#: the CPU kernel for the four payoffs over sigma*sqrt(T) up to 2, strikes 0.6 to 1.6 x S,
#: r - q of either sign: the measured work was 0.004 to 0.7 times the bound)
MLMC_WORK_FACTOR = 5.0
#: :func:`mlmc_path_steps_bound`: the least work of one option (the initial samples on the
#: first levels)
MLMC_MIN_PATH_STEPS = 1e4
#: :func:`mlmc_path_steps_bound`: the initial samples every level gets before its variance is
#: read (``n0``, Giles 2008 section 5 step 2; the kernel's default,
#: ``optiond.kernels.mlmc.adaptive.DEFAULT_N0``), each about 3 fine steps a level's 2^l
MLMC_INITIAL_SAMPLES = 1000


class Caps(Protocol):
    """The per-option work limits a row must be within to be priced (an
    :class:`optiond.limits.Limits`, e.g. ``DEFAULT_LIMITS``, the engine's)."""

    max_tree_nodes: float
    max_mlmc_cost: float
    max_adi_cells: float
    max_adi_nodes: float


@dataclass(frozen=True)
class Cost:
    """What a request will cost.

    Attributes:
        n: option rows.
        model: the method name (``binomial``, ``black-scholes``, ``mixed`` ...).
        work: tree nodes (binomial) or the method's work units.
        cpu_s: estimated seconds on one CPU core.
        bytes: estimated peak memory while handled.
        max_steps: the largest CRR N in the request (0 without trees).
    """

    n: int
    model: str
    work: float
    cpu_s: float
    bytes: int
    max_steps: int = 0


# ---------------------------------------------------------------------------- CRR trees


def tree_nodes_rows(steps: Any) -> np.ndarray:
    """``(N+1)(N+2)/2`` tree nodes of each option, float64, from an int array (or one N) of CRR steps."""
    N = np.asarray(steps, dtype=np.float64)
    return (N + 1.0) * (N + 2.0) * 0.5


def tree_nodes(steps: Any) -> float:
    """``sum((N+1)(N+2)/2)`` over an int array (or one N) of CRR steps, as a float."""
    return float(np.sum(tree_nodes_rows(steps)))


def trees(greeks: bool, op: str = "price") -> int:
    """Trees one option takes: :data:`IV_TREES` for an implied volatility
    (``op="implied_vol"``), :data:`GREEK_TREES` for a price with the Greeks, else 1."""
    return IV_TREES if op == "implied_vol" else (GREEK_TREES if greeks else 1)


def tree_work_rows(steps: Any, greeks: bool, op: str = "price") -> np.ndarray:
    """Tree nodes each option takes: :func:`tree_nodes_rows` times :func:`trees` (times
    :data:`IV_TREES` for an implied volatility, :data:`GREEK_TREES` for a price with the
    Greeks: the base tree and six bumped ones)."""
    return tree_nodes_rows(steps) * trees(greeks, op)


def costed_tree_work_rows(steps: Any, greeks: bool, op: str = "price", caps: Caps | None = None) -> np.ndarray:
    """:func:`tree_work_rows` as a request's cost counts it: a priced option over the
    per-option limit (``caps.max_tree_nodes``; None: no limit) costs nothing, as it is a row
    error (:func:`optiond.limits.row_limit_errors`) and is never priced."""
    rows = tree_work_rows(steps, greeks, op)
    if caps is None or op != "price":
        return rows
    return np.where(rows > caps.max_tree_nodes, 0.0, rows)


def one_tree_cost(steps: int, greeks: bool, op: str = "price", ns_per_node: float = DEFAULT_NS_PER_NODE,
                  caps: Caps | None = None) -> Cost:
    """The :class:`Cost` of ONE CRR option with ``steps`` steps, for the one-option short paths
    (quicker than :func:`estimate`, and the same without a message or extra threads):
    :func:`costed_tree_work_rows` tree nodes, their single-core time at ``ns_per_node``, and
    :data:`BYTES_PER_OPTION` plus two tree rows of N+1 doubles. A price over
    ``caps.max_tree_nodes`` costs no work or time; unlike in :func:`estimate`, its N still
    counts in ``max_steps`` and the memory."""
    work = float(costed_tree_work_rows(steps, greeks, op, caps))
    return Cost(1, "binomial", work, work * ns_per_node * 1e-9, BYTES_PER_OPTION + 16 * (steps + 1), steps)


def row_steps(columns: Mapping[str, Any], method: Method, n: int) -> np.ndarray:
    """Per-row CRR steps that will actually be priced (rows with an invalid N cost nothing);
    one value when one N holds for every row; ``method.steps`` of the wrong length raises as
    the engine would."""
    raw = columns.get("steps")
    if raw is None or np.ndim(raw) == 0:
        if raw is None or (isinstance(raw, float) and math.isnan(raw)):
            raw = method.steps
    else:
        arr = np.asarray(raw)
        if arr.dtype.kind == "O":  # blank cells take the method's default, as in the engine
            arr = np.array([method.steps if v is None or v == "" or (isinstance(v, float) and math.isnan(v)) else v
                            for v in arr.tolist()], dtype=object)
        raw = arr
    if np.ndim(raw) == 0:
        try:
            N = int(raw)
        except (TypeError, ValueError):
            return np.zeros(0)
        return np.full(1, N if 1 <= N <= MAX_STEPS else 0, dtype=np.int64)  # one value, counted n times
    steps, errors = validate_steps(raw, n)
    if errors:
        steps = steps.copy()
        steps[[e.row for e in errors]] = 0
    return steps


def row_weights(columns: Mapping[str, Any], method: Method, n: int) -> np.ndarray | None:
    """Relative work of each row (tree nodes of its N) for splitting a batch into chunks of
    equal work; None when every row costs the same (one N for all, or no trees)."""
    if method.name != "binomial" and columns.get("method") is None:
        return None
    steps = row_steps(columns, method, n)
    if steps.size != n or n <= 1 or (steps == steps[0]).all():
        return None
    return tree_nodes_rows(steps) + 1.0


# ---------------------------------------------------------------------------- MLMC


def mlmc_path_steps(eps: Any) -> np.ndarray:
    """Estimated MLMC path steps of each option, ``MLMC_STEPS_EPS2 / eps**2`` (float64; 0 where
    ``eps``, the target RMS error in currency units, is not a finite number > 0)."""
    eps = np.asarray(eps, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(np.isfinite(eps) & (eps > 0), MLMC_STEPS_EPS2 / eps**2, 0.0)


def mlmc_path_steps_bound(payoff: Any, spot: Any, expiry: Any, rate: Any, dividend_yield: Any, volatility: Any,
                          eps: Any) -> np.ndarray:
    """An upper bound on the path steps of an adaptive MLMC price (Milstein, so O(eps^-2) work):
    ``max(MLMC_MIN_PATH_STEPS, MLMC_WORK_FACTOR * V * (1 + s2)^2 / eps^2 + 3 n0 2^L)`` with
    ``s2 = sigma^2 T``, ``V`` a bound on the payoff's variance: ``S^2 e^(2|r-q|T) (e^s2 - 1)``
    (the variance of S(T)) for the vanilla and Asian payoffs, ``(1 + s2) / 4`` for the digital
    paying 1, and ``2^L = sqrt(V) (1 + s2) / eps`` (at least 1, at most 2^20) the finest level's
    steps for a first-order weak error, which the ``n0 = MLMC_INITIAL_SAMPLES`` initial samples
    of every level cost (about 3 n0 2^L over the levels: the variance term alone under-counts
    small-variance payoffs at a small eps). Arrays broadcast; ``payoff`` is "vanilla",
    "digital" or "asian"."""
    S, T, r, q, sig, eps = (np.asarray(x, dtype=np.float64) for x in (spot, expiry, rate, dividend_yield,
                                                                        volatility, eps))
    s2 = sig * sig * T
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        vanilla = S * S * np.exp(2.0 * np.abs(r - q) * T) * np.expm1(s2)
        var = np.where(np.asarray(payoff, dtype=object) == "digital", 0.25 * (1.0 + s2), vanilla)
        finest = np.clip(np.sqrt(var) * (1.0 + s2) / eps, 1.0, 2.0 ** 20)
        work = MLMC_WORK_FACTOR * var * (1.0 + s2) ** 2 / (eps * eps) + 3.0 * MLMC_INITIAL_SAMPLES * finest
    return np.maximum(work, MLMC_MIN_PATH_STEPS)


# ---------------------------------------------------------------------------- ADI


def adi_grid_work(grid: Any, time_steps: Any = 1) -> tuple[float, float]:
    """``(grid nodes, grid-cell updates)`` of one ADI option on ``grid`` (spot nodes, variance
    nodes): their product, and that times ``time_steps``.

    Raises:
        TypeError, ValueError: a grid or time-step count that is not numbers.
    """
    nodes = float(np.prod([float(g) for g in grid]))
    return nodes, nodes * float(time_steps)


def adi_work(method: Method) -> tuple[float, float]:
    """``(grid nodes, grid-cell updates)`` of one ADI option: ``n_spot * n_variance`` and that
    times ``time_steps`` (``method.grid``, ``method.time_steps``).

    Raises:
        TypeError, ValueError: a grid or time-step count that is not numbers.
    """
    return adi_grid_work(getattr(method, "grid", ()), getattr(method, "time_steps", 1))


# ---------------------------------------------------------------------------- a request


def _binomial(method: Method, columns: Mapping[str, Any], n: int, op: str, caps: Caps | None) -> tuple[float, int]:
    steps = row_steps(columns, method, n)
    rows = costed_tree_work_rows(steps, method.greeks, op, caps)
    if op == "price" and caps is not None:  # a row over the limit is a row error: it costs nothing
        steps = np.where(rows > 0, steps, 0)
    if steps.size == 1 and n != 1:
        return float(rows[0]) * n, int(steps[0])
    return float(rows.sum()), int(steps.max(initial=0))


def _mlmc(method: Method, columns: Mapping[str, Any], n: int, op: str, caps: Caps | None) -> tuple[float, int]:
    """MLMC path steps: ``sum over options of MLMC_STEPS_EPS2 / eps**2``, ``eps`` (the target
    RMS error, currency units) from the per-row ``eps`` column, else the method's (a scalar or
    one per option). Rows with an unusable eps cost nothing (they are row errors)."""
    raw = columns.get("eps")
    if raw is None or np.ndim(raw) == 0 and raw in ("", None):
        raw = getattr(method, "eps", None)
    try:
        eps = np.broadcast_to(np.asarray(raw, dtype=np.float64), (n,)) if np.ndim(raw) <= 1 else None
    except (TypeError, ValueError):
        try:
            eps = np.array([float(v) if v not in (None, "") else float(method.eps) for v in np.ravel(raw)])
        except (TypeError, ValueError):
            return 0.0, 0
    if eps is None or eps.shape != (n,):
        return 0.0, 0
    steps = mlmc_path_steps(eps)
    if op == "price" and caps is not None:  # a row over the limit is a row error: it costs nothing
        steps = np.where(steps > caps.max_mlmc_cost, 0.0, steps)
    return float(steps.sum()), 0


#: the work of the Richardson pair over the fine grid's: the half grid with half the steps adds 1/8
ADI_RICHARDSON_FACTOR = 1.125


def adi_row_steps(method: Method, columns: Mapping[str, Any], n: int) -> np.ndarray:
    """Each row's fine-grid time steps: ``method.time_steps``, or with ``method.steps_per_year``
    the ladder of :func:`optiond.kernels.adi.defaults.steps_for` at the row's expiry (an
    unreadable expiry takes ``time_steps``), float shape (n,)."""
    from .kernels.adi.defaults import steps_for

    base = int(getattr(method, "time_steps", 1))
    per_year = float(getattr(method, "steps_per_year", 0.0) or 0.0)
    try:
        T = np.broadcast_to(np.asarray(columns.get("expiry", np.nan), dtype=np.float64), (n,))
    except (TypeError, ValueError):
        T = np.full(n, np.nan)
    return steps_for(T, base, per_year).astype(np.float64)


def _adi(method: Method, columns: Mapping[str, Any], n: int, op: str, caps: Caps | None) -> tuple[float, int]:
    """ADI grid-cell updates: per row ``n_spot * n_variance`` times its time steps
    (:func:`adi_row_steps`: ``method.time_steps``, more for long expiries with
    ``method.steps_per_year``), times :data:`ADI_RICHARDSON_FACTOR` with ``method.richardson``."""
    try:
        nodes, cells = adi_work(method)
    except (TypeError, ValueError):
        return 0.0, 0
    if op == "price" and caps is not None and (nodes > caps.max_adi_nodes or cells > caps.max_adi_cells):
        return 0.0, 0  # row errors: they cost nothing
    factor = ADI_RICHARDSON_FACTOR if getattr(method, "richardson", False) else 1.0
    return float(nodes * adi_row_steps(method, columns, n).sum() * factor), 0


def _closed_form(method: Method, columns: Mapping[str, Any], n: int, op: str, caps: Caps | None) -> tuple[float, int]:
    return n * CLOSED_FORM_WORK, 0


#: the spectral American engine's work per option and solve, in tree-node units by accuracy
#: setting (measured on the 2-core machine, ``bench/american.py``, against the CRR tree's 0.46 ns
#: a node: fast 6.5 us an option over 100,000 random contracts, accurate 27 us and high precision
#: 224 us on the one-put row, one core)
SPECTRAL_WORK = {"fast": 1.4e4, "accurate": 6.0e4, "high-precision": 4.9e5}
#: solves per option: a price with the bumped vega, rho and dividend rho (6 more), an implied vol
#: (one solve a step: 6 to 8 on a grid of contracts, the bracket ends priced only when reached)
SPECTRAL_SOLVES = {"price": 1, "greeks": 7, "implied_vol": 8}


#: the semi-analytic Heston engine's work per option in tree-node units: 3e5 units, about
#: 140 us of one core at 0.46 ns a node (measured by ``bench/heston.py`` on the shared 2-core
#: machine: 64 us of wall time an option on 2 threads for a chain under one parameter set,
#: 270 us for contracts that each have their own parameters)
HESTON_WORK = 3e5


def _heston(method: Method, columns: Mapping[str, Any], n: int, op: str, caps: Caps | None) -> tuple[float, int]:
    """The semi-analytic Heston engine: ``n x HESTON_WORK``."""
    return n * HESTON_WORK, 0


def _column(columns: Mapping[str, Any], name: str, n: int, default: Any = np.nan) -> np.ndarray:
    """A raw numeric request column (a scalar or shape (n,)) as float64 (n,), NaN where a
    value does not read as a number (a row error, or a name resolved later) or the column has
    another length."""
    try:
        return np.broadcast_to(pd_numeric(np.asarray(columns.get(name, default))), (n,))
    except (TypeError, ValueError):
        return np.full(n, np.nan)


def _cash_rows(columns: Mapping[str, Any], n: int) -> np.ndarray:
    """Rows with a cash dividend in the request's ``dividend_times`` (n, m) or (m,), bool (n,)."""
    t = columns.get("dividend_times")
    cash = np.zeros(n, dtype=bool)
    if t is not None and np.ndim(t) in (1, 2):
        try:
            with np.errstate(invalid="ignore"):
                has = np.isfinite(_float_like(t))
            cash = np.broadcast_to(has.any(), (n,)) if np.ndim(t) == 1 else has.any(axis=1)
        except (TypeError, ValueError):
            pass
    return cash


def spectral_routes(columns: Mapping[str, Any], n: int, op: str = "price") -> np.ndarray:
    """Where the spectral method's front door sends each row of raw request columns: its own
    predicate (:func:`optiond.kernels.spectral.route_rows`), codes into
    :data:`optiond.kernels.spectral.ROUTE_METHODS` (0 the ALO engine, 1 the closed form, 2 the
    CRR tree: cash dividends, the double-boundary regime, and drift-dominated American rows).

    ``kind``, ``style`` (default American), ``rate``, ``dividend_yield`` (default 0),
    ``volatility``, ``expiry`` and ``dividend_times`` are read as the engine reads them; a
    value that does not read (a row error) routes as the predicate routes NaN. For
    ``op="implied_vol"`` the volatility is the unknown: the drift test is left out, as the
    front door leaves it out before its split by price; with the option prices in a ``price``
    column, the rows that split surely sends to the tree go there (:func:`_drift_split_certain`).

    Returns:
        int8 (n,).
    """
    from .kernels.spectral import route_rows

    def codes(name: str, table: Mapping[str, int], default: Any) -> np.ndarray:
        raw = columns.get(name, default)
        if np.ndim(raw) == 0 and not isinstance(raw, (int, np.integer)):  # one label for every row
            return np.full(n, table.get(str(raw).strip().lower(), -1), dtype=np.int8)
        try:
            out = _codes(raw, table, name, n)[0]
        except (TypeError, ValueError):
            out = np.full(n, -1, dtype=np.int8)
        return out if out.shape == (n,) else np.full(n, -1, dtype=np.int8)

    price = op != "implied_vol"
    kind = codes("kind", KIND_CODES, "")
    r, q, T = _column(columns, "rate", n), _column(columns, "dividend_yield", n, 0.0), _column(columns, "expiry", n)
    route = route_rows(kind, codes("style", STYLE_CODES, "american"), r, q, _cash_rows(columns, n),
                       _column(columns, "volatility", n) if price else None, T)
    if not price and columns.get("price") is not None:
        _drift_split_certain(route, columns, kind, r, q, T, n)
    return route


def _drift_split_certain(route: np.ndarray, columns: Mapping[str, Any], kind: np.ndarray, r: np.ndarray,
                         q: np.ndarray, T: np.ndarray, n: int) -> None:
    """The implied-volatility rows the spectral front door will surely send to the tree, set to 2
    in ``route``: its split sends an ALO row there when the price is under the ALO price at the
    drift-dominated volatility v* (:func:`optiond.kernels.spectral.cpu.drift_volatility`) or v* is
    at the top of the bracket; the European price at v* is under that American price, so a price
    under it is sure to go (a price between the two may go too: only the solve tells)."""
    from .kernels import black_scholes
    from .kernels.spectral import cpu

    alo = np.flatnonzero(route == 0)
    if alo.size == 0:
        return
    vstar = cpu.drift_volatility(r[alo], q[alo], T[alo])
    with np.errstate(all="ignore"):
        euro = black_scholes.bs_price_greeks(np.where(kind[alo] == 1, 1, 0), _column(columns, "spot", n)[alo],
                                             _column(columns, "strike", n)[alo], T[alo], r[alo], q[alo],
                                             np.minimum(vstar, cpu.MAX_IV))["price"]
        sure = (vstar > cpu.MIN_IV) & ((vstar >= cpu.MAX_IV) | (_column(columns, "price", n)[alo] < euro))
    route[alo[sure]] = 2


def spectral_work_rows(columns: Mapping[str, Any], method: Method, n: int, op: str = "price",
                       caps: Caps | None = None) -> tuple[np.ndarray, int]:
    """The work of each row of a spectral request, in tree-node units, by the engine that will
    price it (:func:`spectral_routes`): an ALO row :data:`SPECTRAL_WORK` of its accuracy setting
    (a per-row ``accuracy`` column, else ``method.accuracy``) times :data:`SPECTRAL_SOLVES`; a
    closed-form row :data:`CLOSED_FORM_WORK`; a tree row its CRR work at the method's steps
    (:func:`costed_tree_work_rows`, with the Greeks' or the implied volatility's trees).

    Returns:
        ``(work (n,) float64, the largest N of a tree row, 0 without)``.
    """
    route = spectral_routes(columns, n, op)
    solves = SPECTRAL_SOLVES["implied_vol" if op == "implied_vol" else ("greeks" if method.greeks else "price")]
    acc = columns.get("accuracy", getattr(method, "accuracy", "accurate"))
    default = SPECTRAL_WORK["accurate"]
    if np.ndim(acc) == 0:
        per = np.full(n, SPECTRAL_WORK.get(str(acc), default))
    else:
        per = np.array([SPECTRAL_WORK.get(str(a), default) for a in np.asarray(acc, dtype=object).tolist()])
    work = per * solves
    work[route == 1] = CLOSED_FORM_WORK
    tree = route == 2
    max_steps = 0
    if tree.any():
        steps = row_steps(columns, method, n)
        if steps.size in (1, n):
            steps = np.broadcast_to(steps, (n,))
            rows = costed_tree_work_rows(steps, method.greeks, op, caps)
            work[tree] = rows[tree]
            max_steps = int(np.where(rows > 0, steps, 0)[tree].max(initial=0))
        else:  # steps the engine refuses: nothing is priced
            work[tree] = 0.0
    return work, max_steps


def _spectral(method: Method, columns: Mapping[str, Any], n: int, op: str, caps: Caps | None) -> tuple[float, int]:
    """The spectral method: each row by the engine its front door gives it
    (:func:`spectral_work_rows`: ALO solves, closed forms, and the CRR trees of the rows it
    sends to the tree, drift-dominated ones included)."""
    work, max_steps = spectral_work_rows(columns, method, n, op, caps)
    return float(work.sum()), max_steps


def _auto_rows(columns: Mapping[str, Any], n: int) -> np.ndarray:
    """The method ``auto`` gives each row of raw request columns (:func:`optiond.models.auto_methods`
    of the ``style`` column, American where missing or unreadable, and the cash-dividend schedule)."""
    raw = columns.get("style", "american")
    try:
        style = _codes(raw, STYLE_CODES, "style", n if np.ndim(raw) == 0 else np.shape(raw)[0])[0]
    except (TypeError, ValueError):
        style = np.full(n, AMERICAN, dtype=np.int8)
    cash = _cash_rows(columns, n)
    if style.shape != (n,) or cash.shape != (n,):  # columns of another length: the engine refuses the table
        return auto_methods(np.full(n, AMERICAN, dtype=np.int8), np.zeros(n, dtype=bool))
    return auto_methods(style, cash)


def _auto(method: Method, columns: Mapping[str, Any], n: int, op: str, caps: Caps | None) -> tuple[float, int]:
    """The method ``auto``: each row at its own method's work (:func:`_auto_rows`): spectral
    rows as :func:`_spectral` (by the engine the spectral front door gives each), tree rows as :func:`_binomial` (their own N), closed-form rows
    :data:`CLOSED_FORM_WORK`; all in tree-node units."""
    names = _auto_rows(columns, n)
    spectral = names == "spectral"
    work, max_steps = 0.0, 0
    if spectral.any():  # as the spectral front door routes them (its tree rows at their trees' cost)
        rows, tree_steps = spectral_work_rows(columns, method, n, op, caps)
        work, max_steps = float(rows[spectral].sum()), tree_steps
    work += _closed_form(method, columns, int(np.count_nonzero(names == "black-scholes")), op, caps)[0]
    tree = names == "binomial"
    if tree.any():
        steps = row_steps(columns, method, n)
        rows = costed_tree_work_rows(steps, method.greeks, op, caps)
        if steps.size == 1:
            work += float(rows[0]) * int(np.count_nonzero(tree))
            max_steps = max(max_steps, int(steps[0]) if rows[0] > 0 else 0)
        else:
            work += float(rows[tree].sum())
            max_steps = max(max_steps, int(np.where(rows > 0, steps, 0)[tree].max(initial=0)))
    return work, max_steps


#: method name -> (model label, work function(method, columns, n, op, caps) -> (work, max_steps),
#: ns per work unit relative to a tree node). New pricing methods register here.
COST_MODELS: dict[str, tuple[str, Callable[..., tuple[float, int]], float]] = {
    "binomial": ("binomial", _binomial, 1.0),
    "black-scholes": ("black-scholes", _closed_form, 1.0),
    # measured on the 2-core machine: ~17 ns a path step, ~12 ns a grid-cell update (0.3 ns a node)
    "mlmc": ("mlmc", _mlmc, 60.0),
    "adi": ("adi", _adi, 40.0),
    "spectral": ("spectral", _spectral, 1.0),
    "heston": ("heston", _heston, 1.0),
    # a method per row: its trees, spectral solves and closed forms together, all in tree-node
    # units, are checked against the tree-node limit as a request of several methods is
    "auto": ("mixed", _auto, 1.0),
}


def estimate(op: str, columns: Mapping[str, Any], method: Method, n: int, message_bytes: int = 0,
             ns_per_node: float = DEFAULT_NS_PER_NODE, threads: int = 1, caps: Caps | None = None) -> Cost:
    """Cost a decoded pricing request.

    Args:
        op: ``"price"`` or ``"implied_vol"``.
        columns: the request's columns (scalars or 1-D arrays of length ``n``), with optional
            per-row ``method`` and ``steps``.
        method: the default method.
        n: rows.
        message_bytes: size of the request message (it is held while the request is priced).
        ns_per_node: measured single-core speed of the CRR kernel.
        threads: pricing threads (each holds two tree rows).
        caps: the per-option work limits (:data:`optiond.limits.DEFAULT_LIMITS`, as
            :func:`optiond.limits.estimate` passes): a priced row over one is a row
            error and costs nothing. None: every row counts.

    Returns:
        :class:`Cost`. A per-row ``method`` column other than a single name is costed as if
        every row used the dearest of the methods named.

    Raises:
        InvalidInputError: ``method.steps`` has the wrong length (as the engine would).
    """
    names = {method.name}
    per_row = columns.get("method")
    if per_row is not None:
        vals = [per_row] if np.ndim(per_row) == 0 else np.asarray(per_row, dtype=object).tolist()
        for v in set(str(x).strip().lower() for x in vals if x is not None and str(x).strip() not in ("", "nan")):
            try:
                names.add(Method(name=v, steps=1).name)
            except Exception:  # an invalid name is a row error, priced by nobody
                pass
    work, max_steps, model, rel = 0.0, 0, method.name, 1.0
    for name in names:
        label, fn, r = COST_MODELS.get(name, (name, _closed_form, 1.0))
        m = method if name == method.name else dataclasses.replace(method, name=name)
        w, s = fn(m, columns, n, op, caps)
        if w * r >= work * rel:
            work, rel, model = w, r, label
        max_steps = max(max_steps, s)
    if len(names) > 1:
        model = "mixed" if model == "binomial" else model
    mem = n * BYTES_PER_OPTION + 3 * message_bytes + 16 * (max_steps + 1) * max(threads, 1)
    return Cost(n=n, model=model, work=work, cpu_s=work * rel * ns_per_node * 1e-9, bytes=int(mem),
                max_steps=max_steps)


__all__ = ["BYTES_PER_OPTION", "CLOSED_FORM_WORK", "COST_MODELS", "SPECTRAL_WORK", "Caps", "Cost", "DEFAULT_NS_PER_NODE",
           "GREEK_TREES", "HESTON_WORK", "IV_TREES", "MLMC_MIN_PATH_STEPS", "MLMC_STEPS_EPS2", "MLMC_WORK_FACTOR", "adi_grid_work",
           "adi_work", "costed_tree_work_rows", "estimate", "mlmc_path_steps", "mlmc_path_steps_bound", "one_tree_cost",
           "row_steps", "row_weights", "spectral_routes", "spectral_work_rows", "tree_nodes", "tree_nodes_rows", "tree_work_rows", "trees"]
