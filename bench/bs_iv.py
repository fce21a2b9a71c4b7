"""European implied volatility (``optiond.kernels.black_scholes.bs_implied_vol``, the solver
behind BS_IV): the batch kernel on 10,000 options, and 10,000 single ``=BS_IV(...)`` cells
through the worksheet function (cache off, in this process). Prints JSON.

    python bench/bs_iv.py [--n 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    os.environ["OPTIOND_CACHE"] = "0"
    from optiond.addin import functions as F
    from optiond.kernels.black_scholes import bs_implied_vol, bs_price_greeks

    rng = np.random.default_rng(0)
    n = args.n
    kind = rng.integers(0, 2, n)
    K, T, s = rng.uniform(50, 200, n), np.exp(rng.uniform(np.log(1 / 365), np.log(10), n)), rng.uniform(0.05, 1.0, n)
    price = bs_price_greeks(kind, 100.0, K, T, 0.03, 0.01, s)["price"]
    bs_implied_vol(price, kind, 100.0, K, T, 0.03, 0.01)  # compile
    best = np.inf
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        vol, status = bs_implied_vol(price, kind, 100.0, K, T, 0.03, 0.01)
        best = min(best, time.perf_counter() - t0)
    F_ = 100.0 * np.exp(0.02 * T)
    otm = ok_otm = (status == 0) & np.where(kind == 1, K >= F_, K <= F_) & (price > 1e-300)  # a price of 0: no IV
    names = np.where(kind == 1, "call", "put")
    F.BS_IV(float(price[0]), 100.0, float(K[0]), float(T[0]), 0.03, 0.01, str(names[0]))
    t0 = time.perf_counter()
    for i in range(n):
        F.BS_IV(float(price[i]), 100.0, float(K[i]), float(T[i]), 0.03, 0.01, str(names[i]))
    cells_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(n):  # the same cells' prices, for scale (the price cells' short path)
        F.BS_CALL(100.0, float(K[i]), float(T[i]), 0.03, float(s[i]), 0.01)
    price_cells_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    F.BS_IV([[float(p)] for p in price], 100.0, [[float(k)] for k in K], [[float(t)] for t in T], 0.03, 0.01,
            [[str(k)] for k in names])
    range_s = time.perf_counter() - t0
    print(json.dumps({"n": n, "kernel_batch_s": best, "kernel_ns_per_option": best / n * 1e9,
                      "single_cells_s": cells_s, "bs_call_single_cells_s": price_cells_s,
                      "one_range_s": range_s, "ok_share": float((status == 0).mean()),
                      "max_rel_error_otm_rows": float(np.max(np.abs(vol[ok_otm] / s[ok_otm] - 1.0))),
                      "otm_rows": int(otm.sum())}))


if __name__ == "__main__":
    main()
