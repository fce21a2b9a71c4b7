"""installer/install.sh into a temporary prefix: the CLI works and prices, the systemd unit is
valid, and --uninstall leaves nothing behind."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from optiond.kernels.binomial_cpu import crr_price

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "installer" / "install.sh"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the shell installer is for Linux and macOS")


def snapshot(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")} if path.exists() else set()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("inst")
    home = base / "home"
    home.mkdir()
    dirs = dict(prefix=base / "prefix", bin=base / "bin", units=base / "units")
    env = dict(os.environ, HOME=str(home), PYTHON=sys.executable, PIP_DISABLE_PIP_VERSION_CHECK="1",
               XDG_RUNTIME_DIR=str(base / "run"), OPTIOND_CONNECTION_FILE=str(base / "run" / "optiond.json"))
    (base / "run").mkdir()
    cmd = ["bash", str(INSTALL), "--prefix", str(dirs["prefix"]), "--bin-dir", str(dirs["bin"]),
           "--unit-dir", str(dirs["units"]), "--no-gpu", "--source", str(ROOT)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(dirs, base=base, env=env, cmd=cmd, log=proc.stdout)


def test_cli_works_and_prices(installed):
    exe = installed["bin"] / "optiond"
    assert exe.is_symlink()
    ver = subprocess.run([str(exe), "--version"], capture_output=True, text=True, env=installed["env"], timeout=120)
    assert ver.returncode == 0 and ver.stdout.startswith("optiond ")
    book = installed["base"] / "book.csv"
    book.write_text("kind,style,spot,strike,expiry,rate,dividend_yield,volatility,method,steps\n"
                    "put,american,100,105,0.5,0.03,0.01,0.3,binomial,400\n")
    out = installed["base"] / "priced.csv"
    run = subprocess.run([str(exe), "price", str(book), "-o", str(out), "--no-daemon"], capture_output=True, text=True,
                         env=installed["env"], timeout=300)
    assert run.returncode == 0, run.stderr
    header, row = out.read_text().splitlines()
    price = float(dict(zip(header.split(","), row.split(",")))["price"])
    assert price == pytest.approx(crr_price("put", "american", 100, 105, 0.5, 0.03, 0.01, 0.3, 400), rel=1e-12)
    # the installer ended by asking the daemon's status (none is running here)
    assert "not running" in installed["log"] or "no daemon" in installed["log"].lower()


def test_unit_file_is_valid(installed):
    unit = installed["units"] / "optiond.service"
    text = unit.read_text()
    if shutil.which("systemd-analyze"):
        v = subprocess.run(["systemd-analyze", "verify", "--user", str(unit)], capture_output=True, text=True, timeout=60)
        assert "error" not in (v.stdout + v.stderr).lower() or v.returncode == 0, v.stdout + v.stderr
    cp = configparser.ConfigParser(strict=True, interpolation=None)
    cp.optionxform = str
    cp.read_string(text)
    assert set(cp.sections()) == {"Unit", "Service", "Install"}
    svc = cp["Service"]
    assert svc["Type"] == "notify" and svc["Restart"] == "on-failure" and int(svc["WatchdogSec"]) > 0
    exe = svc["ExecStart"].split()[0]
    assert Path(exe).is_file() and os.access(exe, os.X_OK) and svc["ExecStart"].endswith(" serve")
    assert cp["Install"]["WantedBy"] == "default.target"


def test_uninstall_leaves_nothing(installed):
    before = {k: snapshot(installed[k]) for k in ("prefix", "bin", "units")}
    assert before["prefix"] and "optiond" in before["bin"] and "optiond.service" in before["units"]
    proc = subprocess.run(installed["cmd"] + ["--uninstall"], env=installed["env"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not installed["prefix"].exists()
    assert snapshot(installed["bin"]) == set() and snapshot(installed["units"]) == set()


def test_windows_registered_module_exposes_exactly_the_function_table():
    import importlib
    import re

    from optiond.addin import table

    ps1 = (ROOT / "installer" / "install.ps1").read_text()
    # the installer registers this module and imports these VBA files
    assert f'"UDF MODULES" "{table.UDF_MODULE}"' in ps1
    assert table.VBA_UDF_FILE.name in ps1 and table.VBA_REGISTER_FILE.name in ps1
    mod = importlib.import_module(table.UDF_MODULE)  # imports cleanly
    documented = {f.name for f in table.FUNCTIONS}
    exposed = {n for n in dir(mod) if n.isupper() and callable(getattr(mod, n)) and not n.startswith("_")}
    assert exposed == documented
    vba = table.VBA_UDF_FILE.read_text()
    assert set(re.findall(r"^Function (\w+)\(", vba, re.M)) == documented
    register = table.VBA_REGISTER_FILE.read_text()
    for f in table.FUNCTIONS:
        fn = getattr(mod, f.name)
        assert fn.__doc__ == f.description
        assert [a.name for a in f.args] == list(__import__("inspect").signature(fn).parameters)
        # every argument has its wizard text, registered with Application.MacroOptions
        block = register.split(f"!{f.name}\"", 1)[1].split("Application.MacroOptions", 1)[0]
        for a in f.args:
            assert a.doc and a.doc.replace('"', '""') in block, (f.name, a.name)
