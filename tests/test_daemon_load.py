"""Load: 8 client processes send one-option price requests (as Excel cells do) to one daemon on
loopback for ``OPTIOND_LOAD_SECONDS`` (default 4 s here; the issue's 60 s run is
``python bench/daemon.py --load-seconds 60``). Each request has a strike of its own, so every
reply can be checked against its request: all prices are recomputed in-process afterwards and
must match bit for bit; none may be lost, fail or be answered twice (the daemon's request
counts must add up to what the clients sent).

The throughput and latency are printed (``pytest -s`` or ``-rP`` shows them) and recorded as
test properties, not asserted: this machine is shared. The target (5,000 requests/s on a 2-core
machine) is measured by ``bench/daemon.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from optiond import engine
from optiond.models import Method

from conftest import start_daemon, stop_daemon

LOAD_SECONDS = float(os.environ.get("OPTIOND_LOAD_SECONDS", "4"))
PROCESSES = 8
STEPS = 100

WORKER = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from optiond.daemon.client import Client
    from optiond.models import Method

    conn, idx, seconds, go, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
    c = Client(conn, timeout=30.0, retries=0)
    m = Method(steps=int(sys.argv[6]), greeks=False)
    cell = {"kind": "put", "style": "american", "spot": 100.0, "strike": 100.0, "expiry": 1.0, "rate": 0.05,
            "dividend_yield": 0.0, "volatility": 0.2}
    c.ping()
    open(out + ".ready", "w").close()
    while not os.path.exists(go):
        time.sleep(0.002)
    strikes, prices, lat, errors, vias = [], [], [], [], set()
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        k = 50.0 + 10.0 * idx + 1e-6 * i  # a strike of its own: the reply must be this strike's price
        t0 = time.perf_counter()
        try:
            r = c.price_table(dict(cell, strike=k), m, fallback=False)
            prices.append(r.price[0])
            vias.add(r.via)
        except Exception as e:  # counted: none may fail
            errors.append(repr(e))
            prices.append(float("nan"))
        lat.append(time.perf_counter() - t0)
        strikes.append(k)
        i += 1
    np.savez(out, strikes=np.array(strikes), prices=np.array(prices), lat=np.array(lat))
    with open(out + ".json", "w") as f:
        json.dump({"n": i, "errors": errors[:5], "n_errors": len(errors), "vias": sorted(vias)}, f)
    c.close()
""")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    handle = start_daemon(tmp_path_factory.mktemp("load"))
    yield handle
    stop_daemon(handle)


def test_eight_clients_every_reply_matched_none_lost(served, tmp_path, record_property):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    go = tmp_path / "go"
    c = served.client(timeout=30.0)
    before = c.status()
    procs = []
    for i in range(PROCESSES):
        out = tmp_path / f"w{i}"
        procs.append((subprocess.Popen([sys.executable, str(script), str(served.connection_file), str(i),
                                        str(LOAD_SECONDS), str(go), str(out), str(STEPS)],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT), out))
    deadline = time.monotonic() + 120
    while not all(out.with_suffix(".ready").exists() for _, out in procs):
        assert time.monotonic() < deadline and all(p.poll() is None for p, _ in procs), \
            [p.stdout.read().decode()[-2000:] for p, _ in procs if p.poll() is not None]
        time.sleep(0.05)
    go.touch()
    t0 = time.perf_counter()
    for p, _ in procs:
        assert p.wait(timeout=LOAD_SECONDS + 120) == 0, p.stdout.read().decode()[-2000:]
    wall = time.perf_counter() - t0
    after = c.status()
    c.close()

    total, lat = 0, []
    m = Method(steps=STEPS, greeks=False, device="cpu")  # as the daemon priced each one-option request
    for _, out in procs:
        meta = json.loads(out.with_suffix(".json").read_text())
        assert meta["n_errors"] == 0, meta["errors"]
        assert meta["vias"] == ["daemon"]
        data = np.load(str(out) + ".npz")
        strikes, prices = data["strikes"], data["prices"]
        assert len(strikes) == meta["n"] > 0
        want = engine.price_table({"kind": "put", "style": "american", "spot": 100.0, "strike": strikes,
                                   "expiry": 1.0, "rate": 0.05, "dividend_yield": 0.0, "volatility": 0.2}, m).price
        np.testing.assert_array_equal(prices, want)  # every reply is its own request's, bit for bit
        total += meta["n"]
        lat.append(data["lat"])
    def delta(key: str) -> int:
        return sum(after[key].values()) - sum(before[key].values())

    priced = after["by_op"].get("price", 0) - before["by_op"].get("price", 0)
    assert priced == total  # the daemon got every request once
    # and answered every request it got once (a status is counted as received before it
    # answers, as answered after: the two status calls shift one count each way)
    assert delta("requests_by_outcome") == delta("by_op")
    assert set(after["requests_by_outcome"]) <= {"ok", "cached"}
    assert after["errors"] == before["errors"] and after["replayed"] == before["replayed"]
    lat_us = np.concatenate(lat) * 1e6
    summary = {"processes": PROCESSES, "seconds": LOAD_SECONDS, "requests": total,
               "req_per_s": round(total / LOAD_SECONDS), "p50_us": round(float(np.percentile(lat_us, 50)), 1),
               "p99_us": round(float(np.percentile(lat_us, 99)), 1), "wall_s": round(wall, 2),
               "coalesced": after["coalesced_requests"] - before["coalesced_requests"]}
    for k, v in summary.items():
        record_property(k, v)
    print("\nload:", json.dumps(summary))
