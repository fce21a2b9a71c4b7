"""The Heston calibration over the wire: the ``heston_fit`` request runs the chain job on a
chain, fits the European Heston model to it (:mod:`optiond.heston_fit`: the default residual
and weights of ``optiond heston-fit``) and keeps the fitted parameters as a ``heston`` object
(:mod:`optiond.daemon.object_kinds`, with the fit's quality) under a name in the object store
(:mod:`optiond.daemon.objects`). The Excel add-in answers the same request in its own process,
on its own store, when no daemon runs (:func:`fit_here`).

Request content::

    heston_fit  {"name": str, "chain": {...}, "market": {...}, "feller": bool (default false)}

``chain`` and ``market`` are a chain request's (:mod:`optiond.daemon.chain_op`); ``feller``
imposes 2 kappa theta >= xi^2.

Reply: :func:`optiond.daemon.object_kinds.entry_content` of the stored set (``handle``,
``name``, ``kind``, ``version``, ``created``, ``created_s``, ``bytes``, ``summary``,
``document``), ``fit`` (:meth:`optiond.heston_fit.HestonFit.to_dict`: the parameters, SSE and
RMS error in vol points, per expiry the RMS and largest error, the Feller status, the
optimiser's report), ``chain`` (contracts, counts by status, the chain job's seconds),
``elapsed_s`` and ``device``. The same document as the live version's (a refit of the same
quotes) keeps the version.

Faults, each an error reply and never a crash: a malformed request is a ProtocolError; a bad
name, chain column or market field, ``feller`` not a boolean, a chain holding American
contracts (:func:`american_reason`: the American fit takes minutes, ``optiond heston-fit
--american``) or one with too few usable quotes an :class:`optiond.models.InvalidInputError`
(fields ``name``, ``feller``, ``chain``); more than :data:`MAX_FIT_QUOTES` quotes to fit, or
the store's bounds, :class:`optiond.limits.LimitExceeded`; a name holding another kind
``WrongKind``.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import pandas as pd

from .. import chain
from ..limits import LimitExceeded, Limits
from ..models import InvalidInputError
from ..surface.model import json_ready
from . import chain_op, object_kinds
from .objects import ObjectStore, check_name
from .protocol import ProtocolError

#: the kind under which the store keeps the fitted set
KIND = "heston"
#: the most quotes one fit takes (the chain job's out-of-the-money quotes of the expiries the
#: fit uses, at most :data:`optiond.heston_fit.MAX_PER_EXPIRY` per expiry): about 10 s of one
#: core (the bundled SPX chain's 482 quotes take about 1 s)
MAX_FIT_QUOTES = 4000


def encode_fit(name: str, df: pd.DataFrame, market: Mapping[str, Any], feller: bool, buffers: list) -> dict:
    """The content of a ``heston_fit`` request: the chain ``df`` and its market fields as a
    chain request (:func:`optiond.daemon.chain_op.encode_request`), the name and ``feller``.

    Raises:
        ValueError: an unknown market field.
    """
    return {"name": name, "feller": bool(feller), **chain_op.encode_request(df, market, buffers)}


def fit_request(content: Any) -> tuple[str, bool]:
    """``(name, feller)`` of a ``heston_fit`` request (its chain and market are a chain
    request's: :func:`optiond.daemon.chain_op.decode_request`).

    Raises:
        ProtocolError: the content is not a map.
        InvalidInputError: a bad name (field ``name``), ``feller`` not a boolean.
    """
    if not isinstance(content, dict):
        raise ProtocolError("heston_fit: the content must be a map")
    feller = content.get("feller", False)
    if not isinstance(feller, bool):
        raise InvalidInputError("feller", None, feller, "must be true or false")
    return check_name(content.get("name")), feller


def american_reason(df: pd.DataFrame) -> str | None:
    """Why the chain cannot be fitted here, when it holds American contracts (their prices hold
    an early-exercise premium the European model has not); None for a European chain."""
    if "style" not in df.columns:
        return None
    n = int((chain.labels(df["style"]) == "american").sum())
    if not n:
        return None
    return (f"holds {n} American contract{'s' if n > 1 else ''}: this Heston fit is European (the American fit "
            "prices every quote by ADI and takes minutes: optiond heston-fit --american)")


def check_european(df: pd.DataFrame) -> None:
    """Refuse a chain with American contracts (:func:`american_reason`).

    Raises:
        InvalidInputError: field ``chain``.
    """
    reason = american_reason(df)
    if reason is not None:
        raise InvalidInputError("chain", None, f"{len(df)} contracts", reason)


def fit(objects: ObjectStore, name: str, df: pd.DataFrame, market: Mapping[str, Any],
        feller: bool = False, claim: Any = None) -> tuple[dict, list]:
    """The ``heston_fit`` work: price the chain in this process (:func:`optiond.chain.price_chain`
    with ``market``), fit the European model to its out-of-the-money quotes
    (:func:`optiond.heston_fit.quotes_from_chain`, :func:`optiond.heston_fit.fit_heston`) and keep
    the parameters and the fit's quality as the next version of ``name`` in ``objects`` (the live
    one when the document is the same), if ``claim`` (:class:`optiond.daemon.objects.Claim`: the
    request is still wanted) holds then. Returns the reply content (module docstring) and buffers.

    Raises:
        InvalidInputError: American contracts, or no expiry the fit can use (field ``chain``).
        LimitExceeded: more than :data:`MAX_FIT_QUOTES` quotes; the store's bounds.
        WrongKind: ``name`` holds another kind.
        TimeoutError, concurrent.futures.CancelledError: the claim no longer holds (nothing kept).
    """
    from .. import heston_fit

    check_european(df)
    t0 = time.perf_counter()
    out, summary = chain.price_chain(df, **market)
    what = f"{len(df)} contracts"
    try:
        quotes = heston_fit.quotes_from_chain(out)
    except ValueError as e:
        raise InvalidInputError("chain", None, what, str(e)) from None
    n = sum(q.strike.size for q in quotes)
    if n < len(heston_fit.PARAMS):
        raise InvalidInputError("chain", None, what, f"has {n} usable quotes, fewer than the fit's "
                                f"{len(heston_fit.PARAMS)}: it takes the out-of-the-money mids with a solved "
                                f"implied volatility of expiries of at least {heston_fit.MIN_DAYS:g} days, 3 or more "
                                "per expiry")
    if n > MAX_FIT_QUOTES:
        raise LimitExceeded("max_fit_quotes", n, MAX_FIT_QUOTES,
                            f"the chain gives {n} quotes to fit; the fit takes at most {MAX_FIT_QUOTES}: use "
                            "optiond heston-fit")
    try:
        result = heston_fit.fit_heston(quotes, feller=feller)
    except ValueError as e:
        raise InvalidInputError("chain", None, what, str(e)) from None
    doc = {**result.params, "fit": {"rms_vol_pts": result.rms_vol_pts, "sse": result.sse, "quotes": n,
                                    "expiries": len(result.expiries)}}
    entry = object_kinds.put_document(objects, name, KIND, doc, claim)
    content = object_kinds.entry_content(entry)
    content.update(fit=json_ready(result.to_dict()),
                   chain={"n": summary.contracts, "by_status": summary.by_status, "elapsed_s": summary.elapsed_s},
                   elapsed_s=time.perf_counter() - t0, device=summary.device)
    return content, []


def fit_here(objects: ObjectStore, name: str, df: pd.DataFrame, market: Mapping[str, Any],
             feller: bool = False) -> dict:
    """A ``heston_fit`` request answered in this process on ``objects`` (the Excel add-in's own
    store when no daemon runs): the request is encoded and read back as the daemon reads it
    (the same checks, the same chain columns), then :func:`fit`. Returns the reply content.

    Raises:
        as :func:`fit_request`, :func:`optiond.daemon.chain_op.decode_request` and :func:`fit`.
    """
    buffers: list = []
    content = encode_fit(name, df, market, feller, buffers)
    name, feller = fit_request(content)
    table, kw = chain_op.decode_request(content, buffers, Limits().max_options)
    return fit(objects, name, table, kw, feller)[0]


__all__ = ["KIND", "MAX_FIT_QUOTES", "american_reason", "check_european", "encode_fit", "fit", "fit_here",
           "fit_request"]
