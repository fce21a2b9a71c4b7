"""installer/install.sh into a temporary prefix: the CLI works and prices, the systemd unit is
valid, the panel (installed by default) starts offscreen from the installed environment, its
menu entry is a valid desktop entry, the installer reports the X11 libraries Qt lacks, and
--uninstall leaves nothing behind. The install comes from the local checkout and the pip
configuration's own package sources (no network needed where those hold the dependencies)."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from optiond.kernels.binomial.cpu import crr_price

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "installer" / "install.sh"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the shell installer is for Linux and macOS")
#: the tests on the installed copy share one install into a fresh environment, PySide6 included:
#: 40-110 s on two cores
slow_install = pytest.mark.slow


def snapshot(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")} if path.exists() else set()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("inst")
    home = base / "home"
    home.mkdir()
    dirs = dict(prefix=base / "prefix", bin=base / "bin", units=base / "units", data=base / "data",
                config=base / "config")
    env = dict(os.environ, HOME=str(home), PYTHON=sys.executable, PIP_DISABLE_PIP_VERSION_CHECK="1",
               XDG_RUNTIME_DIR=str(base / "run"), OPTIOND_CONNECTION_FILE=str(base / "run" / "optiond.json"),
               XDG_DATA_HOME=str(dirs["data"]), XDG_CONFIG_HOME=str(dirs["config"]))
    env.pop("PYTHONPATH", None)  # the installed product runs its own copy, not a checkout on the path
    (base / "run").mkdir()
    # --no-system-packages: a test run as root must not apt-get the X11 libraries; it prints the command
    cmd = ["bash", str(INSTALL), "--prefix", str(dirs["prefix"]), "--bin-dir", str(dirs["bin"]),
           "--unit-dir", str(dirs["units"]), "--no-gpu", "--no-system-packages", "--source", str(ROOT),
           "--warmup-only", "black-scholes"]  # the installer's warm-up, on its cheapest target
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(dirs, base=base, env=env, cmd=cmd, log=proc.stdout)


def panel_env(installed, **extra) -> dict:
    env = {k: v for k, v in installed["env"].items() if not k.startswith(("QT_", "WAYLAND", "XDG_SESSION"))}
    env.pop("DISPLAY", None)
    return dict(env, **extra)


@slow_install
def test_panel_starts_offscreen_from_the_installed_venv(installed):
    """The installed ``optiond panel`` builds its window offscreen, closes by itself and saves
    its settings on the way out (the tab it was opened on)."""
    exe = installed["bin"] / "optiond"
    assert (installed["bin"] / "optiond-panel").is_symlink()
    env = panel_env(installed, QT_QPA_PLATFORM="offscreen")
    run = subprocess.run([str(exe), "panel", "--tab", "timings", "--quit-after", "1"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    conf = installed["config"] / "optiond" / "panel.conf"
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(conf)
    assert cp.get("window", "tab") == "1", conf.read_text() if conf.exists() else "no settings written"


def desktop_entry_problems(text: str) -> list[str]:
    """Structural checks of a desktop entry (the Desktop Entry Specification's required keys)."""
    cp = configparser.ConfigParser(strict=True, interpolation=None)
    cp.optionxform = str
    cp.read_string(text)
    problems = []
    if cp.sections() != ["Desktop Entry"]:
        problems.append(f"groups {cp.sections()}")
    entry = cp["Desktop Entry"] if cp.has_section("Desktop Entry") else {}
    known = {"Type", "Version", "Name", "GenericName", "NoDisplay", "Comment", "Icon", "Hidden", "OnlyShowIn",
             "NotShowIn", "DBusActivatable", "TryExec", "Exec", "Path", "Terminal", "Actions", "MimeType",
             "Categories", "Implements", "Keywords", "StartupNotify", "StartupWMClass", "URL", "PrefersNonDefaultGPU",
             "SingleMainWindow"}
    problems += [f"unknown key {k}" for k in entry if k not in known and not k.startswith("X-")]
    if entry.get("Type") != "Application":
        problems.append("Type is not Application")
    problems += [f"no {k}" for k in ("Name", "Exec") if not entry.get(k)]
    for k in ("Terminal", "StartupNotify"):
        if k in entry and entry[k] not in ("true", "false"):
            problems.append(f"{k} not a boolean")
    return problems


@slow_install
def test_desktop_entry_is_valid_and_starts_the_installed_panel(installed):
    entry = installed["data"] / "applications" / "optiond-panel.desktop"
    assert entry.is_file(), installed["log"]
    text = entry.read_text()
    assert desktop_entry_problems(text) == []
    if shutil.which("desktop-file-validate"):
        v = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True, timeout=60)
        assert v.returncode == 0 and not v.stdout.strip(), v.stdout + v.stderr
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str
    cp.read_string(text)
    exe = shlex.split(cp["Desktop Entry"]["Exec"])  # the temporary prefix holds no characters to escape
    assert exe == [str(installed["prefix"] / "venv" / "bin" / "optiond-panel")]
    assert os.access(exe[0], os.X_OK)


@slow_install
def test_installer_names_the_missing_x11_libraries(installed):
    """The installer's verdict agrees with the installed panel's own check of Qt's xcb plugin."""
    py = installed["prefix"] / "venv" / "bin" / "python"
    libs = subprocess.run([str(py), "-m", "optiond.gui.desktop", "libs"], capture_output=True, text=True,
                          env=installed["env"], timeout=120)
    assert libs.returncode in (0, 1, 2), libs.stderr
    if libs.returncode == 0:
        assert "Qt xcb libraries: all found" in installed["log"]
    elif libs.returncode == 1 and libs.stdout.strip():
        assert f"install them with: {libs.stdout.strip()}" in installed["log"]
        assert "apt-get install -y " in libs.stdout or "dnf install -y " in libs.stdout
    else:  # nothing to tell (no ldd): the installer must not claim the libraries are there
        assert "all found" not in installed["log"]


@slow_install
def test_panel_says_which_x11_library_is_missing(installed, tmp_path):
    """On X11 without libxcb-cursor (an ``ldd`` that reports it not found), the installed
    ``optiond panel`` prints one line naming it and the command to install it, and exits 2
    instead of letting Qt abort."""
    real = shutil.which("ldd")
    if real is None:
        pytest.skip("no ldd on this system: the check cannot run")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ldd").write_text(f"#!/bin/sh\n{real} \"$@\" | grep -v 'libxcb-cursor.so.0'\n"
                              "printf '\\tlibxcb-cursor.so.0 => not found\\n'\n")
    (fake / "ldd").chmod(0o755)
    env = panel_env(installed, DISPLAY=":99", PATH=f"{fake}{os.pathsep}{installed['env']['PATH']}")
    run = subprocess.run([str(installed["bin"] / "optiond"), "panel"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith("optiond panel: ") and "libxcb-cursor.so.0" in lines[0]
    if shutil.which("apt-get"):  # the package named in the command, beside any other missing here
        assert re.search(r"install with: (sudo )?apt-get install -y [^;]*\blibxcb-cursor0\b", lines[0]), lines[0]


@slow_install
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
    # the tree was not warmed (--warmup-only black-scholes): its first run says so, once
    assert run.stderr.count("compiling the pricing kernels once") == 1, run.stderr
    assert "optiond warmup: 1 target in" in installed["log"]
    header, row = out.read_text().splitlines()
    price = float(dict(zip(header.split(","), row.split(",")))["price"])
    assert price == pytest.approx(crr_price("put", "american", 100, 105, 0.5, 0.03, 0.01, 0.3, 400), rel=1e-12)
    # the installer ended by asking the daemon's status (none is running here)
    assert "not running" in installed["log"] or "no daemon" in installed["log"].lower()


@slow_install
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


@slow_install
def test_uninstall_leaves_nothing(installed):
    before = {k: snapshot(installed[k]) for k in ("prefix", "bin", "units", "data")}
    assert before["prefix"] and {"optiond", "optiond-panel"} <= before["bin"] and "optiond.service" in before["units"]
    assert "applications/optiond-panel.desktop" in before["data"]
    proc = subprocess.run(installed["cmd"] + ["--uninstall"], env=installed["env"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not installed["prefix"].exists()
    assert snapshot(installed["bin"]) == set() and snapshot(installed["units"]) == set()
    assert not (installed["data"] / "applications" / "optiond-panel.desktop").exists()


def test_windows_registered_module_exposes_exactly_the_function_table():
    import importlib
    import re

    from optiond.addin import generate, table

    ps1 = (ROOT / "installer" / "install.ps1").read_text()
    # the installer registers this module and imports these VBA files
    assert f'"UDF MODULES" "{table.UDF_MODULE}"' in ps1
    assert generate.VBA_UDF_FILE.name in ps1 and generate.VBA_REGISTER_FILE.name in ps1
    mod = importlib.import_module(table.UDF_MODULE)  # imports cleanly
    documented = {f.name for f in table.FUNCTIONS}
    exposed = {n for n in dir(mod) if n.isupper() and callable(getattr(mod, n)) and not n.startswith("_")}
    assert exposed == documented
    vba = generate.VBA_UDF_FILE.read_text()
    assert set(re.findall(r"^Function (\w+)\(", vba, re.M)) == documented
    register = generate.VBA_REGISTER_FILE.read_text()
    for f in table.FUNCTIONS:
        fn = getattr(mod, f.name)
        assert fn.__doc__ == f.description
        assert [a.name for a in f.args] == list(__import__("inspect").signature(fn).parameters)
        # every argument has its wizard text, registered with Application.MacroOptions
        block = register.split(f"!{f.name}\"", 1)[1].split("Application.MacroOptions", 1)[0]
        for a in f.args:
            assert a.doc and a.doc.replace('"', '""') in block, (f.name, a.name)


def test_windows_installer_adds_the_panel_and_its_shortcut_and_removes_them():
    """install.ps1 (no PowerShell here: read as text): the gui extra unless -NoGui, a Start Menu
    shortcut to the venv's windowless optiond-panel.exe made with WScript.Shell, recorded in
    the manifest as a file, which -Uninstall deletes."""
    ps1 = (ROOT / "installer" / "install.ps1").read_text()
    assert re.search(r"\[switch\]\$NoGui", ps1)
    assert re.search(r'if \(-not \$NoGui\) \{ \$extras \+= "gui" \}', ps1)
    block = ps1.split("$shell.CreateShortcut($PanelShortcut)", 1)[1].split("\n}\n", 1)[0]
    assert 'TargetPath = Join-Path $Venv "Scripts\\optiond-panel.exe"' in block and "$lnk.Save()" in block
    assert 'Record "file" $PanelShortcut' in block
    assert '[Environment]::GetFolderPath("Programs")' in ps1.split("$PanelShortcut =", 1)[1].split("\n", 1)[0]
    uninstall = ps1.split("if ($Uninstall) {", 1)[1].split("\n}\n", 1)[0]
    assert re.search(r'"file"\s+\{ Remove-Item -Force -ErrorAction SilentlyContinue \$path \}', uninstall)
