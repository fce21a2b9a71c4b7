"""Start-up and the first run after an install, each in fresh processes. Prints JSON.

* ``cli``: wall time of ``optiond --help``, ``--version``, ``status`` and ``stop`` (no daemon),
  the best of ``--repeats`` runs, and the numerical libraries each leaves in ``sys.modules``.
* ``cold``: in an empty numba cache (a private ``NUMBA_CACHE_DIR``), the first ``optiond chain``
  on the bundled SPY chain (in-process, ``--no-daemon``) and then a second one (warm); in another
  empty cache, the first ``AMERICAN_PUT`` worksheet call in a fresh process (no daemon: priced in
  process), then a second fresh process.
* ``warmup``: in a third empty cache, ``optiond warmup`` (its wall time and what it compiled),
  then the first ``optiond chain`` and the first ``AMERICAN_PUT`` of fresh processes.

    python bench/startup.py [--chain examples/data/spy_chain_2026-02-13.csv] [--quote-time 10:50]
                            [--repeats 5] [--only cli|cold|warmup ...]

Run from a checkout (``PYTHONPATH=src``) or an installed environment; the cold sections compile
every kernel they use (minutes on a small CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMERICAL = ("numpy", "numba", "pandas", "scipy", "matplotlib")

_MODULES = """
import atexit, json, sys
atexit.register(lambda: sys.__stderr__.write("\\nMODULES " + json.dumps(sorted(m for m in %r if m in sys.modules)) + "\\n"))
from optiond.cli import main
sys.exit(main(sys.argv[1:]))
""" % (NUMERICAL,)

_AMERICAN_PUT = """
import json, time
t0 = time.perf_counter()
from optiond.addin.functions import AMERICAN_PUT
t1 = time.perf_counter()
v = AMERICAN_PUT(100.0, 105.0, 0.5, 0.04, 0.25)
t2 = time.perf_counter()
AMERICAN_PUT(100.0, 104.0, 0.5, 0.04, 0.25)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_call_s": t2 - t1, "second_call_s": t3 - t2, "value": v}))
"""


def _env(cache: Path | None, tmp: Path) -> dict:
    env = {**os.environ, "OPTIOND_CONNECTION_FILE": str(tmp / "no-daemon.json")}
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    return env


def _timed(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t, proc


def cli(repeats: int, tmp: Path) -> dict:
    out = {}
    conn = str(tmp / "no-daemon.json")
    for name, argv in (("--help", ["--help"]), ("--version", ["--version"]),
                       ("status", ["status", "--connection-file", conn]),
                       ("stop", ["stop", "--connection-file", conn, "--timeout", "0.1"])):
        best, modules = float("inf"), None
        for _ in range(repeats):
            wall, proc = _timed([sys.executable, "-c", _MODULES, *argv], _env(None, tmp))
            best = min(best, wall)
            line = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES ")]
            modules = json.loads(line[-1][8:]) if line else None
        out[name] = {"wall_s": round(best, 3), "numerical_modules": modules}
    return out


def _chain(args, env: dict) -> dict:
    cmd = [sys.executable, "-m", "optiond.cli", "chain", args.chain, "--no-daemon", "--json", "-o", os.devnull,
           "--forwards", os.devnull]
    if args.quote_time:
        cmd += ["--quote-time", args.quote_time]
    wall, proc = _timed(cmd, env)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall_s": round(wall, 3), "job_s": round(summary["elapsed_s"], 3),
            "said_compiling": "compiling the pricing kernels once" in proc.stderr}


def _american_put(env: dict) -> dict:
    wall, proc = _timed([sys.executable, "-c", _AMERICAN_PUT], env)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    out = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in json.loads(proc.stdout.splitlines()[-1]).items()}
    return {"wall_s": round(wall, 3), **out, "said_compiling": "compiling the pricing kernels once" in proc.stderr}


def cold(args, tmp: Path) -> dict:
    env = _env(tmp / "cache-chain", tmp)
    first = _chain(args, env)
    second = _chain(args, env)
    env = _env(tmp / "cache-cell", tmp)
    return {"chain_first": first, "chain_second": second,
            "american_put_first_process": _american_put(env), "american_put_second_process": _american_put(env)}


def warmup(args, tmp: Path) -> dict:
    env = _env(tmp / "cache-warm", tmp)
    wall, proc = _timed([sys.executable, "-m", "optiond.cli", "warmup", "--json"], env)
    if proc.returncode not in (0, 1):
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    summary = json.loads(proc.stdout)
    return {"warmup": {"wall_s": round(wall, 3), "compiled": summary["compiled"], "cached": summary["cached"],
                       "by_target_s": {t["name"]: round(t["seconds"], 2) for t in summary["targets"]},
                       "errors": {t["name"]: t["error"] for t in summary["targets"] if t["error"]}},
            "chain_first": _chain(args, env), "american_put_first_process": _american_put(env)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chain", default=str(ROOT / "examples" / "data" / "spy_chain_2026-02-13.csv"))
    p.add_argument("--quote-time", default="10:50")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--only", nargs="+", choices=("cli", "cold", "warmup"), default=["cli", "cold", "warmup"])
    args = p.parse_args()
    out: dict = {"cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "cli" in args.only:
            out["cli"] = cli(args.repeats, tmp)
        if "cold" in args.only:
            out["cold"] = cold(args, tmp)
        if "warmup" in args.only:
            out["after_warmup"] = warmup(args, tmp)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
