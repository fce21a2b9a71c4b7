"""The daemon as an MPI job (the PyPI ``mpich`` wheel): rank 0 serves, the other ranks are
``mpi4py.futures`` workers. Two ranks price a 2,000-option batch bit for bit as one rank does;
``optiond serve --workers 2`` and ``mpiexec -n 2 optiond serve`` both work; a shutdown stops
every rank; and a worker rank killed in the middle of a batch ends the MPI job (MPI cannot
survive a lost rank), which the client reports as a dead daemon within its timeout (or prices
in-process when allowed), never with a partial result.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import numpy as np
import pytest

from optiond import engine
from optiond.daemon import pool
from optiond.daemon.client import DaemonLost
from optiond.models import Method

from conftest import start_daemon, stop_daemon, wait_running

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(pool.find_mpiexec() is None or os.name != "posix", reason="needs mpi4py and mpiexec")]

RESULT_ARRAYS = ("price", "delta", "gamma", "theta", "vega", "rho")


def batch(n: int = 2000, seed: int = 2026) -> dict:
    rng = np.random.default_rng(seed)
    cols = {"kind": rng.choice(np.array(["put", "call"], dtype=object), n),
            "style": rng.choice(np.array(["american", "european"], dtype=object), n), "spot": 100.0,
            "strike": rng.uniform(70, 130, n), "expiry": rng.uniform(0.05, 2.0, n), "rate": 0.03,
            "dividend_yield": rng.uniform(0.0, 0.04, n), "volatility": rng.uniform(0.1, 0.6, n)}
    cols["volatility"][7] = -0.2  # an invalid row, marked the same way everywhere
    return cols


def assert_same(got, want) -> None:
    for name in RESULT_ARRAYS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.status.tolist() == want.status.tolist() and got.error.tolist() == want.error.tolist()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return True


def test_two_ranks_price_2000_options_like_one(tmp_path, daemon):
    cols = batch()
    m = Method(steps=400)  # price and Greeks: 2000 options x 5 trees of 400 steps
    one_rank = daemon.client(timeout=120.0)
    handle = start_daemon(tmp_path, "--workers", "2", "--no-warmup")
    c = handle.client(timeout=120.0)
    try:
        st = c.status()
        assert st["mpi_ranks"] == 2 and st["mpi_workers"] == 1 and st["mpi_workers_alive"] == 1
        ranks = st["mpi"]["rank_info"]
        assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["pid"] == handle.daemon_pid != ranks[1]["pid"]
        two = c.price_table(cols, m, fallback=False, force=True)
        one = one_rank.price_table(cols, m, fallback=False, force=True)
        assert two.diagnostics["workers"] == 2 and two.diagnostics["chunks"] > 2  # both ranks priced chunks
        assert_same(two, one)
        assert_same(two, engine.price_table(cols, m))
        assert two.status[7] == "error" and two.device == one.device == "cpu"
        # the job's timeline, on one host's monotonic clock: every chunk began after it was sent,
        # priced for as long as it says, and came back before the reply; both ranks took chunks
        tl = two.diagnostics["timeline"]
        assert len(tl["chunks"]) == two.diagnostics["chunks"] and tl["received"] <= 0.0
        assert {c[1] for c in tl["chunks"]} == {"mpi", "local"}
        for _, _, sent, collected, priced, began, ended in tl["chunks"]:
            assert sent <= began <= ended <= collected <= tl["reply"]
            assert ended - began == pytest.approx(priced, abs=2e-6)
        rank_pids = [r["pid"] for r in ranks]
    finally:
        c.close()
        one_rank.close()
        stop_daemon(handle)
    assert handle.process.returncode == 0  # a shutdown stops rank 0, the workers and mpiexec
    assert not any(pid_alive(p) for p in rank_pids)
    assert not handle.connection_file.exists()


def test_killed_worker_rank_is_reported_not_hidden(tmp_path):
    exe = pool.find_mpiexec()
    handle = start_daemon(tmp_path, "--no-warmup", launcher=[exe, "-n", "2"])  # as with the site's MPI
    strict = handle.client(timeout=120.0, retries=0)
    lenient = handle.client(timeout=120.0, retries=0)
    cols = batch(2000, seed=7)
    slow = Method(steps=3000, greeks=False, device="cpu")
    try:
        ranks = strict.status()["mpi"]["rank_info"]
        assert len(ranks) == 2
        out: dict = {}

        def run(name, client, **kw):
            try:
                out[name] = client.price_table(cols, slow, **kw)
            except BaseException as e:  # noqa: BLE001 (examined below)
                out[name] = e

        threads = [threading.Thread(target=run, args=("strict", strict), kwargs={"fallback": False}),
                   threading.Thread(target=run, args=("lenient", lenient))]
        for t in threads:
            t.start()
        wait_running(strict, (strict, 2000), (lenient, 2000))  # both requests in the daemon before the kill
        os.kill(ranks[1]["pid"], signal.SIGKILL)
        for t in threads:
            t.join(timeout=120)
        # the job is lost with rank 0: silent (killed with the MPI job) or stopping (terminated, it
        # cancels what it has): either way DaemonLost, never a JobCancelled or a partial result
        assert isinstance(out["strict"], DaemonLost), out["strict"]
        assert "heartbeat" in str(out["strict"]) or "daemon stopped" in str(out["strict"])
        res = out["lenient"]
        assert res.via == "in-process" and len(res) == 2000
        assert_same(res, engine.price_table(cols, slow))
        assert handle.process.wait(timeout=30) != 0  # the MPI job ended: the service manager restarts it
        assert not pid_alive(ranks[0]["pid"])
    finally:
        strict.close()
        lenient.close()
        stop_daemon(handle)


def test_mpiexec_command_line():
    cmd = pool.mpiexec_command(3, ["serve", "--no-warmup"])
    assert cmd[1:3] == ["-n", "3"] and cmd[3] == sys.executable and cmd[-2:] == ["serve", "--no-warmup"]
    assert os.path.basename(cmd[0]).startswith("mpiexec")
