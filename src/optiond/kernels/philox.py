"""Deprecated: moved to :mod:`optiond.kernels.mlmc.philox` (this path goes in the next release)."""
from optiond._moved import alias

alias(__name__, "optiond.kernels.mlmc.philox")
