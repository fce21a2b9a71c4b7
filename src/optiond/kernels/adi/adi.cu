// ADI finite differences on the GPU (FP64): the device side of optiond.kernels.adi.gpu.
//
// The arithmetic follows the CPU reference (optiond/kernels/adi/_kernels.py) step for step:
// the Douglas / Craig-Sneyd / Modified Craig-Sneyd / Hundsdorfer-Verwer schemes of
// in 't Hout & Foulon (2010), IJNAM 7(2), §3, mixed terms explicit, Thomas line solves on
// pre-factorised matrices I - c A_d (c = theta dt), Ikonen-Toivanen American exercise.
//
// Stencils: row i of a directional operator holds 3 weights on nodes b(i), b(i)+1, b(i)+2
// with b(i) = min(max(i-1, 0), n-3) (one-sided rows on the boundary); the out-of-band entry
// of a one-sided row is eliminated with the neighbouring row (multiplier FE).
//
// Part 1: batched 2-D Heston. Layout [i][j][b] (problem index b fastest), so for every kernel
//   - explicit stencil, sweeps along s, sweeps along v - the threads of a warp touch 32
//   consecutive problems: every global access is coalesced. One thread per node for the
//   stencil kernels, one thread per (line, problem) for the Thomas sweeps.
// Part 2: one generic 3-D problem, C order [i][j][k] with operators assembled on the host.
//   Sweeps along axes 0 and 1: one thread per line, consecutive threads on consecutive k
//   (coalesced). Sweeps along axis 2 (contiguous lines): a warp owns 32 lines and moves
//   32 x 32 tiles through shared memory, so global loads and stores stay coalesced.

#define DO 0
#define CS 1
#define MCS 2
#define HV 3

typedef long long ll;

__device__ __forceinline__ int bidx(int i, int n) { return i == 0 ? 0 : (i == n - 1 ? n - 3 : i - 1); }

// ------------------------------------------------------------------------------------------
// Part 1: batched 2-D Heston
// ------------------------------------------------------------------------------------------
// Per-problem scalars (arrays of length B): r, q, kappa, theta, xi, rho, K, T (expiry);
// flags: kind (0 put, 1 call), bc_s0 (0: u = K exp(-r tau), 1: u = K, 2: u = 0),
// bc_smax (0: u_s = 0, 1: u_s = exp(-q tau), 2: u_s = 1).
// Per-problem 1-D data (interleaved, index [(i*3+p)*B + b]): D1s, D2s (n1), D1v, D2v (n2);
// s[i*B+b], v[j*B+b].

#define IDX(i, j) (((ll)(i) * n2 + (j)) * B + b)
#define WIDX(d, p, i, j) ((((ll)((d) * 3 + (p)) * n1 + (i)) * n2 + (j)) * B + b)

extern "C" __global__ void hb_build(int n1, int n2, int B, const double* __restrict__ s, const double* __restrict__ v,
                                    const double* __restrict__ D1s, const double* __restrict__ D2s,
                                    const double* __restrict__ D1v, const double* __restrict__ D2v,
                                    const double* __restrict__ r_, const double* __restrict__ q_,
                                    const double* __restrict__ kap_, const double* __restrict__ th_,
                                    const double* __restrict__ xi_, const double* __restrict__ rho_,
                                    const int* __restrict__ bc_smax, double* __restrict__ W, double* __restrict__ M,
                                    double* __restrict__ srcc) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (ll)n1 * n2 * B) return;
    int b = (int)(t % B);
    ll ij = t / B;
    int j = (int)(ij % n2);
    int i = (int)(ij / n2);
    double S = s[(ll)i * B + b], V = v[(ll)j * B + b];
    double r = r_[b], q = q_[b], kap = kap_[b], th = th_[b], xi = xi_[b], rho = rho_[b];
    if (i == 0) {  // Dirichlet face s = 0: no operator rows
        for (int p = 0; p < 3; ++p) { W[WIDX(0, p, i, j)] = 0.0; W[WIDX(1, p, i, j)] = 0.0; }
        M[IDX(i, j)] = 0.0;
        return;
    }
    double rd = 0.5 * r;
    // direction 0 (s): a = 1/2 s^2 v, c = (r - q) s
    double a = 0.5 * S * S * V, c = (r - q) * S;
    int dg = (i == n1 - 1) ? 2 : 1;
    for (int p = 0; p < 3; ++p)
        W[WIDX(0, p, i, j)] = a * D2s[((ll)i * 3 + p) * B + b] + c * D1s[((ll)i * 3 + p) * B + b] - (p == dg ? rd : 0.0);
    if (i == n1 - 1) {  // Neumann at s = S_max (ghost node), data through the source
        double h = S - s[(ll)(n1 - 2) * B + b];
        W[WIDX(0, 0, i, j)] = 0.0;
        W[WIDX(0, 1, i, j)] = 2.0 * a / (h * h);
        W[WIDX(0, 2, i, j)] = -2.0 * a / (h * h) - rd;
        srcc[(ll)j * B + b] = bc_smax[b] == 0 ? 0.0 : 2.0 * a / h + c;
    }
    // direction 1 (v): a = 1/2 xi^2 v, c = kappa (theta - v); v = 0 and v = V "linear"
    double av = 0.5 * xi * xi * V, cv = kap * (th - V);
    int dv = (j == 0) ? 0 : (j == n2 - 1 ? 2 : 1);
    for (int p = 0; p < 3; ++p)
        W[WIDX(1, p, i, j)] = av * D2v[((ll)j * 3 + p) * B + b] + cv * D1v[((ll)j * 3 + p) * B + b] - (p == dv ? rd : 0.0);
    M[IDX(i, j)] = rho * xi * S * V;
}

__device__ __forceinline__ double hb_dirichlet(int kind_bc, double K, double r, double tau) {
    return kind_bc == 0 ? K * exp(-r * tau) : (kind_bc == 1 ? K : 0.0);
}

__device__ __forceinline__ double hb_neumann(int bc, double q, double tau) {
    return bc == 0 ? 0.0 : (bc == 1 ? exp(-q * tau) : 1.0);
}

// Factor I - c A_d along direction d for every (line, problem); c = cfrac * T[b].
extern "C" __global__ void hb_factor(int n1, int n2, int B, int d, double cfrac, const double* __restrict__ T,
                                     const double* __restrict__ W, double* __restrict__ LO, double* __restrict__ INV,
                                     double* __restrict__ CP, double* __restrict__ FE) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    int nl = d == 0 ? n2 : n1;
    if (t >= (ll)nl * B) return;
    int b = (int)(t % B);
    int line = (int)(t / B);
    int n = d == 0 ? n1 : n2;
    double c = cfrac * T[b];
#define AT(k) (d == 0 ? IDX((k), line) : IDX(line, (k)))
#define WW(p, k) (d == 0 ? W[WIDX(0, p, (k), line)] : W[WIDX(1, p, line, (k))])
    double d0 = 1.0 - c * WW(0, 0), u0 = -c * WW(1, 0), e0 = -c * WW(2, 0);
    double lo1 = -c * WW(0, 1), d1 = 1.0 - c * WW(1, 1), up1 = -c * WW(2, 1);
    double f0 = 0.0;
    if (e0 != 0.0 && up1 != 0.0) { f0 = e0 / up1; d0 -= f0 * lo1; u0 -= f0 * d1; }
    FE[AT(0)] = f0;
    double eN = -c * WW(0, n - 1), lN = -c * WW(1, n - 1), dN = 1.0 - c * WW(2, n - 1);
    double lo2 = -c * WW(0, n - 2), d2 = 1.0 - c * WW(1, n - 2), up2 = -c * WW(2, n - 2);
    double fN = 0.0;
    if (eN != 0.0 && lo2 != 0.0) { fN = eN / lo2; lN -= fN * d2; dN -= fN * up2; }
    FE[AT(n - 1)] = fN;
    LO[AT(0)] = 0.0;
    double inv = 1.0 / d0;
    INV[AT(0)] = inv;
    double cp = u0 * inv;
    CP[AT(0)] = cp;
    for (int k = 1; k < n - 1; ++k) {
        double lo = -c * WW(0, k);
        inv = 1.0 / ((1.0 - c * WW(1, k)) - lo * cp);
        cp = (-c * WW(2, k)) * inv;
        LO[AT(k)] = lo; INV[AT(k)] = inv; CP[AT(k)] = cp;
    }
    LO[AT(n - 1)] = lN;
    INV[AT(n - 1)] = 1.0 / (dN - lN * cp);
    CP[AT(n - 1)] = 0.0;
#undef AT
#undef WW
}

// The three operators at node (i, j) of problem b applied to u (a0 mixed, a1 s, a2 v).
__device__ __forceinline__ void hb_ops(int n1, int n2, int B, int b, int i, int j, const double* __restrict__ u,
                                       const double* __restrict__ W, const double* __restrict__ M,
                                       const double* __restrict__ D1s, const double* __restrict__ D1v,
                                       double& a0, double& a1, double& a2) {
    int bi = bidx(i, n1), bj = bidx(j, n2);
    double g0 = D1s[((ll)i * 3 + 0) * B + b], g1 = D1s[((ll)i * 3 + 1) * B + b], g2 = D1s[((ll)i * 3 + 2) * B + b];
    a1 = W[WIDX(0, 0, i, j)] * u[IDX(bi, j)] + W[WIDX(0, 1, i, j)] * u[IDX(bi + 1, j)] + W[WIDX(0, 2, i, j)] * u[IDX(bi + 2, j)];
    a2 = W[WIDX(1, 0, i, j)] * u[IDX(i, bj)] + W[WIDX(1, 1, i, j)] * u[IDX(i, bj + 1)] + W[WIDX(1, 2, i, j)] * u[IDX(i, bj + 2)];
    double tq[3];
    for (int k = 0; k < 3; ++k)
        tq[k] = g0 * u[IDX(bi, bj + k)] + g1 * u[IDX(bi + 1, bj + k)] + g2 * u[IDX(bi + 2, bj + k)];
    double q0 = D1v[((ll)j * 3 + 0) * B + b], q1 = D1v[((ll)j * 3 + 1) * B + b], q2 = D1v[((ll)j * 3 + 2) * B + b];
    a0 = M[IDX(i, j)] * (q0 * tq[0] + q1 * tq[1] + q2 * tq[2]);
}

// U := payoff, lam := 0
extern "C" __global__ void hb_init(int n1, int n2, int B, const double* __restrict__ s, const double* __restrict__ K,
                                   const int* __restrict__ kind, double* __restrict__ U, double* __restrict__ lam) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (ll)n1 * n2 * B) return;
    int b = (int)(t % B);
    int i = (int)(t / B / n2);
    double S = s[(ll)i * B + b];
    U[t] = kind[b] == 1 ? fmax(S - K[b], 0.0) : fmax(K[b] - S, 0.0);
    lam[t] = 0.0;
}

// Explicit stage at U (tau_old): A0, A1, A2, Fa = F(tau_old, U), Y0 = U + dt (F + lam),
// Y = Y0 - c F_1 + c s_1(tau_new), Dirichlet nodes of Y set to g(tau_new).
extern "C" __global__ void hb_explicit(int n1, int n2, int B, double dtf, double th, double tauf_old, double tauf_new,
                                       int american, const double* __restrict__ T, const double* __restrict__ U,
                                       const double* __restrict__ lam, const double* __restrict__ W,
                                       const double* __restrict__ M, const double* __restrict__ D1s,
                                       const double* __restrict__ D1v, const double* __restrict__ srcc,
                                       const double* __restrict__ r_, const double* __restrict__ q_,
                                       const double* __restrict__ K_, const int* __restrict__ bc_s0,
                                       const int* __restrict__ bc_smax, double* __restrict__ A0, double* __restrict__ A1,
                                       double* __restrict__ A2, double* __restrict__ Fa, double* __restrict__ Y0,
                                       double* __restrict__ Y) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (ll)n1 * n2 * B) return;
    int b = (int)(t % B);
    ll ij = t / B;
    int j = (int)(ij % n2);
    int i = (int)(ij / n2);
    double Tb = T[b], dt = dtf * Tb, c = th * dt;
    if (i == 0) {
        A0[t] = 0.0; A1[t] = 0.0; A2[t] = 0.0; Fa[t] = 0.0;
        Y0[t] = U[t];
        Y[t] = hb_dirichlet(bc_s0[b], K_[b], r_[b], tauf_new * Tb);
        return;
    }
    double a0, a1, a2;
    hb_ops(n1, n2, B, b, i, j, U, W, M, D1s, D1v, a0, a1, a2);
    double fa = a0 + a1 + a2;
    double y0 = U[t] + dt * fa;
    if (american) y0 += dt * lam[t];
    double y = y0 - c * a1;
    if (i == n1 - 1) {
        double cc = srcc[(ll)j * B + b];
        double vo = cc * hb_neumann(bc_smax[b], q_[b], tauf_old * Tb);
        double vn = cc * hb_neumann(bc_smax[b], q_[b], tauf_new * Tb);
        fa += vo; y0 += dt * vo; a1 += vo;
        y += (dt - c) * vo + c * vn;
    }
    A0[t] = a0; A1[t] = a1; A2[t] = a2; Fa[t] = fa; Y0[t] = y0; Y[t] = y;
}

// Thomas along s (axis 0) for every (j, problem), in place; rhs already assembled.
extern "C" __global__ void hb_solve0(int n1, int n2, int B, double* __restrict__ Y, const double* __restrict__ LO,
                                     const double* __restrict__ INV, const double* __restrict__ CP,
                                     const double* __restrict__ FE) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (ll)n2 * B) return;
    int b = (int)(t % B);
    int j = (int)(t / B);
    Y[IDX(0, j)] -= FE[IDX(0, j)] * Y[IDX(1, j)];
    Y[IDX(n1 - 1, j)] -= FE[IDX(n1 - 1, j)] * Y[IDX(n1 - 2, j)];
    double y = Y[IDX(0, j)] * INV[IDX(0, j)];
    Y[IDX(0, j)] = y;
    for (int i = 1; i < n1; ++i) {
        y = (Y[IDX(i, j)] - LO[IDX(i, j)] * y) * INV[IDX(i, j)];
        Y[IDX(i, j)] = y;
    }
    for (int i = n1 - 2; i >= 0; --i) {
        y = Y[IDX(i, j)] - CP[IDX(i, j)] * y;
        Y[IDX(i, j)] = y;
    }
}

// Thomas along v (axis 1) for every (i, problem) with rhs Y - c X fused; the line i = 0 is
// the Dirichlet face: set to g(tau_new).
extern "C" __global__ void hb_solve1(int n1, int n2, int B, double dtf, double th, double tauf_new,
                                     const double* __restrict__ T, double* __restrict__ Y, const double* __restrict__ X,
                                     const double* __restrict__ LO, const double* __restrict__ INV,
                                     const double* __restrict__ CP, const double* __restrict__ FE,
                                     const double* __restrict__ r_, const double* __restrict__ K_,
                                     const int* __restrict__ bc_s0) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (ll)n1 * B) return;
    int b = (int)(t % B);
    int i = (int)(t / B);
    double c = th * dtf * T[b];
    if (i == 0) {
        double g = hb_dirichlet(bc_s0[b], K_[b], r_[b], tauf_new * T[b]);
        for (int j = 0; j < n2; ++j) Y[IDX(0, j)] = g;
        return;
    }
    double r0 = Y[IDX(i, 0)] - c * X[IDX(i, 0)], r1 = Y[IDX(i, 1)] - c * X[IDX(i, 1)];
    double rN = Y[IDX(i, n2 - 1)] - c * X[IDX(i, n2 - 1)], rM = Y[IDX(i, n2 - 2)] - c * X[IDX(i, n2 - 2)];
    r0 -= FE[IDX(i, 0)] * r1;
    rN -= FE[IDX(i, n2 - 1)] * rM;
    double y = r0 * INV[IDX(i, 0)];
    Y[IDX(i, 0)] = y;
    for (int j = 1; j < n2; ++j) {
        double rj = (j == n2 - 1) ? rN : Y[IDX(i, j)] - c * X[IDX(i, j)];
        y = (rj - LO[IDX(i, j)] * y) * INV[IDX(i, j)];
        Y[IDX(i, j)] = y;
    }
    for (int j = n2 - 2; j >= 0; --j) {
        y = Y[IDX(i, j)] - CP[IDX(i, j)] * y;
        Y[IDX(i, j)] = y;
    }
}

// Correction stage: Z = Yt_0 - c X_1 (+ c s_1(tau_new)) from F(tau_new, Y_k); HV keeps B2.
extern "C" __global__ void hb_correct(int n1, int n2, int B, int scheme, double dtf, double th, double tauf_new,
                                      const double* __restrict__ T, const double* __restrict__ Y,
                                      const double* __restrict__ Y0, const double* __restrict__ A0,
                                      const double* __restrict__ A1, const double* __restrict__ Fa,
                                      const double* __restrict__ W, const double* __restrict__ M,
                                      const double* __restrict__ D1s, const double* __restrict__ D1v,
                                      const double* __restrict__ srcc, const double* __restrict__ r_,
                                      const double* __restrict__ q_, const double* __restrict__ K_,
                                      const int* __restrict__ bc_s0, const int* __restrict__ bc_smax,
                                      double* __restrict__ Z, double* __restrict__ B2) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (ll)n1 * n2 * B) return;
    int b = (int)(t % B);
    ll ij = t / B;
    int j = (int)(ij % n2);
    int i = (int)(ij / n2);
    double Tb = T[b], dt = dtf * Tb, c = th * dt;
    if (i == 0) {
        Z[t] = hb_dirichlet(bc_s0[b], K_[b], r_[b], tauf_new * Tb);
        if (scheme == HV) B2[t] = 0.0;
        return;
    }
    double b0, b1, b2;
    hb_ops(n1, n2, B, b, i, j, Y, W, M, D1s, D1v, b0, b1, b2);
    double vn = 0.0;
    if (i == n1 - 1) vn = srcc[(ll)j * B + b] * hb_neumann(bc_smax[b], q_[b], tauf_new * Tb);
    double z;
    if (scheme == CS) {
        z = Y0[t] + 0.5 * dt * (b0 - A0[t]) - c * A1[t] + c * vn;
    } else if (scheme == MCS) {
        z = Y0[t] + th * dt * (b0 - A0[t]) + (0.5 - th) * dt * ((b0 + b1 + b2 + vn) - Fa[t]) - c * A1[t] + c * vn;
    } else {
        z = Y0[t] + 0.5 * dt * ((b0 + b1 + b2 + vn) - Fa[t]) - c * b1;
        B2[t] = b2;
    }
    Z[t] = z;
}

// U := max(R - dt lam, phi), lam := max(0, lam + (phi - R)/dt) (American) or U := R.
extern "C" __global__ void hb_finish(int n1, int n2, int B, double dtf, int american, const double* __restrict__ T,
                                     const double* __restrict__ s, const double* __restrict__ K,
                                     const int* __restrict__ kind, const double* __restrict__ R,
                                     double* __restrict__ U, double* __restrict__ lam) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (ll)n1 * n2 * B) return;
    double ut = R[t];
    if (!american) { U[t] = ut; return; }
    int b = (int)(t % B);
    int i = (int)(t / B / n2);
    double S = s[(ll)i * B + b];
    double phi = kind[b] == 1 ? fmax(S - K[b], 0.0) : fmax(K[b] - S, 0.0);
    double dt = dtf * T[b];
    double lo = lam[t];
    U[t] = fmax(ut - dt * lo, phi);
    lam[t] = fmax(0.0, lo + (phi - ut) / dt);
}

// Rate of change u_tau = F(tau, U) + lam at every node (for theta).
extern "C" __global__ void hb_rate(int n1, int n2, int B, double tauf, const double* __restrict__ T,
                                   const double* __restrict__ U, const double* __restrict__ lam,
                                   const double* __restrict__ W, const double* __restrict__ M,
                                   const double* __restrict__ D1s, const double* __restrict__ D1v,
                                   const double* __restrict__ srcc, const double* __restrict__ q_,
                                   const int* __restrict__ bc_smax, double* __restrict__ F) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (ll)n1 * n2 * B) return;
    int b = (int)(t % B);
    ll ij = t / B;
    int j = (int)(ij % n2);
    int i = (int)(ij / n2);
    if (i == 0) { F[t] = lam[t]; return; }
    double a0, a1, a2;
    hb_ops(n1, n2, B, b, i, j, U, W, M, D1s, D1v, a0, a1, a2);
    double f = a0 + a1 + a2;
    if (i == n1 - 1) f += srcc[(ll)j * B + b] * hb_neumann(bc_smax[b], q_[b], tauf * T[b]);
    F[t] = f + lam[t];
}

#undef IDX
#undef WIDX

// ------------------------------------------------------------------------------------------
// Part 2: generic 3-D, one problem, C order [i][j][k]
// ------------------------------------------------------------------------------------------

#define I3(i, j, k) (((ll)(i) * n2 + (j)) * n3 + (k))

__device__ __forceinline__ void g3_ops(int n1, int n2, int n3, int i, int j, int k, const double* __restrict__ u,
                                       const double* __restrict__ W, const double* __restrict__ M,
                                       const double* __restrict__ G0, const double* __restrict__ G1,
                                       const double* __restrict__ G2, double& a0, double& a1, double& a2, double& a3) {
    ll N = (ll)n1 * n2 * n3;
    ll t = I3(i, j, k);
    int bi = bidx(i, n1), bj = bidx(j, n2), bk = bidx(k, n3);
    a1 = W[0 * N + t] * u[I3(bi, j, k)] + W[1 * N + t] * u[I3(bi + 1, j, k)] + W[2 * N + t] * u[I3(bi + 2, j, k)];
    a2 = W[3 * N + t] * u[I3(i, bj, k)] + W[4 * N + t] * u[I3(i, bj + 1, k)] + W[5 * N + t] * u[I3(i, bj + 2, k)];
    a3 = W[6 * N + t] * u[I3(i, j, bk)] + W[7 * N + t] * u[I3(i, j, bk + 1)] + W[8 * N + t] * u[I3(i, j, bk + 2)];
    double g0 = G0[i * 3], g1 = G0[i * 3 + 1], g2 = G0[i * 3 + 2];
    double q0 = G1[j * 3], q1 = G1[j * 3 + 1], q2 = G1[j * 3 + 2];
    double e0 = G2[k * 3], e1 = G2[k * 3 + 1], e2 = G2[k * 3 + 2];
    double m01 = g0 * (q0 * u[I3(bi, bj, k)] + q1 * u[I3(bi, bj + 1, k)] + q2 * u[I3(bi, bj + 2, k)])
               + g1 * (q0 * u[I3(bi + 1, bj, k)] + q1 * u[I3(bi + 1, bj + 1, k)] + q2 * u[I3(bi + 1, bj + 2, k)])
               + g2 * (q0 * u[I3(bi + 2, bj, k)] + q1 * u[I3(bi + 2, bj + 1, k)] + q2 * u[I3(bi + 2, bj + 2, k)]);
    double m02 = g0 * (e0 * u[I3(bi, j, bk)] + e1 * u[I3(bi, j, bk + 1)] + e2 * u[I3(bi, j, bk + 2)])
               + g1 * (e0 * u[I3(bi + 1, j, bk)] + e1 * u[I3(bi + 1, j, bk + 1)] + e2 * u[I3(bi + 1, j, bk + 2)])
               + g2 * (e0 * u[I3(bi + 2, j, bk)] + e1 * u[I3(bi + 2, j, bk + 1)] + e2 * u[I3(bi + 2, j, bk + 2)]);
    double m12 = q0 * (e0 * u[I3(i, bj, bk)] + e1 * u[I3(i, bj, bk + 1)] + e2 * u[I3(i, bj, bk + 2)])
               + q1 * (e0 * u[I3(i, bj + 1, bk)] + e1 * u[I3(i, bj + 1, bk + 1)] + e2 * u[I3(i, bj + 1, bk + 2)])
               + q2 * (e0 * u[I3(i, bj + 2, bk)] + e1 * u[I3(i, bj + 2, bk + 1)] + e2 * u[I3(i, bj + 2, bk + 2)]);
    a0 = M[t] * m01 + M[N + t] * m02 + M[2 * N + t] * m12;
}

// A0, A (3 x N), Fa, Y0 = U + dt (F + lam), Y = Y0 - c A_1 (sources added separately).
extern "C" __global__ void g3_explicit(int n1, int n2, int n3, double dt, double c, int american,
                                       const double* __restrict__ U, const double* __restrict__ lam,
                                       const double* __restrict__ W, const double* __restrict__ M,
                                       const double* __restrict__ G0, const double* __restrict__ G1,
                                       const double* __restrict__ G2, double* __restrict__ A0, double* __restrict__ A,
                                       double* __restrict__ Fa, double* __restrict__ Y0, double* __restrict__ Y) {
    ll N = (ll)n1 * n2 * n3;
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    int k = (int)(t % n3);
    ll ij = t / n3;
    int j = (int)(ij % n2);
    int i = (int)(ij / n2);
    double a0, a1, a2, a3;
    g3_ops(n1, n2, n3, i, j, k, U, W, M, G0, G1, G2, a0, a1, a2, a3);
    double fa = a0 + a1 + a2 + a3;
    double y0 = U[t] + dt * fa;
    if (american) y0 += dt * lam[t];
    A0[t] = a0; A[t] = a1; A[N + t] = a2; A[2 * N + t] = a3; Fa[t] = fa; Y0[t] = y0; Y[t] = y0 - c * a1;
}

// Neumann sources of the explicit stage (tau_old) and of stage 1 (tau_new).
extern "C" __global__ void g3_src_first(int ns, ll N, double dt, double c, const ll* __restrict__ idx,
                                        const int* __restrict__ dir, const double* __restrict__ sold,
                                        const double* __restrict__ snew, double* __restrict__ A,
                                        double* __restrict__ Fa, double* __restrict__ Y0, double* __restrict__ Y) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= ns) return;
    ll t = idx[s];
    double v = sold[s];
    int d = dir[s];
    // one Neumann source per node and direction; different directions can share a node
    atomicAdd(&Fa[t], v);
    atomicAdd(&Y0[t], dt * v);
    atomicAdd(&A[(ll)d * N + t], v);
    atomicAdd(&Y[t], d == 0 ? (dt - c) * v + c * snew[s] : dt * v);
}

// Y[idx] += scale * val for the sources of direction d.
extern "C" __global__ void g3_src_add(int ns, int d, double scale, const ll* __restrict__ idx,
                                      const int* __restrict__ dir, const double* __restrict__ val,
                                      double* __restrict__ Y) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= ns || dir[s] != d) return;
    Y[idx[s]] += scale * val[s];
}

extern "C" __global__ void g3_set(int nd, const ll* __restrict__ idx, const double* __restrict__ g,
                                  double* __restrict__ Y) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s < nd) Y[idx[s]] = g[s];
}

// Thomas along axis 0 or 1: one thread per line, threads over k (coalesced). rhs = Y - c X.
extern "C" __global__ void g3_solve01(int n1, int n2, int n3, int d, double c, double* __restrict__ Y,
                                      const double* __restrict__ X, const double* __restrict__ LO,
                                      const double* __restrict__ INV, const double* __restrict__ CP,
                                      const double* __restrict__ FE) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    int n = d == 0 ? n1 : n2;
    ll nl = d == 0 ? (ll)n2 * n3 : (ll)n1 * n3;
    if (t >= nl) return;
    int k = (int)(t % n3);
    int o = (int)(t / n3);  // j (d = 0) or i (d = 1)
    ll base = d == 0 ? I3(0, o, k) : I3(o, 0, k);
    ll st = d == 0 ? (ll)n2 * n3 : (ll)n3;
#define R(m) (Y[base + (ll)(m) * st] - c * X[base + (ll)(m) * st])
    double r0 = R(0), r1 = R(1), rN = R(n - 1), rM = R(n - 2);
    r0 -= FE[base] * r1;
    rN -= FE[base + (ll)(n - 1) * st] * rM;
    double y = r0 * INV[base];
    Y[base] = y;
    for (int m = 1; m < n; ++m) {
        ll a = base + (ll)m * st;
        double rm = (m == n - 1) ? rN : R(m);
        y = (rm - LO[a] * y) * INV[a];
        Y[a] = y;
    }
#undef R
    for (int m = n - 2; m >= 0; --m) {
        ll a = base + (ll)m * st;
        y = Y[a] - CP[a] * y;
        Y[a] = y;
    }
}

// Thomas along axis 2 (contiguous lines): each warp owns 32 consecutive lines and moves
// 32-line x TK-column tiles through shared memory (row pitch TK + 1: no bank conflicts), so
// global loads and stores are coalesced rows of TK doubles, 32 / TK rows per instruction.
#define TL 32
#define TK 8
#define WARPS 4
extern "C" __global__ void g3_solve2_tiled(int n1, int n2, int n3, double c, double* __restrict__ Y,
                                           const double* __restrict__ X, const double* __restrict__ LO,
                                           const double* __restrict__ INV, const double* __restrict__ CP,
                                           const double* __restrict__ FE) {
    __shared__ double sh[WARPS][3][TL][TK + 1];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    double (*tr)[TK + 1] = sh[w][0];
    double (*ta)[TK + 1] = sh[w][1];
    double (*tb)[TK + 1] = sh[w][2];
    ll nl = (ll)n1 * n2;
    ll l0 = ((ll)blockIdx.x * WARPS + w) * TL;
    if (l0 >= nl) return;
    ll myl = l0 + lane;
    bool active = myl < nl;
    int rsub = lane / TK, csub = lane % TK;  // which tile row / column this lane loads
    double y = 0.0, first_fix = 0.0, last_fix = 0.0;
    if (active) {
        ll base = myl * n3;
        double r1 = Y[base + 1] - c * X[base + 1], rM = Y[base + n3 - 2] - c * X[base + n3 - 2];
        first_fix = FE[base] * r1;
        last_fix = FE[base + n3 - 1] * rM;
    }
    for (int k0 = 0; k0 < n3; k0 += TK) {
        for (int m0 = 0; m0 < TL; m0 += 32 / TK) {
            int m = m0 + rsub, k = k0 + csub;
            ll l = l0 + m;
            if (l < nl && k < n3) {
                ll a = l * n3 + k;
                tr[m][csub] = Y[a] - c * X[a];
                ta[m][csub] = LO[a];
                tb[m][csub] = INV[a];
            }
        }
        __syncwarp();
        if (active) {
            int kend = min(TK, n3 - k0);
            for (int kk = 0; kk < kend; ++kk) {
                int k = k0 + kk;
                double rk = tr[lane][kk];
                if (k == 0) rk -= first_fix;
                if (k == n3 - 1) rk -= last_fix;
                y = (k == 0) ? rk * tb[lane][kk] : (rk - ta[lane][kk] * y) * tb[lane][kk];
                tr[lane][kk] = y;
            }
        }
        __syncwarp();
        for (int m0 = 0; m0 < TL; m0 += 32 / TK) {
            int m = m0 + rsub, k = k0 + csub;
            ll l = l0 + m;
            if (l < nl && k < n3) Y[l * n3 + k] = tr[m][csub];
        }
        __syncwarp();
    }
    int last_k0 = ((n3 - 1) / TK) * TK;
    double x = 0.0;
    for (int k0 = last_k0; k0 >= 0; k0 -= TK) {
        for (int m0 = 0; m0 < TL; m0 += 32 / TK) {
            int m = m0 + rsub, k = k0 + csub;
            ll l = l0 + m;
            if (l < nl && k < n3) {
                ll a = l * n3 + k;
                tr[m][csub] = Y[a];
                ta[m][csub] = CP[a];
            }
        }
        __syncwarp();
        if (active) {
            int kend = min(TK, n3 - k0);
            for (int kk = kend - 1; kk >= 0; --kk) {
                int k = k0 + kk;
                x = (k == n3 - 1) ? tr[lane][kk] : tr[lane][kk] - ta[lane][kk] * x;
                tr[lane][kk] = x;
            }
        }
        __syncwarp();
        for (int m0 = 0; m0 < TL; m0 += 32 / TK) {
            int m = m0 + rsub, k = k0 + csub;
            ll l = l0 + m;
            if (l < nl && k < n3) Y[l * n3 + k] = tr[m][csub];
        }
        __syncwarp();
    }
}

// Thomas along axis 2, one thread per line, no tiling (reference and fallback).
extern "C" __global__ void g3_solve2_plain(int n1, int n2, int n3, double c, double* __restrict__ Y,
                                           const double* __restrict__ X, const double* __restrict__ LO,
                                           const double* __restrict__ INV, const double* __restrict__ CP,
                                           const double* __restrict__ FE) {
    ll l = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= (ll)n1 * n2) return;
    ll base = l * n3;
#define R(m) (Y[base + (m)] - c * X[base + (m)])
    double r0 = R(0), r1 = R(1), rN = R(n3 - 1), rM = R(n3 - 2);
    r0 -= FE[base] * r1;
    rN -= FE[base + n3 - 1] * rM;
    double y = r0 * INV[base];
    Y[base] = y;
    for (int m = 1; m < n3; ++m) {
        double rm = (m == n3 - 1) ? rN : R(m);
        y = (rm - LO[base + m] * y) * INV[base + m];
        Y[base + m] = y;
    }
#undef R
    for (int m = n3 - 2; m >= 0; --m) {
        y = Y[base + m] - CP[base + m] * y;
        Y[base + m] = y;
    }
}

// Correction: Z = Yt_0 - c X_1 from F(tau_new, Y_k); HV keeps B (3 x N).
extern "C" __global__ void g3_correct(int n1, int n2, int n3, int scheme, double dt, double th,
                                      const double* __restrict__ Y, const double* __restrict__ Y0,
                                      const double* __restrict__ A0, const double* __restrict__ A,
                                      const double* __restrict__ Fa, const double* __restrict__ W,
                                      const double* __restrict__ M, const double* __restrict__ G0,
                                      const double* __restrict__ G1, const double* __restrict__ G2,
                                      double* __restrict__ Z, double* __restrict__ Bv) {
    ll N = (ll)n1 * n2 * n3;
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    int k = (int)(t % n3);
    ll ij = t / n3;
    int j = (int)(ij % n2);
    int i = (int)(ij / n2);
    double b0, b1, b2, b3;
    g3_ops(n1, n2, n3, i, j, k, Y, W, M, G0, G1, G2, b0, b1, b2, b3);
    double c = th * dt, z;
    if (scheme == CS) {
        z = Y0[t] + 0.5 * dt * (b0 - A0[t]) - c * A[t];
    } else if (scheme == MCS) {
        z = Y0[t] + th * dt * (b0 - A0[t]) + (0.5 - th) * dt * ((b0 + b1 + b2 + b3) - Fa[t]) - c * A[t];
    } else {
        z = Y0[t] + 0.5 * dt * ((b0 + b1 + b2 + b3) - Fa[t]) - c * b1;
        Bv[t] = b1; Bv[N + t] = b2; Bv[2 * N + t] = b3;
    }
    Z[t] = z;
}

// Sources of the correction stage (tau_new), as in the CPU step.
extern "C" __global__ void g3_src_correct(int ns, ll N, int scheme, double dt, double th, const ll* __restrict__ idx,
                                          const int* __restrict__ dir, const double* __restrict__ snew,
                                          double* __restrict__ Z, double* __restrict__ Bv) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= ns) return;
    ll t = idx[s];
    double v = snew[s];
    double c = th * dt;
    int d = dir[s];
    double add = 0.0;
    if (scheme == MCS) add += (0.5 - th) * dt * v;
    else if (scheme == HV) add += 0.5 * dt * v;
    if (d == 0 && scheme != HV) add += c * v;
    atomicAdd(&Z[t], add);
    if (scheme == HV && d > 0) atomicAdd(&Bv[(ll)d * N + t], v);
}

extern "C" __global__ void g3_finish(ll N, double dt, int american, int project, const double* __restrict__ R,
                                     const double* __restrict__ phi, double* __restrict__ U, double* __restrict__ lam) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    double ut = R[t];
    if (american) {
        double lo = lam[t];
        U[t] = fmax(ut - dt * lo, phi[t]);
        lam[t] = fmax(0.0, lo + (phi[t] - ut) / dt);
    } else if (project) {
        U[t] = fmax(ut, phi[t]);
    } else {
        U[t] = ut;
    }
}

// Factor I - c A_d for every line of direction d (one thread per line).
extern "C" __global__ void g3_factor(int n1, int n2, int n3, int d, double c, const double* __restrict__ W,
                                     double* __restrict__ LO, double* __restrict__ INV, double* __restrict__ CP,
                                     double* __restrict__ FE) {
    ll N = (ll)n1 * n2 * n3;
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    int n;
    ll base, st;
    if (d == 0) { if (t >= (ll)n2 * n3) return; n = n1; base = t; st = (ll)n2 * n3; }
    else if (d == 1) { if (t >= (ll)n1 * n3) return; n = n2; int k = (int)(t % n3); int i = (int)(t / n3); base = I3(i, 0, k); st = n3; }
    else { if (t >= (ll)n1 * n2) return; n = n3; base = t * n3; st = 1; }
    const double* w0 = W + (ll)(3 * d) * N;
    const double* w1 = W + (ll)(3 * d + 1) * N;
    const double* w2 = W + (ll)(3 * d + 2) * N;
#define A_(m) (base + (ll)(m) * st)
    double d0 = 1.0 - c * w0[A_(0)], u0 = -c * w1[A_(0)], e0 = -c * w2[A_(0)];
    double lo1 = -c * w0[A_(1)], d1 = 1.0 - c * w1[A_(1)], up1 = -c * w2[A_(1)];
    double f0 = 0.0;
    if (e0 != 0.0 && up1 != 0.0) { f0 = e0 / up1; d0 -= f0 * lo1; u0 -= f0 * d1; }
    FE[A_(0)] = f0;
    double eN = -c * w0[A_(n - 1)], lN = -c * w1[A_(n - 1)], dN = 1.0 - c * w2[A_(n - 1)];
    double lo2 = -c * w0[A_(n - 2)], d2 = 1.0 - c * w1[A_(n - 2)], up2 = -c * w2[A_(n - 2)];
    double fN = 0.0;
    if (eN != 0.0 && lo2 != 0.0) { fN = eN / lo2; lN -= fN * d2; dN -= fN * up2; }
    FE[A_(n - 1)] = fN;
    LO[A_(0)] = 0.0;
    double inv = 1.0 / d0;
    INV[A_(0)] = inv;
    double cp = u0 * inv;
    CP[A_(0)] = cp;
    for (int m = 1; m < n - 1; ++m) {
        double lo = -c * w0[A_(m)];
        inv = 1.0 / ((1.0 - c * w1[A_(m)]) - lo * cp);
        cp = (-c * w2[A_(m)]) * inv;
        LO[A_(m)] = lo; INV[A_(m)] = inv; CP[A_(m)] = cp;
    }
    LO[A_(n - 1)] = lN;
    INV[A_(n - 1)] = 1.0 / (dN - lN * cp);
    CP[A_(n - 1)] = 0.0;
#undef A_
}

// elementwise: Y = P - c X
extern "C" __global__ void g3_axpy(ll N, double c, const double* __restrict__ P, const double* __restrict__ X,
                                   double* __restrict__ Y) {
    ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < N) Y[t] = P[t] - c * X[t];
}
#undef I3
