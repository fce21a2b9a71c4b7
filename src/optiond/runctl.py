"""Progress and cancellation from inside a long pricing run.

The daemon's pricing thread runs a chunk of a job under a :class:`RunControl`
(:func:`controlled`); pricers that loop for a long time call :func:`report` with the fraction
of the run done and :func:`check` at safe points (between the adaptive iterations of MLMC),
which raises :class:`Cancelled` once the job has been cancelled. Outside a control both are
no-ops, so the pricers cost nothing extra in-process. The control is a
:class:`contextvars.ContextVar`: per thread, never shared between concurrent runs.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Callable, Iterator


class Cancelled(Exception):
    """The run's job was cancelled (raised by :func:`check`)."""


@dataclass(frozen=True)
class RunControl:
    """``on_progress(fraction)``: the fraction (0..1) of the run done so far;
    ``is_cancelled()``: whether to stop at the next safe point."""

    on_progress: Callable[[float], None] | None = None
    is_cancelled: Callable[[], bool] | None = None


_current: contextvars.ContextVar[RunControl | None] = contextvars.ContextVar("optiond_run_control", default=None)


@contextlib.contextmanager
def controlled(control: RunControl) -> Iterator[RunControl]:
    """Run the block under ``control`` (restored on exit)."""
    token = _current.set(control)
    try:
        yield control
    finally:
        _current.reset(token)


def active() -> bool:
    """Whether the current run has a control (a caller to report to)."""
    return _current.get() is not None


def report(fraction: float) -> None:
    """Tell the control the fraction (clipped to 0..1) of the run done; no-op without one."""
    ctl = _current.get()
    if ctl is not None and ctl.on_progress is not None:
        ctl.on_progress(min(1.0, max(0.0, float(fraction))))


def check() -> None:
    """Raise :class:`Cancelled` if the current run's job was cancelled; no-op without a control.

    Raises:
        Cancelled: the job was cancelled.
    """
    ctl = _current.get()
    if ctl is not None and ctl.is_cancelled is not None and ctl.is_cancelled():
        raise Cancelled("the job was cancelled")


__all__ = ["Cancelled", "RunControl", "active", "check", "controlled", "report"]
