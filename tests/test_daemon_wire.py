"""The reply wire format (:mod:`optiond.daemon.wire`): a price result and an implied-vol
result go into a reply body and come back the same, in every form the daemon sends."""

from __future__ import annotations

import numpy as np
import pytest

from optiond import engine
from optiond.daemon import wire
from optiond.daemon.protocol import ProtocolError, packb, unpackb
from optiond.models import ImpliedVol, Method, Result, object_full


def over_the_wire(content: dict, buffers: list) -> tuple[dict, list]:
    """The body as the client receives it (msgpack round trip, buffers as bytes)."""
    return unpackb(packb(content)), [bytes(b) for b in buffers]


def table(n: int) -> dict:
    rng = np.random.default_rng(n)
    return {"kind": "put", "style": "american", "spot": 100.0, "strike": rng.uniform(80, 120, n), "expiry": 0.5,
            "rate": 0.03, "dividend_yield": 0.01, "volatility": rng.uniform(0.1, 0.4, n)}


def assert_same_result(got: Result, want: Result, greeks: bool = True) -> None:
    for name in wire.VALUE_FIELDS if greeks else ("price",):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    np.testing.assert_array_equal(got.status, want.status)
    np.testing.assert_array_equal(got.error, want.error)
    assert got.device == want.device and got.via == "daemon"


@pytest.mark.parametrize("n, greeks", [(1, True), (1, False), (5, True), (5, False), (200, True)])
def test_a_price_result_comes_back_the_same(n, greeks):
    cols = table(n)
    if n > 1:
        cols["strike"][1] = -1.0  # a row error travels with its reason
    m = Method(steps=50, greeks=greeks)
    res = engine.price_table(cols, m)
    buffers: list = []
    content = wire.result_body(res, buffers, wire.prices_only(m, cols))
    assert content["values"]["__nd__"][1] == [7 if greeks or n == 1 else 1, n]
    got = wire.decode_price(*over_the_wire(content, buffers))
    assert_same_result(got, res, greeks)
    if not greeks and n > 1:
        assert np.isnan(got.delta).all()


def test_a_job_reply_from_sparse_parts_and_its_notes():
    res = engine.price_table(table(4), Method(steps=40))
    res.error[2], res.status[2] = "a reason", "error"
    buffers: list = []
    content = wire.price_body(4, wire.value_block(res, False), wire.sparse(res.status, "ok"),
                              wire.sparse(res.error, ""), "cpu", 0.5, buffers, std_error=np.arange(4.0),
                              diagnostics={"chunks": 2})
    content.update(job_id="j1", cached=True)
    got = wire.decode_price(*over_the_wire(content, buffers))
    assert_same_result(got, res)
    np.testing.assert_array_equal(got.std_error, np.arange(4.0))
    assert got.diagnostics == {"chunks": 2, "job_id": "j1", "cached": True} and got.elapsed_s == 0.5


def test_the_one_option_body_of_the_short_paths():
    content = wire.one_option_body("cpu", 0.001)
    got = wire.decode_price(*over_the_wire(content, [wire.pack_one(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)]))
    assert [float(getattr(got, k)[0]) for k in wire.VALUE_FIELDS] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert got.status.tolist() == ["ok"] and got.error.tolist() == [""] and got.device == "cpu"


def test_a_reply_of_a_daemon_from_before_dividend_rho_reads_with_a_nan_dividend_rho():
    import struct

    content = wire.one_option_body("cpu", 0.001, values={"__nd__": ["<f8", [6, 1], 0]})
    got = wire.decode_price(*over_the_wire(content, [struct.pack("<6d", 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)]))
    assert [float(getattr(got, k)[0]) for k in wire.VALUE_FIELDS[:6]] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert np.isnan(got.dividend_rho).all()


def iv_result(device: str = "gpu:0 Fake") -> ImpliedVol:
    status = np.array(["ok", "invalid", "no-solution", "ok"], dtype=object)
    error = object_full(4, "")
    error[1] = "strike=-1: must be > 0"
    return ImpliedVol(np.array([0.2, np.nan, np.nan, 0.3]), status, error, device=device)


def test_an_implied_vol_result_comes_back_the_same_with_its_device():
    iv = iv_result()
    buffers: list = []
    content = wire.implied_vol_body(iv, 0.25, buffers)
    got = wire.decode_implied_vol(*over_the_wire(content, buffers))
    np.testing.assert_array_equal(got.vol, iv.vol)
    assert got.status.tolist() == iv.status.tolist() and got.error.tolist() == iv.error.tolist()
    assert got.device == "gpu:0 Fake" and got.via == "daemon"
    vol, status = got  # the earlier pair
    assert status.tolist() == ["ok", "invalid: strike=-1: must be > 0", "no-solution", "ok"]
    # the status text travels as earlier clients read it
    c, _ = over_the_wire(content, buffers)
    assert c["iv_status"]["values"] == ["invalid: strike=-1: must be > 0", "no-solution"]
    assert isinstance(wire.decode(c, [bytes(b) for b in buffers]), ImpliedVol)


def test_an_implied_vol_reply_without_reasons_is_read_from_its_status_text():
    iv = iv_result()
    buffers: list = []
    content = wire.implied_vol_body(iv, 0.25, buffers)
    del content["iv_error"]
    got = wire.decode_implied_vol(*over_the_wire(content, buffers))
    assert got.status.tolist() == iv.status.tolist() and got.error.tolist() == iv.error.tolist()


def test_the_earlier_pair_becomes_an_implied_vol_result():
    vol = np.array([0.2, np.nan])
    got = ImpliedVol.from_status_text(vol, np.array(["ok", "invalid: spot=0: must be > 0"], dtype=object), "cpu")
    assert got.status.tolist() == ["ok", "invalid"] and got.error.tolist() == ["", "spot=0: must be > 0"]
    assert got.status_text().tolist() == ["ok", "invalid: spot=0: must be > 0"]  # the inverse of status_text
    buffers: list = []
    content = wire.implied_vol_body(iv_result(), 0.0, buffers)
    assert wire.decode_implied_vol(*over_the_wire(content, buffers)).device == "gpu:0 Fake"  # the solver's label kept


@pytest.mark.parametrize("content", [{"n": 2}, {"n": 2, "values": {"__nd__": ["<f8", [6, 1], 0]}}])
def test_a_malformed_price_body_is_a_protocol_error(content):
    with pytest.raises(ProtocolError):
        wire.decode_price(content, [b"\0" * 48])
