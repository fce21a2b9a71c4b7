"""The desktop panel (``optiond panel``, ``optiond-panel``): daemon and GPU status, request
timings, and batch runs of option chains and portfolios on the daemon.

It talks to the daemon only through :mod:`optiond.daemon.client`. Qt (PySide6) is imported by
:mod:`optiond.gui.app` and the widget modules, never here, so ``import optiond.gui`` and the
Qt-free helpers (:mod:`optiond.gui.backend`, :mod:`optiond.gui.devices`) work without the
``gui`` extra installed.
"""
