"""Old import paths of moved modules, kept for one release.

A module that moved leaves a two-line file at its old path that calls :func:`alias`: importing
the old path warns once (``DeprecationWarning`` naming the new path) and hands back the new
module itself, so attribute reads and writes (``monkeypatch.setattr``) reach the one module
that the code uses. A name that moved out of a module that stays is kept the same way by a
module ``__getattr__`` from :func:`names`.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any, Callable


def alias(old: str, new: str) -> None:
    """Make ``sys.modules[old]`` the module ``new``, with a ``DeprecationWarning`` to the
    importer (stacklevel points past the import machinery to the ``import`` line)."""
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)


def names(module: str, moved: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names that moved out of ``module``: ``moved`` maps each old
    name to ``"package.module:name"``. Reading an old name warns (``DeprecationWarning`` naming
    the new place, pointing at the reader) and gives the object itself; any other missing name
    raises ``AttributeError`` as usual."""

    def __getattr__(name: str) -> Any:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, new = target.partition(":")
        warnings.warn(f"{module}.{name} moved to {where}.{new}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), new)

    return __getattr__
