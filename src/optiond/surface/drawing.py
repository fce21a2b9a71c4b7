"""The surface pictures (:func:`optiond.surface.plots.plot_surface`) drawn in a child process
beside the rest of the chain command.

Drawing the pictures is single-threaded Python (matplotlib). :class:`Pictures` forks a child
once the surface is fitted: the child has the chain and the surface in its memory as the
parent had them (nothing is sent), imports matplotlib, draws and writes the pictures while the
parent prices the theo columns and writes the JSON, and sends back the paths it wrote or the
exception it met, which :meth:`Pictures.result` raises again in the parent. The child calls
no parallel kernel (a surface's evaluation is serial), so forking a process whose kernels ran
threads is safe.

Where ``fork`` is not a start method of the platform (Windows), or the child is gone without
an answer, the pictures are drawn in the calling process instead: the same files either way.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import signal
import sys
from pathlib import Path
from typing import Any

import pandas as pd

#: seconds the parent waits for the child's answer before it ends the child and draws the
#: pictures itself (a safety net: a large chain's SVG pictures take seconds, not minutes)
CHILD_TIMEOUT_S = 300.0


def draw(out: pd.DataFrame, surface: Any, directory: str | Path, formats: tuple[str, ...]) -> list[Path]:
    """:func:`optiond.surface.plots.plot_surface` in this process, with the cyclic garbage
    collector paused (the figures make many short-lived objects, and each full collection
    scans the whole heap of a process that loaded pandas, scipy and numba); ImportError with a
    ``--plot needs matplotlib`` message where matplotlib is missing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            from .plots import plot_surface
        except ImportError as e:
            raise ImportError(f"--plot needs matplotlib ({e})") from e
        return plot_surface(out, surface, directory, formats)
    finally:
        if enabled:
            gc.enable()


def _child(conn: Any, parent_end: Any, job: tuple) -> None:
    """The child: draw ``job``, send back ``("ok", paths)`` or ``("error", exception)``.
    Ctrl-C is the parent's to handle (it stops waiting; the child ends after drawing)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent_end.close()
    try:
        reply: tuple = ("ok", draw(*job))
    except Exception as e:  # noqa: BLE001  (the parent raises it again)
        reply = ("error", e)
    try:
        conn.send(reply)
    except (OSError, EOFError):  # the parent no longer waits
        return
    except Exception:  # noqa: BLE001  (an exception that does not pickle: its text)
        try:
            conn.send(("error", RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")))
        except Exception:  # noqa: BLE001
            return


class Pictures:
    """The pictures of one fitted surface, drawn in a forked child where the platform forks
    and ``background`` (see the module docstring), else on :meth:`result`.

    Args:
        out: the chain job's output the surface was fitted on (columns ``expiry, type, strike,
            iv_bid, iv, iv_ask``).
        surface: the fitted surface.
        directory, formats: as for :func:`optiond.surface.plots.plot_surface`.
        background: draw in a child (where ``fork`` is available).
    """

    def __init__(self, out: pd.DataFrame, surface: Any, directory: str | Path, formats: tuple[str, ...],
                 background: bool = True) -> None:
        self._job = (out, surface, directory, tuple(formats))
        self._proc = self._conn = None
        self.background = False  #: whether a child was started to draw them
        if background and "fork" in mp.get_all_start_methods():
            ctx = mp.get_context("fork")
            for stream in (sys.stdout, sys.stderr):  # nothing buffered written twice
                stream.flush()
            self._conn, child = ctx.Pipe(duplex=False)
            self._proc = ctx.Process(target=_child, args=(child, self._conn, self._job), daemon=True,
                                     name="optiond-pictures")
            self._proc.start()
            child.close()
            self.background = True

    def result(self) -> list[Path]:
        """The paths written (:func:`optiond.surface.plots.plot_surface`'s), waiting for the
        child; raises what drawing raised (ImportError without matplotlib, OSError on a file
        that cannot be written, ValueError). Drawn in this process where no child answered."""
        reply = None
        if self._conn is not None:
            try:
                if self._conn.poll(CHILD_TIMEOUT_S):
                    reply = self._conn.recv()
                else:  # no answer in time: the child ended, drawn here
                    self._proc.terminate()
            except (EOFError, OSError):
                reply = None  # the child died without an answer: drawn here
        self.close()
        if reply is None:
            return draw(*self._job)
        kind, value = reply
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        """Stop waiting for the child (idempotent): the pipe closed, the child joined."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            self._proc.join()
            self._proc = None

    def __enter__(self) -> Pictures:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["CHILD_TIMEOUT_S", "Pictures", "draw"]
