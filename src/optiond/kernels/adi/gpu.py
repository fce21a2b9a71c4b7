"""ADI finite differences on an NVIDIA GPU (CuPy RawModule over ``adi.cu``, FP64).

Two solvers, both running the whole time loop on the device (the host only launches kernels;
nothing is copied between steps):

* :func:`heston_price_batch`: many 2-D Heston problems (any mix of strikes, expiries, puts,
  calls, European and American exercise) solved together. One 200 x 100 grid has 20,000
  nodes, far too few to fill a GPU, so problem ``b``'s node ``(i, j)`` lives at
  ``[(i * n2 + j) * B + b]``: every kernel (stencil, sweeps along s, sweeps along v) has
  consecutive threads on consecutive problems, so every global access is coalesced, and one
  launch covers the whole batch. One thread per (line, problem) runs a Thomas sweep.
* :func:`solve`: one generic 3-D problem (:class:`~optiond.kernels.adi.operators.PDE`, e.g.
  Heston-Hull-White), its operator assembled on the host by the same code as the CPU solver.
  Sweeps along axes 0 and 1 are one thread per line with consecutive threads on consecutive
  lines (coalesced); sweeps along the contiguous axis 2 go through shared-memory tiles.

Both reproduce the CPU solver (:mod:`optiond.kernels.adi.cpu`) on the same grid and scheme to
rounding (the tests ask 1e-10). CuPy is imported lazily (through :mod:`optiond.kernels.gpu`), so
this module imports without CUDA.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...models import InvalidInputError, object_full
from .. import gpu as _gpu
from . import heston as _heston
from . import solver as _solver
from .inputs import BATCH_FIELDS, RESULT_KEYS, batch_inputs, heston_inputs, heston_params, parse_kind, parse_style
from .operators import PDE, assemble, boundary_values, d1_weights, d2_weights

_CU = Path(__file__).with_name("adi.cu")
THREADS = 256

#: the earlier names of this module's probe and device label, kept for the old path
#: ``optiond.kernels.adi_gpu`` (the one owner is :mod:`optiond.kernels.gpu`)
available = _gpu.available
device_name = _gpu.device_label


def _module():
    """The compiled ``adi.cu`` (cached by :func:`optiond.kernels.gpu.module`)."""
    return _gpu.module(_CU, ("-std=c++14",))


def _fn(name: str):
    return _module().get_function(name)


def _grid1(n: int) -> tuple:
    return ((int(n) + THREADS - 1) // THREADS,)


def heston_price(kind: Any, style: Any, spot: float, strike: float, expiry: float, rate: float,
                 dividend_yield: float, v0: float, kappa: float, theta: float, xi: float, rho: float,
                 scheme: str = "mcs", grid: Sequence[int] = (200, 100), time_steps: int = 100,
                 rannacher: int = 2, exercise_dates: Sequence[float] | None = None,
                 scheme_theta: float | None = None, v_max_bc: str = "linear", s_max: float | None = None,
                 v_max: float | None = None, return_grid: bool = False) -> dict:
    """One option of :func:`heston_price_batch`: the GPU twin of
    :func:`optiond.kernels.adi.cpu.heston_price` (the same arguments, checked in the same
    order, and the same result keys but ``s_max``/``v_max``), European and American exercise
    on the default domain only.

    Raises:
        InvalidInputError: a bad argument, or one the GPU path does not take (Bermudan
            exercise, ``v_max_bc``, ``s_max``, ``v_max``, ``return_grid``).
    """
    k, st, p, (n_s, n_v), N, R, code, _ = heston_inputs(kind, style, spot, strike, expiry, rate, dividend_yield, v0,
                                                       kappa, theta, xi, rho, grid, time_steps, rannacher, scheme,
                                                       exercise_dates)
    if st == "bermudan" or v_max_bc != "linear" or s_max is not None or v_max is not None or return_grid:
        raise InvalidInputError("device", None, "gpu",
                                "the GPU path prices European and American options on the default domain only")
    res = heston_price_batch(k, st, p["spot"], p["strike"], p["expiry"], p["rate"], p["dividend_yield"],
                             p["v0"], p["kappa"], p["theta"], p["xi"], p["rho"], scheme=code,
                             grid=(n_s, n_v), time_steps=N, rannacher=R, scheme_theta=scheme_theta)
    if res["status"][0] != "ok":
        raise InvalidInputError("device", None, "gpu", str(res["error"][0]))
    out = {key: float(res[key][0]) for key in RESULT_KEYS}
    out.update(grid=(n_s, n_v), time_steps=N, scheme=_solver.SCHEME_NAMES[code], scheme_theta=res["scheme_theta"],
               elapsed_s=res["elapsed_s"], device=res["device"])
    return out


# --------------------------------------------------------------------------------------------
# batched 2-D Heston
# --------------------------------------------------------------------------------------------


def heston_price_batch(kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa, theta, xi, rho,
                       scheme: Any = "mcs", grid: Sequence[int] = (200, 100), time_steps: int = 100, rannacher: int = 2,
                       scheme_theta: float | None = None, return_values: bool = False, sync_timing: bool = True) -> dict:
    """Price a batch of European/American Heston options on the GPU in one launch sequence.

    Columns are scalars or 1-D arrays of one length n (as
    :func:`optiond.kernels.adi.cpu.heston_price_batch`). Every problem gets its own grids
    (those of the CPU solver for the same contract), all of shape ``grid``; all share the
    number of steps and the scheme, each has its own step size ``expiry / time_steps``.

    Returns:
        dict of arrays of length n: ``price, delta, gamma, theta, dv0``, ``status``/``error``
        per row, and ``device``, ``elapsed_s`` (whole call), ``solve_s`` (device time loop);
        with ``return_values`` also ``values`` (n, n_s, n_v) and the grids ``s``, ``v``.

    Raises:
        InvalidInputError: a batch-level problem (column lengths, scheme, grid, steps).
        GPUError / CUDA errors: no usable GPU.
    """
    cp = _gpu.cupy()

    t_all = time.perf_counter()
    cols, n, code, (n1, n2), N, R = batch_inputs((kind, style, spot, strike, expiry, rate, dividend_yield, v0, kappa,
                                                  theta, xi, rho), scheme, grid, time_steps, rannacher)
    th = _solver.DEFAULT_THETA[code] if scheme_theta is None else float(scheme_theta)
    out = {k: np.full(n, np.nan) for k in RESULT_KEYS}
    status = object_full(n, "ok")
    error = object_full(n, "")
    # ---- per-row validation and grids (host)
    rows, par, S_, V_ = [], [], [], []
    for i in range(n):
        try:
            k = parse_kind(cols["kind"][i])
            st = parse_style(cols["style"][i])
            if st == "bermudan":
                raise InvalidInputError("style", i, "bermudan", "bermudan exercise runs on the CPU (heston_price)")
            p = heston_params(*(cols[f][i] for f in BATCH_FIELDS[2:]))
            s_ax, v_ax = _heston.heston_grids(p["spot"], p["strike"], p["expiry"], p["v0"], p["kappa"], p["theta"],
                                              p["xi"], n1, n2)
        except (ValueError, ArithmeticError) as e:
            status[i], error[i] = "error", str(e)
            continue
        rows.append(i)
        par.append((k, st == "american", p))
        S_.append(s_ax)
        V_.append(v_ax)
    B = len(rows)
    if B == 0:
        out.update(status=status, error=error, device="gpu", elapsed_s=time.perf_counter() - t_all, solve_s=0.0)
        return out
    S = np.stack(S_, axis=1)  # (n1, B)
    V = np.stack(V_, axis=1)  # (n2, B)
    D1s = np.moveaxis(d1_weights(S.T), 0, 2)  # (n1, 3, B)
    D2s = np.moveaxis(d2_weights(S.T), 0, 2)
    D1v = np.moveaxis(d1_weights(V.T), 0, 2)
    D2v = np.moveaxis(d2_weights(V.T), 0, 2)
    f = lambda key: np.array([p[key] for _, _, p in par], dtype=np.float64)  # noqa: E731
    r, q, kap, tht, xiv, rhov, K, T = (f(x) for x in ("rate", "dividend_yield", "kappa", "theta", "xi", "rho", "strike", "expiry"))
    kinds = np.array([k for k, _, _ in par], dtype=np.int32)
    am = np.array([a for _, a, _ in par], dtype=bool)
    # boundary kinds as in heston.heston_pde: s = 0: 0 K e^{-r tau}, 1 K, 2 zero;
    # s = S_max: 0 u_s = 0, 1 u_s = e^{-q tau}, 2 u_s = 1
    bc_s0 = np.where(kinds == 1, 2, np.where(am, 1, 0)).astype(np.int32)
    bc_smax = np.where(kinds == 0, 0, np.where(am, 2, 1)).astype(np.int32)
    sch = _solver.make_schedule(1.0, N, code, th, R)
    american = bool(am.any())
    if american and not am.all():
        # mixed batch: solve the two groups separately (the IT splitting is per launch)
        res = {}
        for grp in (np.flatnonzero(am), np.flatnonzero(~am)):
            idx = np.asarray(rows)[grp]
            sub = heston_price_batch(*(np.asarray(cols[f_])[idx] for f_ in BATCH_FIELDS), scheme=code, grid=(n1, n2),
                                     time_steps=N, rannacher=R, scheme_theta=scheme_theta, return_values=return_values)
            res[tuple(idx)] = sub
        for idx, sub in res.items():
            idx = np.asarray(idx)
            for k_ in RESULT_KEYS:
                out[k_][idx] = sub[k_]
            status[idx], error[idx] = sub["status"], sub["error"]
        out.update(status=status, error=error, device=_gpu.device_label(), elapsed_s=time.perf_counter() - t_all,
                   solve_s=sum(sub["solve_s"] for sub in res.values()))
        return out
    # ---- device arrays
    d = lambda a, dt=np.float64: cp.asarray(np.ascontiguousarray(a, dtype=dt))  # noqa: E731
    gS, gV, gD1s, gD2s, gD1v, gD2v = d(S), d(V), d(D1s), d(D2s), d(D1v), d(D2v)
    gr, gq, gk, gt, gx, gp, gK, gT = d(r), d(q), d(kap), d(tht), d(xiv), d(rhov), d(K), d(T)
    gkind, gbc0, gbcN = d(kinds, np.int32), d(bc_s0, np.int32), d(bc_smax, np.int32)
    NN = n1 * n2 * B
    e = lambda: cp.empty(NN, dtype=cp.float64)  # noqa: E731
    W = cp.empty(6 * NN, dtype=cp.float64)
    M, U, lam, Y0, Y, A0, A1, A2, Fa, Z, B2 = (e() for _ in range(11))
    srcc = cp.zeros(n2 * B, dtype=cp.float64)
    fac = [[e() for _ in range(4)] for _ in range(2)]
    i32 = np.int32
    t0 = time.perf_counter()
    _fn("hb_build")(_grid1(NN), (THREADS,), (i32(n1), i32(n2), i32(B), gS, gV, gD1s, gD2s, gD1v, gD2v, gr, gq, gk, gt,
                                              gx, gp, gbcN, W, M, srcc))
    _fn("hb_init")(_grid1(NN), (THREADS,), (i32(n1), i32(n2), i32(B), gS, gK, gkind, U, lam))
    k_fac, k_exp, k_s0, k_s1, k_cor, k_fin = (_fn(x) for x in ("hb_factor", "hb_explicit", "hb_solve0", "hb_solve1",
                                                                 "hb_correct", "hb_finish"))
    c_prev = None
    for m in range(sch.dts.size):
        dtf, tm, sm = float(sch.dts[m]), float(sch.thetas[m]), int(sch.schemes[m])
        ta, tb = float(sch.taus[m]), float(sch.taus[m + 1])
        cf = tm * dtf
        if cf != c_prev:
            for dd in (0, 1):
                nl = (n2 if dd == 0 else n1) * B
                k_fac(_grid1(nl), (THREADS,), (i32(n1), i32(n2), i32(B), i32(dd), cf, gT, W, *fac[dd]))
            c_prev = cf
        k_exp(_grid1(NN), (THREADS,), (i32(n1), i32(n2), i32(B), dtf, tm, ta, tb, i32(american), gT, U, lam, W, M, gD1s,
                                       gD1v, srcc, gr, gq, gK, gbc0, gbcN, A0, A1, A2, Fa, Y0, Y))
        k_s0(_grid1(n2 * B), (THREADS,), (i32(n1), i32(n2), i32(B), Y, *fac[0]))
        k_s1(_grid1(n1 * B), (THREADS,), (i32(n1), i32(n2), i32(B), dtf, tm, tb, gT, Y, A2, *fac[1], gr, gK, gbc0))
        Rm = Y
        if sm != _solver.K.DO:
            k_cor(_grid1(NN), (THREADS,), (i32(n1), i32(n2), i32(B), i32(sm), dtf, tm, tb, gT, Y, Y0, A0, A1, Fa, W, M,
                                           gD1s, gD1v, srcc, gr, gq, gK, gbc0, gbcN, Z, B2))
            k_s0(_grid1(n2 * B), (THREADS,), (i32(n1), i32(n2), i32(B), Z, *fac[0]))
            k_s1(_grid1(n1 * B), (THREADS,), (i32(n1), i32(n2), i32(B), dtf, tm, tb, gT, Z, B2 if sm == _solver.K.HV else A2,
                                              *fac[1], gr, gK, gbc0))
            Rm = Z
        k_fin(_grid1(NN), (THREADS,), (i32(n1), i32(n2), i32(B), dtf, i32(american), gT, gS, gK, gkind, Rm, U, lam))
    F = Z
    _fn("hb_rate")(_grid1(NN), (THREADS,), (i32(n1), i32(n2), i32(B), float(sch.taus[-1]), gT, U, lam, W, M, gD1s, gD1v,
                                             srcc, gq, gbcN, F))
    if sync_timing:
        cp.cuda.Stream.null.synchronize()
    solve_s = time.perf_counter() - t0
    # ---- Greeks: gather the 6 x 4 node blocks around (spot, v0) of every problem
    i0s, j0s, pts = [], [], []
    for b_, (_, _, p) in enumerate(par):
        i0, (j0,) = _solver.stencil_indices((S_[b_], V_[b_]), (p["spot"], p["v0"]))
        i0s.append(i0)
        j0s.append(j0)
        pts.append((p["spot"], p["v0"]))
    ii = (np.asarray(i0s)[:, None, None] - 1 + np.arange(6)[None, :, None])
    jj = (np.asarray(j0s)[:, None, None] + np.arange(4)[None, None, :])
    flat = ((ii * n2 + jj) * B + np.arange(B)[:, None, None]).astype(np.int64)
    gflat = cp.asarray(flat)
    blk = cp.asnumpy(cp.stack([U[gflat], F[gflat]], axis=-1))  # (B, 6, 4, 2): value and u_tau
    g = _batch_point_values(S, V, np.asarray(i0s), np.asarray(j0s), np.asarray(pts), blk)
    rows_a = np.asarray(rows)
    out["price"][rows_a], out["delta"][rows_a], out["gamma"][rows_a] = g["value"][:, 0], g["d0"][:, 0], g["d00"][:, 0]
    out["theta"][rows_a], out["dv0"][rows_a] = -g["value"][:, 1], g["d1"][:, 0]
    out.update(status=status, error=error, device=_gpu.device_label(), elapsed_s=time.perf_counter() - t_all, solve_s=solve_s,
               grid=(n1, n2), time_steps=N, scheme=_solver.SCHEME_NAMES[code], scheme_theta=th)
    if return_values:
        vals = np.full((n, n1, n2), np.nan)
        vals[np.asarray(rows)] = np.moveaxis(cp.asnumpy(U).reshape(n1, n2, B), 2, 0)
        out.update(values=vals, s=S_, v=V_, rows=np.asarray(rows))
    return out


def _lagrange_batch(x: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Value and derivative Lagrange weights, shapes (B, 4), for nodes x (B, 4) at p (B,)."""
    n = x.shape[1]
    w = np.empty_like(x)
    dw = np.empty_like(x)
    for k in range(n):
        den = np.ones(x.shape[0])
        num = np.ones(x.shape[0])
        for m in range(n):
            if m != k:
                den = den * (x[:, k] - x[:, m])
                num = num * (p - x[:, m])
        s = np.zeros(x.shape[0])
        for a in range(n):
            if a == k:
                continue
            prod = np.ones(x.shape[0])
            for m in range(n):
                if m != k and m != a:
                    prod = prod * (p - x[:, m])
            s = s + prod
        w[:, k] = num / den
        dw[:, k] = s / den
    return w, dw


def _batch_point_values(S, V, i0, j0, pts, blk) -> dict:
    """:func:`optiond.kernels.adi.solver.point_values` for a whole batch at once.

    S (n1, B), V (n2, B): grids; i0, j0 (B,): stencil starts; pts (B, 2): (spot, v0);
    blk (B, 6, 4, F): values of F grid functions at rows i0-1..i0+4, columns j0..j0+3.
    Returns dict of (B, F) arrays ``value, d0, d00, d1``."""
    B = S.shape[1]
    bb = np.arange(B)
    xs6 = S[i0[:, None] - 1 + np.arange(6)[None, :], bb[:, None]]  # (B, 6)
    ys4 = V[j0[:, None] + np.arange(4)[None, :], bb[:, None]]  # (B, 4)
    wv, wd = _lagrange_batch(ys4, pts[:, 1])
    prof = np.einsum("bj,bijf->bif", wv, blk)
    prof_d = np.einsum("bj,bijf->bif", wd, blk)
    D1 = d1_weights(xs6)[:, 1:5]  # (B, 4, 3)
    D2 = d2_weights(xs6)[:, 1:5]
    d0_n = sum(D1[:, :, p, None] * prof[:, p:p + 4] for p in range(3))
    d00_n = sum(D2[:, :, p, None] * prof[:, p:p + 4] for p in range(3))
    w0, _ = _lagrange_batch(xs6[:, 1:5], pts[:, 0])
    f = lambda a: np.einsum("bm,bmf->bf", w0, a)  # noqa: E731
    return {"value": f(prof[:, 1:5]), "d0": f(d0_n), "d00": f(d00_n), "d1": f(prof_d[:, 1:5])}


# --------------------------------------------------------------------------------------------
# generic 3-D
# --------------------------------------------------------------------------------------------


class _Dev3:
    """Device copies of a 3-D operator and its factorisations."""

    def __init__(self, op, shape):
        cp = _gpu.cupy()

        self.shape = shape
        self.W = cp.asarray(op.W.reshape(-1))
        self.M = cp.asarray(op.M.reshape(-1))
        self.G = [cp.asarray(np.ascontiguousarray(g).reshape(-1)) for g in op.G]
        self.dir_idx = cp.asarray(op.dir_idx.astype(np.int64))
        self.src_idx = cp.asarray(op.src_idx.astype(np.int64))
        self.src_dir = cp.asarray(op.src_dir.astype(np.int32))
        N = int(np.prod(shape))
        self.fac = [[cp.empty(N) for _ in range(4)] for _ in range(3)]
        self.c = [None, None, None]

    def refresh(self, op):
        self.W.set(op.W.reshape(-1))
        self.M.set(op.M.reshape(-1))
        self.c = [None, None, None]

    def factor(self, c):
        n1, n2, n3 = self.shape
        i32 = np.int32
        for d, nl in enumerate((n2 * n3, n1 * n3, n1 * n2)):
            if self.c[d] != c:
                _fn("g3_factor")(_grid1(nl), (THREADS,), (i32(n1), i32(n2), i32(n3), i32(d), float(c), self.W, *self.fac[d]))
                self.c[d] = c


def _step3_gpu(dev, dev_b, U, lam, phi, work, dt, th, scheme, american, project, gnew, sold, snew, axis2="tiled"):
    """One ADI step on the device (the CPU step :func:`optiond.kernels.adi._kernels.step3`)."""
    n1, n2, n3 = dev.shape
    N = n1 * n2 * n3
    i32, i64 = np.int32, np.int64
    c = th * dt
    A0, A, Fa, Y0, Y, Z, Bv = work
    ns, ndr = int(dev.src_idx.size), int(dev.dir_idx.size)
    _fn("g3_explicit")(_grid1(N), (THREADS,), (i32(n1), i32(n2), i32(n3), dt, c, i32(american), U, lam, dev.W, dev.M,
                                               *dev.G, A0, A, Fa, Y0, Y))
    if ns:
        _fn("g3_src_first")(_grid1(ns), (THREADS,), (i32(ns), i64(N), dt, c, dev.src_idx, dev.src_dir, sold, snew, A, Fa, Y0, Y))

    def sweeps(R, X):
        for d in range(3):
            if d > 0 and ns:
                _fn("g3_src_add")(_grid1(ns), (THREADS,), (i32(ns), i32(d), c, dev.src_idx, dev.src_dir, snew, R))
            if ndr:
                _fn("g3_set")(_grid1(ndr), (THREADS,), (i32(ndr), dev.dir_idx, gnew, R))
            cx = 0.0 if d == 0 else c
            Xd = R if d == 0 else X[(d) * N:(d + 1) * N]
            if d < 2:
                nl = n2 * n3 if d == 0 else n1 * n3
                _fn("g3_solve01")(_grid1(nl), (THREADS,), (i32(n1), i32(n2), i32(n3), i32(d), cx, R, Xd, *dev_b.fac[d]))
            elif axis2 == "tiled":
                lines = n1 * n2
                blocks = (lines + 32 * 4 - 1) // (32 * 4)
                _fn("g3_solve2_tiled")((blocks,), (128,), (i32(n1), i32(n2), i32(n3), cx, R, Xd, *dev_b.fac[2]))
            else:
                _fn("g3_solve2_plain")(_grid1(n1 * n2), (THREADS,), (i32(n1), i32(n2), i32(n3), cx, R, Xd, *dev_b.fac[2]))

    sweeps(Y, A)
    R = Y
    if scheme != _solver.K.DO:
        _fn("g3_correct")(_grid1(N), (THREADS,), (i32(n1), i32(n2), i32(n3), i32(scheme), dt, th, Y, Y0, A0, A, Fa,
                                                  dev_b.W, dev_b.M, *dev_b.G, Z, Bv))
        if ns:
            _fn("g3_src_correct")(_grid1(ns), (THREADS,), (i32(ns), i64(N), i32(scheme), dt, th, dev.src_idx, dev.src_dir,
                                                          snew, Z, Bv))
        sweeps(Z, Bv if scheme == _solver.K.HV else A)
        R = Z
    _fn("g3_finish")(_grid1(N), (THREADS,), (i64(N), dt, i32(american), i32(project), R, phi, U, lam))


def solve(pde: PDE, payoff: np.ndarray, maturity: float, time_steps: int = 100, scheme: Any = "mcs",
          theta: float | None = None, rannacher: int = 2, exercise: str = "european", obstacle: np.ndarray | None = None,
          exercise_taus=(), axis2: str = "tiled") -> _solver.Solution:
    """GPU version of :func:`optiond.kernels.adi.solver.solve` for 3-D PDEs.

    The operator is assembled on the host (the CPU code) and copied once; a PDE with
    time-dependent coefficients is re-assembled on the host and copied at every level (correct
    but slower: keep such terms few, see ``PDE.time_dependent``). ``axis2``: ``"tiled"``
    (shared-memory tiles, default) or ``"plain"`` (one thread per line, uncoalesced) sweeps
    along the contiguous axis.

    Returns:
        :class:`~optiond.kernels.adi.solver.Solution` with host arrays.

    Raises:
        ValueError: not a 3-D PDE, or the arguments :func:`solve` rejects.
    """
    cp = _gpu.cupy()

    if pde.ndim != 3:
        raise ValueError("the generic GPU solver takes 3-D PDEs (2-D Heston: heston_price_batch)")
    code = _solver.scheme_code(scheme)
    th = _solver.DEFAULT_THETA[code] if theta is None else float(theta)
    exercise = str(exercise).lower()
    if exercise not in _solver.EXERCISE:
        raise ValueError(f"exercise = {exercise!r}: expected one of {_solver.EXERCISE}")
    shape = pde.shape
    N = int(np.prod(shape))
    if exercise != "european" and obstacle is None:
        raise ValueError("american/bermudan exercise needs the obstacle (exercise value)")
    sch = _solver.make_schedule(maturity, time_steps, code, th, rannacher, exercise_taus if exercise == "bermudan" else ())
    american = exercise == "american"
    t0 = time.perf_counter()
    op = assemble(pde, 0.0)
    td = bool(pde.time_dependent)
    dev_a = _Dev3(op, shape)
    op_b = assemble(pde, float(sch.taus[1])) if td else op
    dev_b = _Dev3(op_b, shape) if td else dev_a
    U = cp.asarray(np.ascontiguousarray(payoff, dtype=np.float64).reshape(-1))
    phi = cp.asarray(np.ascontiguousarray(obstacle if obstacle is not None else np.zeros(shape), dtype=np.float64).reshape(-1))
    lam = cp.zeros(N)
    work = (cp.empty(N), cp.empty(3 * N), cp.empty(N), cp.empty(N), cp.empty(N), cp.empty(N), cp.empty(3 * N))
    gd = gs = None
    if not td:  # boundary data of every level, copied once
        levels = [boundary_values(pde, op, float(t)) for t in sch.taus]
        gd = [cp.asarray(lv[0]) for lv in levels]
        gs = [cp.asarray(lv[1]) for lv in levels]
    s_prev = cp.asarray(boundary_values(pde, op, 0.0)[1])
    for m in range(sch.dts.size):
        tb = float(sch.taus[m + 1])
        if td:
            if m > 0:
                op_b = assemble(pde, tb, update=op_b)
                dev_b.refresh(op_b)
            db, sb = boundary_values(pde, op_b, tb)
            gnew, snew, sold = cp.asarray(db), cp.asarray(sb), s_prev
        else:
            gnew, snew, sold = gd[m + 1], gs[m + 1], gs[m]
        dev_b.factor(float(sch.thetas[m] * sch.dts[m]))
        _step3_gpu(dev_a, dev_b, U, lam, phi, work, float(sch.dts[m]), float(sch.thetas[m]), int(sch.schemes[m]), american,
                   bool(sch.project[m]), gnew, sold, snew, axis2)
        if td:
            # the operator at tau_n becomes the explicit operator of the next step
            dev_a, dev_b = dev_b, dev_a
            op, op_b = op_b, op
            s_prev = snew
    cp.cuda.Stream.null.synchronize()
    elapsed = time.perf_counter() - t0
    values = cp.asnumpy(U).reshape(shape)
    lam_h = cp.asnumpy(lam).reshape(shape)
    rate = _solver._rate_of_change(pde, op, values, lam_h, float(sch.taus[-1]))
    return _solver.Solution(values, lam_h, rate, sch, elapsed, {"scheme": _solver.SCHEME_NAMES[code], "theta": th,
                                                               "steps": int(sch.dts.size), "device": _gpu.device_label()})
