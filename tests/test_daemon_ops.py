"""The production daemon's operations: reply cache, coalescing, chunked jobs with progress,
submit/result/cancel, deadlines and limits, drain, events, metrics and probes, JSON log and
access control. Against a real daemon subprocess of this module's own (CPU only), so that
draining it or filling its queue disturbs no other test; results are compared bit for bit with
:mod:`optiond.engine` in this process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import zmq

from optiond import costs, engine, limits
from optiond.daemon import cache, jobs, paths, protocol
from optiond.daemon.client import (Client, DaemonError, DaemonUnavailable, DeadlineExceeded, JobCancelled, JobPending,
                                   RequestRefused)
from optiond.daemon.protocol import Session
from optiond.models import InvalidInputError, Method

from conftest import price_burst, start_daemon, stop_daemon

RESULT_ARRAYS = ("price", "delta", "gamma", "theta", "vega", "rho")
MAX_OPTIONS = 50_000
#: 8e6 tree nodes an option on the CPU: a few hundred options take about a second here
SLOW = Method(steps=4000, greeks=False, device="cpu")


def table(n: int, seed: int = 7, **over) -> dict:
    rng = np.random.default_rng(seed)
    cols = {"kind": np.array(["put", "call"] * (n // 2 + 1), dtype=object)[:n], "style": "american", "spot": 100.0,
            "strike": rng.uniform(80, 120, n), "expiry": rng.uniform(0.1, 2.0, n), "rate": 0.03,
            "dividend_yield": 0.01, "volatility": rng.uniform(0.1, 0.5, n)}
    cols.update(over)
    return cols


def assert_same(got, want) -> None:
    for name in RESULT_ARRAYS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.status.tolist() == want.status.tolist()
    assert got.error.tolist() == want.error.tolist()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    handle = start_daemon(tmp_path_factory.mktemp("ops"), "--max-options", str(MAX_OPTIONS), "--max-tree-nodes",
                          "2e11", "--max-request-s", "120", "--coalesce", "always")
    yield handle
    stop_daemon(handle)


@pytest.fixture
def client(served):
    c = served.client(timeout=30.0)
    yield c
    c.close()


def raw_request(served, msg_type: str, content: dict, buffers=(), metadata=None, timeout_ms: int = 20_000):
    """Send one signed request from a fresh socket; return the reply Message."""
    info = paths.read_connection_file(served.connection_file)
    session = Session(info["key"].encode())
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(paths.endpoint(info))
        protocol.send_frames(s, session.serialize(session.header(msg_type), content, None, metadata, list(buffers)))
        assert s.poll(timeout_ms), f"no reply to {msg_type}"
        return session.recv(s)
    finally:
        s.close()
        ctx.term()


# ---------------------------------------------------------------------------- reply size


@pytest.mark.parametrize("rows,greeks,steps", [(5, False, 60), (5, True, 60), (700, False, 900), (700, True, 300)])
def test_price_replies_send_greeks_only_when_asked(served, client, rows, greeks, steps):
    """Without Greeks the reply's value block is the prices alone, (1, n): the client fills
    the Greeks with NaN; inline and job-sized tables alike."""
    cols, m = table(rows, seed=60 + rows), Method(steps=steps, greeks=greeks)
    buffers: list = []
    content = {"columns": client._encode_columns(cols, buffers), "method": client._encode_method(m, buffers)}
    reply = raw_request(served, "price_request", content, buffers, metadata={"force": True})
    assert reply.content["values"]["__nd__"][1] == [7 if greeks else 1, rows]  # price and six Greeks (dividend rho included)
    got = Client._decode_result(reply)
    assert_same(got, engine.price_table(cols, m))
    assert np.isnan(got.delta).all() != greeks


# ---------------------------------------------------------------------------- cache


def test_repeated_request_comes_from_the_cache_and_force_skips_it(client):
    cols = table(3, seed=11)
    m = Method(steps=120)
    before = client.status()["cache"]
    first = client.price_table(cols, m, fallback=False)
    again = client.price_table({k: cols[k] for k in reversed(list(cols))}, m, fallback=False, job_id="another-name")
    forced = client.price_table(cols, m, fallback=False, force=True)
    assert "cached" not in first.diagnostics and again.diagnostics.get("cached") is True
    assert "cached" not in forced.diagnostics
    want = engine.price_table(cols, m)
    for r in (first, again, forced):
        assert_same(r, want)
    after = client.status()
    assert after["cache"]["hits"] >= before["hits"] + 1
    assert 0.0 < after["cache_hit_ratio"] <= 1.0
    assert after["requests_by_outcome"]["cached"] >= 1


def test_request_key_is_canonical():
    buf: list = []
    spec = protocol.encode_array(np.arange(3.0), buf)
    a = cache.request_key("price", {"columns": {"a": 1, "b": spec}, "method": {"steps": 5}}, buf)
    b = cache.request_key("price", {"method": {"steps": 5}, "columns": {"b": spec, "a": 1}, "force": True}, buf)
    c = cache.request_key("price", {"columns": {"a": 1, "b": spec}, "method": {"steps": 6}}, buf)
    d = cache.request_key("implied_vol", {"columns": {"a": 1, "b": spec}, "method": {"steps": 5}}, buf)
    assert a == b and len({a, c, d}) == 3
    assert cache.request_key("price", {"columns": [1, 2]}, []) is None
    lru = cache.ReplyCache(max_entries=2, max_bytes=10_000)
    for i in range(3):
        lru.put(bytes([i]), cache.Entry({"n": i}, [b"x" * 100]))
    assert lru.get(b"\x00") is None and lru.get(b"\x02").content == {"n": 2}
    assert not lru.put(b"big", cache.Entry({}, [b"x" * 5000]))  # over an eighth of the budget
    assert lru.stats()["entries"] == 2 and lru.hits == 1 and lru.misses == 1


# ---------------------------------------------------------------------------- coalescing


def test_concurrent_one_option_requests_are_coalesced_bit_for_bit(served, client):
    m = Method(steps=64)
    strikes = 60.0 + np.arange(96) * 0.5
    cells = [{"kind": "put", "style": "american", "spot": 100.0, "strike": float(k), "expiry": 0.75, "rate": 0.04,
              "dividend_yield": 0.0, "volatility": 0.3} for k in strikes]
    cells[5] = dict(cells[5], volatility=0.001, rate=0.5)  # CRR p outside [0, 1]: a row error, same text as alone
    before = client.status()["coalesced_requests"]
    # all sent before any reply is read: the daemon reads them in batches
    got = price_burst(served.connection_file, cells, client._encode_method(m, []))
    for res, cell in zip(got, cells):
        assert res is not None
        assert_same(res, engine.price_table(cell, m))
    assert client.status()["coalesced_requests"] >= before + 4


# ---------------------------------------------------------------------------- jobs, progress, cancel


def test_large_request_is_a_job_with_progress_and_the_same_bits(client):
    cols = table(600, seed=3)
    m = Method(steps=800, greeks=False)
    events = []
    got = client.price_table(cols, m, fallback=False, on_progress=events.append)
    assert_same(got, engine.price_table(cols, m))
    assert got.diagnostics["chunks"] > 1 and got.diagnostics["job_id"].startswith("progress-")
    states = [e.state for e in events]
    assert states[-1] == "done" and "running" in states
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert all(e.data["n"] == 600 and e.job_id == got.diagnostics["job_id"] for e in events)


def test_submit_result_jobs_and_pending(client):
    cols = table(800, seed=5)
    job = client.submit_table(cols, SLOW, job_id="ops-submit-1")
    assert job == "ops-submit-1"
    listed = {j["job_id"]: j for j in client.jobs()}
    assert job in listed and listed[job]["n"] == 800 and listed[job]["kind"] == "submit"
    with pytest.raises(JobPending) as pending:
        client.result(job, timeout=0.05)
    assert pending.value.job_id == job and 0.0 <= pending.value.fraction < 1.0
    got = client.result(job, timeout=60)
    assert_same(got, engine.price_table(cols, SLOW))
    assert_same(client.result(job, timeout=1), got)  # kept for a while after it finished
    with pytest.raises(RequestRefused) as unknown:
        client.result("no-such-job", timeout=1)
    assert unknown.value.ename == "UnknownJob"


def test_submit_implied_vol(client):
    cols = table(40, seed=9, style="european")
    m = Method(steps=300)
    prices = engine.price_table(cols, m).price
    job = client.submit_implied_vol(prices, cols, m)
    vol, status = client.result(job, timeout=60)
    want_vol, want_status = engine.implied_vol_table(prices, cols, m)
    np.testing.assert_array_equal(vol, want_vol)
    assert status.tolist() == want_status.tolist()


def test_cancel_a_submitted_job_and_a_waiting_request(client):
    job = client.submit_table(table(2000, seed=21), SLOW, job_id="ops-cancel-1")
    with client.subscribe() as sub:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ev = sub.get(timeout=0.5)
            if ev is not None and ev.kind == "progress" and ev.job_id == job and ev.state == "running":
                break
    reply = client.cancel(job)
    assert reply["cancelled"] == 1
    with pytest.raises(JobCancelled):
        client.result(job, timeout=30)

    errors: list = []

    def waiting() -> None:
        try:
            client.price_table(table(2000, seed=22), SLOW, fallback=False, job_id="ops-cancel-2")
        except Exception as e:  # checked below
            errors.append(e)

    t = threading.Thread(target=waiting)
    t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(j["job_id"] == "ops-cancel-2" for j in client.jobs()):
        time.sleep(0.05)
    assert client.cancel("ops-cancel-2")["cancelled"] == 1
    t.join(timeout=30)
    assert len(errors) == 1 and isinstance(errors[0], JobCancelled)
    with pytest.raises(JobCancelled):  # the id stays cancelled for a while: a late request is refused
        client.price_table(table(2), Method(steps=10), fallback=False, job_id="ops-cancel-2")
    assert client.cancel("nothing-running")["cancelled"] == 0


MLMC_CELL = {"kind": "call", "style": "european", "spot": 280.0, "strike": 280.0, "expiry": 1.0, "rate": 0.05,
             "dividend_yield": 0.0, "volatility": 0.25}  # the seed's AAPL case


def test_mlmc_job_reports_progress_within_the_run(client):
    m = Method(name="mlmc", eps=0.0015, seed=3, device="cpu")  # about a second on one core
    events = []
    got = client.price_table(MLMC_CELL, m, fallback=False, on_progress=events.append)
    want = engine.price_table(MLMC_CELL, m)
    assert got.price[0] == want.price[0] and got.std_error[0] == want.std_error[0]  # the same run, bit for bit
    inside = [e.fraction for e in events if e.state == "running" and 0.0 < e.fraction < 1.0]
    assert inside, [(e.state, e.fraction) for e in events]  # one option, one chunk: reported from inside MLMC
    fractions = [e.fraction for e in events]
    assert fractions == sorted(fractions) and events[-1].state == "done"


def test_cancelled_mlmc_run_stops_between_iterations(client):
    m = Method(name="mlmc", eps=0.0002, seed=4, device="cpu")  # minutes on one core if left to run
    # The daemon refuses a request it estimates over max_request_s (120 s here), and its estimate
    # scales with the CRR speed it timed once at warm-up: about 85 s for this eps at the usual
    # 0.28 ns/node, but over 120 s from 0.4 ns/node, which a loaded (or just unlucky) warm-up
    # measures now and then. Keep the estimate at most three quarters of the limit.
    st = client.status()
    budget = 0.75 * st["limits"]["max_request_s"]
    est = limits.estimate("price", MLMC_CELL, m, 1, ns_per_node=st["ns_per_node"]).cpu_s
    if est > budget:  # work goes as 1 / eps**2
        m = dataclasses.replace(m, eps=m.eps * math.sqrt(est / budget))
    job = client.submit_table(MLMC_CELL, m, job_id="ops-mlmc-cancel")
    with client.subscribe() as sub:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ev = sub.get(timeout=0.5)
            if ev is not None and ev.kind == "progress" and ev.job_id == job and ev.fraction > 0.0:
                break
        else:
            pytest.fail("no progress from inside the MLMC run")
    t0 = time.monotonic()
    assert client.cancel(job)["cancelled"] == 1
    with pytest.raises(JobCancelled):
        client.result(job, timeout=30)
    # the run itself stopped: the pricing thread takes the next job at once
    got = client.price_table(table(300, seed=41), SLOW, fallback=False, force=True)
    assert got.ok.all() and time.monotonic() - t0 < 30


def test_deadlines(client):
    big = table(2000, seed=30)
    with pytest.raises(RequestRefused) as refused:  # estimated far over the deadline: refused at once
        client.price_table(big, Method(steps=5000, greeks=False), fallback=False, deadline_s=0.01)
    assert refused.value.details["limit"] == "deadline_s" and "deadline" in str(refused.value)
    # ahead of it on the pricing thread; its own deadline is the daemon's longest, so the cost model's
    # estimate (the kernel speed the daemon measured at start, slow on a loaded box) never refuses it
    blocker = client.submit_table(table(2000, seed=31), Method(steps=8000, greeks=False, device="cpu"),
                                  deadline_s=600.0)
    with pytest.raises(DeadlineExceeded):
        client.price_table(table(100, seed=32), Method(steps=600, greeks=False, device="cpu"), fallback=False,
                           deadline_s=0.3)
    client.cancel(blocker)
    with pytest.raises(RequestRefused, match="deadline_s"):  # a deadline that is no number of seconds
        client.price_table(table(2), Method(steps=10), fallback=False, deadline_s=float("nan"))


def test_limits_refuse_before_any_work(served, client):
    with pytest.raises(RequestRefused) as e:
        client.price_table(table(MAX_OPTIONS + 1), Method(name="black-scholes"), fallback=False)
    assert e.value.details["limit"] == "max_options"
    with pytest.raises(RequestRefused) as e:
        client.price_table(table(100), Method(steps=50_000), fallback=False)  # each row within, all over
    assert e.value.details["limit"] == "max_tree_nodes" and "tree nodes" in str(e.value)
    # an array that declares 10**12 rows is refused on its declaration, before any copy
    cell = {"kind": "put", "style": "american", "strike": 100.0, "expiry": 1.0, "rate": 0.03, "volatility": 0.2}
    reply = raw_request(served, "price_request", {"columns": dict(cell, spot={"__nd__": ["<f8", [10**12], 0]})},
                        [b"\0" * 8])
    assert reply.content["status"] == "error" and reply.content["ename"] == "LimitExceeded"
    assert client.ping()["pid"] == served.pid


def test_cost_model_and_hooks():
    one = limits.estimate("price", table(1), Method(steps=100, greeks=False), 1)
    assert one.work == costs.tree_nodes(100) == 101 * 102 / 2 and one.model == "binomial"
    assert limits.estimate("price", table(1), Method(steps=100), 1).work == 7 * one.work  # the price and three bumped pairs
    assert limits.estimate("implied_vol", table(1), Method(steps=100), 1).work == costs.IV_TREES * one.work
    per_row = limits.estimate("price", table(3, steps=np.array([10, 20, 30])), Method(greeks=False), 3)
    assert per_row.work == costs.tree_nodes([10, 20, 30]) and per_row.max_steps == 30
    bad_rows = limits.estimate("price", table(2, steps=np.array([10, 10**9])), Method(greeks=False), 2)
    assert bad_rows.work == costs.tree_nodes([10, 0])  # an invalid N is a row error, priced by nobody
    mlmc = limits.estimate("price", table(4), Method(name="mlmc", eps=0.01), 4)
    assert mlmc.model == "mlmc" and mlmc.work == pytest.approx(4 * costs.MLMC_STEPS_EPS2 / 0.01**2)
    per_eps = limits.estimate("price", table(2, eps=np.array([0.01, 0.1])), Method(name="mlmc"), 2)
    assert per_eps.work == pytest.approx(costs.MLMC_STEPS_EPS2 * (1e4 + 1e2))
    adi = limits.estimate("price", table(2), Method(name="adi", grid=(100, 50), time_steps=20, steps_per_year=0.0,
                                                    richardson=False), 2)
    assert adi.model == "adi" and adi.work == 2 * 100 * 50 * 20  # one fixed grid: grid x steps a row
    lim = limits.Limits(max_mlmc_cost=1e6, max_adi_cells=1e5)
    for cost, name in ((mlmc, "max_mlmc_cost"), (adi, "max_adi_cells")):
        with pytest.raises(limits.LimitExceeded) as e:
            lim.check(cost, None)
        assert e.value.limit == name
    assert jobs.split(10, 10.0, None, 2.5) == [(0, 2, 2.0), (2, 5, 3.0), (5, 8, 3.0), (8, 10, 2.0)]
    w = np.array([1.0, 1.0, 1.0, 10.0, 1.0, 1.0])
    parts = jobs.split(6, 15.0, w, 7.5)
    assert parts[0][0] == 0 and parts[-1][1] == 6 and sum(p[2] for p in parts) == pytest.approx(15.0)
    assert all(a < b for a, b, _ in parts) and all(p[1] == q[0] for p, q in zip(parts, parts[1:]))


@pytest.mark.parametrize("slots", [1, 2, 5])
def test_guided_chunks_shrink_and_cover_every_row(slots):
    total, lo, hi = 1000.0, 2.0, 60.0
    works = jobs.guided_works(total, slots, lo, hi)
    assert sum(works) == pytest.approx(total)
    assert all(lo * 0.5 <= w <= hi for w in works[:-1]) and works[-1] <= 1.5 * hi
    assert all(a >= b - 1e-9 for a, b in zip(works[:-2], works[1:-1]))  # non-increasing (the last one may gather a crumb)
    assert works[0] == pytest.approx(min(hi, total / (2 * slots)))
    # each chunk is 1/(2 slots) of what is left, within the clamps
    left = total
    for w in works[:-1]:
        assert w == pytest.approx(min(max(left / (2 * slots), lo), hi, left)) or left - w < lo
        left -= w
    rng = np.random.default_rng(3)
    for weights in (None, rng.uniform(0.5, 3.0, 777)):
        parts = jobs.split_works(777, total, weights, works)
        assert parts[0][0] == 0 and parts[-1][1] == 777 and all(p[1] == q[0] for p, q in zip(parts, parts[1:]))
        assert all(a < b for a, b, _ in parts) and sum(p[2] for p in parts) == pytest.approx(total)
        for (_, _, got), want in zip(parts, works):  # each chunk within one row of its target
            assert abs(got - want) <= total / 777 * 3.0 + 1e-9


def test_gpu_job_shares_follow_the_measured_slot_speeds():
    assert jobs.slot_shares(100.0, 4, None, 2.0) == [25.0] * 4  # nothing measured yet: equal
    shares = jobs.slot_shares(100.0, 4, 0.9, 1.0)  # rank 0's slot 10 % slower than a worker
    assert sum(shares) == pytest.approx(100.0) and shares[:3] == [shares[0]] * 3
    # the same time each (work / speed: speeds from dispatch to result, so transfers are in them)
    assert shares[3] / shares[0] == pytest.approx(0.9)
    assert jobs.slot_shares(100.0, 2, 10.0, 1.0)[1] / jobs.slot_shares(100.0, 2, 10.0, 1.0)[0] == pytest.approx(1.5)
    parts = jobs.split_works(1000, 100.0, None, shares)
    assert len(parts) == 4 and parts[-1][1] == 1000 and parts[3][1] - parts[3][0] < parts[0][1] - parts[0][0]


def test_retry_of_a_running_job_is_answered_once(served, client):
    info = paths.read_connection_file(served.connection_file)
    session = Session(info["key"].encode())
    cols = table(1500, seed=40)
    buffers: list = []
    content = {"columns": Client._encode_columns(cols, buffers), "method": client._encode_method(SLOW, buffers)}
    header = session.header("price_request")
    done_before = client.status()["jobs_by_outcome"].get("done", 0)
    ctx = zmq.Context()
    socks = [ctx.socket(zmq.DEALER) for _ in range(2)]
    try:
        for s in socks:
            s.setsockopt(zmq.LINGER, 0)
            s.connect(paths.endpoint(info))
        protocol.send_frames(socks[0], session.serialize(header, content, None, None, buffers))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(j["msg_id"] == header["msg_id"] for j in client.jobs()):
            time.sleep(0.01)
        protocol.send_frames(socks[1], session.serialize(header, content, None, None, buffers))  # Lazy Pirate resend
        assert socks[1].poll(60_000)
        reply = session.recv(socks[1])
        assert not socks[0].poll(200)  # the reply went to the socket that asked last
    finally:
        for s in socks:
            s.close()
        ctx.term()
    assert reply.parent_header["msg_id"] == header["msg_id"]
    assert_same(Client._decode_result(reply), engine.price_table(cols, SLOW))
    assert client.status()["jobs_by_outcome"]["done"] == done_before + 1


# ---------------------------------------------------------------------------- events, status, drain


def test_events_heartbeat_and_status(client):
    with client.subscribe() as sub:
        kinds = set()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not {"heartbeat", "status"} <= kinds:
            ev = sub.get(timeout=0.5)
            if ev is not None:
                kinds.add(ev.kind)
                assert ev.data.get("pid") is not None and isinstance(ev.data.get("queue_depth"), int)
        assert {"heartbeat", "status"} <= kinds and sub.alive


def test_status_fields(client, served):
    st = client.status()
    for key in ("version", "pid", "state", "uptime_s", "devices", "gpu_memory", "queue_depth", "jobs_running",
                "cache_hit_ratio", "cache", "mpi_ranks", "mpi_workers", "mpi_workers_alive", "mpi",
                "requests_by_outcome", "requests_served", "by_op", "cpu_threads", "methods", "limits",
                "metrics_url", "log_file", "coalesced_requests", "gpu_fallbacks"):
        assert key in st, key
    assert st["state"] == "serving" and st["mpi_ranks"] == 1 and st["mpi_workers_alive"] == 0
    assert st["limits"]["max_options"] == MAX_OPTIONS and st["devices"][0] == "cpu"
    assert st["mpi"]["rank_info"][0]["pid"] == served.pid and isinstance(st["gpu_memory"], list)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_and_probes(client):
    client.price_table(table(2, seed=50), Method(steps=30), fallback=False)
    with pytest.raises(InvalidInputError):
        client.price_table({"kind": "put"}, fallback=False)
    url = client.status()["metrics_url"]
    assert url.startswith("http://127.0.0.1:")
    code, text = _get(url + "/metrics")
    assert code == 200
    for name in ('optiond_requests_total{device="cpu",model="binomial",op="price",outcome="ok"}',
                 'outcome="invalid"', "optiond_request_duration_seconds_bucket", "optiond_queue_depth",
                 "optiond_cache_hit_ratio", "optiond_mpi_workers_alive", "optiond_mpi_ranks 1.0",
                 "optiond_auth_failures_total", "optiond_uptime_seconds", "optiond_ready 1.0", "process_cpu_seconds"):
        assert name in text, name
    code, body = _get(url + "/healthz")
    assert code == 200 and json.loads(body)["ok"] is True
    code, body = _get(url + "/readyz")
    assert code == 200 and json.loads(body)["reasons"] == []
    assert _get(url + "/nothing")[0] == 404


def _observed(metrics) -> tuple[float, float]:
    """Requests counted and latencies observed so far in ``metrics``."""
    n = sum(s.value for f in metrics.requests.collect() for s in f.samples if s.name == "optiond_requests_total")
    h = sum(s.value for f in metrics.latency.collect() for s in f.samples
            if s.name == "optiond_request_duration_seconds_count")
    return n, h


def test_every_reply_is_counted_before_it_is_sent(tmp_path, monkeypatch):
    """The request counter and the latency histogram hold a request before its reply leaves
    (for every kind of reply: priced inline, from the cache, refused as invalid, a protocol
    error, a shell and a control op, a job's acceptance and its result through the outbox),
    so a scrape made once a client holds its reply always sees it. Checked at the send
    itself, in this process: nothing depends on how the threads are scheduled."""
    from optiond.daemon import server_parts
    from optiond.daemon.server import Server

    server = Server(tmp_path / "daemon.json", warmup=False, json_log=False, metrics_port=None, ipc=False)
    at_send: list[tuple[float, float]] = []
    real = server_parts.send_frames

    def spy(sock, frames, flags=0):
        at_send.append(_observed(server.metrics))
        real(sock, frames, flags)

    monkeypatch.setattr(server_parts, "send_frames", spy)
    server.start()
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    c = Client(tmp_path / "daemon.json", timeout=30.0)
    try:
        cols, method = table(2, seed=51), Method(steps=30)
        c.price_table(cols, method, fallback=False)
        c.price_table(cols, method, fallback=False)  # from the reply cache
        with pytest.raises(InvalidInputError):
            c.price_table({"kind": "put"}, fallback=False)
        c.ping()
        c.status()
        job = c.submit_table(table(3, seed=52), method)
        assert_same(c.result(job, timeout=30), engine.price_table(table(3, seed=52), method))
        info = paths.read_connection_file(tmp_path / "daemon.json")
        session = Session(info["key"].encode())
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        try:
            s.connect(paths.endpoint(info))
            protocol.send_frames(s, session.serialize(session.header("no_such_request"), {}))
            assert s.poll(20_000) and session.recv(s).content["ename"] == "ProtocolError"
        finally:
            s.close()
            ctx.term()
        assert len(at_send) >= 8
        for k, (n, h) in enumerate(at_send, start=1):
            assert n >= k and h >= k, (k, at_send)  # the k-th reply sent: k requests counted already
        assert _observed(server.metrics) == (len(at_send), len(at_send))
        outcomes = {s.labels["outcome"] for f in server.metrics.requests.collect() for s in f.samples
                    if s.name == "optiond_requests_total"}
        assert {"ok", "cached", "invalid", "protocol_error"} <= outcomes
    finally:
        c.close()
        server.stop()
        t.join(timeout=10)
        server.close()


def test_drain_refuses_new_work_then_resume(client):
    url = client.status()["metrics_url"]
    try:
        reply = client.drain()
        assert reply["state"] == "draining"
        with pytest.raises(RequestRefused) as e:
            client.price_table(table(2, seed=60), Method(steps=20), fallback=False)
        assert e.value.ename == "DaemonDraining"
        code, body = _get(url + "/readyz")
        assert code == 503 and "state draining" in json.loads(body)["reasons"]
        assert _get(url + "/healthz")[0] == 200  # alive, just not taking work
        assert client.status()["state"] == "draining"
    finally:
        assert client.resume()["state"] == "serving"
    assert client.price_table(table(2, seed=60), Method(steps=20), fallback=False).via == "daemon"
    assert _get(url + "/readyz")[0] == 200


def test_drain_with_shutdown_finishes_the_work_first(tmp_path):
    handle = start_daemon(tmp_path, "--no-warmup")
    c = handle.client(timeout=30.0)
    try:
        cols = table(150, seed=70)
        job = c.submit_table(cols, SLOW)
        c.drain(shutdown=True)
        assert_same(c.result(job, timeout=60), engine.price_table(cols, SLOW))
        assert handle.process.wait(timeout=30) == 0
        assert not handle.connection_file.exists()
    finally:
        c.close()
        stop_daemon(handle)


# ---------------------------------------------------------------------------- logs and access


def test_json_log_has_the_request_fields_and_never_the_key(served, client):
    client.price_table(table(2, seed=80), Method(steps=40), fallback=False, job_id="log-check")
    with pytest.raises(InvalidInputError):
        client.price_table({"kind": "put", "spot": 1.0}, fallback=False)
    key = paths.read_connection_file(served.connection_file)["key"]
    deadline = time.monotonic() + 5
    records = []
    while time.monotonic() < deadline:
        records = served.json_log()
        if any(r.get("outcome") == "invalid" for r in records) and any(r.get("job_id") == "log-check" for r in records):
            break
        time.sleep(0.1)
    req = next(r for r in records if r.get("job_id") == "log-check")
    assert req["event"] == "request" and req["op"] == "price" and req["model"] == "binomial"
    assert req["device"] == "cpu" and req["outcome"] == "ok" and req["rows"] == 2
    assert req["client"] == client.session_id and req["msg_id"] and req["duration_ms"] > 0
    bad = next(r for r in records if r.get("outcome") == "invalid")
    assert bad["level"] == "WARNING" and "missing column" in bad["error"]
    log_dir = served.json_log_path.parent
    for f in log_dir.iterdir():
        assert key not in f.read_text()
        if os.name == "posix":
            assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
    if os.name == "posix":
        assert stat.S_IMODE(os.stat(log_dir).st_mode) == 0o700
    assert key not in served.log()


def test_wrong_key_gets_nothing_and_is_logged(served, tmp_path):
    info = paths.read_connection_file(served.connection_file)
    paths.write_connection_file(tmp_path / "forged.json", dict(info, key="f" * 64))
    bad = Client(tmp_path / "forged.json", timeout=0.3, retries=0)
    for call in (bad.ping, bad.status, lambda: bad.price_table(table(1), fallback=False)):
        with pytest.raises(DaemonUnavailable):
            call()
    bad.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if any(r.get("event") == "auth_failure" for r in served.json_log()):
            break
        time.sleep(0.1)
    rec = next(r for r in served.json_log() if r.get("event") == "auth_failure")
    assert rec["level"] == "WARNING" and "authentication failure" in rec["msg"]
    assert "f" * 64 not in served.json_log_path.read_text()


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's socket table")
def test_binds_only_loopback(served, client):
    info = paths.read_connection_file(served.connection_file)
    ports = {info[k] for k in paths.REQUIRED_KEYS if k.endswith("_port")} | {info["metrics_port"]}
    listening = {}
    for table_file in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table_file):
            continue
        with open(table_file) as f:
            next(f)
            for line in f:
                local, state = line.split()[1], line.split()[3]
                addr, port = local.rsplit(":", 1)
                if state == "0A" and int(port, 16) in ports:  # LISTEN
                    listening.setdefault(int(port, 16), set()).add(addr)
    assert set(listening) == ports
    assert all(addrs == {"0100007F"} for addrs in listening.values()), listening  # 127.0.0.1 only
    assert stat.S_IMODE(os.stat(served.connection_file).st_mode) == 0o600


def test_bad_client_arguments(client):
    with pytest.raises(TypeError):
        client.price_table(table(1), job_id=3)
    with pytest.raises(DaemonError):
        client.cancel("x" * 65)


def test_mlmc_and_adi_are_costed_chunked_and_identical(client):
    cols = {"kind": "put", "style": "european", "spot": 100.0, "strike": np.linspace(85, 115, 5), "expiry": 1.0,
            "rate": 0.03, "volatility": 0.2}
    m = Method(name="mlmc", eps=0.05, seed=7)
    got, want = client.price_table(cols, m, fallback=False), engine.price_table(cols, m)
    assert_same(got, want)
    np.testing.assert_array_equal(got.std_error, want.std_error)
    assert got.diagnostics["mlmc_levels"] == want.diagnostics["mlmc_levels"]
    heston = dict(cols, v0=0.04, kappa=1.5, long_run_variance=0.04, xi=0.3, correlation=-0.7)
    m = Method(name="adi", grid=(40, 20), time_steps=20)
    got, want = client.price_table(heston, m, fallback=False), engine.price_table(heston, m)
    assert_same(got, want)
    assert got.diagnostics["adi_dv0"] == want.diagnostics["adi_dv0"]
    with pytest.raises(RequestRefused) as e:  # 2e6 grid cells x 1e4 steps x 5 options: over max_adi_cells
        client.price_table(heston, Method(name="adi", grid=(2000, 1000), time_steps=10_000), fallback=False)
    assert e.value.details["limit"] == "max_adi_cells"


def test_a_message_over_the_size_limit_is_refused_by_the_client(tmp_path, served):
    from optiond.daemon.client import Client as C

    info = paths.read_connection_file(served.connection_file)
    assert info["max_message_bytes"] > 0
    paths.write_connection_file(tmp_path / "small.json", dict(info, max_message_bytes=1000))
    c = C(tmp_path / "small.json", timeout=5.0)
    try:
        with pytest.raises(RequestRefused) as e:
            c.price_table(table(200), Method(steps=10), fallback=False)
        assert e.value.details["limit"] == "max_message_bytes"
        with pytest.raises(RequestRefused):  # as the daemon's own limits: refused, not priced elsewhere
            c.price_table(table(200), Method(steps=10))
    finally:
        c.close()
