"""The daemon's named market objects: :class:`ObjectOps`, the part of
:class:`optiond.daemon.server.Server` that answers ``surface_fit``, ``surface_put``,
``surface_vol``, ``surface_price``, ``heston_fit``, ``objects``, ``object_put``, ``object_get``
and ``object_drop``.

``object_put {"name", "kind", "document"}`` keeps an object of any kind of
:mod:`optiond.daemon.object_kinds` (a curve, a dividend schedule, a Heston set, a surface) as
the next version of the name, or returns the live version when it holds the same document;
``object_get {"name": name or handle, "known": [handle, created_s]}`` answers the live
object the name or handle names, with its document unless ``known`` names that very object.
Both reply with :func:`optiond.daemon.object_kinds.entry_content`. A put's document (``object_put``'s
``document``, ``surface_put``'s ``surface``) may travel in a binary frame instead, as msgpack:
``"document_frame": i`` (``"surface_frame": i``) names the buffer (the client sends it so);
its length is the put's size before anything is decoded. A large document in the content
itself is left undecoded by the shell loop (:data:`optiond.daemon.server.LAZY_REQUESTS`) and
sized by its content frame.

The objects are kept by :class:`optiond.daemon.objects.ObjectStore` (``self.objects``); the
requests' content, checks, work and replies are :mod:`optiond.daemon.surface_op`'s
(``heston_fit``'s: :mod:`optiond.daemon.heston_op`). What runs where: a fit (the chain job,
then the surface or Heston fit) and a price (trees) are checked and costed here, on
the request loop, and run on rank 0's pricing thread by a runner thread that sends the reply,
as a ``chain`` request does (:meth:`PricingOps._aside`); a fit keeps its object only while its
request is still wanted (:class:`optiond.daemon.objects.Claim`: not past its deadline, the
daemon not stopping). A put is costed by its size first, on the request loop: over the
store's byte budget (``max_objects_bytes``, the puts under way counted) it is refused before
its document is decoded; one of at most :data:`INLINE_PUT_BYTES` is answered at once, a
larger one is decoded, checked and kept by a runner thread (the request loop serves
meanwhile; :func:`optiond.daemon.objects.quiet_gc`). A listing, a drop and a volatility request of at most :data:`INLINE_VOL_POINTS`
points are answered at once (a larger volatility request goes to a runner thread). A name or
handle that names no live surface is answered with the store's error (``UnknownObject``,
``StaleHandle``, ``WrongKind``) before any work.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import msgpack

from . import heston_op, object_kinds, surface_op
from .objects import Claim, Entry, ObjectStore, check_name, quiet_gc
from .protocol import Message, ProtocolError, unpackb
from .server_parts import _nbytes

#: volatility requests of at most this many points are answered on the request loop (each
#: slice evaluated once on the points that read it, about a microsecond a point); a larger one
#: runs on a runner thread within the request's ``deadline_s``
INLINE_VOL_POINTS = 2000
#: puts of documents of at most this many bytes are answered on the request loop
INLINE_PUT_BYTES = 64 << 10
#: msgpack containers over this many bytes are decoded an item at a time (:func:`unpack_document`)
_CHUNK_BYTES = 256 << 10


def unpack_document(data: Any) -> Any:
    """A msgpack document (bytes-like), decoded as :func:`optiond.daemon.protocol.unpackb`
    does, a container item at a time where it is large (an array of more than
    :data:`_CHUNK_ITEMS` items, a map near the top): no single call holds the interpreter for
    the whole of a large document.

    Raises:
        ProtocolError: not one valid msgpack value.
    """
    view = memoryview(data).cast("B")
    n = len(view)
    if n <= _CHUNK_BYTES:
        return unpackb(view)
    u = msgpack.Unpacker(raw=False, strict_map_key=True, use_list=True, max_buffer_size=n, max_str_len=n,
                         max_bin_len=n, max_array_len=n, max_map_len=n // 2, max_ext_len=0)
    try:
        u.feed(view)
        out = _walk(u, view, 0)
        if u.tell() != n:
            raise ValueError("trailing data")
    except Exception as e:  # noqa: BLE001 (msgpack raises ValueError, OutOfData, StackError, ...)
        raise ProtocolError(f"undecodable document ({type(e).__name__})") from None
    return out


def _walk(u: Any, view: memoryview, depth: int) -> Any:
    """The next value of ``u``: a large array or a map of the first levels item by item, any
    other value in one call."""
    kind = _CONTAINER.get(view[u.tell()])
    if kind == "map" and depth < 2:
        out = {}
        for _ in range(u.read_map_header()):
            key = u.unpack()
            if not isinstance(key, str):
                raise ValueError("map keys must be strings")
            out[key] = _walk(u, view, depth + 1)
        return out
    if kind == "array" and _array_length(view, u.tell()) > _CHUNK_ITEMS:
        return [_walk(u, view, depth + 1) for _ in range(u.read_array_header())]
    return u.unpack()


def _array_length(view: memoryview, at: int) -> int:
    """The item count of the msgpack array header at ``at``."""
    b = view[at]
    if b <= 0x9F:
        return b & 0x0F
    width = 2 if b == 0xDC else 4
    return int.from_bytes(view[at + 1:at + 1 + width], "big")


#: arrays of more items than this are decoded an item at a time by :func:`unpack_document`
_CHUNK_ITEMS = 64
_CONTAINER = {**{b: "array" for b in range(0x90, 0xA0)}, 0xDC: "array", 0xDD: "array",
              **{b: "map" for b in range(0x80, 0x90)}, 0xDE: "map", 0xDF: "map"}


class ObjectOps:
    """The object operations of :class:`optiond.daemon.server.Server` (see the module
    docstring); it needs the server's ``objects``, ``limits``, ``jobs``, ``ns_per_node``,
    ``_aside`` and ``_chain_request``."""

    objects: ObjectStore
    #: bytes of the puts accepted and not yet kept or refused (counted against the budget; an
    #: instance's own once set)
    _puts_reserved = 0
    _puts_lock = threading.Lock()

    def _surface(self, ref: Any) -> Entry:
        return self.objects.get(ref, surface_op.KIND)

    def _op_surface_fit(self, msg: Message, t0: float) -> None:
        name = surface_op.fit_name(msg.content)
        df, market, deadline = self._chain_request(msg)
        claim = Claim()
        self._aside(msg, "surface_fit", "surface", functools.partial(surface_op.fit, self.objects, name, df, market,
                                                                     claim=claim),
                    len(df), t0, deadline, once=True, claim=claim)

    def _op_heston_fit(self, msg: Message, t0: float) -> None:
        name, feller = heston_op.fit_request(msg.content)
        df, market, deadline = self._chain_request(msg)
        heston_op.check_european(df)  # refused at once: the European fit cannot use the chain
        claim = Claim()
        self._aside(msg, "heston_fit", "heston", functools.partial(heston_op.fit, self.objects, name, df, market,
                                                                   feller, claim=claim),
                    len(df), t0, deadline, once=True, claim=claim)

    def _op_surface_put(self, msg: Message, t0: float) -> tuple[dict, list] | None:
        def work(c: dict) -> tuple[dict, list]:
            return surface_op.put(self.objects, {"name": c.get("name"), "surface": self._document(msg, c, "surface")})

        return self._put(msg, t0, "surface_put", "surface", "surface", work)

    def _op_object_put(self, msg: Message, t0: float) -> tuple[dict, list] | None:
        def work(c: dict) -> tuple[dict, list]:
            entry = object_kinds.put_document(self.objects, c.get("name"), c.get("kind"),
                                              self._document(msg, c, "document"))
            return object_kinds.entry_content(entry, with_document=False), []

        kind = msg.content.get("kind") if msg.content.get("kind") in object_kinds.KINDS else "-"
        return self._put(msg, t0, "object_put", kind, "document", work)

    def _put(self, msg: Message, t0: float, op: str, model: str, field: str, work: Any) -> tuple[dict, list] | None:
        """A put: refused by its size over the budget, else answered at once (small) or on a
        runner thread, its bytes reserved until it ends. A content the shell loop left
        undecoded (:attr:`optiond.daemon.protocol.Message.lazy`, a large document in the
        content) is decoded on the runner thread; its size is its content frame's."""
        lazy = msg.lazy
        name = None if lazy else check_name(msg.content.get("name"))
        size = len(msg.raw_content or b"") if lazy else self._document_bytes(msg, field)
        with ObjectOps._puts_lock:
            self.objects.check_room(name, size, self._puts_reserved)
            small = size <= INLINE_PUT_BYTES and not lazy
            if not small:
                self._puts_reserved += size
        if small:
            return work(msg.content)

        def reserved() -> tuple[dict, list]:
            try:
                with quiet_gc():
                    content = unpack_document(msg.raw_content) if lazy else msg.content
                    if not isinstance(content, dict):
                        raise ProtocolError(f"{op}: the content must be a map")
                    return work(content)
            finally:
                self._release_put(size)

        try:
            self._aside(msg, op, model, reserved, 1, t0, self.limits.max_request_s, pricing_thread=False, once=True)
        except BaseException:
            self._release_put(size)
            raise
        return None

    def _release_put(self, size: int) -> None:
        with ObjectOps._puts_lock:
            self._puts_reserved -= size

    @staticmethod
    def _frame(msg: Message, content: dict, field: str) -> Any:
        """The buffer ``<field>_frame`` names, or None when the document is in the content."""
        i = content.get(f"{field}_frame")
        if i is None:
            return None
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(msg.buffers):
            raise ProtocolError(f"{field}_frame must name one of the message's {len(msg.buffers)} buffers")
        return msg.buffers[i]

    def _document_bytes(self, msg: Message, field: str) -> int:
        """A put's size before decoding: its document's frame, else the content frame."""
        frame = self._frame(msg, msg.content, field)
        if frame is not None:
            return _nbytes([frame])
        return len(msg.raw_content) if msg.raw_content is not None else 0

    def _document(self, msg: Message, content: dict, field: str) -> Any:
        frame = self._frame(msg, content, field)
        return content.get(field) if frame is None else unpack_document(frame)

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


__all__ = ["INLINE_PUT_BYTES", "INLINE_VOL_POINTS", "ObjectOps", "unpack_document"]
