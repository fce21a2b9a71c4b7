"""Wire protocol of the pricing daemon: signed multipart messages with binary array buffers.

Modelled on the Jupyter messaging protocol. One message is the ZeroMQ multipart frame list::

    [identity..., b"<IDS|MSG>", signature, header, parent_header, metadata, content, buffer0, ...]

* ``identity`` frames are added by the ROUTER socket (routing only, not signed);
* ``signature`` is the lowercase hex HMAC-SHA256, keyed with the connection file's ``key``,
  of every frame after it in order, buffers included, each preceded by its length: the HMAC
  input is the number of signed frames and their lengths (little-endian 64-bit integers), then
  the frames (:func:`framing`). Unlike Jupyter's plain concatenation, frame boundaries are
  signed too: a signed message cannot be re-cut (bytes moved between frames, empty frames added
  or dropped) and still pass. A frame longer than :data:`DIGEST_MIN_BYTES` (64 KiB: array
  buffers, a long content) enters the HMAC as the SHA-256 digests of its consecutive
  :data:`LEAF_BYTES` (1 MiB) leaves instead of its bytes (:func:`leaf_digests`; a one-level
  hash tree, as in BitTorrent v2 or RFC 6962): forging one would need a SHA-256 second
  preimage, and the leaves hash in parallel threads (hashlib releases the interpreter lock), so
  signing and checking a 10 MB reply costs about 1/k of one core's time on k cores.
  The signature frame carries those digests after the 64 hex digits (32 bytes a leaf, frame by
  frame; the *leaf manifest*), so a receiver checks the HMAC over the lengths, the small frames
  and the declared digests first, and hashes the large frames only for a sender that holds the
  key (then each must match its declared digests). A peer without the key can make the
  receiver hash at most :data:`PREAUTH_MAX_BYTES` of a message, whatever its size;
* ``header``, ``parent_header``, ``metadata`` and ``content`` are msgpack maps. A header holds
  ``msg_id`` (uuid4 hex), ``msg_type`` (``"<op>_request"`` / ``"<op>_reply"``), ``session``
  (the sender's id), ``date`` (ISO 8601, UTC) and ``version`` (:data:`PROTOCOL_VERSION`). A
  reply's ``parent_header`` is the request's header, so a client matches replies by ``msg_id``;
* a price reply's ``values`` block is ``(7, n)`` float64 (price, delta, gamma, theta, vega,
  rho, dividend_rho), or ``(1, n)`` (the prices alone) when the request asked for no Greeks:
  the client fills the Greeks with NaN (a million prices then cost 8 MB on the wire, not
  56 MB);
* numeric NumPy arrays travel as raw little-endian buffers: in the content an array is the map
  ``{"__nd__": [dtype, shape, buffer_index]}`` (see :func:`encode_array`), never a list of
  numbers. String/object columns (kind, style, method, status, error) travel as msgpack lists.

Receiving is defensive (:meth:`Session.recv`): a message is read whole with one
``recv_multipart`` (libzmq has already assembled every part in memory by then, and the socket's
``MAXMSGSIZE`` bounds each part), then the frame count and byte limits are checked and the
signature is verified with :func:`hmac.compare_digest` (the manifest first, then the large
frames against it) before anything is decoded; msgpack is
decoded with length limits, and arrays are rebuilt only for a whitelist of numeric dtypes whose
declared size matches the buffer exactly.

Message ids are ``<session>-<counter>`` (:meth:`Session.next_id`: unique, since the session id
is a fresh uuid4, and far cheaper than a uuid per message); dates are formatted from a
per-second cache (:func:`utcnow`).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import os
import struct
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

import msgpack
import zmq

# numpy and the schema (optiond.models) are imported by the functions of arrays and columns
# that use them: a control request (``optiond status``, ``stop``) loads no numerical library

log = logging.getLogger("optiond.protocol")

#: separates the routing identities from the signed part of a message
DELIM = b"<IDS|MSG>"
PROTOCOL_VERSION = "1.3"
#: the connection file's ``signature_scheme``: HMAC-SHA256 over the framed message, large
#: frames by their leaves' SHA-256 digests, which the signature frame carries (see above)
SIGNATURE_SCHEME = "hmac-sha256-leaf-manifest"
#: large frames are cut into leaves of this many bytes, each hashed with SHA-256
LEAF_BYTES = 1 << 20
#: frames longer than this enter the HMAC by their leaves' digests (the leaf manifest)
DIGEST_MIN_BYTES = 64 * 1024
#: bytes of one leaf digest (SHA-256) in the manifest; hex digits of the HMAC before it
DIGEST_BYTES = 32
MAC_HEX = 64
#: most bytes of small frames hashed before the signature is known to be good (a message with
#: more, possible only with more than :data:`MAX_FRAMES` frames, is dropped unchecked)
PREAUTH_MAX_BYTES = 64 * DIGEST_MIN_BYTES
#: at least this many leaf bytes in a message before they are hashed in parallel
PARALLEL_LEAF_BYTES = 2 << 20

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
#: content frames over this many bytes of the message types a session names lazy are left undecoded
LAZY_CONTENT_BYTES = 1 << 20

_EMPTY_MAP = b"\x80"  # msgpack {}

# plain ints: flag arithmetic on pyzmq's enums costs more than the send itself
_SNDMORE = int(zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
# pyzmq's compiled socket methods, without the Python wrapper's per-call argument handling
# (routing ids, groups, enum flags): about 1 us a frame on the request path
_Base = next((c for c in zmq.Socket.__mro__[1:] if hasattr(c, "send") and hasattr(c, "get")), zmq.Socket)
_send = _Base.send
_recv = _Base.recv
_get = _Base.get


def framing(frames: Sequence[Any]) -> bytes:
    """The signed prefix of ``frames``: their number and lengths, little-endian uint64."""
    lens = [f.nbytes if type(f) is memoryview else len(f) for f in frames]
    return struct.pack(f"<{len(lens) + 1}Q", len(lens), *lens)


_leaf_pool: Any = None
_leaf_pool_lock = threading.Lock()


def _pool() -> Any:
    global _leaf_pool
    if _leaf_pool is None:
        with _leaf_pool_lock:
            if _leaf_pool is None:
                from concurrent.futures import ThreadPoolExecutor

                _leaf_pool = ThreadPoolExecutor(max_workers=max(1, min(8, (os.cpu_count() or 2))),
                                                thread_name_prefix="optiond-leaves")
    return _leaf_pool


def _leaf_digest(view: memoryview) -> bytes:
    return hashlib.sha256(view).digest()


def _nbytes(f: Any) -> int:
    return f.nbytes if type(f) is memoryview else len(f)


def leaf_digests(frames: Sequence[Any]) -> dict[int, bytes]:
    """The leaf manifest of ``frames``: for each frame longer than :data:`DIGEST_MIN_BYTES`
    (by index), the concatenated SHA-256 digests of its consecutive :data:`LEAF_BYTES` leaves
    (the last one shorter). The leaves are hashed in a thread pool when the message holds
    :data:`PARALLEL_LEAF_BYTES` or more of them."""
    big = [i for i, f in enumerate(frames) if _nbytes(f) > DIGEST_MIN_BYTES]
    if not big:
        return {}
    leaves = []
    for i in big:
        v = memoryview(frames[i]).cast("B")
        leaves.append([v[j:j + LEAF_BYTES] for j in range(0, v.nbytes, LEAF_BYTES)])
    total = sum(_nbytes(frames[i]) for i in big)
    flat = [leaf for x in leaves for leaf in x]
    digests = list(_pool().map(_leaf_digest, flat)) if total >= PARALLEL_LEAF_BYTES else [_leaf_digest(x) for x in flat]
    out = {}
    k = 0
    for i, x in zip(big, leaves):
        out[i] = b"".join(digests[k:k + len(x)])
        k += len(x)
    return out


def leaf_count(nbytes: int) -> int:
    """Digests a frame of ``nbytes`` contributes to the manifest (0 for a small frame)."""
    return 0 if nbytes <= DIGEST_MIN_BYTES else -(-nbytes // LEAF_BYTES)


def frame_digest_input(frames: Sequence[Any], manifest: dict[int, bytes] | None = None) -> list:
    """What each signed frame contributes to the HMAC after :func:`framing`: the frame itself
    when it is at most :data:`DIGEST_MIN_BYTES`, else its digests from ``manifest`` (computed
    by :func:`leaf_digests` when not given)."""
    if manifest is None:
        manifest = leaf_digests(frames)
    if not manifest:
        return list(frames)
    return [manifest.get(i, f) for i, f in enumerate(frames)]


def recv_multipart(socket: zmq.Socket, flags: int = 0, first: list | None = None) -> list[bytes | memoryview]:
    """``socket.recv_multipart(flags)``, a little faster: frames of at most
    :data:`COPY_THRESHOLD` bytes copied as ``bytes``, larger ones as read-only memoryviews of
    ZeroMQ's message (no copy of a large array). A frame received without a copy carries its
    "more" flag, read in C (``socket.get(RCVMORE)`` costs an enum lookup in Python per frame).
    ``first``, when given, receives the first :class:`zmq.Frame` (for :func:`source_fd`)."""
    f = _recv(socket, flags, copy=False)
    if first is not None:
        first.append(f)
    parts = [f.bytes if len(f) <= COPY_THRESHOLD else f.buffer.toreadonly()]
    while f.more:
        f = _recv(socket, 0, copy=False)
        parts.append(f.bytes if len(f) <= COPY_THRESHOLD else f.buffer.toreadonly())
    return parts


def source_fd(frame: Any) -> int:
    """The descriptor of the connection a received frame came over (libzmq's ``SRCFD``), or
    -1 where there is none (inproc) or it cannot be told."""
    try:
        return int(frame.get(zmq.SRCFD))
    except (zmq.ZMQError, AttributeError, TypeError, ValueError):
        return -1


#: environment variable: microseconds a thread waiting on a socket polls it before it blocks
SPIN_ENV = "OPTIOND_SPIN_US"
#: the default where the process may use at least :data:`SPIN_MIN_CORES` cores (else 0)
SPIN_US_DEFAULT = 200
SPIN_MIN_CORES = 4


def spin_seconds() -> float:
    """How long a thread about to block on a socket first polls it (seconds).

    A blocked thread is woken by its ZeroMQ I/O thread, and on an idle machine the wake-up
    of a sleeping core costs tens of microseconds on every message; polling the socket for a
    moment instead keeps the thread on its core when the answer (or the next request) is
    that close. ``OPTIOND_SPIN_US`` sets it (0 turns it off; a value that is not a number of
    microseconds in [0, 1e6] is logged as a warning and ignored, as the other ``OPTIOND_``
    settings are: a typo must not stop pricing); by default it is :data:`SPIN_US_DEFAULT`
    where this process may use at least :data:`SPIN_MIN_CORES` cores, else 0: on fewer cores
    the polling thread would take the CPU its peer needs.
    """
    raw = os.environ.get(SPIN_ENV, "").strip()
    if raw:
        try:
            us = float(raw)
        except ValueError:
            us = -1.0
        if 0.0 <= us <= 1e6:
            return us * 1e-6
        log.warning("ignoring %s=%r: expected microseconds between 0 and 1000000", SPIN_ENV, raw[:40])
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    return SPIN_US_DEFAULT * 1e-6 if cores >= SPIN_MIN_CORES else 0.0


def readable(socket: zmq.Socket) -> bool:
    """Whether a message is waiting on ``socket`` (``ZMQ_EVENTS``, which also lets the
    socket take in what its I/O thread has delivered; never blocks)."""
    return bool(_get(socket, _EVENTS) & _POLLIN)


def spin_until_readable(socket: zmq.Socket, seconds: float) -> bool:
    """Poll ``socket`` without blocking for up to ``seconds``; whether a message is waiting."""
    end = time.perf_counter() + seconds
    while True:
        if _get(socket, _EVENTS) & _POLLIN:
            return True
        if time.perf_counter() >= end:
            return False


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
    """The signature is missing or wrong (or the frames carry no signature at all).

    ``srcfd`` is the descriptor of the connection a large message (over
    :data:`DIGEST_MIN_BYTES`) came over (else -1), so a receiver may close it: a sender that
    holds the key never sends such a message."""

    def __init__(self, message: str, identities: Sequence[bytes] = (), srcfd: int = -1):
        super().__init__(message, identities, None, authenticated=False)
        self.srcfd = srcfd


@dataclass
class Message:
    """A received, authenticated and decoded message."""

    header: dict
    parent_header: dict
    metadata: dict
    content: dict
    #: the binary frames after the content: ``bytes``, or read-only memoryviews over
    #: :data:`COPY_THRESHOLD` bytes (:func:`recv_multipart`)
    buffers: list[bytes | memoryview] = field(default_factory=list)
    identities: list[bytes] = field(default_factory=list)
    #: the header frame as received (a reply's parent frame, without re-encoding)
    raw_header: bytes | None = None
    #: the content frame as received (the reply cache's key is made from it)
    raw_content: bytes | None = None
    #: True when the content frame was left undecoded (``content`` is then ``{}``): a large
    #: message of a type in :attr:`Session.lazy_types`, which its handler decodes off the
    #: request loop
    lazy: bool = False
    #: the descriptor of the connection it came over, when asked for (:meth:`Session.recv`), else -1
    srcfd: int = -1

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]


def _default(obj: Any) -> Any:
    """msgpack hook: NumPy scalars become Python scalars; anything else is refused."""
    np = sys.modules.get("numpy")  # no numpy loaded: no numpy scalar to send
    if np is not None and isinstance(obj, np.generic):
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


#: the connection file's ``iopub_security`` when the PUB socket is CURVE-encrypted (:func:`iopub_curve_keys`)
IOPUB_CURVE = "curve"


def iopub_curve_keys(key: bytes) -> tuple[bytes, bytes]:
    """The CurveZMQ key pair of the daemon's event (PUB) socket, derived from the connection
    file's ``key``: ``(public, secret)``, Z85-encoded (40 bytes each). The secret key is the
    HMAC-SHA256 of a fixed label under ``key``; only a holder of ``key`` can compute the public
    key a subscriber must name to complete the CURVE handshake, which the daemon never sends
    (RFC 26, CurveZMQ), so a peer without it can neither subscribe nor read the events.

    Raises:
        zmq.ZMQError: this libzmq was built without CURVE (``zmq.has("curve")`` is False).
    """
    from zmq.utils import z85

    secret = z85.encode(hmac.new(bytes(key), b"optiond iopub curve server key", hashlib.sha256).digest())
    return zmq.curve_public(secret), secret


def new_id() -> str:
    """A fresh message id (uuid4, 32 hex digits)."""
    return uuid.uuid4().hex


_date_second: tuple[int, str] = (-1, "")


def utcnow() -> str:
    """The current time as ISO 8601 in UTC, e.g. ``2025-01-31T12:00:00.123456+00:00``.

    The date and time up to the second are formatted once per second (thread-safe: the cache
    is one tuple, replaced whole)."""
    global _date_second
    t = time.time()
    sec = int(t)
    cached = _date_second
    if cached[0] != sec:
        cached = _date_second = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    return f"{cached[1]}.{int((t - sec) * 1e6):06d}+00:00"


#: a request dated more than this many seconds before the receiver's clock is refused (a
#: captured message cannot be replayed later); clients date each attempt afresh
REPLAY_WINDOW_S = 60.0
#: ... or more than this many seconds after it (same host: the clocks agree)
FUTURE_SLACK_S = 5.0
_DATE_LEN = len("2025-01-31T12:00:00.000000+00:00")
_window_second: tuple[int, float, str, str] = (-1, 0.0, "", "")


def date_in_window(date: Any, window_s: float = REPLAY_WINDOW_S) -> bool:
    """Whether a header's ``date`` (as :func:`utcnow` writes it) lies within ``window_s``
    seconds before now (and :data:`FUTURE_SLACK_S` after). Dates of that fixed format compare
    as strings, so this costs two string comparisons; the bounds are formatted once a second.
    A missing or malformed date is outside."""
    global _window_second
    if type(date) is not str or len(date) != _DATE_LEN or not date.endswith("+00:00"):
        return False
    sec = int(time.time())
    cached = _window_second
    if cached[0] != sec or cached[1] != window_s:
        fmt = "%Y-%m-%dT%H:%M:%S.000000+00:00"
        cached = _window_second = (sec, window_s, time.strftime(fmt, time.gmtime(sec - window_s)),
                                   time.strftime(fmt, time.gmtime(sec + 1 + FUTURE_SLACK_S)))
    return cached[2] <= date <= cached[3]


def send_frames(socket: zmq.Socket, frames: Sequence[Any], flags: int = 0) -> None:
    """Send ``frames`` as one multipart message (bytes or buffers; large buffers zero-copy).

    With ``flags=zmq.NOBLOCK`` raises :class:`zmq.Again` when the first frame cannot be queued
    (nothing is sent then); the rest of a message always follows its first frame.
    """
    flags = int(flags)
    last = len(frames) - 1
    more = flags | _SNDMORE
    for i, f in enumerate(frames):
        if type(f) is memoryview and f.nbytes > COPY_THRESHOLD:
            _send(socket, f, more if i < last else flags, copy=False)
        else:
            _send(socket, f, more if i < last else flags)


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
    import numpy as np

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
    import numpy as np

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
    import numpy as np

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
    import numpy as np

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
    import numpy as np

    rows = np.flatnonzero(arr != default)
    return encode_sparse_rows(rows, arr[rows].tolist(), default, buffers)


def encode_sparse_rows(rows: Any, values: Sequence[Any], default: str, buffers: list) -> dict:
    """:func:`encode_sparse_strings` from the rows that differ (ascending) and their values."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.int64)
    enc_rows = rows.tolist() if len(rows) <= 64 else encode_array(rows, buffers)
    return {"default": default, "rows": enc_rows, "values": [str(v) for v in values]}


def decode_sparse_strings(spec: Any, n: int, buffers: Sequence[bytes]) -> np.ndarray:
    """Inverse of :func:`encode_sparse_strings`: an object array of ``n`` strings.

    Raises:
        ProtocolError: malformed spec, or rows out of range / not matching the values.
    """
    import numpy as np

    from ..models import object_full

    if (not isinstance(spec, dict) or not isinstance(spec.get("default"), str)
            or not isinstance(spec.get("values"), list) or not all(isinstance(v, str) for v in spec["values"])):
        raise ProtocolError("malformed string column")
    raw = spec.get("rows")
    if raw == [] and not spec["values"]:  # the usual case: every row has the default
        return object_full(n, spec["default"])
    if isinstance(raw, list):
        if not all(type(r) is int and 0 <= r < n for r in raw):
            raise ProtocolError("malformed string column rows")
        rows = np.asarray(raw, dtype=np.int64)
    else:
        rows = decode_array(raw, buffers, writeable=False)
    values = spec["values"]
    if (rows.ndim != 1 or rows.dtype.kind not in "iu" or len(rows) != len(values)
            or (len(rows) and (rows.min() < 0 or rows.max() >= n))):
        raise ProtocolError("malformed string column rows")
    out = object_full(n, spec["default"])
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
        #: message types whose content frame, when over :data:`LAZY_CONTENT_BYTES`, is left
        #: undecoded (:attr:`Message.lazy`)
        self.lazy_types: frozenset = frozenset()
        self._ids = itertools.count(1)
        self._id_prefix = f"{new_id()}-"

    def next_id(self) -> str:
        """A fresh message id, ``<random 32 hex>-<counter>``: unique across sessions and
        processes (a new uuid4 prefix per :class:`Session`), thread-safe (``itertools.count``)."""
        return f"{self._id_prefix}{next(self._ids)}"

    def sign(self, frames: Sequence[Any]) -> bytes:
        """The signature frame of ``frames`` (bytes-like): the hex HMAC-SHA256 of the frames and
        their lengths (ASCII), followed by the leaf manifest of the large frames."""
        manifest = leaf_digests(frames)
        h = self._hmac.copy()
        h.update(framing(frames))
        for f in frame_digest_input(frames, manifest):
            h.update(f)
        mac = h.hexdigest().encode("ascii")
        return mac + b"".join(manifest[i] for i in sorted(manifest)) if manifest else mac

    def header(self, msg_type: str, msg_id: str | None = None) -> dict:
        """A new header for ``msg_type``."""
        return {"msg_id": msg_id or self.next_id(), "msg_type": msg_type, "session": self.session, "date": utcnow(),
                "version": PROTOCOL_VERSION}

    def serialize(self, header: dict, content: dict, parent: dict | bytes | None = None,
                  metadata: dict | None = None, buffers: Sequence[Any] = ()) -> list:
        """The signed frames ``[DELIM, signature, header, parent, metadata, content, *buffers]``.

        ``parent`` may be the request's header frame as received (:attr:`Message.raw_header`),
        which is then sent as is.

        Raises:
            TypeError: content holds a value msgpack cannot carry.
        """
        parent_frame = parent if isinstance(parent, bytes) else packb(parent) if parent else _EMPTY_MAP
        signed = [packb(header), parent_frame, _EMPTY_MAP if not metadata else packb(metadata), packb(content),
                  *buffers]
        return [DELIM, self.sign(signed), *signed]

    def send(self, socket: zmq.Socket, msg_type: str, content: dict, *, parent: dict | None = None,
             metadata: dict | None = None, buffers: Sequence[Any] = (), identities: Sequence[bytes] = (),
             msg_id: str | None = None) -> dict:
        """Build, sign and send a message; returns its header."""
        header = self.header(msg_type, msg_id)
        send_frames(socket, [*identities, *self.serialize(header, content, parent, metadata, buffers)])
        return header

    def _read(self, socket: zmq.Socket, flags: int, source: bool = False) -> tuple[
            list[bytes], bytes | None, list[bytes] | None, str | None, bool, int]:
        """Read one multipart message and check its framing, limits and signature.

        Returns ``(identities, signature, signed_frames, oversize_reason, signature_ok,
        srcfd)`` (``srcfd``: the connection's descriptor for a message of more than
        :data:`DIGEST_MIN_BYTES` whose signature is not good, or with ``source`` for a message
        whose signature is good, else -1); for
        a message over the limits only its first four signed frames (the header frames, for an
        error reply) are kept, but the signature is still checked so that an authenticated
        sender can be told why. The large frames are hashed only once the HMAC over the
        manifest has passed (and not at all for a message over the limits).
        """
        first: list = []
        frames = recv_multipart(socket, int(flags), first)
        try:
            d = frames.index(DELIM, 0, MAX_IDENTITIES + 2)
        except ValueError:
            d = -1
        if d < 0 or d + 1 >= len(frames):  # no delimiter (or nothing after it): not a protocol message
            ids = frames if d < 0 else frames[:d]
            big = sum(len(f) for f in frames) > DIGEST_MIN_BYTES
            return ([f for f in ids[:MAX_IDENTITIES] if len(f) <= MAX_IDENTITY_BYTES], None, None, None, False,
                    source_fd(first[0]) if big else -1)
        identities = frames[:d]
        signature = frames[d + 1]
        signed = frames[d + 2:]
        ok = self._check(signature, signed) if not any(len(f) > MAX_IDENTITY_BYTES for f in identities) else None
        reason = None
        nbytes = sum(len(f) for f in signed)
        if len(signed) > self.max_frames:
            reason = f"message too large: more than {self.max_frames} signed frames"
        elif nbytes > self.max_bytes:
            reason = f"message too large: more than {self.max_bytes} bytes"
        if ok is not None and ok[0] and reason is None and ok[1]:  # authenticated: the large frames must match
            manifest = leaf_digests(signed)
            ok = (ok[0] and len(manifest) == len(ok[1])
                  and all(hmac.compare_digest(manifest.get(i, b""), v) for i, v in ok[1].items()), ok[1])
        if reason is not None:
            signed = [f for f in signed[:4] if len(f) <= MAX_HEADER_BYTES]
        good = bool(ok and ok[0])
        return identities, signature, signed, reason, good, source_fd(first[0]) if (
            source if good else nbytes > DIGEST_MIN_BYTES) else -1

    def _check(self, signature: bytes, signed: Sequence[Any]) -> tuple[bool, dict[int, bytes]] | None:
        """The HMAC check over the lengths, the small frames and the declared leaf manifest:
        ``(mac_ok, manifest)``, or None (unchecked) when the signature frame cannot hold the
        manifest these frames need or the small frames exceed :data:`PREAUTH_MAX_BYTES`."""
        lens = [len(f) for f in signed]
        need = [leaf_count(n) for n in lens]
        if len(signature) != MAC_HEX + DIGEST_BYTES * sum(need):
            return None
        if sum(n for n, k in zip(lens, need) if not k) > PREAUTH_MAX_BYTES:
            return None
        manifest: dict[int, bytes] = {}
        at = MAC_HEX
        for i, k in enumerate(need):
            if k:
                manifest[i] = signature[at:at + DIGEST_BYTES * k]
                at += DIGEST_BYTES * k
        h = self._hmac.copy()
        h.update(framing(signed))
        for f in frame_digest_input(signed, manifest):
            h.update(f)
        return hmac.compare_digest(signature[:MAC_HEX], h.hexdigest().encode("ascii")), manifest

    def recv(self, socket: zmq.Socket, flags: int = 0, source: bool = False) -> Message:
        """Receive, authenticate and decode one message.

        Args:
            socket: a ROUTER/DEALER (or SUB) socket.
            flags: ``zmq.NOBLOCK`` to raise :class:`zmq.Again` when nothing is waiting.
            source: set :attr:`Message.srcfd` (the connection's descriptor, for a daemon that
                tells signed peers' connections from the others).

        Returns:
            :class:`Message` (buffers as ``bytes``, those over :data:`COPY_THRESHOLD` bytes as
            read-only memoryviews).

        Raises:
            zmq.Again: nothing to read (with ``zmq.NOBLOCK``).
            AuthenticationError: no delimiter, no signature or a wrong one: drop the message.
            ProtocolError: an authenticated message that is too large or cannot be decoded;
                ``.header`` is the request header where it could be read, for the error reply.
        """
        identities, signature, frames, reason, ok, srcfd = self._read(socket, flags, source)
        return self.decode(identities, signature, frames, reason, ok, srcfd)

    def decode(self, identities: list[bytes], signature: bytes | None, frames: list[bytes] | None,
               reason: str | None, ok: bool, srcfd: int = -1) -> Message:
        """Second half of :meth:`recv` (authenticate and decode frames already read)."""
        if signature is None:
            raise AuthenticationError("no signature (not a protocol message)", identities, srcfd)
        if not ok:
            raise AuthenticationError("invalid signature", identities, srcfd)
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
        lazy = len(frames[3]) > LAZY_CONTENT_BYTES and header["msg_type"] in self.lazy_types
        try:
            parent = unpackb(frames[1]) if frames[1] != _EMPTY_MAP else {}
            metadata = unpackb(frames[2]) if frames[2] != _EMPTY_MAP else {}
            content = {} if lazy else unpackb(frames[3])
        except ProtocolError as e:
            raise ProtocolError(str(e), identities, header) from None
        if not (isinstance(parent, dict) and isinstance(metadata, dict) and isinstance(content, dict)):
            raise ProtocolError("parent header, metadata and content must be maps", identities, header)
        return Message(header, parent, metadata, content, frames[4:], identities, frames[0], frames[3], lazy, srcfd)


def _check_header(h: Any) -> dict:
    if not isinstance(h, dict):
        raise ProtocolError("header is not a map")
    for k in ("msg_id", "msg_type", "session", "version"):
        v = h.get(k)
        if not isinstance(v, str) or not 0 < len(v) <= 128:
            raise ProtocolError(f"header field {k!r} missing or invalid")
    return h
