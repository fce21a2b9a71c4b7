"""``optiond heston-fit CHAIN.csv``: a chain's Heston parameters (:mod:`optiond.heston_fit`).

European chains by the semi-analytic engine; American chains with ``--american``, directly to
the American mids by batched ADI (on the GPU when present; the CPU takes minutes).

The chain job (:func:`optiond.chain.price_chain`, in this process) solves each expiry's forward
and discount factor from put–call parity and the out-of-the-money mids' implied volatilities;
the fit takes those (:func:`optiond.heston_fit.quotes_from_chain`) and fits (v0, kappa, theta,
xi, rho) by weighted least squares. Printed: the parameters, the Feller condition, the RMS and
largest error in vol points per expiry; ``--json FILE`` writes the whole result, ``--plot DIR``
the market-against-model smiles (PNG and SVG). A bad file, option or path is one line on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import pandas as pd

from . import options


def _fail(text: str) -> int:
    print(f"optiond heston-fit: {' '.join(str(text).split())}", file=sys.stderr)
    return 2


def _path_problem(args: argparse.Namespace) -> str | None:
    problem = options.output_file_problem("--json", args.json)
    if problem:
        return problem
    if args.plot and os.path.exists(args.plot) and not os.path.isdir(args.plot):
        return f"--plot {args.plot}: a file, not a directory"
    return None


def fit_lines(fit, underlying: str) -> list[str]:
    """The fit in a few lines: parameters, Feller, SSE, then one line per expiry."""
    p, f = fit.params, fit.feller
    lines = [f"Heston fit {underlying}: v0={p['v0']:.6f} kappa={p['kappa']:.4f} theta={p['theta']:.6f} "
             f"xi={p['xi']:.4f} rho={p['rho']:.4f}",
             f"  Feller 2*kappa*theta - xi^2 = {f['value']:.5f} ({'satisfied' if f['satisfied'] else 'violated'}"
             f"{', imposed' if f['imposed'] else ''}); SSE {fit.sse:.3f} vol pts^2 over "
             f"{sum(e['quotes'] for e in fit.expiries)} quotes, RMS {fit.rms_vol_pts:.3f}; "
             f"{fit.residual} residuals, weights {fit.weights}; {fit.nfev} evaluations, {fit.elapsed_s:.2f} s"
             + (f"; American by ADI, {fit.solves} batched solves on {fit.device}" if fit.exercise == "american" else ""),
             "  expiry        T (y)  quotes  rms (vol pts)  max"]
    for e in fit.expiries:
        lines.append(f"  {e['expiry']:<12} {e['T']:7.4f} {e['quotes']:7d} {e['rms_vol_pts']:14.3f} {e['max_vol_pts']:6.2f}")
    return lines


def cmd_heston_fit(args: argparse.Namespace) -> int:
    from .. import chain as chain_job
    from .. import heston_fit
    from ..market.curve import CurveError, ZeroCurve
    from ..market.underlyings import one_underlying

    problem = _path_problem(args)
    if problem:
        return _fail(problem)
    try:
        df = chain_job.read_chain(args.file)
        curve = ZeroCurve.from_csv(args.rates) if args.rates else None
        chain_job.check_market_args(quote_time=args.quote_time, settlement=args.settlement)
        underlying = one_underlying(df["underlying"], "heston-fit") or "chain"
    except (OSError, ValueError, CurveError, pd.errors.ParserError) as e:
        return _fail(e)
    if not len(df):
        return _fail(f"{args.file}: no contracts")
    american = "style" in df.columns and (chain_job.labels(df["style"]) == "american").any()
    if american and not args.american:
        return _fail(f"{args.file}: American contracts; the European Heston fit takes European chains only (their "
                     "early-exercise premium is not in the European model): pass --american to fit the American mids by ADI")
    if args.american and not american:
        return _fail(f"{args.file}: --american, but the chain has no American contracts")
    out, _ = chain_job.price_chain(df, rate=args.rate, curve=curve, quote_time=args.quote_time,
                                   settlement=args.settlement)
    try:
        quotes = heston_fit.quotes_from_chain(out, min_days=args.min_days, european_only=not args.american,
                                              k_sd=args.k_sd, max_per_expiry=args.max_per_expiry)
        fit = heston_fit.fit_heston(quotes, residual=args.residual, weights=args.weights, feller=args.feller,
                                    exercise="american" if args.american else "european", device=args.device)
    except ValueError as e:
        return _fail(e)
    print("\n".join(fit_lines(fit, underlying)))
    if args.json:
        from ..files import write_with

        write_with(args.json, lambda fh: json.dump(dict(fit.to_dict(), underlying=underlying), fh, indent=2))
        print(f"wrote {args.json}")
    if args.plot:
        try:
            paths = heston_fit.plot_fit(fit, args.plot, "".join(c if c.isalnum() else "_" for c in underlying.lower()))
        except ImportError as e:
            return _fail(f"--plot needs matplotlib ({e})")
        for p in paths:
            print(f"wrote {p}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from .. import chain as chain_job
    from .. import heston_fit

    h = sub.add_parser("heston-fit", help="fit the Heston model to a European option chain CSV",
                       description="Fit (v0, kappa, theta, xi, rho) to the out-of-the-money mids of a European chain "
                                   "(columns of examples/data/*.csv) by weighted least squares on the semi-analytic "
                                   "Heston engine, each expiry on its own forward and discount factor from put-call "
                                   "parity. Prints the parameters, the Feller condition and the error in vol points "
                                   "per expiry.")
    h.add_argument("file", help="chain CSV (European contracts, or American ones with --american)")
    h.add_argument("--american", action="store_true",
                   help="the chain's contracts are American: fit their mids by batched ADI (GPU when present)")
    h.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto", help="American fit: where ADI runs")
    h.add_argument("--k-sd", type=options.positive, default=heston_fit.K_SD,
                   help=f"strikes within this many ATM standard deviations (default {heston_fit.K_SD:g})")
    h.add_argument("--max-per-expiry", type=options.count, default=heston_fit.MAX_PER_EXPIRY,
                   help=f"most quotes per expiry (default {heston_fit.MAX_PER_EXPIRY})")
    h.add_argument("--json", metavar="FILE", help="write the result (parameters, errors per expiry, Feller) as JSON")
    h.add_argument("--plot", metavar="DIR", help="write the market-against-model smiles here (PNG and SVG)")
    h.add_argument("--residual", choices=heston_fit.RESIDUALS, default="price",
                   help="price (default): price errors over the Black vega; vol: exact implied-volatility errors")
    h.add_argument("--weights", choices=heston_fit.WEIGHTS, default="none",
                   help="none (default) or spread: each quote divided by half its bid/ask IV spread")
    h.add_argument("--feller", action="store_true", help="impose the Feller condition 2 kappa theta >= xi^2")
    h.add_argument("--min-days", type=options.non_negative, default=heston_fit.MIN_DAYS,
                   help=f"leave out expiries closer than this many days (default {heston_fit.MIN_DAYS:g})")
    h.add_argument("--rate", type=options.annual_decimal, default=chain_job.DEFAULT_RATE,
                   help=f"flat rate when parity leaves it open (default {chain_job.DEFAULT_RATE})")
    h.add_argument("--rates", metavar="FILE.csv", help="zero curve: columns days,rate")
    h.add_argument("--quote-time", metavar="TIME", help="quote time of rows without a quote_time cell (HH:MM New York)")
    h.add_argument("--settlement", choices=("am", "pm"), help="settlement of rows without a settlement cell")
    h.set_defaults(func=cmd_heston_fit)
