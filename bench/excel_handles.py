"""Excel cells that read a market object by handle; prints one JSON object.

10,000 single-cell ``=BS_PUT(S, K_i, T, r, sigma)`` calls through the worksheet function, as
Excel's recalculation makes them (one call a cell, a new strike each so no answer comes from
the add-in's cache), with ``r`` one curve's handle (``=OPTIOND_CURVE(...)``), against the same
cells with ``r`` a number; also ``=BOPM_PUT(..., N=100)`` cells. Two set-ups: no daemon (the
curve in the add-in's own store, ``USD#0001@local``) and a live daemon (the curve kept there:
one look-up round trip per :data:`optiond.addin.objects.REFRESH_S`, the pricing of these small
requests in the Excel process as by default). Then the recalculation after a version bump
(every cell sees the new handle: priced again). Target (issue #23): 10,000 cells on one handle
recalculate in <= 0.5 s.

Usage::

    python bench/excel_handles.py [--cells 10000] [--repeat 3] [--out bench/results/excel_handles.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

DAYS = [30, 91, 182, 365, 730]
RATES = [0.040, 0.042, 0.045, 0.043, 0.039]


def sheet(F, fn, r, strikes, steps=None) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one recalculation of the cells: ``fn`` on each strike with
    ``r``; cpu is this process's CPU time (on a shared machine, what waiting for a core does
    not inflate)."""
    t0, c0 = time.perf_counter(), time.process_time()
    if steps is None:
        out = [fn(100.0, k, 0.75, r, 0.25) for k in strikes]
    else:
        out = [fn(100.0, k, 0.75, r, 0.25, steps) for k in strikes]
    dt = (time.perf_counter() - t0, time.process_time() - c0)
    bad = [x for x in out if not isinstance(x, float)]
    if bad:
        raise SystemExit(f"a cell failed: {bad[0]}")
    return dt


def run(F, objects, n: int, repeat: int) -> dict:
    res = {}
    for label, fn, steps in (("bs_put", F.BS_PUT, None), ("bopm_put_n100", F.BOPM_PUT, 100)):
        handle = F.OPTIOND_CURVE("BENCH-USD", [DAYS], [RATES])
        best_h, best_n, best_bump = [], [], []
        for i in range(repeat):
            strikes = [50.0 + 100.0 * (j + 0.5) / n + 1e-6 * i for j in range(n)]  # new strikes: no cache answers
            F.clear_cache()
            best_n.append(sheet(F, fn, 0.043, strikes, steps))
            F.clear_cache()
            best_h.append(sheet(F, fn, handle, strikes, steps))
            # a bump: the curve made again with other rates; every cell recalculates on the new handle
            handle = F.OPTIOND_CURVE("BENCH-USD", [DAYS], [[r + 1e-4 * (i + 1) for r in RATES]])
            best_bump.append(sheet(F, fn, handle, strikes, steps))
        res[label] = {"cells": n, "handle_s": min(best_h)[0], "number_s": min(best_n)[0],
                      "after_bump_s": min(best_bump)[0], "handle_cpu_s": min(c for _, c in best_h),
                      "number_cpu_s": min(c for _, c in best_n), "after_bump_cpu_s": min(c for _, c in best_bump),
                      "handle_us_per_cell": 1e6 * min(best_h)[0] / n, "handle": handle}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="optiond-bench-"))
    os.environ["OPTIOND_CONNECTION_FILE"] = str(tmp / "none.json")
    os.environ["OPTIOND_DATA_DIR"] = str(tmp / "data")
    from optiond.addin import functions as F
    from optiond.addin import objects

    out = {"bench": "excel_handles", "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
           "refresh_s": objects.REFRESH_S, "target_s": 0.5}
    out["no_daemon"] = run(F, objects, args.cells, args.repeat)
    from daemon import Daemon  # bench/daemon.py's subprocess daemon

    d = Daemon(tmp, "--no-warmup", env={"OPTIOND_DATA_DIR": str(tmp / "data"),
                                        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])})
    try:
        os.environ["OPTIOND_CONNECTION_FILE"] = str(d.conn)
        objects.forget()
        out["daemon"] = run(F, objects, args.cells, args.repeat)
    finally:
        d.stop()
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
