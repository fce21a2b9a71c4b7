"""Turning scalars and sequences into equal-length contiguous NumPy columns."""

from __future__ import annotations

import numpy as np


def as_columns(*cols, dtype=np.float64):
    """Broadcast scalars and 1-D sequences to contiguous, writeable arrays of one length n.

    Each item is a value, or a ``(value, dtype)`` pair to override ``dtype`` for that column.

    Raises:
        ValueError: a column is not 0-D or 1-D, or lengths differ.
    """
    pairs = [c if isinstance(c, tuple) else (c, dtype) for c in cols]
    arrs = [np.asarray(v) for v, _ in pairs]
    lengths = {a.shape[0] for a in arrs if a.ndim == 1}
    if any(a.ndim > 1 for a in arrs) or len(lengths) > 1:
        raise ValueError(f"columns must be scalars or 1-D of one length, got shapes {[a.shape for a in arrs]}")
    n = lengths.pop() if lengths else 1
    return [np.full(n, a, dtype=dt) if a.ndim == 0 else np.ascontiguousarray(a, dtype=dt) for a, (_, dt) in zip(arrs, pairs)]
