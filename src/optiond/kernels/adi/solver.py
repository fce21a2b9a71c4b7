"""The generic ADI time stepper for 2-D and 3-D pricing PDEs (CPU, numba).

Semi-discretisation ``U'(tau) = F(tau, U) = F_0 + F_1 + ... + F_k`` with ``F_0`` the mixed
derivative terms (always explicit) and ``F_d`` the terms of direction d (implicit in stage d),
then one of the four ADI schemes of K. J. in 't Hout and S. Foulon (2010), "ADI finite
difference schemes for option pricing in the Heston model with correlation", Int. J. Numer.
Anal. Model. 7(2), 303-320, §3 (``F_j(t, Y) = A_j Y + g_j(t)``, ``k`` directions):

Douglas (Do)::

    Y_0 = U_{n-1} + dt F(t_{n-1}, U_{n-1})
    Y_j = Y_{j-1} + theta dt (F_j(t_n, Y_j) - F_j(t_{n-1}, U_{n-1})),   j = 1..k
    U_n = Y_k

Craig-Sneyd (CS): Do, then::

    Yt_0 = Y_0 + 1/2 dt (F_0(t_n, Y_k) - F_0(t_{n-1}, U_{n-1}))
    Yt_j = Yt_{j-1} + theta dt (F_j(t_n, Yt_j) - F_j(t_{n-1}, U_{n-1})),   j = 1..k
    U_n = Yt_k

Modified Craig-Sneyd (MCS): Do, then::

    Yh_0 = Y_0 + theta dt (F_0(t_n, Y_k) - F_0(t_{n-1}, U_{n-1}))
    Yt_0 = Yh_0 + (1/2 - theta) dt (F(t_n, Y_k) - F(t_{n-1}, U_{n-1}))
    Yt_j = Yt_{j-1} + theta dt (F_j(t_n, Yt_j) - F_j(t_{n-1}, U_{n-1})),   j = 1..k
    U_n = Yt_k

Hundsdorfer-Verwer (HV): Do, then::

    Yt_0 = Y_0 + 1/2 dt (F(t_n, Y_k) - F(t_{n-1}, U_{n-1}))
    Yt_j = Yt_{j-1} + theta dt (F_j(t_n, Yt_j) - F_j(t_n, Y_k)),   j = 1..k
    U_n = Yt_k

Default theta (in 't Hout & Foulon 2010, §3 and §5): Do 1/2, CS 1/2, MCS 1/3, HV 1/2 + sqrt(3)/6.

Rannacher start (Rannacher 1984; Giles & Carter 2006): the first ``rannacher`` steps are each
replaced by two half steps of the Douglas scheme with theta = 1 (an ADI form of implicit Euler,
strongly damping), which removes the spurious oscillations that the non-smooth payoff excites
and restores second-order convergence.

American exercise by the Ikonen-Toivanen operator splitting (Ikonen & Toivanen 2004, "Operator
splitting methods for American option pricing", Appl. Math. Lett. 17(7), 809-814; 2009, Numer.
Math. 113, 299-324), combined with ADI as in Haentjens & in 't Hout (2015), "ADI schemes for
pricing American options under the Heston model", Appl. Math. Finance 22(3), 207-237: the
explicit stage gets ``+ dt lambda_{n-1}`` and after the ADI step ``Ut``::

    U_n = max(Ut - dt lambda_{n-1}, phi),   lambda_n = max(0, lambda_{n-1} + (phi - Ut)/dt).

Bermudan exercise: ``U = max(U, phi)`` after each step that ends on an exercise date (the time
grid is refined so that every date is a level).

Tau is the time to maturity: the solver marches forward in tau from the payoff at tau = 0.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from . import _kernels as K
from .operators import PDE, assemble, boundary_values

SCHEMES = {
    "do": K.DO, "douglas": K.DO,
    "cs": K.CS, "craig-sneyd": K.CS, "craigsneyd": K.CS,
    "mcs": K.MCS, "modified-craig-sneyd": K.MCS, "modifiedcraigsneyd": K.MCS,
    "hv": K.HV, "hundsdorfer-verwer": K.HV, "hundsdorfer": K.HV, "hundsdorferverwer": K.HV,
}
SCHEME_NAMES = {K.DO: "douglas", K.CS: "craig-sneyd", K.MCS: "modified-craig-sneyd", K.HV: "hundsdorfer-verwer"}
DEFAULT_THETA = {K.DO: 0.5, K.CS: 0.5, K.MCS: 1.0 / 3.0, K.HV: 0.5 + math.sqrt(3.0) / 6.0}
EXERCISE = ("european", "american", "bermudan")


def scheme_code(scheme: str | int) -> int:
    """The kernel code of a scheme name (``"do"``, ``"cs"``, ``"mcs"``, ``"hv"`` or long names).

    Raises:
        ValueError: unknown scheme.
    """
    if isinstance(scheme, (int, np.integer)) and int(scheme) in SCHEME_NAMES:
        return int(scheme)
    key = str(scheme).strip().lower().replace("_", "-").replace(" ", "-")
    if key not in SCHEMES:
        raise ValueError(f"unknown ADI scheme {scheme!r}; expected one of do, cs, mcs, hv")
    return SCHEMES[key]


@dataclass
class Schedule:
    """The time levels and per-step settings of one solve.

    Attributes:
        taus: (L,) levels of time to maturity, ``taus[0] = 0``, ``taus[-1] = T``.
        dts, thetas: (L-1,) step sizes and theta per step.
        schemes: (L-1,) int64 scheme codes (Douglas theta = 1 on the Rannacher half steps).
        project: (L-1,) int8, 1 where a Bermudan exercise date ends the step.
    """

    taus: np.ndarray
    dts: np.ndarray
    thetas: np.ndarray
    schemes: np.ndarray
    project: np.ndarray


def make_schedule(maturity: float, time_steps: int, scheme: int, theta: float, rannacher: int,
                  exercise_taus=()) -> Schedule:
    """Uniform steps ``T/time_steps`` refined at the Bermudan dates, the first ``rannacher``
    steps halved and run as Douglas theta = 1.

    Args:
        exercise_taus: times to maturity of the Bermudan dates in ``(0, T]``.

    Raises:
        ValueError: ``maturity <= 0``, ``time_steps < 1``, ``rannacher < 0`` or a date outside
            ``[0, T]``.
    """
    T = float(maturity)
    if not T > 0.0:
        raise ValueError(f"maturity = {maturity}: must be > 0")
    if int(time_steps) < 1:
        raise ValueError(f"time_steps = {time_steps}: must be >= 1")
    if int(rannacher) < 0:
        raise ValueError(f"rannacher = {rannacher}: must be >= 0")
    base = np.linspace(0.0, T, int(time_steps) + 1)
    ex = np.asarray(sorted(float(t) for t in exercise_taus), dtype=np.float64)
    if ex.size and (ex.min() < -1e-12 * T or ex.max() > T * (1 + 1e-12)):
        raise ValueError("exercise dates must lie in [0, T]")
    tol = 1e-9 * T
    ex = ex[ex > tol]
    levels = np.unique(np.concatenate([base, ex]))
    # merge levels closer than tol (a date on a grid level)
    keep = np.concatenate([[True], np.diff(levels) > tol])
    levels = levels[keep]
    levels[-1] = T
    nR = min(int(rannacher), levels.size - 1)
    taus = [0.0]
    dts, ths, sch = [], [], []
    for m in range(levels.size - 1):
        a, b = levels[m], levels[m + 1]
        if m < nR:
            mid = 0.5 * (a + b)
            for lo, hi in ((a, mid), (mid, b)):
                taus.append(hi)
                dts.append(hi - lo)
                ths.append(1.0)
                sch.append(K.DO)
        else:
            taus.append(b)
            dts.append(b - a)
            ths.append(theta)
            sch.append(scheme)
    taus = np.asarray(taus)
    # steps that are nominally T/N (or T/2N) get exactly that value, so the factorised
    # matrices I - theta dt A_d are reused from step to step (np.diff of the levels differs
    # in the last bits)
    dts = np.asarray(dts)
    for nominal in (T / int(time_steps), T / (2 * int(time_steps))):
        dts[np.abs(dts - nominal) <= 1e-9 * nominal] = nominal
    project = np.zeros(taus.size - 1, dtype=np.int8)
    for t in ex:
        k = int(np.argmin(np.abs(taus - t)))
        if k > 0 and abs(taus[k] - t) <= tol:
            project[k - 1] = 1
    return Schedule(taus, dts, np.asarray(ths), np.asarray(sch, dtype=np.int64), project)


@dataclass
class Solution:
    """What :func:`solve` returns.

    Attributes:
        values: the solution at tau = T on the grid, shape ``pde.shape``.
        lam: the Ikonen-Toivanen multiplier at tau = T (zeros unless American).
        rate_of_change: ``u_tau`` at tau = T on the grid (``F(T, U) + lambda``), for theta.
        schedule: the :class:`Schedule` used.
        elapsed_s: wall time of the time loop.
    """

    values: np.ndarray
    lam: np.ndarray
    rate_of_change: np.ndarray
    schedule: Schedule
    elapsed_s: float
    info: dict = field(default_factory=dict)


def _levels_data(pde: PDE, op, taus):
    dv, sv = [], []
    for t in taus:
        d, s = boundary_values(pde, op, float(t))
        dv.append(d)
        sv.append(s)
    return (np.ascontiguousarray(np.array(dv).reshape(len(taus), op.dir_idx.size)),
            np.ascontiguousarray(np.array(sv).reshape(len(taus), op.src_idx.size)))


def solve(pde: PDE, payoff: np.ndarray, maturity: float, time_steps: int = 100, scheme: str | int = "mcs",
          theta: float | None = None, rannacher: int = 2, exercise: str = "european",
          obstacle: np.ndarray | None = None, exercise_taus=()) -> Solution:
    """Solve ``pde`` from ``payoff`` at tau = 0 to tau = ``maturity``.

    Args:
        pde: the :class:`~optiond.kernels.adi.operators.PDE` (2-D or 3-D).
        payoff: initial values on the grid, shape ``pde.shape`` (float64).
        maturity: T in years (> 0).
        time_steps: number of uniform steps ``dt = T/time_steps`` (>= 1), before the Rannacher
            halving and the refinement at Bermudan dates.
        scheme: ``"do"``, ``"cs"``, ``"mcs"`` or ``"hv"`` (in 't Hout & Foulon 2010, §3).
        theta: the scheme parameter; default per scheme (see the module docstring).
        rannacher: number of initial steps replaced by two Douglas theta = 1 half steps.
        exercise: ``"european"``, ``"american"`` (Ikonen-Toivanen) or ``"bermudan"``.
        obstacle: the exercise value on the grid (required for american/bermudan).
        exercise_taus: Bermudan dates as times to maturity in (0, T].

    Returns:
        :class:`Solution`.

    Raises:
        ValueError: bad shapes, scheme, exercise or schedule parameters.
    """
    code = scheme_code(scheme)
    th = DEFAULT_THETA[code] if theta is None else float(theta)
    if not (0.0 < th <= 1.0):
        raise ValueError(f"theta = {theta}: must be in (0, 1]")
    exercise = str(exercise).lower()
    if exercise not in EXERCISE:
        raise ValueError(f"exercise = {exercise!r}: expected one of {EXERCISE}")
    shape = pde.shape
    U = np.array(payoff, dtype=np.float64, order="C", copy=True)
    if U.shape != shape:
        raise ValueError(f"payoff shape {U.shape} != grid shape {shape}")
    if exercise != "european":
        if obstacle is None:
            raise ValueError("american/bermudan exercise needs the obstacle (exercise value)")
        phi = np.ascontiguousarray(obstacle, dtype=np.float64)
        if phi.shape != shape:
            raise ValueError(f"obstacle shape {phi.shape} != grid shape {shape}")
    else:
        phi = np.zeros(shape)
    ex_taus = exercise_taus if exercise == "bermudan" else ()
    if exercise == "bermudan" and len(ex_taus) == 0:
        raise ValueError("bermudan exercise needs exercise dates")
    sch = make_schedule(maturity, time_steps, code, th, rannacher, ex_taus)
    american = exercise == "american"
    lam = np.zeros(shape)
    t0 = time.perf_counter()
    op = assemble(pde, 0.0)
    nd = pde.ndim
    if not pde.time_dependent:
        dir_vals, src_vals = _levels_data(pde, op, sch.taus)
        if nd == 2:
            K.march2(U, lam, phi, op.W, op.M, op.G[0], op.G[1], sch.dts, sch.thetas, sch.schemes,
                     american, sch.project, op.dir_idx, dir_vals, op.src_idx, op.src_dir, src_vals)
        else:
            _march3(U, lam, phi, op, op, sch, american, op.dir_idx, dir_vals, op.src_idx, op.src_dir, src_vals, pde)
        op_end = op
    else:
        op_end = _march_time_dependent(pde, U, lam, phi, op, sch, american)
    elapsed = time.perf_counter() - t0
    rate = _rate_of_change(pde, op_end, U, lam, float(sch.taus[-1]))
    return Solution(U, lam, rate, sch, elapsed, {"scheme": SCHEME_NAMES[code], "theta": th, "steps": int(sch.dts.size)})


def _work3(shape):
    return {"Y0": np.empty(shape), "Y": np.empty(shape), "A0": np.empty(shape), "A": np.empty((3,) + shape),
            "B0": np.empty(shape), "B": np.empty((3,) + shape)}


def _factors3(W, c, shape):
    fac = []
    for d in range(3):
        f = tuple(np.empty(shape) for _ in range(4))
        K.factor3(W, d, c, *f)
        fac.append(f)
    return fac


def _march3(U, lam, phi, opa, opb, sch, american, dir_idx, dir_vals, src_idx, src_dir, src_vals, pde):
    shape = U.shape
    work = _work3(shape)
    c_prev, fac = None, None
    for m in range(sch.dts.size):
        c = sch.thetas[m] * sch.dts[m]
        if c != c_prev:
            fac = _factors3(opb.W, c, shape)
            c_prev = c
        K.step3(U, lam, phi, opa.W, opa.M, opb.W, opb.M, opb.G, fac, sch.dts[m], sch.thetas[m], int(sch.schemes[m]),
                american, bool(sch.project[m]), dir_idx, dir_vals[m + 1], src_idx, src_dir, src_vals[m], src_vals[m + 1], work)


def _march_time_dependent(pde, U, lam, phi, op0, sch, american):
    """Step by step with the operator re-assembled at every level (only its time-dependent
    terms), two operators used in turn for tau_{n-1} and tau_n; only the directions that
    change are refactored."""
    from .operators import time_dependent_terms

    shape = U.shape
    nd = pde.ndim
    dirty, _ = time_dependent_terms(pde)
    opa = op0
    opb = assemble(pde, float(sch.taus[min(1, sch.taus.size - 1)]))
    sa = boundary_values(pde, opa, 0.0)[1]
    work2 = ([np.empty(shape) for _ in range(8)] + [np.empty(shape[-1]) for _ in range(4)]
             + [np.empty((shape[-1], K.LANES))])
    fac2 = [np.empty(shape) for _ in range(8)]
    nblk = (shape[0] + K.LANES - 1) // K.LANES
    blk = [np.empty((nblk, shape[-1], K.LANES)) for _ in range(3)]
    G1T = np.ascontiguousarray(op0.G[1].T)
    work3 = _work3(shape) if nd == 3 else None
    fac3 = [tuple(np.empty(shape) for _ in range(4)) for _ in range(nd)] if nd == 3 else None
    c_prev = None
    for m in range(sch.dts.size):
        tb = float(sch.taus[m + 1])
        if m > 0:
            opb = assemble(pde, tb, update=opb)
        db, sb = boundary_values(pde, opb, tb)
        c = sch.thetas[m] * sch.dts[m]
        redo = range(nd) if c != c_prev else sorted(dirty)
        c_prev = c
        if nd == 2:
            for d in redo:
                K.factor2(opb.W, d, c, *fac2[4 * d:4 * d + 4])
            if 1 in redo:
                K.block_factors(fac2[4], fac2[5], fac2[6], *blk)
            K.step2(U, lam, phi, opa.W, opa.M, opb.W, opb.M, opb.G[0], G1T, *fac2[:4], *blk, fac2[7],
                    sch.dts[m], sch.thetas[m], int(sch.schemes[m]), american, opb.dir_idx, db, opb.src_idx,
                    opb.src_dir, sa, sb, *work2)
            if sch.project[m]:
                np.maximum(U, phi, out=U)
        else:
            for d in redo:
                K.factor3(opb.W, d, c, *fac3[d])
            K.step3(U, lam, phi, opa.W, opa.M, opb.W, opb.M, opb.G, fac3, sch.dts[m], sch.thetas[m], int(sch.schemes[m]),
                    american, bool(sch.project[m]), opb.dir_idx, db, opb.src_idx, opb.src_dir, sa, sb, work3)
        opa, opb = opb, opa
        sa = sb
    return opa


def _rate_of_change(pde: PDE, op, U, lam, tau):
    """``u_tau = F(tau, U) + lambda`` on the grid (zero on Dirichlet nodes)."""
    d, s = boundary_values(pde, op, tau)
    shape = U.shape
    if pde.ndim == 2:
        A0, A1, A2 = (np.empty(shape) for _ in range(3))
        K.explicit2(U, op.W, op.M, op.G[0], op.G[1], A0, A1, A2)
        K._add_src2(A1, A2, op.src_idx, op.src_dir, s, 1.0)
        F = A0 + A1 + A2
    else:
        A0, A = np.empty(shape), np.empty((3,) + shape)
        K.explicit3(U, op.W, op.M, op.G[0], op.G[1], op.G[2], A0, A[0], A[1], A[2])
        K._add_src3(A, op.src_idx, op.src_dir, s, 1.0)
        F = A0 + A.sum(axis=0)
    return F + lam


# --------------------------------------------------------------------------------------------
# values and derivatives at a point
# --------------------------------------------------------------------------------------------


def lagrange_weights(xs: np.ndarray, x: float) -> tuple[np.ndarray, np.ndarray]:
    """Weights of the Lagrange polynomial through nodes ``xs`` for the value and the first
    derivative at ``x`` (non-uniform nodes)."""
    xs = [float(t) for t in xs]
    n = len(xs)
    w = np.empty(n)
    dw = np.empty(n)
    for k in range(n):
        den = 1.0
        num = 1.0
        for m in range(n):
            if m != k:
                den *= xs[k] - xs[m]
                num *= x - xs[m]
        s = 0.0
        for a in range(n):
            if a == k:
                continue
            prod = 1.0
            for m in range(n):
                if m != k and m != a:
                    prod *= x - xs[m]
            s += prod
        w[k] = num / den
        dw[k] = s / den
    return w, dw


def _stencil(x: np.ndarray, p: float, interior: bool) -> int:
    """First index of 4 consecutive nodes around p (interior: all with both neighbours)."""
    n = x.shape[0]
    i = int(np.searchsorted(x, p)) - 2
    lo, hi = (1, n - 5) if interior else (0, n - 4)
    return min(max(i, lo), hi)


def stencil_indices(axes, point) -> tuple:
    """Start indices of the nodes :func:`point_values` reads: rows ``i0-1 .. i0+4`` of axis 0
    and ``j0 .. j0+3`` of each other axis. Raises ValueError outside the grid."""
    for a, p in zip(axes, point):
        if not (a[0] <= p <= a[-1]):
            raise ValueError(f"point {p} lies outside the grid [{a[0]}, {a[-1]}]")
    return _stencil(axes[0], point[0], True), tuple(_stencil(a, p, False) for a, p in zip(axes[1:], point[1:]))


def point_values(axes, U: np.ndarray, point, block: np.ndarray | None = None) -> dict:
    """Value and derivatives of a grid function at a point by cubic Lagrange interpolation.

    Along axis 0 the first and second derivatives are first formed at the nodes with the
    second-order central differences of the grid, then interpolated (so delta and gamma are
    second-order accurate); along the other axes the cubic Lagrange polynomial gives the value
    and its first derivative.

    Args:
        axes: the 2 or 3 grids; U: values, shape of the grid (or None with ``block``);
        point: one coordinate per axis; block: optionally the values already sliced at
            :func:`stencil_indices` (shape (6, 4[, 4])), e.g. gathered on a GPU.

    Returns:
        dict with ``value``, ``d0`` (d/dx0), ``d00`` (d2/dx0^2), ``d1`` (d/dx1) and, in 3-D,
        ``d2`` (d/dx2).

    Raises:
        ValueError: the point lies outside the grid.
    """
    from .operators import d1_weights, d2_weights

    nd = len(axes)
    i0, js = stencil_indices(axes, point)
    x0 = axes[0]
    wv, wd = [], []
    for a, p, j0 in zip(axes[1:], point[1:], js):
        w, dw = lagrange_weights(a[j0:j0 + 4], p)
        wv.append(w)
        wd.append(dw)
    if block is None:
        block = U[(slice(i0 - 1, i0 + 5),) + tuple(slice(j0, j0 + 4) for j0 in js)]
    T = np.asarray(block, dtype=np.float64)  # (6, 4[, 4], *extra): extra axes = several functions

    def contract(ws):
        out = T
        for w in ws:  # contract axis 1 each time: the next grid axis moves into its place
            out = np.tensordot(w, out, axes=([0], [1]))
        return out

    prof = contract(wv)
    profs_d = []
    for k in range(nd - 1):
        ws = list(wv)
        ws[k] = wd[k]
        profs_d.append(contract(ws))
    D1, D2 = d1_weights(x0[i0 - 1:i0 + 5])[1:5], d2_weights(x0[i0 - 1:i0 + 5])[1:5]
    val_n = prof[1:5]
    d0_n = np.stack([D1[m, 0] * prof[m] + D1[m, 1] * prof[m + 1] + D1[m, 2] * prof[m + 2] for m in range(4)])
    d00_n = np.stack([D2[m, 0] * prof[m] + D2[m, 1] * prof[m + 1] + D2[m, 2] * prof[m + 2] for m in range(4)])
    w0, _ = lagrange_weights(x0[i0:i0 + 4], point[0])
    fin = (lambda a: float(a)) if T.ndim == nd else (lambda a: a)  # noqa: E731
    out = {"value": fin(np.tensordot(w0, val_n, axes=1)), "d0": fin(np.tensordot(w0, d0_n, axes=1)),
           "d00": fin(np.tensordot(w0, d00_n, axes=1))}
    for k, pd in enumerate(profs_d):
        out[f"d{k + 1}"] = fin(np.tensordot(w0, pd[1:5], axes=1))
    return out
