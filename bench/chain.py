"""The main job's speed: a bundled real chain through ``optiond.chain.price_chain``, with the
forward/carry solve (``carry="parity"``, the default) beside the flat market (``carry="flat"``)
in the same run, in-process and through a running daemon (both ways: a request per
implied-volatility solve, ``daemon``, and the whole job in one ``chain`` request,
``daemon-chain-request``, whose ``server_s`` is the daemon's own time); and the CLI's wall time split into
start-up, pricing and the rest; with ``--surface``, the volatility surface's fit of the priced
chain (``--surface-only``: that alone), and of a synthetic chain of ``--synthetic-expiries``
expiries with ``--synthetic-strikes`` strikes each, a call and a put at every strike: the
chain job's output made from the fitted surface (mid IV at each strike with a seeded 0.3 vol
point noise, a 0.5 to 1.5 vol point spread around it), so the fit's time on a large chain is
measured without pricing one. Prints JSON.

    python bench/chain.py [--chain examples/data/spy_chain_2026-02-13.csv] [--quote-time 10:50]
                          [--daemon] [--cli] [--surface | --surface-only] [--repeats 3]
                          [--synthetic-expiries 60 --synthetic-strikes 130]

``--daemon`` needs a running daemon (``optiond serve``); its requests are sent with
``force=True`` so the reply cache does not answer the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from optiond import chain
from optiond.pricer import LocalPricer

ROOT = Path(__file__).resolve().parents[1]


def _run(df, pricer, one_request: bool, **market):
    if one_request:  # the daemon's chain request: market and pricing there, one round trip
        return pricer.price_chain(df, **market)
    return chain.price_chain(df, pricer, **market)


def _best(df, pricer, steps: int, carry: str, quote_time: str | None, repeats: int, one_request: bool = False) -> dict:
    best = None
    for _ in range(repeats):
        _, s = _run(df, pricer, one_request, steps=steps, carry=carry, quote_time=quote_time)
        best = s if best is None or s.elapsed_s < best.elapsed_s else best
    market_s = float(best.extra.get("market_s", 0.0))
    out = {"elapsed_s": best.elapsed_s, "market_s": market_s, "pricing_s": best.elapsed_s - market_s,
           "contracts_per_s": best.contracts_per_s, "device": best.device, "via": best.via,
           "ok": best.by_status.get("ok", 0), "below_model_bound": best.by_status.get("below-model-bound", 0)}
    if "server_s" in best.extra:  # the daemon's own time; the rest is the round trip
        out["server_s"] = best.extra["server_s"]
        out["pricing_s"] = best.extra["server_s"] - market_s
    return out


def _cli(args, daemon: bool) -> dict:
    """Wall time of ``optiond chain`` and of the bare start-up, in fresh processes."""
    env = dict(os.environ)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import optiond.cli as c; c.build_parser('chain')"], check=True, env=env)
    startup = time.perf_counter() - t
    cmd = [sys.executable, "-m", "optiond.cli", "chain", args.chain, "--json", "--steps", str(args.steps),
           "--daemon-only" if daemon else "--no-daemon", "-o", os.devnull, "--forwards", os.devnull]
    if args.quote_time:
        cmd += ["--quote-time", args.quote_time]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1:] or proc.returncode}
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "startup_s": startup, "job_s": summary["elapsed_s"],
            "rest_s": wall - startup - summary["elapsed_s"], "device": summary["device"], "via": summary["via"]}


def _fit_timed(priced, repeats: int) -> dict:
    from optiond.surface import fit_surface

    fit_surface(priced.head(300))  # warm-up: the compiled solver from its cache
    best, surface = float("inf"), None
    for _ in range(max(repeats, 1)):
        t = time.perf_counter()
        surface = fit_surface(priced)
        best = min(best, time.perf_counter() - t)
    st = surface.stats
    return {"fit_s": best, "contracts": len(priced), "expiries": len(surface.slices),
            "arbitrage_free": st["arbitrage_free"], "inside_share_near": st["inside_share_near"],
            "median_rms_vol_pts": st["rms_vol_pts"]}, surface


def synthetic_chain(surface, expiries: int, strikes: int, seed: int = 1):
    """The chain job's output for a chain of ``expiries`` expiries (T from 2 days to 3 years,
    geometric) and ``strikes`` strikes each (``k`` from -4 to +3 ATM standard deviations), a call
    and a put at each, from ``surface``: mid IV = the surface's plus N(0, 0.3 vol points), the
    bid and ask 0.25 to 0.75 vol points either side (seeded)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for T in np.geomspace(2 / 365, 3.0, expiries):
        F = surface.forward(T)
        atm = float(surface.vol(np.array([F]), T)[0])
        k = np.linspace(-4.0, 3.0, strikes) * atm * np.sqrt(T)
        K = F * np.exp(k)
        iv = surface.vol(K, T) + 0.003 * rng.standard_normal(strikes)
        half = 0.0025 + 0.005 * rng.random(strikes)
        for kind in ("call", "put"):
            rows.append(pd.DataFrame({"expiry": f"T{T:.6f}", "type": kind, "strike": K, "expiry_years": T,
                                      "forward": F, "rate": surface.slices[0].rate, "iv": iv, "iv_bid": iv - half,
                                      "iv_ask": iv + half, "status": "ok"}))
    return pd.concat(rows, ignore_index=True)


def _surface(df, steps: int, quote_time, repeats: int, synthetic: tuple[int, int] | None) -> dict:
    """The surface fit of the priced chain (and of a synthetic chain made from its surface):
    best of ``repeats`` (seconds), with its quality."""
    priced, _ = chain.price_chain(df, LocalPricer(), steps=steps, quote_time=quote_time)
    out, surface = _fit_timed(priced, repeats)
    if synthetic:
        out["synthetic"], _ = _fit_timed(synthetic_chain(surface, *synthetic), repeats)
        out["synthetic"]["strikes_per_expiry"] = synthetic[1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chain", default=str(ROOT / "examples/data/spy_chain_2026-02-13.csv"))
    ap.add_argument("--quote-time", default="10:50", help="snapshot time (examples/data/README.md); '' for 16:00")
    ap.add_argument("--steps", type=int, default=chain.DEFAULT_STEPS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--daemon", action="store_true", help="also through a running daemon")
    ap.add_argument("--cli", action="store_true", help="also time the optiond chain command")
    ap.add_argument("--surface", action="store_true",
                    help="also time the surface fit of the priced chain (optiond.surface.fit_surface), one core")
    ap.add_argument("--surface-only", action="store_true", help="only the surface fit (the chain priced once)")
    ap.add_argument("--synthetic-expiries", type=int, default=0, help="with the surface: also a synthetic chain")
    ap.add_argument("--synthetic-strikes", type=int, default=130)
    args = ap.parse_args()
    qt = args.quote_time or None
    df = chain.read_chain(args.chain)
    runs = {"in-process": LocalPricer()}
    if args.daemon:
        from optiond.commands.pricing import daemon_pricer

        runs["daemon"] = daemon_pricer(fallback=False, force=True)  # a request per IV solve
        runs["daemon-chain-request"] = runs["daemon"]  # the whole job in one request
    out = {"bench": "chain", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "chain": Path(args.chain).name,
           "contracts": len(df), "steps": args.steps, "quote_time": qt, "runs": {}}
    for name, pricer in ({} if args.surface_only else runs).items():
        one = name == "daemon-chain-request"
        _run(df.head(200), pricer, one, steps=args.steps, quote_time=qt)  # warm-up (JIT, sockets, GPU)
        r = {carry: _best(df, pricer, args.steps, carry, qt, args.repeats, one) for carry in ("flat", "parity")}
        r["parity_over_flat"] = r["parity"]["elapsed_s"] / r["flat"]["elapsed_s"]
        out["runs"][name] = r
    if args.surface or args.surface_only:
        synthetic = (args.synthetic_expiries, args.synthetic_strikes) if args.synthetic_expiries else None
        out["surface"] = _surface(df, args.steps, qt, args.repeats, synthetic)
    if args.cli:
        out["cli"] = {"in-process": _cli(args, daemon=False)}
        if args.daemon:
            out["cli"]["daemon"] = _cli(args, daemon=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
