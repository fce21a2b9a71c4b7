"""What the panel shows about this machine's GPUs and GPU software, without Qt.

GPU readings come from NVML through ``nvidia-ml-py`` (module ``pynvml``), the library
``nvidia-smi`` is built on: it needs only the NVIDIA driver, not CUDA or CuPy, and reading it
does not create a CUDA context (so the panel never takes GPU memory from the daemon). The
daemon runs on this machine, so these are the daemon's GPUs.

Nothing here raises: a machine without the package, the driver or a GPU gives an empty list
and a reason that the panel shows as "No GPU (...)".
"""

from __future__ import annotations

import importlib.metadata
import threading
import time
from dataclasses import dataclass, field

_lock = threading.Lock()
_nvml_state: dict = {"initialised": False, "error": None, "failed_at": 0.0}
#: after NVML failed to start (no driver), wait this long before trying again
RETRY_S = 30.0


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment. Memory in bytes; utilisation in percent (0-100) of the last
    sample period; temperature in degrees Celsius. ``None`` where NVML does not report it."""

    index: int
    name: str
    memory_used: int | None = None
    memory_total: int | None = None
    utilization: int | None = None
    temperature: int | None = None


@dataclass(frozen=True)
class GpuSnapshot:
    """All GPUs NVML sees, the driver's CUDA version (``"12.4"``) and, when there are none,
    why (``reason``)."""

    gpus: list[GpuReading] = field(default_factory=list)
    driver_cuda: str | None = None
    driver_version: str | None = None
    reason: str | None = None


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _NvmlUnavailable(RuntimeError):
    """NVML failed to start recently (the reason is the message)."""


def _init_nvml():
    """Import pynvml and initialise NVML once per process; return the module or raise.
    A failure is remembered for :data:`RETRY_S` seconds (the panel polls every second)."""
    import pynvml  # nvidia-ml-py

    with _lock:
        if not _nvml_state["initialised"]:
            if _nvml_state["error"] and time.monotonic() - _nvml_state["failed_at"] < RETRY_S:
                raise _NvmlUnavailable(_nvml_state["error"])
            try:
                pynvml.nvmlInit()
            except Exception as e:  # noqa: BLE001
                _nvml_state.update(error=str(e), failed_at=time.monotonic())
                raise _NvmlUnavailable(str(e)) from None
            _nvml_state.update(initialised=True, error=None)
    return pynvml


def _optional(fn, *args):
    """``fn(*args)``, or None where NVML says the GPU does not support it."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 (NVMLError_NotSupported and friends: shown as n/a)
        return None


def read_gpus() -> GpuSnapshot:
    """Read every GPU's name, memory, utilisation and temperature through NVML.

    Returns:
        A :class:`GpuSnapshot`; ``gpus`` is empty and ``reason`` says why when the package,
        the driver or a GPU is missing.
    """
    try:
        nv = _init_nvml()
    except ImportError:
        return GpuSnapshot(reason="nvidia-ml-py is not installed")
    except Exception as e:  # noqa: BLE001 (NVMLError_LibraryNotFound, DriverNotLoaded, ...)
        return GpuSnapshot(reason=f"NVML: {e}")
    try:
        count = nv.nvmlDeviceGetCount()
    except Exception as e:  # noqa: BLE001
        return GpuSnapshot(reason=f"NVML: {e}")
    cuda = _optional(nv.nvmlSystemGetCudaDriverVersion)
    driver = _optional(nv.nvmlSystemGetDriverVersion)
    gpus = []
    for i in range(count):
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = _text(nv.nvmlDeviceGetName(h))
        except Exception:  # noqa: BLE001 (a GPU that fell off the bus: skip it)
            continue
        mem = _optional(nv.nvmlDeviceGetMemoryInfo, h)
        util = _optional(nv.nvmlDeviceGetUtilizationRates, h)
        temp = _optional(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        gpus.append(GpuReading(i, name, int(mem.used) if mem else None, int(mem.total) if mem else None,
                               int(util.gpu) if util else None, int(temp) if temp is not None else None))
    return GpuSnapshot(gpus, f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
                       _text(driver) if driver else None, None if gpus else "NVML sees no GPU")


def cupy_version() -> str | None:
    """The installed CuPy's version (from package metadata: CuPy itself is not imported, which
    would take seconds and, on first use, GPU memory), or None."""
    try:
        dists = importlib.metadata.packages_distributions().get("cupy", [])
    except Exception:  # noqa: BLE001
        dists = []
    for name in dists:
        try:
            return f"{importlib.metadata.version(name)} ({name})"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def format_bytes(n: int | None) -> str:
    """``12.3 GiB``-style text for a byte count; ``n/a`` for None."""
    if n is None:
        return "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover (loop always returns)


if __name__ == "__main__":  # a quick look on any machine: python -m optiond.gui.devices
    snap = read_gpus()
    print(snap)
    for g in snap.gpus:
        print(f"GPU {g.index}: {g.name}, {format_bytes(g.memory_used)} / {format_bytes(g.memory_total)}, "
              f"{g.utilization}% busy, {g.temperature} C")
    print("CuPy:", cupy_version())
