"""Deprecated: moved to :mod:`optiond.limits` (this path goes in the next release)."""

from optiond._moved import alias

alias(__name__, "optiond.limits")
