"""Adaptive MLMC across MPI ranks: the seed's nine cases on R ranks, one GPU (or the CPU) each.

Run under MPI; rank r uses GPU r % (number of GPUs). Prints JSON on rank 0: for each case the
price, N_l, the end-to-end wall time (median of --repeat runs, after a warm-up run that loads
the kernels) and whether the estimate equals a 1-rank run with the same seed bit for bit.

    mpiexec -n 2 python bench/mlmc_mpi.py --device gpu [--sampled-level0]

Level 0 is exact by default (its closed-form mean, computed on rank 0 and broadcast; no
samples); ``--sampled-level0`` samples it across the ranks as the seed's algorithm did.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from mpi4py import MPI

from optiond.kernels.mlmc import mlmc_price

from mlmc import CASES, EPS, RATE  # the same cases as bench/mlmc.py


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sampled-level0", action="store_true", help="sample level 0 instead of its exact mean")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    exact = not args.sampled_level0
    out = {"bench": "mlmc_mpi", "date": time.strftime("%Y-%m-%d"), "ranks": size, "device": args.device,
           "exact_level0": exact, "cases": []}
    for name, (S, T, sigma) in CASES.items():
        for eps in EPS:
            run = lambda c: mlmc_price("call", S, S, T, RATE, 0.0, sigma, eps, seed=args.seed, device=args.device,  # noqa: E731
                                       comm=c, exact_level0=exact)
            run(comm)  # warm-up
            times = []
            for _ in range(args.repeat):
                comm.Barrier()
                t0 = time.perf_counter()
                res = run(comm)
                times.append(time.perf_counter() - t0)
            single = run(None) if rank == 0 else None  # the same seed on this rank alone
            if rank == 0:
                out["cases"].append({"case": name, "eps": eps, "price": res.price, "n_samples": res.n_samples.tolist(),
                                     "wall_ms": 1e3 * statistics.median(times), "device": res.device,
                                     "same_as_1_rank": bool(single.price == res.price)})
    if rank == 0:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
