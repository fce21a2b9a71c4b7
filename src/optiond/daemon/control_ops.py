"""The daemon's control operations and its reports on itself: :class:`ControlOps`, the part of
:class:`optiond.daemon.server.Server` that answers ``ping``, ``status``, ``jobs``, ``cancel``,
``drain``, ``resume`` and ``shutdown``, and gives the numbers of ``status``, the metrics'
state and ``/healthz``/``/readyz`` (:mod:`optiond.daemon.metrics`).

The socket loops, the dispatch of each message to its operation, the threads and the life
cycle are in :mod:`optiond.daemon.server`; the pricing operations in
:mod:`optiond.daemon.pricing`.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from typing import Any

from .. import __version__, engine
from ..models import METHODS
from . import paths
from .metrics import gpu_memory_here
from .protocol import PROTOCOL_VERSION, Message, ProtocolError
from .server_parts import _Refused

log = logging.getLogger("optiond.daemon")


def devices() -> list[str]:
    """Devices the engine can price on: ``["cpu"]``, plus ``"gpu:<id> <name>"`` when the GPU
    backend sees one. An engine that exposes ``available_devices()`` is asked instead."""
    try:
        hook = getattr(engine, "available_devices", None)
        if callable(hook):
            return [str(d) for d in hook()]
        from ..kernels import gpu  # imports CuPy lazily; the probe is cached per process

        if gpu.available():
            return ["cpu", gpu.device_label()]
    except Exception:  # a broken GPU probe must not take the daemon down
        log.warning("device probe failed", exc_info=True)
    return ["cpu"]


class ControlOps:
    """The control operations, status and health of :class:`optiond.daemon.server.Server` (a
    mixin: it is no server on its own; it reads the state the server sets up)."""

    def _op_ping(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        return {"pid": self.pid, "version": __version__, "time": time.time()}, []

    def _alive_workers(self) -> int:
        here = self.ranks[0].get("host") if self.ranks else None
        alive = 0
        for r in self.ranks[1:]:
            if r.get("host") == here and isinstance(r.get("pid"), int):
                try:
                    os.kill(r["pid"], 0)
                except ProcessLookupError:
                    continue
                except PermissionError:
                    pass
            alive += 1
        if self.jobs is not None:
            alive = min(alive, self.jobs.slots - 1)
        return alive

    def _gpu_memory(self) -> list[dict]:
        out = [dict(m, rank=0) for m in gpu_memory_here()]
        seen = {m["device"] for m in out}
        for r, mem in sorted(self._worker_gpu_memory.items()):
            for m in mem:
                if (r, m.get("device")) not in seen:
                    out.append(dict(m, rank=r))
        return out

    def _cpu_threads(self) -> int | None:
        """Pricing threads of rank 0 (numba's, as :func:`optiond.daemon.pool.configure_rank` set them)."""
        threads = self.ranks[0].get("threads") if self.ranks else None
        if threads:
            return int(threads)
        try:
            import numba

            return int(numba.get_num_threads())
        except Exception:  # noqa: BLE001
            return None

    def status(self) -> dict[str, Any]:
        """The numbers ``optiond status`` and the panel show (see :meth:`Client.status`)."""
        counters = (self._shell_counters, self._control_counters, self._job_counters)
        by_op: Counter[str] = Counter()
        outcomes: Counter[str] = Counter()
        for c in counters:
            by_op.update(c.by_op)
            outcomes.update(c.outcomes)
        jobs = self.jobs.stats() if self.jobs is not None else {"queue_depth": 0, "running": 0, "queued": 0,
                                                                  "counts": {}, "slots": 1, "workers_lost": 0}
        cache = self.cache.stats()
        gpu_mem = self._gpu_memory()
        workers = len(self.ranks) - 1
        alive = self._alive_workers()
        out = {
            "version": __version__, "protocol_version": PROTOCOL_VERSION, "pid": self.pid, "state": self._state,
            "started": self.started_iso, "uptime_s": time.time() - self.started, "devices": devices(),
            "requests_served": sum(by_op.values()), "by_op": dict(by_op), "requests_by_outcome": dict(outcomes),
            "errors": sum(c.errors for c in counters), "auth_failures": sum(c.auth_failures for c in counters),
            "malformed": sum(c.malformed for c in counters), "replayed": sum(c.replayed for c in counters),
            "queue_depth": jobs["queue_depth"], "jobs_running": jobs["running"], "jobs_queued": jobs["queued"],
            "jobs_by_outcome": jobs["counts"],
            "cache_hit_ratio": cache["hit_ratio"], "cache": cache,
            "coalesced_requests": sum(c.coalesced for c in counters),
            "coalescing": self.coalesce, "coalesce_mode": self.coalesce_mode,
            "gpu_fallbacks": sum(c.gpu_fallbacks for c in counters),
            "gpu_memory": gpu_mem,
            "mpi_ranks": len(self.ranks), "mpi_workers": workers, "mpi_workers_alive": alive,
            "mpi": {"ranks": len(self.ranks), "workers": workers, "alive": alive, "total": workers,
                    "lost": jobs["workers_lost"], "slots": jobs["slots"],
                    "rank_info": [{k: r.get(k) for k in ("rank", "pid", "host", "device", "threads")}
                                  for r in self.ranks]},
            "cpu_threads": self._cpu_threads(), "methods": list(METHODS),
            "limits": self.limits.as_dict(), "ns_per_node": self.ns_per_node, "objects": self.objects.stats(),
            "endpoint": paths.endpoint(self.info) if self.info else None,
            "connection_file": str(self.connection_file),
            "metrics_url": self.http.url if self.http else None,
            "log_file": str(self.json_log.path) if self.json_log else None,
            "connections": self._connections(),
        }
        if self._gpu:
            try:
                import cupy

                out["cupy_version"] = cupy.__version__
                out["cuda_version"] = str(cupy.cuda.runtime.runtimeGetVersion())
            except Exception:  # noqa: BLE001
                pass
        return out

    def _metrics_state(self) -> dict[str, Any]:
        jobs = self.jobs.stats() if self.jobs is not None else {"queue_depth": 0, "running": 0}
        counters = (self._shell_counters, self._control_counters, self._job_counters)
        return {"queue_depth": jobs["queue_depth"], "jobs_running": jobs["running"], "cache": self.cache.stats(),
                "gpu_memory": self._gpu_memory(), "mpi": {"ranks": len(self.ranks),
                                                         "workers_alive": self._alive_workers()},
                "auth_failures": sum(c.auth_failures for c in counters),
                "malformed": sum(c.malformed for c in counters), "uptime_s": time.time() - self.started,
                "ready": self._ready()[0], "connections": self._connections()}

    def _connections(self) -> dict[str, Any]:
        """Peer connections open and shed by transport (``http`` included), the per-transport
        cap, the descriptor budget and limit (see :mod:`optiond.daemon.connections`)."""
        st = self.guard.stats() if self.guard is not None else {"open": {}, "shed": {}, "cap": None,
                                                                 "budget": None, "fd_limit": self.fd_limit}
        if self.http is not None:
            st["open"]["http"] = self.http.connections
            st["shed"]["http"] = self.http.shed
        return st

    def _health(self) -> tuple[bool, dict]:
        now = time.monotonic()
        loop_age, control_age = now - self._loop_tick, now - self._control_tick
        ok = not self._stop.is_set() and control_age < 2.0 and (self._state == "starting" or loop_age < 2.0)
        return ok, {"state": self._state, "loop_age_s": round(loop_age, 3), "control_age_s": round(control_age, 3)}

    def _ready(self) -> tuple[bool, dict]:
        healthy, detail = self._health()
        reasons = []
        if not healthy:
            reasons.append("not healthy")
        if self._state != "serving":
            reasons.append(f"state {self._state}")
        if len(self.ranks) > 1 and self._alive_workers() < len(self.ranks) - 1:
            reasons.append("MPI workers lost")
        return not reasons, {**detail, "reasons": reasons}

    def _op_status(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        return self.status(), []

    def _op_shutdown(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        log.info("shutdown requested by session %s", msg.header["session"][:8])
        self._stop.set()
        return {"pid": self.pid, "stopping": True}, []

    def _op_drain(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        shutdown = msg.content.get("shutdown", False)
        if not isinstance(shutdown, bool):
            raise ProtocolError("drain: 'shutdown' must be true or false")
        log.info("drain requested by session %s (shutdown when done: %s)", msg.header["session"][:8], shutdown)
        self._drain_shutdown = shutdown
        self._set_state("draining")
        st = self.jobs.stats()
        return {"state": "draining", "queue_depth": st["queue_depth"], "shutdown": shutdown}, []

    def _op_resume(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        if self._stop.is_set():
            raise _Refused("DaemonStopping", "the daemon is stopping")
        self._drain_shutdown = False
        self._set_state("serving")
        return {"state": "serving"}, []

    def _op_jobs(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        slots = self.jobs.slots
        return {"jobs": [j.summary(slots) for j in self.jobs.active()]}, []

    def _op_cancel(self, msg: Message, t0: float = 0.0) -> tuple[dict, list]:
        jid = msg.content.get("job_id")
        if not isinstance(jid, str) or not 0 < len(jid) <= 64:
            raise ProtocolError("cancel needs 'job_id' (a string of at most 64 characters)")
        jobs = self.jobs.cancel(jid)
        log.info("cancel of job %s requested by session %s: %d running", jid, msg.header["session"][:8], len(jobs))
        return {"job_id": jid, "cancelled": len(jobs), "states": [j.state for j in jobs]}, []
