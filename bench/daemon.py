"""Daemon latency, throughput, cache and MPI scaling on loopback; prints one JSON object.

Sections (``--only`` picks some; all by default):

* ``latency``: round trip p50/p99 (µs) of ``ping`` (protocol + transport), a one-option
  American put priced by the CRR tree (``--steps``; with and without Greeks; a new strike each
  time, so the reply cache never answers), the same call in-process, and a bare ZeroMQ echo of
  the same frames between two processes (the floor of this machine);
* ``cache``: round trip of a repeated request (answered from the daemon's reply cache) against
  the same request with ``force`` (priced again);
* ``cells``: 10,000 single-cell ``=BOPM_PUT`` calls through the Excel function (a new strike
  each; no cache, no fall-back) with its defaults (small cells priced in the Excel process) and
  with every cell sent to the daemon; the same through the bare client and in-process, total s;
* ``load``: ``--processes`` client processes (default 8), ``--threads`` each, sending
  one-option requests with strikes of their own for ``--load-seconds`` (default 60): total
  requests/s, p50/p99, and whether every reply matched its request (recomputed in-process);
* ``scaling``: MPI strong scaling: ``--scaling-options`` (20,000) American puts at N =
  ``--scaling-steps`` (1000), price only, on daemons of 1, 2, ... ranks (``--ranks``;
  ``optiond serve --workers R``), ``--device cpu`` (``--threads-per-rank`` numba threads each,
  default 1, so that R ranks use R cores) or ``--device gpu`` (rank r on GPU r % n_gpus):
  best of ``--repeat`` runs, speed-up and parallel efficiency against 1 rank, and the best
  run's job timeline (request read, each chunk's dispatch / collection / pricing time, reply).

Targets (issues "vertical slice" and "daemon for production"): one-option round trip p50 <=
0.15 ms; 10,000 cells <= 1 s; >= 5,000 requests/s from 8 processes on a 2-core machine; >= 90 %
parallel efficiency.

Usage::

    python bench/daemon.py                                   # everything, here
    python bench/daemon.py --only scaling --ranks 1,2,4 --device gpu   # on a GPU machine
    python bench/daemon.py --only load --load-seconds 60 --out bench/results/daemon_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from unittest import mock
from pathlib import Path

import numpy as np
import zmq

from optiond import __version__, engine
from optiond.daemon.client import Client, DaemonUnavailable
from optiond.models import Method

CELL = {"kind": "put", "style": "american", "spot": 100.0, "strike": 100.0, "expiry": 1.0, "rate": 0.05,
        "dividend_yield": 0.0, "volatility": 0.2}
SERVE = [sys.executable, "-m", "optiond.daemon.commands", "serve"]


def percentiles_us(samples) -> dict:
    a = np.asarray(samples) * 1e6
    return {"p50_us": round(float(np.percentile(a, 50)), 1), "p99_us": round(float(np.percentile(a, 99)), 1),
            "n": int(len(a))}


def time_calls(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def zmq_echo_floor(n: int) -> dict:
    """Round trip of a bare 8-frame DEALER/ROUTER echo between two processes (no protocol)."""
    code = ("import zmq,sys\nc=zmq.Context();s=c.socket(zmq.ROUTER);p=s.bind_to_random_port('tcp://127.0.0.1')\n"
            "print(p,flush=True)\nwhile True:\n f=s.recv_multipart()\n if f[-1]==b'quit':break\n s.send_multipart(f)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        ctx = zmq.Context()
        d = ctx.socket(zmq.DEALER)
        d.connect(f"tcp://127.0.0.1:{port}")
        frames = [b"<IDS|MSG>", b"0" * 64, b"h" * 150, b"p" * 150, b"\x80", b"c" * 250, b"v" * 48]

        def once(_):
            d.send_multipart(frames)
            d.recv_multipart()

        time_calls(once, 300)
        res = percentiles_us(time_calls(once, n))
        d.send_multipart([b"quit"])
        d.close(linger=100)
        ctx.term()
        return res
    finally:
        proc.wait(timeout=10)


# ---------------------------------------------------------------------------- daemons


class Daemon:
    """A daemon subprocess on a temporary connection file (``extra``: serve arguments)."""

    def __init__(self, tmp: Path, *extra: str, env: dict | None = None, name: str = "daemon"):
        self.conn = tmp / f"{name}.json"
        self.log = tmp / f"{name}.log"
        full_env = {**os.environ, "OPTIOND_LOG_DIR": str(tmp / f"{name}-logs"), "OPTIOND_METRICS_PORT": "0",
                    **(env or {})}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([*SERVE, "--connection-file", str(self.conn), *extra], stdout=log,
                                         stderr=subprocess.STDOUT, env=full_env)
        c = Client(self.conn, timeout=1.0, retries=0)
        deadline = time.monotonic() + 180
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise SystemExit(f"daemon exited: {self.log.read_text()[-2000:]}")
                try:
                    if self.conn.exists() and c.ping():
                        return
                except DaemonUnavailable:
                    pass
                time.sleep(0.05)
        finally:
            c.close()
        self.stop()
        raise SystemExit(f"daemon did not start; see {self.log}")

    def client(self, **kw) -> Client:
        return Client(self.conn, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            c = self.client(timeout=5.0, retries=0)
            try:
                c.shutdown()
            except DaemonUnavailable:
                self.proc.terminate()
            finally:
                c.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ---------------------------------------------------------------------------- sections


def bench_latency(client: Client, args) -> dict:
    m = Method(steps=args.steps)
    m_nog = Method(steps=args.steps, greeks=False)
    for i in range(300):  # warm sockets, caches and the daemon's kernels
        client.price_table(CELL | {"strike": 50.0 + i * 1e-3}, m, fallback=False)
        engine.price_table(CELL, m)
    out = {"zmq_echo_floor": zmq_echo_floor(args.n),
           "ping_round_trip": percentiles_us(time_calls(lambda i: client.ping(), args.n))}
    base = [60.0]

    def fresh(method):
        base[0] += 1.0

        def call(i):
            client.price_table(CELL | {"strike": base[0] + i * 1e-6}, method, fallback=False)
        return call

    out["price_1_option_round_trip"] = percentiles_us(time_calls(fresh(m), args.n))
    out["price_1_option_no_greeks_round_trip"] = percentiles_us(time_calls(fresh(m_nog), args.n))
    out["price_1_option_in_process"] = percentiles_us(time_calls(lambda i: engine.price_table(CELL, m), args.n))
    out["price_1_option_no_greeks_in_process"] = percentiles_us(time_calls(lambda i: engine.price_table(CELL, m_nog),
                                                                          args.n))
    return out


def bench_cache(client: Client, args) -> dict:
    m = Method(steps=args.steps)
    client.price_table(CELL, m, fallback=False)
    hit = time_calls(lambda i: client.price_table(CELL, m, fallback=False), args.n)
    forced = time_calls(lambda i: client.price_table(CELL, m, fallback=False, force=True), args.n)
    big = {**CELL, "strike": np.linspace(80, 120, 1000)}
    mb = Method(steps=args.steps)
    t = time.perf_counter()
    client.price_table(big, mb, fallback=False, force=True)
    miss_big = time.perf_counter() - t
    big_hits = time_calls(lambda i: client.price_table(big, mb, fallback=False), 50)
    return {"one_option_hit": percentiles_us(hit), "one_option_forced": percentiles_us(forced),
            "1000_options_priced_ms": round(miss_big * 1e3, 2),
            "1000_options_hit": percentiles_us(big_hits), "hit_ratio": client.status()["cache_hit_ratio"]}


def bench_cells(client: Client, conn: Path, args) -> dict:
    """10,000 single-cell =BOPM_PUT(S, K, T, r, sigma, N) calls through the Excel function itself
    (as xlwings calls it; the add-in's cell cache off, no fall-back): with the add-in's defaults
    (a cell this small is priced in the Excel process: ``OPTIOND_LOCAL_NODES``) and with every
    cell sent to the daemon (``OPTIOND_LOCAL_NODES=0``); then the same cells through the bare
    client and in-process."""
    from optiond.addin import functions as F

    strikes = 80.0 + np.arange(args.cells) * (40.0 / args.cells) + 1e-7
    out: dict = {"n": args.cells, "steps": args.steps}
    for label, local in (("excel_function_total_s", None), ("excel_function_daemon_only_total_s", "0")):
        env = {"OPTIOND_CONNECTION_FILE": str(conn), "OPTIOND_CACHE": "0", "OPTIOND_FALLBACK": "0"}
        with mock.patch.dict(os.environ, env):
            if local is None:
                os.environ.pop("OPTIOND_LOCAL_NODES", None)  # the add-in's default
            else:
                os.environ["OPTIOND_LOCAL_NODES"] = local
            F.BOPM_PUT(100.0, 99.5, 1.0, 0.05, 0.2, args.steps)  # connect
            t0 = time.perf_counter()
            cells = [F.BOPM_PUT(100.0, k, 1.0, 0.05, 0.2, args.steps) for k in strikes.tolist()]
            out[label] = round(time.perf_counter() - t0, 3)
        out[label.replace("total_s", "cells_not_numbers")] = sum(not isinstance(c, float) for c in cells)
    m = Method(steps=args.steps)
    t0 = time.perf_counter()
    vias = {client.price_table(CELL | {"strike": k}, m).via for k in strikes.tolist()}
    out["client_total_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    for k in strikes.tolist():
        engine.price_table(CELL | {"strike": k}, m)
    out["in_process_total_s"] = round(time.perf_counter() - t0, 3)
    out["via"] = sorted(vias)
    return out


LOAD_WORKER = textwrap.dedent("""
    import json, os, sys, threading, time
    import numpy as np
    from optiond.daemon.client import Client
    from optiond.models import Method
    conn, idx, seconds, go, out, steps, threads = sys.argv[1:8]
    idx, seconds, steps, threads = int(idx), float(seconds), int(steps), int(threads)
    c = Client(conn, timeout=30.0, retries=0)
    m = Method(steps=steps, greeks=False)
    cell = {"kind": "put", "style": "american", "spot": 100.0, "strike": 100.0, "expiry": 1.0, "rate": 0.05,
            "dividend_yield": 0.0, "volatility": 0.2}
    c.ping()
    open(out + ".ready", "w").close()
    while not os.path.exists(go):
        time.sleep(0.002)
    end = time.monotonic() + seconds
    parts = [None] * threads
    def run(t):
        ks, ps, lat, err = [], [], [], 0
        i = 0
        while time.monotonic() < end:
            k = 40.0 + 10.0 * idx + 2.0 * t / threads + 1e-7 * i
            t0 = time.perf_counter()
            try:
                ps.append(c.price_table(dict(cell, strike=k), m, fallback=False).price[0])
            except Exception:
                err += 1
                ps.append(float("nan"))
            lat.append(time.perf_counter() - t0)
            ks.append(k)
            i += 1
        parts[t] = (ks, ps, lat, err)
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()
    np.savez(out, strikes=np.concatenate([p[0] for p in parts]), prices=np.concatenate([p[1] for p in parts]),
             lat=np.concatenate([p[2] for p in parts]))
    json.dump({"errors": sum(p[3] for p in parts)}, open(out + ".json", "w"))
""")


def bench_load(conn: Path, tmp: Path, args) -> dict:
    script = tmp / "load_worker.py"
    script.write_text(LOAD_WORKER)
    go = tmp / "go"
    procs = []
    for i in range(args.processes):
        out = tmp / f"load{i}"
        procs.append((subprocess.Popen([sys.executable, str(script), str(conn), str(i), str(args.load_seconds),
                                        str(go), str(out), str(args.load_steps), str(args.threads)]), out))
    while not all(Path(str(out) + ".ready").exists() for _, out in procs):
        if any(p.poll() is not None for p, _ in procs):
            raise SystemExit("a load client failed to start")
        time.sleep(0.05)
    go.touch()
    for p, _ in procs:
        p.wait()
    total, errors, lat, matched = 0, 0, [], True
    # the reference on the CPU, as the daemon priced each one-option request (a GPU would price
    # this whole column, and its FP64 differs from the CPU's in the last bits)
    m = Method(steps=args.load_steps, greeks=False, device="cpu")
    for _, out in procs:
        d = np.load(str(out) + ".npz")
        errors += json.loads(Path(str(out) + ".json").read_text())["errors"]
        want = engine.price_table(CELL | {"strike": d["strikes"]}, m).price
        matched &= bool(np.array_equal(d["prices"], want))
        total += len(d["strikes"])
        lat.append(d["lat"])
    return {"processes": args.processes, "threads_each": args.threads, "seconds": args.load_seconds,
            "steps": args.load_steps, "requests": total, "req_per_s": round(total / args.load_seconds),
            **percentiles_us(np.concatenate(lat)), "errors": errors, "every_reply_matched": matched}


def bench_scaling(tmp: Path, args) -> dict:
    n, N = args.scaling_options, args.scaling_steps
    rng = np.random.default_rng(7)
    cols = {"kind": "put", "style": "american", "spot": 100.0, "strike": rng.uniform(80, 120, n),
            "expiry": rng.uniform(0.25, 2.0, n), "rate": 0.04, "dividend_yield": 0.01,
            "volatility": rng.uniform(0.15, 0.45, n)}
    m = Method(steps=N, greeks=False, device=args.device)
    env = {"NUMBA_NUM_THREADS": str(args.threads_per_rank)} if args.device == "cpu" else {}
    rows, ref = [], None
    for r in (int(x) for x in args.ranks.split(",")):
        extra = ["--no-cache", "--max-request-s", "3600"] + (["--workers", str(r)] if r > 1 else [])
        d = Daemon(tmp, *extra, env=env, name=f"scaling{r}")
        c = d.client(timeout=3600.0)
        try:
            st = c.status()
            times, res, best = [], None, None
            for _ in range(args.repeat):
                t = time.perf_counter()
                res = c.price_table(cols, m, fallback=False)
                times.append(time.perf_counter() - t)
                if times[-1] == min(times):
                    best = res.diagnostics.get("timeline")
            if ref is None:
                ref = res.price
            row = {"ranks": r, "seconds": round(min(times), 3), "all_s": [round(x, 3) for x in times],
                   "device": res.device, "chunks": res.diagnostics.get("chunks"),
                   "workers_used": res.diagnostics.get("workers"), "threads_per_rank": st.get("cpu_threads"),
                   "same_as_1_rank": bool(np.array_equal(res.price, ref)), "timeline_of_best": best,
                   "nodes_per_s": round(n * (N + 1) * (N + 2) / 2 / min(times), -6)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            c.close()
            d.stop()
    t1 = rows[0]["seconds"] * rows[0]["ranks"]
    for row in rows:
        row["speedup"] = round(t1 / row["seconds"], 3)
        row["efficiency"] = round(t1 / (row["seconds"] * row["ranks"]), 3)
    return {"options": n, "steps": N, "device": args.device, "greeks": False, "runs": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--only", default="latency,cache,cells,load,scaling", help="sections, comma-separated")
    ap.add_argument("--connection-file", help="use this running daemon (latency, cache, cells, load)")
    ap.add_argument("--steps", type=int, default=100, help="CRR steps of the one-option requests (default 100)")
    ap.add_argument("--n", type=int, default=3000, help="round trips per latency figure (default 3000)")
    ap.add_argument("--cells", type=int, default=10_000, help="single-cell calls (default 10000)")
    ap.add_argument("--processes", type=int, default=8, help="load: client processes (default 8)")
    ap.add_argument("--threads", type=int, default=1, help="load: threads per client process (default 1)")
    ap.add_argument("--load-seconds", type=float, default=60.0, help="load: seconds (default 60)")
    ap.add_argument("--load-steps", type=int, default=100, help="load: CRR steps, no Greeks (default 100)")
    ap.add_argument("--ranks", default="1,2", help="scaling: MPI ranks to try (default 1,2)")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="scaling: device (default cpu)")
    ap.add_argument("--threads-per-rank", type=int, default=1, help="scaling, cpu: numba threads a rank (default 1)")
    ap.add_argument("--scaling-options", type=int, default=20_000, help="scaling: options (default 20000)")
    ap.add_argument("--scaling-steps", type=int, default=1000, help="scaling: CRR steps (default 1000)")
    ap.add_argument("--repeat", type=int, default=3, help="scaling: runs per rank count, best kept (default 3)")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    only = set(args.only.split(","))

    tmp_dir = tempfile.TemporaryDirectory(prefix="optiond-bench-")
    tmp = Path(tmp_dir.name)
    out: dict = {"bench": "daemon", "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "version": __version__,
                 "python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
                 "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    daemon = None
    try:
        if only & {"latency", "cache", "cells", "load"}:
            if args.connection_file:
                conn = Path(args.connection_file)
            else:
                daemon = Daemon(tmp)
                conn = daemon.conn
            client = Client(conn, timeout=30.0)
            try:
                if "latency" in only:
                    out["latency"] = bench_latency(client, args)
                if "cache" in only:
                    out["cache"] = bench_cache(client, args)
                if "cells" in only:
                    out["cells"] = bench_cells(client, conn, args)
                if "load" in only:
                    out["load"] = bench_load(conn, tmp, args)
                st = client.status()
                out["daemon_status"] = {k: st.get(k) for k in ("requests_served", "requests_by_outcome", "devices",
                                                               "cache_hit_ratio", "coalesced_requests", "ns_per_node")}
            finally:
                client.close()
            if daemon is not None:
                daemon.stop()
                daemon = None
        if "scaling" in only:
            out["scaling"] = bench_scaling(tmp, args)
        lat = out.get("latency", {})
        out["targets"] = {
            "p50_le_150us": lat["price_1_option_round_trip"]["p50_us"] <= 150.0 if lat else None,
            "cells_le_1s": out["cells"]["excel_function_total_s"] <= 1.0 if "cells" in out else None,
            "load_ge_5000_per_s": out["load"]["req_per_s"] >= 5000 if "load" in out else None,
            "efficiency_ge_90pct": (min(r["efficiency"] for r in out["scaling"]["runs"]) >= 0.9
                                    if "scaling" in out else None)}
        text = json.dumps(out, indent=2)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
    finally:
        if daemon is not None:
            daemon.stop()
        tmp_dir.cleanup()


if __name__ == "__main__":
    main()
