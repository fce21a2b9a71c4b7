"""Bad input: every invalid field and wrong type, huge arrays, truncated and unsigned frames,
and a fuzz run of 100,000 random multipart messages (a seeded generator; bounded in time).

The daemon must never crash, must answer every correctly signed message exactly once (with an
error where the message is bad), and must accept nothing without a valid signature: those get
no answer at all and are counted as authentication failures.
"""

from __future__ import annotations

import os
import random
import time

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optiond import engine
from optiond.daemon import paths, protocol
from optiond.daemon.client import Client
from optiond.daemon.protocol import DELIM, ProtocolError, Session
from optiond.models import Method

from conftest import start_daemon, stop_daemon

FUZZ_MESSAGES = int(os.environ.get("OPTIOND_FUZZ_MESSAGES", "100000"))
FUZZ_TIME_S = 120.0
CELL = {"kind": "put", "style": "american", "spot": 100.0, "strike": 100.0, "expiry": 1.0, "rate": 0.03,
        "dividend_yield": 0.0, "volatility": 0.2}
SHELL_OPS = ("ping", "status", "price", "implied_vol", "submit", "result", "cancel",  # not shutdown: it is legitimate
             "surface_fit", "surface_put", "surface_vol", "surface_price", "objects", "object_drop")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    # small limits: whatever random but valid work the fuzzer asks for stays small
    handle = start_daemon(tmp_path_factory.mktemp("fuzz"), "--max-options", "5000", "--max-tree-nodes", "5e7",
                          "--max-request-s", "5")
    yield handle
    stop_daemon(handle)


class Peer:
    """A few DEALER sockets to the shell port, with unbounded receive queues (no reply is
    dropped however far the reading lags behind)."""

    def __init__(self, served, n: int = 4):
        self.info = paths.read_connection_file(served.connection_file)
        self.session = Session(self.info["key"].encode())
        self.ctx = zmq.Context()
        self.socks = []
        for _ in range(n):
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVHWM, 0)
            s.connect(paths.endpoint(self.info))
            self.socks.append(s)
        self.replies: list = []

    def drain(self, wait_ms: int = 0) -> None:
        for s in self.socks:
            while s.poll(wait_ms):
                try:
                    self.replies.append(self.session.recv(s))
                except ProtocolError as e:  # a reply the daemon signed badly would be a bug
                    raise AssertionError(f"unverifiable reply: {e}") from None
                wait_ms = 0

    def close(self) -> None:
        for s in self.socks:
            s.close()
        self.ctx.term()


# ---------------------------------------------------------------------------- random messages


def _random_value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 2 or r < 0.35:
        return rng.choice([None, True, False, 0, -1, 2**63 - 1, -(2**63), rng.random(), float("nan"), float("inf"),
                           1e308, "", "put", "x" * rng.randint(0, 300), rng.randbytes(rng.randint(0, 20))])
    if r < 0.6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    if r < 0.8:
        return {str(_random_value(rng, 3))[:10]: _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return {"__nd__": [rng.choice(["<f8", "<i4", "|O", ">f8", "<c16", 7]),
                       rng.choice([[rng.randint(0, 10)], [10**12], [-1], [2, 2], "x", [1] * 6]), rng.randint(-1, 3)]}


def _random_content(rng: random.Random) -> tuple[dict, list]:
    """A request content: mostly a plausible pricing request with a few fields gone wrong."""
    buffers: list = []
    cols = dict(CELL)
    for _ in range(rng.randint(0, 3)):
        cols[rng.choice(list(CELL) + ["steps", "method", "eps", "x"])] = _random_value(rng)
    if rng.random() < 0.3:
        n = rng.randint(1, 50)
        cols["strike"] = protocol.encode_array(np.linspace(80, 120, n), buffers)
    method = {k: v for k, v in {"name": "binomial", "steps": rng.choice([1, 16, 64, 10**7, -3, 2.5]),
                                "greeks": rng.choice([True, False, "yes"])}.items() if rng.random() < 0.8}
    if rng.random() < 0.3:
        method[rng.choice(["name", "device", "precision", "iv_tolerance", "grid", "eps", "bogus"])] = _random_value(rng)
    content: dict = {"columns": cols, "method": method}
    r = rng.random()
    if r < 0.15:
        content = {k: _random_value(rng) for k in rng.sample(["columns", "method", "prices", "op", "job_id",
                                                               "wait_s", "deadline_s", "force"], 3)}
    elif r < 0.3:
        content["prices"] = _random_value(rng)
        content["op"] = rng.choice(["price", "implied_vol", 3])
        content["job_id"] = rng.choice(["a", "x" * 70, "bad id!", 5])
    if rng.random() < 0.3:  # the fields of the surface requests, plausible or not
        for k in rng.sample(["name", "strike", "expiry", "kind", "style", "steps", "surface", "chain", "market"], 4):
            content[k] = rng.choice(["SPY", "SPY#0001", 100.0, _random_value(rng)])
    if rng.random() < 0.1 and buffers:
        buffers.append(rng.randbytes(rng.randint(0, 16)))
    return content, buffers


def fuzz_messages(info: dict, n: int, seed: int = 20261121):
    """Yield ``(frames, signed_msg_id_or_None, signed)``: ``signed`` when the frames carry a
    valid signature (those must be answered), else they must be dropped."""
    rng = random.Random(seed)
    good = Session(info["key"].encode())
    wrong = Session(b"0123456789abcdef" * 4)

    def valid():
        content, buffers = _random_content(rng)
        msg_type = rng.choice(SHELL_OPS) + "_request"
        try:
            header = good.header(msg_type)
            frames = good.serialize(header, content, None, None, buffers)
        except TypeError:  # a value msgpack cannot carry: try again
            return valid()
        return header, frames

    for _ in range(n):
        kind = rng.random()
        if kind < 0.30:  # a correctly signed message, fuzzed inside (the daemon must answer it)
            header, frames = valid()
            if rng.random() < 0.2:  # a fuzzed header or metadata, still signed
                signed = frames[2:]
                j = rng.choice([0, 1, 2])
                signed[j] = msgpack.packb(_random_value(rng), use_bin_type=True) if rng.random() < 0.7 else \
                    rng.randbytes(rng.randint(0, 40))
                frames = [DELIM, good.sign(signed), *signed]
                header = None
            yield frames, header["msg_id"] if header else None, True
            continue
        header, frames = valid()
        r = rng.random()
        if r < 0.15:
            out = [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 8))]         # random frames
        elif r < 0.30:
            out = frames[: rng.randint(1, len(frames) - 1)]                                      # truncated
        elif r < 0.40:
            out = [DELIM, b"", *frames[2:]]                                                      # unsigned
        elif r < 0.50:
            out = [DELIM, *frames[2:]]                                                           # no signature frame
        elif r < 0.60:
            out = wrong.serialize(good.header("price_request"), {"columns": CELL})              # another key
        elif r < 0.70:
            sig = bytearray(frames[1])
            sig[rng.randrange(64)] ^= 1
            out = [DELIM, bytes(sig), *frames[2:]]                                               # tampered signature
        elif r < 0.80:
            out = list(frames)
            j = rng.randrange(2, len(out))
            b = bytearray(out[j]) or bytearray(b"\x00")
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            out[j] = bytes(b)                                                                    # a flipped bit
        elif r < 0.90:
            out = [*frames, rng.randbytes(8)]                                                    # an extra buffer
        else:  # routing frames the daemon will not take: one over 256 bytes, or more than 8
            ids = [rng.randbytes(rng.randint(257, 400))] if rng.random() < 0.5 else [b"id"] * rng.randint(9, 12)
            out = ids + frames
        yield out, header["msg_id"], False


def test_fuzz_100k_messages_no_crash_nothing_unsigned_accepted(served):
    peer = Peer(served)
    c = served.client(timeout=30.0)
    before = c.status()
    signed_ids: set = set()
    unsigned_ids: set = set()
    n_signed = 0
    start = time.monotonic()
    try:
        for i, (frames, msg_id, signed) in enumerate(fuzz_messages(peer.info, FUZZ_MESSAGES)):
            peer.socks[i % len(peer.socks)].send_multipart(frames)
            if signed:
                n_signed += 1
                if msg_id:
                    signed_ids.add(msg_id)
            elif msg_id:
                unsigned_ids.add(msg_id)
            if i % 200 == 199:
                peer.drain()
            assert time.monotonic() - start < FUZZ_TIME_S, f"fuzz run over {FUZZ_TIME_S} s after {i} messages"
        deadline = time.monotonic() + 60
        while len(peer.replies) < n_signed and time.monotonic() < deadline:
            peer.drain(wait_ms=200)
        peer.drain(wait_ms=500)  # anything more would be a reply too many
        assert served.process.poll() is None, "the daemon died"
        assert len(peer.replies) == n_signed, (len(peer.replies), n_signed)
        answered = {r.parent_header.get("msg_id") for r in peer.replies}
        assert not answered & unsigned_ids  # nothing without a valid signature was accepted
        assert signed_ids <= answered
        assert all(r.content.get("status") in ("ok", "error") for r in peer.replies)
        errors = [r for r in peer.replies if r.content["status"] == "error"]
        assert all(r.content.get("ename") and 0 < len(r.content.get("error", "")) <= 240 for r in errors)
        assert {r.content["ename"] for r in errors} >= {"ProtocolError", "InvalidInputError"}
        after = c.status()
        assert after["auth_failures"] - before["auth_failures"] == FUZZ_MESSAGES - n_signed
        assert after["pid"] == before["pid"]
        got = c.price_table(CELL, Method(steps=64), fallback=False, force=True)  # and it still prices right
        np.testing.assert_array_equal(got.price, engine.price_table(CELL, Method(steps=64)).price)
    finally:
        peer.close()
        c.close()


# ---------------------------------------------------------------------------- every invalid field


INVALID_VALUES = [None, "abc", [1.0, 2.0, 3.0], [[1.0]], {"a": 1}, b"\x00\x01", 2**64 - 1, float("nan"), -1.0, True]


def _answer(served, msg_type: str, content: dict, buffers=()):
    peer = Peer(served, 1)
    try:
        s = peer.socks[0]
        h = peer.session.header(msg_type)
        protocol.send_frames(s, peer.session.serialize(h, content, None, None, list(buffers)))
        assert s.poll(20_000), f"no answer to {content!r:.200}"
        reply = peer.session.recv(s)
        assert reply.parent_header["msg_id"] == h["msg_id"]
        return reply
    finally:
        peer.close()


@pytest.mark.parametrize("field", list(CELL) + ["steps", "method"])
def test_each_invalid_column_value_is_answered_clearly(served, field):
    for value in INVALID_VALUES:
        reply = _answer(served, "price_request", {"columns": dict(CELL, **{field: value})})
        c = reply.content
        if c["status"] == "error":
            assert c["ename"] in ("ProtocolError", "InvalidInputError", "LimitExceeded") and c["error"]
        else:  # a table whose bad rows are marked (or a value that is in fact valid, e.g. rate -1)
            res = Client._decode_result(reply)
            ok = res.status == "ok"
            assert np.isfinite(res.price[ok]).all() and all(res.error[~ok]), (field, value, res.error)


METHOD_FIELDS_BAD = {"name": ["nope", 3, None], "steps": [0, -5, 2.5, "many", 10**12], "precision": ["fp16", 1],
                     "device": ["tpu", None], "greeks": ["yes", 1], "iv_tolerance": [0, 1.0, "x"],
                     "eps": [-1.0, 0, "x"], "payoff": ["exotic", 2], "seed": [-1, 1.5], "scheme": ["rk4", 0],
                     "grid": [[1, 1], [10], "x"], "time_steps": [0, 1.5], "rannacher": [-1, "x"],
                     "unknown_field": [1]}


@pytest.mark.parametrize("field", sorted(METHOD_FIELDS_BAD))
def test_each_invalid_method_field_is_refused(served, field):
    for value in METHOD_FIELDS_BAD[field]:
        reply = _answer(served, "price_request", {"columns": CELL, "method": {field: value}})
        assert reply.content["status"] == "error", (field, value, reply.content)
        assert reply.content["ename"] in ("ProtocolError", "InvalidInputError")
        assert field in reply.content["error"] or reply.content.get("field") == field or field == "name"


def test_huge_and_truncated_arrays(served):
    for spec, buffers in ((["<f8", [10**12], 0], [b"\0" * 8]), (["<f8", [4], 0], [b"\0" * 31]),
                          (["<f8", [4], 1], [b"\0" * 32]), (["|O", [1], 0], [b"\0" * 8])):
        reply = _answer(served, "price_request", {"columns": dict(CELL, strike={"__nd__": spec})}, buffers)
        assert reply.content["status"] == "error" and reply.content["ename"] in ("ProtocolError", "LimitExceeded")
    big = np.full(6000, 100.0)  # a real array over this daemon's 5000-option limit
    buf: list = []
    reply = _answer(served, "price_request", {"columns": dict(CELL, strike=protocol.encode_array(big, buf))}, buf)
    assert reply.content["ename"] == "LimitExceeded" and reply.content["limit"] == "max_options"


# ---------------------------------------------------------------------------- decoders, property-based


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
                         | st.binary(max_size=8), lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12),
       buffers=st.lists(st.binary(max_size=64), max_size=3), n=st.integers(0, 50))
def test_decoders_raise_only_protocol_errors(spec, buffers, n):
    for fn in (lambda: protocol.decode_array(spec, buffers), lambda: protocol.decode_column(spec, buffers),
               lambda: protocol.decode_sparse_strings(spec, n, buffers), lambda: protocol.decode_array(
                   {"__nd__": spec}, buffers)):
        try:
            fn()
        except ProtocolError:
            pass


@pytest.mark.parametrize("rows", [[2**70], [-1], [True], [0, 5], [0.5]])
def test_sparse_string_rows_out_of_range(rows):
    with pytest.raises(ProtocolError):
        protocol.decode_sparse_strings({"default": "ok", "rows": rows, "values": ["x"] * len(rows)}, 2, [])


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=256))
def test_unpackb_of_any_bytes(data):
    try:
        out = protocol.unpackb(data)
    except ProtocolError:
        return
    assert out is None or isinstance(out, (bool, int, float, str, bytes, list, dict))
