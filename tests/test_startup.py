"""Start-up: the commands that price nothing load no numerical library, and ``optiond warmup``
compiles the kernels into numba's disk cache once, so a fresh process loads them instead.

Subprocesses, because what a command imports is only visible in a fresh interpreter; the
warm-up runs on its cheapest target (``--only black-scholes``) in a private
``NUMBA_CACHE_DIR`` (the whole list compiles for minutes)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from optiond import cli, engine
from optiond.kernels import warmup
from optiond.kernels.spectral.cpu import ACCURACY_NAMES

NUMERICAL = ("numpy", "numba", "pandas", "scipy", "matplotlib")

#: runs ``optiond`` once per argument list (the lists as JSON in argv[1]) in this interpreter,
#: then writes the numerical libraries in ``sys.modules`` as JSON to the file argv[2]
_WRAPPER = """
import json, sys
from optiond.cli import main
runs = json.loads(sys.argv[1])
codes = [main(argv) for argv in runs]
loaded = sorted(m for m in %r if m in sys.modules)
open(sys.argv[2], "w").write(json.dumps({"codes": codes, "loaded": loaded}))
""" % (NUMERICAL,)


def _env(tmp_path: Path, **extra: str) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
            "OPTIOND_CONNECTION_FILE": str(tmp_path / "no-daemon.json"), **extra}


def test_help_version_status_stop_load_no_numerical_library(tmp_path):
    conn = str(tmp_path / "no-daemon.json")
    runs = [["--help"], ["--version"], ["status", "--connection-file", conn], ["status", "--json"],
            ["stop", "--connection-file", conn, "--timeout", "0.1"], ["status", "--help"], ["stop", "--help"],
            ["serve", "--help"], ["warmup", "--help"]]
    report = tmp_path / "modules.json"
    r = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(runs), str(report)], env=_env(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(report.read_text())
    # help and version exit 0; status and stop with no daemon exit 1 (down), with one line each
    assert got["codes"] == [0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert "not running" in r.stderr and "Traceback" not in r.stderr
    assert got["loaded"] == []


def test_no_command_help_loads_a_pricing_engine(tmp_path):
    """Each command's ``--help`` registers its own module only, and no registration imports
    the pricing engines (numba) or scipy (the defaults it shows live outside the kernels)."""
    runs = [[name, "--help"] for commands in cli.COMMANDS.values() for name in commands]
    report = tmp_path / "modules.json"
    r = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(runs), str(report)], env=_env(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(report.read_text())
    assert got["codes"] == [0] * len(runs)
    assert not {"numba", "scipy", "matplotlib"} & set(got["loaded"]), got["loaded"]


def test_command_table_says_what_the_modules_register():
    """``optiond --help`` lists the commands from :data:`optiond.cli.COMMANDS` without importing
    their modules: each module registers exactly the commands, with the help, the table gives."""
    for module, commands in cli.COMMANDS.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        __import__(module, fromlist=["register"]).register(sub)
        helps = {a.dest: a.help for a in sub._choices_actions}
        assert helps == commands, module


def test_a_command_registers_only_its_module(monkeypatch):
    registered = []
    real = cli.importlib.import_module

    def spy(name):
        registered.append(name)
        return real(name)

    monkeypatch.setattr(cli.importlib, "import_module", spy)
    parser = cli.build_parser(cli.command_of(["-v", "status", "--json"]))
    assert registered == ["optiond.daemon.commands"]
    assert parser.parse_args(["status", "--json"]).json is True
    registered.clear()
    cli.build_parser("")
    assert registered == []


def test_warmup_list_covers_every_method_and_accuracy():
    names = [t.name for t in warmup.TARGETS]
    for method in engine.FRONT_DOORS:
        assert any(n == method or n.startswith(method + "-") for n in names), method
    for accuracy in ACCURACY_NAMES:
        assert f"spectral-{accuracy}" in names
    assert {"dividends", "surface", "gpu"} <= set(names)
    assert [t.name for t in warmup.select(["spectral"])] == [f"spectral-{a}" for a in ACCURACY_NAMES]
    with pytest.raises(ValueError, match="no warm-up target nope"):
        warmup.select(["nope"])


def test_every_cached_kernel_has_cache_files_of_its_own():
    """numba names a kernel's disk-cache files after the Python function, and an entry does not
    record ``parallel=``: the threaded and serial loops of the tree (one body each) must not
    share files, or a fresh process runs whichever was saved last for both."""
    import importlib

    from optiond.kernels.binomial import cpu

    for name in ("optiond.kernels.black_scholes", "optiond.kernels.spectral.cpu", "optiond.kernels.heston.cpu",
                 "optiond.kernels.mlmc.cpu", "optiond.kernels.adi", "optiond.surface.correction"):
        importlib.import_module(name)
    files: dict[str, str] = {}
    for d in warmup._dispatchers():
        index = d._cache._cache_file._index_name
        assert files.setdefault(index, d.__qualname__) == d.__qualname__, (index, files[index], d.__qualname__)
    assert len({files.get(cpu._batch_parallel._cache._cache_file._index_name),
                files.get(cpu._batch_serial._cache._cache_file._index_name)}) == 2


def test_warmup_refuses_an_unknown_target_in_one_line(capsys):
    assert cli.main(["warmup", "--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("optiond warmup: no warm-up target nope") and err.count("\n") == 1


def test_warmup_fills_the_cache_and_a_fresh_process_loads_it(tmp_path):
    """A cold cache: the first pricing process says once that it compiles; ``optiond warmup
    --only black-scholes`` compiles the rest; a second warm-up, a fresh process, compiles nothing
    and loads every kernel from the disk cache (numba's dispatcher statistics)."""
    env = _env(tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    env.pop("OPTIOND_QUIET_COMPILE", None)
    first = subprocess.run(
        [sys.executable, "-c", "from optiond import engine; from optiond.models import Method; "
         "r = engine.price_table({'kind': ['put', 'call'], 'style': 'european', 'spot': 100.0, 'strike': 95.0, "
         "'expiry': 0.5, 'rate': 0.03, 'dividend_yield': 0.0, 'volatility': 0.2}, Method(name='black-scholes')); "
         "print(r.status.tolist())"], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(warmup.COMPILING_LINE) == 1
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-m", "optiond.cli", "warmup", "--only", "black-scholes", "--json"],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert warmup.COMPILING_LINE not in r.stderr  # the command reports for itself
        runs.append(json.loads(r.stdout))
    cold, warm = runs
    assert [t["name"] for t in cold["targets"]] == ["black-scholes"] and cold["targets"][0]["error"] is None
    assert cold["compiled"] + cold["cached"] > 0
    # (a kernel compiled only as a callee of another is loaded inside its caller's cached code)
    assert warm["compiled"] == 0 and 0 < warm["cached"] <= cold["compiled"] + cold["cached"]
    assert all(str(tmp_path / "numba-cache") in d for d in warm["cache_dirs"])
    text = subprocess.run([sys.executable, "-m", "optiond.cli", "warmup", "--only", "black-scholes"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and "optiond warmup: 1 target in" in text.stdout
    assert "everything was cached already" in text.stdout, text.stdout


def test_serve_refuses_an_unknown_warmup_target_in_one_line(tmp_path, capsys):
    code = cli.main(["serve", "--warmup-only", "binomial,nope", "--connection-file", str(tmp_path / "d.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("optiond serve: --warmup-only: no warm-up target nope") and err.count("\n") == 1
    assert not (tmp_path / "d.json").exists()


@pytest.mark.gpu
def test_gpu_warmup_target_loads_every_gpu_method():
    """On a GPU host the ``gpu`` target prices (and inverts) a batch on the GPU for each method
    that has a GPU path, without error."""
    from optiond.kernels import gpu as gpus

    if not gpus.available():
        pytest.skip("no GPU")
    (outcome,) = warmup.warm(warmup.select(["gpu"]))
    assert outcome.error is None, outcome.error
