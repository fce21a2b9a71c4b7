"""optiond: option pricing on CPU and GPU behind a local daemon and Excel functions.

The schema lives in :mod:`optiond.models`, dispatch in :mod:`optiond.engine`, the pricers in
:mod:`optiond.kernels` (one folder per method, each with a front door the engine calls). Nothing here imports CuPy (GPU modules import it lazily) nor numpy.
"""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("optiond")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+src"

#: the schema's names, read from :mod:`optiond.models` on first use (importing ``optiond`` alone,
#: as ``optiond --help`` does, loads no numerical library)
_SCHEMA = ("Batch", "ImpliedVol", "InvalidInputError", "Method", "Result")


def __getattr__(name: str):
    if name in _SCHEMA:
        from . import models

        return getattr(models, name)
    raise AttributeError(f"module 'optiond' has no attribute {name!r}")


__all__ = ["Batch", "ImpliedVol", "InvalidInputError", "Method", "Result", "__version__"]
