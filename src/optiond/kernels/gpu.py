"""The one owner of "is there a GPU here?": CuPy imported lazily, the device probe, the label
every result carries, and the cache of compiled CUDA modules that every method's launcher uses.

Nothing here imports CuPy at module import: the package imports and prices on machines with
no CuPy, no driver or no device, and :func:`available` is then False. ``OPTIOND_DISABLE_GPU=1``
(:data:`DISABLE_ENV`) forces False (the CPU reference for everything).

Every method folder (``kernels/binomial``, ``kernels/mlmc``, ``kernels/adi``) compiles its
``.cu`` file through :func:`module` and raises :class:`GPUError` for any CUDA failure, which the
engine's one GPU-with-CPU-fallback helper catches.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Sequence

log = logging.getLogger(__name__)

#: environment switch: a value other than "" or "0" hides every GPU from optiond
DISABLE_ENV = "OPTIOND_DISABLE_GPU"


class GPUError(RuntimeError):
    """A GPU failure (no CuPy, no device, a CUDA error, a compile error, out of memory): the
    caller prices on the CPU instead."""


_lock = threading.RLock()
_state: dict[Any, Any] = {}


def cupy():
    """The ``cupy`` module.

    Raises:
        GPUError: CuPy is not installed or its CUDA libraries fail to load.
    """
    failed = _state.get("cupy_error")
    if failed is not None:  # tried once in this process: a failed import is not retried per call
        raise GPUError(f"CuPy not importable: {failed}") from failed
    try:
        import cupy as cp
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        _state["cupy_error"] = e
        raise GPUError(f"CuPy not importable: {e}") from e
    return cp


def disabled() -> bool:
    """True when :data:`DISABLE_ENV` hides the GPU."""
    return os.environ.get(DISABLE_ENV, "0") not in ("", "0")


def device_count() -> int:
    """Visible CUDA devices: 0 without CuPy, a driver or a device, or when disabled (never raises)."""
    if disabled():
        return 0
    with _lock:
        if "count" not in _state:
            try:
                _state["count"] = int(cupy().cuda.runtime.getDeviceCount())
            except Exception as e:  # noqa: BLE001 (any failure means: no GPU here)
                log.debug("no GPU: %s", e)
                _state["count"] = 0
        return _state["count"]


def available() -> bool:
    """True when CuPy imports and sees at least one CUDA device (probed once per process;
    :data:`DISABLE_ENV` forces False). Never raises."""
    return device_count() > 0


def device_info() -> dict:
    """The current device: ``id``, ``name``, ``sms`` (multiprocessors), ``regs_per_sm``,
    ``threads_per_sm``, ``cc`` (compute capability ``"major.minor"``), ``memory_bytes``.

    Raises:
        GPUError: no GPU, or the driver cannot be queried.
    """
    cp = cupy()
    try:
        dev = int(cp.cuda.runtime.getDevice())
    except Exception as e:
        raise GPUError(f"cannot query the GPU: {e}") from e
    with _lock:
        key = ("info", dev)
        if key not in _state:
            try:
                props = cp.cuda.runtime.getDeviceProperties(dev)
                name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
                _state[key] = {"id": dev, "name": name, "sms": int(props["multiProcessorCount"]),
                               "regs_per_sm": int(props["regsPerMultiprocessor"]),
                               "threads_per_sm": int(props["maxThreadsPerMultiProcessor"]),
                               "cc": f"{props['major']}.{props['minor']}",
                               "memory_bytes": int(props["totalGlobalMem"])}
            except Exception as e:
                raise GPUError(f"cannot query the GPU: {e}") from e
        return _state[key]


def in_use() -> bool:
    """Whether this process has used a GPU already (a device queried or a module compiled), so
    that a monitor can read its memory without creating a CUDA context just to answer. Never
    raises."""
    with _lock:
        return any(isinstance(k, tuple) and k[0] in ("info", "module") for k in _state)


def device_label() -> str:
    """``"gpu:<id> <name>"``: the device field of a result priced on this GPU.

    Raises:
        GPUError: no GPU.
    """
    info = device_info()
    return f"gpu:{info['id']} {info['name']}"


def module(source: Path, options: Sequence[str] = (), name_expressions: Sequence[str] = (),
           cooperative: bool = False):
    """The compiled ``cupy.RawModule`` of the CUDA file ``source`` with NVRTC ``options``
    (compiled once per process, source, options, name expressions and device; CuPy keeps the
    binary on disk, so later processes skip the compile).

    Raises:
        GPUError: no CuPy, or the compile failed.
    """
    cp = cupy()
    try:
        dev = int(cp.cuda.runtime.getDevice())
    except Exception as e:
        raise GPUError(f"no GPU: {e}") from e
    key = ("module", str(source), tuple(options), tuple(name_expressions), bool(cooperative), dev)
    with _lock:
        mod = _state.get(key)
        if mod is None:
            try:
                kw = {"name_expressions": list(name_expressions)} if name_expressions else {}
                mod = cp.RawModule(code=Path(source).read_text(), options=tuple(options),
                                   enable_cooperative_groups=bool(cooperative), **kw)
                mod.compile()
            except Exception as e:
                raise GPUError(f"compiling {Path(source).name} failed: {e}") from e
            _state[key] = mod
        return mod
