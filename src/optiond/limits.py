"""Limits on the work one request may ask for: per request on the daemon, per option everywhere.

Every pricing request is costed before anything is priced (:func:`estimate`, the work model of
:mod:`optiond.costs` with the per-option limits below) and refused with :class:`LimitExceeded`
when it is over a limit (:meth:`Limits.check`), so no request can run the daemon out of memory
or keep it busy for hours:

* ``max_options``: rows per request (checked on the declared array shapes, before the arrays
  are even copied out of the message);
* ``max_tree_nodes``: the CRR work, ``sum over options of (N+1)(N+2)/2`` tree nodes, times
  :data:`optiond.costs.GREEK_TREES` with Greeks and times :data:`optiond.costs.IV_TREES` for
  implied volatilities;
* ``max_request_bytes``: the memory a request needs while it is decoded, priced and encoded
  (:data:`optiond.costs.BYTES_PER_OPTION` per row, plus the message itself, plus two tree rows
  of N+1 doubles per pricing thread);
* ``max_mlmc_cost``: MLMC path steps (:func:`optiond.costs.mlmc_path_steps`);
* ``max_adi_cells``: ADI grid-cell updates, ``n_spot * n_variance * time_steps`` an option;
  ``max_adi_nodes``: ADI grid nodes ``n_spot * n_variance`` (the memory of one solve)
  (:func:`optiond.costs.adi_work`);
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

Object limits (``max_objects``, ``max_objects_bytes``) bound the named market objects the daemon
keeps (:mod:`optiond.daemon.objects`): their count, and their serialised size in all (bytes).

Units: work in tree nodes (or the method's own unit), time in seconds, memory in bytes. The
work model's names once defined here (``tree_nodes``, ``GREEK_TREES``, ``COST_MODELS`` ...)
are read from :mod:`optiond.costs`; reading them from here still works for one release, with
a ``DeprecationWarning``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import costs
from .costs import Cost
from .models import Method


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
class Limits:
    """The daemon's limits (see the module docstring). Defaults suit a desk workstation:
    a million options, 6e11 tree nodes (one N = 1e6 tree, 5.0e11 nodes, fits), a quarter of the machine's memory per request and half of it for
    all accepted work; 1024 named objects of 256 MiB in all (SPY's fitted surface, 32
    expiries, is 50 kB)."""

    max_options: int = 1_000_000
    max_tree_nodes: float = 6e11
    max_mlmc_cost: float = 2e10
    max_adi_cells: float = 5e10
    max_adi_nodes: float = 4e6
    max_request_bytes: int = dataclasses.field(default_factory=lambda: _physical_memory() // 4)
    max_inflight_bytes: int = dataclasses.field(default_factory=lambda: _physical_memory() // 2)
    max_request_s: float = 600.0
    max_queued_jobs: int = 64
    max_objects: int = 1024
    max_objects_bytes: int = 256 << 20

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
                                f"request needs {cost.work:.3g} tree nodes (sum of (N+1)(N+2)/2 over options, "
                                f"x{costs.GREEK_TREES} with Greeks), over the daemon's limit of "
                                f"{self.max_tree_nodes:.3g}; use fewer steps or options per request")
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
        method: ``greeks`` (:data:`optiond.costs.GREEK_TREES` trees a binomial option instead
            of 1), ``grid`` and ``time_steps`` (ADI).
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
        factor = costs.trees(method.greeks)
        work = costs.tree_work_rows(np.asarray(steps)[tree], method.greeks)  # not costed_: these are the rows over
        for i, w in zip(tree[work > lim.max_tree_nodes].tolist(), work[work > lim.max_tree_nodes].tolist()):
            with_greeks = f" (x{factor} with Greeks)" if factor > 1 else ""
            out[i] = (f"steps={int(steps[i])} needs {w:.3g} tree nodes{with_greeks}, "
                      f"over the limit of {lim.max_tree_nodes:.3g} per option (max_tree_nodes); use fewer steps")
    mc = np.flatnonzero(names == "mlmc")
    if mc.size:
        work = costs.mlmc_path_steps(np.asarray(eps, dtype=np.float64)[mc])
        for i, w in zip(mc[work > lim.max_mlmc_cost].tolist(), work[work > lim.max_mlmc_cost].tolist()):
            out[i] = (f"eps={float(eps[i]):g} needs about {w:.3g} MLMC path steps, over the limit of "
                      f"{lim.max_mlmc_cost:.3g} per option (max_mlmc_cost); ask for a larger eps")
    adi = np.flatnonzero(names == "adi")
    if adi.size:
        try:
            reason = _adi_reason(*costs.adi_work(method), lim)
        except (TypeError, ValueError):
            reason = ""
        if reason:
            out.update(dict.fromkeys(adi.tolist(), reason))
    return sorted(out.items())




def estimate(op: str, columns: Mapping[str, Any], method: Method, n: int, message_bytes: int = 0,
             ns_per_node: float = costs.DEFAULT_NS_PER_NODE, threads: int = 1) -> Cost:
    """Cost a decoded pricing request as the daemon checks it: :func:`optiond.costs.estimate`
    with the per-option limits :data:`DEFAULT_LIMITS` (a row over one is a row error, priced by
    nobody, and costs nothing). The arguments and the result are those of
    :func:`optiond.costs.estimate`."""
    return costs.estimate(op, columns, method, n, message_bytes, ns_per_node, threads, caps=DEFAULT_LIMITS)


# ---- the work model's names, read from here for one release --------------------------------

#: the names that moved to optiond.costs (``costed_tree_work_rows`` read from here keeps its
#: per-option limit, :data:`DEFAULT_LIMITS`)
_MOVED = {"IV_TREES", "GREEK_TREES", "BYTES_PER_OPTION", "DEFAULT_NS_PER_NODE", "CLOSED_FORM_WORK",
          "MLMC_STEPS_EPS2", "COST_MODELS", "adi_work", "mlmc_path_steps", "row_weights", "tree_nodes",
          "tree_nodes_rows", "tree_work_rows", "costed_tree_work_rows"}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"optiond.limits.{name} moved to optiond.costs.{name}; the old name goes in the next "
                  f"release", DeprecationWarning, stacklevel=2)
    if name == "costed_tree_work_rows":  # as it was here: over the engine's per-option limit costs nothing
        return functools.partial(costs.costed_tree_work_rows, caps=DEFAULT_LIMITS)
    return getattr(costs, name)


__all__ = ["Cost", "DEFAULT_LIMITS", "Limits", "LimitExceeded", "estimate", "row_limit_errors"]
