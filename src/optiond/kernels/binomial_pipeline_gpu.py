"""Deprecated: moved to :mod:`optiond.kernels.binomial.pipeline` (this path goes in the next release)."""
from optiond._moved import alias

alias(__name__, "optiond.kernels.binomial.pipeline")
