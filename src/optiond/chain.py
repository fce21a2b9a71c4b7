"""The main job: implied volatilities, model prices and Greeks for every contract of a listed
option chain.

Input: a CSV with the columns of ``examples/data/*.csv``
(``underlying,quote_date,expiry,type,strike,bid,ask,last,implied_vol,underlying_price,style``).
For every contract:

1. ``expiry_years`` = calendar days from quote date to expiry / 365 (ACT/365);
2. the quote is screened: ``no-bid`` (bid missing or <= 0), ``no-ask``, ``crossed``
   (bid > ask); the mid is (bid + ask) / 2;
3. the implied volatility of the mid is solved by a bracketed root find on the CRR tree price
   (American exercise, for equity and ETF options) or on the Black–Scholes–Merton closed form
   (European, e.g. SPX); ``below-intrinsic`` when the mid is below the lowest value the model
   can give (e.g. intrinsic), ``no-solution`` when above the highest;
4. at that volatility the model price and the Greeks are computed.

The rate and dividend yield are flat, continuously compounded inputs (defaults below). Pricing
goes through a *pricer*: :class:`optiond.engine` in-process or the daemon client, which has
the same two calls (``price_table`` and ``implied_vol``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import numpy as np
import pandas as pd

from . import engine
from .columns import read_csv_table
from .models import GREEK_FIELDS, Method, Result, object_full

#: default flat rate: about the US Treasury bill yield around the bundled snapshot dates
DEFAULT_RATE = 0.04
#: default dividend yield: none (pass the underlying's yield, e.g. 0.011 for SPY)
DEFAULT_DIVIDEND_YIELD = 0.0
#: default CRR steps for American contracts
DEFAULT_STEPS = 500

#: volatility tolerance of the chain's implied-vol solve (1e-9 moves a price by < 1e-7)
IV_TOLERANCE = 1e-9

CHAIN_COLUMNS = ("underlying", "quote_date", "expiry", "type", "strike", "bid", "ask", "last", "implied_vol",
                 "underlying_price", "style")
#: optional chain columns (read when present)
OPTIONAL_CHAIN_COLUMNS = ("quote_time", "settlement")
STATUSES = ("ok", "no-bid", "no-ask", "crossed", "below-intrinsic", "below-model-bound", "no-solution",
            "not-converged", "invalid", "expired", "error")


class Pricer(Protocol):
    """What the chain job needs from a pricer: the engine's table calls (in-process or daemon)."""

    def price_table(self, columns: Mapping[str, Any], method: Method | None = None) -> Result: ...

    def implied_vol(self, prices: Any, columns: Mapping[str, Any], method: Method | None = None) -> tuple[np.ndarray, np.ndarray]: ...


class LocalPricer:
    """The in-process engine behind the :class:`Pricer` interface."""

    via = "in-process"

    def price_table(self, columns: Mapping[str, Any], method: Method | None = None) -> Result:
        return engine.price_table(columns, method)

    def implied_vol(self, prices: Any, columns: Mapping[str, Any], method: Method | None = None) -> tuple[np.ndarray, np.ndarray]:
        return engine.implied_vol_table(prices, columns, method)


@dataclass
class ChainSummary:
    """Counts by status, timing and where it ran."""

    contracts: int
    by_status: dict[str, int]
    elapsed_s: float
    device: str
    via: str
    extra: dict = field(default_factory=dict)

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
        return out


def read_chain(path: str) -> pd.DataFrame:
    """Read a chain CSV; columns other than :data:`CHAIN_COLUMNS` and
    :data:`OPTIONAL_CHAIN_COLUMNS` are listed in ``df.attrs["ignored_columns"]``.

    Raises:
        ValueError: missing columns; :class:`optiond.columns.TableFileError` (a ValueError) for
            a file that cannot be read, an empty one, or a column named twice.
    """
    df = read_csv_table(path, CHAIN_COLUMNS + OPTIONAL_CHAIN_COLUMNS)
    missing = [c for c in CHAIN_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing chain columns {missing}; expected {list(CHAIN_COLUMNS)}")
    return df


def _screen(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quote screening: returns (status array, mid, expiry_years)."""
    n = len(df)
    status = object_full(n, "ok")
    bid = pd.to_numeric(df["bid"], errors="coerce").to_numpy(dtype=np.float64)
    ask = pd.to_numeric(df["ask"], errors="coerce").to_numpy(dtype=np.float64)
    quote = pd.to_datetime(df["quote_date"], errors="coerce")
    expiry = pd.to_datetime(df["expiry"], errors="coerce")
    days = (expiry - quote).dt.days.to_numpy(dtype=np.float64)
    T = days / 365.0
    with np.errstate(invalid="ignore"):
        status[~(T > 0)] = "expired"
        status[(status == "ok") & ~(ask > 0)] = "no-ask"
        status[(status == "ok") & ~(bid > 0)] = "no-bid"
        status[(status == "ok") & (bid > ask)] = "crossed"
    mid = 0.5 * (bid + ask)
    return status, mid, T


def _explain_below(rows: np.ndarray, status: np.ndarray, error: np.ndarray, kind: np.ndarray, spot: np.ndarray,
                   strike: np.ndarray, mid: np.ndarray, rate: float, dividend_yield: float) -> None:
    """Split the model's "below its lowest value" answer into truly below intrinsic, and
    above intrinsic but below the zero-volatility (forward) value at this rate and yield."""
    if rows.size == 0:
        return
    intrinsic = np.where(kind[rows] == "call", spot[rows] - strike[rows], strike[rows] - spot[rows]).clip(0.0)
    for r, intr in zip(rows.tolist(), intrinsic.tolist()):
        if mid[r] < intr:
            error[r] = f"mid {mid[r]:.6g} < intrinsic {intr:.6g}"
        else:
            status[r] = "below-model-bound"
            error[r] = (f"mid {mid[r]:.6g} is above intrinsic {intr:.6g} but below the zero-volatility value at "
                        f"rate={rate:g}, dividend_yield={dividend_yield:g}: check --rate / --dividend-yield")


def price_chain(df: pd.DataFrame, pricer: Pricer | None = None, *, rate: float = DEFAULT_RATE,
                dividend_yield: float = DEFAULT_DIVIDEND_YIELD, steps: int = DEFAULT_STEPS, chunk: int = 1024,
                progress: Callable[[int], None] | None = None) -> tuple[pd.DataFrame, ChainSummary]:
    """Implied volatility, model price and Greeks for every contract of a chain.

    Args:
        df: the chain (columns :data:`CHAIN_COLUMNS`), one row per contract.
        pricer: in-process engine (default) or a daemon client.
        rate, dividend_yield: flat continuously compounded annual decimals.
        steps: CRR steps for American contracts (European ones use the closed form).
        chunk: contracts per pricing request (bounds request size and drives progress).
        progress: called with the number of contracts finished after each chunk.

    Returns:
        ``(out, summary)``: ``out`` is ``df`` with ``expiry_years, mid, iv, model_price,
        delta, gamma, theta, vega, rho, status, error, device`` appended (every input row kept,
        in order); ``summary`` counts statuses and times the run.
    """
    pricer = pricer or LocalPricer()
    t0 = time.perf_counter()
    n = len(df)
    status, mid, T = _screen(df)
    error = object_full(n, "")
    iv = np.full(n, np.nan)
    res_cols = {k: np.full(n, np.nan) for k in ("model_price",) + GREEK_FIELDS}
    kind = df["type"].astype(str).str.strip().str.lower().to_numpy(dtype=object)
    style = df["style"].astype(str).str.strip().str.lower().to_numpy(dtype=object)
    spot = pd.to_numeric(df["underlying_price"], errors="coerce").to_numpy(dtype=np.float64)
    strike = pd.to_numeric(df["strike"], errors="coerce").to_numpy(dtype=np.float64)
    method_name = np.where(style == "european", "black-scholes", "binomial").astype(object)
    device, via = "cpu", getattr(pricer, "via", "in-process")
    todo = np.flatnonzero(status == "ok")
    done = n - todo.size
    if progress:
        progress(done)
    for start in range(0, todo.size, chunk):
        rows = todo[start:start + chunk]
        for name in ("binomial", "black-scholes"):
            sel = rows[method_name[rows] == name]
            if sel.size == 0:
                continue
            m = Method(name=name, steps=steps, iv_tolerance=IV_TOLERANCE)
            cols = dict(kind=kind[sel], style=style[sel], spot=spot[sel], strike=strike[sel], expiry=T[sel],
                        rate=rate, dividend_yield=dividend_yield)
            vol, st = pricer.implied_vol(mid[sel], cols, m)
            iv[sel] = vol
            st = np.asarray(st, dtype=object)
            bad = st != "ok"
            status[sel[bad]] = [s.split(":", 1)[0] for s in st[bad]]
            error[sel[bad]] = [s.split(":", 1)[1].strip() if ":" in s else "" for s in st[bad]]
            _explain_below(sel[bad & (st == "below-intrinsic")], status, error, kind, spot, strike, mid, rate, dividend_yield)
            good = sel[~bad]
            if good.size == 0:
                continue
            gcols = {k: (v[~bad] if isinstance(v, np.ndarray) else v) for k, v in cols.items()}
            res = pricer.price_table(dict(gcols, volatility=vol[~bad]), m)
            res_cols["model_price"][good] = res.price
            for g in GREEK_FIELDS:
                res_cols[g][good] = getattr(res, g)
            failed = np.flatnonzero(res.status != "ok")
            status[good[failed]] = "error"
            error[good[failed]] = res.error[failed]
            device, via = res.device, getattr(res, "via", via)
        done += rows.size
        if progress:
            progress(done)
    out = df.copy()
    out["expiry_years"] = T
    out["mid"] = mid
    out["iv"] = iv
    for k, v in res_cols.items():
        out[k] = v
    out["status"] = status
    out["error"] = error
    out["device"] = np.where(status == "ok", device, "")
    counts = pd.Series(status).value_counts().to_dict()
    summary = ChainSummary(n, {str(k): int(v) for k, v in counts.items()}, time.perf_counter() - t0, device, via)
    return out, summary
