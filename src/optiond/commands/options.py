"""Numeric command-line options, checked where argparse reads them: the one place every
``optiond`` command takes its ``type=`` from, so ``--rate nan``, ``--dividend-yield inf`` or a
negative count is refused before any file is read, as one line on stderr and exit status 2
(:class:`optiond.cli.Parser`), instead of failing later in the middle of the work.

Each function takes the option's text and returns the number, or raises
:class:`argparse.ArgumentTypeError` with the reason (argparse prefixes the option's name).
"""

from __future__ import annotations

import argparse
import math

#: rates and yields are annual decimals: a magnitude of 1 or more is a percentage typed as
#: such (4.3 for 4.3 %), as the rate curve refuses (:meth:`optiond.market.curve.ZeroCurve.from_points`)
RATE_BOUND = 1.0


def finite(text: str) -> float:
    """A finite float (no nan, inf)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return x


def positive(text: str) -> float:
    """A finite float > 0 (a spot, a strike, a volatility, an accuracy, seconds)."""
    x = finite(text)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return x


def non_negative(text: str) -> float:
    """A finite float >= 0."""
    x = finite(text)
    if x < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return x


def annual_decimal(text: str) -> float:
    """A rate or a dividend yield: finite, an annual decimal in (-1, 1) (0.043 for 4.3 %)."""
    x = finite(text)
    if not -RATE_BOUND < x < RATE_BOUND:
        raise argparse.ArgumentTypeError(f"{text!r} is not an annual decimal in (-1, 1) (0.043 for 4.3 %)")
    return x


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def count(text: str) -> int:
    """A whole number >= 1 (samples, levels, grid points, quotes)."""
    n = _integer(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return n


def non_negative_int(text: str) -> int:
    """A whole number >= 0 (a seed, a level)."""
    n = _integer(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return n


def output_file_problem(flag: str, path: str | None) -> str | None:
    """Why the output file ``path`` of option ``flag`` cannot be written (one line), or None;
    checked before any work, so a bad path costs none: a directory, a parent directory that
    does not exist, or one this user cannot write in (a whole-file write needs to create a
    temporary beside the target: :mod:`optiond.files`). No path, standard output (``-``), a
    device or a pipe always passes."""
    import os

    if not path or path == "-":
        return None
    if os.path.isdir(path):
        return f"{flag} {path}: a directory, not a file"
    if os.path.exists(path) and not os.path.isfile(path):
        return None  # a device or a pipe (/dev/stdout): written as a stream
    parent = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(parent):
        return f"{flag} {path}: no directory {os.path.dirname(os.path.abspath(path))}"
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{flag} {path}: not writable by this user"
    return None


def port(text: str) -> int:
    """A TCP port on 127.0.0.1: 1 to 65535, 0 for a free one, -1 for none."""
    n = _integer(text)
    if not -1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1 to 65535; 0: a free one; -1: off)")
    return n
