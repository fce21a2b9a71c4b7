"""The chain job over the wire: one ``chain`` request carries a whole option chain and its
market set-up, and the daemon runs :func:`optiond.chain.price_chain` next to its GPU (on rank
0's pricing thread, the one that owns the CUDA context): the forward and carry solve, the
bid/mid/ask implied volatilities, the smile IVs and the Greeks in ONE round trip, instead of one
request per implied-volatility solve of the carry search (about twenty for a listed chain).

Request content::

    {"chain": {column: column value (protocol.encode_column)},   # CHAIN_COLUMNS (+ optional ones)
     "market": {"rate": float, "dividend_yield": float, "steps": int, "carry": "parity" | "flat",
                "spot_mode": "implied" | "print", "quote_time": str | None,
                "settlement": "am" | "pm" | None, "curve": [[days, rate], ...] | None}}

every market field optional (the chain job's defaults). Reply content::

    {"n": int, "columns": {name: encoded column} (:data:`optiond.chain.OUTPUT_COLUMNS`), "forwards": {column: list}
     (chain.FORWARD_COLUMNS), "by_status": {status: count}, "elapsed_s": float (the daemon's
     pricing time), "market_s": float, "device": str, "via": "daemon"}

Bad input is refused before any work: :class:`optiond.models.InvalidInputError` naming the
field (a missing chain column, an unknown carry mode, a curve row), ProtocolError for a
malformed message. A bad *cell* only marks its row, as in-process.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from .. import chain, costs, runctl
from ..market.curve import DAYS_PER_YEAR
from ..models import MAX_STEPS, InvalidInputError
from .. import limits as limits_mod
from .protocol import (ProtocolError, decode_column, decode_sparse_strings, encode_array, encode_column,
                       encode_sparse_strings)

#: market fields of a chain request and their defaults (those of :func:`optiond.chain.price_chain`)
MARKET_DEFAULTS: dict[str, Any] = {"rate": chain.DEFAULT_RATE, "dividend_yield": chain.DEFAULT_DIVIDEND_YIELD,
                                   "steps": chain.DEFAULT_STEPS, "carry": "parity", "spot_mode": "implied",
                                   "quote_time": None, "settlement": None, "curve": None,
                                   "method": chain.DEFAULT_METHOD, "accuracy": chain.DEFAULT_ACCURACY}
#: the reply's result columns: price_chain's (numbers; strings sparse, most rows hold the default)
NUMERIC_COLUMNS, STRING_COLUMNS = chain.NUMERIC_OUTPUT_COLUMNS, chain.STRING_OUTPUT_COLUMNS
#: tree solves a chain costs per contract: the mid's, the bid's and the ask's implied
#: volatilities and the Greeks (the carry search's few near-the-money pairs are noise beside them)
CHAIN_SOLVES = 4


def encode_request(df: pd.DataFrame, market: Mapping[str, Any], buffers: list) -> dict:
    """The content of a ``chain`` request for chain ``df`` (:func:`optiond.chain.read_chain`)
    and market fields ``market`` (keys of :data:`MARKET_DEFAULTS`; ``curve`` a
    :class:`optiond.market.curve.ZeroCurve` or None). ``df`` is left as it is: the columns are
    copied.

    Raises:
        ValueError: an unknown market field.
    """
    unknown = sorted(set(market) - set(MARKET_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown chain market field(s) {unknown}; expected {sorted(MARKET_DEFAULTS)}")
    cols = [c for c in chain.CHAIN_COLUMNS + chain.OPTIONAL_CHAIN_COLUMNS if c in df.columns]
    content_chain = {}
    for c in cols:
        s = df[c]
        if pd.api.types.is_numeric_dtype(s):
            values = s.to_numpy(dtype=np.float64, copy=True)
        else:  # text cells as strings, blanks as None (msgpack nil); a new array, never a view of
            # the caller's column (pandas 3 hands out its string column's own storage)
            values = np.array([None if blank else str(v) for v, blank in zip(s.tolist(), s.isna().tolist())],
                              dtype=object)
        content_chain[c] = encode_column(values, buffers)
    m = {k: v for k, v in market.items() if v is not None}
    curve = m.pop("curve", None)
    if curve is not None:
        m["curve"] = [[float(y * DAYS_PER_YEAR), float(r)] for y, r in zip(curve.years, curve.rates)]
    return {"chain": content_chain, "market": m}


def _market(spec: Any) -> dict:
    """The keyword arguments of price_chain from a request's ``market`` map (checked)."""
    from ..market.curve import CurveError, ZeroCurve

    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise ProtocolError("chain: 'market' must be a map")
    unknown = sorted(set(spec) - set(MARKET_DEFAULTS))
    if unknown:
        raise ProtocolError(f"chain: unknown market field(s) {unknown}; expected {sorted(MARKET_DEFAULTS)}")
    kw = dict(MARKET_DEFAULTS, **spec)
    for name in ("rate", "dividend_yield"):
        v = kw[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InvalidInputError(name, None, v, "must be a finite number (annual decimal)")
        kw[name] = float(v)
    steps = kw["steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise InvalidInputError("steps", None, steps, f"must be an integer in [1, {MAX_STEPS}]")
    for name in ("method", "accuracy"):
        try:
            chain.american_method(**{name: kw[name]})
        except (TypeError, ValueError) as e:
            raise InvalidInputError(name, None, kw[name], str(e)) from None
    for name in ("carry", "spot_mode", "quote_time", "settlement"):
        if kw[name] is not None and not isinstance(kw[name], str):
            raise InvalidInputError(name, None, kw[name], "must be a string")
        try:  # one field at a time, so the error names it
            chain.check_market_args(**{name: kw[name]} if kw[name] is not None else {})
        except ValueError as e:
            raise InvalidInputError(name, None, kw[name], str(e)) from None
    points = kw["curve"]
    if points is not None:
        if not isinstance(points, list) or not all(isinstance(p, list) and len(p) == 2 for p in points):
            raise ProtocolError("chain: 'curve' must be a list of [days, rate] pairs")
        try:
            kw["curve"] = ZeroCurve.from_points([p[0] for p in points], [p[1] for p in points], source="curve")
        except CurveError as e:
            raise InvalidInputError("curve", None, f"{len(points)} point(s)", str(e)) from None
    return kw


def decode_request(content: Any, buffers: list, max_rows: int) -> tuple[pd.DataFrame, dict]:
    """The chain table and price_chain's keyword arguments from a ``chain`` request.

    Raises:
        ProtocolError: a malformed request (not maps, columns of different lengths).
        InvalidInputError: a missing chain column or a bad market field.
        LimitExceeded: more rows than ``max_rows``.
    """
    if not isinstance(content, dict) or not isinstance(content.get("chain"), dict):
        raise ProtocolError("chain: the request needs a 'chain' map of columns")
    cols: dict[str, Any] = {}
    for name, value in content["chain"].items():
        if name in chain.CHAIN_COLUMNS or name in chain.OPTIONAL_CHAIN_COLUMNS:
            v = decode_column(value, buffers)
            if not isinstance(v, np.ndarray) or v.ndim != 1:
                raise ProtocolError(f"chain: column {name!r} must be a list or a 1-D array")
            cols[name] = v
    missing = [c for c in chain.CHAIN_COLUMNS if c not in cols]
    if missing:
        raise InvalidInputError(missing[0], None, None, f"missing chain column; expected {list(chain.CHAIN_COLUMNS)}",
                                others=len(missing) - 1)
    lengths = {v.shape[0] for v in cols.values()}
    if len(lengths) != 1:
        raise ProtocolError(f"chain: columns of different lengths {sorted(lengths)}")
    n = lengths.pop()
    if n > max_rows:
        raise limits_mod.LimitExceeded("max_options", n, max_rows,
                                       f"the chain has {n} contracts; the daemon takes at most {max_rows} per request")
    kw = _market(content.get("market"))
    return pd.DataFrame(cols), kw


def cost(df: pd.DataFrame, kw: Mapping[str, Any], message_bytes: int, ns_per_node: float) -> costs.Cost:
    """What a chain request costs: :data:`CHAIN_SOLVES` implied-volatility solves per American
    contract by the chain's method (the daemon's cost model, :func:`optiond.limits.estimate`)."""
    n = len(df)
    style = chain.labels(df["style"])
    cols = {"kind": "put", "style": np.where(style == "american", "american", "european").astype(object),
            "spot": 1.0, "strike": 1.0, "expiry": 1.0, "rate": 0.0}
    m = chain.american_method(kw.get("method", chain.DEFAULT_METHOD), int(kw["steps"]),
                              kw.get("accuracy", chain.DEFAULT_ACCURACY))
    base = limits_mod.estimate("implied_vol", cols, m, max(n, 1), message_bytes, ns_per_node)
    return dataclasses.replace(base, work=base.work * CHAIN_SOLVES, cpu_s=base.cpu_s * CHAIN_SOLVES)


def run(df: pd.DataFrame, kw: Mapping[str, Any], wanted: Callable[[], bool] | None = None) -> tuple[dict, list]:
    """Price the chain in this process (:func:`optiond.chain.price_chain` on the in-process
    engine) and build the reply content and buffers.

    ``wanted()``: whether the request is still wanted (its client renews its lease), asked
    before the chain starts and before each of its pricing calls (:mod:`optiond.runctl`).

    Raises:
        optiond.runctl.Cancelled: ``wanted()`` said no; nothing more was priced.
    """
    control = runctl.RunControl(None, None if wanted is None else (lambda: not wanted()))
    with runctl.controlled(control):
        runctl.check()
        out, summary = chain.price_chain(df, **kw)  # the in-process pricer by default
    buffers: list = []
    columns: dict[str, Any] = {c: encode_array(out[c].to_numpy(dtype=np.float64), buffers) for c in NUMERIC_COLUMNS}
    for c, default in STRING_COLUMNS:
        columns[c] = encode_sparse_strings(out[c].astype(str).to_numpy(dtype=object), default, buffers)
    table = summary.forwards if summary.forwards is not None else pd.DataFrame(columns=list(chain.FORWARD_COLUMNS))
    forwards = {c: table[c].tolist() for c in chain.FORWARD_COLUMNS}
    content = {"n": len(out), "columns": columns, "forwards": forwards, "by_status": summary.by_status,
               "elapsed_s": summary.elapsed_s, "market_s": float(summary.extra.get("market_s", 0.0)),
               "device": summary.device, "via": "daemon"}
    return content, buffers


def decode_reply(content: Mapping[str, Any], buffers: list, df: pd.DataFrame,
                 wall_s: float) -> tuple[pd.DataFrame, "chain.ChainSummary"]:
    """``(out, summary)`` as :func:`optiond.chain.price_chain` returns them, from a chain
    reply for ``df``; ``summary.elapsed_s`` is ``wall_s`` (the client's round trip),
    ``summary.extra["server_s"]`` the daemon's pricing time.

    Raises:
        ProtocolError: a reply of another length or without a column.
    """
    n = len(df)
    if content.get("n") != n:
        raise ProtocolError(f"chain reply for {content.get('n')} rows, {n} sent")
    out = df.copy()
    cols = content.get("columns") or {}
    try:
        for c in NUMERIC_COLUMNS:
            out[c] = decode_column(cols[c], buffers)
        for c, default in STRING_COLUMNS:
            out[c] = decode_sparse_strings(cols[c], n, buffers)
    except KeyError as e:
        raise ProtocolError(f"chain reply without column {e}") from None
    forwards = pd.DataFrame({c: (content.get("forwards") or {}).get(c, []) for c in chain.FORWARD_COLUMNS})
    summary = chain.ChainSummary(n, {str(k): int(v) for k, v in (content.get("by_status") or {}).items()}, wall_s,
                                 str(content.get("device", "")), "daemon",
                                 extra={"market_s": float(content.get("market_s", 0.0)),
                                        "server_s": float(content.get("elapsed_s", 0.0))},
                                 forwards=forwards)
    return out, summary
