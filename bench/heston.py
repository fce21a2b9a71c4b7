"""Heston benchmarks; JSON on standard output.

Section ``american_fit``: the Heston calibration of the bundled SPY chain (American contracts,
``examples/data/spy_chain_2026-02-13.csv``) directly to its American mids near the money:
the chain job solves each expiry's spot, rate and carry, :func:`optiond.heston_fit.quotes_from_chain`
keeps the out-of-the-money mids within ``--k-sd`` ATM standard deviations, at most
``--per-expiry`` a expiry (about 500 contracts), and :func:`optiond.heston_fit.fit_heston` with
``exercise="american"`` fits them: every evaluation one batched ADI solve of all of them, a
coarse grid first, the ADI default at the end. Timed on the GPU (the fit's wall time, the CUDA
module compiled beforehand) and on the CPU: the CPU time is measured per batched solve at each
stage's settings (one solve of every contract, all cores) and multiplied by the solves the GPU
fit made (the same iterations; a full CPU fit of ~500 contracts takes long), unless
``--cpu-full`` runs the whole fit on the CPU too.

Usage: ``python bench/heston.py [--only american_fit] [--k-sd 2] [--per-expiry 17] [--cpu-full]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from optiond import chain, heston_fit  # noqa: E402
from optiond.kernels import adi  # noqa: E402
from optiond.kernels import gpu as kernel_gpu  # noqa: E402

SPY = ROOT / "examples" / "data" / "spy_chain_2026-02-13.csv"


def _record_solves(log: list):
    """Wrap the ADI front door so that every batched solve of the fit is logged (rows, settings, seconds)."""
    inner = adi.heston_price_batch
    depth = [0]

    def wrapped(*args, **kw):
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            out = inner(*args, **kw)
        finally:
            depth[0] -= 1
        if depth[0] == 0:  # the fit's own calls, not the front door's inner ones
            settings = {k: kw[k] for k in ("grid", "time_steps", "steps_per_year", "richardson") if k in kw}
            log.append({"rows": int(np.size(out["price"])), "settings": settings, "seconds": time.perf_counter() - t0})
        return out

    return inner, wrapped


def american_fit(k_sd: float, per_expiry: int, cpu_full: bool) -> dict:
    t0 = time.perf_counter()
    df = chain.read_chain(str(SPY))
    out, _ = chain.price_chain(df)
    t_chain = time.perf_counter() - t0
    quotes = heston_fit.quotes_from_chain(out, european_only=False, k_sd=k_sd, max_per_expiry=per_expiry)
    n = sum(e.strike.size for e in quotes)
    res = {"chain": SPY.name, "contracts": n, "expiries": len(quotes), "k_sd": k_sd, "per_expiry": per_expiry,
           "chain_job_s": t_chain, "stages": {"coarse": heston_fit.AMERICAN_COARSE,
                                              "final": {k: (list(v) if isinstance(v, tuple) else v)
                                                        for k, v in heston_fit.AMERICAN_FINAL.items()}}}
    have_gpu = kernel_gpu.available()
    log: list = []
    inner, wrapped = _record_solves(log)
    devices = (["gpu"] if have_gpu else []) + (["cpu"] if cpu_full or not have_gpu else [])
    for dev in devices:
        if dev == "gpu":  # compile the module outside the timing
            e = quotes[0]
            adi.heston_price_batch(e.kind[:2], "american", e.spot, e.strike[:2], e.T, 0.04, 0.01, 0.04, 2.0, 0.04,
                                   0.5, -0.7, device="gpu", grid=(20, 10), time_steps=4)
        log.clear()
        adi.heston_price_batch = wrapped
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                t1 = time.perf_counter()
                fit = heston_fit.fit_heston(quotes, exercise="american", device=dev)
                wall = time.perf_counter() - t1
        finally:
            adi.heston_price_batch = inner
        res[dev] = {"device": fit.device if dev == "cpu" else kernel_gpu.device_label(), "fit_s": wall,
                    "solves": fit.solves, "nfev": fit.nfev, "rows_solved": int(sum(x["rows"] for x in log)),
                    "solve_s": float(sum(x["seconds"] for x in log)), "params": fit.params, "rms_vol_pts": fit.rms_vol_pts,
                    "feller": fit.feller, "message": fit.message}
        print(f"{dev}: {n} contracts, fit {wall:.2f} s, {fit.solves} batched solves, RMS {fit.rms_vol_pts:.3f} vol pts, "
              f"{fit.params}", file=sys.stderr, flush=True)
        if dev == "gpu":
            res["gpu"]["solve_log"] = [{"rows": x["rows"], "richardson": bool(x["settings"].get("richardson")),
                                        "seconds": x["seconds"]} for x in log]
    if have_gpu and not cpu_full:
        # the CPU's time for the same solves: one batched solve of all contracts per stage, on all cores
        e_all = heston_fit._AmericanProblem(quotes, "cpu")
        p = np.array([fit.params[k] for k in heston_fit.PARAMS])
        per_row = {}
        for name, settings in (("coarse", heston_fit.AMERICAN_COARSE), ("final", heston_fit.AMERICAN_FINAL)):
            t1 = time.perf_counter()
            e_all.prices(p[None, :], settings)
            per_row[name] = (time.perf_counter() - t1) / e_all.n
        rows = {"coarse": sum(x["rows"] for x in log if not x["settings"].get("richardson")),
                "final": sum(x["rows"] for x in log if x["settings"].get("richardson"))}
        res["cpu_extrapolated"] = {
            "how": "CPU seconds per contract of one batched solve at each stage's settings (all cores) x the contracts "
                   "the GPU fit solved at those settings (same iterations)",
            "cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
            "seconds_per_contract": per_row, "rows": rows,
            "fit_s": float(sum(per_row[k] * rows[k] for k in rows))}
        print(f"cpu (extrapolated): {res['cpu_extrapolated']['fit_s']:.1f} s", file=sys.stderr, flush=True)
    return res


SECTIONS = {"american_fit": american_fit}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    ap.add_argument("--k-sd", type=float, default=2.0)
    ap.add_argument("--per-expiry", type=int, default=17)
    ap.add_argument("--cpu-full", action="store_true", help="run the whole American fit on the CPU as well")
    a = ap.parse_args(argv)
    result = {"bench": "heston", "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "python": platform.python_version()}
    for name in a.only or sorted(SECTIONS):
        result[name] = american_fit(a.k_sd, a.per_expiry, a.cpu_full)
    print(json.dumps(result, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
