"""Whole files or none (:mod:`optiond.files`): a write that fails midway (a full disk) keeps
the previous file byte for byte and leaves no temporary behind, and the CLI says so in one
line with exit status 2; the product's own directories are 0700 whatever the umask."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from optiond import files
from optiond.cli import EXIT_INPUT
from optiond.cli import main as cli_main

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
PREVIOUS = b"previous,good\r\noutput,\xc3\xa9\n"  # bytes a text rewrite would not reproduce by chance


class FullDisk:
    """A file object that takes ``room`` bytes (really written and flushed to the temporary
    file), then fails as a full disk does: ``OSError(ENOSPC)``."""

    def __init__(self, f, room: int):
        self._f, self._room = f, room

    def write(self, data):
        n = len(data.encode() if isinstance(data, str) else data)
        if n > self._room:
            self._f.write(data[:self._room])
            self._f.flush()
            self._room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= n
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk(room, suffix="")``: from now on every file written through
    :mod:`optiond.files` whose name ends with ``suffix`` runs out of space after ``room``
    bytes; returns the list of temporaries opened (to check they are gone)."""
    opened: list[Path] = []
    real = files._open_temp

    def arm(room: int, suffix: str = ""):
        def open_temp(target, *a, **kw):
            f, tmp = real(target, *a, **kw)
            opened.append(tmp)
            return (FullDisk(f, room) if target.name.endswith(suffix) else f), tmp

        monkeypatch.setattr(files, "_open_temp", open_temp)
        return opened

    return arm


def previous_file(path: Path) -> Path:
    path.write_bytes(PREVIOUS)
    return path


def one_line(capsys, rc: int, command: str, path: Path) -> str:
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == EXIT_INPUT, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == f"optiond {command}: cannot write {path}: {os.strerror(errno.ENOSPC)}", lines
    return out


# ---------------------------------------------------------------------------- the helper

def test_text_and_bytes_are_written_whole(tmp_path):
    p = tmp_path / "a.txt"
    files.write_atomic(p, "é\n")
    assert p.read_bytes() == "é\n".encode()
    files.write_atomic(p, b"\x00\xff")
    assert p.read_bytes() == b"\x00\xff"
    assert files.write_with(p, lambda f: f.write("x,y\r\n"), newline="") == 5
    assert p.read_bytes() == b"x,y\r\n"
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]


def test_a_failed_write_keeps_the_previous_file_and_no_temporary(tmp_path, full_disk):
    p = previous_file(tmp_path / "out.csv")
    opened = full_disk(1000)
    with pytest.raises(files.WriteError) as info:
        files.write_with(p, lambda f: f.write("1234567890" * 10_000))
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(p)
    assert str(info.value) == f"cannot write {p}: {os.strerror(errno.ENOSPC)}"
    assert len(opened) == 1 and not opened[0].exists()  # the 1,000 bytes written went with it
    assert p.read_bytes() == PREVIOUS
    assert os.listdir(tmp_path) == ["out.csv"]


def test_the_writers_own_error_removes_the_temporary_and_passes_through(tmp_path):
    p = previous_file(tmp_path / "s.json")
    with pytest.raises(ValueError, match="Out of range float"):
        files.write_with(p, lambda f: (f.write('{"a": '), json.dump(float("nan"), f, allow_nan=False)))
    assert p.read_bytes() == PREVIOUS and os.listdir(tmp_path) == ["s.json"]


#: a process whose files may not grow beyond 4 KiB writes 100,000 bytes over PREVIOUS
RLIMIT_SCRIPT = """
import errno, resource, signal, sys
from optiond import files
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    files.write_atomic(sys.argv[1], "0123456789" * 10_000)
except files.WriteError as e:
    print(errno.errorcode[e.errno], e.filename)
"""


@pytest.mark.skipif(os.name != "posix", reason="POSIX file-size limit")
def test_a_real_write_failure_at_flush(tmp_path):
    """The kernel refuses the bytes beyond a file-size limit (EFBIG, as ENOSPC on a full disk);
    here the failure comes from the buffered flush, not from a write call. In a child process:
    the limit holds for every file of the process."""
    import subprocess
    import sys

    p = previous_file(tmp_path / "big.csv")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(files.__file__).parents[1]),
                                                                      os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-c", RLIMIT_SCRIPT, str(p)], capture_output=True, text=True, env=env,
                         timeout=60)
    assert run.returncode == 0 and run.stdout.split() == ["EFBIG", str(p)], run.stdout + run.stderr
    assert p.read_bytes() == PREVIOUS and os.listdir(tmp_path) == ["big.csv"]


def test_missing_directory_and_directory_target(tmp_path):
    with pytest.raises(files.WriteError) as info:
        files.write_atomic(tmp_path / "nowhere" / "x.csv", "x")
    assert info.value.errno == errno.ENOENT and info.value.filename == str(tmp_path / "nowhere" / "x.csv")
    (tmp_path / "d").mkdir()
    with pytest.raises(files.WriteError):
        files.write_atomic(tmp_path / "d", "x")
    assert os.listdir(tmp_path) == ["d"] and os.listdir(tmp_path / "d") == []


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes, links and devices")
def test_modes_links_and_streams(tmp_path):
    old = os.umask(0o022)
    try:
        new = tmp_path / "new.csv"
        files.write_atomic(new, "x")
        assert stat.S_IMODE(new.stat().st_mode) == 0o644  # as open() makes it
        kept = tmp_path / "kept.csv"
        kept.write_text("old")
        kept.chmod(0o640)
        files.write_atomic(kept, "new")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "new"
        os.umask(0)
        private = tmp_path / "key.json"
        files.write_atomic(private, "k", perms=0o600)
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    link = tmp_path / "link.csv"
    link.symlink_to(kept)
    files.write_atomic(link, "via link")
    assert link.is_symlink() and kept.read_text() == "via link"
    files.write_atomic("/dev/null", "streamed")  # a device is written in place, not replaced
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


# ---------------------------------------------------------------------------- the CLI

@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("book") / "book.csv"
    rows = [dict(kind=k, style="european", spot=100.0, strike=float(s), expiry=1.0, rate=0.05, volatility=0.2)
            for k in ("call", "put") for s in range(60, 141)]
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> Path:
    """SPX's two last expiries (136 European contracts: closed forms, a quick surface fit)."""
    df = pd.read_csv(DATA / "spx_chain_2025-10-01.csv")
    p = tmp_path_factory.mktemp("chain") / "spx.csv"
    df[df["expiry"].isin(sorted(df["expiry"].unique())[-2:])].to_csv(p, index=False)
    return p


def test_price_output_on_a_full_disk(tmp_path, capsys, book, full_disk):
    out = previous_file(tmp_path / "priced.csv")
    opened = full_disk(4096)
    rc = cli_main(["price", str(book), "--no-daemon", "-o", str(out)])
    one_line(capsys, rc, "price", out)
    assert out.read_bytes() == PREVIOUS
    assert len(opened) == 1 and os.listdir(tmp_path) == ["priced.csv"]


def test_price_output_whole_and_to_standard_output(tmp_path, capsys, book, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = previous_file(tmp_path / "priced.csv")
    assert cli_main(["price", str(book), "--no-daemon", "-o", str(out)]) == 0
    whole = pd.read_csv(out)
    assert len(whole) == 162 and (whole["status"] == "ok").all()
    capsys.readouterr()
    assert cli_main(["price", str(book), "--no-daemon", "-o", "-"]) == 0
    streamed = capsys.readouterr().out
    assert streamed.encode() == out.read_bytes().replace(b"\r\n", b"\n")
    assert sorted(os.listdir(tmp_path)) == ["priced.csv"]  # no file named '-'


def test_chain_output_on_a_full_disk(tmp_path, capsys, chain, full_disk):
    out = previous_file(tmp_path / "spx.out.csv")
    fwd = previous_file(tmp_path / "spx.out.forwards.csv")
    opened = full_disk(4096, ".out.csv")  # 4 KiB of the ~80 KB CSV, then the disk is full
    rc = cli_main(["chain", str(chain), "--no-daemon", "-o", str(out)])
    one_line(capsys, rc, "chain", out)
    assert out.read_bytes() == PREVIOUS and fwd.read_bytes() == PREVIOUS
    assert len(opened) == 1 and sorted(os.listdir(tmp_path)) == ["spx.out.csv", "spx.out.forwards.csv"]


def test_chain_surface_json_on_a_full_disk(tmp_path, capsys, chain, full_disk):
    js = previous_file(tmp_path / "spx.json")
    opened = full_disk(1000, ".json")
    rc = cli_main(["chain", str(chain), "--no-daemon", "--surface", str(js)])
    one_line(capsys, rc, "chain", js)
    assert js.read_bytes() == PREVIOUS
    assert len(opened) == 1 and os.listdir(tmp_path) == ["spx.json"]


def test_chain_output_to_standard_output_moves_the_summary_to_stderr(tmp_path, capsys, chain, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli_main(["chain", str(chain), "--no-daemon", "-o", "-"])
    out, err = capsys.readouterr()
    assert rc == 0 and os.listdir(tmp_path) == [], err  # no file named '-' or '-.forwards.csv'
    assert out.startswith("underlying,quote_date,") and len(out.splitlines()) == 137
    assert "contracts: 136" in err and "wrote" not in err


def test_output_in_a_missing_directory_is_refused_before_pricing(tmp_path, capsys, book, chain, monkeypatch):
    import optiond.chain as chain_job
    import optiond.commands.pricing as commands

    def no_pricing(*a, **kw):
        raise AssertionError("priced before the output path was checked")

    monkeypatch.setattr(commands, "price_portfolio", no_pricing)
    monkeypatch.setattr(chain_job, "price_chain", no_pricing)
    for argv, flag in ((["price", str(book), "-o"], "--output"), (["chain", str(chain), "-o"], "--output"),
                       (["chain", str(chain), "-o", str(tmp_path / "o.csv"), "--forwards"], "--forwards")):
        rc = cli_main([*argv, str(tmp_path / "nowhere" / "x.csv"), "--no-daemon"])
        err = capsys.readouterr().err
        assert rc == EXIT_INPUT and err.count("\n") == 1 and err.startswith(f"optiond {argv[0]}: {flag} "), err
        assert "no directory" in err
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------- directories 0700

@pytest.fixture
def umask0():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_private_dir_makes_every_new_directory_0700_and_leaves_existing_ones(tmp_path, umask0):
    tmp_path.chmod(0o755)
    d = files.private_dir(tmp_path / "a" / "optiond" / "objects")
    assert d.is_dir() and [mode(tmp_path / p) for p in ("a", "a/optiond", "a/optiond/objects")] == [0o700] * 3
    assert mode(tmp_path) == 0o755  # existed: not ours to change
    files.private_dir(d)  # again: nothing to do
    (tmp_path / "f").write_text("x")
    with pytest.raises(OSError):
        files.private_dir(tmp_path / "f" / "sub")


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_the_daemons_directories_are_0700_under_umask_0(tmp_path, umask0, monkeypatch):
    from optiond.daemon import paths
    from optiond.daemon.logs import JsonLog
    from optiond.daemon.objects import ObjectStore
    from optiond.kernels.binomial import plan

    conn = tmp_path / "run" / "optiond" / "daemon.json"
    paths.write_connection_file(conn, {"key": "k"})
    assert mode(tmp_path / "run") == mode(conn.parent) == 0o700 and mode(conn) == 0o600

    log = JsonLog(tmp_path / "state" / "optiond" / "log")
    try:
        assert mode(tmp_path / "state") == mode(tmp_path / "state" / "optiond") == mode(log.path.parent) == 0o700
    finally:
        log.close()

    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    objects = paths.objects_dir()
    assert objects == tmp_path / "data" / "optiond" / "objects"
    store = ObjectStore()
    try:
        store.open(objects)
        assert [mode(p) for p in (objects.parent.parent, objects.parent, objects)] == [0o700] * 3
    finally:
        store.close()

    monkeypatch.delenv(plan.CALIBRATION_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    saved = plan.save_calibration(json.loads(json.dumps(plan.DEFAULTS)))
    try:
        assert saved == tmp_path / "cache" / "optiond" / "calibration.json"
        assert mode(tmp_path / "cache") == mode(saved.parent) == 0o700
    finally:
        plan.reset_cache()
