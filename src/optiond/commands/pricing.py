"""``optiond price`` (a portfolio CSV) and ``optiond chain`` (a listed option chain)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from typing import Any

import numpy as np
import pandas as pd

from .. import _moved, greek_units
from . import options
from .. import chain as chain_job
from ..columns import TableFileError, read_csv_table
from ..files import write_with
from ..models import HESTON_RENAMED, Method
from ..dividends import DIVIDENDS_COLUMN, read_dividend_file, valuation_instant
from ..pricer import (OPTIONAL_COLUMNS, PORTFOLIO_COLUMNS, DaemonPricer, LocalPricer, merge_portfolio, methods_text,
                      portfolio_frame, price_portfolio)

#: a file of more rows than this is priced on the daemon as a followed job (progress bar; the
#: client waits while the daemon lives and moves, and cancels the job if it stops waiting)
JOB_ROWS = 10_000

#: ``-o -``: the output CSV goes to standard output, as a stream
STDOUT = "-"

#: ``ClientPricer(fallback, force)`` is :func:`daemon_pricer` now (the old name warns, one release)
__getattr__ = _moved.names(__name__, {"ClientPricer": "optiond.commands.pricing:daemon_pricer"})


def daemon_pricer(fallback: bool, force: bool = False) -> DaemonPricer:
    """The daemon pricer on the process-wide client (:func:`optiond.daemon.client.get_client`):
    ``fallback``: price in this process when no daemon answers; ``force``: bypass the daemon's
    reply cache (benchmarks)."""
    from ..daemon.client import get_client  # the daemon is optional for in-process runs

    return DaemonPricer(get_client(), fallback, force)


def make_pricer(args: argparse.Namespace) -> LocalPricer | DaemonPricer:
    """In-process with --no-daemon; the daemon only with --daemon-only; else daemon with fall-back."""
    if args.no_daemon:
        return LocalPricer()
    return daemon_pricer(fallback=not args.daemon_only)


def _add_pricer_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--no-daemon", action="store_true", help="price in this process; do not contact a daemon")
    g.add_argument("--daemon-only", action="store_true", help="fail if no daemon answers (no in-process fall-back)")


def _add_greeks_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--greeks", choices=greek_units.UNITS, default="raw",
                   help="units of the Greek columns: raw (default; theta per year, vega per 1.00 of volatility, rho "
                        "and dividend_rho per 1.00) or trader (theta_per_day, vega_per_vol_point, rho_per_pct, "
                        "dividend_rho_per_pct: the unit in the column name)")


def _progress(total: int, desc: str):
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="contract", file=sys.stderr, disable=None)
    state = {"n": 0}

    def update(done: int) -> None:
        bar.update(done - state["n"])
        state["n"] = done

    return bar, update


def write_csv(df: pd.DataFrame, path: str | None) -> None:
    """Write ``df`` (no index) as CSV to ``path`` whole or not at all
    (:func:`optiond.files.write_with`: a previous file stays as it was when the write fails);
    None or ``-``: to standard output, as a stream.

    Raises:
        optiond.files.WriteError: the file cannot be written (a full disk, no permission, no
            directory).
    """
    if not path or path == STDOUT:
        df.to_csv(sys.stdout, index=False)
    else:
        write_with(path, lambda f: df.to_csv(f, index=False), newline="")


def warn_ignored_columns(command: str, df: pd.DataFrame) -> None:
    """One line on stderr naming the columns of the file that nobody reads (if any)."""
    ignored = df.attrs.get("ignored_columns") or []
    if ignored:
        print(f"optiond {command}: warning: ignoring unknown column{'s' if len(ignored) > 1 else ''} "
              f"{', '.join(ignored)}", file=sys.stderr)


def say_fallback(command: str, lost: str | None) -> None:
    """One line on stderr when the daemon took the work and lost it (it stopped, or a rank
    died) and the file was priced in this process instead (``lost``: why; None: nothing to say)."""
    if lost:
        print(f"optiond {command}: {' '.join(str(lost).split())}; priced in this process instead", file=sys.stderr)


class _JobBar:
    """A tqdm bar (rows, on stderr) fed by a daemon job's progress events; it appears with the
    first event, so a request answered at once shows none, and only when stderr is a terminal."""

    def __init__(self, total: int, desc: str, enabled: bool):
        self.total, self.desc, self.enabled = total, desc, enabled
        self.bar = None

    def __call__(self, ev: Any) -> None:
        if not self.enabled or ev.fraction is None:
            return
        if self.bar is None:
            from tqdm import tqdm

            # disable=None: no bar when stderr is not a terminal (a log file, a pipe, a service)
            self.bar = tqdm(total=self.total, desc=self.desc, unit="row", file=sys.stderr, mininterval=0.5,
                            disable=None)
        self.bar.update(max(0, round(float(ev.fraction) * self.total) - self.bar.n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def cmd_price(args: argparse.Namespace) -> int:
    df = read_csv_table(args.file, PORTFOLIO_COLUMNS + OPTIONAL_COLUMNS + (DIVIDENDS_COLUMN,) + tuple(HESTON_RENAMED))
    df = portfolio_frame(df)  # a Heston file's earlier theta / rho columns, renamed (a warning)
    renamed = df.attrs.get("renamed_columns") or {}
    if renamed:
        print("optiond price: warning: reading the Heston column" + ("s " if len(renamed) > 1 else " ")
              + ", ".join(f"{old} as {new}" for old, new in renamed.items())
              + " (the old names go in the next release)", file=sys.stderr)
    warn_ignored_columns("price", df)
    required = ("kind", "spot", "strike", "expiry", "rate") + (() if "v0" in df.columns else ("volatility",))
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TableFileError(f"{args.file}: missing columns {missing}; expected {list(PORTFOLIO_COLUMNS)}")
    if df.empty:
        raise TableFileError(f"{args.file}: a header and no rows: nothing to price")
    problem = options.output_file_problem("--output", args.output)
    if problem:
        print(f"optiond price: {problem}", file=sys.stderr)
        return 2
    try:
        valuation = valuation_instant(args.valuation) if args.valuation else None
    except ValueError as e:
        print(f"optiond price: --valuation: {e}", file=sys.stderr)
        return 2
    method = Method(name=args.method, steps=args.steps, greeks=not args.no_greeks, eps=args.eps, seed=args.seed, scheme=args.scheme,
                    grid=tuple(args.grid), time_steps=args.time_steps, device=args.device,
                    **(dict(richardson=False, steps_per_year=0.0) if args.adi_single_grid else {}),
                    extrapolate=args.extrapolate, accuracy=args.accuracy)
    pricer = make_pricer(args)
    if isinstance(pricer, DaemonPricer):  # a big file is a followed daemon job, with a progress bar
        bar = _JobBar(len(df), "price", not args.no_progress)
        try:
            res = price_portfolio(pricer, df, method, valuation=valuation,
                                  as_job=True if len(df) > JOB_ROWS else None, on_progress=bar)
        finally:
            bar.close()
        say_fallback("price", res.diagnostics.get("daemon_lost"))
    else:
        res = price_portfolio(pricer, df, method, valuation=valuation)
    out = greek_units.convert_frame(merge_portfolio(df, res), args.greeks, prefixes=("", "model_"))
    write_csv(out, args.output)
    ok = int(np.sum(res.ok))
    print(f"priced {ok}/{len(res)} rows ({len(res) - ok} errors) in {res.elapsed_s:.3f} s on {res.device} ({res.via}); "
          f"{methods_text(res.method, method.accuracy)}", file=sys.stderr)
    return 0 if ok == len(res) or args.allow_errors else 1


def forwards_path(output: str | None, explicit: str | None) -> str | None:
    """Where the per-expiry market table goes: ``--forwards`` if given, else beside the output
    (``<out>.forwards.csv``, the output's ``.csv`` suffix dropped), else nowhere."""
    if explicit:
        return explicit
    if not output or output == STDOUT:
        return None
    base = output[:-4] if output.lower().endswith(".csv") else output
    return f"{base}.forwards.csv"


def surface_paths_problem(surface_path: str | None, plot_dir: str | None) -> str | None:
    """Why ``--surface FILE.json`` or ``--plot DIR`` cannot be written (one line), or None;
    checked before pricing so a bad path costs no work. ``DIR`` may not exist yet (it is
    created with its parents) but must not be a file or lie under one."""
    problem = options.output_file_problem("--surface", surface_path)
    if problem:
        return problem
    if plot_dir:
        d = os.path.abspath(plot_dir)
        while not os.path.exists(d) and os.path.dirname(d) != d:
            d = os.path.dirname(d)
        if not os.path.isdir(d):
            return f"--plot {plot_dir}: {d} is a file, not a directory"
    return None


def surface_outputs(out: pd.DataFrame, pricer: Any, *, steps: int, surface_path: str | None,
                    plot_dir: str | None, method: str = chain_job.DEFAULT_METHOD,
                    accuracy: str = chain_job.DEFAULT_ACCURACY, plot_formats: tuple[str, ...] = ("png",),
                    yardstick: bool = False, dividends: tuple | None = None) -> tuple[pd.DataFrame, Any, list]:
    """Fit the priced chain's surface (:func:`optiond.surface.points.fit_chain`: the fit with
    each expiry's spot, which American prices on the published surface need), measure it
    against the best achievable inside share per expiry when ``yardstick``
    (:func:`optiond.surface.report.yardstick`: a MILP per expiry, seconds each on a large
    chain), add the theo
    columns (:func:`optiond.surface.theo.apply_surface`, priced on ``pricer`` by the chain's
    ``method`` and ``accuracy``, with the rows' cash ``dividends`` as the chain job priced them:
    its ``summary.dividends``), write the JSON
    to ``surface_path`` and the pictures into ``plot_dir`` in ``plot_formats`` (each if given;
    the pictures drawn in a child process beside the theo: :class:`optiond.surface.drawing.Pictures`).

    Returns:
        ``(out with the theo columns, the surface, the picture paths)``.

    Raises:
        ImportError: matplotlib, for the pictures, is not installed.
        ValueError: the chain has no expiry the fit can use.
        OSError: a file cannot be written.
    """
    from ..surface.points import fit_chain
    from ..surface.drawing import Pictures
    from ..surface.theo import apply_surface

    surface = fit_chain(out)
    # the pictures need the quotes and the fit only: drawn in a child while the theo is priced
    with (Pictures(out, surface, plot_dir, plot_formats) if plot_dir else contextlib.nullcontext()) as pictures:
        if yardstick:
            from ..surface.report import yardstick as measure

            measure(surface, out)
        out = apply_surface(out, surface, pricer, steps=steps, method=method, accuracy=accuracy,
                            dividends=dividends)
        if surface_path:
            surface.to_json(surface_path)
        plots = pictures.result() if plot_dir else []
    return out, surface, plots


def _pct(x: Any) -> str:
    return f"{100 * x:.0f}%" if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def surface_lines(surface: Any) -> list[str]:
    """The fit in a few lines: the whole surface (expiries, share of two-sided out-of-the-money
    mids whose fitted IV lies inside ``[iv_bid, iv_ask]`` near the money and the best share
    any arbitrage-free smile reaches there where measured, RMS error in vol points, arbitrage
    checks), then one line per expiry (ATM vol, in-spread share near the money and its
    achievable share, in-spread share over every quote fitted, RMS error out of and in the
    money, confidence), then a ``warning`` line for each expiry the fit's statistics flag
    (:func:`optiond.surface.report.warning_lines`). Reads the statistics
    :func:`optiond.surface.fit.fit_surface` records; a missing one prints ``-``."""
    st = surface.stats or {}

    def num(x: Any, fmt: str) -> str:
        return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) else "-"

    arb = st.get("arbitrage_free")
    best = st.get("achievable_near")
    lines = [f"surface {surface.underlying} ({surface.method}): {len(surface.slices)} expiries, "
             f"fitted IV inside the quoted spread {_pct(st.get('inside_share_near'))} of two-sided quotes with |k|<0.1"
             + (f" (achievable {_pct(best)})" if best is not None else "")
             + f", median rms {num(st.get('rms_vol_pts'), '.2f')} vol pts"
             + ("" if arb is None else f", {'no arbitrage' if arb else 'ARBITRAGE'}")]
    lines.append(f"  {'expiry':<10} {'T':>7} {'atm iv':>6} {'near':>5} {'achv':>5} {'in spr':>6} {'rms':>5} {'itm':>5} "
                 f"{'conf':>4}")
    for s in surface.slices:
        ss = s.stats or {}
        lines.append(f"  {s.expiry:<10} {s.T:>7.4f} {_pct(s.atm_vol()):>6} {_pct(ss.get('inside_share_near')):>5} "
                     f"{_pct(ss.get('achievable_near')):>5} {_pct(ss.get('inside_share')):>6} "
                     f"{num(ss.get('rms_vol_pts'), '.2f'):>5} {num(ss.get('rms_vol_pts_itm'), '.2f'):>5} "
                     f"{num(ss.get('confidence'), '.2f'):>4}")
    lines += [f"  warning {w}" for w in st.get("warnings") or []]
    return lines


def cmd_chain(args: argparse.Namespace) -> int:
    from ..market.curve import CurveError, ZeroCurve
    from ..market.underlyings import one_underlying, split

    try:
        df = chain_job.read_chain(args.file)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        print(f"optiond chain: {e}", file=sys.stderr)
        return 2
    warn_ignored_columns("chain", df)
    try:
        curve = ZeroCurve.from_csv(args.rates) if args.rates else None
        divs = read_dividend_file(args.dividends) if args.dividends else None
        chain_job.check_market_args(carry=args.carry, quote_time=args.quote_time, settlement=args.settlement,
                                    spot_mode=args.spot)
        chain_job.american_method(args.method, args.steps, args.accuracy)
        if divs is not None:  # a dividend file is one underlying's; a fit is one underlying's surface
            one_underlying(df["underlying"], "--dividends")
        if args.surface or args.plot:
            one_underlying(df["underlying"], "--surface" if args.surface else "--plot")
    except (CurveError, ValueError) as e:
        print(f"optiond chain: {e}", file=sys.stderr)
        return 2
    problem = (options.output_file_problem("--output", args.output)
               or options.output_file_problem("--forwards", forwards_path(args.output, args.forwards))
               or surface_paths_problem(args.surface, args.plot))
    if problem:
        print(f"optiond chain: {problem}", file=sys.stderr)
        return 2
    pricer = make_pricer(args)
    market = dict(steps=args.steps, rate=args.rate, dividend_yield=args.dividend_yield, curve=curve, carry=args.carry,
                  quote_time=args.quote_time, settlement=args.settlement, spot_mode=args.spot, method=args.method,
                  accuracy=args.accuracy)
    if isinstance(pricer, DaemonPricer) and divs is None:  # one request: the daemon solves the market next to its GPU
        out, summary = pricer.price_chain(df, **market)
        say_fallback("chain", summary.extra.get("daemon_lost"))
    else:
        bar, update = _progress(len(df), split(df["underlying"]).text()[:40] or "chain")
        try:
            # with dividends the job runs here, its pricing requests on the pricer (the daemon's too)
            out, summary = chain_job.price_chain(df, pricer, progress=update, dividends=divs, **market)
        finally:
            bar.close()
    surface = None
    if args.surface or args.plot:
        try:
            out, surface, plots = surface_outputs(out, pricer, steps=args.steps, surface_path=args.surface,
                                                  plot_dir=args.plot, method=args.method, accuracy=args.accuracy,
                                                  plot_formats=("png", "svg") if args.plot_svg else ("png",),
                                                  yardstick=args.yardstick, dividends=summary.dividends)
        except (ImportError, ValueError) as e:
            print(f"optiond chain: surface: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
    out = greek_units.convert_frame(out, args.greeks, prefixes=("", "theo_"))
    fwd_path = forwards_path(args.output, args.forwards)
    # each file whole or not at all; no -o (or '-o -') streams the CSV, as 'optiond price' does, and
    # the summary goes to stderr
    to_stdout = not args.output or args.output == STDOUT
    write_csv(out, args.output)
    if fwd_path:
        write_csv(summary.forwards, fwd_path)
    report = sys.stderr if to_stdout else sys.stdout
    if args.json:
        priced = out["method"].astype(str)
        doc = {"contracts": summary.contracts, "by_status": summary.by_status, "elapsed_s": summary.elapsed_s,
               "contracts_per_s": summary.contracts_per_s, "device": summary.device, "via": summary.via,
               "methods": {str(k): int(v) for k, v in priced[priced != ""].value_counts().items()},
               "accuracy": args.accuracy,
               "forwards": json.loads(summary.forwards.to_json(orient="records"))}
        if surface is not None:
            doc["surface"] = json.loads(surface.to_json())
        print(json.dumps(doc), file=report)
    else:
        print("\n".join(summary.lines()), file=report)
        print(methods_text(out["method"], args.accuracy), file=report)
        if surface is not None:
            print("\n".join(surface_lines(surface)), file=report)
        for path in filter(None, [None if to_stdout else args.output, fwd_path, args.surface,
                                  *(plots if surface is not None else [])]):
            print(f"wrote {path}", file=report)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("price", help="price a portfolio CSV",
                       description="Price every row of a portfolio CSV with columns "
                                   f"{','.join(PORTFOLIO_COLUMNS)} (style, dividend_yield, method, steps optional; "
                                   f"method auto, binomial, black-scholes, spectral, mlmc or adi, blank = --method; "
                                   f"optional {','.join(OPTIONAL_COLUMNS)}) and "
                                   "an optional dividends column of cash dividends per row, 'YYYY-MM-DD:amount;...' (ex-dates, "
                                   "read against --valuation) or 'years:amount;...' (years from the valuation, as expiry); "
                                   "(a result column whose name is already an input column, such as the Greek theta "
                                   "beside the Heston theta, is written as model_<name>) "
                                   "write it back with price,delta,gamma,theta,vega,rho,dividend_rho,status,error,device,method "
                                   "appended (method: what priced the row; --greeks trader: the Greeks in trader units, "
                                   "their names saying so). "
                                   "A bad row gets status=error and a reason; the rest are priced.")
    p.add_argument("file", help="portfolio CSV")
    p.add_argument("-o", "--output", help="output CSV, written whole or not at all (default or '-': standard output)")
    p.add_argument("--method", default="auto",
                   help="method of rows whose method cell is blank (default auto: spectral for American rows with a "
                        "continuous carry and no cash dividends, binomial for rows with cash dividends, black-scholes "
                        "for European rows); binomial, black-scholes, spectral, mlmc or adi for all of them")
    p.add_argument("--steps", type=int, default=1000, help="CRR steps where the file has none (default 1000)")
    p.add_argument("--no-greeks", action="store_true", help="prices only")
    _add_greeks_flag(p)
    p.add_argument("--eps", type=options.positive, default=0.01, help="MLMC target RMS error (currency units) where the file has none")
    p.add_argument("--seed", type=options.non_negative_int, default=0, help="MLMC random seed (default 0)")
    p.add_argument("--scheme", default="mcs", help="ADI scheme: do, cs, mcs (default) or hv")
    p.add_argument("--grid", type=options.count, nargs=2, default=(160, 80), metavar=("NS", "NV"),
                   help="ADI grid, the fine one of the Richardson pair (default 160 80)")
    p.add_argument("--time-steps", type=options.count, default=50,
                   help="ADI time steps, the least count (default 50; 80 a year of expiry above that)")
    p.add_argument("--adi-single-grid", action="store_true",
                   help="ADI: one grid with exactly --time-steps steps (no Richardson pair, no steps per year)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto", help="where to price (default auto)")
    p.add_argument("--extrapolate", action="store_true",
                   help="binomial rows: the converged tree value (Broadie-Detemple smoothing with Richardson "
                        "extrapolation, BBSR: a tree of N and one of N/2 steps)")
    p.add_argument("--accuracy", choices=("fast", "accurate", "high-precision"), default="accurate",
                   help="spectral rows (method spectral or auto): the engine's accuracy setting (default accurate)")
    p.add_argument("--valuation", metavar="DATE",
                   help="valuation instant of the dividends column's ex-dates: YYYY-MM-DD (its 16:00 New York close) "
                        "or an ISO 8601 timestamp; an ex-date counts from it at 09:30 New York on that day, in "
                        "minutes over 525,600 (the chain's clock); expiry stays in years from it")
    p.add_argument("--allow-errors", action="store_true", help="exit 0 even if some rows failed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while the daemon prices a long file")
    _add_pricer_flags(p)
    p.set_defaults(func=cmd_price)

    c = sub.add_parser("chain", help="implied vols, prices and Greeks for an option chain CSV",
                       description="For every contract of a listed chain (columns of examples/data/*.csv): the mid, "
                                   "the implied volatility (by --method for American contracts, Black-Scholes for "
                                   "European), the model price at that volatility, the Greeks, a status and the "
                                   "method that priced it.")
    c.add_argument("file", help="chain CSV")
    c.add_argument("-o", "--output", help="output CSV, written whole or not at all (default or '-': standard "
                                          "output, the summary then on standard error)")
    c.add_argument("--rate", type=options.annual_decimal, default=chain_job.DEFAULT_RATE,
                   help=f"flat continuously compounded rate, annual decimal, when no --rates curve is given "
                        f"(default {chain_job.DEFAULT_RATE})")
    c.add_argument("--rates", metavar="FILE.csv",
                   help="zero curve: columns days,rate (continuously compounded annual decimals; linear in r*T "
                        "between points, flat beyond the ends)")
    c.add_argument("--carry", choices=chain_job.CARRY_MODES, default="parity",
                   help="parity (default): forward and carry per expiry from the chain itself; flat: --rate and "
                        "--dividend-yield as given")
    c.add_argument("--spot", choices=chain_job.SPOT_MODES, default="implied",
                   help="American chains with --carry parity: implied (default) prices on the spot the front "
                        "expiry's options imply, print on the file's underlying_price")
    c.add_argument("--dividend-yield", type=options.annual_decimal, default=chain_job.DEFAULT_DIVIDEND_YIELD,
                   help=f"continuous dividend yield, annual decimal: the carry of --carry flat, and with --spot "
                        f"implied the carry over the front expiry's few days (default {chain_job.DEFAULT_DIVIDEND_YIELD})")
    c.add_argument("--dividends", metavar="FILE.csv",
                   help="cash dividends: columns ex_date,amount (YYYY-MM-DD, currency units). Each contract's tree "
                        "gets those ex after the quote and before its expiry (at the 09:30 open, the chain's clock); "
                        "the carry solved per expiry is then the residual borrow beyond them, "
                        "q = r - ln(F / (S - PV)) / T, PV in the forwards table")
    c.add_argument("--quote-time", metavar="TIME",
                   help="quote time of rows without a quote_time cell: HH:MM in New York time on the quote date, or "
                        "an ISO 8601 timestamp (default: the 16:00 close)")
    c.add_argument("--settlement", choices=("am", "pm"),
                   help="settlement of rows without a settlement cell: pm (16:00, default) or am (09:30, AM-settled "
                        "index series)")
    c.add_argument("--forwards", metavar="FILE.csv",
                   help="per-expiry forward table (default: <output>.forwards.csv beside --output)")
    c.add_argument("--method", default=chain_job.DEFAULT_METHOD,
                   help="American contracts: auto (default) the spectral engine for those with a continuous carry "
                        "and no cash dividends, the CRR tree for those with cash dividends; binomial the CRR tree "
                        "for all of them (the output's method column says what priced each row)")
    c.add_argument("--accuracy", choices=("fast", "accurate", "high-precision"), default=chain_job.DEFAULT_ACCURACY,
                   help=f"the spectral engine's accuracy setting (default {chain_job.DEFAULT_ACCURACY})")
    c.add_argument("--steps", type=int, default=chain_job.DEFAULT_STEPS,
                   help=f"CRR steps for American contracts on the tree (default {chain_job.DEFAULT_STEPS})")
    c.add_argument("--surface", metavar="FILE.json",
                   help="fit the volatility surface (per expiry an SVI prior and an arbitrage-free correction "
                        "towards the quotes), write it here "
                        "(schema optiond.surface) and add iv_fit, theo, edge and theo_<greek> to the output CSV")
    c.add_argument("--plot", metavar="DIR",
                   help="fit the surface and write its pictures here (PNG: smiles per expiry with the fitted "
                        "range marked, ATM term structure, heatmap over log-moneyness and T); DIR is created if "
                        "needed")
    c.add_argument("--plot-svg", action="store_true", help="with --plot, write each picture as SVG too")
    c.add_argument("--yardstick", action="store_true",
                   help="with --surface or --plot, measure each expiry's best achievable share of near-the-money "
                        "quotes inside their spread (a mixed-integer LP per expiry: seconds each on a large chain) "
                        "and list it, and a warning for each expiry more than 5 points below it, in the summary")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")
    _add_greeks_flag(c)
    _add_pricer_flags(c)
    c.set_defaults(func=cmd_chain)
