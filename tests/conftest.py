"""Shared fixtures.

``daemon`` (session scope): a real ``optiond serve`` subprocess listening on 127.0.0.1, its
connection file, its JSON log (``OPTIOND_LOG_DIR``) and its kept objects (``OPTIOND_DATA_DIR``)
in a temporary directory, its metrics on
a free port. While it runs, ``OPTIOND_CONNECTION_FILE`` points at that file in this process too,
so ``optiond.daemon.client.get_client()`` and anything built on it (the Excel functions, the
panel) talk to it. A test that wants "no daemon" sets ``OPTIOND_CONNECTION_FILE`` to a missing
path with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

#: the daemon's command line; ``python -m optiond.daemon.commands serve`` is ``optiond serve``
#: without the other command groups, so a broken sibling command cannot stop the daemon tests
SERVE = [sys.executable, "-m", "optiond.daemon.commands", "serve"]
#: a first start on a cold numba cache compiles its warm-up targets (TEST_WARMUP) before it answers
START_TIMEOUT_S = 120.0
#: what a test daemon warms up (``serve --warmup-only``) unless a test says otherwise: the tree, the
#: closed form and (where a GPU is present) the GPU modules, as the warm-up did before it took
#: every method
TEST_WARMUP = "binomial,black-scholes,gpu"


@dataclass
class DaemonProcess:
    """A running daemon started by a test fixture."""

    connection_file: Path
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        """The process started (``mpiexec`` for an MPI daemon; its rank 0 is :attr:`daemon_pid`)."""
        return self.process.pid

    @property
    def daemon_pid(self) -> int:
        """The pid of the process that serves (rank 0), from the connection file."""
        from optiond.daemon import paths

        return int(paths.read_connection_file(self.connection_file)["pid"])

    def client(self, **kw):
        """A new :class:`optiond.daemon.client.Client` for this daemon (keyword args passed on)."""
        from optiond.daemon.client import Client

        return Client(self.connection_file, **kw)

    def log(self) -> str:
        """Everything the daemon wrote to stdout/stderr so far."""
        return self.log_path.read_text(errors="replace")

    @property
    def json_log_path(self) -> Path:
        """The daemon's JSON-lines log (``daemon.jsonl`` in its ``logs`` directory)."""
        return self.log_path.parent / "logs" / "daemon.jsonl"

    def json_log(self) -> list[dict]:
        """The JSON log's records so far (the file is written by a thread: may lag a moment)."""
        import json

        if not self.json_log_path.exists():
            return []
        return [json.loads(line) for line in self.json_log_path.read_text().splitlines() if line.strip()]


def start_daemon(directory: Path, *extra: str, env: dict | None = None,
                 launcher: list[str] | tuple[str, ...] = (), preexec_fn=None) -> DaemonProcess:
    """Start ``optiond serve`` (extra arguments ``extra``, extra environment ``env``, command
    prefix ``launcher``, e.g. ``mpiexec -n 2``; ``preexec_fn`` run in the child before it
    starts, e.g. to set resource limits) with its connection file and log in
    ``directory``; return once it answers a ping (fails the test with the daemon's log if it
    does not). An MPI daemon (``--workers``, or a ``launcher``) counts as started when a new
    connection file answers: its rank 0 is not the process started."""
    from optiond.daemon import paths
    from optiond.daemon.client import Client, DaemonUnavailable

    conn = directory / "daemon.json"
    log_path = directory / "daemon.log"
    try:
        old_key = paths.read_connection_file(conn)["key"]
    except (FileNotFoundError, paths.ConnectionFileError):
        old_key = None
    full_env = {**os.environ, "OPTIOND_LOG_DIR": str(directory / "logs"), "OPTIOND_METRICS_PORT": "0",
                "OPTIOND_DATA_DIR": str(directory / "data"), **(env or {}),
                "OPTIOND_CONNECTION_FILE": str(conn)}
    if "--no-warmup" not in extra and not any(a.startswith("--warmup-only") for a in extra):
        extra = (*extra, "--warmup-only", TEST_WARMUP)  # the whole list compiles for minutes on a cold cache
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*launcher, *SERVE, *extra], env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)
    mpi = bool(launcher) or "--workers" in extra
    handle = DaemonProcess(conn, proc, log_path)
    client = Client(conn, timeout=1.0, retries=0)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"daemon exited with code {proc.returncode}:\n{handle.log()}")
            if conn.exists():
                try:
                    pid = client.ping()["pid"]
                    if pid == proc.pid or (mpi and paths.read_connection_file(conn)["key"] != old_key):
                        return handle
                except (DaemonUnavailable, FileNotFoundError, paths.ConnectionFileError):
                    pass
            time.sleep(0.05)
        stop_daemon(handle)
        pytest.fail(f"daemon did not answer within {START_TIMEOUT_S:g} s:\n{handle.log()}")
    finally:
        client.close()


def price_burst(connection_file: Path, cells: list[dict], method_spec: dict, timeout_s: float = 30.0) -> list:
    """Send one ``price_request`` per cell, all before reading any reply (so that the daemon
    finds them waiting together), then collect the replies; returns the decoded
    :class:`optiond.models.Result` of each cell, in order (None for a cell with no reply)."""
    import zmq

    from optiond.daemon import paths, protocol
    from optiond.daemon.client import Client

    info = paths.read_connection_file(connection_file)
    session = protocol.Session(info["key"].encode())
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(paths.endpoint(info))
    ids, replies = [], {}
    try:
        for cell in cells:
            h = session.header("price_request")
            ids.append(h["msg_id"])
            protocol.send_frames(s, session.serialize(h, {"columns": cell, "method": method_spec}))
        deadline = time.monotonic() + timeout_s
        while len(replies) < len(cells) and time.monotonic() < deadline:
            if s.poll(100):
                msg = session.recv(s)
                replies[msg.parent_header["msg_id"]] = msg
    finally:
        s.close()
        ctx.term()
    return [Client._decode_result(replies[i]) if i in replies else None for i in ids]


def wait_running(client, *listed, timeout: float = 30.0) -> dict:
    """The first job the daemon reports running, once it also lists a job for each
    ``(client, rows)`` in ``listed``: requests other threads send. Until the daemon lists them
    they may not have left their client yet, and a test that then kills the daemon would see
    them fail to connect instead of losing the daemon mid-request."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = client.jobs()
        running = [j for j in jobs if j["state"] == "running"]
        have = {(j["client"], j["n"]) for j in jobs}
        if running and all((c.session_id, n) in have for c, n in listed):
            return running[0]
        time.sleep(0.02)
    raise AssertionError(f"within {timeout:g} s: no job running, or not all of "
                         f"{[(c.session_id, n) for c, n in listed]} listed")


def stop_daemon(handle: DaemonProcess) -> None:
    """Stop a daemon started by :func:`start_daemon`: a shutdown request, else terminate/kill."""
    from optiond.daemon.client import DaemonUnavailable

    if handle.process.poll() is None:
        client = handle.client(timeout=2.0, retries=0)
        try:
            client.shutdown()
        except DaemonUnavailable:
            handle.process.terminate()
        finally:
            client.close()
        try:
            handle.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            handle.process.kill()
            handle.process.wait(timeout=5)


@pytest.fixture(scope="session", autouse=True)
def _private_data_dir(tmp_path_factory):
    """Every daemon of the session (in this process or not) keeps its named objects in a
    temporary directory, never in the user's data directory."""
    mp = pytest.MonkeyPatch()
    mp.setenv("OPTIOND_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    yield
    mp.undo()


@pytest.fixture()
def pair():
    """A connected (DEALER, ROUTER) pair of sockets over inproc, for protocol tests."""
    import zmq

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
    b.bind("inproc://protocol-test")
    a.connect("inproc://protocol-test")
    yield a, b
    a.close(linger=0)
    b.close(linger=0)
    ctx.term()


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    """A real daemon subprocess for the whole session (see the module docstring)."""
    handle = start_daemon(tmp_path_factory.mktemp("daemon"))
    mp = pytest.MonkeyPatch()
    mp.setenv("OPTIOND_CONNECTION_FILE", str(handle.connection_file))
    try:
        yield handle
    finally:
        mp.undo()
        stop_daemon(handle)


#: bundled chains (examples/data) -> the quote time of the snapshot (examples/data/README.md);
#: SPX was taken after the close (the default 16:00)
SNAPSHOTS = {"spy_chain_2026-02-13.csv": "10:50", "qqq_chain_2026-02-13.csv": "10:50",
             "tsla_chain_2026-02-13.csv": "10:50", "aapl_chain_2026-02-13.csv": "10:50",
             "spx_chain_2025-10-01.csv": None}


@pytest.fixture(scope="session")
def bundled_chains():
    """``get(name) -> (df, out, summary)``: a bundled chain priced in-process with the default
    market set-up and its snapshot time, each chain priced once per session."""
    from optiond import chain

    data = Path(__file__).resolve().parents[1] / "examples" / "data"
    done: dict = {}

    def get(name: str):
        if name not in done:
            df = chain.read_chain(str(data / name))
            done[name] = (df, *chain.price_chain(df, quote_time=SNAPSHOTS[name]))
        return done[name]

    return get


#: three expiries of the bundled SPY chain, about 0.12, 0.34 and 0.84 years out
SPY_EXPIRIES = ("2026-03-27", "2026-06-18", "2026-12-18")


@pytest.fixture(scope="session")
def spy3():
    """The bundled SPY chain cut to :data:`SPY_EXPIRIES` (about 500 contracts): a quick chain
    to fit a surface to (its snapshot time: ``SNAPSHOTS``)."""
    from optiond import chain

    df = chain.read_chain(str(Path(__file__).resolve().parents[1] / "examples" / "data" / "spy_chain_2026-02-13.csv"))
    return df[df.expiry.isin(SPY_EXPIRIES)].reset_index(drop=True)


def quantlib_option(kind: int, S: float, K: float, days: int, r: float, q: float, sigma: float,
                    american: bool = False):
    """A QuantLib vanilla option (kind 1 call, 0 put) on a flat Black-Scholes-Merton process,
    valued 2026-01-02 with Actual/365: ``(QuantLib, option, process)``; set its engine."""
    import QuantLib as ql

    today = ql.Date(2, 1, 2026)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    proc = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(ql.SimpleQuote(S)), ql.YieldTermStructureHandle(ql.FlatForward(today, q, dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), sigma, dc)))
    exercise = ql.AmericanExercise(today, today + days) if american else ql.EuropeanExercise(today + days)
    opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if kind else ql.Option.Put, K), exercise)
    return ql, opt, proc
