"""The Windows service wrapper of the daemon (pywin32).

``OptiondService`` runs ``optiond serve`` in a child process and stops it with ``optiond stop``
when the service manager asks; installed and controlled by ``optiond service windows
install|start|stop|remove`` (pywin32's ``HandleCommandLine``). Imported only on Windows.

Open files: Windows has no ``RLIMIT_NOFILE`` (the systemd unit's ``LimitNOFILE``); a socket is
a kernel handle, and a process may hold millions. The daemon caps its peer connections there at
:data:`optiond.daemon.connections.WINDOWS_BUDGET` in all (an equal share per port, unless
``optiond serve --max-connections`` says otherwise) and sheds those over the cap, as on Linux:
a key holder's connection (one that has sent a signed message) is never shed for the others,
and a newcomer takes the place of the oldest of those (there is no Unix socket to fall back on).
"""

from __future__ import annotations

import subprocess
import sys

import servicemanager  # type: ignore[import-not-found]
import win32event  # type: ignore[import-not-found]
import win32service  # type: ignore[import-not-found]
import win32serviceutil  # type: ignore[import-not-found]


class OptiondService(win32serviceutil.ServiceFramework):
    _svc_name_ = "optiond"
    _svc_display_name_ = "optiond option-pricing daemon"
    _svc_description_ = "Local ZeroMQ pricing service for the optiond Excel functions (127.0.0.1 only)."

    def __init__(self, args):
        super().__init__(args)
        self.stop_event = win32event.CreateEvent(None, 0, 0, None)
        self.proc: subprocess.Popen | None = None

    def SvcStop(self):  # noqa: N802 (pywin32 API)
        self.ReportServiceStatus(win32service.SERVICE_STOP_PENDING)
        subprocess.run([sys.executable, "-m", "optiond.cli", "stop"], timeout=30, check=False)
        win32event.SetEvent(self.stop_event)

    def SvcDoRun(self):  # noqa: N802
        servicemanager.LogInfoMsg("optiond: starting the daemon")
        self.proc = subprocess.Popen([sys.executable, "-m", "optiond.cli", "serve"])
        while win32event.WaitForSingleObject(self.stop_event, 5000) != win32event.WAIT_OBJECT_0:
            if self.proc.poll() is not None:  # restart on failure
                servicemanager.LogErrorMsg(f"optiond: daemon exited with {self.proc.returncode}; restarting")
                self.proc = subprocess.Popen([sys.executable, "-m", "optiond.cli", "serve"])
        if self.proc.poll() is None:
            self.proc.terminate()


def handle_command_line(argv: list[str]) -> int:
    win32serviceutil.HandleCommandLine(OptiondService, argv=argv)
    return 0
