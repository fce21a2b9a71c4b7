"""The MPI pricing pool: ranks, their devices, and the task every rank runs.

Two ways to start a pool of R ranks (R-1 workers beside the front end):

* ``mpiexec -n R optiond serve`` (the site's MPI, any number of hosts): every rank starts the
  daemon; :func:`bootstrap` gathers each rank's pid, host, device and threads at rank 0; rank
  0 then serves ZeroMQ and the others become :mod:`mpi4py.futures` workers
  (:class:`mpi4py.futures.MPICommExecutor`) until rank 0 stops;
* ``optiond serve --workers R``: re-executes itself under the ``mpiexec`` of the MPI it was
  built with (the PyPI ``mpich`` wheel's on a workstation), i.e. the first way on one host,
  with every listener on loopback or in shared memory (:func:`find_local_launcher`,
  :func:`loopback_env`): no port of the pool is reachable from the network.

Devices: each rank uses GPU ``local_rank % n_gpus`` when CuPy sees GPUs on its host (the
engine then prices on "the current device"); CPU threads per rank are the host's cores
divided by the ranks on that host (numba), unless ``NUMBA_NUM_THREADS`` is set.

Faults: MPI (without ULFM) cannot survive the loss of a rank: when a worker dies, ``mpiexec``
ends the whole job, rank 0 included. Clients notice the daemon's heartbeat stop within 2 s
and report it (or price in-process when allowed); the service manager restarts the daemon
(``Restart=on-failure``). A chunk that *fails* on a worker (an exception, e.g. a GPU error
the engine could not absorb) is re-run on rank 0 (:class:`optiond.daemon.jobs.JobManager`).

``MPI4PY_FUTURES_BACKOFF`` (the longest sleep of a rank polling for work, and of rank 0's
thread polling for results) is left as set; unset, it is :func:`default_backoff`: ``1e-4`` s
on a GPU host, where chunks take milliseconds and a millisecond lost per chunk would cost 10 %
of the scaling (at 1e-5 rank 0's polling thread took the interpreter lock so often that rank
0's own GPU chunk of a 4-GPU job ran 7 % longer than the workers'), and ``1e-3`` s on a
CPU-only host, where a shorter back-off lets idle ranks poll away CPU and contend with the
request loop for the interpreter lock (the measurements: BENCHMARKS.md, "The daemon").
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import time
from typing import Any

import numpy as np

from ..kernels import gpu
from . import wire

log = logging.getLogger("optiond.daemon.pool")

BACKOFF_ENV = "MPI4PY_FUTURES_BACKOFF"
GPU_BACKOFF = "1e-4"
CPU_BACKOFF = "1e-3"

#: environment variables by which MPI launchers announce the job size
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE",
              "SLURM_NTASKS")

_rank_info: dict[str, Any] = {}
_HOST = socket.gethostname()


def launched_by_mpi() -> bool:
    """Whether this process was started by ``mpiexec``/``srun`` as one of several ranks."""
    for var in _SIZE_VARS[:5]:
        v = os.environ.get(var)
        if v and v.isdigit() and int(v) > 1:
            return True
    return False


def find_mpiexec() -> str | None:
    """The ``mpiexec`` beside this Python (the ``mpich`` wheel's), else the one on PATH."""
    here = os.path.dirname(sys.executable)
    return shutil.which("mpiexec", path=here) or shutil.which("mpiexec")


def find_local_launcher() -> str | None:
    """The launcher of a one-host pool: MPICH's ``mpiexec.gforker`` beside the ``mpiexec``
    that :func:`find_mpiexec` finds (it forks the ranks and talks to them over socket pairs:
    no TCP port, where Hydra's ``mpiexec`` listens on 0.0.0.0 for its proxies whatever its
    options), else that ``mpiexec``, else None."""
    exe = find_mpiexec()
    if exe is None:
        return None
    return shutil.which("mpiexec.gforker", path=os.path.dirname(exe)) or exe


def launcher_warning(exe: str) -> str | None:
    """What a one-host pool under ``exe`` exposes beyond loopback, or None: MPICH's Hydra
    ``mpiexec`` (``hydra_pmi_proxy`` beside it) listens on every interface for its proxies."""
    if os.path.basename(exe).startswith("mpiexec.gforker"):
        return None
    if shutil.which("hydra_pmi_proxy", path=os.path.dirname(exe)):
        return (f"{exe} is MPICH's Hydra, whose control port listens on every interface (no mpiexec.gforker beside "
                f"it); the ranks' own transport stays on loopback")
    return None


def _loopback_interface() -> str:
    """The name of the loopback interface (``lo`` on Linux, ``lo0`` on macOS and BSD)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        names = []
    return next((n for n in names if n in ("lo", "lo0")), "lo")


def loopback_env() -> dict[str, str]:
    """The environment that keeps every listener of a one-host pool on loopback or in shared
    memory, for the MPIs a workstation has:

    * MPICH ch4 over UCX (the ``mpich`` wheel): ``UCX_TLS=self,sm`` (the ranks reach one another
      through shared memory; UCX opens no TCP listener) and ``UCX_NET_DEVICES=<lo>``;
      over libfabric: ``FI_TCP_IFACE`` / ``FI_SOCKETS_IFACE=<lo>``; ch3 / nemesis:
      ``MPIR_CVAR_CH3_INTERFACE_HOSTNAME=127.0.0.1``, ``MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE=<lo>``;
    * Open MPI: its runtime's (``oob``, PRRTE's) and its TCP transport's (``btl_tcp``)
      interfaces restricted to ``127.0.0.0/8``.

    A multi-host pool is the site's MPI started by ``mpiexec -n R optiond serve``, configured
    by IT; this environment is only for ``optiond serve --workers R``."""
    lo = _loopback_interface()
    loop_net = "127.0.0.0/8"
    return {"UCX_TLS": "self,sm", "UCX_NET_DEVICES": lo, "FI_TCP_IFACE": lo, "FI_SOCKETS_IFACE": lo,
            "MPIR_CVAR_CH3_INTERFACE_HOSTNAME": "127.0.0.1", "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE": lo,
            "OMPI_MCA_oob_tcp_if_include": loop_net, "OMPI_MCA_btl_tcp_if_include": loop_net,
            "PRTE_MCA_oob_tcp_if_include": loop_net, "PMIX_MCA_ptl_tcp_if_include": loop_net}


def mpiexec_command(ranks: int, argv: list[str]) -> list[str]:
    """The one-host pool's command line: ``<launcher> -n ranks python -m
    optiond.daemon.commands <argv>`` (the launcher: :func:`find_local_launcher`); run it with
    :func:`loopback_env` added to the environment.

    Raises:
        RuntimeError: no ``mpiexec`` found (install the ``mpich`` wheel or the site's MPI).
    """
    exe = find_local_launcher()
    if exe is None:
        raise RuntimeError("no mpiexec found beside this Python or on PATH: install mpi4py and the 'mpich' wheel "
                           "(pip install mpi4py mpich) or load the site's MPI")
    return [exe, "-n", str(int(ranks)), sys.executable, "-m", "optiond.daemon.commands", *argv]


def default_backoff() -> str:
    """``MPI4PY_FUTURES_BACKOFF`` for this host when none is set: ``1e-4`` with a GPU, else
    ``1e-3`` (see the module docstring)."""
    return GPU_BACKOFF if gpu.device_count() > 0 else CPU_BACKOFF


def _import_mpi():
    if BACKOFF_ENV not in os.environ:
        os.environ[BACKOFF_ENV] = default_backoff()
    from mpi4py import MPI  # noqa: PLC0415 (only when a pool is asked for)

    return MPI


def configure_rank(local_rank: int, local_size: int) -> dict[str, Any]:
    """Pin this rank's GPU (``local_rank % n_gpus``) and numba threads; returns the rank's
    ``{"device", "threads", "gpus"}``. Call in the thread that will price (the current CUDA
    device is per thread)."""
    threads = None
    if "NUMBA_NUM_THREADS" not in os.environ and local_size > 1:
        threads = max(1, (os.cpu_count() or 1) // local_size)
    try:
        import numba

        if threads is not None:
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        threads = numba.get_num_threads()
    except Exception:  # noqa: BLE001
        threads = threads or 1
    n_gpus = gpu.device_count()
    device = "cpu"
    if n_gpus:
        try:
            gpu.cupy().cuda.Device(local_rank % n_gpus).use()
            device = gpu.device_label()
        except Exception as e:  # noqa: BLE001 (a broken GPU: this rank prices on the CPU)
            log.warning("rank cannot use GPU %d: %s", local_rank % n_gpus, e)
    _rank_info.update(device=device, threads=threads, gpus=n_gpus, local_rank=local_rank)
    return {"device": device, "threads": threads, "gpus": n_gpus}


def bootstrap(comm) -> list[dict[str, Any]]:
    """Collective over ``comm``: configure each rank and gather ``{rank, pid, host, local_rank,
    device, threads}`` of all ranks (the list is returned on every rank)."""
    MPI = _import_mpi()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    info = {"rank": comm.Get_rank(), "pid": os.getpid(), "host": socket.gethostname(), "local_rank": local_rank,
            "local_size": local_size, **configure_rank(local_rank, local_size)}
    return comm.allgather(info)


def worker_loop(comm, infos: list[dict[str, Any]]) -> None:
    """A worker rank's life: ignore SIGINT/SIGTERM (rank 0 decides when the pool stops), serve
    tasks in :class:`mpi4py.futures.MPICommExecutor` until rank 0 leaves it."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):
            pass
    from mpi4py.futures import MPICommExecutor

    with MPICommExecutor(comm, root=0):
        pass


def host() -> str:
    """This host's name (as :func:`run_chunk` reports it with its clock)."""
    return _HOST


def rank_info() -> dict[str, Any]:
    """This process's rank configuration (device, threads) as set by :func:`configure_rank`."""
    return dict(_rank_info)


# ---------------------------------------------------------------------------- the task


def run_chunk(task: dict[str, Any]) -> dict[str, Any]:
    """Price one chunk (on any rank, or in the front end's own pricing thread).

    Args:
        task: ``{"op": "price" | "implied_vol", "columns": {name: scalar or (m,) array},
            "method": Method, "prices": (m,) array (implied_vol), "rank": int}``.

    Returns:
        ``{"values": (6, m) float64, or (1, m) (the prices) without Greeks (price),
        "std_error": (m,) (MLMC prices), "vol": (m,)
        (implied_vol), "status", "error": :func:`optiond.daemon.wire.sparse` pairs, "device": str,
        "elapsed_s": float, "clock": (host, start, end) of ``time.perf_counter``, "diagnostics":
        dict, "pid": int, "gpu_memory": [...]}``.

    Raises:
        InvalidInputError: a problem of the whole table (the job fails with it).
        Exception: anything the engine raises (the job runs the chunk again on rank 0).
    """
    from .. import engine
    from .metrics import gpu_memory_here

    t0 = time.perf_counter()
    out: dict[str, Any] = {"pid": os.getpid()}
    if task["op"] == "price":
        res = engine.price_table(task["columns"], task["method"])
        # no Greeks asked for: the prices alone travel back
        out.update(values=wire.value_block(res, wire.prices_only(task["method"], task["columns"])),
                   status=wire.sparse(res.status, "ok"), error=wire.sparse(res.error, ""), device=res.device,
                   diagnostics=dict(res.diagnostics))
        if getattr(res, "std_error", None) is not None:  # MLMC: the estimate's standard error
            out["std_error"] = np.asarray(res.std_error, dtype=np.float64)
    else:
        iv = engine.implied_vol_table(task["prices"], task["columns"], task["method"])
        out.update(vol=iv.vol, status=wire.sparse(iv.status, "ok"), error=wire.sparse(iv.error, ""), device=iv.device,
                   diagnostics=dict(iv.diagnostics))
    t1 = time.perf_counter()
    out["elapsed_s"] = t1 - t0
    # this host's monotonic clock (shared by its processes): rank 0 places the chunk's pricing
    # on its job timeline when the chunk ran on its own host
    out["clock"] = (_HOST, t0, t1)
    out["gpu_memory"] = gpu_memory_here()
    return out


def ping(_: Any = None) -> dict[str, Any]:
    """A trivial task: the worker's pid (liveness probe)."""
    return {"pid": os.getpid(), "time": time.time()}


__all__ = ["launched_by_mpi", "find_mpiexec", "find_local_launcher", "launcher_warning", "loopback_env", "mpiexec_command", "bootstrap", "worker_loop", "configure_rank",
           "host", "run_chunk", "rank_info"]
