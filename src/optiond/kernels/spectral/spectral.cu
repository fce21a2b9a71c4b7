// The spectral American engine (Andersen, Lake & Offengenden 2016) on an NVIDIA GPU, FP64.
//
// The recurrences are those of the CPU reference (cpu.py beside this file, its module
// docstring: steps 1-5, the damped step of step 4 included), written for an American put; a
// call is the put with spot and strike, rate and dividend yield swapped.
//
// Two layouts of the same recurrences (each kernel a template on WARP):
//
//   * one thread per solve (an option, or one of its bumped solves for vega and rho), for
//     batches that fill the device: a warp prices 32 contracts side by side through the same
//     plan (every thread reads the same table entry at the same time: one broadcast load). H_j
//     lives in the block's shared memory, node-major with the threads side by side (thread t's
//     H_j at j * TPB + t: no bank conflicts), a sweep's new values in the thread's local memory;
//     per sweep, node after node: the Chebyshev interpolant at the node's l abscissae (the
//     plan's mat-vec), the integrands, the two sums, the fixed-point map, in the CPU's Jacobi
//     order and summation order. Throughput: no idle lane.
//   * one warp per solve, for small batches (a chain's implied vols), where the thread layout
//     leaves most of the device idle and each thread's long chain of dependent special functions
//     sets the time: lane j runs node j's QD+ root find and fixed-point map, the abscissae are
//     spread over the lanes (boundary_warp describes the slots), the node sums are butterfly
//     sums. Latency: a solve's work spread over 32 lanes.
//
// The launcher (gpu.py) picks the layout by the launch's solve count (THREAD_MIN_SOLVES).

// The normal distribution function is Cody's rational form given exp(-x^2 / 2) (vmath.ncdf_e,
// the same coefficients), so a (Phi, phi) pair costs one exp, as on the CPU; exp, log, expm1
// and sqrt are the CUDA math library's. Compiled with --fmad=false so products and sums round
// as the CPU's do.
//
// Defines from the launcher (gpu.py): TPB (threads per block), MIN_BLOCKS (resident blocks
// per multiprocessor the register budget is cut for), NMAX (most nodes), QDPLUS_TOL,
// INV_SQRT_2PI, and the implied-vol status codes IV_OK, IV_BELOW, IV_ABOVE, IV_NOT_CONVERGED,
// IV_INVALID.

// Python's max / min (the CPU reference's): the first argument unless the second compares
// greater / smaller (NaN kept where it comes first)
__device__ __forceinline__ double pymax(double a, double b) { return (b > a) ? b : a; }
__device__ __forceinline__ double pymin(double a, double b) { return (b < a) ? b : a; }

// W. J. Cody (1969), Math. Comp. 23(107), 631-637: vmath._CA, _CB, _CC, _CD, _CP, _CQ.
__device__ __forceinline__ double erf_small(double y) {
    const double z = y * y;
    double num = 1.85777706184603153e-1 * z, den = z;
    num = (num + 3.16112374387056560e00) * z; den = (den + 2.36012909523441209e01) * z;
    num = (num + 1.13864154151050156e02) * z; den = (den + 2.44024637934444173e02) * z;
    num = (num + 3.77485237685302021e02) * z; den = (den + 1.28261652607737228e03) * z;
    return y * (num + 3.20937758913846947e03) / (den + 2.84423683343917062e03);
}

__device__ __forceinline__ double erfcx_mid(double y) {
    double num = 2.15311535474403846e-8 * y, den = y;
    num = (num + 5.64188496988670089e-1) * y; den = (den + 1.57449261107098347e01) * y;
    num = (num + 8.88314979438837594e00) * y; den = (den + 1.17693950891312499e02) * y;
    num = (num + 6.61191906371416295e01) * y; den = (den + 5.37181101862009858e02) * y;
    num = (num + 2.98635138197400131e02) * y; den = (den + 1.62138957456669019e03) * y;
    num = (num + 8.81952221241769090e02) * y; den = (den + 3.29079923573345963e03) * y;
    num = (num + 1.71204761263407058e03) * y; den = (den + 4.36261909014324716e03) * y;
    num = (num + 2.05107837782607147e03) * y; den = (den + 3.43936767414372164e03) * y;
    return (num + 1.23033935479799725e03) / (den + 1.23033935480374942e03);
}

__device__ __forceinline__ double erfcx_big(double y) {
    const double z = 1.0 / (y * y);
    double num = 1.63153871373020978e-2 * z, den = z;
    num = (num + 3.05326634961232344e-1) * z; den = (den + 2.56852019228982242e00) * z;
    num = (num + 3.60344899949804439e-1) * z; den = (den + 1.87295284992346047e00) * z;
    num = (num + 1.25781726111229246e-1) * z; den = (den + 5.27905102951428412e-1) * z;
    num = (num + 1.60837851487422766e-2) * z; den = (den + 6.05183413124413191e-2) * z;
    return (0.5641895835477563 - z * (num + 6.58749161529837803e-4) / (den + 2.33520497626869185e-3)) / y;
}

// Phi(x) given ex = exp(-x^2 / 2): vmath.ncdf_e.
__device__ __forceinline__ double ncdf_e(double x, double ex) {
    const double y = fabs(x) * 0.7071067811865476;
    if (y <= 0.46875) {
        const double e = erf_small(y);
        return x >= 0.0 ? 0.5 + 0.5 * e : 0.5 - 0.5 * e;
    }
    const double tail = 0.5 * ex * (y <= 4.0 ? erfcx_mid(y) : erfcx_big(y));
    return x < 0.0 ? tail : 1.0 - tail;
}

struct Plan {
    const double* __restrict__ ft;   // (n,) sqrt(tau_j / T)
    const double* __restrict__ fa;   // (l,) sqrt(s / tau)
    const double* __restrict__ ifa;  // (l,) 1 / fa (the launcher's)
    const double* __restrict__ fwa;  // (l,) ds / tau
    const double* __restrict__ fwb;  // (l,) ds / sqrt(s tau)
    const double* __restrict__ fmt;  // (n, n l) interpolation at the fixed-point abscissae
    const double* __restrict__ pa;   // (p,) sqrt(s / T)
    const double* __restrict__ pw;   // (p,) ds / T
    const double* __restrict__ pmt;  // (n, p) interpolation at the premium abscissae
    int n, l, m, p;
};

// The seed of the QD+ root finds (Barone-Adesi & Whaley 1987): qdplus.qdplus_seed; su and
// c = K / (K - su), the seed at tau being su + (K - su) exp(((r - q) tau - 2 sigma sqrt(tau)) c).
__device__ __forceinline__ void qdplus_seed(double K, double r, double q, double sig, double& su, double& c) {
    const double s2 = sig * sig;
    const double om = 2.0 * (r - q) / s2;
    const double qinf = 0.5 * (-(om - 1.0) - sqrt((om - 1.0) * (om - 1.0) + 8.0 * r / s2));
    su = qinf < 0.0 ? K / (1.0 - 1.0 / qinf) : 0.0;
    c = K / (K - su);
}

// 1 - e^{-x} for x >= 0 given ex = e^{-x}: vmath.one_minus_exp.
__device__ __forceinline__ double one_minus_exp(double x, double ex) {
    const double series = x * (1.0 - x * (0.5 - x * (1.0 / 6.0 - x * (1.0 / 24.0))));
    return x < 1e-3 ? series : 1.0 - ex;
}

// The QD+ critical price of a put at one node (Li 2005): qdplus.qdplus_nodes, one node's Halley
// root find from its seed; the seed where a step fails or 100 do not converge.
__device__ double qdplus(double K, double r, double q, double sig, double tau, double v, double X, double su,
                         double ksu, double tol) {
    const double s2 = sig * sig;
    const double dr = exp(-r * tau);
    const double dq = exp(-q * tau);
    const double ddr = (r != 0.0) ? r / one_minus_exp(r * tau, dr) : 1.0 / tau;
    const double om = 2.0 * (r - q) / s2;
    const double is2 = 1.0 / s2;
    const double disc = (om - 1.0) * (om - 1.0) + 8.0 * ddr * is2;
    const double sq = sqrt(disc);
    const double isq = 1.0 / sq;
    const double lam = 0.5 * (-(om - 1.0) - sq);
    const double A = -2.0 * is2 * isq;
    const double beta = A * dr * ddr * (1.0 - 2.0 * ddr * is2 * isq * isq) - lam;
    const double lo = 1e-8 * X;
    const double seed = su + (K - su) * exp(((r - q) * tau - 2.0 * v) * ksu);
    const double x0 = (seed > lo && seed < X) ? seed : (seed <= lo ? lo : X);
    double x = x0;
    const double iv = 1.0 / v, i2t = 0.5 / tau;
    const double c0 = ((r - q) * tau - log(K)) * iv + 0.5 * v;
    for (int it = 0; it < 100; ++it) {
        const double dp = log(x) * iv + c0;
        const double dm = dp - v;
        const double ep = exp(-0.5 * dp * dp);
        const double ph = INV_SQRT_2PI * ep;
        const double Pp = ncdf_e(-dp, ep);
        const double Pm = ncdf_e(-dm, exp(-0.5 * dm * dm));
        const double npv = dr * K * Pm - x * dq * Pp;
        const double theta = r * K * dr * Pm - q * x * dq * Pp - 0.5 * s2 * x * iv * dq * ph;
        const double g = (q - r) * iv + dm * i2t;
        const double charm = dq * ph * g - q * dq * Pp;
        const double F = (1.0 - dq * Pp) * x - beta * (K - x - npv) + A * theta;
        const double dF = (1.0 - dq * Pp) * (1.0 + beta) + dq * ph * iv + A * charm;
        const double d2F = dq * ph * iv / x * ((1.0 + beta) - dp * iv + A * (i2t + q - dp * g));
        if (!(dF != 0.0 && isfinite(F) && isfinite(dF))) return x0;
        const double newton = F / dF;
        const double t = 0.5 * newton * d2F / dF;  // Halley's step: the Newton step / (1 - t)
        const double xn = pymin(pymax(x - (fabs(t) < 0.5 ? newton / (1.0 - t) : newton), lo), X);
        if (fabs(xn - x) < tol * X) return xn;
        x = xn;
    }
    return x0;
}

// ---------------------------------------------------------------- the recurrences, per piece

// The integrands at abscissa (j, k) (cpu.put_boundary's steps 3-4): adds node j's K12 and K3
// terms. H_c at H[c * hs]; st = sqrt(tau_j), c1 = st / (sigma sqrt(2 pi)), ist = 1 / (sigma st),
// sh = sqrt(H_j), mu = (r - q) / sigma + sigma / 2.
__device__ __forceinline__ void integrand(const Plan& P, const double* H, int hs, int j, int k, double st, double c1,
                                          double ist, double sh, double q, double mu, double& a12, double& a3) {
    const int n = P.n, l = P.l, nl = n * l, i = j * l + k;
    double hu = 0.0;
#pragma unroll 4
    for (int c = 0; c < n; ++c) hu += __ldg(P.fmt + c * nl + i) * H[c * hs];
    const double tau = st * st;
    const double zs = st * __ldg(P.fa + k);             // sqrt(s_jk)
    const double ivs = ist * __ldg(P.ifa + k);          // 1 / (sigma sqrt(s_jk))
    const double e = exp(-q * zs * zs);
    const double ea = e * __ldg(P.fwa + k) * tau;
    const double eb = e * __ldg(P.fwb + k) * c1;
    const double L = sqrt(pymax(hu, 0.0)) - sh;          // ln(B(tau_j) / B(u))
    const double d = L * ivs + mu * zs;                  // d+(s, B(tau_j) / B(u))
    const double g = -0.5 * d * d;
    const double eg = exp(g);
    a12 += ea * ncdf_e(d, eg) + eb * eg;
    a3 += eb * exp(g + L);                               // e^{-r s} phi(d-) = e^{-q s} phi(d+) e^L
}

// The fixed-point map at node j (cpu.put_boundary's step 4; a Jacobi-Newton step where newton):
// the new H_j from the node's sums k12, k3. st = sqrt(tau_j), sh = sqrt(H_j), lxk = ln(X / K).
__device__ __forceinline__ double node_map(bool newton, double k12, double k3, double st, double sh, double X,
                                           double K, double lxk, double r, double q, double sig) {
    const double tau = st * st;
    const double v = sig * st;
    const double iv = 1.0 / v;
    const double eq = exp(-q * tau);
    const double dp = (lxk + (r - q) * tau - sh) * iv + 0.5 * v;
    const double bx = exp(-sh);
    const double ep = exp(-0.5 * dp * dp);
    const double php = INV_SQRT_2PI * ep;
    const double Pd = ncdf_e(dp, ep);
    const double b = X * bx;
    const double ik = 1.0 / K;
    const double N = eq * php * b * ik * iv + r * k3;   // e^{-r tau} phi(d-) = e^{-q tau} phi(d+) b / K
    const double D = eq * (php * iv + Pd) + q * k12;
    const double fv = K * N / D;
    double bn = fv;
    if (newton) {  // ALO 2016: the derivative of the explicit terms
        const double Nd = -eq * php * (dp - v) * ik * iv * iv;
        const double Dd = eq * php * iv * (1.0 - dp * iv) / b;
        const double fd = K * (Nd - Dd * N / D) / D;
        bn = b + (fv - b) / (1.0 - fd);
        bn = (bn > 0.0 && bn < 1e300) ? bn : fv;
    }
    const bool ok = D > 0.0 && N >= 0.0 && fv < 1e300;  // else the densities underflow: keep the node
    const double y = ok ? pymin(pymax(bn * (1.0 / X), 1e-300), 1.0) : bx;
    const double lg = log(y);
    return lg * lg;
}

// The premium integrand at premium abscissa k (cpu.put_value): adds to prem (and, with greeks,
// to dprem, gprem). lsx = ln(S / X), kx = K / X.
__device__ __forceinline__ void premium_term(const Plan& P, const double* H, int hs, int k, double S, double K,
                                             double T, double sT, double r, double q, double sig, double lsx,
                                             double kx, bool greeks, double& prem, double& dprem, double& gprem) {
    const int n = P.n, p = P.p;
    double hp = 0.0;
#pragma unroll 4
    for (int c = 0; c < n; ++c) hp += __ldg(P.pmt + c * p + k) * H[c * hs];
    const double z = sT * __ldg(P.pa + k);              // sqrt(s)
    const double s = z * z;
    const double sh = sqrt(pymax(hp, 0.0));             // ln(X / B(T - s))
    const double vs = sig * z;
    const double e1 = (lsx + sh + (r - q) * s) / vs + 0.5 * vs;
    const double e2 = e1 - vs;
    const double x1 = exp(-0.5 * e1 * e1);
    const double P1 = ncdf_e(-e1, x1);
    const double P2 = ncdf_e(-e2, exp(-0.5 * e2 * e2));
    const double fq = exp(-q * s);
    const double fr = exp(-r * s);
    const double ws = __ldg(P.pw + k) * T;
    prem += ws * (r * K * fr * P2 - q * S * fq * P1);
    if (greeks && sh < 700.0) {
        const double a = q - r * kx * exp(sh);          // q - r K / B(T - s)
        const double ph = INV_SQRT_2PI * x1;
        dprem += ws * fq * (ph * a / vs - q * P1);
        gprem += ws * fq * ph / (S * vs) * (q + a * (-e1) / vs);
    }
}

// The European part of cpu.put_value: (euro, de, ge) of a put; S above the boundary.
__device__ __forceinline__ double european(double S, double K, double T, double r, double q, double sig,
                                           double& de, double& ge) {
    const double v = sig * sqrt(T);
    const double dp = (log(S / K) + (r - q) * T) / v + 0.5 * v;
    const double dm = dp - v;
    const double eq = exp(-q * T);
    const double ep = exp(-0.5 * dp * dp);
    const double Pp = ncdf_e(-dp, ep);
    de = -eq * Pp;
    ge = eq * INV_SQRT_2PI * ep / (S * v);
    return K * exp(-r * T) * ncdf_e(-dm, exp(-0.5 * dm * dm)) - S * eq * Pp;
}

// price from the parts; delta, gamma, theta (cpu.put_value's end).
__device__ __forceinline__ double assemble(double euro, double de, double ge, double prem, double dprem, double gprem,
                                           double S, double r, double q, double sig, bool greeks, double& delta,
                                           double& gamma, double& theta) {
    const double price = pymax(euro, 0.0) + pymax(prem, 0.0);
    if (!greeks) {
        delta = gamma = theta = nan("");
        return price;
    }
    delta = de + dprem;
    gamma = ge + gprem;
    theta = r * price - (r - q) * S * delta - 0.5 * sig * sig * S * S * gamma;
    return price;
}

// ------------------------------------------------------------ one thread per solve (batches)

// The exercise boundary of a put, one thread: H_j = ln(B(tau_j) / X)^2 at H[j * hs] (the
// block's shared array, the threads side by side); returns X (cpu.put_boundary).
__device__ double boundary_thread(const Plan& P, double* H, int hs, double K, double T, double r, double q,
                                  double sig) {
    const int n = P.n, l = P.l;
    const double X = (r > 0.0 && q > 0.0) ? K * pymin(1.0, r / q) : K;
    const double sT = sqrt(T);
    double su, ksu;
    qdplus_seed(K, r, q, sig, su, ksu);
    for (int j = 0; j < n; ++j) {  // 1. QD+ at every node, each from its own seed
        const double tau = T * P.ft[j] * P.ft[j];
        const double lg = log(qdplus(K, r, q, sig, tau, sig * sT * P.ft[j], X, su, ksu, QDPLUS_TOL) / X);
        H[j * hs] = lg * lg;
    }
    const double mu = (r - q) / sig + 0.5 * sig;
    const double lxk = log(X / K);
    double hn[NMAX];
    double step = 1.0, last = __longlong_as_double(0x7ff0000000000000LL);  // +inf: the damping of cpu.put_boundary
    for (int it = 0; it < P.m; ++it) {
        for (int j = 0; j < n; ++j) {
            const double st = sT * P.ft[j];
            const double c1 = st / sig * INV_SQRT_2PI;
            const double ist = 1.0 / (sig * st);
            const double sh = sqrt(pymax(H[j * hs], 0.0));  // ln(X / B(tau_j))
            double k12 = 0.0, k3 = 0.0;
            for (int k = 0; k < l; ++k) integrand(P, H, hs, j, k, st, c1, ist, sh, q, mu, k12, k3);
            hn[j] = node_map(it == 0, k12, k3, st, sh, X, K, lxk, r, q, sig);
        }
        // a sweep whose largest update outgrows the previous sweep's halves the step from then on
        double big = 0.0;
        for (int j = 0; j < n; ++j) big = pymax(big, fabs(hn[j] - H[j * hs]));
        if (it > 1 && big > last) step *= 0.5;
        last = big;
        for (int j = 0; j < n; ++j) H[j * hs] += step * (hn[j] - H[j * hs]);
    }
    return X;
}

// ------------------------------------------------------------ one warp per solve (latency)

__device__ __forceinline__ double warp_sum(double a, int width) {
    for (int o = width >> 1; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    return a;
}

// The exercise boundary of a put, warp-collective: lane j (and j + 32, j + 64) runs node j's
// QD+ root find and fixed-point map; the abscissae (j, k) are spread over the lanes in slots (a
// node owns Lp = the power of two >= l consecutive lanes, up to 32; the node sums are butterfly
// sums within them; rows of 32 slots walked in turn). W: the warp's shared memory, H_j at W[j],
// sqrt(H_j) at W[n + j], the sums at W[2n + j], W[3n + j]. Returns X (cpu.put_boundary).
__device__ double boundary_warp(const Plan& P, double* W, double K, double T, double r, double q, double sig) {
    const int lane = threadIdx.x & 31;
    const int n = P.n, l = P.l;
    double* H = W;
    double* SN = W + n;
    double* K12 = W + 2 * n;
    double* K3 = W + 3 * n;
    const double X = (r > 0.0 && q > 0.0) ? K * pymin(1.0, r / q) : K;
    const double sT = sqrt(T);
    double su, ksu;
    qdplus_seed(K, r, q, sig, su, ksu);
    for (int j = lane; j < n; j += 32) {  // 1. QD+ at every node, each from its own seed
        const double tau = T * P.ft[j] * P.ft[j];
        const double lg = log(qdplus(K, r, q, sig, tau, sig * sT * P.ft[j], X, su, ksu, QDPLUS_TOL) / X);
        H[j] = lg * lg;
        SN[j] = sqrt(pymax(H[j], 0.0));
    }
    int Lp = 1;
    while (Lp < l && Lp < 32) Lp <<= 1;
    const int G = 32 / Lp;                   // nodes a row of slots holds
    const int rows = (n + G - 1) / G;
    const int kk = lane & (Lp - 1), jj = lane / Lp;
    const double mu = (r - q) / sig + 0.5 * sig;
    const double lxk = log(X / K);
    double step = 1.0, last = __longlong_as_double(0x7ff0000000000000LL);
    __syncwarp();
    for (int it = 0; it < P.m; ++it) {
        for (int rr = 0; rr < rows; ++rr) {  // rows is the same on every lane
            const int j = rr * G + jj;
            double a12 = 0.0, a3 = 0.0;
            if (j < n) {
                const double st = sT * P.ft[j];
                const double c1 = st / sig * INV_SQRT_2PI;
                const double ist = 1.0 / (sig * st);
                for (int k = kk; k < l; k += Lp) integrand(P, H, 1, j, k, st, c1, ist, SN[j], q, mu, a12, a3);
            }
            a12 = warp_sum(a12, Lp);
            a3 = warp_sum(a3, Lp);
            if (j < n && kk == 0) {
                K12[j] = a12;
                K3[j] = a3;
            }
        }
        __syncwarp();
        double hn[3], big = 0.0;
#pragma unroll
        for (int t = 0; t < 3; ++t) {
            const int j = lane + 32 * t;
            if (j < n) {
                hn[t] = node_map(it == 0, K12[j], K3[j], sT * P.ft[j], SN[j], X, K, lxk, r, q, sig);
                big = pymax(big, fabs(hn[t] - H[j]));
            }
        }
        // the damping (max is exact: the warp's order does not matter)
        for (int o = 16; o > 0; o >>= 1) big = pymax(big, __shfl_xor_sync(0xffffffffu, big, o));
        if (it > 1 && big > last) step *= 0.5;
        last = big;
        __syncwarp();
#pragma unroll
        for (int t = 0; t < 3; ++t) {
            const int j = lane + 32 * t;
            if (j < n) {
                H[j] += step * (hn[t] - H[j]);
                SN[j] = sqrt(pymax(H[j], 0.0));
            }
        }
        __syncwarp();
    }
    return X;
}

// (price, delta, gamma, theta) of a put from its boundary (H_j at H[j * hs]): cpu.put_value. One
// thread (WARP false), or warp-collective with the premium abscissae over the lanes (every lane
// gets the result).
template <bool WARP>
__device__ double put_value(const Plan& P, const double* H, int hs, double S, double K, double T, double r, double q,
                            double sig, double X, bool greeks, double& delta, double& gamma, double& theta) {
    if (S <= X * exp(-sqrt(pymax(H[0], 0.0)))) {
        delta = -1.0;
        gamma = 0.0;
        theta = 0.0;
        return K - S;
    }
    double de, ge;
    const double euro = european(S, K, T, r, q, sig, de, ge);
    const double sT = sqrt(T), lsx = log(S / X), kx = K / X;
    double prem = 0.0, dprem = 0.0, gprem = 0.0;
    const int k0 = WARP ? (threadIdx.x & 31) : 0, dk = WARP ? 32 : 1;
    for (int k = k0; k < P.p; k += dk) premium_term(P, H, hs, k, S, K, T, sT, r, q, sig, lsx, kx, greeks, prem, dprem, gprem);
    if (WARP) {
        prem = warp_sum(prem, 32);
        if (greeks) {
            dprem = warp_sum(dprem, 32);
            gprem = warp_sum(gprem, 32);
        }
    }
    return assemble(euro, de, ge, prem, dprem, gprem, S, r, q, sig, greeks, delta, gamma, theta);
}

// ------------------------------------------------------------------------------ the kernels

// One American option of the single-boundary regime (cpu.alo_one), by one thread (WARP false;
// mem: the thread's column of the block's shared array, stride TPB) or one warp (mem: the
// warp's shared memory, 4 n doubles).
template <bool WARP>
__device__ double alo_one(const Plan& P, double* mem, bool is_call, double S, double K, double T, double r, double q,
                          double sig, bool greeks, double& delta, double& gamma, double& theta) {
    if (is_call) {  // the put with spot and strike, rate and dividend yield swapped
        const double X = WARP ? boundary_warp(P, mem, S, T, q, r, sig) : boundary_thread(P, mem, TPB, S, T, q, r, sig);
        const double pr = put_value<WARP>(P, mem, WARP ? 1 : TPB, K, S, T, q, r, sig, X, greeks, delta, gamma, theta);
        if (greeks) {
            delta = (pr - K * delta) / S;
            gamma = K * K * gamma / (S * S);
        }
        return pr;
    }
    const double X = WARP ? boundary_warp(P, mem, K, T, r, q, sig) : boundary_thread(P, mem, TPB, K, T, r, q, sig);
    return put_value<WARP>(P, mem, WARP ? 1 : TPB, S, K, T, r, q, sig, X, greeks, delta, gamma, theta);
}

// The solver's index in the launch, its shared memory, and whether it writes the outputs.
template <bool WARP>
__device__ __forceinline__ long long solver(const Plan& P, double*& mem, bool& lead) {
    extern __shared__ double smem[];  // thread layout: (n, TPB); warp layout: (TPB / 32, 4 n)
    if (WARP) {
        mem = smem + (threadIdx.x >> 5) * 4 * P.n;
        lead = (threadIdx.x & 31) == 0;
        return ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    }
    mem = smem + threadIdx.x;
    lead = true;
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}

#define PLAN_ARGS                                                                                            \
    const double *__restrict__ ft, const double *__restrict__ fa, const double *__restrict__ fwa,            \
        const double *__restrict__ fwb, const double *__restrict__ fmt, const double *__restrict__ pa,       \
        const double *__restrict__ pw, const double *__restrict__ pmt, const double *__restrict__ ifa, int n, \
        int l, int m, int p
#define PLAN_INIT {ft, fa, ifa, fwa, fwb, fmt, pa, pw, pmt, n, l, m, p}

// Prices of a batch, one solver (thread or warp) per (option, solve): solve 0 the option (with
// delta, gamma, theta when greeks), then the bumped solves of cpu.alo_batch_kernel: 1, 2
// volatility +- hv (hv = min(vega_bump, sigma / 2)); 3, 4 rate + rho_bump and rate - rho_bump
// (a put's lower end kept at r where r - rho_bump <= 0); 5, 6 dividend yield +- rho_bump (a
// call's lower end kept at q where q - rho_bump <= 0). The solves of an option are neighbours.
// out (nsolve + 3, nopt): the solves' prices, then delta, gamma, theta of solve 0.
template <bool WARP>
__global__ void __launch_bounds__(TPB, MIN_BLOCKS)
alo_batch(const signed char* __restrict__ kind, const double* __restrict__ S, const double* __restrict__ K,
          const double* __restrict__ T, const double* __restrict__ r, const double* __restrict__ q,
          const double* __restrict__ sig, long long nopt, int nsolve, int greeks, double vega_bump, double rho_bump,
          PLAN_ARGS, double* __restrict__ out) {
    const Plan P = PLAN_INIT;
    double* mem;
    bool lead;
    const long long gs = solver<WARP>(P, mem, lead);
    if (gs >= nopt * nsolve) return;  // whole warps in the warp layout
    const long long i = gs / nsolve;
    const int s = (int)(gs - i * nsolve);
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
    const double pr = alo_one<WARP>(P, mem, c, S[i], K[i], T[i], rr, qq, sg, g, d, ga, th);
    if (lead) {
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

// Implied volatilities on the engine's price, one solver per option: cpu.alo_iv_kernel's
// search (a Newton step with the European vega from the at-the-money guess, then secant steps
// kept inside the bracket the signs give, a bisection for a step over half the one before last,
// the bracket ends priced only when reached).
template <bool WARP>
__global__ void __launch_bounds__(TPB, MIN_BLOCKS)
alo_iv(const double* __restrict__ target, const signed char* __restrict__ kind, const double* __restrict__ S,
       const double* __restrict__ K, const double* __restrict__ T, const double* __restrict__ r,
       const double* __restrict__ q, const double* __restrict__ lo, const double* __restrict__ hi, double xtol,
       long long nopt, PLAN_ARGS, double* __restrict__ vol, signed char* __restrict__ status) {
    const Plan P = PLAN_INIT;
    double* mem;
    bool lead;
    const long long i = solver<WARP>(P, mem, lead);
    if (i >= nopt) return;
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
    const double inf = __longlong_as_double(0x7ff0000000000000LL);
    double e1 = inf, e2 = inf;  // the last two steps (Brent's safeguard)
    const double lsk = log(Si / Ki);
    const double mu_t = (ri - qi) * Ti;
    double d, g, th;
    for (int it = 0; it < 100; ++it) {
        const double f = alo_one<WARP>(P, mem, c, Si, Ki, Ti, ri, qi, x, false, d, g, th) - pt;
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
        } else if (a_known && b_known && fabs(xn - x) > 0.5 * e2) {
            xn = 0.5 * (a + b);  // a step not under half the one before last: bisection
            fp = nan("");
        }
        if ((xn == a && !a_known) || (xn == b && !b_known)) {
            const double fe = alo_one<WARP>(P, mem, c, Si, Ki, Ti, ri, qi, xn, false, d, g, th) - pt;
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
        e2 = e1;
        e1 = step;
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
