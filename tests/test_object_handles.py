"""Handles that never lie and puts that never stall the daemon:

* a handle is never given twice: not after more names were dropped than the store remembers,
  not after an object file did not read at start, not after a write that failed;
* a failed write is reported (``persisted`` False) and a version that cannot be recorded is
  refused (:class:`NotWritten`), changing nothing;
* a fit whose client was told it failed (its deadline passed, its client's timeout) keeps
  nothing (:class:`Claim`, taken atomically with the publish);
* a put is sized and refused before its document is decoded, runs off the request loop (a
  ping is answered while a put is held), and large files are read back after the start.

The slow steps are made deterministic by patching them to wait on an event of the test.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import json
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest
from test_daemon_faults import in_process_daemon as faults_daemon

from optiond.daemon import object_kinds, object_ops, objects, paths
from optiond.daemon.client import Client, DaemonError, DaemonUnavailable
from optiond.daemon.objects import Claim, NotWritten, ObjectLoading, ObjectStore, StaleHandle, UnknownObject
from optiond.limits import Limits
from optiond.surface import points

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"


def _curve(store: ObjectStore, name: str, rate: float = 0.04):
    return object_kinds.put_document(store, name, "curve", {"days": [30, 365], "rates": [rate, 0.045]})


def _surface_doc(n: int, tag: float = 0.0) -> dict:
    """A valid surface document of ``n`` slices."""
    return {"schema": "optiond.surface", "version": "1.1", "underlying": "X", "quote_time": "2026-02-13T10:50:00",
            "method": "svi", "stats": {},
            "slices": [{"expiry": f"E{i}", "T": 0.01 + i * 1e-4, "forward": 100.0 + tag, "rate": 0.04, "spot": 100.0,
                        "svi": {"a": 0.01, "b": 0.1, "rho": -0.3, "m": 0.0, "sigma": 0.2}, "stats": {}}
                       for i in range(n)]}


# ---------------------------------------------------------------------------- versions


def test_drops_beyond_the_memory_never_give_a_handle_again():
    store = ObjectStore(Limits(max_objects=8))
    first = _curve(store, "FIRST")
    store.drop("FIRST")
    for i in range(objects.DROPPED_MEMORY + 1):  # FIRST's count is pushed out of the memory
        store.put(f"N{i}", "curve", None, 1)
        store.drop(f"N{i}")
    again = _curve(store, "FIRST", 0.05)
    assert again.version > first.version  # the old code: FIRST#0001 again
    with pytest.raises(StaleHandle, match="stale handle FIRST#0001"):
        store.get(first.handle)


def test_forgotten_drops_stay_above_after_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(objects, "DROPPED_MEMORY", 2)
    store = ObjectStore()
    store.open(tmp_path)
    for name in ("A", "B", "C", "D"):  # A's count is pushed out of the memory of two
        _curve(store, name)
        store.drop(name)
    store.close()
    again = ObjectStore()
    again.open(tmp_path)
    assert _curve(again, "A").version == 2  # the old code: A#0001 again
    again.close()


def test_an_unreadable_object_file_never_gives_its_version_again(tmp_path):
    store = ObjectStore()
    store.open(tmp_path)
    _curve(store, "X", 0.01)
    old = _curve(store, "X", 0.02)  # X#0002, the handle a cell holds
    store.close()
    (tmp_path / objects._file_name("X")).write_text('{"format": "optiond.object", "name": "X", cut mid-file')
    again = ObjectStore()
    again.open(tmp_path)
    with pytest.raises(UnknownObject):
        again.get("X")
    new = _curve(again, "X", 0.03)
    assert new.version > old.version  # the old code: X#0001, and X#0001's cell priced on it
    for h in ("X#0001", old.handle):
        with pytest.raises(StaleHandle, match="stale handle"):
            again.get(h)
    again.close()


def test_a_failed_write_is_reported_and_its_version_never_comes_back(tmp_path, monkeypatch):
    store = ObjectStore()
    store.open(tmp_path)
    _curve(store, "X", 0.01)
    real = paths._write_atomic

    def full(path, text):
        if path.name == objects._file_name("X"):
            raise OSError(28, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(paths, "_write_atomic", full)
    lost = _curve(store, "X", 0.02)
    assert lost.persisted is False and store.get("X").listing()["persisted"] is False
    monkeypatch.setattr(paths, "_write_atomic", real)
    store.close()
    again = ObjectStore()
    again.open(tmp_path)
    assert _curve(again, "X", 0.03).version > lost.version
    assert again.get("X").persisted is True
    again.close()


def test_a_version_that_cannot_be_recorded_is_refused_and_changes_nothing(tmp_path, monkeypatch):
    store = ObjectStore()
    store.open(tmp_path)
    before = _curve(store, "X", 0.01)

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paths, "_write_atomic", full)
    with pytest.raises(NotWritten, match="No space left"):
        _curve(store, "X", 0.02)
    assert store.get("X") is before
    store.close()


# ---------------------------------------------------------------------------- claims


def test_a_claim_decides_once_whether_the_object_is_kept():
    store = ObjectStore()
    past = Claim(time.monotonic() - 1.0)
    with pytest.raises(TimeoutError):
        store.put("A", "curve", None, 1, claim=past)
    cancelled = Claim()
    assert cancelled.cancel("the client left")
    with pytest.raises(cf.CancelledError):
        store.put("A", "curve", None, 1, claim=cancelled)
    with pytest.raises(UnknownObject):
        store.get("A")
    taken = Claim()
    assert store.put("A", "curve", None, 1, claim=taken).version == 1
    assert not taken.cancel("too late")  # its runner then answers with the work's own reply


def in_process_daemon(tmp_path, **kw):
    """The faults tests' in-process daemon, its objects in ``tmp_path``, no JSON log, TCP only."""
    return faults_daemon(tmp_path, json_log=False, ipc=False, objects_dir=tmp_path / "objects", **kw)


@pytest.mark.parametrize("op", ["surface", "heston"])
@pytest.mark.parametrize("deadline_s, timeout", [(0.2, 60.0), (None, 1.0)], ids=["deadline", "client-timeout"])
def test_a_fit_the_client_was_told_failed_keeps_nothing(tmp_path, monkeypatch, deadline_s, timeout, op):
    from optiond import chain, heston_fit
    from optiond.surface.points import checked_surface

    release, entered = threading.Event(), threading.Event()

    def held(result):  # the fit's last step, held until the client has its answer
        def step(*a, **kw):
            entered.set()
            release.wait(60)
            return result
        return step

    monkeypatch.setattr(chain, "price_chain", lambda df, **kw: (
        df, types.SimpleNamespace(contracts=len(df), by_status={}, elapsed_s=0.0, device="cpu")))
    monkeypatch.setattr(points, "fit_chain", held(checked_surface(_surface_doc(3))))
    quotes = [types.SimpleNamespace(strike=np.ones(6))]
    monkeypatch.setattr(heston_fit, "quotes_from_chain", lambda out: quotes)
    monkeypatch.setattr(heston_fit, "fit_heston", held(types.SimpleNamespace(
        params={"v0": 0.04, "kappa": 1.0, "theta": 0.04, "xi": 0.3, "rho": -0.5}, rms_vol_pts=0.5, sse=1.0,
        expiries=[0], to_dict=lambda: {})))
    df = chain.read_chain(str(DATA / "spx_chain_2025-10-01.csv")).head(6)  # European
    with in_process_daemon(tmp_path) as server:
        c = Client(server.connection_file, timeout=10.0, retries=0)
        try:
            if op == "surface":
                live = c.put_object("F", "surface", _surface_doc(2))["handle"]
                fit = functools.partial(c.fit_surface, "F", df)
            else:
                live = c.put_object("F", "heston", {"v0": 0.09, "kappa": 2.0, "theta": 0.09, "xi": 0.5,
                                                    "rho": -0.7})["handle"]
                fit = functools.partial(c.fit_heston, "F", df)
            with pytest.raises((DaemonError, DaemonUnavailable)) as e:
                fit(timeout=timeout, deadline_s=deadline_s)
            # (on a loaded machine the fit may still wait behind other work when its deadline
            # passes: then it never starts, and nothing is kept either)
            if isinstance(e.value, DaemonError):
                assert e.value.ename == "DeadlineExceeded"
            release.set()
            server.jobs.submit_local(lambda: None).result(timeout=60)  # the fit's work has ended
            assert server.objects.get("F").handle == live  # the old code: F#0002
        finally:
            release.set()
            c.close()


# ---------------------------------------------------------------------------- large puts


@pytest.mark.parametrize("inline", [False, True], ids=["frame", "inline"])
def test_a_put_over_the_budget_is_refused_before_it_is_decoded(tmp_path, monkeypatch, inline):
    from optiond.daemon import client_objects, protocol

    if inline:
        monkeypatch.setattr(client_objects, "_document_content", lambda name, field, doc: ({"name": name, field: doc},
                                                                                            []))
    decoded = []
    real_unpack, real_check, real_unpackb = object_ops.unpack_document, points.checked_surface, protocol.unpackb
    monkeypatch.setattr(object_ops, "unpack_document", lambda d: decoded.append("unpack") or real_unpack(d))
    monkeypatch.setattr(points, "checked_surface", lambda d: decoded.append("check") or real_check(d))
    monkeypatch.setattr(protocol, "unpackb", lambda d: (len(d) > 1 << 20 and decoded.append("content")) or
                        real_unpackb(d))
    doc = _surface_doc(8000)  # about 1.5 MiB
    with in_process_daemon(tmp_path, limits=Limits(max_objects_bytes=1 << 20)) as server:
        c = Client(server.connection_file, timeout=30.0, retries=0)
        try:
            with pytest.raises(DaemonError) as e:
                c.put_surface("BIG", doc)
            assert e.value.ename == "LimitExceeded" and "max_objects_bytes" in str(e.value)
            assert decoded == []  # the old code decoded and checked the whole document first
            assert c.ping()
        finally:
            c.close()


@pytest.mark.parametrize("inline", [False, True], ids=["frame", "inline"])
def test_a_ping_is_answered_while_a_large_put_is_under_way(tmp_path, monkeypatch, inline):
    from optiond.daemon import client_objects, protocol

    if inline:  # a client of the content-only form: the document in the content map
        monkeypatch.setattr(client_objects, "_document_content", lambda name, field, doc: ({"name": name, field: doc},
                                                                                            []))
    entered, release = threading.Event(), threading.Event()
    real = points.checked_surface

    def held(doc):
        entered.set()
        release.wait(60)
        return real(doc)

    monkeypatch.setattr(points, "checked_surface", held)
    doc = _surface_doc(8000)  # over INLINE_PUT_BYTES and LAZY_CONTENT_BYTES
    assert len(protocol.packb(doc)) > protocol.LAZY_CONTENT_BYTES
    with in_process_daemon(tmp_path) as server:
        putter = Client(server.connection_file, timeout=60.0, retries=0)
        pinger = Client(server.connection_file, timeout=10.0, retries=0)
        got: dict = {}
        t = threading.Thread(target=lambda: got.update(putter.put_surface("BIG", doc)))
        try:
            t.start()
            assert entered.wait(30)
            assert pinger.ping()["pid"] == server.pid  # the old code: the loop is inside the put
            assert "BIG" not in [o["name"] for o in pinger.objects()]
            release.set()
            t.join(60)
            assert got["handle"] == "BIG#0001" and got["persisted"] is True and got["slices_total"] == 8000
            assert server.objects.get("BIG").payload.slices[-1].expiry == "E7999"
        finally:
            release.set()
            t.join(60)
            putter.close()
            pinger.close()


def test_a_look_up_of_a_file_still_being_read_says_so(tmp_path, monkeypatch):
    store = ObjectStore()
    store.open(tmp_path)
    object_kinds.put_document(store, "BIG", "surface", _surface_doc(50))
    _curve(store, "USD")
    store.close()
    monkeypatch.setattr(objects, "LAZY_FILE_BYTES", 4096)
    release = threading.Event()
    real = objects._read_file
    monkeypatch.setattr(objects, "_read_file", lambda p: (release.wait(60) if "BIG" in p.read_text()[:200]
                                                           else None) or real(p))
    again = ObjectStore()
    try:
        assert again.open(tmp_path) == 1  # USD at once, BIG on the background thread
        with pytest.raises(ObjectLoading, match="still being read"):
            again.get("BIG")
        assert again.get("USD").version == 1
        assert object_kinds.put_document(again, "BIG", "surface", _surface_doc(3)).version == 2  # above the file's
    finally:
        release.set()
    assert again.wait_loaded(60) and again.get("BIG").version == 2 and len(again.get("BIG").payload.slices) == 3
    again.close()


def test_the_chunked_encodings_equal_the_plain_ones():
    doc = _surface_doc(300)
    doc["stats"] = {"z": [1, 2.5, None, "x"] * 40, "a": {str(i): i for i in range(100)}}
    assert object_kinds.canonical(doc) == json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    from optiond.daemon.protocol import packb, unpackb

    text = json.dumps({"a": [doc, 1, [2, {"x": []}]], "b": {}, "c": "}]"}, indent=1)
    assert objects._loads(text) == (json.loads(text), len(text))
    with pytest.raises(ValueError):
        objects._loads('{"a": [1 2]}')
    raw = packb(doc)
    monkey = object_ops._CHUNK_BYTES
    try:
        object_ops._CHUNK_BYTES = 256
        assert object_ops.unpack_document(raw) == unpackb(raw) == doc
        with pytest.raises(Exception, match="undecodable"):
            object_ops.unpack_document(raw + b"\x00")
    finally:
        object_ops._CHUNK_BYTES = monkey


def test_the_budget_is_set_by_serve():
    import argparse

    from optiond.daemon.commands import _limits

    def args(mib):
        return argparse.Namespace(max_options=None, max_tree_nodes=None, max_request_s=None, max_objects_mib=mib)

    assert _limits(args(1.5)).max_objects_bytes == 3 << 19
    assert _limits(args(None)).max_objects_bytes == Limits().max_objects_bytes
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(SystemExit, match="--max-objects-mib must be a number of MiB > 0"):
            _limits(args(bad))
