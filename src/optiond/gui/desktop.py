"""The panel on a Linux desktop: the system libraries Qt's xcb platform plugin needs, and the
freedesktop menu entry the installer writes.

Qt (PySide6's wheels) brings its own Qt libraries but not the X11/xcb client libraries of the
system; without one of them Qt aborts with a core dump at start-up ("xcb-cursor0 or
libxcb-cursor0 is needed to load the Qt xcb platform plugin"). :func:`check` asks the dynamic
linker (``ldd`` on the installed ``libqxcb.so``) which of the plugin's libraries it cannot find,
so ``optiond panel`` can say in one line what to install instead, and the installer can install
it. The plugin's own list is the authority: what PySide6 6.x links today is
:data:`DEBIAN_PACKAGES`' keys (``libxcb-xinerama`` is no longer among them).

Nothing here imports Qt's GUI modules: only ``PySide6.QtCore``, to find the plugin directory.

``python -m optiond.gui.desktop libs`` prints the command that installs what is missing (empty
when nothing is; exit 1 when something is missing, 2 when it cannot tell);
``python -m optiond.gui.desktop entry --exec PATH`` prints the ``.desktop`` file.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: the shared libraries Qt 6's xcb platform plugin (and its ``libQt6XcbQpa``) loads from the
#: system, and the Debian/Ubuntu package of each (from ``ldd`` on PySide6 6.12's ``libqxcb.so``)
DEBIAN_PACKAGES: dict[str, str] = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",  # linked by older Qt 6 releases
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$", re.M)


def uses_xcb(environ: Mapping[str, str] | None = None, qt_args: Sequence[str] = ()) -> bool:
    """Whether Qt would start on the xcb (X11) platform: ``-platform`` in ``qt_args``, else
    ``QT_QPA_PLATFORM``, names xcb first, or neither is set and the session is not a Wayland
    one; and a ``DISPLAY`` is set (without one Qt cannot use xcb at all, and says so itself).
    ``offscreen``, ``wayland``, ``vnc``... need none of the xcb libraries."""
    env = os.environ if environ is None else environ
    platform = None
    args = list(qt_args)
    for i, a in enumerate(args):
        if a in ("-platform", "--platform") and i + 1 < len(args):
            platform = args[i + 1]
    if platform is None:
        platform = env.get("QT_QPA_PLATFORM") or None
    if not env.get("DISPLAY"):
        return False
    if platform is None:  # Qt's own choice: Wayland in a Wayland session, else xcb
        return not (env.get("XDG_SESSION_TYPE") == "wayland" and env.get("WAYLAND_DISPLAY"))
    first = platform.split(";")[0].split(":")[0].strip()
    return first == "xcb"


def xcb_plugin() -> Path | None:
    """The xcb platform plugin of the installed PySide6 (None if PySide6 or the plugin is absent)."""
    try:
        from PySide6.QtCore import QLibraryInfo
    except ImportError:
        return None
    plugin = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def unresolved(plugin: Path) -> list[str] | None:
    """The libraries ``plugin`` needs that the dynamic linker cannot find, as ``ldd`` reports
    them (``LD_LIBRARY_PATH``, the linker cache and the plugin's run path all count), in
    ``ldd``'s order; None when ``ldd`` is not there or fails (nothing can be told)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        out = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    missing = list(dict.fromkeys(_NOT_FOUND.findall(out.stdout)))
    if out.returncode != 0 and not missing:
        return None
    return missing


def install_command(missing: Sequence[str], *, as_root: bool | None = None) -> str | None:
    """The command that installs the packages providing the ``missing`` libraries: apt-get with
    Debian package names, or dnf with the libraries' own RPM provides (``libfoo.so.1()(64bit)``);
    ``sudo`` first unless running as root; None without apt-get or dnf, or when a library has
    no known Debian package."""
    if as_root is None:
        as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    sudo = "" if as_root else "sudo "
    if shutil.which("apt-get"):
        if any(lib not in DEBIAN_PACKAGES for lib in missing):
            return None
        packages = dict.fromkeys(DEBIAN_PACKAGES[lib] for lib in missing)
        return f"{sudo}apt-get install -y {' '.join(packages)}"
    if shutil.which("dnf"):
        bits = "(64bit)" if sys.maxsize > 2**32 else ""
        return sudo + "dnf install -y " + " ".join(f"'{lib}(){bits}'" for lib in missing)
    return None


def hint(missing: Sequence[str]) -> str:
    """One line: what is missing and how to install it."""
    cmd = install_command(missing)
    how = f"install with: {cmd}" if cmd else "install the system packages that provide them"
    return f"the panel's Qt xcb platform plugin needs {', '.join(missing)}, not found on this system; {how}"


def check(environ: Mapping[str, str] | None = None, qt_args: Sequence[str] = ()) -> str | None:
    """The one-line hint when Qt would start on xcb and the xcb plugin's libraries are not all
    found; None when they are, when Qt would not use xcb, or when it cannot be told."""
    if not sys.platform.startswith("linux") or not uses_xcb(environ, qt_args):
        return None
    plugin = xcb_plugin()
    missing = unresolved(plugin) if plugin is not None else None
    return hint(missing) if missing else None


def _exec_arg(arg: str) -> str:
    """``arg`` as one argument of a desktop entry's ``Exec`` key (the Desktop Entry
    Specification's quoting, then its string escaping)."""
    if re.search(r"[\s\"'\\><~|&;$*?#()`]", arg):
        arg = '"' + re.sub(r'(["`$\\])', r"\\\1", arg) + '"'
    return arg.replace("\\", "\\\\").replace("%", "%%")


def desktop_entry(executable: str | os.PathLike) -> str:
    """The freedesktop ``.desktop`` file that starts the panel with ``executable``
    (``optiond-panel`` of the installed environment)."""
    exe = str(executable)
    return "\n".join([
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.4",
        "Name=optiond panel",
        "GenericName=Option pricing panel",
        "Comment=optiond daemon status, request timings and batch pricing of option chains",
        f"Exec={_exec_arg(exe)}",
        "TryExec=" + exe.replace("\\", "\\\\"),  # a plain path, not an Exec argument
        "Icon=accessories-calculator",
        "Terminal=false",
        "Categories=Office;Finance;",
        "Keywords=options;pricing;GPU;daemon;",
        "StartupNotify=true",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m optiond.gui.desktop", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("libs", help="print the command that installs the xcb libraries the panel lacks (empty when "
                   "none is missing); exit 1 when some are missing, 2 when it cannot be told")
    e = sub.add_parser("entry", help="print the .desktop file")
    e.add_argument("--exec", required=True, dest="executable", help="the optiond-panel to start")
    args = p.parse_args(argv)
    if args.what == "entry":
        sys.stdout.write(desktop_entry(args.executable))
        return 0
    plugin = xcb_plugin()
    missing = unresolved(plugin) if plugin is not None else None
    if missing is None:
        print("cannot tell which libraries Qt's xcb plugin lacks (no PySide6 xcb plugin or no ldd)", file=sys.stderr)
        return 2
    if not missing:
        return 0
    cmd = install_command(missing)
    print(cmd or "", flush=True)
    print(f"missing: {', '.join(missing)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
