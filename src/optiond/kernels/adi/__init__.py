"""ADI finite differences for 2-D and 3-D pricing PDEs (the CPU reference and its parts).

Public entry points: :mod:`optiond.kernels.adi_cpu` (Heston, Heston-Hull-White and the generic
solver on the CPU) and :mod:`optiond.kernels.adi_gpu` (the same on a CUDA GPU via CuPy).

Modules:

* :mod:`.grids`: non-uniform sinh grids (in 't Hout & Foulon 2010, §2.2) with the strike (or
  another point) on a node; the CIR quantile that sizes the variance domain.
* :mod:`.operators`: :class:`~.operators.PDE` / :class:`~.operators.BC` (coefficients as
  functions of the coordinates and time to maturity; Dirichlet, Neumann and "linear"
  boundaries) and their second-order finite-difference discretisation.
* :mod:`.solver`: the Douglas, Craig-Sneyd, Modified Craig-Sneyd and Hundsdorfer-Verwer time
  steppers (in 't Hout & Foulon 2010, §3), Rannacher start, Ikonen-Toivanen American and
  Bermudan exercise, point values and Greeks by interpolation.
* :mod:`._kernels`: the numba kernels (explicit stencils, Thomas line solves, fused steps).
* :mod:`.heston`, :mod:`.hhw`: the Heston (S, v) and Heston-Hull-White (S, v, r) models.
"""
