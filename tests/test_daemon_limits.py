"""Bounded resources against local peers that do not hold the key (loopback only).

* a dummy-signed large message is dropped without its large frames being hashed (the leaf
  manifest in the signature frame is checked first), while a signed one of the same size is
  received whole;
* a peer whose large message has no valid signature loses its connection;
* a daemon under an open-files limit of 1,024 (soft and hard: it cannot raise it) and 1,100
  idle TCP connections to its shell port stays up, sheds what is over its cap, answers
  authenticated clients within 1 s over TCP (connected before) and the Unix socket (new), and
  ``/healthz``; once the flood ends a new TCP client is served;
* 1,000 half-sent HTTP requests to its metrics port leave its thread count as it was and
  ``/healthz`` answering;
* silent, handshaken ZeroMQ peers over the cap on the shell, control and heartbeat ports do
  not keep a signed TCP client, ``optiond status`` or the heartbeat out;
* a subscriber without the key cannot read the events.

Every loop is bounded in count and time; every connection goes to 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

from conftest import start_daemon, stop_daemon

from optiond.daemon import protocol
from optiond.daemon.client import Client
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


def _wait_until(predicate, timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes (a bound, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_large_unsigned_message_costs_the_peer_its_connection(tmp_path):
    """Over TCP, a peer whose message of over 64 KiB has no valid signature is disconnected
    (what it queued goes with the connection); a small bad message is only dropped and counted."""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    from optiond.daemon import paths
    from optiond.daemon.server import Server

    server = Server(tmp_path / "daemon.json", warmup=False, json_log=False, metrics_port=None, ipc=False)
    server.start()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    ctx = zmq.Context()
    try:
        url = paths.endpoint(paths.read_connection_file(tmp_path / "daemon.json"))
        wrong = Session(b"not-the-key")

        def send_and_watch(buffers, wait_ms):
            """Send one wrongly signed message; whether the daemon closed the connection in ``wait_ms``."""
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            mon = s.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
            s.connect(url)
            try:
                assert mon.poll(5000) and recv_monitor_message(mon)["event"] == zmq.EVENT_CONNECTED
                s.send_multipart(wrong.serialize(wrong.header("price_request"), {}, buffers=buffers), copy=False)
                return bool(mon.poll(wait_ms)) and recv_monitor_message(mon)["event"] == zmq.EVENT_DISCONNECTED
            finally:
                s.disable_monitor()
                mon.close(linger=0)
                s.close(linger=0)

        def shed() -> int:
            return server.guard.stats()["shed"]["shell"]

        before = server.status()["auth_failures"]
        assert send_and_watch([b"\x02" * (1 << 20)], 5000)
        _wait_until(lambda: shed() >= 1)  # counted just after the shutdown the peer saw
        assert shed() == 1
        assert not send_and_watch([b"small"], 1000)
        _wait_until(lambda: server.status()["auth_failures"] >= before + 2)
        assert server.status()["auth_failures"] == before + 2 and shed() == 1
    finally:
        ctx.term()
        server.stop()
        t.join(timeout=10)
        server.close()


def test_a_proven_connection_stays_and_a_newcomer_displaces_a_silent_one(tmp_path, monkeypatch):
    """With a cap of 4 connections a port, over TCP: a signed client's connection (proven by
    its first message) stays open while 12 silent key-less ZeroMQ peers come and go, and a new
    signed client still gets in, in the place of the oldest silent one. (Before, the first
    silent peers held the port and every newcomer was refused.)"""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    from optiond.daemon import paths
    from optiond.daemon.server import Server

    monkeypatch.setenv("OPTIOND_TRANSPORT", "tcp")
    conn = tmp_path / "daemon.json"
    server = Server(conn, warmup=False, json_log=False, metrics_port=None, max_connections=4, persist_objects=False)
    server.start()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    ctx = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)
    first = Client(conn, timeout=5.0, retries=0)
    second = Client(conn, timeout=5.0, retries=1)
    silent = []
    try:
        assert first.ping()["pid"] == server.pid
        watched = first._socket(first._connection(), "shell")
        mon = watched.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        url = paths.endpoint(paths.read_connection_file(conn))
        for _ in range(12):
            s = ctx.socket(zmq.DEALER)
            s.connect(url)
            silent.append(s)
        _wait_until(lambda: server.guard.stats()["shed"]["shell"] >= 12)  # each of them came at least once
        assert server.guard.stats()["unproven"]["shell"] == 3  # what the proven one leaves of the cap
        assert second.ping()["pid"] == server.pid  # a newcomer, in the place of a silent one
        assert first.ping()["pid"] == server.pid
        st = server.guard.stats()
        assert st["proven"]["shell"] == 2 and st["unproven"]["shell"] <= 2, st
        assert not mon.poll(0), recv_monitor_message(mon)  # the first client's connection never dropped
        watched.disable_monitor()
        mon.close(linger=0)
    finally:
        first.close()
        second.close()
        for s in silent:
            s.close()
        ctx.term()
        server.stop()
        t.join(timeout=10)
        server.close()


# ---------------------------------------------------------------------------- floods

FLOOD = 1100
FD_LIMIT = 1024

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and sets RLIMIT_NOFILE")


def _limit_open_files() -> None:  # runs in the daemon's child process before exec
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _proc(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _http(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """A daemon subprocess whose open-files limit is 1,024, soft and hard; this process
    raises its own soft limit to hold the flood (skipped where the hard limit is too low)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FLOOD + 1100
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"needs an open-files hard limit of {want} for the test's own sockets (have {hard})")
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    handle = start_daemon(tmp_path_factory.mktemp("limited"), "--no-warmup", preexec_fn=_limit_open_files)
    try:
        yield handle
    finally:
        stop_daemon(handle)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _flood(port: int, n: int, payload: bytes = b"") -> list[socket.socket]:
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=15.0)
            if payload:
                s.sendall(payload)
            socks.append(s)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


@linux_only
def test_1100_idle_connections_under_1024_open_files(limited, monkeypatch):
    info = json.loads(limited.connection_file.read_text())
    pid = limited.daemon_pid
    monkeypatch.setenv("OPTIOND_TRANSPORT", "tcp")
    tcp_client = limited.client(timeout=1.0, retries=0)
    assert tcp_client.ping()["pid"] == pid  # connected over TCP before the flood
    monkeypatch.delenv("OPTIOND_TRANSPORT")
    socks = _flood(info["shell_port"], FLOOD)
    try:
        assert limited.process.poll() is None, limited.log()
        t = time.monotonic()
        assert tcp_client.ping()["pid"] == pid  # a 1 s timeout, no retry
        ipc_client = limited.client(timeout=1.0, retries=0)
        try:
            assert ipc_client.ping()["pid"] == pid  # a new client, over the Unix socket
        finally:
            ipc_client.close()
        answered = time.monotonic() - t
        status, body = _http(info["metrics_port"], "/healthz")
        assert status == 200, body
        _, metrics = _http(info["metrics_port"], "/metrics")
        shed = _metric(metrics, 'optiond_connections_shed_total{transport="shell"}')
        held = _metric(metrics, 'optiond_connections{transport="shell"}')
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        assert shed > 0 and held < FLOOD and fds < FD_LIMIT - 64, (shed, held, fds)
        print(f"\nflood of {FLOOD}: {held:.0f} held, {shed:.0f} shed, {fds} fds open; "
              f"two pings answered in {answered * 1e3:.1f} ms")
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:  # the shed and closed connections are counted out
        _, metrics = _http(info["metrics_port"], "/metrics")
        if _metric(metrics, 'optiond_connections{transport="shell"}') < 50:
            break
        time.sleep(0.1)
    monkeypatch.setenv("OPTIOND_TRANSPORT", "tcp")
    fresh = limited.client(timeout=2.0, retries=0)
    try:
        assert fresh.ping()["pid"] == pid
    finally:
        fresh.close()
        tcp_client.close()
    assert limited.process.poll() is None


@linux_only
def test_1000_half_sent_http_requests_keep_the_thread_count(limited):
    info = json.loads(limited.connection_file.read_text())
    pid = limited.daemon_pid
    port = info["metrics_port"]
    assert _http(port, "/healthz")[0] == 200
    before = _proc(pid, "Threads")
    socks = _flood(port, 1000, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: never complete
    try:
        during = _proc(pid, "Threads")
        t = time.monotonic()
        status, body = _http(port, "/healthz")
        took = time.monotonic() - t
        after = _proc(pid, "Threads")
        assert status == 200, body
        assert max(during, after) <= before + 2, (before, during, after)
        print(f"\n1000 half-sent requests: threads {before} -> {during}/{after}; /healthz in {took * 1e3:.1f} ms")
    finally:
        for s in socks:
            s.close()
    assert limited.process.poll() is None


#: silent peers per port beyond the per-transport cap (which the old guard filled, then
#: refused every newcomer)
OVER_CAP = 16


@linux_only
def test_silent_key_less_peers_cannot_lock_out_signed_clients_or_status(limited, monkeypatch, capsys):
    """``cap + 16`` ZeroMQ DEALER sockets on each of the shell, control and heartbeat TCP
    ports, handshaken and silent (and reconnecting every 100 ms when shed, as ZeroMQ does),
    under an open-files limit of 1,024: a new signed client is served over TCP, its price is
    the engine's, ``optiond status`` says running over TCP and over the Unix sockets, and the
    heartbeat echoes over TCP. (Before, the first ``cap`` silent peers of a port held it and
    every newcomer was shed.)"""
    import zmq

    from optiond import engine
    from optiond.daemon import commands, paths
    from optiond.models import Method

    info = json.loads(limited.connection_file.read_text())
    pid = limited.daemon_pid
    assert {"control_ipc", "hb_ipc", "shell_ipc"} <= set(info)
    assert [paths.shell_endpoint(info, ch) for ch in ("control", "hb")] == [info["control_ipc"], info["hb_ipc"]]
    local = limited.client(timeout=5.0, retries=1)  # over the Unix sockets: outside the flood
    before = local.status()["connections"]
    n = before["cap"] + OVER_CAP
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 3 * n + 64)
    ctx.setsockopt(zmq.LINGER, 0)
    silent = []
    try:
        for port in ("shell_port", "control_port", "hb_port"):
            for _ in range(n):
                s = ctx.socket(zmq.DEALER)
                s.connect(paths.endpoint(info, port))
                silent.append(s)
        deadline = time.monotonic() + 30.0
        while True:  # the daemon has seen more than its cap of them on every port
            st = local.status()["connections"]
            if all(st["shed"][t] - before["shed"][t] >= OVER_CAP for t in ("shell", "control", "hb")):
                break
            assert time.monotonic() < deadline, st
            time.sleep(0.05)
        assert min(st["unproven"][t] for t in ("shell", "control", "hb")) >= st["cap"] // 2, st
        assert local._heartbeat(local._connection(), 2.0)  # the heartbeat's Unix socket echoes

        monkeypatch.setenv("OPTIOND_TRANSPORT", "tcp")
        tcp = limited.client(timeout=2.0, retries=2)
        try:
            assert tcp._connection().endpoint("shell").startswith("tcp://")
            assert tcp.ping()["pid"] == pid
            cols = {"kind": "put", "style": "american", "spot": 100.0, "strike": [90.0, 100.0, 110.0],
                    "expiry": 0.5, "rate": 0.03, "volatility": 0.25}
            got = tcp.price_table(cols, Method(steps=200), fallback=False, timeout=60.0)  # (kernels may load)
            assert got.via == "daemon"
            np.testing.assert_array_equal(got.price, engine.price_table(cols, Method(steps=200)).price)
            assert tcp._heartbeat(tcp._connection(), 2.0)  # the TCP heartbeat echoes
            assert local.status()["connections"]["proven"]["shell"] >= 1  # its connection is proven
        finally:
            tcp.close()
        args = ["status", "--json", "--connection-file", str(limited.connection_file)]
        assert commands.main(args) == 0  # over the flooded TCP control port
        assert json.loads(capsys.readouterr().out)["running"] is True
        monkeypatch.delenv("OPTIOND_TRANSPORT")
        assert commands.main(args) == 0  # over the control channel's Unix socket
        st = json.loads(capsys.readouterr().out)
        assert st["running"] is True and st["pid"] == pid
        conns = st["connections"]
        assert conns["proven"]["control_ipc"] >= 1, conns
        print(f"\n{n} silent peers on each of 3 ports (cap {conns['cap']}): "
              f"{sum(conns['shed'][t] for t in ('shell', 'control', 'hb'))} shed or displaced; "
              f"signed TCP ping, price and status served")
    finally:
        for s in silent:
            s.close(linger=0)
        ctx.term()
        local.close()
    assert limited.process.poll() is None


@linux_only
def test_events_cannot_be_read_without_the_key(limited):
    """A subscriber without the key never completes the handshake of the event (PUB) port,
    so it reads nothing, while the key holder's subscription receives the signed events."""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    from optiond.daemon import paths

    info = json.loads(limited.connection_file.read_text())
    assert info["iopub_security"] == "curve"
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    mon = sub.get_monitor_socket()
    keyed = limited.client(timeout=5.0)
    sub.connect(paths.endpoint(info, "iopub_port"))
    failed = {zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
              zmq.EVENT_HANDSHAKE_FAILED_AUTH}
    outcome = None
    try:
        with keyed.subscribe() as events:
            assert events.wait_connected(10.0)  # the key holder reads the events
            deadline = time.monotonic() + 10.0
            while outcome is None and time.monotonic() < deadline:
                if sub.poll(50):  # a status event goes to every new subscriber at once
                    outcome = ("read", sub.recv_multipart()[0])
                while outcome is None and mon.poll(0):
                    ev = recv_monitor_message(mon)["event"]
                    if ev in failed:
                        outcome = ("refused", ev)
    finally:
        sub.disable_monitor()
        mon.close(linger=0)
        sub.close(linger=0)
        ctx.term()
        keyed.close()
    assert outcome is not None and outcome[0] == "refused", outcome


@linux_only
def test_the_daemon_raises_its_soft_open_files_limit_to_the_hard_one():
    """What ``Server.start`` calls: a soft limit of 1,024 under a hard one of 4,096 becomes
    4,096 (as the kernel reports it), and the budget leaves the reserve free."""
    import resource
    import subprocess

    from optiond.daemon import connections

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip("needs a hard open-files limit of 4096")

    def limits():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096))

    code = ("from optiond.daemon import connections; print(connections.raise_nofile_limit()); "
            "print(next(l for l in open('/proc/self/limits') if l.startswith('Max open files')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         preexec_fn=limits, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    first, second = [line for line in out.stdout.splitlines() if line.strip()]
    assert int(first) == 4096 and second.split()[3:5] == ["4096", "4096"], out.stdout
    assert connections.budget(4096) == 3072 and connections.budget(1024) == 768
    assert connections.budget(None) == connections.WINDOWS_BUDGET


def test_the_systemd_unit_raises_the_open_files_limit():
    import resource

    from optiond.commands import service

    assert "\nLimitNOFILE=4096\n" in service.unit_text("/opt/optiond/bin/optiond", nofile=4096)
    default = service.default_nofile()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert f"\nLimitNOFILE={default}\n" in service.unit_text("/x")
    assert 1024 <= default <= service.NOFILE and (hard == resource.RLIM_INFINITY or default <= max(hard, 1024))


# ---------------------------------------------------------------------------- replays


def test_replayed_and_stale_messages_have_no_new_effect(tmp_path):
    """A captured signed ``drain`` sent again after a ``resume`` gets the first reply and does
    not drain again; a signed message dated before the replay window is refused; a fresh
    date passes (the client's own retries date each attempt afresh)."""
    import zmq

    from optiond.daemon import paths
    from optiond.daemon.client import Client
    from optiond.daemon.protocol import send_frames
    from optiond.daemon.server import Server

    server = Server(tmp_path / "daemon.json", warmup=False, json_log=False, metrics_port=None, replay_window_s=30.0)
    server.start()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    client = Client(tmp_path / "daemon.json", timeout=5.0, retries=0)
    try:
        info = paths.read_connection_file(tmp_path / "daemon.json")
        sock.connect(paths.endpoint(info, "control_port"))
        s = Session(info["key"].encode())

        def ask(frames):
            send_frames(sock, frames)
            assert sock.poll(5000), "no reply"
            return s.recv(sock).content

        client.ping()
        drain = s.serialize(s.header("drain_request"), {})
        assert ask(drain)["state"] == "draining" and server.state == "draining"
        assert client.resume()["state"] == "serving"
        again = ask(drain)  # the captured message, byte for byte
        assert again["state"] == "draining" and server.state == "serving"
        old = dict(s.header("drain_request"), date="2020-01-01T00:00:00.000000+00:00")
        reply = ask(s.serialize(old, {}))
        assert reply["status"] == "error" and reply["ename"] == "StaleMessage" and server.state == "serving"
        undated = {k: v for k, v in s.header("ping_request").items() if k != "date"}
        assert ask(s.serialize(undated, {}))["ename"] == "StaleMessage"
        assert ask(s.serialize(s.header("ping_request"), {}))["status"] == "ok"
        assert server.status()["replayed"] >= 1
    finally:
        client.close()
        sock.close()
        ctx.term()
        server.stop()
        t.join(timeout=10)
        server.close()


def test_date_window_bounds():
    from optiond.daemon.protocol import date_in_window, utcnow

    now = time.time()
    fmt = "%Y-%m-%dT%H:%M:%S.123456+00:00"
    assert date_in_window(utcnow(), 60.0)
    assert date_in_window(time.strftime(fmt, time.gmtime(now - 50)), 60.0)
    assert not date_in_window(time.strftime(fmt, time.gmtime(now - 70)), 60.0)
    assert not date_in_window(time.strftime(fmt, time.gmtime(now + 60)), 60.0)
    for bad in (None, 5, "", "2025-01-31", utcnow().replace("+00:00", "Z")):
        assert not date_in_window(bad, 60.0)
