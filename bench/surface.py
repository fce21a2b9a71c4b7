"""The volatility surface against the market on the bundled chains: how many two-sided
out-of-the-money quotes the fitted surface lies inside, near the money and over the smile,
per chain and per expiry, beside the best share any arbitrage-free smile can reach
(:func:`optiond.surface.achievable.achievable`) and the fit's time. Prints JSON.

Each chain is priced in process (``optiond.chain.price_chain``, the CLI's ``--no-daemon``
job, at the README's snapshot time) once and kept in ``--cache`` (a pickle per chain and
code version of the chain job's output); the fit (:func:`optiond.surface.points.fit_chain`,
what ``optiond chain --surface`` runs) is timed as the best of ``--repeats`` runs, and the
shares are read from the saved surface (``Surface.vol`` at each quote), not from the fit's
own statistics.

    python bench/surface.py [--chains spy qqq ...] [--repeats 3] [--no-achievable]
                            [--cache DIR] [--per-expiry]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from optiond import chain
from optiond.pricer import LocalPricer
from optiond.surface.model import Surface
from optiond.surface.points import fit_chain

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data"
#: the bundled chains and their snapshot times (examples/data/README.md)
CHAINS = {"spy": ("spy_chain_2026-02-13.csv", "10:50"), "qqq": ("qqq_chain_2026-02-13.csv", "10:50"),
          "tsla": ("tsla_chain_2026-02-13.csv", "10:50"), "aapl": ("aapl_chain_2026-02-13.csv", "10:50"),
          "spx": ("spx_chain_2025-10-01.csv", None)}
NEAR_K = 0.1
WIDE_K = 0.5


def priced(name: str, cache: Path) -> pd.DataFrame:
    """The chain job's output for a bundled chain, from the cache when the chain file and the
    chain job's source are unchanged."""
    file, qt = CHAINS[name]
    path = DATA / file
    key = hashlib.sha1(path.read_bytes() + Path(chain.__file__).read_bytes()).hexdigest()[:12]
    hit = cache / f"{name}-{key}.pkl"
    if hit.exists():
        return pd.read_pickle(hit)
    out, _ = chain.price_chain(chain.read_chain(str(path)), LocalPricer(), quote_time=qt)
    cache.mkdir(parents=True, exist_ok=True)
    out.to_pickle(hit)
    return out


def quotes(out: pd.DataFrame) -> pd.DataFrame:
    """The two-sided out-of-the-money quotes the chain job solved: expiry, T, K, F, k, bid/ask IVs."""
    kind = chain.labels(out["type"])
    num = {c: pd.to_numeric(out[c], errors="coerce").to_numpy(dtype=np.float64)
           for c in ("strike", "forward", "expiry_years", "iv", "iv_bid", "iv_ask")}
    K, F = num["strike"], num["forward"]
    otm = np.where(K >= F, kind == "call", kind == "put")
    two = np.isfinite(num["iv_bid"]) & np.isfinite(num["iv_ask"]) & (num["iv_ask"] >= num["iv_bid"])
    ok = otm & two & (out["status"].to_numpy() == "ok") & np.isfinite(num["iv"])
    q = pd.DataFrame({"expiry": out["expiry"].astype(str).to_numpy()[ok], "T": num["expiry_years"][ok], "K": K[ok],
                      "F": F[ok], "bid": num["iv_bid"][ok], "ask": num["iv_ask"][ok], "mid": num["iv"][ok]})
    q["k"] = np.log(q["K"] / q["F"])
    return q


def shares(q: pd.DataFrame, surface: Surface) -> pd.DataFrame:
    """``q`` with ``fit`` (the saved surface's IV at each quote) and ``inside``."""
    fit = np.full(len(q), np.nan)
    for t, idx in q.groupby("T").groups.items():
        fit[q.index.get_indexer(idx)] = surface.vol(q.loc[idx, "K"].to_numpy(), float(t))
    q = q.assign(fit=fit)
    q["inside"] = (q["fit"] >= q["bid"] - 1e-12) & (q["fit"] <= q["ask"] + 1e-12)
    return q


def _share(sel: pd.DataFrame) -> float | None:
    return round(100.0 * float(sel["inside"].mean()), 1) if len(sel) else None


def bench_chain(name: str, cache: Path, repeats: int, achievable: bool, per_expiry: bool) -> dict:
    out = priced(name, cache)
    times, surface = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        surface = fit_chain(out)
        times.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as d:  # the shares from the saved surface
        surface.to_json(os.path.join(d, "s.json"))
        saved = Surface.from_json(os.path.join(d, "s.json"))
    q = shares(quotes(out), saved)
    near, wide = q[q["k"].abs() < NEAR_K], q[q["k"].abs() <= WIDE_K]
    row = {"chain": name, "expiries": len(saved.slices), "quotes_near": len(near), "inside_near_pct": _share(near),
           "quotes_k05": len(wide), "inside_k05_pct": _share(wide), "fit_ms_best": round(1e3 * min(times), 1),
           "fit_ms_all": [round(1e3 * t, 1) for t in times]}
    if achievable:
        from optiond.surface.achievable import achievable as best
        t0 = time.perf_counter()
        total = {"near": [0, 0], "k05": [0, 0]}
        ach = {}
        for e, g in q.groupby("expiry"):
            for band, lim, strict in (("near", NEAR_K, True), ("k05", WIDE_K, False)):
                sel = g[(g["k"].abs() < lim) if strict else (g["k"].abs() <= lim)]
                if len(sel) == 0:
                    continue
                r = best(sel["K"].to_numpy() / sel["F"].to_numpy(), sel["bid"].to_numpy(), sel["ask"].to_numpy(),
                         float(sel["T"].iloc[0]))
                ach[(e, band)] = r.count
                total[band][0] += r.count
                total[band][1] += len(sel)
        row["achievable_near_pct"] = round(100.0 * total["near"][0] / max(total["near"][1], 1), 1)
        row["achievable_k05_pct"] = round(100.0 * total["k05"][0] / max(total["k05"][1], 1), 1)
        row["achievable_s"] = round(time.perf_counter() - t0, 2)
    if per_expiry:
        rows = []
        for e, g in q.groupby("expiry", sort=False):
            n_, w_ = g[g["k"].abs() < NEAR_K], g[g["k"].abs() <= WIDE_K]
            r = {"expiry": e, "T": round(float(g["T"].iloc[0]), 5), "near": len(n_), "inside_near_pct": _share(n_),
                 "k05": len(w_), "inside_k05_pct": _share(w_)}
            if achievable:
                for band, n in (("near", len(n_)), ("k05", len(w_))):
                    r[f"achievable_{band}_pct"] = (round(100.0 * ach[(e, band)] / n, 1) if (e, band) in ach else None)
            rows.append(r)
        row["per_expiry"] = sorted(rows, key=lambda r: r["T"])
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chains", nargs="+", choices=sorted(CHAINS), default=list(CHAINS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-achievable", action="store_true", help="skip the achievable share (the MILP per expiry)")
    ap.add_argument("--per-expiry", action="store_true", help="add the figures of every expiry")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "optiond-bench-surface"),
                    help="where the priced chains are kept between runs")
    args = ap.parse_args(argv)
    for name in args.chains:
        row = bench_chain(name, Path(args.cache), args.repeats, not args.no_achievable, args.per_expiry)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
