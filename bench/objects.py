"""Large object puts through a daemon; prints one JSON object.

Puts ``--puts`` surface documents of about ``--mib`` MiB each (JSON size; a surface of that
many slices) into a fresh daemon (``optiond serve``, objects kept in a temporary directory),
one after the other, while a second client pings the daemon every ``--ping-every`` seconds.
Reports per put its wall time and the longest ping wait during it (what a put costs the
request loop), the daemon's RSS before and after, then restarts the daemon on the same
directory: the seconds to its first answered ping and until every object is read back, and
the longest ping wait meanwhile.

Usage::

    python bench/objects.py [--mib 30] [--puts 3] [--out bench/results/objects.json]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

SLICE_BYTES = 246  # about the JSON size of one slice below


def document(mib: float, tag: int) -> dict:
    """A valid surface document of about ``mib`` MiB of JSON: one slice per 246 bytes."""
    n = int(mib * 2**20 / SLICE_BYTES)
    slices = [{"expiry": f"E{i}", "T": 0.01 + i * 1e-5, "forward": 100.0 + i * 1e-4 + tag * 1e-3, "rate": 0.04,
               "spot": 100.0, "svi": {"a": 0.01, "b": 0.1, "rho": -0.3, "m": 0.0, "sigma": 0.2},
               "stats": {"rms_vol_pts": 0.5, "inside_share": 0.9, "confidence": 0.8, "quotes": 40}}
              for i in range(n)]
    return {"schema": "optiond.surface", "version": "1.1", "underlying": "BENCH", "quote_time": "2026-02-13T10:50:00",
            "method": "svi", "stats": {}, "slices": slices}


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` (MB, Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


PING_CODE = """
import sys, time
from optiond.daemon.client import Client
c = Client(sys.argv[1], timeout=120.0, retries=0)
every = float(sys.argv[2])
while True:
    t = time.time()
    c.ping()
    print(t, time.time() - t, flush=True)
    time.sleep(every)
"""


class Pinger:
    """Pings the daemon every ``every`` seconds from a process of its own (so this process's
    own work, the client's encoding of a put, never delays a ping); :meth:`waits` gives the
    round trips (s) of the pings sent in a span of wall-clock time."""

    def __init__(self, conn: Path, every: float):
        self.proc = subprocess.Popen([sys.executable, "-c", PING_CODE, str(conn), str(every)], stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        self.rows: list = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            t, dt = map(float, line.split())
            self.rows.append((t, dt))

    def waits(self, t0: float, t1: float) -> list:
        return [dt for t, dt in list(self.rows) if t0 <= t < t1]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def main() -> None:
    from daemon import Daemon

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=30.0)
    ap.add_argument("--puts", type=int, default=3)
    ap.add_argument("--ping-every", type=float, default=0.02)
    ap.add_argument("--out")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="optiond-bench-objects-"))
    objdir = tmp / "objects"
    docs = [document(args.mib, i) for i in range(args.puts)]
    out: dict = {"mib": args.mib, "json_mib": len(json.dumps(docs[0])) / 2**20, "slices": len(docs[0]["slices"]),
                 "host": platform.node(), "cpus": os.cpu_count(), "puts": []}
    d = Daemon(tmp, "--objects-dir", str(objdir), "--no-warmup")
    try:
        out["rss_start_mb"] = rss_mb(d.proc.pid)
        pinger = Pinger(d.conn, args.ping_every)
        t = time.time()
        while len(pinger.rows) < 20:
            time.sleep(0.05)
        out["ping_idle_max_ms"] = 1e3 * max(pinger.waits(t, time.time()))
        c = d.client(timeout=600.0, retries=0)
        for i, doc in enumerate(docs):
            t = time.time()
            reply = c.put_surface("BIG%d" % i, doc)
            t1 = time.time()
            time.sleep(2 * args.ping_every + 0.05)  # the last ping of the span has answered
            waits = pinger.waits(t, t1)
            out["puts"].append({"handle": reply["handle"], "wall_s": t1 - t, "persisted": reply.get("persisted"),
                                "pings": len(waits), "ping_max_ms": 1e3 * max(waits, default=float("nan")),
                                "rss_mb": rss_mb(d.proc.pid)})
        pinger.close()
        c.close()
        out["rss_end_mb"] = rss_mb(d.proc.pid)
    finally:
        d.stop()
    t = time.time()
    d = Daemon(tmp, "--objects-dir", str(objdir), "--no-warmup", name="restarted")
    try:
        out["restart_first_ping_s"] = time.time() - t
        pinger = Pinger(d.conn, args.ping_every)
        t1 = time.time()
        c = d.client(timeout=60.0, retries=0)
        while len(c.objects()) < args.puts and time.time() - t < 600:
            time.sleep(0.05)
        out["restart_all_read_s"] = time.time() - t
        time.sleep(2 * args.ping_every + 0.05)
        out["restart_ping_max_ms"] = 1e3 * max(pinger.waits(t1, time.time()), default=float("nan"))
        pinger.close()
        out["restart_rss_mb"] = rss_mb(d.proc.pid)
        c.close()
    finally:
        d.stop()
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
