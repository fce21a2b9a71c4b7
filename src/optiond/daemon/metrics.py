"""Prometheus metrics and the ``/healthz`` and ``/readyz`` probes of the daemon, for IT.

One HTTP port on 127.0.0.1 (``optiond serve --metrics-port``; the connection file and
``status`` give it), served by waitress (one thread reads every connection without blocking;
:data:`HTTP_THREADS` worker threads answer complete requests), serves:

* ``/metrics``: the Prometheus text format, from :mod:`prometheus_client` (a registry of the
  daemon's own, so several daemons can live in one test process);
* ``/healthz``: 200 while the request loop turns (it ticks at least every 0.1 s), else 503;
* ``/readyz``: 200 once the daemon serves (warm-up done, not draining, not stopping, its MPI
  pool up), else 503; the body is JSON saying why.

Metrics (all prefixed ``optiond_``):

=====================================  ======================================================
``requests_total{op,model,device,      requests answered, by operation, pricing method,
outcome}``                             device (``cpu``, ``gpu:0`` ...) and outcome (``ok``,
                                       ``cached``, ``invalid``, ``refused``, ``cancelled``,
                                       ``deadline``, ``protocol_error``, ``failed``)
``request_duration_seconds{op}``       latency histogram, receipt to reply
``queue_depth``                        jobs accepted and not finished (queued + running)
``jobs_total{outcome}``                large requests run as chunked jobs
``cache_hits_total``,                  reply cache lookups; ``cache_hit_ratio`` their ratio,
``cache_misses_total``                 ``cache_entries`` / ``cache_bytes`` its size
``coalesced_requests_total``           one-option requests priced together in one batch
``gpu_memory_used_bytes{device,rank}``, GPU memory of the devices the ranks use, as of their
``gpu_memory_total_bytes{device,rank}`` last report
``gpu_fallbacks_total``                requests the GPU failed and the CPU priced
``mpi_ranks``, ``mpi_workers_alive``   MPI ranks of the pool, and worker ranks alive
``auth_failures_total``,               messages dropped for a bad signature / answered with a
``malformed_messages_total``           protocol error
``connections{transport}``,            peer connections open now (``shell``, ``shell_ipc``,
``connections_shed_total{transport}``  ``control``, ``control_ipc``, ``iopub``, ``hb``, ``hb_ipc``,
                                       ``http``) and those closed for being over the cap or the
                                       descriptor budget (or displaced there by a newer one)
``open_files_limit``                   the daemon's soft RLIMIT_NOFILE (POSIX)
``uptime_seconds``, ``ready``          seconds since start; 1 when ``/readyz`` says ready
``log_records_dropped_total``,         JSON log lines lost (queue full, or the file failing),
``log_write_errors_total``             and failed writes of the file (a full disk...)
=====================================  ======================================================

plus the standard ``process_*`` metrics of :class:`prometheus_client.ProcessCollector`.

The HTTP server's resources are bounded whatever local peers do: a fixed number of threads, at
most ``max_connections`` open connections (when full, the connections idle the longest and
not being answered are closed to make room, so a probe always gets in), a request head of at
most :data:`HTTP_MAX_HEADER_BYTES`, and a connection silent for :data:`HTTP_IDLE_S` closed.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import sys
import threading
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

#: worker threads of the HTTP server (the requests are tiny; scrapes are seconds apart)
HTTP_THREADS = 2
#: open HTTP connections at most (by default; the daemon passes its descriptor budget's share)
HTTP_MAX_CONNECTIONS = 64
#: seconds an HTTP connection may stay silent (a request sent halfway included)
HTTP_IDLE_S = 10
#: longest request head accepted (request line and headers), bytes
HTTP_MAX_HEADER_BYTES = 8192

LATENCY_BUCKETS = (50e-6, 100e-6, 200e-6, 350e-6, 500e-6, 1e-3, 2e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def gpu_memory_here() -> list[dict[str, Any]]:
    """Memory of the GPU this process uses, when it already uses one (never creates a CUDA
    context just to answer): ``[{"device": "gpu:<id> <name>", "used": bytes, "total": bytes,
    "pool_used": bytes}]``, else ``[]``."""
    if "cupy" not in sys.modules:
        return []
    try:
        from ..kernels import gpu

        if not gpu.available() or not gpu.in_use():
            return []  # this process has not used the GPU
        import cupy

        free, total = cupy.cuda.runtime.memGetInfo()
        return [{"device": gpu.device_label(), "used": int(total - free), "total": int(total),
                 "pool_used": int(cupy.get_default_memory_pool().used_bytes())}]
    except Exception:  # noqa: BLE001 (a failing GPU must not break a scrape or a status)
        return []


class _StateCollector:
    """Gauges and counters read from the daemon's state at scrape time (nothing in the hot path)."""

    def __init__(self, state: Callable[[], dict]):
        self._state = state

    def collect(self):
        st = self._state()
        g = GaugeMetricFamily
        yield g("optiond_queue_depth", "Jobs accepted and not finished (queued + running)", value=st["queue_depth"])
        yield g("optiond_jobs_running", "Jobs being priced now", value=st["jobs_running"])
        cache = st["cache"]
        yield CounterMetricFamily("optiond_cache_hits", "Reply cache hits", value=cache["hits"])
        yield CounterMetricFamily("optiond_cache_misses", "Reply cache misses", value=cache["misses"])
        yield g("optiond_cache_hit_ratio", "Reply cache hits over lookups", value=cache["hit_ratio"])
        yield g("optiond_cache_entries", "Replies in the cache", value=cache["entries"])
        yield g("optiond_cache_bytes", "Bytes of replies in the cache", value=cache["bytes"])
        used = g("optiond_gpu_memory_used_bytes", "GPU memory in use on the device", labels=["device", "rank"])
        total = g("optiond_gpu_memory_total_bytes", "GPU memory of the device", labels=["device", "rank"])
        for m in st["gpu_memory"]:
            labels = [str(m.get("device", "")).split(" ")[0], str(m.get("rank", 0))]
            used.add_metric(labels, m.get("used", 0))
            total.add_metric(labels, m.get("total", 0))
        yield used
        yield total
        mpi = st["mpi"]
        yield g("optiond_mpi_ranks", "MPI ranks of the pricing pool (1: no pool)", value=mpi["ranks"])
        yield g("optiond_mpi_workers_alive", "MPI worker ranks alive", value=mpi["workers_alive"])
        yield CounterMetricFamily("optiond_auth_failures", "Messages dropped for a missing or wrong signature",
                                  value=st["auth_failures"])
        yield CounterMetricFamily("optiond_malformed_messages", "Signed messages answered with a protocol error",
                                  value=st["malformed"])
        conns = st.get("connections") or {}
        gauge = g("optiond_connections", "Peer connections open, by transport", labels=["transport"])
        shed = CounterMetricFamily("optiond_connections_shed", "Peer connections closed for being over (or "
                                   "displaced at) their transport's cap or the descriptor budget", labels=["transport"])
        for t, n in (conns.get("open") or {}).items():
            gauge.add_metric([t], n)
        for t, n in (conns.get("shed") or {}).items():
            shed.add_metric([t], n)
        yield gauge
        yield shed
        if conns.get("fd_limit") is not None:
            yield g("optiond_open_files_limit", "The daemon's soft limit of open file descriptors",
                    value=conns["fd_limit"])
        yield g("optiond_uptime_seconds", "Seconds since the daemon started", value=st["uptime_s"])
        yield g("optiond_ready", "1 when the daemon accepts work (see /readyz)", value=1.0 if st["ready"] else 0.0)


class _LogCollector:
    """The JSON log's counters (:meth:`optiond.daemon.logs.JsonLog.stats`), 0 without a log."""

    def __init__(self, stats: Callable[[], dict] | None):
        self._stats = stats

    def collect(self):
        st = self._stats() if self._stats is not None else {}
        yield CounterMetricFamily("optiond_log_records_dropped", "JSON log lines dropped (queue full or file failing)",
                                  value=st.get("dropped", 0))
        yield CounterMetricFamily("optiond_log_write_errors", "Failed writes or flushes of the JSON log file",
                                  value=st.get("write_errors", 0))


class Metrics:
    """The daemon's metrics (see the module docstring).

    Args:
        state: returns the scrape-time state: ``queue_depth``, ``jobs_running``, ``cache``
            (:meth:`optiond.daemon.cache.ReplyCache.stats`), ``gpu_memory`` (list of maps),
            ``mpi`` (``ranks``, ``workers_alive``), ``auth_failures``, ``malformed``,
            ``uptime_s``, ``ready``, optionally ``connections`` (``open`` and ``shed`` maps by
            transport, ``fd_limit``).
        version, protocol_version: for ``optiond_info``.
        log_stats: returns the JSON log's ``dropped`` and ``write_errors`` counts
            (:meth:`optiond.daemon.logs.JsonLog.stats`); None: no log, both 0.
    """

    def __init__(self, state: Callable[[], dict], version: str = "", protocol_version: str = "",
                 log_stats: Callable[[], dict] | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("optiond_requests", "Requests answered", ["op", "model", "device", "outcome"],
                                registry=r)
        self.latency = Histogram("optiond_request_duration_seconds", "Seconds from receipt to reply", ["op"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.jobs = Counter("optiond_jobs", "Chunked jobs finished", ["outcome"], registry=r)
        self.coalesced = Counter("optiond_coalesced_requests", "One-option requests priced in a shared batch",
                                 registry=r)
        self.gpu_fallbacks = Counter("optiond_gpu_fallbacks", "Requests the GPU failed and the CPU priced", registry=r)
        Info("optiond", "Daemon version", registry=r).info({"version": version, "protocol_version": protocol_version})
        ProcessCollector(registry=r)
        r.register(_StateCollector(state))
        r.register(_LogCollector(log_stats))
        self._children: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    def observe(self, op: str, model: str, device: str, outcome: str, seconds: float) -> None:
        """Count one answered request and its latency (labelled children are cached)."""
        key = (op, model, device, outcome)
        pair = self._children.get(key)
        if pair is None:
            with self._lock:
                pair = self._children.setdefault(key, (self.requests.labels(op, model, device, outcome),
                                                       self.latency.labels(op)))
        pair[0].inc()
        pair[1].observe(seconds)

    def text(self) -> str:
        """The current metrics in the Prometheus text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()


def _bounded_server_class() -> type:
    from waitress.server import TcpWSGIServer

    class BoundedServer(TcpWSGIServer):
        """waitress's TCP server that, once ``cap`` connections are open, closes the longest
        idle of those not being answered (an eighth of them at once) instead of no longer
        accepting: a flood of half-sent requests cannot lock a probe out. waitress's own
        ``connection_limit`` (set a little above ``cap``) stays as the hard stop; it is not
        reached, as the loop accepts one connection per turn and the shed ones close on the
        next turn."""

        cap = HTTP_MAX_CONNECTIONS
        shed = 0

        def readable(self) -> bool:
            if self.accepting and len(self.active_channels) >= self.cap:
                idle = sorted((c for c in self.active_channels.values() if not c.requests and not c.will_close),
                              key=lambda c: c.last_activity)[:max(1, self.cap // 8)]
                for c in idle:
                    c.will_close = True
                self.shed += len(idle)
            return super().readable()

    return BoundedServer


class HttpEndpoint:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``ip:port``, served by waitress from a
    thread of its own and :data:`HTTP_THREADS` workers (see the module docstring).

    Args:
        metrics: the registry to expose.
        health, ready: return ``(ok, detail map)``.
        ip: a loopback address (anything else is refused).
        port: 0 for a free port.
        max_connections: open connections at most (at least 4); over it the longest idle
            are closed.

    Raises:
        ValueError: a non-loopback address.
        OSError: the port is taken.
    """

    def __init__(self, metrics: Metrics, health: Callable[[], tuple[bool, dict]],
                 ready: Callable[[], tuple[bool, dict]], ip: str = "127.0.0.1", port: int = 0,
                 max_connections: int = HTTP_MAX_CONNECTIONS):
        if not ipaddress.ip_address(ip).is_loopback:
            raise ValueError(f"the metrics endpoint binds loopback addresses only, not {ip}")
        prom = make_wsgi_app(metrics.registry)

        def app(environ, start_response):
            path = environ.get("PATH_INFO") or "/"
            if path in ("/healthz", "/readyz"):
                ok, detail = (health if path == "/healthz" else ready)()
                body = json.dumps({"ok": ok, **detail}).encode()
                start_response("200 OK" if ok else "503 Service Unavailable",
                               [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                ("Cache-Control", "no-store")])
                return [body]
            if path in ("/metrics", "/"):
                return prom(environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: use /metrics, /healthz or /readyz\n"]

        cap = max(4, int(max_connections))
        # waitress logs each connection-limit crossing; the shedding above keeps below it
        logging.getLogger("waitress").setLevel(logging.ERROR)
        self.httpd = _bounded_server_class()(
            app, host=ip, port=port, threads=HTTP_THREADS, connection_limit=cap + 16, channel_timeout=HTTP_IDLE_S,
            cleanup_interval=1, max_request_header_size=HTTP_MAX_HEADER_BYTES, max_request_body_size=65536,
            asyncore_use_poll=True, backlog=128, ident="optiond", expose_tracebacks=False)
        self.httpd.cap = cap
        self.port = int(self.httpd.effective_port)
        self.url = f"http://{'[' + ip + ']' if ':' in ip else ip}:{self.port}"
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="optiond-metrics", daemon=True)
        self.thread.start()

    @property
    def connections(self) -> int:
        """HTTP connections open now."""
        return len(self.httpd.active_channels)

    @property
    def shed(self) -> int:
        """HTTP connections closed to make room (since start)."""
        return self.httpd.shed

    def _run(self) -> None:
        from waitress import wasyncore

        while not self._stopping.is_set():
            try:
                wasyncore.loop(timeout=0.2, use_poll=True, map=self.httpd._map, count=1)
            except Exception:  # noqa: BLE001 (a peer's bytes must not end the endpoint)
                logging.getLogger("optiond.metrics").warning("metrics server error", exc_info=True)

    def close(self) -> None:
        """Stop serving: the loop thread, the workers, every connection and the port."""
        from waitress import wasyncore

        self._stopping.set()
        self.thread.join(timeout=5)
        self.httpd.task_dispatcher.shutdown(timeout=2)
        wasyncore.close_all(self.httpd._map)


__all__ = ["Metrics", "HttpEndpoint", "gpu_memory_here", "LATENCY_BUCKETS"]
