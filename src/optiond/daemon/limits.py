"""Limits on what one request may ask of the daemon, and the cost model behind them.

Every pricing request is costed before anything is priced (:func:`estimate`) and refused with
:class:`LimitExceeded` when it is over a limit (:meth:`Limits.check`), so no request can run
the daemon out of memory or keep it busy for hours:

* ``max_options``: rows per request (checked on the declared array shapes, before the arrays
  are even copied out of the message);
* ``max_tree_nodes``: the CRR work, ``sum over options of (N+1)(N+2)/2`` tree nodes, times 5
  with Greeks (price, and a bumped pair of trees each for vega and rho) and times
  :data:`IV_TREES` for implied volatilities (one tree per root-finder step);
* ``max_request_bytes``: the memory a request needs while it is decoded, priced and encoded
  (:data:`BYTES_PER_OPTION` per row, plus the message itself, plus two tree rows of N+1
  doubles per pricing thread);
* ``max_mlmc_cost``: MLMC path steps, about ``200 / eps**2`` an option (Giles' MLMC with a
  Milstein scheme costs O(eps^-2); the constant measured for a vanilla option at S = 100);
* ``max_adi_cells``: ADI grid-cell updates, ``n_spot * n_variance * time_steps`` an option;
  ``max_adi_nodes``: ADI grid nodes ``n_spot * n_variance`` (the memory of one solve).
  New pricing methods add their cost model to :data:`COST_MODELS`;
* ``max_request_s``: the longest deadline a request may ask for (and the deadline of those
  that ask for none). A request whose estimated time exceeds its deadline is refused at once;
  one that overruns it while running is stopped (:class:`optiond.daemon.jobs.JobManager`).

The work limits also hold per row (:func:`row_limit_errors`): one row whose own work is over
``max_tree_nodes``, ``max_mlmc_cost``, ``max_adi_cells`` or ``max_adi_nodes`` can never be
priced, so the engine marks it ``status=error`` with the reason and prices the rest
(in-process and on the daemon alike, both with :data:`DEFAULT_LIMITS`), and the request's
estimate leaves it out.

Queue limits (``max_queued_jobs``, ``max_inflight_bytes``) bound the work accepted but not yet
finished, whatever the number of clients.

Units: work in tree nodes (or the method's own unit), time in seconds, memory in bytes.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..models import MAX_STEPS, Method, validate_steps

#: tree evaluations per implied volatility (Brent's method to 1e-12 takes 30 to 60)
IV_TREES = 50
#: trees per option with Greeks (price; vega and rho each from a bumped pair)
GREEK_TREES = 5
#: memory per option row while a request is handled: the columns as received, decoded and
#: coerced (3 x 9 x 8 B), the result block, its copy in the reply and the row status (~200 B)
BYTES_PER_OPTION = 450
#: default single-core CRR speed (ns per tree node) until the daemon measures its own
DEFAULT_NS_PER_NODE = 0.3
#: work units of one closed-form price (compared with tree nodes)
CLOSED_FORM_WORK = 200.0


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not POSIX
        return 8 << 30


class LimitExceeded(ValueError):
    """A request is over one of the daemon's limits; it was refused before any work was done.

    Attributes:
        limit: the limit's name (a :class:`Limits` field, e.g. ``"max_tree_nodes"``).
        value: what the request needs, in the limit's unit.
        maximum: the limit.
    """

    ename = "LimitExceeded"

    def __init__(self, limit: str, value: float, maximum: float, message: str):
        super().__init__(message)
        self.limit, self.value, self.maximum = limit, value, maximum


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


@dataclass(frozen=True)
class Limits:
    """The daemon's limits (see the module docstring). Defaults suit a desk workstation:
    a million options, 6e11 tree nodes (one N = 1e6 tree, 5.0e11 nodes, fits: about 2.5 minutes on
    one core, 64 ms on an H200), a quarter of the machine's memory per request and half of it for
    all accepted work."""

    max_options: int = 1_000_000
    max_tree_nodes: float = 6e11
    max_mlmc_cost: float = 2e10
    max_adi_cells: float = 5e10
    max_adi_nodes: float = 4e6
    max_request_bytes: int = dataclasses.field(default_factory=lambda: _physical_memory() // 4)
    max_inflight_bytes: int = dataclasses.field(default_factory=lambda: _physical_memory() // 2)
    max_request_s: float = 600.0
    max_queued_jobs: int = 64

    def check_rows(self, n: int) -> None:
        """Refuse more than ``max_options`` rows.

        Raises:
            LimitExceeded: naming the limit and the request's size.
        """
        if n > self.max_options:
            raise LimitExceeded("max_options", n, self.max_options,
                                f"batch of {n} options is over the daemon's limit of {self.max_options} per request; "
                                f"split it into smaller requests")

    def check(self, cost: Cost, deadline_s: float | None, capacity: float = 1.0) -> float:
        """Check a costed request against every limit.

        Args:
            cost: from :func:`estimate`.
            deadline_s: seconds the client allows (None: ``max_request_s``).
            capacity: how many cores' worth of pricing the daemon runs in parallel (for the
                time estimate).

        Returns:
            The deadline to apply, seconds from now.

        Raises:
            LimitExceeded: the first limit the request is over, with a message saying by how much.
        """
        self.check_rows(cost.n)
        if cost.model in ("binomial", "mixed") and cost.work > self.max_tree_nodes:
            raise LimitExceeded("max_tree_nodes", cost.work, self.max_tree_nodes,
                                f"request needs {cost.work:.3g} tree nodes (sum of (N+1)(N+2)/2 over options, x5 with "
                                f"Greeks), over the daemon's limit of {self.max_tree_nodes:.3g}; use fewer steps or "
                                f"options per request")
        if cost.model == "mlmc" and cost.work > self.max_mlmc_cost:
            raise LimitExceeded("max_mlmc_cost", cost.work, self.max_mlmc_cost,
                                f"MLMC request needs about {cost.work:.3g} path steps, over the daemon's limit of "
                                f"{self.max_mlmc_cost:.3g}; ask for a larger eps or fewer options")
        if cost.model == "adi" and cost.work > self.max_adi_cells:
            raise LimitExceeded("max_adi_cells", cost.work, self.max_adi_cells,
                                f"ADI request needs {cost.work:.3g} grid cell updates, over the daemon's limit of "
                                f"{self.max_adi_cells:.3g}; use a coarser grid or fewer options")
        if cost.bytes > self.max_request_bytes:
            raise LimitExceeded("max_request_bytes", cost.bytes, self.max_request_bytes,
                                f"request needs about {cost.bytes / 2**20:.0f} MiB while priced, over the daemon's "
                                f"limit of {self.max_request_bytes / 2**20:.0f} MiB; split it")
        if deadline_s is None:
            deadline = self.max_request_s
        elif not (isinstance(deadline_s, (int, float)) and not isinstance(deadline_s, bool)
                  and math.isfinite(deadline_s) and deadline_s > 0):
            raise LimitExceeded("deadline_s", float("nan"), self.max_request_s,
                                f"deadline_s must be a number of seconds > 0, not {str(deadline_s)[:40]!r}")
        else:
            deadline = min(float(deadline_s), self.max_request_s)
        estimate = cost.cpu_s / max(capacity, 1.0)
        if estimate > deadline:
            which = "deadline_s" if deadline_s is not None and deadline_s <= self.max_request_s else "max_request_s"
            raise LimitExceeded(which, estimate, deadline,
                                f"request would take about {estimate:.3g} s here, longer than its deadline of "
                                f"{deadline:g} s; allow more time or split it")
        return deadline

    def as_dict(self) -> dict[str, float]:
        """The limits as a plain map (for ``status``)."""
        return dataclasses.asdict(self)


#: the limits the engine applies per row, in-process and on the daemon alike
DEFAULT_LIMITS = Limits()


# ---------------------------------------------------------------------------- cost model


def tree_nodes_rows(steps: Any) -> np.ndarray:
    """``(N+1)(N+2)/2`` tree nodes of each option, float64, from an int array (or one N) of CRR steps."""
    N = np.asarray(steps, dtype=np.float64)
    return (N + 1.0) * (N + 2.0) * 0.5


def tree_work_rows(steps: Any, greeks: bool, op: str = "price") -> np.ndarray:
    """Tree nodes each option takes: :func:`tree_nodes_rows`, times :data:`IV_TREES` for an
    implied volatility (``op="implied_vol"``), times :data:`GREEK_TREES` for a price with the
    Greeks (the base tree and four bumped ones)."""
    return tree_nodes_rows(steps) * (IV_TREES if op == "implied_vol" else (GREEK_TREES if greeks else 1))


def costed_tree_work_rows(steps: Any, greeks: bool, op: str = "price") -> np.ndarray:
    """:func:`tree_work_rows` as a request's cost counts it: a priced option over the per-option
    limit (``DEFAULT_LIMITS.max_tree_nodes``) costs nothing, as it is a row error
    (:func:`row_limit_errors`) and is never priced."""
    rows = tree_work_rows(steps, greeks, op)
    return np.where(rows > DEFAULT_LIMITS.max_tree_nodes, 0.0, rows) if op == "price" else rows


def tree_nodes(steps: Any) -> float:
    """``sum((N+1)(N+2)/2)`` over an int array (or one N) of CRR steps, as a float."""
    return float(np.sum(tree_nodes_rows(steps)))


def _row_steps(columns: Mapping[str, Any], method: Method, n: int) -> np.ndarray:
    """Per-row CRR steps that will actually be priced (rows with an invalid N cost nothing);
    ``method.steps`` of the wrong length raises as the engine would."""
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


def _binomial(method: Method, columns: Mapping[str, Any], n: int, op: str) -> tuple[float, int]:
    steps = _row_steps(columns, method, n)
    rows = costed_tree_work_rows(steps, method.greeks, op)
    if op == "price":  # a row over the limit is a row error (row_limit_errors): it costs nothing
        steps = np.where(rows > 0, steps, 0)
    if steps.size == 1 and n != 1:
        return float(rows[0]) * n, int(steps[0])
    return float(rows.sum()), int(steps.max(initial=0))


#: MLMC path steps per option are about this over eps squared (measured: a vanilla put at
#: S = K = 100, sigma = 0.2, T = 1 took 1.9e6 path steps for eps = 0.01)
MLMC_STEPS_EPS2 = 200.0


def _mlmc(method: Method, columns: Mapping[str, Any], n: int, op: str) -> tuple[float, int]:
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
    if op == "price":  # a row over the limit is a row error (row_limit_errors): it costs nothing
        steps = np.where(steps > DEFAULT_LIMITS.max_mlmc_cost, 0.0, steps)
    return float(steps.sum()), 0


def mlmc_path_steps(eps: Any) -> np.ndarray:
    """Estimated MLMC path steps of each option, ``MLMC_STEPS_EPS2 / eps**2`` (float64; 0 where
    ``eps``, the target RMS error in currency units, is not a finite number > 0)."""
    eps = np.asarray(eps, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(np.isfinite(eps) & (eps > 0), MLMC_STEPS_EPS2 / eps**2, 0.0)


def _adi(method: Method, columns: Mapping[str, Any], n: int, op: str) -> tuple[float, int]:
    """ADI grid-cell updates: ``n * n_spot * n_variance * time_steps`` (``method.grid``,
    ``method.time_steps``)."""
    try:
        nodes, cells = adi_work(method)
    except (TypeError, ValueError):
        return 0.0, 0
    if op == "price" and _adi_reason(nodes, cells, DEFAULT_LIMITS):  # row errors: they cost nothing
        return 0.0, 0
    return n * cells, 0


def adi_work(method: Method) -> tuple[float, float]:
    """``(grid nodes, grid-cell updates)`` of one ADI option: ``n_spot * n_variance`` and that
    times ``time_steps`` (``method.grid``, ``method.time_steps``).

    Raises:
        TypeError, ValueError: a grid or time-step count that is not numbers.
    """
    nodes = float(np.prod([float(g) for g in getattr(method, "grid", ())]))
    return nodes, nodes * float(getattr(method, "time_steps", 1))


def _adi_reason(nodes: float, cells: float, limits: "Limits") -> str:
    if nodes > limits.max_adi_nodes:
        return (f"ADI grid of {nodes:.3g} nodes is over the limit of {limits.max_adi_nodes:.3g} per option "
                f"(max_adi_nodes); use a coarser --grid")
    if cells > limits.max_adi_cells:
        return (f"ADI needs {cells:.3g} grid-cell updates (grid x time steps), over the limit of "
                f"{limits.max_adi_cells:.3g} per option (max_adi_cells); use a coarser grid or fewer time steps")
    return ""


def row_limit_errors(names: np.ndarray, steps: np.ndarray, eps: np.ndarray, method: Method,
                     limits: "Limits | None" = None) -> list[tuple[int, str]]:
    """The rows whose own work is over a work limit, each with the reason (the engine marks
    them ``status=error`` and prices the rest; :func:`estimate` leaves them out).

    Args:
        names: (n,) the method of each row (``binomial``, ``mlmc``, ``adi``, ...).
        steps: (n,) int CRR steps of each row (read on binomial rows).
        eps: (n,) float MLMC target RMS error of each row, currency units (read on mlmc rows).
        method: ``greeks`` (5 trees a binomial option instead of 1), ``grid`` and
            ``time_steps`` (ADI).
        limits: default :data:`DEFAULT_LIMITS` (``max_tree_nodes``, ``max_mlmc_cost``,
            ``max_adi_cells``, ``max_adi_nodes``, each per option here).

    Returns:
        ``[(row, reason), ...]`` in row order (empty when every row is within the limits).
    """
    lim = limits or DEFAULT_LIMITS
    names = np.asarray(names, dtype=object)
    out: dict[int, str] = {}
    tree = np.flatnonzero(names == "binomial")
    if tree.size:
        factor = GREEK_TREES if method.greeks else 1
        work = tree_work_rows(np.asarray(steps)[tree], method.greeks)  # not costed_: these are the rows over
        for i, w in zip(tree[work > lim.max_tree_nodes].tolist(), work[work > lim.max_tree_nodes].tolist()):
            out[i] = (f"steps={int(steps[i])} needs {w:.3g} tree nodes{' (x5 with Greeks)' if factor > 1 else ''}, "
                      f"over the limit of {lim.max_tree_nodes:.3g} per option (max_tree_nodes); use fewer steps")
    mc = np.flatnonzero(names == "mlmc")
    if mc.size:
        work = mlmc_path_steps(np.asarray(eps, dtype=np.float64)[mc])
        for i, w in zip(mc[work > lim.max_mlmc_cost].tolist(), work[work > lim.max_mlmc_cost].tolist()):
            out[i] = (f"eps={float(eps[i]):g} needs about {w:.3g} MLMC path steps, over the limit of "
                      f"{lim.max_mlmc_cost:.3g} per option (max_mlmc_cost); ask for a larger eps")
    adi = np.flatnonzero(names == "adi")
    if adi.size:
        try:
            reason = _adi_reason(*adi_work(method), lim)
        except (TypeError, ValueError):
            reason = ""
        if reason:
            out.update(dict.fromkeys(adi.tolist(), reason))
    return sorted(out.items())


def row_weights(columns: Mapping[str, Any], method: Method, n: int) -> np.ndarray | None:
    """Relative work of each row (tree nodes of its N) for splitting a batch into chunks of
    equal work; None when every row costs the same (one N for all, or no trees)."""
    if method.name != "binomial" and columns.get("method") is None:
        return None
    steps = _row_steps(columns, method, n)
    if steps.size != n or n <= 1 or (steps == steps[0]).all():
        return None
    return tree_nodes_rows(steps) + 1.0


#: method name -> (model label, work function(method, columns, n, op) -> (work, max_steps),
#: ns per work unit relative to a tree node). New pricing methods register here.
COST_MODELS: dict[str, tuple[str, Callable[..., tuple[float, int]], float]] = {
    "binomial": ("binomial", _binomial, 1.0),
    "black-scholes": ("black-scholes", lambda m, c, n, op: (n * CLOSED_FORM_WORK, 0), 1.0),
    # measured on the 2-core machine: ~17 ns a path step, ~12 ns a grid-cell update (0.3 ns a node)
    "mlmc": ("mlmc", _mlmc, 60.0),
    "adi": ("adi", _adi, 40.0),
}


def estimate(op: str, columns: Mapping[str, Any], method: Method, n: int, message_bytes: int = 0,
             ns_per_node: float = DEFAULT_NS_PER_NODE, threads: int = 1) -> Cost:
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
        label, fn, r = COST_MODELS.get(name, (name, lambda m, c, n, op: (n * CLOSED_FORM_WORK, 0), 1.0))
        m = method if name == method.name else dataclasses.replace(method, name=name)
        w, s = fn(m, columns, n, op)
        if w * r >= work * rel:
            work, rel, model = w, r, label
        max_steps = max(max_steps, s)
    if len(names) > 1:
        model = "mixed" if model == "binomial" else model
    mem = n * BYTES_PER_OPTION + 3 * message_bytes + 16 * (max_steps + 1) * max(threads, 1)
    return Cost(n=n, model=model, work=work, cpu_s=work * rel * ns_per_node * 1e-9, bytes=int(mem),
                max_steps=max_steps)


__all__ = ["Cost", "DEFAULT_LIMITS", "Limits", "LimitExceeded", "adi_work", "estimate", "mlmc_path_steps",
           "row_limit_errors", "row_weights", "tree_nodes", "tree_nodes_rows", "tree_work_rows", "costed_tree_work_rows", "COST_MODELS", "IV_TREES", "GREEK_TREES",
           "MLMC_STEPS_EPS2"]
