"""Fitted surfaces over the wire: the content of the surface requests, their checks at the
daemon's boundary, the work the daemon does for each, and their replies. The surfaces live in
the daemon's object store (:mod:`optiond.daemon.objects`) under a name and a version; the
numbers are :mod:`optiond.surface.points`'s.

Requests (``<op>_request``, answered by ``<op>_reply``)::

    surface_fit    {"name": str, "chain": {...}, "market": {...}}   # a chain request's content
                                                                     # (optiond.daemon.chain_op) and a name
    surface_put    {"name": str, "surface": map}                     # an optiond.surface document
    surface_vol    {"name": name or handle, "strike": column, "expiry": column}
    surface_price  {"name": name or handle, "strike": column, "expiry": column, "kind": column,
                    "style": column (default "american"), "steps": int (default chain.DEFAULT_STEPS)}
    objects        {}
    object_drop    {"name": name or handle}

A column is a scalar or a 1-D array or list (:func:`optiond.daemon.protocol.encode_column`);
the 1-D ones share one length n and the scalars broadcast. Units: strike in the surface's
currency, expiry (T) in years.

Replies:

* ``surface_fit``, ``surface_put``: :func:`entry_reply`: ``handle`` (``NAME#0003``), ``name``,
  ``kind``, ``version``, ``persisted`` (False: kept in memory only, its file could not be
  written), ``summary`` (underlying, quote time, expiries, T range, whether every
  arbitrage check passed, whether the slices carry spots) and ``slices`` (per expiry: expiry,
  T, forward, rate, spot, ATM vol, RMS error in vol points, share of mids inside the fitted
  bid/ask, confidence, quotes; the first :data:`REPLY_SLICES`, ``slices_total`` counts them);
  a fit adds ``chain`` (contracts, counts by status, the chain
  job's seconds), ``skipped`` (expiries with too few quotes) and ``elapsed_s``.
* ``surface_vol``: an implied-vol reply body (:func:`optiond.daemon.wire.implied_vol_body`:
  the surface's volatility per row, ``invalid`` rows with their reason) and ``handle``, the
  version that answered.
* ``surface_price``: a price reply body (:func:`optiond.daemon.wire.result_body`: price and
  Greeks per row, bad rows ``error`` with their reason) and ``handle``.
* ``objects``: ``objects`` (one :meth:`optiond.daemon.objects.Entry.listing` each) and the
  store's ``stats``.
* ``object_drop``: ``dropped`` (the handle forgotten).

Faults. A malformed request is a ProtocolError; a bad name, chain column, market field or
surface document an :class:`optiond.models.InvalidInputError` naming the field (``name``,
``surface``, ...); a name the daemon does not hold, a stale handle or an object of another kind
the store's errors (``UnknownObject``, ``StaleHandle``, ``WrongKind``); a bad strike, T (one
outside the surface's expiries included), kind or style only marks its row.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np
import pandas as pd

from .. import chain, costs
from .. import limits as limits_mod
from ..models import MAX_STEPS, InvalidInputError, Method
from ..surface import points
from ..surface.model import Surface, json_ready
from . import chain_op, wire
from .objects import Entry, ObjectStore, check_name
from .protocol import ProtocolError, decode_column, encode_column

#: the kind under which the store keeps surfaces
KIND = "surface"
#: the point columns of each request
VOL_COLUMNS = ("strike", "expiry")
PRICE_COLUMNS = ("strike", "expiry", "kind", "style")


# ---------------------------------------------------------------------------- requests


def encode_fit(name: str, df: pd.DataFrame, market: Mapping[str, Any], buffers: list) -> dict:
    """The content of a ``surface_fit`` request: the chain ``df`` and its market fields as a
    chain request (:func:`optiond.daemon.chain_op.encode_request`) and the name.

    Raises:
        ValueError: an unknown market field.
    """
    return {"name": name, **chain_op.encode_request(df, market, buffers)}


def fit_name(content: Any) -> str:
    """The name of a ``surface_fit`` request (its chain and market are a chain request's:
    :func:`optiond.daemon.chain_op.decode_request`).

    Raises:
        ProtocolError: the content is not a map.
        InvalidInputError: a bad name (field ``name``).
    """
    if not isinstance(content, dict):
        raise ProtocolError("surface_fit: the content must be a map")
    return check_name(content.get("name"))


def encode_points(name: str, columns: Mapping[str, Any], buffers: list) -> dict:
    """The content of a ``surface_vol`` or ``surface_price`` request: ``name`` (a name or a
    handle) and the point columns (scalars or 1-D sequences)."""
    content: dict[str, Any] = {"name": name}
    for k, v in columns.items():
        if v is not None:
            content[k] = encode_column(np.asarray(v) if isinstance(v, (list, tuple)) else v, buffers)
    return content


def decode_points(content: Any, buffers: list, max_rows: int, price: bool) -> dict[str, Any]:
    """The name and the point columns of a ``surface_vol`` (``price`` False) or
    ``surface_price`` request, each column a scalar or an array of the common length ``n``
    (also returned, under ``"n"``), and ``steps`` for a price.

    Raises:
        ProtocolError: not a map, a column that is not a scalar or a 1-D array, columns of
            different lengths.
        InvalidInputError: a missing column, a bad name or ``steps``.
        LimitExceeded: more rows than ``max_rows``.
    """
    op = "surface_price" if price else "surface_vol"
    if not isinstance(content, dict):
        raise ProtocolError(f"{op}: the content must be a map")
    if not isinstance(content.get("name"), str):
        raise InvalidInputError("name", None, content.get("name"), "a surface's name or handle (text) is required")
    out: dict[str, Any] = {"name": content["name"]}
    lengths = set()
    for c in PRICE_COLUMNS if price else VOL_COLUMNS:
        if c not in content:
            if c == "style":
                out[c] = "american"
                continue
            raise InvalidInputError(c, None, None, "missing column")
        v = decode_column(content[c], buffers)
        if isinstance(v, np.ndarray):
            if v.ndim != 1:
                raise ProtocolError(f"{op}: column {c!r} must be a scalar or 1-D")
            lengths.add(v.shape[0])
        out[c] = v
    if len(lengths) > 1:
        raise ProtocolError(f"{op}: columns of different lengths {sorted(lengths)}")
    n = lengths.pop() if lengths else 1
    if n > max_rows:
        raise limits_mod.LimitExceeded("max_options", n, max_rows,
                                       f"{n} points in one request; the daemon takes at most {max_rows}")
    out["n"] = n
    if price:
        steps = content.get("steps", chain.DEFAULT_STEPS)
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
            raise InvalidInputError("steps", None, steps, f"must be an integer in [1, {MAX_STEPS}]")
        out["steps"] = steps
    return out


def price_cost(cols: Mapping[str, Any], message_bytes: int, ns_per_node: float) -> costs.Cost:
    """What a ``surface_price`` request costs: its options as one price request, every row on
    the tree with Greeks (the daemon's cost model, :func:`optiond.limits.estimate`)."""
    n = int(cols["n"])
    return limits_mod.estimate("price", {"kind": "put", "style": "american", "spot": 1.0, "strike": 1.0,
                                         "expiry": 1.0, "rate": 0.0}, Method(name="binomial", steps=cols["steps"]),
                               max(n, 1), message_bytes, ns_per_node)


def vol_cost(cols: Mapping[str, Any], message_bytes: int, ns_per_node: float) -> costs.Cost:
    """What a ``surface_vol`` request costs: a closed-form price a point (one SVI evaluation
    or two and a square root; the daemon's cost model, :func:`optiond.limits.estimate`)."""
    return limits_mod.estimate("price", {"kind": "put", "style": "european", "spot": 1.0, "strike": 1.0,
                                         "expiry": 1.0, "rate": 0.0}, Method(name="black-scholes"),
                               max(int(cols["n"]), 1), message_bytes, ns_per_node)


# ---------------------------------------------------------------------------- the work


def describe(surface: Surface) -> tuple[dict, list[dict]]:
    """``(summary, slices)`` of a surface for the replies and the object listing (see the
    module docstring), JSON-ready."""
    st = surface.stats or {}
    summary = {"underlying": surface.underlying, "quote_time": surface.quote_time, "method": surface.method,
               "expiries": len(surface.slices), "T_first": surface.slices[0].T, "T_last": surface.slices[-1].T,
               "arbitrage_free": st.get("arbitrage_free"),
               "spots": all(s.spot is not None for s in surface.slices)}
    summary["text"] = (f"{surface.underlying}, {len(surface.slices)} expiries, T {summary['T_first']:.4g} to "
                       f"{summary['T_last']:.4g} years")
    slices = []
    for s in surface.slices:
        ss = s.stats or {}
        slices.append({"expiry": s.expiry, "T": s.T, "forward": s.forward, "rate": s.rate, "spot": s.spot,
                       "atm_vol": s.atm_vol(), **{k: ss.get(k) for k in ("rms_vol_pts", "inside_share", "confidence",
                                                                          "quotes")}})
    return json_ready(summary), json_ready(slices)


def store(objects: ObjectStore, name: str, surface: Surface, claim: Any = None) -> tuple[Entry, list[dict]]:
    """Keep ``surface`` as the next version of ``name``, unless the live version holds the
    same document (then that entry, its handle unchanged: the store's digest rule); its
    serialised size (canonical JSON) is counted. Returns the entry and the slices' statistics
    (:func:`describe`).

    Raises:
        as :meth:`optiond.daemon.objects.ObjectStore.put` (``claim`` as there).
    """
    from . import object_kinds

    summary, slices = describe(surface)
    text = object_kinds.canonical(object_kinds.document(KIND, surface))
    return objects.put(name, KIND, surface, len(text), summary, object_kinds.digest(KIND, None, text), claim=claim,
                       document=text), slices


#: the most slices a reply lists (``slices_total`` says how many there are)
REPLY_SLICES = 1000


def entry_reply(entry: Entry, slices: list[dict] | None = None) -> dict:
    """The reply content naming a stored surface (``handle``, ``name``, ``kind``, ``version``,
    ``persisted``, ``summary``, ``slices``: the first :data:`REPLY_SLICES`, and
    ``slices_total``); ``slices``: :func:`describe`'s, when the caller has them."""
    summary, every = describe(entry.payload) if slices is None else (dict(entry.summary), slices)
    return {"handle": entry.handle, "name": entry.name, "kind": entry.kind, "version": entry.version,
            "persisted": entry.persisted, "summary": summary, "slices": every[:REPLY_SLICES],
            "slices_total": len(every)}


def fit(objects: ObjectStore, name: str, df: pd.DataFrame, market: Mapping[str, Any],
        claim: Any = None) -> tuple[dict, list]:
    """The daemon's ``surface_fit``: price the chain in this process
    (:func:`optiond.chain.price_chain`), fit it (:func:`optiond.surface.points.fit_chain`) and
    keep it under ``name`` if ``claim`` (:class:`optiond.daemon.objects.Claim`: the request is
    still wanted) holds then. Returns the reply content and buffers.

    Raises:
        InvalidInputError: the chain has no expiry the fit can use (field ``chain``).
        LimitExceeded, ObjectError: as :meth:`optiond.daemon.objects.ObjectStore.put`.
        TimeoutError, concurrent.futures.CancelledError: the claim no longer holds (nothing kept).
    """
    t0 = time.perf_counter()
    out, summary = chain.price_chain(df, **market)
    try:
        surface = points.fit_chain(out)
    except ValueError as e:
        raise InvalidInputError("chain", None, f"{len(df)} contracts", str(e)) from None
    content = entry_reply(*store(objects, name, surface, claim))
    content.update(chain={"n": summary.contracts, "by_status": summary.by_status, "elapsed_s": summary.elapsed_s},
                   skipped=list((surface.stats or {}).get("skipped", [])), elapsed_s=time.perf_counter() - t0,
                   device=summary.device)
    return content, []


def put(objects: ObjectStore, content: Any) -> tuple[dict, list]:
    """The daemon's ``surface_put``: check the document and keep it under the name.

    Raises:
        ProtocolError: the content is not a map.
        InvalidInputError: a bad name, or a malformed surface document (field ``surface``,
            the reason from :func:`optiond.surface.points.checked_surface`).
        LimitExceeded, ObjectError: as :meth:`optiond.daemon.objects.ObjectStore.put`.
    """
    if not isinstance(content, dict):
        raise ProtocolError("surface_put: the content must be a map")
    name = check_name(content.get("name"))
    try:
        surface = points.checked_surface(content.get("surface"))
    except ValueError as e:
        raise InvalidInputError("surface", None, "the document", str(e)) from None
    return entry_reply(*store(objects, name, surface)), []


def vol_reply(entry: Entry, cols: Mapping[str, Any], deadline_s: float | None = None) -> tuple[dict, list]:
    """The daemon's ``surface_vol`` on the surface ``entry`` holds (:func:`optiond.surface.points.vols`),
    stopped with TimeoutError (a ``DeadlineExceeded`` reply) ``deadline_s`` seconds after it
    starts (None: no deadline)."""
    t0 = time.perf_counter()
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    iv = points.vols(entry.payload, cols["strike"], cols["expiry"], deadline)
    buffers: list = []
    content = wire.implied_vol_body(iv, time.perf_counter() - t0, buffers)
    content["handle"] = entry.handle
    return content, buffers


def price_reply(entry: Entry, cols: Mapping[str, Any]) -> tuple[dict, list]:
    """The daemon's ``surface_price`` on the surface ``entry`` holds, priced in this process
    (:func:`optiond.surface.points.prices`)."""
    t0 = time.perf_counter()
    res = points.prices(entry.payload, cols["strike"], cols["expiry"], cols["kind"], cols["style"],
                        steps=cols["steps"])
    res.elapsed_s = time.perf_counter() - t0
    buffers: list = []
    content = wire.result_body(res, buffers)
    content["handle"] = entry.handle
    return content, buffers


def listing(objects: ObjectStore) -> dict:
    """The ``objects`` reply: every live object's listing and the store's stats."""
    return {"objects": [e.listing() for e in objects.list()], "stats": objects.stats()}


__all__ = ["KIND", "PRICE_COLUMNS", "REPLY_SLICES", "VOL_COLUMNS", "decode_points", "describe", "encode_fit",
           "encode_points", "entry_reply", "fit", "fit_name", "listing", "price_cost", "price_reply", "put", "store", "vol_cost",
           "vol_reply"]
