"""What ``--plot`` adds to ``optiond chain --surface``: the command run with and without
``--plot DIR`` back to back (alternating, so a load on the machine falls on both alike), each
``--rounds`` times as a fresh process (``python -m optiond.cli``, the local pricer), its wall
time and its CPU time (user + system of the process and its children, the pictures' child
included). Prints JSON: the best and the median of each, and the ratios of the plotted run to
the plain one.

    python bench/plot.py [--chain examples/data/spy_chain_2026-02-13.csv] [--quote-time 10:50]
                         [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(args: list[str]) -> tuple[float, float]:
    """``(wall s, CPU s)`` of one ``python -m optiond.cli chain ARGS`` (its output dropped)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "optiond.cli", "chain", *args], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chain", default=str(ROOT / "examples" / "data" / "spy_chain_2026-02-13.csv"))
    ap.add_argument("--quote-time", default="10:50")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        common = [a.chain, "--quote-time", a.quote_time, "--no-daemon", "--surface", os.path.join(d, "s.json")]
        runs: dict[str, list[tuple[float, float]]] = {"plain": [], "plot": []}
        run_once(common)  # the compiled kernels loaded from the cache once before timing
        for _ in range(a.rounds):
            runs["plain"].append(run_once(common))
            runs["plot"].append(run_once([*common, "--plot", os.path.join(d, "plots")]))
    res: dict = {"chain": Path(a.chain).name, "rounds": a.rounds}
    for name, rs in runs.items():
        walls, cpus = [r[0] for r in rs], [r[1] for r in rs]
        res[name] = {"wall_best_s": round(min(walls), 3), "wall_median_s": round(statistics.median(walls), 3),
                     "cpu_best_s": round(min(cpus), 3), "cpu_median_s": round(statistics.median(cpus), 3)}
    for key in ("wall_best_s", "wall_median_s", "cpu_best_s", "cpu_median_s"):
        res[f"ratio_{key[:-2]}"] = round(res["plot"][key] / res["plain"][key], 3)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
