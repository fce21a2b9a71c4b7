"""Old import paths of moved modules, kept for one release.

A module that moved leaves a two-line file at its old path that calls :func:`alias`: importing
the old path warns once (``DeprecationWarning`` naming the new path) and hands back the new
module itself, so attribute reads and writes (``monkeypatch.setattr``) reach the one module
that the code uses.
"""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make ``sys.modules[old]`` the module ``new``, with a ``DeprecationWarning`` to the
    importer (stacklevel points past the import machinery to the ``import`` line)."""
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
