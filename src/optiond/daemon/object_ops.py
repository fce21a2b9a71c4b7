"""The daemon's named market objects: :class:`ObjectOps`, the part of
:class:`optiond.daemon.server.Server` that answers ``surface_fit``, ``surface_put``,
``surface_vol``, ``surface_price``, ``heston_fit``, ``objects``, ``object_put``, ``object_get``
and ``object_drop``.

``object_put {"name", "kind", "document"}`` keeps an object of any kind of
:mod:`optiond.daemon.object_kinds` (a curve, a dividend schedule, a Heston set, a surface) as
the next version of the name, or returns the live version when it holds the same document;
``object_get {"name": name or handle, "known": [handle, created_s]}`` answers the live
object the name or handle names, with its document unless ``known`` names that very object.
Both reply with :func:`optiond.daemon.object_kinds.entry_content`.

The objects are kept by :class:`optiond.daemon.objects.ObjectStore` (``self.objects``); the
requests' content, checks, work and replies are :mod:`optiond.daemon.surface_op`'s
(``heston_fit``'s: :mod:`optiond.daemon.heston_op`). What runs where: a fit (the chain job,
then the surface or Heston fit) and a price (trees) are checked and costed here, on
the request loop, and run on rank 0's pricing thread by a runner thread that sends the reply,
as a ``chain`` request does (:meth:`PricingOps._aside`); a put, a listing, a drop and a
volatility request of at most :data:`INLINE_VOL_POINTS` points are answered at once (a
larger volatility request goes to a runner thread). A name or handle that names no live
surface is answered with the store's error (``UnknownObject``, ``StaleHandle``,
``WrongKind``) before any work.
"""

from __future__ import annotations

import functools
from typing import Any

from . import heston_op, object_kinds, surface_op
from .objects import Entry, ObjectStore
from .protocol import Message
from .server_parts import _nbytes

#: volatility requests of at most this many points are answered on the request loop (each
#: slice evaluated once on the points that read it, about a microsecond a point); a larger one
#: runs on a runner thread within the request's ``deadline_s``
INLINE_VOL_POINTS = 2000


class ObjectOps:
    """The object operations of :class:`optiond.daemon.server.Server` (see the module
    docstring); it needs the server's ``objects``, ``limits``, ``jobs``, ``ns_per_node``,
    ``_aside`` and ``_chain_request``."""

    objects: ObjectStore

    def _surface(self, ref: Any) -> Entry:
        return self.objects.get(ref, surface_op.KIND)

    def _op_surface_fit(self, msg: Message, t0: float) -> None:
        name = surface_op.fit_name(msg.content)
        df, market, deadline = self._chain_request(msg)
        self._aside(msg, "surface_fit", "surface", functools.partial(surface_op.fit, self.objects, name, df, market),
                    len(df), t0, deadline, once=True)

    def _op_heston_fit(self, msg: Message, t0: float) -> None:
        name, feller = heston_op.fit_request(msg.content)
        df, market, deadline = self._chain_request(msg)
        heston_op.check_european(df)  # refused at once: the European fit cannot use the chain
        self._aside(msg, "heston_fit", "heston", functools.partial(heston_op.fit, self.objects, name, df, market,
                                                                   feller), len(df), t0, deadline, once=True)

    def _op_surface_put(self, msg: Message, t0: float) -> tuple[dict, list]:
        return surface_op.put(self.objects, msg.content)

    def _op_surface_vol(self, msg: Message, t0: float) -> tuple[dict, list] | None:
        cols = surface_op.decode_points(msg.content, msg.buffers, self.limits.max_options, price=False)
        entry = self._surface(cols["name"])
        if cols["n"] <= INLINE_VOL_POINTS:
            return surface_op.vol_reply(entry, cols)
        cost = surface_op.vol_cost(cols, _nbytes(list(msg.buffers)), self.ns_per_node)
        deadline = self.limits.check(cost, self._option(msg, "deadline_s"), self.jobs.slots if self.jobs else 1)
        self._aside(msg, "surface_vol", "surface", functools.partial(surface_op.vol_reply, entry, cols, deadline),
                    cols["n"], t0, deadline, pricing_thread=False)
        return None

    def _op_surface_price(self, msg: Message, t0: float) -> None:
        cols = surface_op.decode_points(msg.content, msg.buffers, self.limits.max_options, price=True)
        entry = self._surface(cols["name"])
        cost = surface_op.price_cost(cols, _nbytes(list(msg.buffers)), self.ns_per_node)
        deadline = self.limits.check(cost, self._option(msg, "deadline_s"), self.jobs.slots if self.jobs else 1)
        self._aside(msg, "surface_price", "surface", functools.partial(surface_op.price_reply, entry, cols),
                    cols["n"], t0, deadline)

    def _op_objects(self, msg: Message, t0: float) -> tuple[dict, list]:
        return surface_op.listing(self.objects), []

    def _op_object_put(self, msg: Message, t0: float) -> tuple[dict, list]:
        c = msg.content if isinstance(msg.content, dict) else {}
        entry = object_kinds.put_document(self.objects, c.get("name"), c.get("kind"), c.get("document"))
        return object_kinds.entry_content(entry, with_document=False), []

    def _op_object_get(self, msg: Message, t0: float) -> tuple[dict, list]:
        c = msg.content if isinstance(msg.content, dict) else {}
        entry = self.objects.get(c.get("name"))
        known = c.get("known")
        same = isinstance(known, (list, tuple)) and list(known) == [entry.handle, entry.created]
        return object_kinds.entry_content(entry, with_document=not same), []

    def _op_object_drop(self, msg: Message, t0: float) -> tuple[dict, list]:
        ref = msg.content.get("name") if isinstance(msg.content, dict) else None
        entry = self.objects.drop(ref)
        return {"dropped": entry.handle, "name": entry.name, "kind": entry.kind, "version": entry.version}, []


__all__ = ["INLINE_VOL_POINTS", "ObjectOps"]
