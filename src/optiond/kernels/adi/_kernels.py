"""numba kernels of the ADI solver: explicit operator application, line (Thomas) solves and
one time step of the Douglas, Craig-Sneyd, Modified Craig-Sneyd and Hundsdorfer-Verwer
schemes, with optional Ikonen-Toivanen American exercise.

Layouts (C order): a 2-D grid function is ``u[i, j]`` of shape (n1, n2); a 3-D one ``u[i, j, k]``
of shape (n1, n2, n3). Directional weights ``W[d, p, ...]`` (shape (nd, 3, *grid)) act on nodes
``b(i)+p`` along axis d with ``b(i) = min(max(i-1, 0), n-3)`` (see ``operators.py``); mixed
coefficients ``M[pair, ...]``; first-derivative weights ``G_d`` of shape (n_d, 3).

Every line of a direction is solved by the Thomas algorithm on the pre-factorised matrix
``I - c A_d`` (``c = theta dt``), the factors being stored per node:

* ``FE``: elimination multiplier of the out-of-band entry on the first row (stored at i = 0)
  and on the last row (stored at i = n-1) of each line: ``r_0 -= FE_0 r_1``,
  ``r_{n-1} -= FE_{n-1} r_{n-2}``;
* ``LO``: sub-diagonal, ``INV``: 1 / pivot, ``CP``: ``up * INV`` (the Thomas c').

The forward sweep is ``y_i = (r_i - LO_i y_{i-1}) INV_i``, the back substitution
``x_i = y_i - CP_i x_{i+1}``. Lines of the strided directions are swept together (the inner loop
runs across lines, so it vectorises); lines of the contiguous direction are swept in blocks of
independent lines to hide the latency of the recurrence.

Scheme codes: 0 Douglas, 1 Craig-Sneyd, 2 Modified Craig-Sneyd, 3 Hundsdorfer-Verwer.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

DO, CS, MCS, HV = 0, 1, 2, 3
FM = {"contract", "arcp", "nsz"}


@nb.njit(inline="always")
def _b(i, n):
    if i == 0:
        return 0
    if i == n - 1:
        return n - 3
    return i - 1


# --------------------------------------------------------------------------------------------
# 1-D factorisation of one line (shared by both dimensions)
# --------------------------------------------------------------------------------------------


@nb.njit(inline="always")
def _factor_line(w0, w1, w2, c, LO, INV, CP, FE, n):
    """Factor I - c A on one line. ``w0, w1, w2``: the line's weights (length n, base-index
    layout); outputs LO, INV, CP, FE (length n)."""
    # first row: entries on columns 0, 1, 2
    d0 = 1.0 - c * w0[0]
    u0 = -c * w1[0]
    e0 = -c * w2[0]
    lo1 = -c * w0[1]
    d1 = 1.0 - c * w1[1]
    up1 = -c * w2[1]
    f0 = 0.0
    if e0 != 0.0 and up1 != 0.0:
        f0 = e0 / up1
        d0 -= f0 * lo1
        u0 -= f0 * d1
    FE[0] = f0
    # last row: entries on columns n-3, n-2, n-1
    eN = -c * w0[n - 1]
    lN = -c * w1[n - 1]
    dN = 1.0 - c * w2[n - 1]
    lo2 = -c * w0[n - 2]
    d2 = 1.0 - c * w1[n - 2]
    up2 = -c * w2[n - 2]
    fN = 0.0
    if eN != 0.0 and lo2 != 0.0:
        fN = eN / lo2
        lN -= fN * d2
        dN -= fN * up2
    FE[n - 1] = fN
    LO[0] = 0.0
    inv = 1.0 / d0
    INV[0] = inv
    cp = u0 * inv
    CP[0] = cp
    for i in range(1, n - 1):
        lo = -c * w0[i]
        inv = 1.0 / ((1.0 - c * w1[i]) - lo * cp)
        cp = (-c * w2[i]) * inv
        LO[i] = lo
        INV[i] = inv
        CP[i] = cp
    LO[n - 1] = lN
    INV[n - 1] = 1.0 / (dN - lN * cp)
    CP[n - 1] = 0.0


# --------------------------------------------------------------------------------------------
# 2-D
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True, nogil=True)
def factor2(W, d, c, LO, INV, CP, FE):
    """Factor ``I - c A_d`` for every line of direction d (0 or 1) of a 2-D grid."""
    n1, n2 = W.shape[2], W.shape[3]
    if d == 0:
        w0 = np.empty(n1)
        w1 = np.empty(n1)
        w2 = np.empty(n1)
        lo = np.empty(n1)
        inv = np.empty(n1)
        cp = np.empty(n1)
        fe = np.empty(n1)
        for j in range(n2):
            for i in range(n1):
                w0[i] = W[0, 0, i, j]
                w1[i] = W[0, 1, i, j]
                w2[i] = W[0, 2, i, j]
            _factor_line(w0, w1, w2, c, lo, inv, cp, fe, n1)
            for i in range(n1):
                LO[i, j] = lo[i]
                INV[i, j] = inv[i]
                CP[i, j] = cp[i]
                FE[i, j] = fe[i]
    else:
        for i in range(n1):
            _factor_line(W[1, 0, i], W[1, 1, i], W[1, 2, i], c, LO[i], INV[i], CP[i], FE[i], n2)


@nb.njit(cache=True, nogil=True, fastmath=FM)
def explicit2(u, W, M, G0, G1, out0, out1, out2):
    """``out0 = A_0 u`` (mixed), ``out1 = A_1 u`` (axis 0), ``out2 = A_2 u`` (axis 1)."""
    n1, n2 = u.shape
    h00, h01, h02 = G1[0, 0], G1[0, 1], G1[0, 2]
    hN0, hN1, hN2 = G1[n2 - 1, 0], G1[n2 - 1, 1], G1[n2 - 1, 2]
    for i in range(n1):
        bi = _b(i, n1)
        g0, g1, g2 = G0[i, 0], G0[i, 1], G0[i, 2]
        ua = u[bi]
        ub = u[bi + 1]
        uc = u[bi + 2]
        ui = u[i]
        wa0, wa1, wa2 = W[0, 0, i], W[0, 1, i], W[0, 2, i]
        wb0, wb1, wb2 = W[1, 0, i], W[1, 1, i], W[1, 2, i]
        m = M[0, i]
        o0, o1, o2 = out0[i], out1[i], out2[i]
        for j in range(n2):
            o1[j] = wa0[j] * ua[j] + wa1[j] * ub[j] + wa2[j] * uc[j]
        # j = 0 and j = n2-1: one-sided in direction 1
        o2[0] = wb0[0] * ui[0] + wb1[0] * ui[1] + wb2[0] * ui[2]
        o0[0] = m[0] * (g0 * (h00 * ua[0] + h01 * ua[1] + h02 * ua[2])
                        + g1 * (h00 * ub[0] + h01 * ub[1] + h02 * ub[2])
                        + g2 * (h00 * uc[0] + h01 * uc[1] + h02 * uc[2]))
        for j in range(1, n2 - 1):
            o2[j] = wb0[j] * ui[j - 1] + wb1[j] * ui[j] + wb2[j] * ui[j + 1]
            q0, q1, q2 = G1[j, 0], G1[j, 1], G1[j, 2]
            o0[j] = m[j] * (g0 * (q0 * ua[j - 1] + q1 * ua[j] + q2 * ua[j + 1])
                            + g1 * (q0 * ub[j - 1] + q1 * ub[j] + q2 * ub[j + 1])
                            + g2 * (q0 * uc[j - 1] + q1 * uc[j] + q2 * uc[j + 1]))
        J = n2 - 1
        o2[J] = wb0[J] * ui[J - 2] + wb1[J] * ui[J - 1] + wb2[J] * ui[J]
        o0[J] = m[J] * (g0 * (hN0 * ua[J - 2] + hN1 * ua[J - 1] + hN2 * ua[J])
                        + g1 * (hN0 * ub[J - 2] + hN1 * ub[J - 1] + hN2 * ub[J])
                        + g2 * (hN0 * uc[J - 2] + hN1 * uc[J - 1] + hN2 * uc[J]))


@nb.njit(cache=True, nogil=True, fastmath=FM)
def solve2_ax0(r, LO, INV, CP, FE):
    """Solve ``(I - c A_1) x = r`` in place along axis 0 (all n2 lines at once)."""
    n1, n2 = r.shape
    for j in range(n2):
        r[0, j] -= FE[0, j] * r[1, j]
        r[n1 - 1, j] -= FE[n1 - 1, j] * r[n1 - 2, j]
        r[0, j] *= INV[0, j]
    for i in range(1, n1):
        rp = r[i - 1]
        ri = r[i]
        lo = LO[i]
        iv = INV[i]
        for j in range(n2):
            ri[j] = (ri[j] - lo[j] * rp[j]) * iv[j]
    for i in range(n1 - 2, -1, -1):
        rn = r[i + 1]
        ri = r[i]
        cp = CP[i]
        for j in range(n2):
            ri[j] -= cp[j] * rn[j]


LINE_BLOCK = 16


@nb.njit(cache=True, nogil=True, fastmath=FM)
def solve2_ax1(r, LO, INV, CP, FE):
    """Solve ``(I - c A_2) x = r`` in place along axis 1 (contiguous lines), sweeping blocks of
    ``LINE_BLOCK`` independent lines together so the recurrences overlap."""
    n1, n2 = r.shape
    for i in range(n1):
        r[i, 0] -= FE[i, 0] * r[i, 1]
        r[i, n2 - 1] -= FE[i, n2 - 1] * r[i, n2 - 2]
        r[i, 0] *= INV[i, 0]
    for ib in range(0, n1, LINE_BLOCK):
        ie = min(ib + LINE_BLOCK, n1)
        for j in range(1, n2):
            for i in range(ib, ie):
                r[i, j] = (r[i, j] - LO[i, j] * r[i, j - 1]) * INV[i, j]
        for j in range(n2 - 2, -1, -1):
            for i in range(ib, ie):
                r[i, j] -= CP[i, j] * r[i, j + 1]


LANES = 16


@nb.njit(cache=True, nogil=True)
def block_factors(LO, INV, CP, LOb, INVb, CPb):
    """Copy axis-1 factors (n1, n2) into the blocked layout (ceil(n1/LANES), n2, LANES): line
    ``i = b*LANES + l`` is lane l of block b; padding lanes get the identity (LO = CP = 0,
    INV = 1)."""
    n1, n2 = LO.shape
    nb_ = LOb.shape[0]
    for b in range(nb_):
        for l in range(LANES):
            i = b * LANES + l
            for j in range(n2):
                if i < n1:
                    LOb[b, j, l] = LO[i, j]
                    INVb[b, j, l] = INV[i, j]
                    CPb[b, j, l] = CP[i, j]
                else:
                    LOb[b, j, l] = 0.0
                    INVb[b, j, l] = 1.0
                    CPb[b, j, l] = 0.0


@nb.njit(cache=True, nogil=True, fastmath=FM)
def solve2_ax1b(r, X, c, LOb, INVb, CPb, FE, tb):
    """Solve ``(I - c A_2) x = r - c X`` in place along axis 1 (the contiguous lines).

    LANES lines at a time are gathered into ``tb`` (n2, LANES), so the Thomas recurrences of
    the block run side by side in SIMD lanes, then scattered back. Factors in the blocked
    layout of :func:`block_factors`. The arithmetic per element is that of
    :func:`solve2_ax1`."""
    n1, n2 = r.shape
    nblk = LOb.shape[0]
    for b in range(nblk):
        i0 = b * LANES
        for l in range(LANES):
            i = i0 + l
            if i < n1:
                ri = r[i]
                xi = X[i]
                for j in range(n2):
                    tb[j, l] = ri[j] - c * xi[j]
                tb[0, l] -= FE[i, 0] * tb[1, l]
                tb[n2 - 1, l] -= FE[i, n2 - 1] * tb[n2 - 2, l]
            else:
                for j in range(n2):
                    tb[j, l] = 0.0
        lo0 = INVb[b, 0]
        t0 = tb[0]
        for l in range(LANES):
            t0[l] *= lo0[l]
        for j in range(1, n2):
            tj = tb[j]
            tp = tb[j - 1]
            lo = LOb[b, j]
            iv = INVb[b, j]
            for l in range(LANES):
                tj[l] = (tj[l] - lo[l] * tp[l]) * iv[l]
        for j in range(n2 - 2, -1, -1):
            tj = tb[j]
            tn = tb[j + 1]
            cp = CPb[b, j]
            for l in range(LANES):
                tj[l] -= cp[l] * tn[l]
        for l in range(LANES):
            i = i0 + l
            if i < n1:
                ri = r[i]
                for j in range(n2):
                    ri[j] = tb[j, l]


@nb.njit(cache=True, nogil=True)
def _add_src2(X1, X2, src_idx, src_dir, val, scale):
    n2 = X1.shape[1]
    for s in range(src_idx.shape[0]):
        i = src_idx[s] // n2
        j = src_idx[s] - i * n2
        if src_dir[s] == 0:
            X1[i, j] += scale * val[s]
        else:
            X2[i, j] += scale * val[s]


@nb.njit(cache=True, nogil=True)
def _set_dir2(Y, dir_idx, g):
    n2 = Y.shape[1]
    for s in range(dir_idx.shape[0]):
        i = dir_idx[s] // n2
        Y[i, dir_idx[s] - i * n2] = g[s]


@nb.njit(cache=True, nogil=True, fastmath=FM)
def _stage_rhs2(Y, prev, X, c, same):
    """``Y = prev - c X`` (``same``: prev is Y itself)."""
    n1, n2 = Y.shape
    for i in range(n1):
        for j in range(n2):
            if same:
                Y[i, j] -= c * X[i, j]
            else:
                Y[i, j] = prev[i, j] - c * X[i, j]


@nb.njit(inline="always")
def _rowops2(i, u, W, M, G0, G1T, n1, n2, a0, a1, a2, t):
    """Row i of the mixed (a0) and directional (a1: axis 0, a2: axis 1) operators applied to
    u, into the row buffers a0, a1, a2 (length n2). G1T: the axis-1 first-derivative weights,
    transposed to shape (3, n2) so the inner loop vectorises; t: a row buffer."""
    bi = _b(i, n1)
    g0, g1, g2 = G0[i, 0], G0[i, 1], G0[i, 2]
    ua = u[bi]
    ub = u[bi + 1]
    uc = u[bi + 2]
    ui = u[i]
    wa0, wa1, wa2 = W[0, 0, i], W[0, 1, i], W[0, 2, i]
    wb0, wb1, wb2 = W[1, 0, i], W[1, 1, i], W[1, 2, i]
    m = M[0, i]
    q0, q1, q2 = G1T[0], G1T[1], G1T[2]
    for j in range(n2):
        a1[j] = wa0[j] * ua[j] + wa1[j] * ub[j] + wa2[j] * uc[j]
    # t = (D_0 u)[i, :] (axis-0 derivative of the row), then a0 = M * D_1 t
    for j in range(n2):
        t[j] = g0 * ua[j] + g1 * ub[j] + g2 * uc[j]
    a2[0] = wb0[0] * ui[0] + wb1[0] * ui[1] + wb2[0] * ui[2]
    a0[0] = m[0] * (q0[0] * t[0] + q1[0] * t[1] + q2[0] * t[2])
    for j in range(1, n2 - 1):
        a2[j] = wb0[j] * ui[j - 1] + wb1[j] * ui[j] + wb2[j] * ui[j + 1]
    for j in range(1, n2 - 1):
        a0[j] = m[j] * (q0[j] * t[j - 1] + q1[j] * t[j] + q2[j] * t[j + 1])
    J = n2 - 1
    a2[J] = wb0[J] * ui[J - 2] + wb1[J] * ui[J - 1] + wb2[J] * ui[J]
    a0[J] = m[J] * (q0[J] * t[J - 2] + q1[J] * t[J - 1] + q2[J] * t[J])


@nb.njit(cache=True, nogil=True, fastmath=FM)
def step2(U, lam, phi, Wa, Ma, Wb, Mb, G0, G1T, LO0, INV0, CP0, FE0, LO1, INV1, CP1, FE1,
          dt, th, scheme, american, dir_idx, gnew, src_idx, src_dir, sold, snew,
          Y0, Y, A0, A1, A2, Fa, Z, B2, r0, r1, r2, rt, tb):
    """One ADI step of a 2-D problem, U (at tau_{n-1}) -> U (at tau_n), in place.

    ``Wa, Ma``: operator at tau_{n-1}; ``Wb, Mb``: at tau_n (the same arrays when the PDE does
    not depend on time). The factors must be those of ``I - th*dt*A_d(tau_n)``. ``gnew``:
    Dirichlet values at tau_n; ``sold, snew``: Neumann sources at tau_{n-1}, tau_n. With
    ``american`` the step is the ADI-IT step (Haentjens & in 't Hout 2015): ``lam * dt`` is
    added to the explicit stage and U, lam are updated by the Ikonen-Toivanen formulas.
    Y0 ... B2 are work arrays of the grid's shape, r0 ... rt row buffers of length n2, tb a
    (n2, LANES) buffer. The axis-1 factors ``LO1, INV1, CP1`` are in the blocked layout of
    :func:`block_factors`; ``FE1`` in the plain one.

    The explicit evaluations are fused row by row with the stage arithmetic: one pass over the
    grid computes ``A_0 U, A_1 U, A_2 U``, ``Y_0`` and the first stage's right-hand side; one
    pass computes ``F(t_n, Y_k)``, the corrected ``Yt_0`` and again the first right-hand side.
    """
    n1, n2 = U.shape
    c = th * dt
    # ---- explicit stage at U (tau_{n-1})
    for i in range(n1):
        _rowops2(i, U, Wa, Ma, G0, G1T, n1, n2, r0, r1, r2, rt)
        for j in range(n2):
            a0, a1, a2 = r0[j], r1[j], r2[j]
            fa = a0 + a1 + a2
            A0[i, j] = a0
            A1[i, j] = a1
            A2[i, j] = a2
            Fa[i, j] = fa
            y0 = U[i, j] + dt * fa
            if american:
                y0 += dt * lam[i, j]
            Y0[i, j] = y0
            Y[i, j] = y0 - c * a1
    # Neumann sources at tau_{n-1} belong to F_d(tau_{n-1}, U); at tau_n to the implicit stage
    for s in range(src_idx.shape[0]):
        i = src_idx[s] // n2
        j = src_idx[s] - i * n2
        v = sold[s]
        Fa[i, j] += v
        Y0[i, j] += dt * v
        if src_dir[s] == 0:
            A1[i, j] += v
            Y[i, j] += (dt - c) * v + c * snew[s]
        else:
            A2[i, j] += v
            Y[i, j] += dt * v
    # ---- stage 1 (axis 0): (I - c A_1) Y1 = Y0 - c F_1(tau_{n-1}, U) + c s_1(tau_n)
    _set_dir2(Y, dir_idx, gnew)
    solve2_ax0(Y, LO0, INV0, CP0, FE0)
    # ---- stage 2 (axis 1): rhs Y - c A2 (+ c s_2(tau_n)); A2 vanishes on Dirichlet nodes, so
    # the sources and Dirichlet values may be put in before the subtraction
    _add_src_one2(Y, src_idx, src_dir, snew, c, 1)
    _set_dir2(Y, dir_idx, gnew)
    solve2_ax1b(Y, A2, c, LO1, INV1, CP1, FE1, tb)
    if scheme != DO:
        # ---- correction: Z = Yt_0 - c X_1, with X = F(tau_n, Y_k) (HV) or F(tau_{n-1}, U)
        hdt = 0.5 * dt
        tdt = th * dt
        wdt = (0.5 - th) * dt
        for i in range(n1):
            _rowops2(i, Y, Wb, Mb, G0, G1T, n1, n2, r0, r1, r2, rt)
            y0 = Y0[i]
            a0 = A0[i]
            fa = Fa[i]
            z = Z[i]
            if scheme == CS:
                a1 = A1[i]
                for j in range(n2):
                    z[j] = y0[j] + hdt * (r0[j] - a0[j]) - c * a1[j]
            elif scheme == MCS:
                a1 = A1[i]
                for j in range(n2):
                    z[j] = y0[j] + tdt * (r0[j] - a0[j]) + wdt * ((r0[j] + r1[j] + r2[j]) - fa[j]) - c * a1[j]
            else:
                b2 = B2[i]
                for j in range(n2):
                    z[j] = y0[j] + hdt * ((r0[j] + r1[j] + r2[j]) - fa[j]) - c * r1[j]
                    b2[j] = r2[j]
        for s in range(src_idx.shape[0]):
            i = src_idx[s] // n2
            j = src_idx[s] - i * n2
            v = snew[s]
            if scheme == MCS:
                Z[i, j] += (0.5 - th) * dt * v
            elif scheme == HV:
                Z[i, j] += 0.5 * dt * v
            if src_dir[s] == 0:
                if scheme != HV:  # HV: -c (b1 + v) + c v = -c b1
                    Z[i, j] += c * v
            elif scheme == HV:
                B2[i, j] += v
        _set_dir2(Z, dir_idx, gnew)
        solve2_ax0(Z, LO0, INV0, CP0, FE0)
        _add_src_one2(Z, src_idx, src_dir, snew, c, 1)
        _set_dir2(Z, dir_idx, gnew)
        if scheme == HV:
            solve2_ax1b(Z, B2, c, LO1, INV1, CP1, FE1, tb)
        else:
            solve2_ax1b(Z, A2, c, LO1, INV1, CP1, FE1, tb)
        R = Z
    else:
        R = Y
    if american:
        for i in range(n1):
            for j in range(n2):
                ut = R[i, j]
                lo = lam[i, j]
                U[i, j] = max(ut - dt * lo, phi[i, j])
                lam[i, j] = max(0.0, lo + (phi[i, j] - ut) / dt)
    else:
        for i in range(n1):
            for j in range(n2):
                U[i, j] = R[i, j]


@nb.njit(cache=True, nogil=True)
def _add_src_one2(Y, src_idx, src_dir, val, scale, d):
    n2 = Y.shape[1]
    for s in range(src_idx.shape[0]):
        if src_dir[s] == d:
            i = src_idx[s] // n2
            Y[i, src_idx[s] - i * n2] += scale * val[s]


@nb.njit(cache=True, nogil=True)
def march2(U, lam, phi, W, M, G0, G1, dts, ths, schemes, american, project,
           dir_idx, dir_vals, src_idx, src_dir, src_vals):
    """All time steps of a 2-D problem whose operator does not depend on tau.

    Args:
        U: (n1, n2) values at tau_0 (the payoff), overwritten with the values at the last level.
        lam: (n1, n2) Ikonen-Toivanen multiplier (zeros in), overwritten.
        phi: (n1, n2) exercise value.
        dts, ths, schemes: per step, the step size, theta and scheme code.
        american: apply the Ikonen-Toivanen splitting at every step.
        project: per step, 1 where ``U = max(U, phi)`` follows the step (Bermudan dates).
        dir_vals: (n_levels, n_dir) Dirichlet values per level; src_vals: (n_levels, n_src).
    """
    n1, n2 = U.shape
    Y0 = np.empty((n1, n2))
    Y = np.empty((n1, n2))
    A0 = np.empty((n1, n2))
    A1 = np.empty((n1, n2))
    A2 = np.empty((n1, n2))
    Fa = np.empty((n1, n2))
    Z = np.empty((n1, n2))
    B2 = np.empty((n1, n2))
    r0 = np.empty(n2)
    r1 = np.empty(n2)
    r2 = np.empty(n2)
    rt = np.empty(n2)
    tb = np.empty((n2, LANES))
    nblk = (n1 + LANES - 1) // LANES
    LOb = np.empty((nblk, n2, LANES))
    INVb = np.empty((nblk, n2, LANES))
    CPb = np.empty((nblk, n2, LANES))
    G1T = np.ascontiguousarray(G1.T)
    LO0 = np.empty((n1, n2))
    INV0 = np.empty((n1, n2))
    CP0 = np.empty((n1, n2))
    FE0 = np.empty((n1, n2))
    LO1 = np.empty((n1, n2))
    INV1 = np.empty((n1, n2))
    CP1 = np.empty((n1, n2))
    FE1 = np.empty((n1, n2))
    c_prev = -1.0
    for m in range(dts.shape[0]):
        c = ths[m] * dts[m]
        if c != c_prev:
            factor2(W, 0, c, LO0, INV0, CP0, FE0)
            factor2(W, 1, c, LO1, INV1, CP1, FE1)
            block_factors(LO1, INV1, CP1, LOb, INVb, CPb)
            c_prev = c
        step2(U, lam, phi, W, M, W, M, G0, G1T, LO0, INV0, CP0, FE0, LOb, INVb, CPb, FE1,
              dts[m], ths[m], schemes[m], american, dir_idx, dir_vals[m + 1], src_idx, src_dir,
              src_vals[m], src_vals[m + 1], Y0, Y, A0, A1, A2, Fa, Z, B2, r0, r1, r2, rt, tb)
        if project[m]:
            for i in range(n1):
                for j in range(n2):
                    if phi[i, j] > U[i, j]:
                        U[i, j] = phi[i, j]


# --------------------------------------------------------------------------------------------
# 3-D (parallel over the outer index)
# --------------------------------------------------------------------------------------------


@nb.njit(cache=True, nogil=True, parallel=True)
def factor3(W, d, c, LO, INV, CP, FE):
    """Factor ``I - c A_d`` for every line of direction d (0, 1 or 2) of a 3-D grid."""
    n1, n2, n3 = W.shape[2], W.shape[3], W.shape[4]
    if d == 2:
        for i in nb.prange(n1):
            for j in range(n2):
                _factor_line(W[2, 0, i, j], W[2, 1, i, j], W[2, 2, i, j], c, LO[i, j], INV[i, j], CP[i, j], FE[i, j], n3)
    elif d == 1:
        for i in nb.prange(n1):
            w0 = np.empty(n2)
            w1 = np.empty(n2)
            w2 = np.empty(n2)
            lo = np.empty(n2)
            inv = np.empty(n2)
            cp = np.empty(n2)
            fe = np.empty(n2)
            for k in range(n3):
                for j in range(n2):
                    w0[j] = W[1, 0, i, j, k]
                    w1[j] = W[1, 1, i, j, k]
                    w2[j] = W[1, 2, i, j, k]
                _factor_line(w0, w1, w2, c, lo, inv, cp, fe, n2)
                for j in range(n2):
                    LO[i, j, k] = lo[j]
                    INV[i, j, k] = inv[j]
                    CP[i, j, k] = cp[j]
                    FE[i, j, k] = fe[j]
    else:
        for j in nb.prange(n2):
            w0 = np.empty(n1)
            w1 = np.empty(n1)
            w2 = np.empty(n1)
            lo = np.empty(n1)
            inv = np.empty(n1)
            cp = np.empty(n1)
            fe = np.empty(n1)
            for k in range(n3):
                for i in range(n1):
                    w0[i] = W[0, 0, i, j, k]
                    w1[i] = W[0, 1, i, j, k]
                    w2[i] = W[0, 2, i, j, k]
                _factor_line(w0, w1, w2, c, lo, inv, cp, fe, n1)
                for i in range(n1):
                    LO[i, j, k] = lo[i]
                    INV[i, j, k] = inv[i]
                    CP[i, j, k] = cp[i]
                    FE[i, j, k] = fe[i]


@nb.njit(cache=True, nogil=True, parallel=True, fastmath=FM)
def explicit3(u, W, M, G0, G1, G2, out0, out1, out2, out3):
    """``out0`` = mixed terms, ``out1..3`` = directional operators applied to u (3-D)."""
    n1, n2, n3 = u.shape
    for i in nb.prange(n1):
        bi = _b(i, n1)
        g0, g1, g2 = G0[i, 0], G0[i, 1], G0[i, 2]
        for j in range(n2):
            bj = _b(j, n2)
            q0, q1, q2 = G1[j, 0], G1[j, 1], G1[j, 2]
            for k in range(n3):
                bk = _b(k, n3)
                e0, e1, e2 = G2[k, 0], G2[k, 1], G2[k, 2]
                out1[i, j, k] = W[0, 0, i, j, k] * u[bi, j, k] + W[0, 1, i, j, k] * u[bi + 1, j, k] + W[0, 2, i, j, k] * u[bi + 2, j, k]
                out2[i, j, k] = W[1, 0, i, j, k] * u[i, bj, k] + W[1, 1, i, j, k] * u[i, bj + 1, k] + W[1, 2, i, j, k] * u[i, bj + 2, k]
                out3[i, j, k] = W[2, 0, i, j, k] * u[i, j, bk] + W[2, 1, i, j, k] * u[i, j, bk + 1] + W[2, 2, i, j, k] * u[i, j, bk + 2]
                m01 = (g0 * (q0 * u[bi, bj, k] + q1 * u[bi, bj + 1, k] + q2 * u[bi, bj + 2, k])
                       + g1 * (q0 * u[bi + 1, bj, k] + q1 * u[bi + 1, bj + 1, k] + q2 * u[bi + 1, bj + 2, k])
                       + g2 * (q0 * u[bi + 2, bj, k] + q1 * u[bi + 2, bj + 1, k] + q2 * u[bi + 2, bj + 2, k]))
                m02 = (g0 * (e0 * u[bi, j, bk] + e1 * u[bi, j, bk + 1] + e2 * u[bi, j, bk + 2])
                       + g1 * (e0 * u[bi + 1, j, bk] + e1 * u[bi + 1, j, bk + 1] + e2 * u[bi + 1, j, bk + 2])
                       + g2 * (e0 * u[bi + 2, j, bk] + e1 * u[bi + 2, j, bk + 1] + e2 * u[bi + 2, j, bk + 2]))
                m12 = (q0 * (e0 * u[i, bj, bk] + e1 * u[i, bj, bk + 1] + e2 * u[i, bj, bk + 2])
                       + q1 * (e0 * u[i, bj + 1, bk] + e1 * u[i, bj + 1, bk + 1] + e2 * u[i, bj + 1, bk + 2])
                       + q2 * (e0 * u[i, bj + 2, bk] + e1 * u[i, bj + 2, bk + 1] + e2 * u[i, bj + 2, bk + 2]))
                out0[i, j, k] = M[0, i, j, k] * m01 + M[1, i, j, k] * m02 + M[2, i, j, k] * m12


@nb.njit(cache=True, nogil=True, parallel=True, fastmath=FM)
def solve3(r, d, LO, INV, CP, FE):
    """Solve ``(I - c A_d) x = r`` in place along axis d of a 3-D grid."""
    n1, n2, n3 = r.shape
    if d == 0:
        for j in nb.prange(n2):
            for k in range(n3):
                r[0, j, k] -= FE[0, j, k] * r[1, j, k]
                r[n1 - 1, j, k] -= FE[n1 - 1, j, k] * r[n1 - 2, j, k]
                r[0, j, k] *= INV[0, j, k]
            for i in range(1, n1):
                for k in range(n3):
                    r[i, j, k] = (r[i, j, k] - LO[i, j, k] * r[i - 1, j, k]) * INV[i, j, k]
            for i in range(n1 - 2, -1, -1):
                for k in range(n3):
                    r[i, j, k] -= CP[i, j, k] * r[i + 1, j, k]
    elif d == 1:
        for i in nb.prange(n1):
            for k in range(n3):
                r[i, 0, k] -= FE[i, 0, k] * r[i, 1, k]
                r[i, n2 - 1, k] -= FE[i, n2 - 1, k] * r[i, n2 - 2, k]
                r[i, 0, k] *= INV[i, 0, k]
            for j in range(1, n2):
                for k in range(n3):
                    r[i, j, k] = (r[i, j, k] - LO[i, j, k] * r[i, j - 1, k]) * INV[i, j, k]
            for j in range(n2 - 2, -1, -1):
                for k in range(n3):
                    r[i, j, k] -= CP[i, j, k] * r[i, j + 1, k]
    else:
        for i in nb.prange(n1):
            for j in range(n2):
                r[i, j, 0] -= FE[i, j, 0] * r[i, j, 1]
                r[i, j, n3 - 1] -= FE[i, j, n3 - 1] * r[i, j, n3 - 2]
                r[i, j, 0] *= INV[i, j, 0]
            for k in range(1, n3):
                for j in range(n2):
                    r[i, j, k] = (r[i, j, k] - LO[i, j, k] * r[i, j, k - 1]) * INV[i, j, k]
            for k in range(n3 - 2, -1, -1):
                for j in range(n2):
                    r[i, j, k] -= CP[i, j, k] * r[i, j, k + 1]


@nb.njit(cache=True, nogil=True, parallel=True, fastmath=FM)
def _axpy3(Y, P, X, c):
    """``Y = P + c X`` elementwise (P may be Y)."""
    n1, n2, n3 = Y.shape
    for i in nb.prange(n1):
        for j in range(n2):
            for k in range(n3):
                Y[i, j, k] = P[i, j, k] + c * X[i, j, k]


@nb.njit(cache=True, nogil=True)
def _add_src3(Y, src_idx, src_dir, val, scale):
    """Add the Neumann sources to a stack Y (3, n1, n2, n3) of directional results, each
    direction its own."""
    n2, n3 = Y.shape[2], Y.shape[3]
    for s in range(src_idx.shape[0]):
        f = src_idx[s]
        i = f // (n2 * n3)
        rem = f - i * n2 * n3
        j = rem // n3
        Y[src_dir[s], i, j, rem - j * n3] += scale * val[s]


@nb.njit(cache=True, nogil=True)
def _add_src3_one(Y, src_idx, src_dir, val, scale, d):
    """Add ``scale * val`` at the source nodes of direction d to Y (n1, n2, n3)."""
    n2, n3 = Y.shape[1], Y.shape[2]
    for s in range(src_idx.shape[0]):
        if src_dir[s] == d:
            f = src_idx[s]
            i = f // (n2 * n3)
            rem = f - i * n2 * n3
            j = rem // n3
            Y[i, j, rem - j * n3] += scale * val[s]


@nb.njit(cache=True, nogil=True)
def _set_dir3(Y, dir_idx, g):
    n2, n3 = Y.shape[1], Y.shape[2]
    for s in range(dir_idx.shape[0]):
        f = dir_idx[s]
        i = f // (n2 * n3)
        rem = f - i * n2 * n3
        j = rem // n3
        Y[i, j, rem - j * n3] = g[s]


@nb.njit(cache=True, nogil=True, parallel=True, fastmath=FM)
def _combine3(Y0, A0, A, B0, B, Y, dt, th, scheme):
    n1, n2, n3 = Y.shape
    for i in nb.prange(n1):
        for j in range(n2):
            for k in range(n3):
                if scheme == CS:
                    z = Y0[i, j, k] + 0.5 * dt * (B0[i, j, k] - A0[i, j, k])
                else:
                    fb = B0[i, j, k] + B[0, i, j, k] + B[1, i, j, k] + B[2, i, j, k]
                    fa = A0[i, j, k] + A[0, i, j, k] + A[1, i, j, k] + A[2, i, j, k]
                    if scheme == MCS:
                        z = Y0[i, j, k] + th * dt * (B0[i, j, k] - A0[i, j, k]) + (0.5 - th) * dt * (fb - fa)
                    else:
                        z = Y0[i, j, k] + 0.5 * dt * (fb - fa)
                Y[i, j, k] = z


@nb.njit(cache=True, nogil=True, parallel=True, fastmath=FM)
def _first3(U, lam, A0, A, Y0, dt, american):
    n1, n2, n3 = U.shape
    for i in nb.prange(n1):
        for j in range(n2):
            for k in range(n3):
                y0 = U[i, j, k] + dt * (A0[i, j, k] + A[0, i, j, k] + A[1, i, j, k] + A[2, i, j, k])
                if american:
                    y0 += dt * lam[i, j, k]
                Y0[i, j, k] = y0


@nb.njit(cache=True, nogil=True, parallel=True, fastmath=FM)
def _finish3(U, lam, phi, Y, dt, american, project):
    n1, n2, n3 = U.shape
    for i in nb.prange(n1):
        for j in range(n2):
            for k in range(n3):
                ut = Y[i, j, k]
                if american:
                    lo = lam[i, j, k]
                    U[i, j, k] = max(ut - dt * lo, phi[i, j, k])
                    lam[i, j, k] = max(0.0, lo + (phi[i, j, k] - ut) / dt)
                elif project:
                    U[i, j, k] = max(ut, phi[i, j, k])
                else:
                    U[i, j, k] = ut


def step3(U, lam, phi, Wa, Ma, Wb, Mb, G, fac, dt, th, scheme, american, project,
          dir_idx, gnew, src_idx, src_dir, sold, snew, work):
    """One ADI step of a 3-D problem (see :func:`step2`); ``fac[d] = (LO, INV, CP, FE)`` of
    ``I - th*dt*A_d(tau_n)``; ``work`` a dict of preallocated arrays. Driven from Python: each
    call below is one parallel numba kernel, so the interpreter overhead per step is small
    against a 3-D step."""
    Y0, Y, A0, A, B0, B = work["Y0"], work["Y"], work["A0"], work["A"], work["B0"], work["B"]
    explicit3(U, Wa, Ma, G[0], G[1], G[2], A0, A[0], A[1], A[2])
    _add_src3(A, src_idx, src_dir, sold, 1.0)
    _first3(U, lam, A0, A, Y0, dt, american)
    c = th * dt
    prev = Y0
    for d in range(3):
        _axpy3(Y, prev, A[d], -c)
        _add_src3_one(Y, src_idx, src_dir, snew, c, d)
        _set_dir3(Y, dir_idx, gnew)
        solve3(Y, d, *fac[d])
        prev = Y
    if scheme != DO:
        explicit3(Y, Wb, Mb, G[0], G[1], G[2], B0, B[0], B[1], B[2])
        _add_src3(B, src_idx, src_dir, snew, 1.0)
        _combine3(Y0, A0, A, B0, B, Y, dt, th, scheme)
        X = B if scheme == HV else A
        for d in range(3):
            _axpy3(Y, Y, X[d], -c)
            _add_src3_one(Y, src_idx, src_dir, snew, c, d)
            _set_dir3(Y, dir_idx, gnew)
            solve3(Y, d, *fac[d])
    _finish3(U, lam, phi, Y, dt, american, project)
