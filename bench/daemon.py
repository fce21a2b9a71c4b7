"""Daemon latency and throughput on loopback; prints one JSON object.

Measures, through a persistent-socket :class:`optiond.daemon.client.Client`:

* round trip p50/p99 (µs) of ``ping`` (protocol + transport only) and of a one-option
  American put priced by the CRR tree (``--steps``, with and without Greeks), next to the same
  call in-process and a bare ZeroMQ echo (the floor of this machine);
* throughput (requests/s) of one-option price requests from 1, 2, 4, 8 threads;
* 10,000 Excel-style single-cell calls (``client.price_table`` with scalar columns, a
  different strike each), total seconds, against the same loop in-process.

Targets (issue "vertical slice"): p50 <= 0.15 ms for the one-option round trip; 10,000 calls
<= 1 s.

Usage::

    python bench/daemon.py                      # starts its own daemon on a temporary file
    python bench/daemon.py --connection-file F  # uses a running daemon
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import zmq

from optiond import __version__, engine
from optiond.daemon.client import Client, DaemonUnavailable
from optiond.models import Method

CELL = {"kind": "put", "style": "american", "spot": 100.0, "strike": 100.0, "expiry": 1.0, "rate": 0.05,
        "dividend_yield": 0.0, "volatility": 0.2}


def percentiles_us(samples: list[float]) -> dict:
    a = np.asarray(samples) * 1e6
    return {"p50_us": round(float(np.percentile(a, 50)), 1), "p99_us": round(float(np.percentile(a, 99)), 1),
            "n": len(a)}


def time_calls(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def zmq_echo_floor(n: int) -> dict:
    """Round trip of a bare 6-frame DEALER/ROUTER echo between two processes (no protocol)."""
    code = ("import zmq,sys\nc=zmq.Context();s=c.socket(zmq.ROUTER);p=s.bind_to_random_port('tcp://127.0.0.1')\n"
            "print(p,flush=True)\nwhile True:\n f=s.recv_multipart()\n if f[-1]==b'quit':break\n s.send_multipart(f)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        ctx = zmq.Context()
        d = ctx.socket(zmq.DEALER)
        d.connect(f"tcp://127.0.0.1:{port}")
        frames = [b"<IDS|MSG>", b"0" * 64, b"h" * 120, b"\x80", b"\x80", b"c" * 150]

        def once():
            d.send_multipart(frames)
            d.recv_multipart()

        time_calls(once, 200)
        res = percentiles_us(time_calls(once, n))
        d.send_multipart([b"quit"])
        d.close(linger=100)
        ctx.term()
        return res
    finally:
        proc.wait(timeout=10)


def throughput(client: Client, method: Method, threads: int, per_thread: int) -> float:
    barrier = threading.Barrier(threads + 1)
    errors = []

    def work(t):
        barrier.wait()
        try:
            for i in range(per_thread):
                client.price_table(CELL | {"strike": 90.0 + (t * per_thread + i) * 1e-3}, method, fallback=False)
        except Exception as e:  # reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise RuntimeError(errors[0])
    return threads * per_thread / dt


def start_daemon(tmp: Path) -> tuple[subprocess.Popen, Path]:
    conn = tmp / "daemon.json"
    proc = subprocess.Popen([sys.executable, "-m", "optiond.daemon.commands", "serve", "--connection-file", str(conn)],
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "wb"))
    c = Client(conn, timeout=1.0, retries=0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if c.ping()["pid"] == proc.pid:
                c.close()
                return proc, conn
        except DaemonUnavailable:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("daemon did not start; see " + str(tmp / "daemon.log"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connection-file", help="use this running daemon instead of starting one")
    ap.add_argument("--steps", type=int, default=100, help="CRR steps of the one-option request (default 100)")
    ap.add_argument("--n", type=int, default=3000, help="round trips per latency figure (default 3000)")
    ap.add_argument("--cells", type=int, default=10_000, help="single-cell calls (default 10000)")
    ap.add_argument("--threads", default="1,2,4,8", help="thread counts for throughput (default 1,2,4,8)")
    ap.add_argument("--per-thread", type=int, default=1000, help="requests per thread (default 1000)")
    args = ap.parse_args()

    tmp = None
    proc = None
    if args.connection_file:
        conn = Path(args.connection_file)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="optiond-bench-")
        proc, conn = start_daemon(Path(tmp.name))
    client = Client(conn, timeout=30.0)
    try:
        m = Method(steps=args.steps)
        m_nog = Method(steps=args.steps, greeks=False)
        for _ in range(300):  # warm sockets, caches and the daemon's kernels
            client.price_table(CELL, m, fallback=False)
            engine.price_table(CELL, m)
        out: dict = {"version": __version__, "python": platform.python_version(), "cpus": os.cpu_count(),
                     "machine": platform.machine(), "steps": args.steps}
        out["zmq_echo_floor"] = zmq_echo_floor(args.n)
        out["ping_round_trip"] = percentiles_us(time_calls(client.ping, args.n))
        out["price_1_option_round_trip"] = percentiles_us(
            time_calls(lambda: client.price_table(CELL, m, fallback=False), args.n))
        out["price_1_option_no_greeks_round_trip"] = percentiles_us(
            time_calls(lambda: client.price_table(CELL, m_nog, fallback=False), args.n))
        out["price_1_option_in_process"] = percentiles_us(time_calls(lambda: engine.price_table(CELL, m), args.n))
        out["price_1_option_no_greeks_in_process"] = percentiles_us(time_calls(lambda: engine.price_table(CELL, m_nog),
                                                                              args.n))
        out["throughput_req_per_s"] = {str(t): round(throughput(client, m_nog, t, args.per_thread))
                                       for t in (int(x) for x in args.threads.split(","))}
        strikes = 80.0 + np.arange(args.cells) * (40.0 / args.cells)
        t0 = time.perf_counter()
        vias = set()
        for k in strikes.tolist():
            vias.add(client.price_table(CELL | {"strike": k}, m).via)
        daemon_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for k in strikes.tolist():
            engine.price_table(CELL | {"strike": k}, m)
        inproc_s = time.perf_counter() - t0
        out["cells"] = {"n": args.cells, "daemon_total_s": round(daemon_s, 3), "in_process_total_s": round(inproc_s, 3),
                        "via": sorted(vias)}
        out["targets"] = {"p50_le_150us": out["price_1_option_round_trip"]["p50_us"] <= 150.0,
                          "cells_le_1s": daemon_s <= 1.0}
        st = client.status()
        out["daemon_status"] = {k: st[k] for k in ("requests_served", "devices", "errors")}
        print(json.dumps(out, indent=2))
    finally:
        if proc is not None:
            try:
                client.shutdown()
            except DaemonUnavailable:
                proc.terminate()
            proc.wait(timeout=15)
        client.close()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
