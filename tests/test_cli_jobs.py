"""Long ``optiond price --daemon-only`` files as followed daemon jobs: the client waits as long
as the daemon lives and moves (a progress bar on a terminal, none in a pipe), and the daemon never keeps computing for
nobody: a client interrupted (SIGINT) leaves the daemon idle within 2 s, and so does one killed
(SIGKILL) with a lease of 1 s (``OPTIOND_JOB_LEASE_S``; the default lease of tens of seconds,
which a paused client survives, is in ``test_job_lease.py``); a daemon that freezes or dies is
reported in one line.

The daemon here has one pricing slot, so its CPU time (``/proc/<pid>/stat`` utime + stime) grows
by about one core while a job runs and by almost nothing when idle (heartbeat, publisher).
Loopback only; every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import start_daemon, stop_daemon
from optiond import engine
from optiond.cli import EXIT_DAEMON
from optiond.commands.pricing import JOB_ROWS
from optiond.models import Method

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc/<pid>/stat")

ROWS = JOB_ROWS + 2000  # over the size that makes a file a job
#: CPU seconds an idle daemon may use in 1.5 s (heartbeat, publisher, loop ticks)
IDLE_CPU_S = 0.15


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def portfolio(path: Path, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    pd.DataFrame({"kind": np.where(rng.random(ROWS) < 0.5, "put", "call"), "style": "american", "spot": 100.0,
                  "strike": rng.uniform(80, 120, ROWS), "expiry": rng.uniform(0.1, 2.0, ROWS), "rate": 0.03,
                  "dividend_yield": 0.01, "volatility": rng.uniform(0.1, 0.5, ROWS)}).to_csv(path, index=False)
    return path


def _default_sigint() -> None:
    # a test run started in the background of a non-interactive shell can pass SIGINT on ignored,
    # and Python then never raises KeyboardInterrupt: give the CLI the terminal's default
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def price_cli(src: Path, dst: Path, steps: int, env: dict) -> subprocess.Popen:
    """``optiond price`` of ``src`` on the CRR tree of ``steps`` steps (the work these jobs size)."""
    return subprocess.Popen([sys.executable, "-m", "optiond.cli", "price", str(src), "-o", str(dst), "--steps",
                             str(steps), "--no-greeks", "--daemon-only", "--method", "binomial"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)


def wait_running(client, timeout: float = 60.0, other: set | frozenset = frozenset()) -> dict:
    """The daemon's running job once it has done some work (fails after ``timeout``); jobs whose
    id is in ``other`` (an earlier test's, still listed while it winds down) do not count."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        running = [j for j in client.jobs() if j["state"] == "running" and j["fraction"] > 0.02
                   and j["job_id"] not in other]
        if running:
            return running[0]
        time.sleep(0.1)
    pytest.fail("no job started")


def assert_idle_within_2s(pid: int, t_stop: float) -> None:
    """The daemon's CPU time does not grow from 2 s after ``t_stop`` (monotonic) on."""
    time.sleep(max(0.0, t_stop + 2.0 - time.monotonic()))
    c0 = cpu_seconds(pid)
    time.sleep(1.5)
    grew = cpu_seconds(pid) - c0
    assert grew < IDLE_CPU_S, f"the daemon used {grew:.2f} CPU-s from 2 to 3.5 s after the client went"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    handle = start_daemon(tmp_path_factory.mktemp("jobs"), "--no-cache")
    yield handle
    stop_daemon(handle)


@pytest.fixture
def env(served):
    return {**os.environ, "OPTIOND_CONNECTION_FILE": str(served.connection_file)}


@pytest.mark.slow
def test_long_file_completes_as_a_job_without_a_bar_in_a_pipe(served, env, tmp_path):
    # 12,000 American options at N = 3000: about 5.4e10 tree nodes, 17 s on one idle core of the
    # 2-core test machine (up to 40 s under load): longer than the 3 x 5 s the client used to
    # wait before giving up
    src, dst = portfolio(tmp_path / "book.csv"), tmp_path / "out.csv"
    t0 = time.monotonic()
    proc = price_cli(src, dst, 3000, env)
    _, err = proc.communicate(timeout=300)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, err
    lines = err.replace("\r", "\n").splitlines()
    # stderr is a pipe, not a terminal: no progress bar in it (it is drawn on a terminal only)
    assert not any("%|" in line for line in lines), err[-500:]
    assert lines[-1].startswith(f"priced {ROWS}/{ROWS} rows") and "(daemon)" in lines[-1]
    out = pd.read_csv(dst)
    pick = np.random.default_rng(2).choice(ROWS, 40, replace=False)
    cols = {c: out[c].to_numpy()[pick] for c in ("kind", "style", "spot", "strike", "expiry", "rate",
                                                  "dividend_yield", "volatility")}
    want = engine.price_table(cols, Method(steps=3000, greeks=False))
    np.testing.assert_array_equal(out.price.to_numpy()[pick], want.price)  # the same bits in-process
    print(f"{ROWS} rows at N = 3000 through the daemon: {wall:.1f} s wall")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_killing_the_client_cancels_its_job(served, env, tmp_path, sig):
    client = served.client(timeout=5.0)
    try:
        cancelled = client.status()["jobs_by_outcome"].get("cancelled", 0)
        src = portfolio(tmp_path / "book.csv")
        before = {j["job_id"] for j in client.jobs()}
        # ~10 s of work; no cache either way; a lease of 1 s, so the killed client's job ends soon
        proc = price_cli(src, tmp_path / "out.csv", 2400 + sig, {**env, "OPTIOND_JOB_LEASE_S": "1"})
        job = wait_running(client, other=before)
        assert proc.poll() is None, f"the client ended before it was signalled: {proc.stderr.read()[-500:]}"
        proc.send_signal(sig)
        t_kill = time.monotonic()
        proc.wait(timeout=30)
        assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL)
        assert_idle_within_2s(served.pid, t_kill)
        assert job["job_id"] not in {j["job_id"] for j in client.jobs()}
        assert client.status()["jobs_by_outcome"].get("cancelled", 0) == cancelled + 1
        assert "Traceback" not in proc.stderr.read()
    finally:
        client.close()


def test_a_frozen_then_a_dead_daemon_is_one_line_and_no_work_is_left(tmp_path):
    (tmp_path / "d").mkdir()
    served = start_daemon(tmp_path / "d", "--no-cache")
    env = {**os.environ, "OPTIOND_CONNECTION_FILE": str(served.connection_file)}
    client = served.client(timeout=5.0)
    src = portfolio(tmp_path / "book.csv")
    try:
        # frozen (SIGSTOP): the heartbeat falls silent, the client gives up in one line; once
        # the daemon runs again it cancels the job nobody renews (a lease of 1 s here)
        proc = price_cli(src, tmp_path / "out.csv", 2500, {**env, "OPTIOND_JOB_LEASE_S": "1"})
        wait_running(client)
        os.kill(served.pid, signal.SIGSTOP)
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            os.kill(served.pid, signal.SIGCONT)
        t_cont = time.monotonic()
        lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
        assert proc.returncode == EXIT_DAEMON and len(lines) == 1, err
        assert "no daemon" in lines[0] and "optiond serve" in lines[0] and "drop --daemon-only" in lines[0]
        assert_idle_within_2s(served.pid, t_cont)
        assert client.jobs() == []

        # dead (SIGKILL): the same one line, within a few seconds
        proc = price_cli(src, tmp_path / "out.csv", 2600, env)
        wait_running(client)
        served.process.kill()
        t_dead = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t_dead < 10
        lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
        assert proc.returncode == EXIT_DAEMON and len(lines) == 1 and "Traceback" not in err, err
        assert "drop --daemon-only" in lines[0]
    finally:
        client.close()
        stop_daemon(served)


def test_a_client_that_gives_up_cancels_its_request(served, tmp_path):
    """A blocking request (not followed as a job) whose client stops waiting, as a fallback
    would, is cancelled: the daemon does not price it for nobody."""
    from optiond.daemon.client import DaemonUnavailable

    rng = np.random.default_rng(5)
    cols = {"kind": "put", "style": "american", "spot": 100.0, "strike": rng.uniform(80, 120, 3000), "expiry": 1.0,
            "rate": 0.03, "volatility": 0.2}
    impatient = served.client(timeout=0.5, retries=0)
    client = served.client(timeout=5.0)
    try:
        cancelled = client.status()["jobs_by_outcome"].get("cancelled", 0)
        with pytest.raises(DaemonUnavailable, match="no reply"):
            impatient.price_table(cols, Method(steps=3000, greeks=False), fallback=False, as_job=False)
        t_gave_up = time.monotonic()
        assert_idle_within_2s(served.pid, t_gave_up)
        assert client.jobs() == []
        assert client.status()["jobs_by_outcome"].get("cancelled", 0) == cancelled + 1
    finally:
        impatient.close()
        client.close()


def test_a_job_that_stops_moving_is_given_up_and_cancelled(monkeypatch, tmp_path):
    """``_follow`` gives up on a running job whose fraction stands still for ``stall_s`` (and
    cancels it), but not on a queued one waiting for a slot."""
    from optiond.daemon import client as client_mod

    c = client_mod.Client(tmp_path / "none.json")
    asks, cancelled = [], []
    states = iter(["queued"] * 3 + ["running"] * 1000)

    def fake_request(op, content, *args, **kw):
        asks.append(op)
        time.sleep(0.01)
        raise client_mod.DaemonError("pending", "JobPending", {"state": next(states), "fraction": 0.25})

    monkeypatch.setattr(c, "_request", fake_request)
    monkeypatch.setattr(c, "_abandon", cancelled.append)
    try:
        with pytest.raises(client_mod.DaemonUnavailable, match="no progress for 0.1 s"):
            c._follow("job-x", stall_s=0.1)
        assert cancelled == ["job-x"] and len(asks) > 3 and set(asks) == {"result"}
    finally:
        c.close()


def test_a_lease_must_be_a_number_of_seconds(served):
    from optiond.daemon.client import DaemonError

    client = served.client(timeout=5.0)
    try:
        buffers: list = []
        content = {"op": "price", **client._content({"kind": "put", "spot": 100.0, "strike": [90.0, 100.0],
                                                      "expiry": 1.0, "rate": 0.03, "volatility": 0.2},
                                                     Method(steps=50), buffers)}
        for bad in ("1", 0.0, 1e9, True):
            with pytest.raises(DaemonError, match="lease_s") as e:
                client._request("submit", content, buffers, metadata={"lease_s": bad})
            assert e.value.ename == "ProtocolError"
        assert client.jobs() == []
    finally:
        client.close()
