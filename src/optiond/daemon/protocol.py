"""Wire protocol of the pricing daemon: signed multipart messages with binary array buffers.

Modelled on the Jupyter messaging protocol. One message is the ZeroMQ multipart frame list::

    [identity..., b"<IDS|MSG>", signature, header, parent_header, metadata, content, buffer0, ...]

* ``identity`` frames are added by the ROUTER socket (routing only, not signed);
* ``signature`` is the lowercase hex HMAC-SHA256, keyed with the connection file's ``key``,
  of every frame after it in order, buffers included;
* ``header``, ``parent_header``, ``metadata`` and ``content`` are msgpack maps. A header holds
  ``msg_id`` (uuid4 hex), ``msg_type`` (``"<op>_request"`` / ``"<op>_reply"``), ``session``
  (the sender's id), ``date`` (ISO 8601, UTC) and ``version`` (:data:`PROTOCOL_VERSION`). A
  reply's ``parent_header`` is the request's header, so a client matches replies by ``msg_id``;
* numeric NumPy arrays travel as raw little-endian buffers: in the content an array is the map
  ``{"__nd__": [dtype, shape, buffer_index]}`` (see :func:`encode_array`), never a list of
  numbers. String/object columns (kind, style, method, status, error) travel as msgpack lists.

Receiving is defensive (:meth:`Session.recv`): frame count and byte limits are enforced while
the frames are read (an oversized message is drained without being kept), the signature is
checked with :func:`hmac.compare_digest` before anything is decoded, msgpack is decoded with
length limits, and arrays are rebuilt only for a whitelist of numeric dtypes whose declared
size matches the buffer exactly.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import msgpack
import numpy as np
import zmq

#: separates the routing identities from the signed part of a message
DELIM = b"<IDS|MSG>"
PROTOCOL_VERSION = "1.0"
SIGNATURE_SCHEME = "hmac-sha256"

#: defaults for :class:`Session` limits
MAX_FRAMES = 64                  # signed frames per message (4 + buffers)
MAX_BYTES = 512 * 1024 * 1024    # signed bytes per message
MAX_HEADER_BYTES = 64 * 1024     # each of header / parent_header / metadata
MAX_IDENTITIES = 8               # routing frames before the delimiter
MAX_IDENTITY_BYTES = 256

#: dtypes an array may be rebuilt with (little-endian numeric only; never object)
ARRAY_DTYPES = frozenset({"<f8", "<f4", "<i8", "<i4", "<i2", "|i1", "<u8", "<u4", "<u2", "|u1", "|b1"})
MAX_NDIM = 4
#: buffers larger than this are sent without a copy (zero-copy has a fixed cost of its own)
COPY_THRESHOLD = 65536

# plain ints: flag arithmetic on pyzmq's enums costs more than the send itself
_SNDMORE = int(zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)


class ProtocolError(Exception):
    """A message could not be understood (bad framing, encoding, header or array).

    ``identities`` routes an error reply back to the sender; ``header`` is the request header
    when it could be decoded (else ``None``); ``authenticated`` says whether the signature was
    valid, i.e. whether the sender deserves a reply.
    """

    def __init__(self, message: str, identities: Sequence[bytes] = (), header: dict | None = None,
                 authenticated: bool = True):
        super().__init__(message)
        self.identities = list(identities)
        self.header = header
        self.authenticated = authenticated


class AuthenticationError(ProtocolError):
    """The signature is missing or wrong (or the frames carry no signature at all)."""

    def __init__(self, message: str, identities: Sequence[bytes] = ()):
        super().__init__(message, identities, None, authenticated=False)


@dataclass
class Message:
    """A received, authenticated and decoded message."""

    header: dict
    parent_header: dict
    metadata: dict
    content: dict
    buffers: list[bytes] = field(default_factory=list)
    identities: list[bytes] = field(default_factory=list)

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]


def _default(obj: Any) -> Any:
    """msgpack hook: NumPy scalars become Python scalars; anything else is refused."""
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot send a value of type {type(obj).__name__} to the daemon")


def packb(obj: Any) -> bytes:
    """msgpack-encode ``obj`` (maps, lists, str, bytes, int, float, bool, None, NumPy scalars).

    Raises:
        TypeError: a value of another type.
    """
    return msgpack.packb(obj, use_bin_type=True, default=_default)


def unpackb(data: bytes) -> Any:
    """msgpack-decode one frame with every declared length bounded by the frame's size.

    Raises:
        ProtocolError: not valid msgpack, trailing data or a declared length the frame cannot hold.
    """
    n = len(data)
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True,
                               max_str_len=n, max_bin_len=n, max_array_len=n, max_map_len=n // 2, max_ext_len=0)
    except Exception as e:  # msgpack raises ValueError, ExtraData, StackError, FormatError, ...
        raise ProtocolError(f"undecodable frame ({type(e).__name__})") from None


def new_id() -> str:
    """A fresh message id (uuid4, 32 hex digits)."""
    return uuid.uuid4().hex


def utcnow() -> str:
    """The current time as ISO 8601 in UTC, e.g. ``2025-01-31T12:00:00.123456+00:00``."""
    return datetime.now(timezone.utc).isoformat()


def send_frames(socket: zmq.Socket, frames: Sequence[Any], flags: int = 0) -> None:
    """Send ``frames`` as one multipart message (bytes or buffers; large buffers zero-copy).

    With ``flags=zmq.NOBLOCK`` raises :class:`zmq.Again` when the first frame cannot be queued
    (nothing is sent then); the rest of a message always follows its first frame.
    """
    flags = int(flags)
    last = len(frames) - 1
    for i, f in enumerate(frames):
        big = type(f) is memoryview and f.nbytes > COPY_THRESHOLD
        socket.send(f, flags | _SNDMORE if i < last else flags, copy=not big)


# ---------------------------------------------------------------------------- arrays


def encode_array(arr: np.ndarray, buffers: list) -> dict:
    """Describe a numeric array for the content and append its raw bytes to ``buffers``.

    Args:
        arr: any array of kind bool/int/uint/float; it is made C-contiguous and little-endian
            (float16 and long double become float64).
        buffers: the message's buffer list, appended to.

    Returns:
        ``{"__nd__": [dtype_str, shape_list, buffer_index]}``.

    Raises:
        TypeError: a non-numeric dtype (object, string, complex, datetime ...).
    """
    arr = np.asarray(arr)
    kind = arr.dtype.kind
    if kind not in "biuf":
        raise TypeError(f"only numeric arrays travel as buffers, not dtype {arr.dtype}")
    if kind == "f" and arr.dtype.itemsize not in (4, 8):
        arr = arr.astype(np.float64)
    arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    buffers.append(memoryview(arr).cast("B") if arr.size else b"")
    return {"__nd__": [arr.dtype.str, list(arr.shape), len(buffers) - 1]}


def is_array_spec(value: Any) -> bool:
    """True for the ``{"__nd__": ...}`` map that :func:`encode_array` produces."""
    return isinstance(value, dict) and "__nd__" in value


def decode_array(spec: Any, buffers: Sequence[bytes], writeable: bool = True) -> np.ndarray:
    """Rebuild an array from its ``{"__nd__": [dtype, shape, index]}`` spec and the buffers.

    Args:
        spec: the map from the content.
        buffers: the message's buffers.
        writeable: copy into a fresh array (default); else a read-only view of the buffer.

    Raises:
        ProtocolError: a malformed spec, a dtype outside :data:`ARRAY_DTYPES` (object dtypes
            are never rebuilt from bytes), a bad shape or index, or a buffer whose length is
            not exactly the declared size.
    """
    desc = spec.get("__nd__") if isinstance(spec, dict) and len(spec) == 1 else None
    if not isinstance(desc, list) or len(desc) != 3:
        raise ProtocolError("malformed array description")
    dtype, shape, index = desc
    if not isinstance(dtype, str) or dtype not in ARRAY_DTYPES:
        raise ProtocolError(f"array dtype {str(dtype)[:20]!r} not allowed")
    if (not isinstance(shape, list) or len(shape) > MAX_NDIM
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise ProtocolError("malformed array shape")
    if type(index) is not int or not 0 <= index < len(buffers):
        raise ProtocolError("array buffer index out of range")
    buf = buffers[index]
    dt = np.dtype(dtype)
    size = 1
    for d in shape:
        size *= d
    if size * dt.itemsize != len(buf):
        raise ProtocolError(f"array buffer holds {len(buf)} bytes, declared {dtype}{tuple(shape)}")
    arr = np.frombuffer(buf, dtype=dt).reshape(shape)
    return arr.copy() if writeable else arr


def encode_column(value: Any, buffers: list) -> Any:
    """Encode one column (or a method field) for the content.

    Scalars go as msgpack scalars, numeric arrays as buffers (:func:`encode_array`), other
    arrays and sequences as msgpack lists of scalars.

    Raises:
        TypeError: a value msgpack cannot carry (e.g. a datetime).
    """
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    arr = np.asarray(value)
    if arr.ndim == 0:
        return arr.item()
    if arr.dtype.kind in "biuf":
        return encode_array(arr, buffers)
    return arr.tolist()


_SCALARS = (str, int, float, bool, type(None))


def decode_column(value: Any, buffers: Sequence[bytes]) -> Any:
    """Inverse of :func:`encode_column`: a scalar, a 1-D object array, or a numeric array.

    Raises:
        ProtocolError: a nested list, a map other than an array spec, or a bad array.
    """
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, list):
        if not all(isinstance(v, _SCALARS) for v in value):
            raise ProtocolError("a column list may hold only scalars")
        out = np.empty(len(value), dtype=object)
        out[:] = value
        return out
    if is_array_spec(value):
        return decode_array(value, buffers)
    raise ProtocolError(f"unsupported column value of type {type(value).__name__}")


def encode_sparse_strings(arr: np.ndarray, default: str, buffers: list) -> dict:
    """Encode a string column that is mostly ``default`` (per-row status, error text).

    Returns ``{"default": default, "rows": rows, "values": [str, ...]}`` naming only the rows
    that differ (``rows`` a list of ints when short, else an int64 array spec), so a million
    ``"ok"`` rows cost nothing on the wire.
    """
    rows = np.flatnonzero(arr != default)
    enc_rows = rows.tolist() if len(rows) <= 64 else encode_array(rows.astype(np.int64), buffers)
    return {"default": default, "rows": enc_rows, "values": [str(v) for v in arr[rows].tolist()]}


def decode_sparse_strings(spec: Any, n: int, buffers: Sequence[bytes]) -> np.ndarray:
    """Inverse of :func:`encode_sparse_strings`: an object array of ``n`` strings.

    Raises:
        ProtocolError: malformed spec, or rows out of range / not matching the values.
    """
    if (not isinstance(spec, dict) or not isinstance(spec.get("default"), str)
            or not isinstance(spec.get("values"), list) or not all(isinstance(v, str) for v in spec["values"])):
        raise ProtocolError("malformed string column")
    raw = spec.get("rows")
    if raw == [] and not spec["values"]:  # the usual case: every row has the default
        return np.full(n, spec["default"], dtype=object)
    if isinstance(raw, list):
        if not all(type(r) is int for r in raw):
            raise ProtocolError("malformed string column rows")
        rows = np.asarray(raw, dtype=np.int64)
    else:
        rows = decode_array(raw, buffers, writeable=False)
    values = spec["values"]
    if (rows.ndim != 1 or rows.dtype.kind not in "iu" or len(rows) != len(values)
            or (len(rows) and (rows.min() < 0 or rows.max() >= n))):
        raise ProtocolError("malformed string column rows")
    out = np.full(n, spec["default"], dtype=object)
    if len(rows):
        vals = np.empty(len(values), dtype=object)
        vals[:] = values
        out[rows] = vals
    return out


# ---------------------------------------------------------------------------- session


class Session:
    """Signs, sends, receives and checks messages for one key.

    Args:
        key: the shared HMAC key (bytes; the connection file's ``key`` string encoded as
            ASCII). Must not be empty.
        session: this endpoint's id, put in every header (default: a new uuid4 hex).
        max_frames, max_bytes: limits on the signed frames of a received message.

    Thread safety: ``serialize``/``sign`` may be called from several threads; a ZeroMQ
    socket must still be used by one thread at a time.
    """

    def __init__(self, key: bytes, session: str | None = None, *, max_frames: int = MAX_FRAMES,
                 max_bytes: int = MAX_BYTES):
        if not key:
            raise ValueError("an empty key would leave the daemon unauthenticated")
        self._hmac = hmac.new(bytes(key), digestmod=hashlib.sha256)
        self.session = session or new_id()
        self.max_frames = max_frames
        self.max_bytes = max_bytes

    def sign(self, frames: Iterable[Any]) -> bytes:
        """Hex HMAC-SHA256 of the frames (bytes-like), as ASCII bytes."""
        h = self._hmac.copy()
        for f in frames:
            h.update(f)
        return h.hexdigest().encode("ascii")

    def header(self, msg_type: str, msg_id: str | None = None) -> dict:
        """A new header for ``msg_type``."""
        return {"msg_id": msg_id or new_id(), "msg_type": msg_type, "session": self.session, "date": utcnow(),
                "version": PROTOCOL_VERSION}

    def serialize(self, header: dict, content: dict, parent: dict | None = None, metadata: dict | None = None,
                  buffers: Sequence[Any] = ()) -> list:
        """The signed frames ``[DELIM, signature, header, parent, metadata, content, *buffers]``.

        Raises:
            TypeError: content holds a value msgpack cannot carry.
        """
        signed = [packb(header), packb(parent or {}), packb(metadata or {}), packb(content), *buffers]
        return [DELIM, self.sign(signed), *signed]

    def send(self, socket: zmq.Socket, msg_type: str, content: dict, *, parent: dict | None = None,
             metadata: dict | None = None, buffers: Sequence[Any] = (), identities: Sequence[bytes] = (),
             msg_id: str | None = None) -> dict:
        """Build, sign and send a message; returns its header."""
        header = self.header(msg_type, msg_id)
        send_frames(socket, [*identities, *self.serialize(header, content, parent, metadata, buffers)])
        return header

    def _read(self, socket: zmq.Socket, flags: int) -> tuple[list[bytes], bytes | None, list[bytes] | None,
                                                           str | None, bool]:
        """Read one multipart message frame by frame within the limits.

        Returns ``(identities, signature, signed_frames, oversize_reason, signature_ok)``;
        a message over the limits is drained and its frames dropped, but its signature is
        still computed (incrementally) so an authenticated sender can be told why.
        """
        identities: list[bytes] = []
        frame = socket.recv(int(flags))
        malformed = False
        while frame != DELIM:
            if len(identities) < MAX_IDENTITIES and len(frame) <= MAX_IDENTITY_BYTES:
                identities.append(frame)
            else:
                malformed = True
            if not socket.getsockopt(_RCVMORE):
                return identities, None, None, None, False  # no delimiter: not a protocol message
            frame = socket.recv(0)  # the rest of a multipart message is already here
        if not socket.getsockopt(_RCVMORE):
            return identities, None, None, None, False
        signature = socket.recv(0)
        h = self._hmac.copy()
        kept: list[bytes] = []
        nframes = nbytes = 0
        reason = None
        more = bool(socket.getsockopt(_RCVMORE))
        while more:
            frame = socket.recv(0)
            more = bool(socket.getsockopt(_RCVMORE))
            h.update(frame)
            nframes += 1
            nbytes += len(frame)
            if reason is None:
                if nframes <= self.max_frames and nbytes <= self.max_bytes:
                    kept.append(frame)
                    continue
                reason = (f"message too large: more than {self.max_frames} signed frames" if nframes > self.max_frames
                          else f"message too large: more than {self.max_bytes} bytes")
                del kept[4:]  # keep at most the header frames, for the error reply
            elif nframes <= 4 and len(kept) == nframes - 1 and len(frame) <= MAX_HEADER_BYTES:
                kept.append(frame)
        ok = (not malformed and len(signature) == 64
              and hmac.compare_digest(signature, h.hexdigest().encode("ascii")))
        return identities, signature, kept, reason, ok

    def recv(self, socket: zmq.Socket, flags: int = 0) -> Message:
        """Receive, authenticate and decode one message.

        Args:
            socket: a ROUTER/DEALER socket.
            flags: ``zmq.NOBLOCK`` to raise :class:`zmq.Again` when nothing is waiting.

        Returns:
            :class:`Message` (buffers as ``bytes``).

        Raises:
            zmq.Again: nothing to read (with ``zmq.NOBLOCK``).
            AuthenticationError: no delimiter, no signature or a wrong one: drop the message.
            ProtocolError: an authenticated message that is too large or cannot be decoded;
                ``.header`` is the request header where it could be read, for the error reply.
        """
        identities, signature, frames, reason, ok = self._read(socket, flags)
        if signature is None:
            raise AuthenticationError("no signature (not a protocol message)", identities)
        if not ok:
            raise AuthenticationError("invalid signature", identities)
        header = None
        if frames and len(frames[0]) <= MAX_HEADER_BYTES:
            try:
                header = _check_header(unpackb(frames[0]))
            except ProtocolError:
                header = None
        if reason is not None:
            raise ProtocolError(reason, identities, header)
        if len(frames) < 4:
            raise ProtocolError(f"expected at least 4 signed frames, got {len(frames)}", identities, header)
        if header is None:
            raise ProtocolError("malformed header", identities, None)
        for f in frames[1:3]:
            if len(f) > MAX_HEADER_BYTES:
                raise ProtocolError("parent header or metadata too large", identities, header)
        try:
            parent, metadata, content = unpackb(frames[1]), unpackb(frames[2]), unpackb(frames[3])
        except ProtocolError as e:
            raise ProtocolError(str(e), identities, header) from None
        if not (isinstance(parent, dict) and isinstance(metadata, dict) and isinstance(content, dict)):
            raise ProtocolError("parent header, metadata and content must be maps", identities, header)
        return Message(header, parent, metadata, content, frames[4:], identities)


def _check_header(h: Any) -> dict:
    if not isinstance(h, dict):
        raise ProtocolError("header is not a map")
    for k in ("msg_id", "msg_type", "session", "version"):
        v = h.get(k)
        if not isinstance(v, str) or not 0 < len(v) <= 128:
            raise ProtocolError(f"header field {k!r} missing or invalid")
    return h
