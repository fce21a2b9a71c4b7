"""Faults: the daemon killed in the middle of a batch, a restarted daemon, a worker whose
chunks fail, and a GPU that fails. In every case the client either gets the whole, correct
result (from the daemon, or priced in-process when it allows that) or a clear error; never a
partial result. The killed-worker-rank case of an MPI pool is in ``test_daemon_mpi.py``.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from optiond import engine, limits
from optiond.daemon import jobs
from optiond.daemon.client import Client, DaemonUnavailable
from optiond.daemon.server import Server
from optiond.models import Method

from conftest import start_daemon, stop_daemon, wait_running

SLOW = Method(steps=4000, greeks=False, device="cpu")


def table(n: int, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {"kind": "put", "style": "american", "spot": 100.0, "strike": rng.uniform(80, 120, n),
            "expiry": rng.uniform(0.2, 2.0, n), "rate": 0.03, "dividend_yield": 0.0,
            "volatility": rng.uniform(0.1, 0.5, n)}


def in_thread(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as e:  # noqa: BLE001 (examined by the test)
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


# ---------------------------------------------------------------------------- kill -9


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_kill_9_mid_batch_then_restart(tmp_path):
    handle = start_daemon(tmp_path, "--no-warmup")
    cols = table(2000, seed=2)
    client = handle.client(timeout=120.0, retries=1)
    fallback_client = handle.client(timeout=120.0, retries=1)
    sub = client.subscribe()
    try:
        strict, strict_out = in_thread(lambda: client.price_table(cols, SLOW, fallback=False))
        lenient, lenient_out = in_thread(lambda: fallback_client.price_table(cols, SLOW))
        job = client.submit_table(table(50, seed=3), SLOW)
        wait_running(client, (client, 2000), (fallback_client, 2000))  # both threads' requests in the daemon
        os.kill(handle.pid, signal.SIGKILL)
        handle.process.wait(timeout=10)
        # far less than the 120 s timeout: the heartbeat tells the clients the daemon died
        strict.join(timeout=30)
        lenient.join(timeout=120)
        assert not strict.is_alive() and not lenient.is_alive()
        err = strict_out.get("error")
        assert isinstance(err, DaemonUnavailable) and "heartbeat" in str(err), strict_out
        res = lenient_out["result"]  # re-run in-process, whole and right
        assert res.via == "in-process" and "heartbeat" in res.diagnostics["fallback_reason"]
        want = engine.price_table(cols, SLOW)
        np.testing.assert_array_equal(res.price, want.price)
        assert res.ok.all() and len(res) == 2000
        with pytest.raises(DaemonUnavailable):
            client.result(job, timeout=60)
        deadline = time.monotonic() + 10
        lost = None
        while time.monotonic() < deadline and lost is None:
            ev = sub.get(timeout=0.5)
            if ev is not None and ev.kind == "lost":
                lost = ev
        assert lost is not None and not sub.alive

        # a daemon restarted on the same connection file serves the same clients again
        handle = start_daemon(tmp_path, "--no-warmup")
        small = table(4, seed=4)
        got = client.price_table(small, Method(steps=50), fallback=False)
        assert got.via == "daemon"
        np.testing.assert_array_equal(got.price, engine.price_table(small, Method(steps=50)).price)
        assert fallback_client.price_table(small, Method(steps=50)).via == "daemon"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not sub.alive:  # the subscription follows the new daemon
            sub.get(timeout=0.5)
        assert sub.alive
    finally:
        sub.close()
        client.close()
        fallback_client.close()
        stop_daemon(handle)


# ---------------------------------------------------------------------------- chunks that fail


class _FailingPool:
    """An executor whose every task fails, as a worker rank that keeps losing its chunks."""

    def __init__(self, error: BaseException):
        self.error = error
        self.calls = 0

    def submit(self, fn, *a):
        self.calls += 1
        f: cf.Future = cf.Future()
        f.set_exception(self.error)
        return f


def _run_job(manager: jobs.JobManager, cols: dict, method: Method, done: threading.Event) -> jobs.Job:
    n = len(cols["strike"])
    cost = limits.estimate("price", cols, method, n)
    job = jobs.Job("j1", "price", "request", cols, method, cost, time.monotonic() + 60)
    manager.submit(job)
    assert done.wait(60)
    return job


@pytest.mark.parametrize("error", [RuntimeError("worker rank lost its GPU"), cf.BrokenExecutor("pool gone")])
def test_failed_chunks_are_run_again_on_rank_0(error):
    done = threading.Event()
    events = []

    def on_event(job, final):
        events.append(job.state)
        if final:
            done.set()

    pool = _FailingPool(error)
    manager = jobs.JobManager(on_event, executor=pool, workers=[{"rank": 1, "pid": -1}])
    try:
        cols = table(1000, seed=5)
        m = Method(steps=600, greeks=False, device="cpu")  # ~50 ms of work: several chunks
        job = _run_job(manager, cols, m, done)
    finally:
        manager.close()
    assert job.state == "done" and pool.calls >= 1 and len(job.chunks) > 2
    assert job.diagnostics["chunk_reruns"] >= 1
    np.testing.assert_array_equal(job.result["values"][0], engine.price_table(cols, m).price)
    if isinstance(error, cf.BrokenExecutor):
        assert manager.slots == 1 and manager.workers_lost == 1  # the pool is no longer trusted


def test_a_table_error_fails_the_job_without_retries():
    done = threading.Event()
    manager = jobs.JobManager(lambda job, final: final and done.set())
    try:
        cols = table(50, seed=6)
        del cols["rate"]
        job = _run_job(manager, cols, Method(steps=200, greeks=False, device="cpu"), done)
    finally:
        manager.close()
    assert job.state == "failed" and job.error[0] == "InvalidInputError" and "rate" in job.error[1]
    assert job.result is None and manager.chunk_reruns == 0


# ---------------------------------------------------------------------------- a failing GPU


@contextmanager
def in_process_daemon(tmp_path, **kw):
    """A :class:`Server` in a thread of this process (so the test can patch the engine); a test
    that stops it itself joins ``server.serving_thread`` before ``server.close()``."""
    server = Server(tmp_path / "daemon.json", warmup=False, log_dir=tmp_path / "logs", metrics_port=None, **kw)
    server.start()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    server.serving_thread = t
    t.start()
    try:
        yield server
    finally:
        server.stop()
        t.join(timeout=10)
        server.close()


def test_gpu_failure_falls_back_to_the_cpu_and_says_so(tmp_path, monkeypatch):
    from optiond.kernels import gpu
    from optiond.kernels.binomial import gpu as binomial_gpu
    from optiond.kernels.binomial import pipeline as binomial_pipeline

    def broken(*a, **kw):
        raise gpu.GPUError("simulated: an illegal memory access was encountered")

    monkeypatch.setattr(gpu, "available", lambda: True)
    monkeypatch.setattr(gpu, "device_label", lambda: "gpu:0 simulated")
    monkeypatch.setattr(binomial_gpu, "crr_batch_gpu", broken)
    monkeypatch.setattr(binomial_pipeline, "crr_pipeline_gpu", broken)
    cols = table(40, seed=7)
    m = Method(steps=200, device="gpu")
    with in_process_daemon(tmp_path) as server:
        c = Client(server.connection_file, timeout=60)
        try:
            res = c.price_table(cols, m, fallback=False)
            st = c.status()
        finally:
            c.close()
    assert res.via == "daemon" and res.device == "cpu"
    assert "simulated" in res.diagnostics["gpu_fallback"]
    assert st["gpu_fallbacks"] >= 1 and "gpu:0 simulated" in st["devices"]
    want = engine.price_table(cols, Method(steps=200, device="cpu"))
    np.testing.assert_array_equal(res.price, want.price)
    np.testing.assert_array_equal(res.vega, want.vega)
    assert "GPU binomial pricing failed" in (tmp_path / "logs" / "daemon.jsonl").read_text()  # and the log says so


@pytest.mark.parametrize("as_job", [False, True])
def test_implied_vol_reply_names_the_device_that_solved_it(tmp_path, monkeypatch, as_job):
    """The reply says what solved the implied volatilities (it said ``cpu`` whatever the
    engine used: the daemon named the device it guessed for a request without its table)."""
    from optiond.models import ImpliedVol, object_full

    def solved_on_a_gpu(prices, columns, method=None):
        n = len(np.atleast_1d(prices))
        status = object_full(n, "ok")
        error = object_full(n, "")
        status[0], error[0] = "invalid", "strike=-1: must be > 0"
        return ImpliedVol(np.full(n, 0.25), status, error, device="gpu:0 Fake")

    monkeypatch.setattr(engine, "implied_vol_table", solved_on_a_gpu)
    cols = table(30, seed=9)
    prices = np.full(30, 5.0)
    with in_process_daemon(tmp_path) as server:
        c = Client(server.connection_file, timeout=60)
        try:
            iv = c.implied_vol(prices, cols, Method(steps=100), fallback=False, as_job=as_job)
        finally:
            c.close()
    assert iv.via == "daemon" and iv.device == "gpu:0 Fake"
    assert iv.status[0] == "invalid" and iv.error[0] == "strike=-1: must be > 0" and (iv.status[1:] == "ok").all()
    vol, status = iv  # the earlier pair
    assert status[0] == "invalid: strike=-1: must be > 0"
    np.testing.assert_array_equal(vol, np.full(30, 0.25))
