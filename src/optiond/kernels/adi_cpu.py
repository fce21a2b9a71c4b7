"""Deprecated: moved to :mod:`optiond.kernels.adi` (the front door; the CPU path is
:mod:`optiond.kernels.adi.cpu`) (this path goes in the next release)."""
from optiond._moved import alias

alias(__name__, "optiond.kernels.adi")
