"""MLMC across MPI ranks: ``mpiexec -n 2`` (the PyPI ``mpich`` wheel) gives the bit-identical
estimate of a one-process run for the same seed, with the samples split between the ranks
and one packed Allreduce per iteration (see :mod:`optiond.kernels.mlmc`), with the exact
level 0 (default) and with level 0 sampled."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from optiond.kernels.mlmc import mlmc_price

pytestmark = pytest.mark.mpi

# (payoff, eps, exact_level0): the default exact level 0 (rank 0's value broadcast) and one run
# that samples level 0 across the ranks as well
CASES = [("call", 0.01, True), ("asian_call", 0.01, True), ("digital_call", 2e-4, True), ("put", 0.01, False)]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from mpi4py import MPI
    from optiond.kernels.mlmc import make_sampler, mlmc_price
    comm = MPI.COMM_WORLD
    device = sys.argv[1]
    out = []
    for payoff, eps, exact in json.loads(sys.argv[2]):
        s = make_sampler(payoff, 100.0, 100.0, 1.0, 0.05, 0.0, 0.2, seed=2026, device=device, comm=comm)
        r = mlmc_price(payoff, 100.0, 100.0, 1.0, 0.05, 0.0, 0.2, eps, seed=2026, comm=comm, sampler=s,
                       exact_level0=exact)
        out.append({"price": r.price.hex(), "n": r.n_samples.tolist(), "sums": [x.hex() for x in r.sums.ravel()],
                    "iterations": r.iterations, "ranks": r.ranks, "local": s.samples_done})
        s.close()
    with open(f"{sys.argv[3]}/rank{comm.Get_rank()}.json", "w") as fh:
        json.dump({"rank": comm.Get_rank(), "out": out}, fh)
    """
)


def _mpiexec():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    here = os.path.dirname(sys.executable)
    return shutil.which("mpiexec", path=here) or shutil.which("mpiexec")


def run_ranks(n, device, cases, tmp_path):
    exe = _mpiexec()
    script = tmp_path / "mlmc_rank.py"
    script.write_text(SCRIPT)
    # (the OMPI_* switches only matter when mpiexec is Open MPI run as root; MPICH ignores them)
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    outdir = tmp_path / f"out_{device}"
    outdir.mkdir()
    proc = subprocess.run([exe, "-n", str(n), sys.executable, str(script), device, json.dumps(cases), str(outdir)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads(f.read_text()) for f in sorted(outdir.glob("rank*.json"))]
    assert sorted(r["rank"] for r in results) == list(range(n))
    return results


def one_process(device, cases):
    out = []
    for payoff, eps, exact in cases:
        r = mlmc_price(payoff, 100.0, 100.0, 1.0, 0.05, 0.0, 0.2, eps, seed=2026, device=device, exact_level0=exact)
        assert (r.n_samples[0] == 0) == exact
        out.append({"price": r.price.hex(), "n": r.n_samples.tolist(), "sums": [x.hex() for x in r.sums.ravel()]})
    return out


def check_equal(results, single, n_ranks):
    for rank_result in results:
        for got, want in zip(rank_result["out"], single):
            assert got["ranks"] == n_ranks
            assert got["price"] == want["price"], (float.fromhex(got["price"]), float.fromhex(want["price"]))
            assert got["n"] == want["n"] and got["sums"] == want["sums"]
    # the work was shared: every rank simulated part of the samples, together all of them
    for i in range(len(single)):
        local = [r["out"][i]["local"] for r in results]
        assert all(x > 0 for x in local) and sum(local) == sum(single[i]["n"])


@pytest.mark.skipif(_mpiexec() is None, reason="needs mpi4py and mpiexec (pip install mpi4py mpich)")
def test_two_ranks_equal_one_rank_cpu(tmp_path):
    results = run_ranks(2, "cpu", CASES, tmp_path)
    check_equal(results, one_process("cpu", CASES), 2)


def _gpu_ok():
    try:
        from optiond.kernels.gpu import available
    except ImportError:
        return False
    return available()


@pytest.mark.gpu
@pytest.mark.skipif(_mpiexec() is None or not _gpu_ok(), reason="needs mpi4py, mpiexec, CuPy and a GPU")
def test_two_ranks_equal_one_rank_gpu(tmp_path):
    """Each rank takes GPU rank % n_gpus (both share GPU 0 on a one-GPU machine)."""
    results = run_ranks(2, "gpu", CASES, tmp_path)
    check_equal(results, one_process("gpu", CASES), 2)
