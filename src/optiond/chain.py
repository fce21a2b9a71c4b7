"""The main job: from a listed option chain to what a trading desk uses: per-expiry forwards
and carry solved from the chain itself, implied volatilities at bid, mid and ask, the smile IV
per strike, model prices and Greeks.

Input: a CSV with the columns of ``examples/data/*.csv``
(``underlying,quote_date,expiry,type,strike,bid,ask,last,implied_vol,underlying_price,style``)
and optionally ``quote_time`` (ISO 8601 with offset, or ``HH:MM`` exchange time) and
``settlement`` (``am``/``pm``). The job:

1. **Time to expiry** (:mod:`optiond.market.clock`): minutes from the quote instant to the
   settlement instant over 525,600 (Cboe). The quote instant is the row's ``quote_time``, else
   ``quote_time=`` of the call, else 16:00 New York on the quote date; settlement 16:00 (PM)
   or 09:30 (AM). A contract expiring later the same day is priced.
2. **Screening**: ``no-bid`` (bid missing or <= 0), ``no-ask``, ``crossed`` (bid > ask),
   ``expired`` (T <= 0), ``invalid`` (a time cell that does not parse, an underlying cell that
   is not a symbol); mid = (bid + ask) / 2.
3. **Market per underlying and expiry** (:func:`solve_market`, :mod:`optiond.market.forwards`): the rate from
   the curve (``curve=``, flat ``rate`` without one); with ``carry="parity"`` (default) the
   forward and carry from the chain: European expiries by a robust put–call parity fit (also
   the discount factor when no curve is given), American expiries by the residual carry that
   makes call and put American IVs agree near the money (by the chain's method); expiries with too few pairs take the
   carry interpolated in T from their neighbours. ``carry="flat"``: ``rate`` and
   ``dividend_yield`` as given. Each underlying of the file is its own market, solved from its
   own rows (:mod:`optiond.market.underlyings`); a row whose ``underlying`` cell is not a
   symbol is ``invalid``.
4. **Implied volatilities** of the bid, mid and ask (one batched solve per chunk) by the
   chain's method (``method``, :data:`CHAIN_METHODS`): with ``auto`` (default) the spectral
   American engine (Andersen, Lake & Offengenden 2016, a safeguarded Newton on its price) for
   American contracts with a continuous carry and no cash dividends, a bracketed root find on
   the CRR tree price for American contracts with cash dividends (every American contract with
   ``binomial``), the Black–Scholes–Merton closed form for European ones. The output's
   ``method`` column says what priced each row. ``below-intrinsic`` when the mid is under the exercise value,
   ``below-model-bound`` when above it but under the zero-volatility value on the expiry's
   forward, ``no-solution`` when above the highest model value. ``iv_bid`` is empty when the
   bid is under the model's lower bound while the ask solves.
5. **Smile IV** ``iv_otm`` per strike from the out-of-the-money side (the call for K >= F, the
   put for K < F), on both rows of the strike.
6. At the mid IV: the model price and the Greeks.

Pricing goes through a *pricer* (:mod:`optiond.pricer`): :mod:`optiond.engine` in-process or
the daemon client, with the same two calls (``price_table`` and ``implied_vol``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from . import _moved
from . import dividends as dividend_schedules
from . import pricer as _pricer
from .columns import read_csv_table
from .market import clock
from .market import underlyings
from .market.chain_market import ChainMarket
from .market.curve import ZeroCurve
from .market.forwards import (CARRY_PAIRS, IMPLIED_RATE_BAND, MIN_PAIRS_CARRY, ExpiryPairs, call_put_residual,
                              interpolate_in_time, parity_fit, solve_carry)
from .models import AMERICAN, EUROPEAN, GREEK_FIELDS, ImpliedVol, InvalidInputError, Method, auto_methods, object_full

#: default flat rate: about the US Treasury bill yield around the bundled snapshot dates
DEFAULT_RATE = 0.04
#: default dividend yield: the carry of ``carry="flat"``, of a chain with no pair at all, and,
#: with ``spot_mode="implied"``, the carry assumed over the front expiry's few days
DEFAULT_DIVIDEND_YIELD = 0.0
#: default CRR steps for American contracts
DEFAULT_STEPS = 500
#: methods of a chain's American contracts: ``auto`` (default) the spectral engine where it
#: applies (a continuous carry, no cash dividends; :func:`optiond.models.auto_methods`), the
#: CRR tree elsewhere; ``spectral`` the same (the spectral engine sends cash-dividend rows to the
#: tree itself); ``binomial`` the CRR tree for every American contract. European contracts take
#: the closed form (the tree with cash dividends) whatever the method.
CHAIN_METHODS = ("auto", "binomial", "spectral")
DEFAULT_METHOD = "auto"
#: the spectral engine's accuracy setting in a chain: "fast" (worst price error 9e-5 against
#: QuantLib's high-precision engine, :data:`optiond.kernels.spectral.MEASURED_ERROR`), already
#: below the N = 500 tree's own error, and the setting whose implied volatilities cost about what
#: the tree's do (on 2 CPU cores, 400 American options: 2.5 ms an implied volatility against
#: 1.1 ms on the N = 500 tree; "accurate" 69 ms)
DEFAULT_ACCURACY = "fast"
#: carry modes: from the chain (parity fit / carry solve) or flat as given
CARRY_MODES = ("parity", "flat")
#: spot of American chains: implied by the front expiry's options, or the file's print
SPOT_MODES = ("implied", "print")
#: the front expiry that implies the spot: at least this many days and pairs
FRONT_MIN_DAYS, FRONT_MIN_PAIRS = 2.0, 3

#: volatility tolerance of the chain's implied-vol solve (1e-9 moves a price by < 1e-7)
IV_TOLERANCE = 1e-9

CHAIN_COLUMNS = ("underlying", "quote_date", "expiry", "type", "strike", "bid", "ask", "last", "implied_vol",
                 "underlying_price", "style")
#: optional chain columns: the quote instant and the settlement style of each row
OPTIONAL_CHAIN_COLUMNS = ("quote_time", "settlement")
STATUSES = ("ok", "no-bid", "no-ask", "crossed", "below-intrinsic", "below-model-bound", "no-solution",
            "not-converged", "invalid", "expired", "error")
#: columns of the market table (``--forwards`` file): one row per underlying, expiry and settlement
FORWARD_COLUMNS = ("underlying", "expiry", "settlement", "T", "spot", "rate", "discount_factor", "forward", "carry", "method", "pairs",
                   "call_minus_put_iv_pts", "note")
#: the columns :func:`price_chain` appends to the chain, in order: numbers, then labels (with
#: the value most rows hold); the daemon's chain reply and the panel's empty result read them
NUMERIC_OUTPUT_COLUMNS = ("expiry_years", "spot", "rate", "dividend_yield", "forward", "mid", "iv_bid", "iv", "iv_ask",
                          "iv_otm", "model_price") + GREEK_FIELDS
STRING_OUTPUT_COLUMNS = (("status", "ok"), ("error", ""), ("device", ""), ("method", "spectral"))
OUTPUT_COLUMNS = NUMERIC_OUTPUT_COLUMNS + tuple(c for c, _ in STRING_OUTPUT_COLUMNS)


#: ``Pricer`` and ``LocalPricer`` moved to :mod:`optiond.pricer` (the old names warn, one release)
__getattr__ = _moved.names(__name__, {"Pricer": "optiond.pricer:Pricer", "LocalPricer": "optiond.pricer:LocalPricer"})


@dataclass
class ChainSummary:
    """Counts by status, timing, where it ran, and the per-expiry market table."""

    contracts: int
    by_status: dict[str, int]
    elapsed_s: float
    device: str
    via: str
    extra: dict = field(default_factory=dict)
    forwards: pd.DataFrame | None = None
    #: the rows' cash dividend schedules the job priced with, ``(dividend_times,
    #: dividend_amounts)`` float64 (n, m) NaN-padded (years from the quote, currency units), or
    #: None without cash dividends (what the theo prices with, :func:`optiond.surface.theo.apply_surface`)
    dividends: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def contracts_per_s(self) -> float:
        return self.contracts / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    def lines(self) -> list[str]:
        ok = self.by_status.get("ok", 0)
        out = [f"contracts: {self.contracts}   ok: {ok}   failed: {self.contracts - ok}"]
        for k, v in sorted(self.by_status.items(), key=lambda kv: -kv[1]):
            if k != "ok":
                out.append(f"  {k:<18} {v:>6}")
        out.append(f"elapsed: {self.elapsed_s:.3f} s   {self.contracts_per_s:,.0f} contracts/s   device: {self.device} ({self.via})")
        if self.forwards is not None and len(self.forwards):
            notes = self.forwards["note"].astype(str)
            # a note every expiry starts with (the implied spot's) goes in the heading once
            first = notes.str.split("; ").str[0]
            common = first.iat[0] if (first == first.iat[0]).all() else ""
            notes = notes.str[len(common):].str.removeprefix("; ") if common else notes
            out.append("forwards and carry per expiry (rates and carry in %, call-put IV in vol points)"
                       + (f"; {common}:" if common else ":"))
            cash = "pv_dividends" in self.forwards.columns  # then the carry is the borrow beyond them
            names = self.forwards["underlying"].astype(str) if "underlying" in self.forwards else None
            w = int(names.str.len().max()) if names is not None and names.nunique() > 1 else 0  # several: named
            out.append("  " + " " * (w + 1 if w else 0) + f"{'expiry':<10} {'set':<3} {'T (y)':>8} {'spot':>10} {'rate':>6} {'D':>8} "
                       + (f"{'PV divs':>8} " if cash else "") + f"{'forward':>11} {'carry':>7} "
                       f"{'pairs':>5} {'c-p iv':>6}  method")
            for r, own in zip(self.forwards.itertuples(index=False), notes):
                who = f"{str(r.underlying):<{w}} " if w else ""
                out.append(f"  {who}{r.expiry:<10} {r.settlement:<3} {r.T:>8.5f} {r.spot:>10.4f} {100 * r.rate:>6.3f} {r.discount_factor:>8.6f} "
                           + (f"{r.pv_dividends:>8.4f} " if cash else "") +
                           f"{r.forward:>11.4f} {100 * r.carry:>7.3f} {r.pairs:>5d} {r.call_minus_put_iv_pts:>6.2f}  "
                           f"{r.method}{'  (' + own + ')' if own else ''}")
        return out


def labels(column: pd.Series) -> np.ndarray:
    """A label column (``type``, ``style``) stripped and lower-cased, as an object array: each
    distinct cell converted once (a chain repeats two labels thousands of times); a blank cell
    gives ``"nan"`` (no label: neither call nor put, neither style)."""
    which, distinct = pd.factorize(column, use_na_sentinel=True)
    names = np.array([str(v).strip().lower() for v in distinct] + ["nan"], dtype=object)
    return names[which]


def read_chain(path: str) -> pd.DataFrame:
    """Read a chain CSV; columns other than :data:`CHAIN_COLUMNS` and
    :data:`OPTIONAL_CHAIN_COLUMNS` are listed in ``df.attrs["ignored_columns"]``. The cells are
    checked row by row where they are used: an ``underlying`` cell that is not a symbol, or a
    time cell that does not parse, marks its row ``invalid`` (:func:`solve_market`).

    Raises:
        ValueError: missing columns; :class:`optiond.columns.TableFileError` (a ValueError) for
            a file that cannot be read, an empty one, or a column named twice.
    """
    df = read_csv_table(path, CHAIN_COLUMNS + OPTIONAL_CHAIN_COLUMNS)
    missing = [c for c in CHAIN_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing chain columns {missing}; expected {list(CHAIN_COLUMNS)}")
    return df


# ----------------------------------------------------------------------------- market per expiry


def _per_distinct(values: list, fn: Callable[[Any], str], rows: np.ndarray) -> np.ndarray:
    """``fn`` of each value where ``rows`` (an object array, "" elsewhere), computed once per
    distinct value (a chain repeats a few dozen expiries thousands of times)."""
    done: dict[Any, str] = {}
    out = np.full(len(values), "", dtype=object)
    for i in np.flatnonzero(rows).tolist():
        v = values[i]
        if v not in done:
            done[v] = fn(v)
        out[i] = done[v]
    return out


def _two_sided(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bid = pd.to_numeric(df["bid"], errors="coerce").to_numpy(dtype=np.float64)
    ask = pd.to_numeric(df["ask"], errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = (bid > 0) & (ask > 0) & (bid <= ask)
    return bid, ask, ok


def _call_put_rows(group: np.ndarray, kind: np.ndarray, strike: np.ndarray,
                   rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The (expiry group, strike) pairs with both a call and a put among the rows where ``rows``
    is True, sorted by group then strike: ``(group, strike, call_row, put_row)``, each side's
    row the last one in the file at that group and strike."""
    last = []
    for side in ("call", "put"):
        r = np.flatnonzero(rows & (kind == side))
        r = r[np.lexsort((strike[r], group[r]))]  # stable: file order within a (group, strike)
        end = np.ones(r.size, dtype=bool)
        end[:-1] = (group[r[1:]] != group[r[:-1]]) | (strike[r[1:]] != strike[r[:-1]])
        last.append(r[end])
    c, p = last
    _, sid = np.unique(strike[np.concatenate([c, p])], return_inverse=True)
    width = int(sid.max(initial=0)) + 1
    key = group[np.concatenate([c, p])].astype(np.int64) * width + sid
    _, ic, ip = np.intersect1d(key[:c.size], key[c.size:], assume_unique=True, return_indices=True)
    c, p = c[ic], p[ip]
    return group[c], strike[c], c, p


def _expiry_pairs(group: np.ndarray, kind: np.ndarray, strike: np.ndarray, bid: np.ndarray, ask: np.ndarray,
                  two: np.ndarray, E: int) -> list[ExpiryPairs]:
    """Per expiry group 0..E-1, its call/put pairs at common strikes (two-sided quotes only)."""
    g, k, c, p = _call_put_rows(group, kind, strike, two & np.isfinite(strike) & (group >= 0))
    cut = np.searchsorted(g, np.arange(E + 1))
    mid_c, mid_p = 0.5 * (bid[c] + ask[c]), 0.5 * (bid[p] + ask[p])
    spr_c, spr_p = ask[c] - bid[c], ask[p] - bid[p]
    return [ExpiryPairs(k[a:b], mid_c[a:b], mid_p[a:b], spr_c[a:b], spr_p[a:b]) for a, b in zip(cut[:-1], cut[1:])]


def _iv(pricer: _pricer.Pricer, prices: Any, cols: dict, m: Method) -> ImpliedVol:
    """The pricer's implied volatilities as an :class:`ImpliedVol` (also from a pricer that
    answers with the earlier ``(vol, status)`` pair)."""
    return _pricer.implied_vol_result(pricer.implied_vol(prices, cols, m), via=getattr(pricer, "via", "in-process"))


def _iv_solver(pricer: _pricer.Pricer, spot: float, m: Method,
               schedules: dict[float, tuple[np.ndarray, np.ndarray]] | None = None) -> Callable:
    """The carry search's batched American IV solve, through the chain's pricer, by the chain's
    American method ``m`` (:func:`american_method`); ``schedules`` maps an expiry's T (years, as
    the search passes it) to its cash dividends (times, amounts)."""

    def solve(prices, kind, T, rate, q, strike, lo=None, hi=None, spot=spot):
        cols = dict(kind=np.where(kind == 1, "call", "put").astype(object), style="american", spot=spot, strike=strike,
                    expiry=T, rate=rate, dividend_yield=q)
        if schedules:
            per_row = [schedules[t] for t in np.broadcast_to(np.asarray(T, dtype=np.float64), np.shape(strike)).tolist()]
            cols["dividend_times"] = np.stack([t for t, _ in per_row])
            cols["dividend_amounts"] = np.stack([a for _, a in per_row])
        if lo is not None:
            cols.update(iv_lo=lo, iv_hi=hi)
        iv = _iv(pricer, prices, cols, m)
        return iv.vol, iv.status == "ok"

    return solve


def american_method(method: str = DEFAULT_METHOD, steps: int = DEFAULT_STEPS,
                    accuracy: str = DEFAULT_ACCURACY) -> Method:
    """The method of a chain's American implied volatilities and prices: ``method`` (one of
    :data:`CHAIN_METHODS`) with the chain's steps, accuracy and :data:`IV_TOLERANCE`.

    Raises:
        ValueError: a method not in :data:`CHAIN_METHODS` or an unknown accuracy setting
            (one line naming it and the choices).
    """
    if method not in CHAIN_METHODS:
        raise ValueError(f"method {method!r}: expected one of {list(CHAIN_METHODS)}")
    try:
        return Method(name=method, steps=steps, iv_tolerance=IV_TOLERANCE, accuracy=accuracy)
    except InvalidInputError as e:
        raise ValueError(f"{e.field} {e.value!r}: {e.reason}") from None


def row_methods(style: np.ndarray, dividend_times: np.ndarray | None, m_american: Method) -> np.ndarray:
    """The method that prices each row of a chain, an object array (n,): ``black-scholes``
    (European rows without cash dividends), ``binomial`` (rows with cash dividends, the closed
    form having none; every American row with ``m_american`` the tree) or ``spectral``.

    Args:
        style: (n,) style labels (:func:`labels`; every one but ``european`` is American).
        dividend_times: the rows' cash dividend times, (n, m) with NaN padding, or None.
        m_american: the chain's American method (:func:`american_method`).
    """
    n = len(style)
    cash = (np.isfinite(dividend_times).any(axis=1) if dividend_times is not None and np.size(dividend_times)
            else np.zeros(n, dtype=bool))
    if m_american.name == "binomial":
        return np.where((style == "european") & ~cash, "black-scholes", "binomial").astype(object)
    return auto_methods(np.where(style == "european", EUROPEAN, AMERICAN), cash)


def check_market_args(*, carry: str = "parity", quote_time: str | None = None, settlement: str | None = None,
                      spot_mode: str = "implied", rate: float = DEFAULT_RATE,
                      dividend_yield: float = DEFAULT_DIVIDEND_YIELD) -> None:
    """Check the chain-wide market arguments of :func:`solve_market`.

    Raises:
        ValueError: an unknown carry mode, a quote time or settlement that does not parse, or a
            rate or dividend yield that is not a finite number.
    """
    for name, v in (("rate", rate), ("dividend_yield", dividend_yield)):
        try:
            finite = math.isfinite(v)
        except TypeError:
            finite = False
        if not finite:
            raise ValueError(f"{name} {v!r}: not a finite number (annual decimal)")
    if carry not in CARRY_MODES:
        raise ValueError(f"carry {carry!r}: expected one of {CARRY_MODES}")
    if spot_mode not in SPOT_MODES:
        raise ValueError(f"spot {spot_mode!r}: expected one of {SPOT_MODES}")
    if quote_time not in (None, ""):
        clock.check_quote_time(quote_time)
    if settlement not in (None, ""):
        clock.settlement_style(settlement)


def _implied_spot(american: list[int], pairs: list[ExpiryPairs], Tg: np.ndarray, rg: np.ndarray, q0: np.ndarray,
                  S_print: float, dividend_yield: float, pricer: _pricer.Pricer, m: Method,
                  schedules: dict | None = None) -> tuple[float, str]:
    """The spot the options imply: the spot at which the front expiry (the shortest of at least
    :data:`FRONT_MIN_DAYS` days with :data:`FRONT_MIN_PAIRS` pairs) has the carry
    ``dividend_yield``: its call and put tree IVs agree there (the carry solve's condition with
    the spot as the unknown, :func:`optiond.market.forwards.solve_carry` with ``spot_carry``),
    searched from the spot of its put–call parity forward (which leaves out only the
    early-exercise premium); the IVs by the chain's American method ``m``. Returns ``(spot, note)``; the print when no expiry qualifies or the
    solve fails."""
    cands = [g for g in american if Tg[g] * 365.0 >= FRONT_MIN_DAYS and len(pairs[g]) >= FRONT_MIN_PAIRS
             and np.isfinite(q0[g])]
    if not cands:
        return S_print, "spot: the print (no front expiry to imply it from)"
    g = min(cands, key=lambda i: Tg[i])
    r = solve_carry([pairs[g]], S_print, Tg[[g]], rg[[g]], q0[[g]], _iv_solver(pricer, S_print, m, schedules),
                    spot_carry=dividend_yield)[0]
    if not r.converged:
        return S_print, "spot: the print (front-expiry solve failed)"
    S = S_print * math.exp((dividend_yield - r.q) * Tg[g])
    return S, f"spot {S:.4f} implied by the {365.0 * Tg[g]:.1f}-day forward (print {S_print:g})"


def residual_carry(forward: Any, spot: Any, pv_dividends: Any, rate: Any, T: Any) -> Any:
    """The continuous carry left once the cash dividends are in the tree: the ``q`` of
    ``F = (S - PV) exp((r - q) T)``, i.e. ``q = r - ln(F / (S - PV)) / T`` (annual decimal; NaN
    where ``S - PV <= 0``). ``PV`` is the present value of the dividends ex before the expiry,
    each discounted at the expiry's rate ``r`` (the rate its tree prices with); 0 without
    dividends gives the plain carry ``r - ln(F / S) / T``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return rate - np.log(forward / (spot - pv_dividends)) / T


def solve_market(df: pd.DataFrame, pricer: _pricer.Pricer | None = None, *, rate: float = DEFAULT_RATE,
                 dividend_yield: float = DEFAULT_DIVIDEND_YIELD, curve: ZeroCurve | None = None,
                 carry: str = "parity", quote_time: str | None = None, settlement: str | None = None,
                 spot_mode: str = "implied", steps: int = DEFAULT_STEPS,
                 dividends: pd.DataFrame | None = None, method: str = DEFAULT_METHOD,
                 accuracy: str = DEFAULT_ACCURACY) -> ChainMarket:
    """Time to expiry, rate, forward and carry for every row of a chain.

    Args:
        df: the chain (columns :data:`CHAIN_COLUMNS`, optional :data:`OPTIONAL_CHAIN_COLUMNS`).
        pricer: prices the American carry solve's implied volatilities (default in-process).
        rate: flat continuously compounded rate (annual decimal), used when ``curve`` is None.
        dividend_yield: the carry of ``carry="flat"`` (annual decimal); with ``spot_mode="implied"``
            also the carry assumed over the front expiry's few days.
        curve: a zero curve (:class:`optiond.market.curve.ZeroCurve`); European expiries then
            take D from it and fit F only (Cboe's rule), instead of fitting both.
        carry: ``"parity"`` (from the chain) or ``"flat"``.
        spot_mode: for American expiries under ``carry="parity"``: ``"implied"`` (default)
            prices on the spot the front expiry's options imply (:func:`_implied_spot`), so a
            print that is stale against the option quotes moves neither the early-exercise
            values nor the carries; ``"print"`` keeps the file's ``underlying_price``.
        quote_time: the quote time of rows without a ``quote_time`` cell (``HH:MM`` exchange
            time or ISO 8601); None: 16:00 New York on the quote date.
        settlement: ``"am"``/``"pm"`` for rows without a ``settlement`` cell (None: pm).
        steps: CRR steps of the carry solve's tree IVs (those of the chain's pricing).
        method, accuracy: the American method of the carry solve's IVs (:func:`american_method`,
            those of the chain's pricing).
        dividends: cash dividends (``ex_date``, ``amount`` rows,
            :func:`optiond.dividends.read_dividend_file`), or None. Each row gets those ex after
            its quote instant and before its expiry (:func:`optiond.dividends.chain_schedules`,
            the chain's clock); they go into the tree, and the carry solved per expiry is the
            residual borrow on top of them (:func:`residual_carry`): the forward is
            ``F = (S - PV) exp((r - q) T)``, PV the dividends' present value at the expiry's
            rate (the table's ``pv_dividends`` column), and the carry search prices its trees
            with the dividends.

    Each underlying of the chain (:mod:`optiond.market.underlyings`) has its own market, solved
    on its rows alone: its spot, rates, forwards and carries, and its rows of the table (whose
    first column names it). A row whose ``underlying`` cell is not a symbol has no market: its
    ``clock_error`` says why (the row is ``invalid``).

    Returns:
        :class:`ChainMarket`.

    Raises:
        ValueError: an unknown ``carry`` mode or ``method``, a ``quote_time``/``settlement``
            argument that does not parse, or ``dividends`` for a chain of several underlyings
            (a bad *cell* only marks its row).
    """
    check_market_args(carry=carry, quote_time=quote_time, settlement=settlement, spot_mode=spot_mode, rate=rate,
                      dividend_yield=dividend_yield)
    m_american = american_method(method, steps, accuracy)
    pricer = pricer or _pricer.LocalPricer()
    kw = dict(rate=rate, dividend_yield=dividend_yield, curve=curve, carry=carry, quote_time=quote_time,
              settlement=settlement, spot_mode=spot_mode, dividends=dividends)
    return underlyings.solve_each(df, lambda part: _solve_underlying(part, pricer, m_american, **kw),
                                  one_only="a dividend file" if dividends is not None else "",
                                  table_columns=list(FORWARD_COLUMNS))


def _solve_underlying(df: pd.DataFrame, pricer: _pricer.Pricer, m_american: Method, *, rate: float,
                      dividend_yield: float, curve: ZeroCurve | None, carry: str, quote_time: str | None,
                      settlement: str | None, spot_mode: str, dividends: pd.DataFrame | None) -> ChainMarket:
    """:func:`solve_market` of a chain of one underlying (its table without the ``underlying``
    column)."""
    n = len(df)
    qt = df["quote_time"].where(df["quote_time"].notna(), quote_time).tolist() if "quote_time" in df else quote_time
    st = df["settlement"].where(df["settlement"].notna(), settlement).tolist() if "settlement" in df else settlement
    T, stamps, clock_error = clock.expiry_years(df["quote_date"].tolist(), df["expiry"].tolist(), qt, st)
    live = np.isfinite(T) & (T > 0)  # the time cells parsed (so do the expiry and settlement)
    settle = _per_distinct(st if isinstance(st, list) else [st] * n, clock.settlement_style, live)
    expiry = _per_distinct(df["expiry"].tolist(), lambda x: pd.Timestamp(x).date().isoformat(), live)
    kind, style = labels(df["type"]), labels(df["style"])
    spot = pd.to_numeric(df["underlying_price"], errors="coerce").to_numpy(dtype=np.float64)
    strike = pd.to_numeric(df["strike"], errors="coerce").to_numpy(dtype=np.float64)
    bid, ask, two = _two_sided(df)
    keys = sorted({(expiry[i], settle[i]) for i in np.flatnonzero(live)}, key=lambda k: (k[0], k[1] == "pm"))
    gid = {k: g for g, k in enumerate(keys)}
    group = np.array([gid.get((expiry[i], settle[i]), -1) if live[i] else -1 for i in range(n)], dtype=np.int64)
    E = len(keys)
    members = [np.flatnonzero(group == g) for g in range(E)]
    Tg = np.array([float(np.median(T[m])) for m in members])
    printed = np.isfinite(spot) & (spot > 0)  # a blank, zero or negative print is no spot
    Sg = np.array([float(np.median(spot[m[printed[m]]])) if printed[m].any() else np.nan for m in members])
    european = np.array([bool(np.all(style[m] == "european")) for m in members], dtype=bool)
    flat = curve or ZeroCurve.flat(rate)
    rg = flat.zero_rate(Tg) if E else np.empty(0)
    qg = np.full(E, float(dividend_yield))
    solved = np.zeros(E, dtype=bool)
    method = np.array(["flat"] * E, dtype=object)
    pairs_used = np.zeros(E, dtype=np.int64)
    note = np.array([""] * E, dtype=object)
    few = np.zeros(E, dtype=bool)  # too few pairs to solve (else: solved, or the solve failed)
    spot_note = ""
    cash = dividends is not None
    div_t = div_a = schedules = None
    gt, ga = np.full((E, 1), np.nan), np.zeros((E, 1))  # each expiry's dividends (from its first row's quote)
    if cash:
        div_t, div_a = dividend_schedules.chain_schedules(dividends, stamps, T)
        if E:
            gt, ga = dividend_schedules.chain_schedules(dividends, [stamps[m[0]] for m in members], Tg,
                                                            width=None)
        schedules = {float(Tg[g]): (gt[g], ga[g]) for g in range(E)}
    fwd_parity = np.full(E, np.nan)
    if carry == "parity" and E:
        pairs = _expiry_pairs(group, kind, strike, bid, ask, two, E)
        american: list[int] = []
        q0 = np.full(E, np.nan)
        for g in range(E):
            p = pairs[g]
            if not np.isfinite(Sg[g]):
                note[g] = "no underlying price (blank, zero or negative in every row)"
                continue
            fixed_d = math.exp(-rg[g] * Tg[g])
            try:
                if european[g] and curve is None:
                    fit = parity_fit(p, Tg[g])
                    r_imp = -math.log(fit.discount) / Tg[g] if fit.discount > 0 else math.inf
                    if IMPLIED_RATE_BAND[0] <= r_imp <= IMPLIED_RATE_BAND[1]:
                        rg[g], method[g] = r_imp, "parity fit (F, D)"
                    else:
                        note[g] = (f"implied rate {100 * r_imp:.2f} % off the band: D from the flat rate" if fit.discount > 0
                                   else f"fitted discount factor {fit.discount:.3g} <= 0: D from the flat rate")
                        fit = parity_fit(p, Tg[g], fixed_d)
                        method[g] = "parity fit (F; D from rate)"
                else:
                    fit = parity_fit(p, Tg[g], fixed_d)
                    method[g] = "parity fit (F; D from curve)" if curve is not None else "parity fit (F; D from rate)"
            except ValueError as e:
                note[g], few[g] = str(e), True
                continue
            if not (np.isfinite(fit.forward) and fit.forward > 0):
                note[g] = f"the parity fit gave no positive forward ({fit.forward:.6g})"
                continue
            pv = float(dividend_schedules.present_value(gt[g], ga[g], rg[g])[0]) if cash else 0.0
            if not Sg[g] - pv > 0:
                note[g] = f"the dividends' present value {pv:.6g} is not below the spot {Sg[g]:.6g}"
                continue
            q_parity = rg[g] - math.log(fit.forward / (Sg[g] - pv)) / Tg[g]
            fwd_parity[g] = fit.forward
            pairs_used[g] = fit.pairs
            if european[g]:
                qg[g], solved[g] = q_parity, True
            else:
                q0[g] = q_parity
                american.append(g)
        if american:
            S_print = float(np.median(Sg[american]))
            S_used = S_print
            if spot_mode == "implied":
                S_used, spot_note = _implied_spot(american, pairs, Tg, rg, q0, S_print, float(dividend_yield), pricer,
                                                  m_american, schedules)
                # every American expiry prices on it, those without a parity fit too (their carry is
                # interpolated from expiries solved at this spot)
                Sg[~european] = S_used
                if cash:  # the parity forward's residual carry at the implied spot
                    q0[american] = residual_carry(fwd_parity[american], S_used, dividend_schedules.present_value(
                        gt[american], ga[american], rg[american]), rg[american], Tg[american])
                else:
                    q0[american] = q0[american] + np.log(S_used / S_print) / Tg[american]
            res = solve_carry([pairs[g] for g in american], S_used, Tg[american], rg[american], q0[american],
                              _iv_solver(pricer, S_used, m_american, schedules))
            for g, r in zip(american, res):
                pairs_used[g] = r.pairs
                if r.converged:
                    qg[g], solved[g], method[g] = r.q, True, "carry solve (call/put IVs agree)"
                else:
                    note[g] = "; ".join(x for x in (note[g], r.note) if x)
                    few[g] = r.pairs < MIN_PAIRS_CARRY
        for eu in (True, False):  # interpolate within the same exercise style
            sel = european == eu
            todo = sel & ~solved
            if not todo.any():
                continue
            if (sel & solved).any():
                idx = np.flatnonzero(sel)
                qg[idx] = interpolate_in_time(Tg[idx], qg[idx], solved[idx])
                if eu and curve is None:
                    rg[idx] = interpolate_in_time(Tg[idx], rg[idx], solved[idx])
                method[todo] = "interpolated"
                note[todo] = [("too few pairs" if f_ else "not solved") + ": carry interpolated" + (f" ({n_})" if n_ else "")
                              for f_, n_ in zip(few[todo], note[todo])]
            else:
                method[todo] = "flat (no pair solved)"
        if spot_note:  # the spot of every American expiry, before its own notes
            note[~european] = ["; ".join(x for x in (spot_note, n_) if x) for n_ in note[~european]]
    Dg = np.exp(-rg * Tg)
    pvg = dividend_schedules.present_value(gt, ga, rg) if cash and E else np.zeros(E)
    Fg = (Sg - pvg) * np.exp((rg - qg) * Tg) if cash else Sg * np.exp((rg - qg) * Tg)
    table = pd.DataFrame({"expiry": [k[0] for k in keys], "settlement": [k[1] for k in keys], "T": Tg, "spot": Sg,
                          "rate": rg,
                          "discount_factor": Dg, "forward": Fg, "carry": qg, "method": method, "pairs": pairs_used,
                          "call_minus_put_iv_pts": np.full(E, np.nan), "note": note}, columns=list(FORWARD_COLUMNS[1:]))
    if cash:  # the carry is then the residual borrow on top of these dividends
        table.insert(table.columns.get_loc("forward"), "pv_dividends", pvg)
    r_row = np.full(n, np.nan)
    q_row = np.full(n, np.nan)
    has = group >= 0
    r_row[has], q_row[has] = rg[group[has]], qg[group[has]]
    s_row = spot.copy()
    s_row[has] = Sg[group[has]]
    with np.errstate(invalid="ignore"):
        f_row = s_row * np.exp((r_row - q_row) * T)
        if cash:
            f_row = (s_row - dividend_schedules.present_value(div_t, div_a, r_row)) * np.exp((r_row - q_row) * T)
    return ChainMarket(T, s_row, r_row, q_row, f_row, group, clock_error, table, div_t, div_a)


# ----------------------------------------------------------------------------- pricing


def _screen(df: pd.DataFrame, market: ChainMarket) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Quote screening: returns (status, error, bid, ask, mid)."""
    n = len(df)
    status = object_full(n, "ok")
    error = np.array(market.clock_error, dtype=object) if n else object_full(0, "")
    bid, ask, _ = _two_sided(df)
    T = market.T
    with np.errstate(invalid="ignore"):
        status[error != ""] = "invalid"
        status[(status == "ok") & ~(T > 0)] = "expired"
        status[(status == "ok") & ~(ask > 0)] = "no-ask"
        status[(status == "ok") & ~(bid > 0)] = "no-bid"
        status[(status == "ok") & (bid > ask)] = "crossed"
    return status, error, bid, ask, 0.5 * (bid + ask)


def _explain_below(rows: np.ndarray, status: np.ndarray, error: np.ndarray, kind: np.ndarray, spot: np.ndarray,
                   strike: np.ndarray, mid: np.ndarray, market: ChainMarket) -> None:
    """Split the model's "below its lowest value" answer into truly below intrinsic, and
    above intrinsic but below the zero-volatility value on the expiry's forward."""
    if rows.size == 0:
        return
    intrinsic = np.where(kind[rows] == "call", spot[rows] - strike[rows], strike[rows] - spot[rows]).clip(0.0)
    for r, intr in zip(rows.tolist(), intrinsic.tolist()):
        if mid[r] < intr:
            error[r] = f"mid {mid[r]:.6g} < intrinsic {intr:.6g}"
        else:
            status[r] = "below-model-bound"
            error[r] = (f"mid {mid[r]:.6g} is above intrinsic {intr:.6g} but below the zero-volatility value on the "
                        f"forward {market.forward[r]:.6g} (rate={market.rate[r]:.6g}, carry={market.dividend_yield[r]:.6g})")


def _bid_ask_brackets(bsel: np.ndarray, asel: np.ndarray, iv: np.ndarray, mid: np.ndarray, bid: np.ndarray,
                      ask: np.ndarray, vega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Volatility brackets that hold the bid's and the ask's implied volatility: below (above)
    the mid's by about twice the half-spread over the vega, capped at the mid's volatility on
    the other side; NaN (the full bracket) where the mid has no volatility or vega. Only a hint:
    the root find widens it when the root lies outside (:func:`optiond.engine.implied_vol`)."""
    out = []
    for rows, px, sign in ((bsel, bid, -1.0), (asel, ask, 1.0)):
        with np.errstate(invalid="ignore", divide="ignore"):
            w = 2.0 * np.abs(mid[rows] - px[rows]) / vega[rows] + 0.002
            ok = np.isfinite(iv[rows]) & np.isfinite(w) & (vega[rows] > 0)
            far = iv[rows] + sign * w
        lo = np.where(ok, np.minimum(iv[rows], far), np.nan)
        hi = np.where(ok, np.maximum(iv[rows], far), np.nan)
        out.append((np.where(lo > 0, lo, np.nan), np.where(lo > 0, hi, np.nan)))
    return np.concatenate([out[0][0], out[1][0]]), np.concatenate([out[0][1], out[1][1]])


def _smile_iv(kind: np.ndarray, strike: np.ndarray, iv: np.ndarray, market: ChainMarket) -> np.ndarray:
    """``iv_otm``: per (expiry, strike), the call's IV where K >= F, the put's where K < F."""
    otm_side = np.where(strike >= market.forward, "call", "put")
    own = np.where(kind == otm_side, iv, np.nan)
    order = np.lexsort((strike, market.group))  # rows of one (expiry, strike) next to each other
    g, k = market.group[order], strike[order]
    start = np.ones(order.size, dtype=bool)
    start[1:] = (g[1:] != g[:-1]) | ~((k[1:] == k[:-1]) | (np.isnan(k[1:]) & np.isnan(k[:-1])))
    first = np.flatnonzero(start)
    with np.errstate(invalid="ignore"):
        best = np.fmax.reduceat(own[order], first) if order.size else own[:0]  # NaN only where all are
    out = np.empty_like(own)
    out[order] = np.repeat(best, np.diff(np.append(first, order.size)))
    return out


def _residuals(market: ChainMarket, kind: np.ndarray, strike: np.ndarray, iv: np.ndarray, status: np.ndarray) -> None:
    """Fill the table's call-put IV residual (vol points): the vega-weighted median of
    ``iv_call - iv_put`` over each expiry's :data:`CARRY_PAIRS` strike pairs nearest its
    forward where both sides solved (:func:`optiond.market.forwards.call_put_residual`)."""
    table = market.table
    res = np.full(len(table), np.nan)
    ok = (status == "ok") & (market.group >= 0) & np.isfinite(iv)
    g, k, c, p = _call_put_rows(market.group, kind, strike, ok)
    cut = np.searchsorted(g, np.arange(len(table) + 1))
    for e in np.flatnonzero(np.diff(cut)).tolist():
        a, b = cut[e], cut[e + 1]
        res[e] = 100.0 * call_put_residual(k[a:b], iv[c[a:b]], iv[p[a:b]], table.forward.iat[e], table["T"].iat[e],
                                           CARRY_PAIRS)
    table["call_minus_put_iv_pts"] = res


def finish_chain(out: pd.DataFrame, market: ChainMarket) -> pd.DataFrame:
    """The results that need every row of an expiry at once: ``iv_otm`` (the smile IV of each
    strike, from its out-of-the-money side) and the per-expiry call-put IV residual of
    ``market.table`` (``call_minus_put_iv_pts``).

    :func:`price_chain` calls it on its output; a caller that prices a chain in parts
    (:meth:`ChainMarket.take` of one whole-chain market per part) calls it again on the
    concatenated parts, whose smile and residuals each part saw only in part.

    Args:
        out: priced rows (:func:`price_chain`'s output, or its parts concatenated in the
            order of ``market``'s rows): columns ``type``, ``strike``, ``iv``, ``status``.
        market: the market of exactly these rows, in order (shape (len(out),) arrays).

    Returns:
        ``out`` with ``iv_otm`` (re)computed (in place); ``market.table`` updated in place.

    Raises:
        ValueError: ``out`` and ``market`` differ in length.
    """
    if len(out) != market.T.shape[0]:
        raise ValueError(f"{len(out)} priced rows for a market of {market.T.shape[0]}")
    kind = labels(out["type"])
    strike = pd.to_numeric(out["strike"], errors="coerce").to_numpy(dtype=np.float64)
    iv = pd.to_numeric(out["iv"], errors="coerce").to_numpy(dtype=np.float64)
    status = out["status"].to_numpy(dtype=object)
    _residuals(market, kind, strike, iv, status)
    out["iv_otm"] = _smile_iv(kind, strike, np.where(status == "ok", iv, np.nan), market)
    return out


def price_chain(df: pd.DataFrame, pricer: _pricer.Pricer | None = None, *, rate: float = DEFAULT_RATE,
                dividend_yield: float = DEFAULT_DIVIDEND_YIELD, steps: int = DEFAULT_STEPS,
                curve: ZeroCurve | None = None, carry: str = "parity", quote_time: str | None = None,
                settlement: str | None = None, spot_mode: str = "implied", market: ChainMarket | None = None,
                chunk: int = 8192, progress: Callable[[int], None] | None = None,
                finish: bool = True, dividends: pd.DataFrame | None = None, method: str = DEFAULT_METHOD,
                accuracy: str = DEFAULT_ACCURACY) -> tuple[pd.DataFrame, ChainSummary]:
    """Market inputs per expiry, implied volatilities at bid/mid/ask, smile IVs, model prices
    and Greeks for every contract of a chain.

    Args:
        df: the chain (columns :data:`CHAIN_COLUMNS`), one row per contract.
        pricer: in-process engine (default) or a daemon client.
        rate, dividend_yield, curve, carry, quote_time, settlement, spot_mode: the market set-up, as
            :func:`solve_market` (ignored when ``market`` is given).
        steps: CRR steps for American contracts on the tree (European ones use the closed form).
        method: the American contracts' method (:data:`CHAIN_METHODS`): ``auto`` (default) the
            spectral engine (Andersen, Lake & Offengenden 2016) for American contracts with a
            continuous carry and no cash dividends, the CRR tree for those with cash dividends;
            ``binomial`` the tree for all of them. The implied volatilities, the model price and
            the Greeks, and the carry solve's IVs, all use it.
        accuracy: the spectral engine's accuracy setting (default :data:`DEFAULT_ACCURACY`).
        market: market inputs already solved for these rows (:func:`solve_market`, or
            :meth:`ChainMarket.take` of a whole chain's when pricing it in parts).
        chunk: contracts per pricing request (bounds request size and drives progress; a GPU
            solves a chunk's implied volatilities in one Brent loop, so larger is faster there).
        progress: called with the number of contracts finished after each chunk.
        finish: compute ``iv_otm`` and the table's call-put residuals (:func:`finish_chain`);
            False for a part of a chain, whose caller finishes the whole (``iv_otm`` NaN here).
        dividends: cash dividends (``ex_date``, ``amount``), as :func:`solve_market`: they go
            into every contract's tree (European contracts with a dividend before expiry are
            then priced on the CRR tree too, the closed form having no cash dividends), and
            ``dividend_yield`` is the residual borrow on top of them.

    Returns:
        ``(out, summary)``: ``out`` is ``df`` with ``expiry_years, spot, rate, dividend_yield,
        forward, mid, iv_bid, iv, iv_ask, iv_otm, model_price, delta, gamma, theta, vega, rho,
        status, error, device, method`` appended (``method``: what priced the row,
        :func:`optiond.engine.row_methods`: ``spectral``, ``binomial`` or ``black-scholes``,
        after the spectral engine's own closed-form and tree rows; empty where not ok) (every input row kept, in order; volatilities as
        annualised decimals); ``summary`` counts statuses, times the run and carries the
        per-expiry table (:data:`FORWARD_COLUMNS`) in ``summary.forwards``.

    Raises:
        ValueError: as :func:`solve_market` for a bad market set-up argument or method.
    """
    from . import engine  # what prices each row (the engine's own choice)

    pricer = pricer or _pricer.LocalPricer()
    t0 = time.perf_counter()
    m_american = american_method(method, steps, accuracy)
    if market is None:
        market = solve_market(df, pricer, rate=rate, dividend_yield=dividend_yield, curve=curve, carry=carry,
                              quote_time=quote_time, settlement=settlement, spot_mode=spot_mode, steps=steps,
                              dividends=dividends, method=method, accuracy=accuracy)
    market_s = time.perf_counter() - t0
    n = len(df)
    status, error, bid, ask, mid = _screen(df, market)
    T = market.T
    iv, iv_bid, iv_ask = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    res_cols = {k: np.full(n, np.nan) for k in ("model_price",) + GREEK_FIELDS}
    kind, style = labels(df["type"]), labels(df["style"])
    spot = market.spot
    strike = pd.to_numeric(df["strike"], errors="coerce").to_numpy(dtype=np.float64)
    method_name = row_methods(style, market.dividend_times, m_american)
    priced_by = object_full(n, "")
    device, via = "cpu", getattr(pricer, "via", "in-process")
    with np.errstate(invalid="ignore"):
        live = np.isfinite(T) & (T > 0) & (market.group >= 0)
        side_ok = live & (status != "invalid")
        bid_rows = side_ok & (bid > 0) & ~(bid > ask)
        ask_rows = side_ok & (ask > 0) & ~(bid > ask)
    todo = np.flatnonzero((status == "ok") | bid_rows | ask_rows)
    done = n - todo.size
    if progress:
        progress(done)
    for start in range(0, todo.size, chunk):
        rows = todo[start:start + chunk]
        for name in ("spectral", "binomial", "black-scholes"):
            sel = rows[method_name[rows] == name]
            if sel.size == 0:
                continue
            m = Method(name=name, steps=steps, iv_tolerance=IV_TOLERANCE, accuracy=m_american.accuracy)

            def cols_of(r: np.ndarray, **extra) -> dict:
                return dict(kind=kind[r], style=style[r], spot=spot[r], strike=strike[r], expiry=T[r],
                            rate=market.rate[r], dividend_yield=market.dividend_yield[r],
                            **market.dividend_columns(r), **extra)

            # 1. the mid's implied volatility, then the model price and Greeks there
            msel = sel[status[sel] == "ok"]
            if msel.size:
                mid_iv = _iv(pricer, mid[msel], cols_of(msel), m)
                mvol = mid_iv.vol
                iv[msel] = mvol
                bad = mid_iv.status != "ok"
                status[msel[bad]] = mid_iv.status[bad]
                error[msel[bad]] = mid_iv.error[bad]
                _explain_below(msel[bad & (mid_iv.status == "below-intrinsic")], status, error, kind, spot, strike, mid,
                               market)
                good = msel[~bad]
                if good.size:
                    res = pricer.price_table(cols_of(good, volatility=mvol[~bad]), m)
                    res_cols["model_price"][good] = res.price
                    for g in GREEK_FIELDS:
                        res_cols[g][good] = getattr(res, g)
                    failed = np.flatnonzero(res.status != "ok")
                    status[good[failed]] = "error"
                    error[good[failed]] = res.error[failed]
                    device, via = res.device, getattr(res, "via", via)
                    priced_by[good] = engine.row_methods(cols_of(good), m)
            # 2. bid and ask together, each bracketed next to the mid's volatility where it has one
            bsel, asel = sel[bid_rows[sel]], sel[ask_rows[sel]]
            both = np.concatenate([bsel, asel])
            if both.size:
                lo, hi = _bid_ask_brackets(bsel, asel, iv, mid, bid, ask, res_cols["vega"])
                side_iv = _iv(pricer, np.concatenate([bid[bsel], ask[asel]]), cols_of(both, iv_lo=lo, iv_hi=hi), m)
                vol = np.where(side_iv.status == "ok", side_iv.vol, np.nan)
                iv_bid[bsel], iv_ask[asel] = vol[:bsel.size], vol[bsel.size:]
        done += rows.size
        if progress:
            progress(done)
    ok = status == "ok"
    out = df.copy()
    out["expiry_years"] = T
    out["spot"] = market.spot
    out["rate"] = market.rate
    out["dividend_yield"] = market.dividend_yield
    out["forward"] = market.forward
    out["mid"] = mid
    out["iv_bid"] = iv_bid
    out["iv"] = iv
    out["iv_ask"] = iv_ask
    out["iv_otm"] = np.nan  # filled by finish_chain, here to keep the column order
    for k, v in res_cols.items():
        out[k] = v
    out["status"] = status
    out["error"] = error
    out["device"] = np.where(ok, device, "")
    out["method"] = np.where(ok, priced_by, "")
    if finish:
        finish_chain(out, market)
    counts = pd.Series(status).value_counts().to_dict()
    summary = ChainSummary(n, {str(k): int(v) for k, v in counts.items()}, time.perf_counter() - t0, device, via,
                           extra={"market_s": market_s}, forwards=market.table,
                           dividends=(None if market.dividend_times is None
                                      else (market.dividend_times, market.dividend_amounts)))
    return out, summary
