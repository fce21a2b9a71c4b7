"""optiond: option pricing on CPU and GPU behind a local daemon and Excel functions.

The schema lives in :mod:`optiond.models`, dispatch in :mod:`optiond.engine`, the pricers in
:mod:`optiond.kernels` (one folder per method, each with a front door the engine calls). Nothing here imports CuPy; GPU modules import it lazily.
"""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("optiond")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+src"

from .models import Batch, ImpliedVol, InvalidInputError, Method, Result  # noqa: E402

__all__ = ["Batch", "ImpliedVol", "InvalidInputError", "Method", "Result", "__version__"]
