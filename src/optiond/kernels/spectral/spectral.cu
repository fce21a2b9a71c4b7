// The spectral American engine (Andersen, Lake & Offengenden 2016) on an NVIDIA GPU, FP64.
//
// The recurrences are those of the CPU reference (cpu.py beside this file, its module
// docstring: steps 1-5, the damped step of step 4 included), written for an American put; a call is the put with spot and
// strike, rate and dividend yield swapped. One warp per solve:
//
//   * QD+ start: lane 0 runs the CPU's Newton root finds node after node (shortest tau
//     first, each started from the previous node), the warp waits (the starts chain);
//   * the fixed-point abscissae (node j, abscissa k) are spread over the lanes in slots:
//     a node owns Lp = (the power of two >= l) consecutive lanes of a row of 32 slots, so a
//     row holds 32 / Lp nodes and the node sums are butterfly shuffles within Lp lanes; the
//     rows (ceil(n / (32 / Lp)) of them) are walked in turn;
//   * the Chebyshev interpolant at every abscissa is the plan's mat-vec, each lane its own
//     columns of fmt (coalesced), H from the warp's shared memory;
//   * the fixed-point map at the nodes: lane j (and j + 32) for node j;
//   * the premium integral: lanes over the premium abscissae, butterfly sums.
//
// The option constants at the abscissae are kept in registers (STORE) where the rows are few,
// else recomputed each sweep (the same expressions, so the same values). The plan tables live
// in global memory (read-only, cached). Compiled with --fmad=false so the products and sums
// round as the CPU's do; exp, log, sqrt and Phi (normcdf) are the CUDA math library's.
//
// Defines from the launcher (gpu.py): WARPS (warps per block), MIN_BLOCKS (resident blocks per
// multiprocessor the register budget is cut for), NMAX (most nodes),
// QDPLUS_TOL, INV_SQRT_2PI, and the implied-vol status codes IV_OK, IV_BELOW, IV_ABOVE,
// IV_NOT_CONVERGED, IV_INVALID.

#define FULL_MASK 0xffffffffu

// Python's max / min (the CPU reference's): the first argument unless the second compares
// greater / smaller (NaN kept where it comes first)
__device__ __forceinline__ double pymax(double a, double b) { return (b > a) ? b : a; }
__device__ __forceinline__ double pymin(double a, double b) { return (b < a) ? b : a; }

__device__ __forceinline__ double warp_sum(double a, int width) {
    for (int o = width >> 1; o > 0; o >>= 1) a += __shfl_xor_sync(FULL_MASK, a, o);
    return a;
}

struct Plan {
    const double* __restrict__ ft;   // (n,) sqrt(tau_j / T)
    const double* __restrict__ fa;   // (l,) sqrt(s / tau)
    const double* __restrict__ fwa;  // (l,) ds / tau
    const double* __restrict__ fwb;  // (l,) ds / sqrt(s tau)
    const double* __restrict__ fmt;  // (n, n l) interpolation at the fixed-point abscissae
    const double* __restrict__ pa;   // (p,) sqrt(s / T)
    const double* __restrict__ pw;   // (p,) ds / T
    const double* __restrict__ pmt;  // (n, p) interpolation at the premium abscissae
    int n, l, m, p;
};

// The QD+ critical price of a put at time to expiry tau (Li 2005): cpu.qdplus_boundary.
__device__ double qdplus(double K, double r, double q, double sig, double tau, double X, double x0, double tol) {
    const double s2 = sig * sig;
    const double v = sig * sqrt(tau);
    const double dr = exp(-r * tau);
    const double dq = exp(-q * tau);
    const double ddr = (r == 0.0) ? 1.0 / tau : r / (-expm1(-r * tau));
    const double om = 2.0 * (r - q) / s2;
    const double disc = (om - 1.0) * (om - 1.0) + 8.0 * ddr / s2;
    const double sq = sqrt(disc);
    const double lam = 0.5 * (-(om - 1.0) - sq);
    const double A = -2.0 / (s2 * sq);
    const double beta = A * dr * ddr - A * dr * 2.0 * ddr * ddr / (s2 * disc) - lam;
    const double lo = 1e-8 * X;
    double x = pymin(pymax(x0, lo), X);
    const double c0 = (r - q) * tau / v + 0.5 * v - log(K) / v;
    for (int it = 0; it < 100; ++it) {
        const double dp = log(x) / v + c0;
        const double dm = dp - v;
        const double ep = exp(-0.5 * dp * dp);
        const double ph = INV_SQRT_2PI * ep;
        const double Pp = normcdf(-dp);
        const double Pm = normcdf(-dm);
        const double npv = dr * K * Pm - x * dq * Pp;
        const double theta = r * K * dr * Pm - q * x * dq * Pp - 0.5 * s2 * x / v * dq * ph;
        const double charm = dq * ph * ((q - r) / v + dm / (2.0 * tau)) - q * dq * Pp;
        const double F = (1.0 - dq * Pp) * x - beta * (K - x - npv) + A * theta;
        const double dF = (1.0 - dq * Pp) * (1.0 + beta) + dq * ph / v + A * charm;
        if (!(dF != 0.0 && isfinite(F) && isfinite(dF))) return nan("");
        const double xn = pymin(pymax(x - F / dF, lo), X);
        if (fabs(xn - x) < tol * X) return xn;
        x = xn;
    }
    return nan("");
}

// Per-warp shared memory: H_j = ln(B_j / X)^2, SN_j = sqrt(H_j), and the node sums.
struct WarpMem {
    double H[NMAX];
    double SN[NMAX];
    double K12[NMAX];
    double K3[NMAX];
};

// The option constants at abscissa (j, k): cpu.put_boundary's step 2.
__device__ __forceinline__ void slot_consts(const Plan& P, double sT, double sig, double q, double mu, int j, int k,
                                            double& ivs, double& cc, double& ea, double& eb) {
    const double st = sT * P.ft[j];
    const double zs = st * P.fa[k];
    ivs = 1.0 / (sig * zs);
    cc = mu * zs;
    const double e = exp(-q * zs * zs);
    const double c1 = st / sig * INV_SQRT_2PI;
    const double tau = st * st;
    ea = e * P.fwa[k] * tau;
    eb = e * P.fwb[k] * c1;
}

// The exercise boundary of a put (warp-collective): H, SN of the warp's memory; returns X.
template <int RMAX, bool STORE>
__device__ double put_boundary(const Plan& P, WarpMem& W, double K, double T, double r, double q, double sig) {
    const int lane = threadIdx.x & 31;
    const int n = P.n, l = P.l, nl = n * l;
    const double X = (r > 0.0 && q > 0.0) ? K * pymin(1.0, r / q) : K;
    const double sT = sqrt(T);
    // 1. QD+ at each node, shortest tau first, each root started from the previous one
    if (lane == 0) {
        double prev = X, hprev = 0.0, tprev = 1.0;
        for (int j = n - 1; j >= 0; --j) {
            const double tau = T * P.ft[j] * P.ft[j];
            const double x0 = hprev > 0.0 ? X * exp(-sqrt(hprev * tau / tprev)) : prev;
            double bq = qdplus(K, r, q, sig, tau, X, x0, QDPLUS_TOL);
            if (!(bq > 0.0 && bq <= X)) bq = prev;
            prev = bq;
            const double lg = log(bq / X);
            W.H[j] = lg * lg;
            W.SN[j] = sqrt(pymax(W.H[j], 0.0));
            hprev = W.H[j];
            tprev = tau;
        }
    }
    // slots: node j = row * G + lane / Lp, abscissa k = lane % Lp
    int Lp = 1;
    while (Lp < l) Lp <<= 1;
    const int G = 32 / Lp;
    const int rows = (n + G - 1) / G;
    const int kk = lane & (Lp - 1);
    const int jj = lane / Lp;
    const double mu = (r - q) / sig + 0.5 * sig;
    constexpr int RS = STORE ? RMAX : 1;
    double c_ivs[RS], c_cc[RS], c_ea[RS], c_eb[RS];
    if (STORE) {
#pragma unroll
        for (int rr = 0; rr < RS; ++rr) {
            const int j = rr * G + jj;
            if (rr < rows && kk < l && j < n) slot_consts(P, sT, sig, q, mu, j, kk, c_ivs[rr], c_cc[rr], c_ea[rr], c_eb[rr]);
        }
    }
    // node constants: lane j and j + 32
    double vn[2], eqn[2];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
        const int j = lane + 32 * t;
        if (j < n) {
            vn[t] = sig * sT * P.ft[j];
            eqn[t] = exp(-q * T * P.ft[j] * P.ft[j]);
        }
    }
    const double lxk = log(X / K);
    const double s2 = sig * sig;
    __syncwarp();
    constexpr int UNR = STORE ? RMAX : 1;
    double step = 1.0, last = __longlong_as_double(0x7ff0000000000000LL);  // +inf: the damping of cpu.put_boundary
    for (int it = 0; it < P.m; ++it) {
        // 3. the interpolant and the integrands at every abscissa, the node sums
#pragma unroll UNR
        for (int rr = 0; rr < RMAX; ++rr) {
            const int j = rr * G + jj;
            const bool active = rr < rows && kk < l && j < n;
            double a12 = 0.0, a3 = 0.0;
            if (active) {
                const int i = j * l + kk;
                double hu = 0.0;
                for (int c = 0; c < n; ++c) hu += P.fmt[c * nl + i] * W.H[c];
                double ivs, cc, ea, eb;
                if (STORE) {
                    ivs = c_ivs[rr]; cc = c_cc[rr]; ea = c_ea[rr]; eb = c_eb[rr];
                } else {
                    slot_consts(P, sT, sig, q, mu, j, kk, ivs, cc, ea, eb);
                }
                const double L = sqrt(pymax(hu, 0.0)) - W.SN[j];  // ln(B(tau_j) / B(u))
                const double d = L * ivs + cc;                     // d+(s, B(tau_j) / B(u))
                const double g = -0.5 * d * d;
                a12 = ea * normcdf(d) + eb * exp(g);
                a3 = eb * exp(g + L);
            }
            if (rr < rows) {  // rows is the same on every lane
                a12 = warp_sum(a12, Lp);
                a3 = warp_sum(a3, Lp);
                if (active && kk == 0) {
                    W.K12[j] = a12;
                    W.K3[j] = a3;
                }
            }
            if (!STORE && rr + 1 >= rows) break;
        }
        __syncwarp();
        // 4. the fixed-point map at each node (Jacobi), the first sweep a Jacobi-Newton step
        double hn[2];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            const int j = lane + 32 * t;
            if (j >= n) continue;
            const double v = vn[t], eq = eqn[t], sn = W.SN[j];
            const double dp = (lxk - sn + (r - q) * v * v / s2) / v + 0.5 * v;
            const double bx = exp(-sn);
            const double php = INV_SQRT_2PI * exp(-0.5 * dp * dp);
            const double Pd = normcdf(dp);
            const double b = X * bx;
            const double N = eq * php * (b / K) / v + r * W.K3[j];
            const double D = eq * (php / v + Pd) + q * W.K12[j];
            const double fv = K * N / D;
            const double Nd = -eq * php * (dp - v) / (K * v * v);
            const double Dd = eq * php * (1.0 / (b * v) - dp / (b * v * v));
            const double fd = K * (Nd / D - Dd * N / (D * D));
            double bn = it == 0 ? b + (fv - b) / (1.0 - fd) : fv;
            bn = (bn > 0.0 && bn < 1e300) ? bn : fv;
            const bool ok = D > 0.0 && N >= 0.0 && fv < 1e300;
            const double y = ok ? pymin(pymax(bn / X, 1e-300), 1.0) : bx;
            const double lg = log(y);
            hn[t] = lg * lg;
        }
        // a sweep whose largest update outgrows the previous sweep's halves the step from then
        // on (max is exact: the warp's order does not matter)
        double big = 0.0;
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            if (lane + 32 * t < n) big = pymax(big, fabs(hn[t] - W.H[lane + 32 * t]));
        }
        for (int o = 16; o > 0; o >>= 1) big = pymax(big, __shfl_xor_sync(FULL_MASK, big, o));
        if (it > 1 && big > last) step *= 0.5;
        last = big;
        __syncwarp();
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            const int j = lane + 32 * t;
            if (j < n) {
                const double h = W.H[j] + step * (hn[t] - W.H[j]);
                W.H[j] = h;
                W.SN[j] = sqrt(pymax(h, 0.0));
            }
        }
        __syncwarp();
    }
    return X;
}

// (price, delta, gamma, theta) of a put from its boundary (warp-collective; every lane gets
// the result): cpu.put_value.
__device__ double put_value(const Plan& P, const WarpMem& W, double S, double K, double T, double r, double q,
                            double sig, double X, bool greeks, double& delta, double& gamma, double& theta) {
    const int lane = threadIdx.x & 31;
    const int n = P.n, p = P.p;
    const double bT = X * exp(-sqrt(pymax(W.H[0], 0.0)));
    if (S <= bT) {
        delta = -1.0;
        gamma = 0.0;
        theta = 0.0;
        return K - S;
    }
    const double sT = sqrt(T);
    const double v = sig * sT;
    const double dp = (log(S / K) + (r - q) * T) / v + 0.5 * v;
    const double dm = dp - v;
    const double er = exp(-r * T);
    const double eq = exp(-q * T);
    const double ep = exp(-0.5 * dp * dp);
    const double Pp = normcdf(-dp);
    const double euro = K * er * normcdf(-dm) - S * eq * Pp;
    const double de = -eq * Pp;
    const double ge = eq * INV_SQRT_2PI * ep / (S * v);
    const double lsx = log(S / X);
    const double kx = K / X;
    double prem = 0.0, dprem = 0.0, gprem = 0.0;
    for (int k = lane; k < p; k += 32) {
        double hp = 0.0;
        for (int c = 0; c < n; ++c) hp += P.pmt[c * p + k] * W.H[c];
        const double z = sT * P.pa[k];                       // sqrt(s)
        const double s = z * z;
        const double sh = sqrt(pymax(hp, 0.0));             // ln(X / B(T - s))
        const double vs = sig * z;
        const double e1 = (lsx + sh + (r - q) * s) / vs + 0.5 * vs;
        const double e2 = e1 - vs;
        const double P1 = normcdf(-e1);
        const double P2 = normcdf(-e2);
        const double fq = exp(-q * s);
        const double fr = exp(-r * s);
        const double ws = P.pw[k] * T;
        prem += ws * (r * K * fr * P2 - q * S * fq * P1);
        if (greeks && sh < 700.0) {
            const double a = q - r * kx * exp(sh);           // q - r K / B(T - s)
            const double ph = INV_SQRT_2PI * exp(-0.5 * e1 * e1);
            dprem += ws * fq * (ph * a / vs - q * P1);
            gprem += ws * fq * ph / (S * vs) * (q + a * (-e1) / vs);
        }
    }
    prem = warp_sum(prem, 32);
    const double price = pymax(euro, 0.0) + pymax(prem, 0.0);
    if (!greeks) {
        delta = gamma = theta = nan("");
        return price;
    }
    dprem = warp_sum(dprem, 32);
    gprem = warp_sum(gprem, 32);
    delta = de + dprem;
    gamma = ge + gprem;
    theta = r * price - (r - q) * S * delta - 0.5 * sig * sig * S * S * gamma;
    return price;
}

// One American option of the single-boundary regime (warp-collective): cpu.alo_one.
template <int RMAX, bool STORE>
__device__ double alo_one(const Plan& P, WarpMem& W, bool is_call, double S, double K, double T, double r, double q,
                          double sig, bool greeks, double& delta, double& gamma, double& theta) {
    if (is_call) {
        const double X = put_boundary<RMAX, STORE>(P, W, S, T, q, r, sig);
        const double pr = put_value(P, W, K, S, T, q, r, sig, X, greeks, delta, gamma, theta);
        if (greeks) {
            delta = (pr - K * delta) / S;
            gamma = K * K * gamma / (S * S);
        }
        return pr;
    }
    const double X = put_boundary<RMAX, STORE>(P, W, K, T, r, q, sig);
    return put_value(P, W, S, K, T, r, q, sig, X, greeks, delta, gamma, theta);
}

#define PLAN_ARGS                                                                                            \
    const double *__restrict__ ft, const double *__restrict__ fa, const double *__restrict__ fwa,            \
        const double *__restrict__ fwb, const double *__restrict__ fmt, const double *__restrict__ pa,       \
        const double *__restrict__ pw, const double *__restrict__ pmt, int n, int l, int m, int p
#define PLAN_INIT {ft, fa, fwa, fwb, fmt, pa, pw, pmt, n, l, m, p}

// Prices of a batch, one warp per (option, solve): solve 0 the option (with delta, gamma,
// theta when greeks), then the bumped solves of cpu.alo_batch_kernel: 1, 2 volatility +- hv
// (hv = min(vega_bump, sigma / 2)); 3, 4 rate + rho_bump and rate - rho_bump (a put's lower
// end kept at r where r - rho_bump <= 0); 5, 6 dividend yield +- rho_bump (a call's lower end
// kept at q where q - rho_bump <= 0). out (nsolve + 3, nopt): the solves' prices, then delta,
// gamma, theta of solve 0.
template <int RMAX, bool STORE>
__global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
alo_batch(const signed char* __restrict__ kind, const double* __restrict__ S, const double* __restrict__ K,
          const double* __restrict__ T, const double* __restrict__ r, const double* __restrict__ q,
          const double* __restrict__ sig, long long nopt, int nsolve, int greeks, double vega_bump, double rho_bump,
          PLAN_ARGS, double* __restrict__ out) {
    __shared__ WarpMem mem[WARPS];
    const long long gw = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (gw >= nopt * nsolve) return;  // whole warps
    const Plan P = PLAN_INIT;
    WarpMem& W = mem[threadIdx.x >> 5];
    const long long i = gw / nsolve;
    const int s = (int)(gw - i * nsolve);
    const bool c = kind[i] == 1;
    double sg = sig[i], rr = r[i], qq = q[i];
    const double hv = pymin(vega_bump, 0.5 * sg);
    if (s == 1) sg = sg + hv;
    if (s == 2) sg = sg - hv;
    if (s == 3) rr = rr + rho_bump;
    if (s == 4) {
        const double rm = rr - rho_bump;
        rr = (!c && rm <= 0.0) ? rr : rm;
    }
    if (s == 5) qq = qq + rho_bump;
    if (s == 6) {
        const double qm = qq - rho_bump;
        qq = (c && qm <= 0.0) ? qq : qm;
    }
    const bool g = greeks && s == 0;
    double d, ga, th;
    const double pr = alo_one<RMAX, STORE>(P, W, c, S[i], K[i], T[i], rr, qq, sg, g, d, ga, th);
    if ((threadIdx.x & 31) == 0) {
        out[s * nopt + i] = pr;
        if (g) {
            out[(nsolve + 0) * nopt + i] = d;
            out[(nsolve + 1) * nopt + i] = ga;
            out[(nsolve + 2) * nopt + i] = th;
        }
    }
}

__device__ __forceinline__ double euro_vega(double S, double T, double q, double sig, double lsk, double mu_t) {
    const double v = sig * sqrt(T);
    const double d = (lsk + mu_t) / v + 0.5 * v;
    return S * exp(-q * T) * INV_SQRT_2PI * exp(-0.5 * d * d) * sqrt(T);
}

// Implied volatilities on the engine's price, one warp per option: cpu.alo_iv_kernel's search
// (a Newton step with the European vega from the at-the-money guess, then secant steps kept
// inside the bracket the signs give, the bracket ends priced only when reached).
template <int RMAX, bool STORE>
__global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
alo_iv(const double* __restrict__ target, const signed char* __restrict__ kind, const double* __restrict__ S,
       const double* __restrict__ K, const double* __restrict__ T, const double* __restrict__ r,
       const double* __restrict__ q, const double* __restrict__ lo, const double* __restrict__ hi, double xtol,
       long long nopt, PLAN_ARGS, double* __restrict__ vol, signed char* __restrict__ status) {
    __shared__ WarpMem mem[WARPS];
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (i >= nopt) return;
    const Plan P = PLAN_INIT;
    WarpMem& W = mem[threadIdx.x >> 5];
    const bool lead = (threadIdx.x & 31) == 0;
    const double pt = target[i];
    if (!(isfinite(pt) && pt >= 0.0)) {
        if (lead) {
            status[i] = IV_INVALID;
            vol[i] = nan("");
        }
        return;
    }
    const bool c = kind[i] == 1;
    const double Si = S[i], Ki = K[i], Ti = T[i], ri = r[i], qi = q[i];
    double a = lo[i], b = hi[i];
    bool a_known = false, b_known = false;
    const double ftol = 1e-13 * pymax(1.0, pt);
    double x = sqrt(6.283185307179586 / Ti) * pt / Si;
    if (!(x > a && x < b)) x = b < 1.0 ? 0.5 * (a + b) : sqrt(a * b);
    int st = IV_NOT_CONVERGED;
    double xp = nan(""), fp = nan("");
    const double lsk = log(Si / Ki);
    const double mu_t = (ri - qi) * Ti;
    double d, g, th;
    for (int it = 0; it < 100; ++it) {
        const double f = alo_one<RMAX, STORE>(P, W, c, Si, Ki, Ti, ri, qi, x, false, d, g, th) - pt;
        if (fabs(f) <= ftol) {
            st = IV_OK;
            break;
        }
        if (f < 0.0) {
            a = x;
            a_known = true;
        } else {
            b = x;
            b_known = true;
        }
        double xn;
        if (isfinite(fp) && f != fp) {
            xn = x - f * (x - xp) / (f - fp);
        } else {
            const double vg = euro_vega(Si, Ti, qi, x, lsk, mu_t);
            xn = vg > 1e-300 ? x - f / vg : nan("");
        }
        xp = x;
        fp = f;
        if (!(xn > a && xn < b)) {
            if (xn <= a && !a_known) {
                xn = a;
            } else if (xn >= b && !b_known) {
                xn = b;
            } else {
                xn = 0.5 * (a + b);
                fp = nan("");
            }
        }
        if ((xn == a && !a_known) || (xn == b && !b_known)) {
            const double fe = alo_one<RMAX, STORE>(P, W, c, Si, Ki, Ti, ri, qi, xn, false, d, g, th) - pt;
            if (xn == a) {
                a_known = true;
                if (fe > ftol) {
                    st = IV_BELOW;
                    break;
                }
            } else {
                b_known = true;
                if (fe < -ftol) {
                    st = IV_ABOVE;
                    break;
                }
            }
            if (fabs(fe) <= ftol) {
                x = xn;
                st = IV_OK;
                break;
            }
            xn = 0.5 * (a + b);
            fp = nan("");
        }
        const double step = fabs(xn - x);
        x = xn;
        if (step <= xtol || (a_known && b_known && b - a <= xtol)) {
            st = IV_OK;
            break;
        }
    }
    if (lead) {
        status[i] = (signed char)st;
        vol[i] = st == IV_OK ? x : nan("");
    }
}
