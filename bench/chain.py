"""The main job's speed: ``optiond chain`` on a bundled real chain, in-process (and through a
running daemon with --daemon). Prints JSON with contracts/s.

    python bench/chain.py [--chain examples/data/spy_chain_2026-02-13.csv] [--daemon]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from optiond import chain

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chain", default=str(ROOT / "examples/data/spy_chain_2026-02-13.csv"))
    ap.add_argument("--steps", type=int, default=chain.DEFAULT_STEPS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--daemon", action="store_true", help="also time it through a running daemon")
    args = ap.parse_args()
    df = chain.read_chain(args.chain)
    runs = {"in-process": chain.LocalPricer()}
    if args.daemon:
        from optiond.commands.pricing import ClientPricer

        runs["daemon"] = ClientPricer(fallback=False)
    out = {"bench": "chain", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "chain": Path(args.chain).name,
           "contracts": len(df), "steps": args.steps, "runs": {}}
    for name, pricer in runs.items():
        chain.price_chain(df.head(50), pricer, steps=args.steps)  # warm-up (JIT, sockets)
        best = None
        for _ in range(args.repeats):
            _, s = chain.price_chain(df, pricer, steps=args.steps)
            best = s if best is None or s.elapsed_s < best.elapsed_s else best
        out["runs"][name] = {"elapsed_s": best.elapsed_s, "contracts_per_s": best.contracts_per_s, "device": best.device,
                             "via": best.via, "ok": best.by_status.get("ok", 0)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
