"""The daemon's named, versioned market objects: the store (names, handles, versions, stale
handles, bounds, threads) and the surface requests against a real daemon subprocess of this
module's own, so that the versions it hands out are this module's alone.

The reference of the daemon's answers is the same chain job and fit run in this process
(:func:`optiond.chain.price_chain`, :func:`optiond.surface.points.fit_chain`) on the same
inputs, and Black-76 (Black 1976) written out here for European prices.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from scipy.stats import norm

from optiond import chain
from optiond.daemon import object_kinds, objects, paths, protocol
from optiond.daemon.client import DaemonError
from optiond.daemon.objects import ObjectStore, StaleHandle, UnknownObject, WrongKind
from optiond.daemon.protocol import Session
from optiond.limits import LimitExceeded, Limits
from optiond.models import InvalidInputError
from optiond.surface import Surface
from optiond.surface.points import fit_chain

from conftest import SPY_EXPIRIES, start_daemon, stop_daemon

MARKET = dict(quote_time="10:50", steps=100)


# ---------------------------------------------------------------------------- the store


def test_versions_handles_and_lookups():
    store = ObjectStore()
    assert store.put("SPY", "surface", "first", 10).handle == "SPY#0001"
    assert store.put("SPY", "surface", "second", 12).handle == "SPY#0002"
    assert store.get("SPY").payload == "second" and store.get(" SPY#0002 ").payload == "second"
    with pytest.raises(StaleHandle, match="stale handle SPY#0001: a later version replaced it; the live one is SPY#0002"):
        store.get("SPY#0001")
    with pytest.raises(StaleHandle, match="never made it"):
        store.get("SPY#0007")
    with pytest.raises(UnknownObject, match="no surface named QQQ in the daemon \\(it holds: SPY\\)"):
        store.get("QQQ", "surface")
    for bad in ("", "a b", "x" * 65, "SPY#1#2", "SPY#", 5, None):
        with pytest.raises(InvalidInputError) as e:
            store.get(bad)
        assert e.value.field == "name"
    assert objects.handle("X", 12345) == "X#12345"
    assert [e.listing()["handle"] for e in store.list()] == ["SPY#0002"]
    assert store.stats() == {"objects": 1, "bytes": 12, "max_objects": Limits().max_objects,
                             "max_objects_bytes": Limits().max_objects_bytes, "persisted": None}


def test_a_name_holds_one_kind(monkeypatch):
    monkeypatch.setattr(objects, "KINDS", ("surface", "curve"))
    store = ObjectStore()
    store.put("USD", "curve", object(), 1)
    with pytest.raises(WrongKind, match="USD holds a curve, not a surface"):
        store.put("USD", "surface", object(), 1)
    with pytest.raises(WrongKind, match="USD#0001 is a curve, not a surface"):
        store.get("USD#0001", "surface")
    with pytest.raises(InvalidInputError):
        store.put("X", "dividends", object(), 1)


def test_bounds_refuse_and_change_nothing():
    store = ObjectStore(Limits(max_objects=2, max_objects_bytes=100))
    store.put("A", "surface", 1, 40)
    store.put("B", "surface", 2, 40)
    with pytest.raises(LimitExceeded) as e:
        store.put("C", "surface", 3, 1)
    assert e.value.limit == "max_objects"
    with pytest.raises(LimitExceeded) as e:
        store.put("A", "surface", 4, 61)  # 61 + 40 > 100
    assert e.value.limit == "max_objects_bytes"
    assert store.get("A").version == 1 and store.stats()["bytes"] == 80
    assert store.put("A", "surface", 5, 60).handle == "A#0002"  # a replacement counts its own size once


def test_a_dropped_name_keeps_counting_its_versions():
    store = ObjectStore()
    store.put("SPY", "surface", 1, 1)
    store.put("SPY", "surface", 2, 1)
    assert store.drop("SPY#0002").handle == "SPY#0002"
    with pytest.raises(UnknownObject):
        store.get("SPY")
    assert store.put("SPY", "surface", 3, 1).handle == "SPY#0003"
    with pytest.raises(StaleHandle):  # the dropped version never answers for the new one
        store.get("SPY#0002")


def test_concurrent_puts_get_one_version_each():
    store = ObjectStore()
    got: list[int] = []
    lock = threading.Lock()

    def work():
        for _ in range(50):
            v = store.put("SPY", "surface", None, 1).version
            with lock:
                got.append(v)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 401)) and store.get("SPY").version == 400


# ---------------------------------------------------------------------------- the daemon


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    handle = start_daemon(tmp_path_factory.mktemp("objects"))
    yield handle
    stop_daemon(handle)


@pytest.fixture
def client(served):
    c = served.client(timeout=30.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def local(spy3):
    """The reference: the same chain job and fit in this process."""
    out, _ = chain.price_chain(spy3, **MARKET)
    return fit_chain(out)


@pytest.fixture(scope="module")
def fitted(served, spy3):
    with served.client(timeout=60.0) as c:
        return c.fit_surface("SPY", spy3, **MARKET)


def grid(surface):
    """Strikes around the forward and times at and between the slices."""
    Ts = [s.T for s in surface.slices]
    times = Ts + [0.5 * (Ts[0] + Ts[1]), 0.75 * Ts[1] + 0.25 * Ts[2]]
    K, T = np.meshgrid(np.linspace(560.0, 800.0, 9), times)
    return K.ravel(), T.ravel()


def test_fit_gives_a_handle_and_per_expiry_statistics(fitted, local, spy3):
    assert fitted["handle"] == "SPY#0001" and fitted["version"] == 1 and fitted["kind"] == "surface"
    assert fitted["chain"]["n"] == len(spy3) and fitted["chain"]["by_status"]["ok"] > 0.5 * len(spy3)
    assert fitted["summary"]["expiries"] == len(SPY_EXPIRIES) and fitted["summary"]["spots"] is True
    assert [s["expiry"] for s in fitted["slices"]] == [s.expiry for s in local.slices] == list(SPY_EXPIRIES)
    for got, want in zip(fitted["slices"], local.slices):
        for f in ("T", "forward", "rate", "spot"):
            assert got[f] == pytest.approx(getattr(want, f), rel=1e-12), f
        assert got["atm_vol"] == pytest.approx(want.atm_vol(), rel=1e-12)
        assert got["rms_vol_pts"] == pytest.approx(want.stats["rms_vol_pts"], rel=1e-9)
        assert 0 <= got["confidence"] <= 1 and got["quotes"] == want.stats["quotes"]


def test_vols_equal_the_fit_in_this_process(client, fitted, local):
    K, T = grid(local)
    want = np.array([float(local.vol(k, t)) for k, t in zip(K, T)])
    for ref in (fitted["handle"], "SPY"):
        iv = client.surface_vol(ref, K, T)
        assert (iv.status == "ok").all(), iv.error
        np.testing.assert_allclose(iv.vol, want, rtol=1e-12)
        assert iv.diagnostics["handle"] == "SPY#0001"


def test_many_vols_run_aside_within_the_request_deadline(client, fitted, local):
    """A request over INLINE_VOL_POINTS points with its own distinct T each runs off the
    request loop within its deadline_s: equal to the surface evaluated point by point here,
    and refused before any work when its deadline is shorter than its costed time."""
    from optiond.daemon.object_ops import INLINE_VOL_POINTS

    n = INLINE_VOL_POINTS + 500
    rng = np.random.default_rng(3)
    T = rng.uniform(local.slices[0].T, local.slices[-1].T, n)
    K = rng.uniform(600.0, 760.0, n)
    iv = client.surface_vol("SPY", K, T, deadline_s=60.0)
    assert (iv.status == "ok").all(), iv.error[:3]
    np.testing.assert_allclose(iv.vol, [float(local.vol(k, t)) for k, t in zip(K, T)], rtol=1e-12)
    with pytest.raises(DaemonError, match="deadline"):
        client.surface_vol("SPY", K, T, deadline_s=1e-9)


def test_european_prices_are_black76_on_the_surface_forward_and_rate(client, fitted, local):
    K, T = grid(local)
    for kind in ("call", "put"):
        res = client.surface_price(fitted["handle"], K, T, kind, american=False)
        assert (res.status == "ok").all(), res.error
        for k, t, got in zip(K, T, res.price):
            F, r, vol = local.forward(t), local.rate(t), float(local.vol(k, t))
            sq = vol * math.sqrt(t)
            d1 = (math.log(F / k) + 0.5 * sq * sq) / sq
            z = 1.0 if kind == "call" else -1.0
            want = math.exp(-r * t) * z * (F * norm.cdf(z * d1) - k * norm.cdf(z * (d1 - sq)))
            assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_american_puts_are_worth_at_least_european_ones(client, fitted, local):
    """On the default 500-step tree (with 200 steps the tree's own error, 0.3 % out of the
    money, exceeds the early-exercise premium at a short expiry)."""
    K, T = grid(local)
    am = client.surface_price("SPY", K, T, "put", american=True)
    eu = client.surface_price("SPY", K, T, "put", american=False)
    assert (am.status == "ok").all() and (am.price >= eu.price).all()
    assert (am.price - eu.price > 1.0).any()  # deep in the money the early exercise is worth something


def test_a_bad_row_marks_only_its_row(client, fitted, local):
    K = [680.0, -1.0, 680.0, 680.0, float("nan")]
    T = [0.3, 0.3, 5.0, 0.3, 0.3]
    iv = client.surface_vol("SPY", K, T)
    assert iv.status.tolist() == ["ok", "invalid", "invalid", "ok", "invalid"]
    assert iv.error[1] == "strike=-1.0: must be > 0" and "must lie within the surface's expiries" in iv.error[2]
    assert iv.vol[0] == iv.vol[3] == pytest.approx(float(local.vol(680.0, 0.3)), rel=1e-12)
    res = client.surface_price("SPY", K, T, ["put", "put", "put", "swap", "put"], american=False)
    assert res.status.tolist() == ["ok", "error", "error", "error", "error"]
    assert res.error[3].startswith("kind='swap': unknown kind")


def test_refit_bumps_the_version_and_the_old_handle_is_stale(client, spy3, local):
    first = client.fit_surface("SPY-refit", spy3, **MARKET)["handle"]
    two = spy3[spy3.expiry.isin(SPY_EXPIRIES[:2])].reset_index(drop=True)
    second = client.fit_surface("SPY-refit", two, **MARKET)["handle"]
    assert (first, second) == ("SPY-refit#0001", "SPY-refit#0002")
    with pytest.raises(DaemonError) as e:
        client.surface_vol(first, 680.0, 0.3)
    assert e.value.ename == "StaleHandle" and "the live one is SPY-refit#0002" in str(e.value)
    late = local.slices[2].T  # the refit has two expiries: the name answers from it now
    assert client.surface_vol("SPY-refit", 680.0, late).status[0] == "invalid"
    assert client.surface_vol(second, 680.0, 0.3).status[0] == "ok"


def test_unknown_names_and_bad_requests_are_answered_and_the_daemon_goes_on(served, client, fitted, spy3):
    with pytest.raises(DaemonError) as e:
        client.surface_vol("NOPE", 680.0, 0.3)
    assert e.value.ename == "UnknownObject" and "no surface named NOPE" in str(e.value) and "SPY" in str(e.value)
    with pytest.raises(InvalidInputError) as e:
        client.surface_price("not a name", 680.0, 0.3, "put")
    assert e.value.field == "name"
    with pytest.raises(InvalidInputError) as e:
        client.fit_surface("SPY", spy3.drop(columns=["bid"]), **MARKET)
    assert e.value.field == "bid"
    with pytest.raises(InvalidInputError) as e:  # a chain with nothing to fit
        client.fit_surface("EMPTY", spy3.assign(bid=np.nan, ask=np.nan), **MARKET)
    assert e.value.field == "chain" and "no expiry has enough quotes" in str(e.value)
    info = paths.read_connection_file(served.connection_file)
    session = Session(info["key"].encode())
    buf: list = []
    for op, content, buffers, ename in (
            ("surface_vol", [1, 2], [], "ProtocolError"),
            ("surface_vol", {"name": "SPY", "strike": [1.0, 2.0], "expiry": [0.3, 0.3, 0.3]}, [], "ProtocolError"),
            ("surface_vol", {"name": "SPY", "strike": 680.0}, [], "InvalidInputError"),
            ("surface_price", {"name": "SPY", "strike": 680.0, "expiry": 0.3, "kind": "put", "steps": 0}, [],
             "InvalidInputError"),
            ("surface_vol", {"name": "SPY", "expiry": 0.3,
                             "strike": protocol.encode_array(np.ones((2, 2)), buf)}, buf, "ProtocolError"),
            ("surface_put", {"name": "X", "surface": "{not json"}, [], "InvalidInputError"),
            ("surface_fit", {"name": "SPY"}, [], "ProtocolError"),
            ("object_drop", {"name": "NOPE"}, [], "UnknownObject")):
        reply = _raw(served, session, op, content, buffers)
        assert reply.content["status"] == "error" and reply.content["ename"] == ename, (op, reply.content)
    assert client.ping()["status"] == "ok" and served.process.poll() is None
    assert client.surface_vol("SPY", 680.0, 0.3).status[0] == "ok"


def _raw(served, session, op, content, buffers):
    import zmq

    info = paths.read_connection_file(served.connection_file)
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(paths.endpoint(info))
        protocol.send_frames(s, session.serialize(session.header(op + "_request"), content, None, None, list(buffers)))
        assert s.poll(20_000), f"no reply to {op}"
        return session.recv(s)
    finally:
        s.close()
        ctx.term()


def test_publish_list_and_drop(served, client, local, tmp_path):
    put = client.put_surface("PUB", local)
    assert put["handle"] == "PUB#0001" and put["summary"]["spots"] is True
    K, T = grid(local)
    np.testing.assert_allclose(client.surface_vol("PUB", K, T).vol, [float(local.vol(k, t)) for k, t in zip(K, T)],
                               rtol=1e-12)
    with pytest.raises(InvalidInputError) as e:
        client.put_surface("PUB", dict(json.loads(local.to_json()), schema="other"))
    assert e.value.field == "surface" and "not an optiond.surface" in str(e.value)
    assert [o["handle"] for o in client.objects() if o["name"] == "PUB"] == ["PUB#0001"]  # the refused put: nothing
    path = tmp_path / "spy.json"
    local.to_json(str(path))
    env = {**os.environ, "OPTIOND_CONNECTION_FILE": str(served.connection_file)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "optiond.cli", "objects", *args], capture_output=True, text=True,
                              env=env, timeout=120)

    # the same document as the live version: its handle stays (no new version, no recalculation)
    proc = cli("publish", str(path), "--name", "PUB")
    assert proc.returncode == 0 and proc.stdout.startswith("PUB#0001: surface of SPY (3 expiries"), proc.stderr
    assert [o["handle"] for o in client.objects() if o["name"] == "PUB"] == ["PUB#0001"]
    # another document (two of the three expiries): the next version
    doc = json.loads(local.to_json())
    doc["slices"] = doc["slices"][:2]
    path.write_text(json.dumps(doc))
    proc = cli("publish", str(path), "--name", "PUB")
    assert proc.returncode == 0 and proc.stdout.startswith("PUB#0002: surface of SPY (2 expiries"), proc.stderr
    listed = {o["handle"]: o for o in json.loads(cli("list", "--json").stdout)}
    assert "PUB#0002" in listed and listed["PUB#0002"]["summary"]["underlying"] == "SPY"
    # a surface counts as every kind does: its canonical JSON document
    two = Surface.from_json(str(path))
    assert listed["PUB#0002"]["bytes"] == len(object_kinds.canonical(object_kinds.document("surface", two)))
    proc = cli("drop", "PUB")
    assert proc.returncode == 0 and "dropped PUB#0002" in proc.stderr
    proc = cli("drop", "PUB")
    held = ", ".join(o["name"] for o in client.objects()) or "none"
    assert proc.returncode == 2 and proc.stderr.strip() == f"optiond objects: no object named PUB in the daemon " \
                                                           f"(it holds: {held})"
    assert all(o["name"] != "PUB" for o in client.objects())
    st = client.status()["objects"]
    assert st["objects"] == len(client.objects()) and st["max_objects"] == Limits().max_objects
