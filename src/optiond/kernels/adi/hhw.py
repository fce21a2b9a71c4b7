"""The Heston-Hull-White model on the generic 3-D ADI solver.

Model (Haentjens & in 't Hout 2012, "Alternating direction implicit finite difference schemes
for the Heston-Hull-White partial differential equation", J. Comput. Finance 16(1), eq. (1.1)
and §2)::

    dS = (r - q) S dt + sqrt(v) S dW_1
    dv = kappa (theta - v) dt + xi sqrt(v) dW_2
    dr = (b(t) - a r) dt + sigma_r dW_3,    d<W_1,W_2> = rho, d<W_1,W_3> = rho_sr, d<W_2,W_3> = rho_vr

with ``b(t)`` fitted to a flat initial curve of continuously compounded rate ``r0`` (Hull &
White 1990): ``b(t) = a r0 + sigma_r^2 / (2a) (1 - exp(-2 a t))``. The value
``u(s, v, r, tau)`` solves::

    u_tau = 1/2 s^2 v u_ss + 1/2 xi^2 v u_vv + 1/2 sigma_r^2 u_rr
            + rho xi s v u_sv + rho_sr sigma_r s sqrt(v) u_sr + rho_vr xi sigma_r sqrt(v) u_vr
            + (r - q) s u_s + kappa (theta - v) u_v + (b(T - tau) - a r) u_r - r u

Boundary conditions: at ``s = 0`` Dirichlet, the put worth ``K P(tau; r)`` with the Hull-White
zero-coupon bond price ``P = exp(-r0 tau + B r0 - sigma_r^2/(4a) (1 - exp(-2a t)) B^2 - B r)``,
``B = (1 - exp(-a tau))/a``, ``t = T - tau`` (Brigo & Mercurio 2006, eq. (3.39)), ``K`` if
American, the call 0; at ``s = S_max`` Neumann as in the Heston model; at ``v = 0``, ``v = V``,
``r = r_min`` and ``r = r_max`` no condition (the ``"linear"`` kind: the PDE with a one-sided
first derivative and no normal curvature).

The reaction ``-r u`` is shared between the s and v operators only (``reaction_split = (1/2,
1/2, 0)``), so that with ``sigma_r = 0`` the plane ``r = r0`` evolves exactly as the 2-D Heston
problem (the r-operator vanishes there).
"""

from __future__ import annotations

import math

import numpy as np

from .grids import sinh_grid
from .heston import CALL, heston_grids
from .operators import BC, PDE


def hw_b(t, a: float, sigma_r: float, r0: float):
    """The Hull-White drift level ``b(t)`` for a flat curve (continuous rate r0)."""
    return a * r0 + sigma_r * sigma_r / (2.0 * a) * (1.0 - np.exp(-2.0 * a * t))


def hw_bond(tau, r, T: float, a: float, sigma_r: float, r0: float):
    """Hull-White zero-coupon bond price from calendar time ``T - tau`` to ``T`` given the
    short rate ``r`` (flat initial curve r0)."""
    t = T - tau
    B = (1.0 - math.exp(-a * tau)) / a
    return np.exp(-r0 * tau + B * r0 - sigma_r * sigma_r / (4.0 * a) * (1.0 - math.exp(-2.0 * a * t)) * B * B - B * r)


def r_grid(n: int, r0: float, expiry: float, a: float, sigma_r: float, width: float | None = None) -> np.ndarray:
    """Short-rate grid: sinh-concentrated around r0 (a node), ``r0 ± width`` with width by
    default ``max(6 sd, 0.05)``, ``sd`` the standard deviation of ``r_T``."""
    sd = sigma_r * math.sqrt((1.0 - math.exp(-2.0 * a * expiry)) / (2.0 * a))
    w = max(6.0 * sd, 0.05) if width is None else float(width)
    return sinh_grid(n, r0 - w, r0 + w, r0, c=max(w / 3.0, 1e-8))


def hhw_grids(spot, strike, expiry, v0, kappa, theta, xi, rate, hw_a, hw_sigma, n_s, n_v, n_r, **kw):
    """``(s, v, r)`` grids: the Heston grids of :func:`heston.heston_grids` and :func:`r_grid`."""
    s, v = heston_grids(spot, strike, expiry, v0, kappa, theta, xi, n_s, n_v, **kw)
    return s, v, r_grid(n_r, rate, expiry, hw_a, hw_sigma)


def hhw_pde(s, v, r, kind: int, exercise: str, strike: float, expiry: float, rate: float, dividend_yield: float,
            kappa: float, theta: float, xi: float, rho: float, hw_a: float, hw_sigma: float,
            rho_sr: float = 0.0, rho_vr: float = 0.0) -> PDE:
    """The Heston-Hull-White PDE (module docstring) on grids ``s, v, r``."""
    q, Kk, T, a, sr, r0 = float(dividend_yield), float(strike), float(expiry), float(hw_a), float(hw_sigma), float(rate)
    if a <= 0.0:
        raise ValueError(f"hw_a = {hw_a}: the mean reversion must be > 0")
    call = kind == CALL
    am = exercise == "american"
    if call:
        bc_s0 = BC("dirichlet", 0.0)
    elif am:
        bc_s0 = BC("dirichlet", Kk)
    elif exercise == "bermudan":
        bc_s0 = BC("linear")
    else:
        bc_s0 = BC("dirichlet", lambda S, V, R, tau: Kk * hw_bond(tau, R, T, a, sr, r0))
    if exercise == "bermudan" or (call and am):
        bc_smax = BC("linear")
    elif call:
        bc_smax = BC("neumann", lambda S, V, R, tau: math.exp(-q * tau))
    else:
        bc_smax = BC("neumann", 0.0)
    lin = BC("linear")
    return PDE(
        axes=(s, v, r),
        diffusion=(lambda S, V, R, t: 0.5 * S * S * V, lambda S, V, R, t: 0.5 * xi * xi * V, 0.5 * sr * sr),
        convection=(lambda S, V, R, t: (R - q) * S, lambda S, V, R, t: kappa * (theta - V),
                    lambda S, V, R, t: hw_b(T - t, a, sr, r0) - a * R),
        mixed={(0, 1): lambda S, V, R, t: rho * xi * S * V,
               (0, 2): lambda S, V, R, t: rho_sr * sr * S * np.sqrt(V),
               (1, 2): lambda S, V, R, t: rho_vr * xi * sr * np.sqrt(V)},
        reaction=lambda S, V, R, t: R,
        bcs=((bc_s0, bc_smax), (lin, lin), (lin, lin)),
        time_dependent={("convection", 2)} if sr > 0.0 else False,
        reaction_split=(0.5, 0.5, 0.0),
    )
