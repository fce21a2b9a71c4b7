"""``optiond serve --workers 2`` opens no port beyond loopback: every listening TCP socket of the
launcher, the daemon (rank 0) and the worker rank, read from Linux's socket tables
(``/proc/<pid>/net/tcp`` and ``tcp6``, matched to each process's descriptors), is on 127.0.0.1
or ::1, after a batch priced across both ranks (the ranks' transport in use).
"""

from __future__ import annotations

import ipaddress
import os
import socket

import numpy as np
import pytest

from optiond.daemon import paths, pool
from optiond.models import Method

from conftest import start_daemon, stop_daemon

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(pool.find_mpiexec() is None, reason="needs mpi4py and mpiexec"),
              pytest.mark.skipif(not os.path.exists("/proc/self/net/tcp"), reason="reads Linux's socket tables")]


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from the parent pids in ``/proc/<pid>/stat``)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    parent[int(d)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, i = [root], 0
    while i < len(tree):
        tree += [p for p, pp in parent.items() if pp == tree[i]]
        i += 1
    return tree


def _address(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # /proc prints an IPv6 address as four host-order 32-bit words
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def listening_sockets(pids: list[int]) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of every listening TCP socket that one of ``pids`` holds."""
    out = []
    for pid in pids:
        try:
            inodes = set()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
            for table in ("tcp", "tcp6"):
                with open(f"/proc/{pid}/net/{table}") as f:
                    rows = f.read().splitlines()[1:]
                for row in rows:
                    cols = row.split()
                    if cols[3] == "0A" and cols[9] in inodes:  # state LISTEN, and this process's socket
                        addr, port = cols[1].rsplit(":", 1)
                        out.append((pid, _address(addr), int(port, 16)))
        except FileNotFoundError:  # a process that ended meanwhile holds nothing
            continue
    return out


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def test_listing_sees_a_wildcard_listener():
    """The listing itself: a socket of this process on 0.0.0.0 is found and is not loopback."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        mine = [x for x in listening_sockets([os.getpid()]) if x[2] == port]
    assert mine == [(os.getpid(), "0.0.0.0", port)] and not is_loopback("0.0.0.0")
    assert is_loopback("::1") and is_loopback("::ffff:127.0.0.1") and not is_loopback("192.0.2.2")


def test_workers_pool_listens_on_loopback_only(tmp_path):
    handle = start_daemon(tmp_path, "--workers", "2", "--no-warmup")
    c = handle.client(timeout=120.0)
    try:
        st = c.status()
        assert st["mpi_ranks"] == 2 and st["mpi_workers_alive"] == 1
        rng = np.random.default_rng(18)
        n = 1000
        cols = {"kind": "put", "style": "american", "spot": 100.0, "strike": rng.uniform(80, 120, n),
                "expiry": rng.uniform(0.1, 2.0, n), "rate": 0.03, "dividend_yield": 0.0,
                "volatility": rng.uniform(0.1, 0.5, n)}
        res = c.price_table(cols, Method(steps=400, greeks=False), fallback=False, force=True)
        assert res.diagnostics["workers"] == 2 and (res.status == "ok").all()
        tree = descendants(handle.pid)
        ranks = [r["pid"] for r in st["mpi"]["rank_info"]]
        assert set(ranks) <= set(tree), (ranks, tree)
        socks = listening_sockets(tree)
        info = paths.read_connection_file(handle.connection_file)
        ours = {info[k] for k in ("shell_port", "control_port", "iopub_port", "hb_port", "metrics_port")}
        assert ours <= {port for _, _, port in socks}  # the listing sees the daemon's own ports
        print(f"{len(tree)} processes, listening: {sorted(set((a, p) for _, a, p in socks))}")
        assert [s for s in socks if not is_loopback(s[1])] == []
        assert "warning" not in handle.log()  # a launcher that listens beyond loopback would be named
    finally:
        c.close()
        stop_daemon(handle)
