"""The QD+ start of the spectral engine's fixed point (Li 2005), CPU (numba): the critical price
of a put at every collocation node, each node's root find from its own seed, the nodes of a
chunk of options side by side in vector passes (:mod:`.vmath`). Step 1 of
:mod:`optiond.kernels.spectral.cpu`'s docstring; the GPU's twin is ``spectral.cu``'s ``qdplus``.
"""

from __future__ import annotations

import math

import numba as nb

from .vmath import _INV_SQRT_2PI, PAD, one_minus_exp, vexp, vlog, vncdf
from ..warmup import announce_compiles

announce_compiles()  # one line on stderr when a kernel here compiles (a cold cache)

#: QD+ root-find tolerance (relative to X): far under the QD+ approximation's own error; the
#: Halley steps converge cubically, so the start is within about 1e-10 relative (step 1 of the
#: module docstring says why it is kept that tight)
QDPLUS_TOL = 1e-6


@nb.njit(cache=True, nogil=True, error_model="numpy")
def qdplus_seed(K, r, q, sig, T):
    """``(su, c)``: the Barone-Adesi & Whaley (1987) seed of a put's critical price at time to
    expiry tau is ``su + (K - su) exp(((r - q) tau - 2 sigma sqrt(tau)) c)``, su the perpetual
    boundary ``K / (1 - 1 / q_inf)``, ``q_inf = (-(w - 1) - sqrt((w - 1)^2 + 8 r / sigma^2)) / 2``,
    w = 2 (r - q) / sigma^2, and ``c = K / (K - su)`` (Haug 2007, "The Complete Guide to Option
    Pricing Formulas", 2nd ed., section 3.3.2). su = 0 where q_inf is not negative (r = 0)."""
    s2 = sig * sig
    om = 2.0 * (r - q) / s2
    qinf = 0.5 * (-(om - 1.0) - math.sqrt((om - 1.0) ** 2 + 8.0 * r / s2))
    su = K / (1.0 - 1.0 / qinf) if qinf < 0.0 else 0.0
    return su, K / (K - su)


@nb.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False, inline="always")
def _qdplus_node_setup(qw, va, w, N, e, K, T, r, q, sig, X, su, ksu, lnk, sT, f):
    """Node e's inputs for :func:`qdplus_nodes` (its rows of ``qw``; the exponents of e^{-r tau},
    e^{-q tau} and the seed's exponential at ``va[e]``, ``va[N + e]``, ``va[2 N + e]``)."""
    tau = T * f * f
    v = sig * sT * f
    qw[e] = v
    qw[5 * w + e] = lnk
    qw[7 * w + e] = su                                       # the seed's constant, for the next pass
    qw[10 * w + e] = tau
    qw[11 * w + e] = K
    qw[12 * w + e] = r
    qw[13 * w + e] = q
    qw[14 * w + e] = sig * sig
    qw[15 * w + e] = X
    va[e] = -r * tau
    va[N + e] = -q * tau
    va[2 * N + e] = ((r - q) * tau - 2.0 * v) * ksu


@nb.njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def qdplus_nodes(opt, c, ft, H, qw, va, vb, vc, vd, kb, tol):
    """The QD+ critical prices of ``c`` puts (Li 2005) at the plan's nodes ``tau_j = T ft_j^2``:
    writes ``H_j = ln(B_j / X)^2`` of put i to ``H[i n + j]`` (``H`` flat, >= c n). The puts'
    inputs are the rows of ``opt`` (>= (6, c)): strike, expiry, rate, dividend yield,
    volatility and X = B(0+). At each node, the root of
    ``F(S) = (1 - e^{-q tau} Phi(-d+)) S - beta (K - S - p_E(S)) + A theta_E(S)`` (the QD+
    smooth-pasting condition with Li's c0 written out; A = 2 / (sigma^2 (2 lambda + omega - 1)))
    by Halley's method (as QuantLib's QD+ engine; the Newton step where Halley's factor
    1 / (1 - F F'' / 2F'^2) leaves [2/3, 2]) from the Barone-Adesi & Whaley seed
    (:func:`qdplus_seed`), kept in [1e-8 X, X] and stopped when a step is under ``tol X``. With
    ``d+ = ln(S / K) / v + ...``, v = sigma sqrt(tau), the derivatives are
    ``F' = (1 - e^{-q tau} Phi(-d+)) (1 + beta) + e^{-q tau} phi(d+) / v + A theta_E'`` and
    ``F'' = e^{-q tau} phi(d+) / (S v) ((1 + beta) - d+ / v + A (1 / 2 tau + q - d+ g))``,
    ``theta_E' = e^{-q tau} (phi(d+) g - q Phi(-d+))``, ``g = (q - r) / v + d- / 2 tau``.
    On 300 random contracts (the bench's ranges, the fast plan's 11 nodes) the slowest node
    takes 4.0 steps on average against Newton's 6.0. The nodes are independent (each from its own
    seed), so the root finds of all c n nodes run side by side: every step is one pass over the
    nodes still moving, compacted (the vectorised exp, log and Phi), and a batch solves the
    starts of a chunk of options together (``cpu._chunk_starts``); the GPU gives each node a
    lane or a thread's loop. A node's steps do not depend on the others, so its root is the same
    in any chunk. A node whose step fails (non-finite or zero derivative) or that has not
    converged in 100 steps keeps its seed. Scratch ``qw`` (>= 17 w, w = c n rounded up to
    :data:`PAD`), ``va, vb, vc, vd, kb`` (>= 3 c n)."""
    n = ft.shape[0]
    N = c * n
    w = (N + PAD - 1) // PAD * PAD
    # qw rows of w, node i n + j of put i: v | dr | dq | beta | A | c0 | x | seed | moving (1.0 / 0.0)
    # | 1 / v | 1 / (2 tau) | K | r | q | sigma^2 | X
    for i in range(c):
        K, T, r, q, sig = opt[0, i], opt[1, i], opt[2, i], opt[3, i], opt[4, i]
        su, ksu = qdplus_seed(K, r, q, sig, T)
        lnk = math.log(K)
        sT = math.sqrt(T)
        for j in range(n):
            _qdplus_node_setup(qw, va, w, N, i * n + j, K, T, r, q, sig, opt[5, i], su, ksu, lnk, sT, ft[j])
    vexp(va, vb, kb, 3 * N)                                  # e^{-r tau}, e^{-q tau}, the seed's exponential
    for e in range(N):                                       # branch-free, so the pass vectorises
        K, r, q, s2, X = qw[11 * w + e], qw[12 * w + e], qw[13 * w + e], qw[14 * w + e], qw[15 * w + e]
        tau = qw[10 * w + e]
        v = qw[e]
        dr = vb[e]
        is2 = 1.0 / s2
        om = 2.0 * (r - q) * is2
        ddr = r / one_minus_exp(r * tau, dr) if r != 0.0 else 1.0 / tau  # r / (1 - e^{-r tau})
        disc = (om - 1.0) ** 2 + 8.0 * ddr * is2
        sq = math.sqrt(disc)
        isq = 1.0 / sq
        lam = 0.5 * (-(om - 1.0) - sq)
        A = -2.0 * is2 * isq                       # 2 / (sigma^2 (2 lambda + omega - 1)), 2 lambda + omega - 1 = -sqrt(disc)
        iv = 1.0 / v
        su = qw[7 * w + e]
        seed = su + (K - su) * vb[2 * N + e]
        lo = 1e-8 * X
        x0 = seed if (seed > lo and seed < X) else (lo if seed <= lo else X)
        qw[w + e] = dr
        qw[2 * w + e] = vb[N + e]
        qw[3 * w + e] = A * dr * ddr * (1.0 - 2.0 * ddr * is2 * isq * isq) - lam
        qw[4 * w + e] = A
        qw[5 * w + e] = ((r - q) * tau - qw[5 * w + e]) * iv + 0.5 * v
        qw[6 * w + e] = x0
        qw[7 * w + e] = x0
        qw[8 * w + e] = 1.0
        qw[9 * w + e] = iv
        qw[10 * w + e] = 0.5 / tau
    xs = qw[6 * w:7 * w]
    for _ in range(100):
        # the nodes still moving, compacted (their indices in row 16, as floats): the passes run
        # over them alone, so a chunk's slow nodes do not drag the converged ones along
        M = 0
        for e in range(N):
            if qw[8 * w + e] != 0.0:
                qw[16 * w + M] = e
                M += 1
        if M == 0:
            break
        for k in range(M):
            va[k] = xs[int(qw[16 * w + k])]
        vlog(va, vc, kb, M)
        for k in range(M):
            e = int(qw[16 * w + k])
            v = qw[e]
            dp = vc[k] * qw[9 * w + e] + qw[5 * w + e]
            dm = dp - v
            vc[k] = -dp
            vc[M + k] = -dm
            va[k] = -0.5 * dp * dp
            va[M + k] = -0.5 * dm * dm
        vexp(va, vb, kb, 2 * M)                              # e^{-d+^2/2}, e^{-d-^2/2}
        vncdf(vc, vb, vd, 2 * M)                             # Phi(-d+), Phi(-d-)
        for k in range(M):
            e = int(qw[16 * w + k])
            K, r, q, s2, X = qw[11 * w + e], qw[12 * w + e], qw[13 * w + e], qw[14 * w + e], qw[15 * w + e]
            v = qw[e]
            dr = qw[w + e]
            dq = qw[2 * w + e]
            x = xs[e]
            iv = qw[9 * w + e]
            dp = -vc[k]
            dm = dp - v
            ph = _INV_SQRT_2PI * vb[k]
            Pp = vd[k]
            Pm = vd[M + k]
            beta = qw[3 * w + e]
            A = qw[4 * w + e]
            i2t = qw[10 * w + e]
            npv = dr * K * Pm - x * dq * Pp
            theta = r * K * dr * Pm - q * x * dq * Pp - 0.5 * s2 * x * iv * dq * ph
            g = (q - r) * iv + dm * i2t
            charm = dq * ph * g - q * dq * Pp
            F = (1.0 - dq * Pp) * x - beta * (K - x - npv) + A * theta
            dF = (1.0 - dq * Pp) * (1.0 + beta) + dq * ph * iv + A * charm
            d2F = dq * ph * iv / x * ((1.0 + beta) - dp * iv + A * (i2t + q - dp * g))
            ok = dF != 0.0 and F - F == 0.0 and dF - dF == 0.0  # finite F and dF
            newton = F / dF
            t = 0.5 * newton * d2F / dF                        # Halley's step is the Newton step / (1 - t)
            xn = min(max(x - (newton / (1.0 - t) if abs(t) < 0.5 else newton), 1e-8 * X), X)
            # a failed step: the seed; a step under tol X: converged
            xs[e] = xn if ok else qw[7 * w + e]
            qw[8 * w + e] = 1.0 if (ok and abs(xn - x) >= tol * X) else 0.0
    for e in range(N):
        if qw[8 * w + e] != 0.0:                             # not converged in 100 steps: the seed
            xs[e] = qw[7 * w + e]
        va[e] = xs[e] / qw[15 * w + e]
    vlog(va, vc, kb, N)
    for e in range(N):
        H[e] = vc[e] * vc[e]
