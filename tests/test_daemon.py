"""The daemon, its wire protocol and the client, against a real daemon subprocess (CPU only).

Daemon-backed results are compared with :mod:`optiond.engine` in this process bit for bit:
the daemon must give the same numbers whoever asks.
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from unittest import mock

import msgpack
import numpy as np
import pytest
import zmq

import optiond
from optiond import engine
from optiond.daemon import paths, protocol
from optiond.daemon.client import Client, DaemonError, DaemonUnavailable, get_client
from optiond.daemon.protocol import DELIM, AuthenticationError, ProtocolError, Session
from optiond.models import GREEK_FIELDS, InvalidInputError, Method

from conftest import price_burst, start_daemon, stop_daemon

COMMANDS = [sys.executable, "-m", "optiond.daemon.commands"]
RESULT_ARRAYS = ("price", "delta", "gamma", "theta", "vega", "rho")


def table(n: int = 6) -> dict:
    rng = np.random.default_rng(7)
    return {
        "kind": np.array(["put", "call"] * (n // 2), dtype=object),
        "style": np.array(["american", "american", "european"] * (n // 3 + 1), dtype=object)[:n],
        "spot": 100.0,
        "strike": rng.uniform(80, 120, n),
        "expiry": rng.uniform(0.1, 2.0, n),
        "rate": 0.04,
        "dividend_yield": np.linspace(0.0, 0.03, n),
        "volatility": rng.uniform(0.1, 0.5, n),
    }


def assert_same_result(got, want) -> None:
    for name in RESULT_ARRAYS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)  # NaN == NaN here
    assert got.status.tolist() == want.status.tolist()
    assert got.error.tolist() == want.error.tolist()
    assert got.device == want.device


def run_cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMANDS, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def client(daemon):
    c = daemon.client(timeout=10.0)
    yield c
    c.close()


# ---------------------------------------------------------------------------- basic operations


def test_a_pricing_client_imports_no_fitting_libraries():
    """Every client process (an Excel session, ``optiond status``, a detached start) imports the
    client: the surface and Heston fit encoders, with pandas, SciPy and numba, are imported by
    the requests that need them."""
    code = "import sys, optiond.daemon.client; print(sorted(m for m in ('pandas', 'scipy', 'numba') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_ping(client, daemon):
    reply = client.ping()
    assert reply["pid"] == daemon.pid
    assert reply["version"] == optiond.__version__


def test_status_counts_requests(client, daemon):
    before = client.status()
    client.ping()
    client.price_table(table(2), Method(steps=20))
    after = client.status()
    assert after["pid"] == daemon.pid
    assert after["devices"][0] == "cpu" and all(d.startswith("gpu") for d in after["devices"][1:])
    assert after["uptime_s"] > 0
    assert after["endpoint"] == paths.endpoint(paths.read_connection_file(daemon.connection_file))
    assert after["by_op"]["price"] == before["by_op"].get("price", 0) + 1
    assert after["by_op"]["ping"] == before["by_op"].get("ping", 0) + 1
    assert after["requests_served"] >= before["requests_served"] + 3  # ping, price, status


@pytest.mark.parametrize("method", [Method(steps=150), Method(steps=101, greeks=False),
                                    Method(name="black-scholes"), None])
def test_price_matches_in_process_bit_for_bit(client, method):
    cols = table(12)
    got = client.price_table(cols, method, fallback=False)
    want = engine.price_table(cols, method)
    assert got.via == "daemon" and want.via == "in-process"
    assert_same_result(got, want)
    assert got.price.flags.writeable and got.status.dtype == object


def test_price_scalars_lists_and_row_columns(client):
    cols = {"kind": "call", "style": "e", "spot": 100, "strike": [95, 100.5, 105], "expiry": 0.75,
            "rate": np.float32(0.03), "dividend_yield": 0.0, "volatility": 0.25,
            "method": ["binomial", "black-scholes", ""], "steps": [64, None, 200]}
    got = client.price_table(cols, Method(steps=300), fallback=False)
    assert_same_result(got, engine.price_table(cols, Method(steps=300)))
    assert got.ok.all()


def test_per_option_steps_array_in_method(client):
    cols = table(6)
    m = Method(steps=np.array([10, 20, 30, 40, 50, 60]))
    assert_same_result(client.price_table(cols, m, fallback=False), engine.price_table(cols, m))


def test_bad_rows_are_marked_not_raised(client):
    cols = table(6)
    cols["kind"] = np.array(["put", "straddle", "call", "put", "call", "put"], dtype=object)
    cols["spot"] = np.array([100.0, 100.0, "abc", 100.0, 100.0, 100.0], dtype=object)
    cols["volatility"] = np.array([0.2, 0.2, 0.2, -0.1, 0.2, np.nan])
    got = client.price_table(cols, Method(steps=50), fallback=False)
    assert got.status.tolist() == ["ok", "error", "error", "error", "ok", "error"]
    assert "straddle" in got.error[1] and "spot" in got.error[2] and "volatility" in got.error[3]
    assert np.isfinite(got.price[[0, 4]]).all() and np.isnan(got.price[[1, 2, 3, 5]]).all()
    assert_same_result(got, engine.price_table(cols, Method(steps=50)))


def test_one_option_over_the_per_option_limit_is_a_row_error_as_in_process(client):
    """One option whose tree is over max_tree_nodes: the daemon marks the row, as the engine does
    in-process and as it does for the same option in a table (it refused the whole request)."""
    cols = dict(kind="put", style="american", spot=100.0, strike=100.0, expiry=1.0, rate=0.03, volatility=0.2)
    m = Method(steps=1_200_000)
    want = engine.price_table(cols, m)
    got = client.price_table(cols, m, fallback=False)
    assert want.status.tolist() == got.status.tolist() == ["error"]
    assert "max_tree_nodes" in want.error[0] and "max_tree_nodes" in got.error[0]


def test_whole_table_errors_raise_invalid_input_error(client):
    cols = table(4)
    del cols["strike"]
    with pytest.raises(InvalidInputError) as remote:
        client.price_table(cols, fallback=False)
    with pytest.raises(InvalidInputError) as local:
        engine.price_table(cols)
    assert str(remote.value) == str(local.value)
    assert remote.value.field == "strike"
    cols = table(4) | {"strike": [90.0, 100.0]}  # lengths differ
    with pytest.raises(InvalidInputError, match="lengths differ"):
        client.price_table(cols, fallback=False)
    with pytest.raises(InvalidInputError, match="one-dimensional"):
        client.price_table(table(4) | {"strike": np.ones((2, 2))}, fallback=False)


@pytest.mark.parametrize("method", [Method(steps=120), Method(steps=90, iv_tolerance=1e-5),
                                    Method(name="black-scholes")])
def test_implied_vol_matches_in_process(client, method):
    cols = table(6)
    cols["style"] = "european"
    prices = engine.price_table(cols, method).price
    prices[2] = 1e-9  # below intrinsic or no solution
    cols["spot"] = np.array([100, 100, 100, 100, "x", 100], dtype=object)  # an invalid row
    vol, status = client.implied_vol(prices, cols, method, fallback=False)
    want_vol, want_status = engine.implied_vol_table(prices, cols, method)
    np.testing.assert_array_equal(vol, want_vol)
    assert status.tolist() == want_status.tolist()
    assert status[0] == "ok" and status[4].startswith("invalid")
    np.testing.assert_allclose(vol[[0, 1, 3, 5]], np.asarray(cols["volatility"])[[0, 1, 3, 5]], rtol=1e-4)


# ---------------------------------------------------------------------------- security and robustness


def test_connection_file_is_private(daemon):
    info = paths.read_connection_file(daemon.connection_file)
    assert info["ip"] == "127.0.0.1" and info["signature_scheme"] == protocol.SIGNATURE_SCHEME and len(info["key"]) >= 64
    if os.name == "posix":
        assert stat.S_IMODE(os.stat(daemon.connection_file).st_mode) == 0o600


def test_wrong_key_gets_no_price(daemon, tmp_path):
    info = paths.read_connection_file(daemon.connection_file)
    forged = dict(info, key="0" * 64)
    paths.write_connection_file(tmp_path / "forged.json", forged)
    good = daemon.client()
    before = good.status()["auth_failures"]
    bad = Client(tmp_path / "forged.json", timeout=0.3, retries=1)
    with pytest.raises(DaemonUnavailable, match="no reply"):
        bad.price_table(table(2), Method(steps=20), fallback=False)
    res = bad.price_table(table(2), Method(steps=20))  # fallback: priced here, not by the daemon
    assert res.via == "in-process" and "marked down" in res.diagnostics["fallback_reason"]
    assert good.status()["auth_failures"] >= before + 2  # first try and one retry
    log = daemon.log()
    assert "authentication failure" in log
    assert info["key"] not in log and forged["key"] not in log
    bad.close()
    good.close()


def _garbage_messages(info: dict, n: int) -> tuple[list[list[bytes]], int]:
    """``n`` bad multipart messages; returns them and how many are correctly signed (those
    must get an error reply; the others must be dropped)."""
    rng = random.Random(1234)
    good = Session(info["key"].encode())
    wrong = Session(b"not-the-key")
    header = good.header("price_request")
    valid = good.serialize(header, {"columns": {"kind": "put"}})
    msgs: list[list[bytes]] = []
    signed = 0

    def rand_bytes(k: int) -> bytes:
        return bytes(rng.getrandbits(8) for _ in range(k))

    def signed_frames(frames: list[bytes]) -> list[bytes]:
        return [DELIM, good.sign(frames), *frames]

    huge_array = msgpack.packb({"columns": {"spot": {"__nd__": ["<f8", [10**12], 0]}}})
    cases = [
        lambda: [rand_bytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 8))],          # random frames
        lambda: valid[: rng.randint(1, len(valid) - 1)],                                     # truncated
        lambda: [DELIM, b"", *valid[2:]],                                                    # unsigned
        lambda: [DELIM, *valid[2:]],                                                         # no signature frame
        lambda: wrong.serialize(header, {"columns": {}}),                                    # wrong key
        lambda: [DELIM, valid[1][:-1] + (b"1" if valid[1].endswith(b"0") else b"0"), *valid[2:]],  # tampered
        # (always a different last digit: writing "0" left a signature ending in 0 intact, 1 run in 16)
        lambda: [*valid, rand_bytes(8)],                                                     # extra buffer
        lambda: [DELIM, rand_bytes(64), rand_bytes(100)],                                    # random signature
        lambda: [rand_bytes(300)] * 12 + [DELIM],                                            # too many identities
    ]
    signed_cases = [
        lambda: signed_frames([b"\xdd\x7f\xff\xff\xff", b"\x80", b"\x80", b"\x80"]),       # header declares 2**31 items
        lambda: signed_frames([valid[2], valid[3], valid[4], huge_array, b"\0" * 8]),       # array declares 8 TB
        lambda: signed_frames([valid[2], valid[3], valid[4], b"\xc1"]),                     # invalid msgpack
        lambda: signed_frames([rand_bytes(40), b"\x80", b"\x80", b"\x80"]),                # random header
        lambda: signed_frames([valid[2]]),                                                  # too few frames
        lambda: signed_frames([msgpack.packb(dict(header, msg_type="rm_rf_request")), b"\x80", b"\x80", b"\x80"]),
        lambda: signed_frames([msgpack.packb(dict(header, version="9.0")), b"\x80", b"\x80", b"\x80"]),
        lambda: signed_frames([valid[2], b"\x80", b"\x80", msgpack.packb([1, 2, 3])]),     # content not a map
        lambda: signed_frames([valid[2], b"\x80", b"\x80", msgpack.packb({"columns": {"spot": [[1, 2]]}})]),
        lambda: signed_frames([valid[2], b"\x80", b"\x80",
                               msgpack.packb({"columns": {"spot": {"__nd__": ["|O", [1], 0]}}}), b"\0" * 8]),
        lambda: signed_frames([valid[2], b"\x80", b"\x80", msgpack.packb({"columns": table(2) | {
            "kind": "put", "style": "american", "strike": 1.0, "expiry": 1.0, "dividend_yield": 0.0,
            "volatility": 0.2}, "method": {"steps": "many"}})]),                             # invalid method
        lambda: signed_frames([valid[2], b"\x80", b"\x80", b"\x80"] + [b""] * 100),          # too many frames
    ]
    for i in range(n):
        if i % 3 == 2:
            msgs.append(rng.choice(signed_cases)())
            signed += 1
        else:
            msgs.append(rng.choice(cases)())
    return msgs, signed


def test_garbage_never_stops_the_daemon(daemon):
    info = paths.read_connection_file(daemon.connection_file)
    good = daemon.client(timeout=10.0)
    before = good.status()
    msgs, signed = _garbage_messages(info, 1000)
    ctx = zmq.Context()
    socks = [ctx.socket(zmq.DEALER) for _ in range(4)]
    try:
        for s in socks:
            s.setsockopt(zmq.LINGER, 0)
            s.connect(paths.endpoint(info))
        for i, m in enumerate(msgs):
            socks[i % len(socks)].send_multipart(m)
        # every correctly signed bad message is answered with an error; nothing else is answered
        session = Session(info["key"].encode())
        replies = []
        deadline = time.monotonic() + 30
        while len(replies) < signed and time.monotonic() < deadline:
            for s in socks:
                while s.poll(50):
                    replies.append(session.recv(s))
        assert len(replies) == signed
        assert all(r.content["status"] == "error" and r.content["error"] for r in replies)
        assert all(len(r.content["error"]) <= 240 for r in replies)
        assert {r.content["ename"] for r in replies} >= {"ProtocolError", "InvalidInputError"}
        assert not any(s.poll(200) for s in socks)  # and the unsigned ones got no reply
    finally:
        for s in socks:
            s.close()
        ctx.term()
    assert daemon.process.poll() is None
    cols = table(4)
    assert_same_result(good.price_table(cols, Method(steps=30), fallback=False),
                       engine.price_table(cols, Method(steps=30)))
    after = good.status()
    assert after["auth_failures"] - before["auth_failures"] == len(msgs) - signed
    assert after["malformed"] > before["malformed"]
    good.close()


@pytest.mark.skipif(os.name != "posix", reason="Unix-domain sockets")
def test_local_clients_use_a_private_unix_socket(daemon, monkeypatch):
    info = paths.read_connection_file(daemon.connection_file)
    url = info["shell_ipc"]
    sock_path = url[len("ipc://"):]
    assert url.startswith("ipc://") and stat.S_ISSOCK(os.stat(sock_path).st_mode)
    assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(sock_path)).st_mode) & 0o077 == 0  # a private directory
    assert paths.shell_endpoint(info) == url
    cols, m = table(), Method(steps=77)
    c = daemon.client(timeout=10.0)
    try:
        via_ipc = c.price_table(cols, m, fallback=False, force=True)
    finally:
        c.close()
    monkeypatch.setenv(paths.TRANSPORT_ENV, "tcp")
    assert paths.shell_endpoint(info) == paths.endpoint(info)
    c = daemon.client(timeout=10.0)
    try:
        via_tcp = c.price_table(cols, m, fallback=False, force=True)
    finally:
        c.close()
    assert_same_result(via_ipc, via_tcp)
    assert_same_result(via_ipc, engine.price_table(cols, m))
    # the socket is signed like TCP: the wrong key gets nothing back
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(url)
    try:
        wrong = Session(b"0" * 64)
        protocol.send_frames(s, wrong.serialize(wrong.header("ping_request"), {}))
        assert not s.poll(500)
    finally:
        s.close()
        ctx.term()


@pytest.mark.parametrize("method", [Method(steps=120), Method(steps=33, greeks=False), Method(steps=1)])
@pytest.mark.parametrize("cell", [
    {"kind": "put", "style": "american", "spot": 100.0, "strike": 104.5, "expiry": 0.7, "rate": 0.03,
     "dividend_yield": 0.01, "volatility": 0.27},
    {"kind": "call", "style": "european", "spot": 50, "strike": 45, "expiry": 2, "rate": 0.0, "volatility": 0.6},
    {"kind": "put", "style": "american", "spot": 100.0, "strike": 100.0, "expiry": 1.0, "rate": 0.5,
     "dividend_yield": 0.0, "volatility": 0.001},  # CRR p outside [0, 1]: a row error
])
def test_one_option_short_path_answers_as_the_general_path(client, method, cell):
    """A one-option request is answered by the daemon's short path; the same request with a
    run option (``force``) takes the general path: the two replies must agree bit for bit."""
    short = client.price_table(cell, method, fallback=False)
    general = client.price_table(cell, method, fallback=False, force=True)
    assert_same_result(short, general)
    assert_same_result(short, engine.price_table(cell, method))
    assert short.via == general.via == "daemon" and short.device == general.device
    again = client.price_table(cell, method, fallback=False)  # now from the reply cache
    assert_same_result(again, short)
    if short.ok.all():
        assert again.diagnostics.get("cached") is True


def test_excel_cells_priced_here_equal_the_daemons(daemon, monkeypatch):
    """A small =BOPM_PUT / =BOPM_CALL cell is priced in the Excel process by default; the same
    cells sent to the daemon (its short path) give the same bits."""
    from optiond.addin import functions as F

    monkeypatch.setenv("OPTIOND_FALLBACK", "0")
    monkeypatch.setenv("OPTIOND_CACHE", "0")
    cells = [(F.BOPM_PUT, (100.0, 80.0 + k, 0.6, 0.04, 0.3, 150, 0.01)) for k in range(0, 40, 3)]
    cells += [(F.BOPM_CALL, (50.0, 45.0 + k, 1.5, 0.02, 0.45, 400, 0.0, False)) for k in range(5)]
    monkeypatch.delenv("OPTIOND_LOCAL_NODES", raising=False)
    here = [f(*a) for f, a in cells]
    monkeypatch.setenv("OPTIOND_LOCAL_NODES", "0")
    before = get_client().status()["by_op"].get("price", 0)
    there = [f(*a) for f, a in cells]
    assert get_client().status()["by_op"]["price"] == before + len(cells)  # these did go to the daemon
    assert all(isinstance(x, float) for x in here) and here == there


def test_cpu_daemon_answers_concurrent_cells_one_by_one(daemon, client):
    """Coalescing defaults to 'auto': on for a GPU daemon, off on a CPU-only one (where each
    one-option request is cheaper on the short path); the replies are the same either way
    (tests/test_daemon_ops.py checks the coalesced ones on a daemon with --coalesce always)."""
    st = client.status()
    assert st["coalesce_mode"] == "auto" and st["coalescing"] == (len(st["devices"]) > 1)
    m = Method(steps=40)
    cells = [{"kind": "call", "style": "american", "spot": 100.0, "strike": 80.0 + k, "expiry": 0.5, "rate": 0.03,
              "dividend_yield": 0.02, "volatility": 0.35} for k in range(40)]
    got = price_burst(daemon.connection_file, cells, client._encode_method(m, []))  # all sent before any is read
    for res, cell in zip(got, cells):
        assert res is not None
        assert_same_result(res, engine.price_table(cell, m))
    if not st["coalescing"]:
        assert client.status()["coalesced_requests"] == st["coalesced_requests"]


def test_retried_request_is_answered_from_cache_not_priced_twice(daemon):
    info = paths.read_connection_file(daemon.connection_file)
    session = Session(info["key"].encode())
    good = daemon.client()
    before = good.status()["by_op"].get("price", 0)
    ctx = zmq.Context()
    try:
        content = {"columns": {k: v for k, v in {"kind": "put", "style": "american", "spot": 100.0, "strike": 101.0,
                                                  "expiry": 1.0, "rate": 0.02, "volatility": 0.3}.items()}}
        header = session.header("price_request")
        replies = []
        for _ in range(2):  # the same msg_id from two sockets, as a Lazy Pirate retry does
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(paths.endpoint(info))
            protocol.send_frames(s, session.serialize(header, content))
            assert s.poll(10_000)
            replies.append(session.recv(s))
            s.close()
    finally:
        ctx.term()
    assert replies[0].parent_header["msg_id"] == replies[1].parent_header["msg_id"] == header["msg_id"]
    assert replies[0].buffers == replies[1].buffers and replies[0].content == replies[1].content
    assert good.status()["by_op"]["price"] == before + 1
    good.close()


def test_threads_each_get_their_own_reply(daemon):
    c = daemon.client(timeout=30.0)
    n_threads, per_thread = 8, 500
    base = {"kind": "put", "style": "american", "spot": 100.0, "expiry": 0.5, "rate": 0.03, "dividend_yield": 0.0,
            "volatility": 0.25}
    m = Method(steps=16, greeks=False)
    strikes = 50.0 + np.arange(n_threads * per_thread) * 0.025  # distinct strike per request
    got = np.full(strikes.shape, np.nan)
    vias = set()
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(t * per_thread, (t + 1) * per_thread):
                r = c.price_table(base | {"strike": strikes[i]}, m, fallback=False)
                got[i] = r.price[0]
                vias.add(r.via)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and vias == {"daemon"}
    want = np.array([engine.price_table(base | {"strike": k}, m).price[0] for k in strikes])
    np.testing.assert_array_equal(got, want)
    c.close()


@pytest.mark.parametrize("raw, cores, want", [("", 2, 0.0), ("", 16, protocol.SPIN_US_DEFAULT * 1e-6),
                                              ("0", 16, 0.0), ("50", 2, 5e-5), (" 1000000 ", 2, 1.0)])
def test_spin_seconds_from_environment_and_cores(monkeypatch, raw, cores, want):
    monkeypatch.setenv(protocol.SPIN_ENV, raw)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert protocol.spin_seconds() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("raw", ["-1", "fast", "2e6", "nan"])
def test_spin_seconds_ignores_bad_settings_with_a_warning(monkeypatch, caplog, raw):
    monkeypatch.setenv(protocol.SPIN_ENV, raw)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2)), raising=False)
    with caplog.at_level("WARNING", logger="optiond.protocol"):
        assert protocol.spin_seconds() == 0.0  # the 2-core default
    assert protocol.SPIN_ENV in caplog.text
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    c = Client("/nonexistent/daemon.json")
    assert c.spin_s == pytest.approx(protocol.SPIN_US_DEFAULT * 1e-6)
    c.close()


def test_spin_until_readable_sees_a_waiting_message(pair):
    a, b = pair
    assert not protocol.spin_until_readable(b, 1e-4) and not protocol.readable(b)
    a.send_multipart([b"x", b"y"])
    assert protocol.spin_until_readable(b, 5.0) and protocol.readable(b)
    assert b.recv_multipart()[1:] == [b"x", b"y"] and not protocol.readable(b)


def test_spinning_daemon_and_client_match_every_reply(tmp_path):
    """Both ends polling before they sleep (as on a machine with cores to spare): every reply
    reaches its own request, bit for bit the in-process price."""
    d = start_daemon(tmp_path, env={protocol.SPIN_ENV: "300"})
    try:
        with mock.patch.dict(os.environ, {protocol.SPIN_ENV: "300"}):
            c = Client(d.connection_file, timeout=10.0, retries=0)
        assert c.spin_s == pytest.approx(3e-4)
        base = {"kind": "call", "style": "american", "spot": 100.0, "expiry": 0.75, "rate": 0.02,
                "dividend_yield": 0.01, "volatility": 0.3}
        m = Method(steps=64, greeks=True)
        strikes = 80.0 + np.arange(300) * 0.125
        fields = ("price",) + GREEK_FIELDS

        def row(r):
            assert r.device == "cpu"
            return [float(getattr(r, f)[0]) for f in fields]
        got = np.array([row(c.price_table(base | {"strike": k}, m, fallback=False)) for k in strikes])
        want = np.array([row(engine.price_table(base | {"strike": k}, m)) for k in strikes])
        np.testing.assert_array_equal(got, want)
        c.close()
    finally:
        stop_daemon(d)


def test_shared_client_finds_the_fixture_daemon(daemon):
    res = get_client().price_table(table(2), Method(steps=20))
    assert res.via == "daemon" and res.device == "cpu"
    assert get_client() is get_client()


def test_values_that_cannot_travel_are_priced_in_process(client):
    import datetime

    cols = table(4)
    cols["spot"] = np.array([100.0, datetime.date(2025, 1, 1), 101.0, 99.0], dtype=object)
    res = client.price_table(cols, Method(steps=20))
    assert res.via == "in-process" and res.status.tolist() == ["ok", "error", "ok", "ok"]
    assert_same_result(res, engine.price_table(cols, Method(steps=20)))
    with pytest.raises(TypeError, match="cannot send"):
        client.price_table(cols, Method(steps=20), fallback=False)
    with pytest.raises(TypeError, match="Method"):
        client.price_table(table(2), {"steps": 20})


# ---------------------------------------------------------------------------- fallback and CLI


def test_fallback_to_in_process_when_no_daemon(tmp_path, monkeypatch):
    cols = table(4)
    c = Client(tmp_path / "absent.json", timeout=0.2, retries=0)
    res = c.price_table(cols, Method(steps=40))
    assert res.via == "in-process"
    assert_same_result(res, engine.price_table(cols, Method(steps=40)))
    vol, status = c.implied_vol(res.price, cols, Method(steps=40))
    np.testing.assert_array_equal(vol, engine.implied_vol_table(res.price, cols, Method(steps=40)).vol)
    with pytest.raises(DaemonUnavailable, match="no connection file"):
        c.price_table(cols, fallback=False)
    with pytest.raises(DaemonUnavailable):
        c.ping()
    monkeypatch.setenv(paths.ENV_VAR, str(tmp_path / "absent-too.json"))
    assert get_client().price_table(cols, Method(steps=40)).via == "in-process"
    c.close()


def test_stale_connection_file_is_remembered_as_down(tmp_path):
    ctx = zmq.Context()
    s = ctx.socket(zmq.ROUTER)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    s.close(linger=0)  # the port is closed again: nobody listens there
    ctx.term()
    info = {"transport": "tcp", "ip": "127.0.0.1", "shell_port": port, "iopub_port": port, "hb_port": port,
            "control_port": port, "signature_scheme": protocol.SIGNATURE_SCHEME, "key": "k" * 64}
    paths.write_connection_file(tmp_path / "stale.json", info)
    c = Client(tmp_path / "stale.json", timeout=0.5, retries=1, connect_timeout=0.3, down_s=60)
    first = c.price_table(table(2), Method(steps=20))
    second = c.price_table(table(2), Method(steps=20))
    assert first.via == second.via == "in-process"
    assert "cannot connect" in first.diagnostics["fallback_reason"]
    assert "marked down" in second.diagnostics["fallback_reason"]  # did not wait again
    c.close()


def test_status_exit_code_when_down(tmp_path):
    r = run_cli("status", "--connection-file", str(tmp_path / "absent.json"))
    assert r.returncode == 1 and "not running" in r.stderr
    r = run_cli("status", "--json", env={paths.ENV_VAR: str(tmp_path / "absent.json")})
    assert r.returncode == 1 and json.loads(r.stdout)["running"] is False


def test_status_command_when_up(daemon):
    r = run_cli("status", "--connection-file", str(daemon.connection_file))
    assert r.returncode == 0, r.stderr
    assert f"pid             {daemon.pid}" in r.stdout and "devices         cpu" in r.stdout
    r = run_cli("status", "--json", env={paths.ENV_VAR: str(daemon.connection_file)})
    st = json.loads(r.stdout)
    assert r.returncode == 0 and st["running"] and st["pid"] == daemon.pid and "requests_served" in st


def test_serve_detach_status_stop(tmp_path):
    conn = tmp_path / "detached.json"
    r = run_cli("serve", "--detach", "--no-warmup", "--connection-file", str(conn))
    assert r.returncode == 0, r.stderr
    assert conn.exists()
    if os.name == "posix":
        assert stat.S_IMODE(os.stat(conn).st_mode) == 0o600
    pid = paths.read_connection_file(conn)["pid"]
    ipc = paths.read_connection_file(conn).get("shell_ipc")
    assert (ipc is not None) == (os.name == "posix")
    r = run_cli("status", "--connection-file", str(conn))
    assert r.returncode == 0 and str(pid) in r.stdout
    again = run_cli("serve", "--detach", "--connection-file", str(conn))  # already running: no second daemon
    assert again.returncode == 0 and "already running" in again.stderr
    assert paths.read_connection_file(conn)["pid"] == pid
    r = run_cli("stop", "--connection-file", str(conn))
    assert r.returncode == 0, r.stderr
    assert not conn.exists()
    if ipc is not None:
        assert not os.path.exists(ipc[len("ipc://"):])  # the Unix socket goes with the daemon
    assert run_cli("status", "--connection-file", str(conn)).returncode == 1
    assert run_cli("stop", "--connection-file", str(conn)).returncode == 1


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_cleanly(tmp_path, sig):
    handle = start_daemon(tmp_path, "--no-warmup")
    try:
        handle.process.send_signal(sig)
        assert handle.process.wait(timeout=15) == 0
        assert not handle.connection_file.exists()
    finally:
        stop_daemon(handle)


@pytest.mark.skipif(not hasattr(__import__("socket"), "AF_UNIX"), reason="AF_UNIX datagrams")
def test_systemd_notifications(tmp_path):
    import socket

    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(10)
        handle = start_daemon(tmp_path, "--no-warmup", env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000"})
        try:
            seen = [sock.recv(256) for _ in range(3)]
            assert b"READY=1" in seen
            assert b"WATCHDOG=1" in seen
        finally:
            stop_daemon(handle)
        for _ in range(100):  # bounded: the watchdog pings that came before the last word
            last = sock.recv(256)
            if last != b"WATCHDOG=1":
                break
        assert last == b"STOPPING=1"


def test_second_serve_refuses_while_one_runs(daemon):
    r = run_cli("serve", "--no-warmup", "--connection-file", str(daemon.connection_file), timeout=60)
    assert r.returncode == 2 and "already runs" in r.stderr
    assert daemon.client().ping()["pid"] == daemon.pid


# ---------------------------------------------------------------------------- protocol units


@pytest.mark.parametrize("dtype", ["<f8", "<f4", "<i8", "<i4", "|i1", "|u1", "|b1"])
def test_arrays_travel_as_raw_buffers(pair, dtype):
    a, b = pair
    s = Session(b"key")
    arr = (np.arange(10) % 3).astype(dtype)
    bufs: list = []
    spec = protocol.encode_array(arr, bufs)
    s.send(a, "x_request", {"a": spec}, buffers=bufs)
    msg = s.recv(b)
    assert msg.identities and len(msg.buffers) == 1 and len(msg.buffers[0]) == arr.nbytes
    out = protocol.decode_array(msg.content["a"], msg.buffers)
    assert out.dtype == arr.dtype and np.array_equal(out, arr) and out.flags.writeable


def test_signature_covers_buffers(pair):
    a, b = pair
    s = Session(b"key")
    frames = s.serialize(s.header("x_request"), {"a": 1}, buffers=[b"12345678"])
    frames[-1] = b"12345679"
    a.send_multipart(frames)
    with pytest.raises(AuthenticationError):
        s.recv(b)


@pytest.mark.parametrize("parallel", [True, False])
def test_large_buffers_are_signed_leaf_by_leaf(pair, monkeypatch, parallel):
    """A frame over 64 KiB enters the HMAC as its 1 MiB leaves' SHA-256 digests, which the
    signature frame carries after the hex HMAC (the leaf manifest): the signature still covers
    every byte (one changed byte in any leaf, a leaf boundary moved, or a changed digest in the
    manifest fails), and the parallel and serial digests agree."""
    import hashlib
    import hmac as hmac_mod

    monkeypatch.setattr(protocol, "PARALLEL_LEAF_BYTES", 0 if parallel else 1 << 40)
    a, b = pair
    s = Session(b"key")
    rng = np.random.default_rng(5)
    big = rng.integers(0, 256, 3 * protocol.LEAF_BYTES + 12345, dtype=np.uint8).tobytes()
    mid = b"m" * (protocol.DIGEST_MIN_BYTES + 1)  # one leaf
    small = b"x" * 100
    frames = s.serialize(s.header("x_request"), {"a": 1}, buffers=[small, mid, big])
    # the signature, recomputed from the definition: framing, small frames raw, big ones by leaves
    signed = frames[2:]
    h = hmac_mod.new(b"key", digestmod=hashlib.sha256)
    h.update(protocol.framing(signed))
    manifest = b""
    for f in signed:
        if len(f) > protocol.DIGEST_MIN_BYTES:
            f = b"".join(hashlib.sha256(f[i:i + protocol.LEAF_BYTES]).digest()
                         for i in range(0, len(f), protocol.LEAF_BYTES))
            manifest += f
        h.update(f)
    assert len(manifest) == 32 * 5
    assert frames[1] == h.hexdigest().encode() + manifest
    a.send_multipart(frames)
    assert s.recv(b).buffers[2] == big
    for where in (0, protocol.LEAF_BYTES - 1, 2 * protocol.LEAF_BYTES + 7, len(big) - 1):
        bad = bytearray(big)
        bad[where] ^= 1
        a.send_multipart(frames[:-1] + [bytes(bad)])
        with pytest.raises(AuthenticationError):
            s.recv(b)
    moved = frames[:-2] + [mid + big[:1], big[1:]]  # a byte moved across the frame boundary
    a.send_multipart(moved)
    with pytest.raises(AuthenticationError):
        s.recv(b)
    bad_manifest = bytearray(frames[1])
    bad_manifest[-1] ^= 1  # the buffers untouched, one declared digest changed
    a.send_multipart([frames[0], bytes(bad_manifest), *frames[2:]])
    with pytest.raises(AuthenticationError):
        s.recv(b)


def test_oversized_messages_are_refused_but_answered_when_signed(pair):
    a, b = pair
    s = Session(b"key", max_bytes=1000, max_frames=6)
    s.send(a, "x_request", {}, buffers=[b"x" * 2000])
    with pytest.raises(ProtocolError, match="too large") as e:
        s.recv(b)
    assert e.value.authenticated and e.value.header["msg_type"] == "x_request"
    s.send(a, "x_request", {}, buffers=[b""] * 10)
    with pytest.raises(ProtocolError, match="frames"):
        s.recv(b)
    Session(b"other", max_bytes=1000).send(a, "x_request", {}, buffers=[b"x" * 2000])
    with pytest.raises(AuthenticationError):
        s.recv(b)


@pytest.mark.parametrize("spec, buffers, match", [
    ({"__nd__": ["|O", [1], 0]}, [b"\0" * 8], "not allowed"),
    ({"__nd__": [">f8", [1], 0]}, [b"\0" * 8], "not allowed"),
    ({"__nd__": ["<f8", [10**12], 0]}, [b"\0" * 8], "declared"),
    ({"__nd__": ["<f8", [-1], 0]}, [b"\0" * 8], "shape"),
    ({"__nd__": ["<f8", [1], 3]}, [b"\0" * 8], "index"),
    ({"__nd__": ["<f8", [1, 1, 1, 1, 1], 0]}, [b"\0" * 8], "shape"),
    ({"__nd__": ["<f8", [1]]}, [b"\0" * 8], "malformed"),
    ({"__nd__": ["<f8", [1], 0], "x": 1}, [b"\0" * 8], "malformed"),
])
def test_decode_array_rejects(spec, buffers, match):
    with pytest.raises(ProtocolError, match=match):
        protocol.decode_array(spec, buffers)


def test_unpackb_rejects_huge_declared_lengths():
    for data in (b"\xdd\x7f\xff\xff\xff", b"\xdf\x7f\xff\xff\xff", b"\xdb\x7f\xff\xff\xff", b"\xc6\x7f\xff\xff\xff"):
        with pytest.raises(ProtocolError):
            protocol.unpackb(data)


def test_client_rejects_bad_arguments():
    with pytest.raises(ValueError):
        Client(timeout=0)
    with pytest.raises(DaemonError):
        Client._decode_result(protocol.Message({}, {}, {}, {"n": 2, "values": {"__nd__": ["<f8", [6, 1], 0]}},
                                               [b"\0" * 48]))


def test_client_follows_the_environment_even_when_the_new_file_was_resolved_first(daemon, monkeypatch, tmp_path):
    """The shared client's cached connection serves only the file the environment names now:
    a call that resolves the new name first (here the ``connection_file`` property) must not
    leave the old daemon's connection in place for the next request (it did, within the
    0.25 s between two stat checks: a test that set a missing file after a daemon test was
    answered by that daemon about one run in two)."""
    monkeypatch.setenv(paths.ENV_VAR, str(daemon.connection_file))
    c = Client(timeout=5.0)
    try:
        assert c.ping()["pid"] == daemon.daemon_pid
        monkeypatch.setenv(paths.ENV_VAR, str(tmp_path / "none.json"))
        assert c.connection_file == tmp_path / "none.json"  # resolves the new name, as a status probe does
        with pytest.raises(DaemonUnavailable, match="none.json"):
            c.ping(timeout=1.0)
    finally:
        c.close()
