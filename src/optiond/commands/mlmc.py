"""``optiond mlmc-test``: Giles' ``mlmc_test`` report for the MLMC pricer.

Prints the per-level convergence statistics (ave(Pf-Pc), ave(Pf), var(Pf-Pc), var(Pf),
kurtosis, consistency check, cost), the alpha/beta/gamma regression estimates and the
complexity sweep over eps (price, N_l, MLMC cost against standard Monte Carlo), as in Giles
(2015), Acta Numerica 24, §2.7 and his ``mlmc_test.m``. Run it under ``mpiexec -n R ... --mpi``
to spread the samples over R ranks (rank 0 prints).

Example (Giles' GBM test case)::

    optiond mlmc-test --payoff call --spot 100 --strike 100 --expiry 1 --rate 0.05 --vol 0.2
"""

from __future__ import annotations

import argparse
import json
import sys

from . import options


def register(subparsers) -> None:
    p = subparsers.add_parser("mlmc-test", help="Giles' MLMC convergence and complexity report (mlmc_test)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--payoff", default="call", help="call, put, digital_call, digital_put, asian_call, asian_put (default call)")
    p.add_argument("--spot", type=options.positive, default=100.0)
    p.add_argument("--strike", type=options.positive, default=100.0)
    p.add_argument("--expiry", type=options.positive, default=1.0, help="years")
    p.add_argument("--rate", type=options.annual_decimal, default=0.05)
    p.add_argument("--dividend-yield", type=options.annual_decimal, default=0.0)
    p.add_argument("--vol", type=options.positive, default=0.2, dest="volatility")
    p.add_argument("--payout", type=options.positive, default=1.0, help="digital cash amount")
    p.add_argument("-N", "--samples", type=options.count, default=20000, help="samples per level for the convergence tests")
    p.add_argument("-L", "--levels", type=options.count, default=8, help="finest level of the convergence tests")
    p.add_argument("--eps", type=options.positive, nargs="+", default=[0.005, 0.01, 0.02, 0.05, 0.1], help="accuracies of the sweep")
    p.add_argument("--n0", type=options.count, default=1000, help="initial samples per level")
    p.add_argument("--lmin", type=options.non_negative_int, default=2)
    p.add_argument("--lmax", type=options.non_negative_int, default=20)
    p.add_argument("--seed", type=options.non_negative_int, default=0)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--mpi", action="store_true", help="use MPI.COMM_WORLD (run under mpiexec)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..kernels.mlmc import mlmc_test
    from ..models import InvalidInputError

    comm = None
    if args.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    try:
        rep = mlmc_test(args.payoff, args.spot, args.strike, args.expiry, args.rate, args.dividend_yield, args.volatility,
                        n=args.samples, levels=args.levels, eps_list=args.eps, seed=args.seed, device=args.device,
                        payout=args.payout, n0=args.n0, l_min=args.lmin, l_max=args.lmax, comm=comm)
    except InvalidInputError as exc:
        print(f"optiond mlmc-test: {exc}", file=sys.stderr)
        return 2
    if comm is not None and comm.Get_rank() != 0:
        return 0
    if args.json:
        d = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in rep.__dict__.items()}
        json.dump(d, sys.stdout, indent=1)
        print()
    else:
        ranks = comm.Get_size() if comm is not None else 1
        rep.header = (f"MLMC test: {args.payoff}  S={args.spot:g} K={args.strike:g} T={args.expiry:g} r={args.rate:g} "
                      f"q={args.dividend_yield:g} sigma={args.volatility:g}  (Milstein, M=2, device={args.device}, ranks={ranks}, seed={args.seed})")
        print(rep.text())
    return 0
