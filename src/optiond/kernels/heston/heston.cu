// Semi-analytic European Heston prices on the GPU, FP64: the recurrence of cpu.py, operation
// for operation (the "little trap" characteristic function at u - i/2, Lewis's single integral,
// the truncation by doubling, the graded panels and the adaptive 7/15-point Gauss-Kronrod rule
// with the same acceptance test, the same chunk plan). One thread prices one chunk (up to
// HESTON_CHUNK strikes of one expiry and parameter set); compiled with --fmad=false so that
// the arithmetic rounds as the CPU's does.

#define HESTON_CHUNK 32
#define HESTON_NINT 5
#define HESTON_MAX_DEPTH 24
#define HESTON_STACK 128
#define HESTON_U_MAX 1048576.0
#define HESTON_NOISE (64.0 * 2.220446049250313e-16)
#define HESTON_PI 3.141592653589793

struct cplx {
    double re, im;
};

__device__ __forceinline__ cplx mk(double a, double b) { cplx z; z.re = a; z.im = b; return z; }
__device__ __forceinline__ cplx add(cplx a, cplx b) { return mk(a.re + b.re, a.im + b.im); }
__device__ __forceinline__ cplx sub(cplx a, cplx b) { return mk(a.re - b.re, a.im - b.im); }
__device__ __forceinline__ cplx mul(cplx a, cplx b) {
    return mk(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
__device__ __forceinline__ cplx scl(double s, cplx a) { return mk(s * a.re, s * a.im); }
__device__ __forceinline__ cplx rsub(double s, cplx a) { return mk(s - a.re, -a.im); }
// Smith's division (as NumPy's)
__device__ cplx dvd(cplx a, cplx b) {
    double abs_br = fabs(b.re), abs_bi = fabs(b.im);
    if (abs_br >= abs_bi) {
        if (abs_br == 0.0 && abs_bi == 0.0) return mk(a.re / abs_br, a.im / abs_bi);
        double rat = b.im / b.re;
        double scl_ = 1.0 / (b.re + b.im * rat);
        return mk((a.re + a.im * rat) * scl_, (a.im - a.re * rat) * scl_);
    }
    double rat = b.re / b.im;
    double scl_ = 1.0 / (b.im + b.re * rat);
    return mk((a.re * rat + a.im) * scl_, (a.im * rat - a.re) * scl_);
}
__device__ __forceinline__ cplx dvs(double s, cplx b) { return dvd(mk(s, 0.0), b); }
__device__ __forceinline__ double cabs_(cplx a) { return hypot(a.re, a.im); }
__device__ cplx csqrt_(cplx z) {  // principal root
    if (z.re == 0.0 && z.im == 0.0) return mk(0.0, z.im);
    double t = sqrt(0.5 * (fabs(z.re) + hypot(z.re, z.im)));
    if (z.re >= 0.0) return mk(t, z.im / (2.0 * t));
    return mk(fabs(z.im) / (2.0 * t), copysign(t, z.im));
}
__device__ __forceinline__ cplx cexp_(cplx z) {
    double a = exp(z.re);
    return mk(a * cos(z.im), a * sin(z.im));
}
__device__ __forceinline__ cplx clog_(cplx z) { return mk(log(hypot(z.re, z.im)), atan2(z.im, z.re)); }

// (log phi, D, dlog phi / dT) at z = u - i/2 (cpu.cf_parts)
__device__ void cf_parts(double u, double T, double v0, double kappa, double theta, double xi, double rho,
                         cplx* lp, cplx* Dout, cplx* dT) {
    double s = u * u + 0.25;
    cplx beta = mk(kappa - 0.5 * rho * xi, -rho * xi * u);
    cplx d = csqrt_(add(mul(beta, beta), mk(xi * xi * s, 0.0)));
    cplx bpd = add(beta, d);
    cplx bpd2 = mul(bpd, bpd);
    cplx g = scl(-1.0, dvs(xi * xi * s, bpd2));
    cplx e = cexp_(scl(-T, d));
    cplx one_e = rsub(1.0, e);
    cplx den = rsub(1.0, mul(g, e));
    cplx D = dvd(mul(dvs(-s, bpd), one_e), den);
    cplx one_g = rsub(1.0, g);
    cplx w = dvd(mul(g, one_e), one_g);
    cplx w_xi2 = dvd(scl(-s, one_e), mul(bpd2, one_g));
    cplx ratio;
    if (cabs_(w) < 1e-4) {
        cplx w2 = mul(w, w);  // 1 - w/2 + w^2/3 - w^3/4, the series of log(1 + w) / w
        cplx w3 = mul(w2, w);
        ratio = sub(add(rsub(1.0, mk(w.re / 2.0, w.im / 2.0)), mk(w2.re / 3.0, w2.im / 3.0)), mk(w3.re / 4.0, w3.im / 4.0));
    } else {
        ratio = dvd(clog_(add(mk(1.0, 0.0), w)), w);
    }
    cplx C = scl(kappa * theta, sub(dvs(-s * T, bpd), scl(2.0, mul(ratio, w_xi2))));
    cplx dD = sub(sub(mk(-0.5 * s, 0.0), mul(beta, D)), scl(-0.5 * xi * xi, mul(D, D)));
    *lp = add(C, scl(v0, D));
    *Dout = D;
    *dT = add(scl(kappa * theta, D), scl(v0, dD));
}

__device__ double truncation(double T, double v0, double kappa, double theta, double xi, double rho, double tol) {
    double U = 4.0;
    while (U < HESTON_U_MAX) {
        cplx lp, D, dT;
        cf_parts(U, T, v0, kappa, theta, xi, rho, &lp, &D, &dT);
        if (lp.re <= log(tol * U)) break;
        U *= 2.0;
    }
    return U;
}

__constant__ double NODES[15];
__constant__ double W_K[15];
__constant__ double W_G[15];

__device__ void panel(double a, double b, double T, double v0, double kappa, double theta, double xi, double rho,
                      const double* ks, int m, int greeks, double* acc, double* g0, double* g1, double* err) {
    double c = 0.5 * (a + b), h = 0.5 * (b - a);
    for (int j = 0; j < m; ++j)
        for (int t = 0; t < HESTON_NINT; ++t) acc[j * HESTON_NINT + t] = 0.0;
    double e_max = 0.0, a_max = 0.0;
    for (int j = 0; j < m; ++j) { g0[j] = 0.0; g1[j] = 0.0; }
    for (int n = 0; n < 15; ++n) {
        double u = c + h * NODES[n];
        cplx lp, D, dT;
        cf_parts(u, T, v0, kappa, theta, xi, rho, &lp, &D, &dT);
        double s = u * u + 0.25;
        double wk = h * W_K[n], wg = h * W_G[n];
        double amp = exp(lp.re);
        for (int j = 0; j < m; ++j) {
            double ph = lp.im + u * ks[j];
            cplx psi = mk(amp * cos(ph), amp * sin(ph));
            double f0 = psi.re / s;
            double f1 = -u * psi.im / s;
            double* A = acc + j * HESTON_NINT;
            A[0] += wk * f0;
            A[1] += wk * f1;
            a_max = fmax(a_max, wk * (fabs(f0) + fabs(f1)));
            g0[j] += wg * f0;
            g1[j] += wg * f1;
            if (greeks) {
                A[2] += wk * psi.re;
                A[3] += wk * mul(D, psi).re / s;
                A[4] += wk * mul(dT, psi).re / s;
            }
        }
    }
    for (int j = 0; j < m; ++j)
        e_max = fmax(e_max, fmax(fabs(acc[j * HESTON_NINT] - g0[j]), fabs(acc[j * HESTON_NINT + 1] - g1[j])));
    err[0] = e_max;
    err[1] = 15.0 * a_max;
}

__device__ long long chunk_integrals(double T, double v0, double kappa, double theta, double xi, double rho,
                                     const double* ks, int m, int greeks, double tol, double* out) {
    double U = truncation(T, v0, kappa, theta, xi, rho, tol);
    for (int j = 0; j < m * HESTON_NINT; ++j) out[j] = 0.0;
    double acc[HESTON_CHUNK * HESTON_NINT], g0[HESTON_CHUNK], g1[HESTON_CHUNK], err[2];
    double sa[HESTON_STACK], sb[HESTON_STACK];
    int sd[HESTON_STACK];
    int top = 0;
    double b = U;
    while (b > 1.0) {
        sa[top] = 0.5 * b >= 1.0 ? 0.5 * b : 1.0;
        sb[top] = b;
        sd[top] = 0;
        ++top;
        b = 0.5 * b;
    }
    sa[top] = 0.0; sb[top] = 1.0; sd[top] = 0; ++top;
    long long evals = 0;
    while (top > 0) {
        --top;
        double a = sa[top], bb = sb[top];
        int depth = sd[top];
        panel(a, bb, T, v0, kappa, theta, xi, rho, ks, m, greeks, acc, g0, g1, err);
        evals += 15;
        if (err[0] > tol * (bb - a) / U + HESTON_NOISE * err[1] && depth < HESTON_MAX_DEPTH && top + 2 <= HESTON_STACK) {
            double mid = 0.5 * (a + bb);
            sa[top] = mid; sb[top] = bb; sd[top] = depth + 1; ++top;
            sa[top] = a; sb[top] = mid; sd[top] = depth + 1; ++top;
            continue;
        }
        for (int j = 0; j < m * HESTON_NINT; ++j) out[j] += acc[j];
    }
    return evals;
}

// cpu.contract_values
__device__ void contract_values(int is_call, double S, double K, double T, double r, double q, double v0,
                                const double* ints, int greeks, double* out, long long n, long long i) {
    double dfr = exp(-r * T), dfq = exp(-q * T);
    double F = S * exp((r - q) * T);
    double sfk = sqrt(F * K);
    double fwd_val = dfr * (F - K);
    double call = fmax(fmax(dfr * (F - sfk * ints[0] / HESTON_PI), fwd_val), 0.0);
    double V = is_call ? call : call - fwd_val;
    out[i] = V;
    if (!greeks) {
        for (int t = 1; t < 7; ++t) out[t * n + i] = nan("");
        return;
    }
    double dcall = dfq * (1.0 - sqrt(K / F) * (0.5 * ints[0] + ints[1]) / HESTON_PI);
    double delta = is_call ? dcall : dcall - dfq;
    double gamma = dfq * sqrt(K / F) * ints[2] / (HESTON_PI * S);
    double dv0 = -dfr * sfk * ints[3] / HESTON_PI;
    double theta_c = r * call - (r - q) * S * dcall + dfr * sfk * ints[4] / HESTON_PI;
    double th = is_call ? theta_c : theta_c + r * K * dfr - q * S * dfq;
    out[n + i] = delta;
    out[2 * n + i] = gamma;
    out[3 * n + i] = th;
    out[4 * n + i] = 2.0 * sqrt(v0) * dv0;
    out[5 * n + i] = T * (S * delta - V);
    out[6 * n + i] = dv0;
}

extern "C" __global__ void heston_chunks(const signed char* kind, const double* S, const double* K, const double* T,
                                         const double* r, const double* q, const double* v0, const double* kappa,
                                         const double* theta, const double* xi, const double* rho,
                                         const long long* order, const long long* starts, int nch, int greeks,
                                         double tol, long long n, double* out, long long* evals) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nch) return;
    long long a = starts[c];
    int m = (int)(starts[c + 1] - a);
    long long i0 = order[a];
    double ks[HESTON_CHUNK];
    for (int j = 0; j < m; ++j) {
        long long i = order[a + j];
        ks[j] = log(S[i] * exp((r[i] - q[i]) * T[i]) / K[i]);
    }
    double ints[HESTON_CHUNK * HESTON_NINT];
    evals[c] = chunk_integrals(T[i0], v0[i0], kappa[i0], theta[i0], xi[i0], rho[i0], ks, m, greeks, tol, ints);
    for (int j = 0; j < m; ++j) {
        long long i = order[a + j];
        contract_values(kind[i] == 1, S[i], K[i], T[i], r[i], q[i], v0[i], ints + j * HESTON_NINT, greeks, out, n, i);
    }
}
