"""The panel's start-up check of the X11 (xcb) libraries Qt needs (:mod:`optiond.gui.desktop`)
and its freedesktop menu entry: when Qt would use xcb, what the dynamic linker lacks, the
install command, and ``optiond panel``'s one-line refusal before Qt is loaded."""

from __future__ import annotations

import configparser
import ctypes
import re
import shutil
import sys

import pytest

from optiond import cli
from optiond.gui import app, desktop

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb check is for Linux")


@pytest.mark.parametrize("env,qt_args,want", [
    ({"DISPLAY": ":0"}, (), True),                                     # Qt's default on X11
    ({}, (), False),                                                   # no display: Qt cannot use xcb at all
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, (), False),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, (), True),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb:nograb"}, (), True),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland;xcb"}, (), False),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": ""}, (), True),
    ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, (), False),
    ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland"}, (), True),      # no Wayland display to talk to
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, ("-platform", "offscreen"), False),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, ("-platform", "xcb"), True),
])
def test_uses_xcb(env, qt_args, want):
    assert desktop.uses_xcb(env, qt_args) is want


def test_install_command_per_package_manager(monkeypatch):
    tools: set[str] = set()
    monkeypatch.setattr(desktop.shutil, "which", lambda name: f"/usr/bin/{name}" if name in tools else None)
    missing = ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libglib-2.0.so.0", "libgthread-2.0.so.0"]
    assert desktop.install_command(missing, as_root=False) is None  # neither apt-get nor dnf
    tools.add("dnf")
    bits = "(64bit)" if sys.maxsize > 2**32 else ""
    assert desktop.install_command(missing[:2], as_root=True) == \
        f"dnf install -y 'libxcb-cursor.so.0(){bits}' 'libxcb-icccm.so.4(){bits}'"
    tools.add("apt-get")
    assert desktop.install_command(missing, as_root=False) == \
        "sudo apt-get install -y libxcb-cursor0 libxcb-icccm4 libglib2.0-0"  # one package named once
    assert desktop.install_command(missing[:1], as_root=True) == "apt-get install -y libxcb-cursor0"
    assert desktop.install_command(["libsomething-else.so.3"], as_root=True) is None  # no package known
    line = desktop.hint(["libsomething-else.so.3"])
    assert "libsomething-else.so.3" in line and "\n" not in line


@linux_only
def test_unresolved_agrees_with_the_dynamic_loader():
    """What the check reports missing from Qt's xcb plugin is exactly what ``dlopen`` cannot
    load, among the system libraries the plugin links (checked library by library)."""
    pytest.importorskip("PySide6.QtCore", reason="PySide6 (the gui extra) is not installed")
    plugin = desktop.xcb_plugin()
    if plugin is None or shutil.which("ldd") is None:
        pytest.skip("no xcb plugin or no ldd here")
    missing = desktop.unresolved(plugin)
    assert missing is not None
    ldd = desktop.subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=60).stdout
    named = set(re.findall(r"^\s*(\S+) =>", ldd, re.M))
    linked = [lib for lib in desktop.DEBIAN_PACKAGES if lib in named]
    assert "libxcb.so.1" in linked and set(missing) <= set(linked)

    def loads(lib: str) -> bool:
        try:
            ctypes.CDLL(lib)
        except OSError:
            return False
        return True

    assert [lib for lib in linked if not loads(lib)] == [lib for lib in linked if lib in missing]


def test_panel_refuses_in_one_line_before_qt_starts(monkeypatch, capsys):
    """A system without libxcb-cursor, on X11: ``optiond panel`` exits 2 with one line naming
    the library and how to install it; Qt is never started."""
    pytest.importorskip("PySide6", reason="PySide6 (the gui extra) is not installed")
    for var in ("QT_QPA_PLATFORM", "XDG_SESSION_TYPE", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr(desktop.sys, "platform", "linux")
    monkeypatch.setattr(desktop, "xcb_plugin", lambda: desktop.Path("/plugins/platforms/libqxcb.so"))
    monkeypatch.setattr(desktop, "unresolved", lambda plugin: ["libxcb-cursor.so.0"])

    def no_qt(*a, **k):
        raise AssertionError("Qt was started")

    monkeypatch.setattr(app, "run", no_qt)
    assert cli.main(["panel"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.rstrip("\n") == "optiond panel: " + desktop.hint(["libxcb-cursor.so.0"])
    assert "libxcb-cursor.so.0" in err
    # offscreen needs no xcb library: the same system goes on to start Qt
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    with pytest.raises(AssertionError, match="Qt was started"):
        cli.main(["panel"])


def exec_argv(value: str) -> list[str]:
    """Undo a desktop entry's Exec encoding (Desktop Entry Specification, "The Exec key"): the
    string escapes (a doubled backslash), field codes' ``%%``, then the argument quoting (words
    split on spaces; in double quotes a backslash escapes a double quote, backquote, dollar
    sign or backslash)."""
    value = value.replace("\\\\", "\\").replace("%%", "%")
    args = []
    for quoted, plain in re.findall(r'"((?:[^"\\]|\\.)*)"|(\S+)', value):
        args.append(re.sub(r'\\(["`$\\])', r"\1", quoted) if quoted else plain)
    return args


@pytest.mark.parametrize("path", ["/opt/optiond/venv/bin/optiond-panel", "/home/a trader/optiond $1/bin/optiond-panel",
                                  "/x/50%\\y\"z/optiond-panel"])
def test_desktop_entry_exec_quoting(path, tmp_path):
    """The entry's Exec names the program as one argument, whatever its path holds (the
    specification's quoting and escaping, undone here by configparser then exec_argv)."""
    text = desktop.desktop_entry(path)
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str
    cp.read_string(text)
    entry = cp["Desktop Entry"]
    assert entry["Type"] == "Application" and entry["Name"]
    assert exec_argv(entry["Exec"]) == [path]
    if shutil.which("desktop-file-validate"):
        f = tmp_path / "optiond-panel.desktop"
        f.write_text(text)
        v = desktop.subprocess.run(["desktop-file-validate", str(f)], capture_output=True, text=True, timeout=60)
        assert v.returncode == 0 and not v.stdout.strip(), v.stdout
