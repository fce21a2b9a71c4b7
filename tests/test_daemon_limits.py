"""Bounded resources against local peers that do not hold the key (loopback only).

* a dummy-signed large message is dropped without its large frames being hashed (the leaf
  manifest in the signature frame is checked first), while a signed one of the same size is
  received whole;
* (further cases below: connection floods, half-sent HTTP requests, replays).
"""

from __future__ import annotations

import hashlib

import pytest

from optiond.daemon import protocol
from optiond.daemon.protocol import DELIM, AuthenticationError, Session

BIG = 16 * 1024 * 1024  # the smallest size of the messages seen hashed whole before this check


@pytest.fixture()
def hashed(monkeypatch):
    """Bytes hashed as leaves by the protocol module (the large frames' cost), counted."""
    seen = {"bytes": 0}

    def counting(view):
        seen["bytes"] += memoryview(view).nbytes
        return hashlib.sha256(view).digest()

    monkeypatch.setattr(protocol, "_leaf_digest", counting)
    monkeypatch.setattr(protocol, "PARALLEL_LEAF_BYTES", 1 << 62)  # hash in this thread (the counter is plain)
    return seen


def test_a_dummy_signed_large_message_is_dropped_unhashed(pair, hashed):
    a, b = pair
    good, wrong = Session(b"the-key"), Session(b"not-the-key")
    payload = b"\x07" * BIG
    header = good.header("price_request")
    cases = {
        "wrong key": wrong.serialize(header, {"columns": {}}, buffers=[payload]),
        "64 random hex digits, no manifest": [DELIM, b"0" * 64, *good.serialize(header, {}, buffers=[payload])[2:]],
        "the right manifest, a forged HMAC": None,
    }
    frames = good.serialize(header, {}, buffers=[payload])
    cases["the right manifest, a forged HMAC"] = [DELIM, b"f" * 64 + frames[1][64:], *frames[2:]]
    hashed["bytes"] = 0  # serialize hashed the sender's copies
    for name, msg in cases.items():
        a.send_multipart(msg, copy=False)
        with pytest.raises(AuthenticationError):
            good.recv(b)
        assert hashed["bytes"] == 0, name
    # the same message signed with the key is received whole: its buffer hashed exactly once
    a.send_multipart(frames, copy=False)
    msg = good.recv(b)
    assert hashed["bytes"] == BIG and msg.buffers[0] == payload


def test_many_small_frames_are_not_checked_beyond_the_preauth_budget(pair):
    """More than MAX_FRAMES frames of up to 64 KiB each (the only way past the pre-check
    budget) are dropped unchecked, never answered; a few extra frames are still answered."""
    a, b = pair
    s = Session(b"k", max_frames=8)
    n = protocol.PREAUTH_MAX_BYTES // protocol.DIGEST_MIN_BYTES + 1
    s.send(a, "x_request", {}, buffers=[b"y" * protocol.DIGEST_MIN_BYTES] * n)
    with pytest.raises(AuthenticationError):
        s.recv(b)
    s.send(a, "x_request", {}, buffers=[b"y"] * 10)
    with pytest.raises(protocol.ProtocolError, match="frames") as e:
        s.recv(b)
    assert e.value.authenticated
