"""Leases of followed work, and the fall-back when the daemon loses it.

A job (or chain request) the client follows holds a lease of tens of seconds, renewed by a
heartbeat thread of the client: a client paused (Ctrl-Z, SIGSTOP) for longer than the old
one-second lease keeps its job and gets the whole result; a client killed outright has its job
cancelled once the lease lapses; a chain request whose client is gone stops at its next pricing
call. A daemon that stops in the middle of a default-mode ``optiond price`` job leaves the file
priced in this process, with one line saying so; with ``--daemon-only`` the client gets a
:class:`DaemonLost` (the CLI's "no daemon" line, exit 3).

The daemon here is a :class:`Server` in a thread of the test process, so its pricing can be
held at a gate (``pool.run_chunk`` or the engine) while the test pauses, kills or stops the
client or the daemon: every wait is on a state, bounded, none on a guess of how long work takes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from optiond import chain, engine, pricer
from optiond.commands.pricing import JOB_ROWS
from optiond.daemon import client_jobs, pool
from optiond.daemon.client import Client, DaemonLost, JobCancelled
from optiond.models import Method

from test_daemon_faults import in_process_daemon

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGSTOP / SIGKILL")

ROWS = JOB_ROWS + 1  # a file the CLI prices as a followed job
DATA = Path(__file__).resolve().parents[1] / "examples" / "data"


def book(path: Path) -> tuple[Path, pd.DataFrame]:
    """European puts and calls (Black-Scholes: the closed form below is their reference)."""
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"kind": np.where(rng.random(ROWS) < 0.5, "put", "call"), "style": "european", "spot": 100.0,
                       "strike": rng.uniform(80, 120, ROWS), "expiry": rng.uniform(0.1, 2.0, ROWS), "rate": 0.03,
                       "dividend_yield": 0.01, "volatility": rng.uniform(0.1, 0.5, ROWS)})
    df.to_csv(path, index=False)
    return path, df


def black_scholes(df: pd.DataFrame) -> np.ndarray:
    s, k, t, r, q, v = (df[c].to_numpy() for c in ("spot", "strike", "expiry", "rate", "dividend_yield",
                                                    "volatility"))
    d1 = (np.log(s / k) + (r - q + 0.5 * v * v) * t) / (v * np.sqrt(t))
    d2 = d1 - v * np.sqrt(t)
    call = s * np.exp(-q * t) * norm.cdf(d1) - k * np.exp(-r * t) * norm.cdf(d2)
    put = k * np.exp(-r * t) * norm.cdf(-d2) - s * np.exp(-q * t) * norm.cdf(-d1)
    return np.where(df["kind"].to_numpy() == "call", call, put)


@pytest.fixture
def gate(monkeypatch):
    """Every job chunk rank 0 prices waits for the gate (set at the end of the test at the latest)."""
    opened = threading.Event()
    real = pool.run_chunk

    def gated(task):
        opened.wait(60)
        return real(task)

    monkeypatch.setattr(pool, "run_chunk", gated)
    yield opened
    opened.set()


def price_cli(src: Path, dst: Path, connection_file: Path, *extra: str, lease: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "OPTIOND_CONNECTION_FILE": str(connection_file)}
    env.pop(client_jobs.LEASE_ENV, None)
    if lease is not None:
        env[client_jobs.LEASE_ENV] = lease
    return subprocess.Popen([sys.executable, "-m", "optiond.cli", "price", str(src), "-o", str(dst), "--no-greeks",
                             "--method", "black-scholes", "--no-progress", *extra], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def running_job(server, proc: subprocess.Popen, timeout: float = 60.0):
    """The daemon's job once it runs (its chunks wait at the gate)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        running = [j for j in server.jobs.active() if j.state == "running"]
        if running:
            return running[0]
        if proc.poll() is not None:
            pytest.fail(f"the client ended first: {proc.stderr.read()[-800:]}")
        time.sleep(0.02)
    pytest.fail("no job started")


def stop(server) -> None:
    """Stop the daemon as `optiond stop` does: its loop ends, then it closes (cancelling its jobs)."""
    server.stop()
    server.serving_thread.join(timeout=30)
    server.close()


def test_a_client_paused_longer_than_the_old_lease_keeps_its_job(tmp_path, gate):
    src, df = book(tmp_path / "book.csv")
    with in_process_daemon(tmp_path) as server:
        proc = price_cli(src, tmp_path / "out.csv", server.connection_file, "--daemon-only")
        try:
            job = running_job(server, proc)
            assert job.lease_s == client_jobs.JOB_LEASE_S >= 10
            os.kill(proc.pid, signal.SIGSTOP)  # Ctrl-Z: neither the poll nor the heartbeat runs
            time.sleep(2.0)  # twice the old lease of 1 s
            assert job.state == "running"
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        gate.set()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "(daemon)" in err.strip().splitlines()[-1]
    out = pd.read_csv(tmp_path / "out.csv")
    assert len(out) == ROWS and (out.status == "ok").all()
    np.testing.assert_allclose(out.price, black_scholes(df), rtol=1e-10, atol=1e-12)


def test_a_killed_client_has_its_job_cancelled_after_the_lease(tmp_path, gate):
    src, _ = book(tmp_path / "book.csv")
    with in_process_daemon(tmp_path) as server:
        proc = price_cli(src, tmp_path / "out.csv", server.connection_file, "--daemon-only", lease="1")
        job = running_job(server, proc)
        assert job.lease_s == 1.0
        proc.kill()
        proc.wait(timeout=30)
        end = time.monotonic() + 30
        while job.state == "running" and time.monotonic() < end:
            time.sleep(0.02)
        assert job.state == "cancelled" and job.error[2] == {"why": "lease"}, job.error
        assert "stopped renewing its lease of 1 s" in job.error[1]


def test_a_daemon_stopped_mid_job_leaves_the_file_priced_in_process(tmp_path, gate):
    src, df = book(tmp_path / "book.csv")
    with in_process_daemon(tmp_path) as server:
        proc = price_cli(src, tmp_path / "out.csv", server.connection_file)  # the default mode: falls back
        running_job(server, proc)
        stop(server)  # as `optiond stop` (a shutdown request) or SIGTERM: the daemon cancels what it has
        gate.set()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 2 and "Traceback" not in err, err
    assert lines[0].startswith("optiond price: ") and lines[0].endswith("; priced in this process instead")
    assert "the daemon" in lines[0]
    assert lines[1].startswith(f"priced {ROWS}/{ROWS} rows") and "(in-process)" in lines[1]
    out = pd.read_csv(tmp_path / "out.csv")
    assert len(out) == ROWS and (out.status == "ok").all()
    np.testing.assert_allclose(out.price, black_scholes(df), rtol=1e-10, atol=1e-12)


def test_a_daemon_stopped_mid_job_is_daemon_lost_without_fallback(tmp_path, gate):
    from optiond.cli import EXIT_DAEMON, expected_error

    _, df = book(tmp_path / "book.csv")
    cols = {c: df[c].to_numpy() for c in df.columns}
    with in_process_daemon(tmp_path) as server:
        client = Client(server.connection_file, timeout=5.0)
        out: dict = {}

        def run() -> None:
            try:
                out["result"] = client.price_table(cols, Method("black-scholes", greeks=False), fallback=False,
                                                   as_job=True)
            except BaseException as e:  # noqa: BLE001 (examined below)
                out["error"] = e

        t = threading.Thread(target=run, daemon=True)
        try:
            t.start()
            end = time.monotonic() + 60
            while not [j for j in server.jobs.active() if j.state == "running"] and time.monotonic() < end:
                time.sleep(0.02)
            stop(server)
            gate.set()
            t.join(timeout=60)
        finally:
            client.close()
    assert isinstance(out.get("error"), DaemonLost), out
    code, line = expected_error(out["error"], type("Args", (), {"daemon_only": True})())
    assert code == EXIT_DAEMON and line.startswith("no daemon: ") and "drop --daemon-only" in line


# ----------------------------------------------------------------------------- chain requests


MARKET = dict(steps=100, quote_time="10:50")


@pytest.fixture(scope="module")
def small_chain():
    """Two expiries of the AAPL chain (American: the carry search prices) and its in-process
    result (which also compiles the kernels before a test holds the daemon's pricing)."""
    df = chain.read_chain(str(DATA / "aapl_chain_2026-02-13.csv"))
    keep = sorted(df.expiry.unique())[2:4]
    df = df[df.expiry.isin(keep)].reset_index(drop=True)
    return df, chain.price_chain(df, pricer.LocalPricer(), **MARKET)[0]


@pytest.fixture
def engine_gate(monkeypatch):
    """The engine's calls on the daemon's chain (through the in-process pricer) wait at a gate
    from the first on; ``entered`` is set when the first arrives; ``calls`` counts them."""
    state = {"calls": 0, "entered": threading.Event(), "open": threading.Event()}

    def gated(real):
        def call(*a, **kw):
            state["calls"] += 1
            state["entered"].set()
            state["open"].wait(60)
            return real(*a, **kw)
        return call

    monkeypatch.setattr(engine, "price_table", gated(engine.price_table))
    monkeypatch.setattr(engine, "implied_vol_table", gated(engine.implied_vol_table))
    yield state
    state["open"].set()


def test_a_chain_request_whose_client_is_gone_stops(tmp_path, small_chain, engine_gate):
    from optiond.daemon import chain_op

    with in_process_daemon(tmp_path) as server:
        client = Client(server.connection_file, timeout=60.0)
        try:
            buffers: list = []
            content = chain_op.encode_request(small_chain[0], MARKET, buffers)
            out: dict = {}

            def send() -> None:  # a client that never renews: as one killed once the request is sent
                try:
                    out["reply"] = client._request("chain", content, buffers, retries=0, timeout=60,
                                                   metadata={"job_id": "chain-gone", "lease_s": 0.2})
                except BaseException as e:  # noqa: BLE001 (examined below)
                    out["error"] = e

            t = threading.Thread(target=send, daemon=True)
            t.start()
            assert engine_gate["entered"].wait(60)
            lease = server._aside_leases["chain-gone"]
            end = time.monotonic() + 30
            while not lease.lapsed() and time.monotonic() < end:
                time.sleep(0.02)
            engine_gate["open"].set()
            t.join(timeout=60)
        finally:
            client.close()
    assert isinstance(out.get("error"), JobCancelled), out
    assert out["error"].details.get("why") == "lease" and "lease of 0.2 s" in str(out["error"])
    assert engine_gate["calls"] == 1  # stopped at the next pricing call, not priced to the end
    assert "chain-gone" not in server._aside_leases


def test_a_chain_request_renewed_by_the_heartbeat_outlives_its_lease(tmp_path, small_chain, engine_gate,
                                                                      monkeypatch):
    monkeypatch.setenv(client_jobs.LEASE_ENV, "1.2")
    df, want = small_chain
    with in_process_daemon(tmp_path) as server:
        client = Client(server.connection_file, timeout=60.0)
        try:
            out: dict = {}
            t = threading.Thread(target=lambda: out.update(r=client.price_chain(df, fallback=False, **MARKET)),
                                 daemon=True)
            t.start()
            assert engine_gate["entered"].wait(60)
            beats = client._leases.beats
            end = time.monotonic() + 30
            while client._leases.beats < beats + 6 and time.monotonic() < end:  # 6 renewals 0.3 s apart: > lease
                time.sleep(0.02)
            assert client._leases.beats >= beats + 6
            engine_gate["open"].set()
            t.join(timeout=120)
        finally:
            client.close()
    got, summary = out["r"]
    assert summary.via == "daemon" and got.status.tolist() == want.status.tolist()
    np.testing.assert_allclose(got.iv, want.iv, rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------- the renew request


def test_renew_checks_its_ids_and_renews_only_its_own_session(daemon):
    from optiond.daemon.client import DaemonError

    with daemon.client() as a, daemon.client() as b:
        for bad in ("job-1", ["x" * 65], [1], ["ok"] * 1025):
            with pytest.raises(DaemonError, match="job_ids") as e:
                a._request("renew", {"job_ids": bad}, channel="control")
            assert e.value.ename == "ProtocolError"
        # several seconds of work, cancelled once the renewals are checked
        job = a.submit_table({"kind": "put", "style": "american", "spot": 100.0, "strike": np.linspace(80, 120, 1000),
                              "expiry": 1.0, "rate": 0.03, "volatility": 0.2}, Method(steps=3000, greeks=False),
                             job_id="lease-owner", force=True)
        try:
            renewed = a._request("renew", {"job_ids": [job, "no-such-job"]}, channel="control").content["renewed"]
            assert renewed == [job]
            assert b._request("renew", {"job_ids": [job]}, channel="control").content["renewed"] == []
        finally:
            a.cancel(job)


@pytest.mark.parametrize("text, want", [("", client_jobs.JOB_LEASE_S), ("2.5", 2.5), ("0.01", client_jobs.JOB_LEASE_S),
                                        ("nan", client_jobs.JOB_LEASE_S), ("soon", client_jobs.JOB_LEASE_S)])
def test_the_lease_from_the_environment(monkeypatch, text, want):
    monkeypatch.setenv(client_jobs.LEASE_ENV, text)
    assert client_jobs.job_lease_s() == want


def test_a_client_with_a_lease_heartbeat_is_freed_without_the_cycle_collector(tmp_path):
    """The heartbeat refers to its client weakly: a client that was only referenced by its
    heartbeat and back would be freed by the cycle collector alone, in an order of finalizers
    that leaves its ZeroMQ context waiting forever on sockets it no longer knows of."""
    import gc
    import weakref

    c = Client(tmp_path / "none.json", timeout=0.2, retries=0)
    with c._leases.hold("job-x", 1.0):
        end = time.monotonic() + 10
        while c._leases.beats == 0 and time.monotonic() < end:
            time.sleep(0.01)
    end = time.monotonic() + 10
    while c._leases._thread is not None and time.monotonic() < end:  # the thread ends once nothing is held
        time.sleep(0.01)
    assert c._leases.beats >= 1 and c._leases._thread is None
    ref = weakref.ref(c)
    gc.disable()
    try:
        del c
        assert ref() is None
    finally:
        gc.enable()


def test_a_chain_the_stopping_daemon_drops_is_priced_in_process(tmp_path, small_chain, engine_gate):
    """A chain request still waiting for rank 0's pricing thread when the daemon stops is
    answered JobCancelled (``why`` ``stopping``); the client prices it in this process and
    says why (``summary.extra["daemon_lost"]``, the line ``optiond chain`` prints)."""
    df, want = small_chain
    with in_process_daemon(tmp_path) as server:
        first, second = (Client(server.connection_file, timeout=60.0) for _ in range(2))
        out: dict = {}

        def price(name: str, client: Client) -> None:
            try:
                out[name] = client.price_chain(df, **MARKET)
            except BaseException as e:  # noqa: BLE001 (examined below)
                out[name] = e

        threads = [threading.Thread(target=price, args=("first", first), daemon=True)]
        try:
            threads[0].start()
            assert engine_gate["entered"].wait(60)  # the first chain holds rank 0's pricing thread
            threads.append(threading.Thread(target=price, args=("second", second), daemon=True))
            threads[1].start()
            end = time.monotonic() + 30
            while len(server._aside_leases) < 2 and time.monotonic() < end:  # the second one waits behind it
                time.sleep(0.01)
            stopper = threading.Thread(target=stop, args=(server,), daemon=True)
            stopper.start()
            while len(server._aside_leases) > 1 and time.monotonic() < end:  # the second one dropped
                time.sleep(0.01)
            assert len(server._aside_leases) == 1
            engine_gate["open"].set()  # the first one finishes; then both replies leave
            for t in (*threads, stopper):
                t.join(timeout=120)
        finally:
            first.close()
            second.close()
    got, summary = out["second"]
    assert summary.via == "in-process" and "the daemon stopped" in summary.extra["daemon_lost"]
    assert got.status.tolist() == want.status.tolist()
    np.testing.assert_allclose(got.iv, want.iv, rtol=1e-12, atol=1e-14)
    assert out["first"][1].via == "daemon"  # the one it was pricing is finished and answered
