// Multilevel Monte Carlo level sampler for GBM (Milstein) on NVIDIA GPUs.
//
// The GPU twin of optiond/kernels/mlmc/cpu.py (read its docstring for the scheme, the payoff
// couplings and the random-number layout): the same Philox4x32-10 counters, the same
// Box-Muller transform and, on the sample-parallel path, the same sequence of floating-point
// operations (compiled with --fmad=false so no multiply-add is contracted), so a sample's
// payoffs match the CPU's up to the last-bit differences of log/sincos/erfc between the CUDA
// math library and the host libm. Compiled by NVRTC through CuPy's RawModule
// (optiond/kernels/mlmc/gpu.py), one module per payoff (template parameter P).
//
// One launch of mlmc_tiles<P> samples every level of an MLMC iteration. Its work table holds one
// row per level request: the samples [start, start+count) are cut into the driver's chunks of
// cs samples, each chunk into tpc tiles of `tile` samples (the last ones short or empty), and
// one 256-thread block reduces one tile, in a fixed order, into one row of 8 partial sums.
// Levels use one of three layouts (column ts):
//   ts = 1   sample-parallel: each thread runs whole paths (shallow levels, many samples);
//   ts = 32  timestep-parallel: a warp runs one path, each lane a contiguous segment of time
//            steps; the Milstein update is a product of per-step factors, so a segment is
//            summarised by (product, Asian running sum) and segments combine associatively:
//            (P1, Q1) . (P2, Q2) = (P1 P2, Q1 + P1 Q2), reduced lane 0..31 in a fixed tree;
//   ts = 256 the same with a whole block per path (deepest levels, few samples).
// In the team layouts the path's last coarse step (two fine steps) is done by the team's
// first thread after the reduction, sequentially, because the digital payoff conditions on
// the values before the last steps. mlmc_chunk_sums then adds each chunk's tile partials in
// order, one warp per chunk, giving the chunk sums that the host combines across ranks.
// Everything is deterministic: a given table gives bit-identical sums on every run.
//
// Statistics per sample: d = P_l - P_{l-1} (P_0 at level 0), f = P_l; sums of d, d^2, d^3,
// d^4, f, f^2, f^3, f^4 (NSTAT = 8).

#define NSTAT 8
#define BLOCK 256
#ifndef MLMC_MINB
#define MLMC_MINB 3  // __launch_bounds__ min blocks per SM (register budget; see BENCHMARKS.md)
#endif
#define TWO_M32 2.3283064365386962890625e-10
#define TWO_PI 6.283185307179586
#define INV_SQRT2 0.7071067811865475

#define CALL 0
#define PUT 1
#define DIGITAL_CALL 2
#define DIGITAL_PUT 3
#define ASIAN_CALL 4
#define ASIAN_PUT 5

// work-table columns
#define T_LEVEL 0
#define T_START 1
#define T_COUNT 2
#define T_CS 3
#define T_TILE 4
#define T_TPC 5
#define T_TS 6
#define T_BLOCK_OFF 7
#define T_CHUNK_OFF 8
#define T_NCHUNK 9
#define T_COLS 10

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

struct Prm {
    double S0, K, T, mu, sig, disc, payout;
    u32 k0, k1;
};

// ---------------------------------------------------------------- Philox4x32-10 (Random123)
__device__ __forceinline__ void philox4x32_10(u32 &c0, u32 &c1, u32 &c2, u32 &c3, u32 k0, u32 k1) {
#pragma unroll
    for (int i = 0; i < 10; ++i) {
        if (i > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const u32 hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const u32 hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    }
}

extern "C" __global__ void philox_kat(const u32 *in, u32 *out, int n) {
    // known-answer check: in = n x (c0 c1 c2 c3 k0 k1), out = n x 4 words
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u32 c0 = in[6 * i], c1 = in[6 * i + 1], c2 = in[6 * i + 2], c3 = in[6 * i + 3];
    philox4x32_10(c0, c1, c2, c3, in[6 * i + 4], in[6 * i + 5]);
    out[4 * i] = c0; out[4 * i + 1] = c1; out[4 * i + 2] = c2; out[4 * i + 3] = c3;
}

__device__ __forceinline__ void gen(u64 group, u32 slo, u32 shi, u32 lev, const Prm &p, u32 x[4]) {
    x[0] = (u32)group; x[1] = slo; x[2] = shi; x[3] = lev;
    philox4x32_10(x[0], x[1], x[2], x[3], p.k0, p.k1);
}

#ifdef MLMC_FAST
// fast variant: Box-Muller in single precision with the SFU intrinsics (normals good to ~1e-7)
__device__ __forceinline__ double bm_r(u32 a) {
    float u1 = ((float)a + 0.5f) * 2.3283064365386963e-10f;
    return (double)sqrtf(-2.0f * __logf(u1));
}
__device__ __forceinline__ void bm_cs(u32 b, double &c, double &s) {
    float sf, cf;
    __sincosf(6.2831853f * ((float)b * 2.3283064365386963e-10f), &sf, &cf);
    c = cf; s = sf;
}
#else
__device__ __forceinline__ double bm_r(u32 a) {
    double u1 = ((double)a + 0.5) * TWO_M32;
    return sqrt(-2.0 * log(u1));
}
__device__ __forceinline__ void bm_cs(u32 b, double &c, double &s) {
#ifdef MLMC_SINCOSPI
    sincospi(2.0 * ((double)b * TWO_M32), &s, &c);  // no range reduction; same angle, other rounding
#else
    sincos(TWO_PI * ((double)b * TWO_M32), &s, &c);
#endif
}
#endif

__device__ __forceinline__ double ncdf(double x) { return 0.5 * erfc(-x * INV_SQRT2); }

__device__ __forceinline__ void add_stats(double acc[NSTAT], double d, double f) {
    const double d2 = d * d, f2 = f * f;
    acc[0] += d; acc[1] += d2; acc[2] += d2 * d; acc[3] += d2 * d2;
    acc[4] += f; acc[5] += f2; acc[6] += f2 * f; acc[7] += f2 * f2;
}

// ------------------------------------------------ one pair of fine steps + one coarse step
// The loop body of mlmc.cpu.mlmc_sample, shared by the sequential and the team paths.
template <int P>
__device__ __forceinline__ void pair_step(int pidx, u32 slo, u32 shi, u32 lev, const Prm &p, u32 x[4],
                                          double sqhf, double hf, double hc, double af_, double ac_, double sdi,
                                          double sig2h, double &xf, double &xf_prev, double &xc, double &xc_prev,
                                          double &af, double &ac, double &dw1) {
    const bool asian = (P == ASIAN_CALL || P == ASIAN_PUT);
    double r, c, s;
    if (asian) {
        gen((u64)pidx, slo, shi, lev, p, x);
        r = bm_r(x[0]);
        bm_cs(x[1], c, s);
    } else if ((pidx & 1) == 0) {
        gen((u64)(pidx >> 1), slo, shi, lev, p, x);
        r = bm_r(x[0]);
        bm_cs(x[1], c, s);
    } else {
        r = bm_r(x[2]);
        bm_cs(x[3], c, s);
    }
    dw1 = sqhf * (r * c);
    const double dw2 = sqhf * (r * s);
    const double x_a = xf;
    xf = xf * (af_ + dw1 * (p.sig + sig2h * dw1));
    xf_prev = xf;
    xf = xf * (af_ + dw2 * (p.sig + sig2h * dw2));
    const double dwc = dw1 + dw2;
    xc_prev = xc;
    xc = xc * (ac_ + dwc * (p.sig + sig2h * dwc));
    if (asian) {
        const double ri = bm_r(x[2]);
        double ci, si;
        bm_cs(x[3], ci, si);
        const double di1 = sdi * (ri * ci);
        const double di2 = sdi * (ri * si);
        af += hf * xf_prev + p.sig * x_a * di1;
        af += hf * xf + p.sig * xf_prev * di2;
        ac += hc * xc + p.sig * xc_prev * (di1 + di2 + 0.5 * hf * (dw1 - dw2));
    }
}

template <int P>
__device__ __forceinline__ void payoffs(const Prm &p, double hf, double hc, double sqhf, double xf, double xf_prev,
                                        double xc, double xc_prev, double af, double ac, double dw1,
                                        double &d, double &f) {
    double pf, pc;
    if (P == ASIAN_CALL || P == ASIAN_PUT) {
        const double avf = (af - 0.5 * hf * xf) / p.T;
        const double avc = (ac - 0.5 * hc * xc) / p.T;
        if (P == ASIAN_CALL) { pf = fmax(avf - p.K, 0.0); pc = fmax(avc - p.K, 0.0); }
        else { pf = fmax(p.K - avf, 0.0); pc = fmax(p.K - avc, 0.0); }
    } else if (P == DIGITAL_CALL || P == DIGITAL_PUT) {
        const double zf = (xf_prev + p.mu * xf_prev * hf - p.K) / (p.sig * xf_prev * sqhf);
        const double zc = (xc_prev + p.mu * xc_prev * hc + p.sig * xc_prev * dw1 - p.K) / (p.sig * xc_prev * sqhf);
        if (P == DIGITAL_CALL) { pf = p.payout * ncdf(zf); pc = p.payout * ncdf(zc); }
        else { pf = p.payout * ncdf(-zf); pc = p.payout * ncdf(-zc); }
    } else if (P == CALL) {
        pf = fmax(xf - p.K, 0.0); pc = fmax(xc - p.K, 0.0);
    } else {
        pf = fmax(p.K - xf, 0.0); pc = fmax(p.K - xc, 0.0);
    }
    pf *= p.disc;
    pc *= p.disc;
    d = pf - pc;
    f = pf;
}

// ------------------------------------------------------------------------------- level 0
// Sampled only when asked for (exact_level0=False, or mlmc_test's per-level table): by default
// the driver uses the exact E[P_0] computed on the host (mlmc.level0.level0_mean) and never
// requests level 0.
// One Milstein step of length T from the sample's normals (mlmc.level0.level0_payoff).
template <int P>
__device__ __forceinline__ double level0_payoff(double z, double zi, const Prm &p) {
    const double h = p.T, sqh = sqrt(h);
    const double sig2h = 0.5 * p.sig * p.sig;
    double pf;
    if (P == DIGITAL_CALL || P == DIGITAL_PUT) {
        const double zz = (p.S0 + p.mu * p.S0 * h - p.K) / (p.sig * p.S0 * sqh);
        pf = (P == DIGITAL_CALL) ? p.payout * ncdf(zz) : p.payout * ncdf(-zz);
        return pf * p.disc;
    }
    const double dw = sqh * z;
    const double a = 1.0 + p.mu * h - sig2h * h;
    const double xf = p.S0 * (a + dw * (p.sig + sig2h * dw));
    if (P == ASIAN_CALL || P == ASIAN_PUT) {
        const double sdi = h * sqrt(h / 12.0);
        const double di = sdi * zi;
        double af = 0.5 * h * p.S0;
        af += h * xf + p.sig * p.S0 * di;
        af -= 0.5 * h * xf;
        const double avg = af / p.T;
        pf = (P == ASIAN_CALL) ? fmax(avg - p.K, 0.0) : fmax(p.K - avg, 0.0);
    } else {
        pf = (P == CALL) ? fmax(xf - p.K, 0.0) : fmax(p.K - xf, 0.0);
    }
    return pf * p.disc;
}

// Level-0 samples [a, z) of a tile: one Philox block and two Box-Muller pairs serve 4 samples
// (2 for the Asian: z from words (0,1), z_I from (2,3); cos for the even, sin for the odd
// sample), exactly as mlmc.level0.level0_normals; thread t takes the groups t, t + BLOCK, ...
template <int P>
__device__ __forceinline__ void level0_tile(i64 a, i64 z, const Prm &p, double acc[NSTAT]) {
    const bool asian = (P == ASIAN_CALL || P == ASIAN_PUT);
    if (P == DIGITAL_CALL || P == DIGITAL_PUT) {  // deterministic: no random numbers at level 0
        const double pf = level0_payoff<P>(0.0, 0.0, p);
        for (i64 n = a + threadIdx.x; n < z; n += BLOCK) add_stats(acc, pf, pf);
        return;
    }
    const int per = asian ? 2 : 4;
    for (i64 q = a / per + threadIdx.x; q * per < z; q += BLOCK) {
        u32 x[4];
        gen(0ull, (u32)q, (u32)((u64)q >> 32), 0u, p, x);
        double c0, s0, c1, s1;
        const double r0 = bm_r(x[0]);
        bm_cs(x[1], c0, s0);
        const double r1 = bm_r(x[2]);
        bm_cs(x[3], c1, s1);
        double zz[4], zi[2];
        if (asian) {
            zz[0] = r0 * c0; zz[1] = r0 * s0; zi[0] = r1 * c1; zi[1] = r1 * s1;
        } else {
            zz[0] = r0 * c0; zz[1] = r0 * s0; zz[2] = r1 * c1; zz[3] = r1 * s1;
        }
#pragma unroll
        for (int j = 0; j < per; ++j) {
            const i64 n = q * per + j;
            if (n >= a && n < z) {
                const double pf = level0_payoff<P>(zz[j], asian ? zi[j & 1] : 0.0, p);
                add_stats(acc, pf, pf);
            }
        }
    }
}

// ------------------------------------------------------- one whole sample (l >= 1), sequential
template <int P>
__device__ __forceinline__ void sample_seq(int l, u64 n, const Prm &p, double &d, double &f) {
    const u32 slo = (u32)n, shi = (u32)(n >> 32), lev = (u32)l;
    const double sig2h = 0.5 * p.sig * p.sig;
    u32 x[4];
    const int nf = 1 << l, nc = nf >> 1;
    const double hf = p.T / nf, hc = 2.0 * hf, sqhf = sqrt(hf);
    const double af_ = 1.0 + p.mu * hf - sig2h * hf;
    const double ac_ = 1.0 + p.mu * hc - sig2h * hc;
    const double sdi = hf * sqrt(hf / 12.0);
    double xf = p.S0, xc = p.S0, xf_prev = p.S0, xc_prev = p.S0, dw1 = 0.0;
    double af = 0.5 * hf * p.S0, ac = 0.5 * hc * p.S0;
    x[0] = x[1] = x[2] = x[3] = 0u;
    for (int q = 0; q < nc; ++q)
        pair_step<P>(q, slo, shi, lev, p, x, sqhf, hf, hc, af_, ac_, sdi, sig2h, xf, xf_prev, xc, xc_prev, af, ac, dw1);
    payoffs<P>(p, hf, hc, sqhf, xf, xf_prev, xc, xc_prev, af, ac, dw1, d, f);
}

// -------------------------------------------------- one sample by a team of TS threads (l >= 8)
struct Seg {
    double pf, qf, pc, qc;  // (product, Asian running sum) of the fine and of the coarse path
};

__device__ __forceinline__ Seg combine(const Seg &a, const Seg &b) {
    Seg r;
    r.pf = a.pf * b.pf;
    r.qf = a.qf + a.pf * b.qf;
    r.pc = a.pc * b.pc;
    r.qc = a.qc + a.pc * b.qc;
    return r;
}

__device__ __forceinline__ Seg shfl_down_seg(const Seg &s, int o) {
    Seg r;
    r.pf = __shfl_down_sync(0xffffffffu, s.pf, o);
    r.qf = __shfl_down_sync(0xffffffffu, s.qf, o);
    r.pc = __shfl_down_sync(0xffffffffu, s.pc, o);
    r.qc = __shfl_down_sync(0xffffffffu, s.qc, o);
    return r;
}

// Returns the sample's (d, f) in the team's thread 0 (garbage elsewhere). All TS threads call it.
// seg_smem: BLOCK/32 Segs of shared memory (used when TS > 32).
template <int P, int TS>
__device__ __forceinline__ void sample_team(int l, u64 n, const Prm &p, int t, Seg *seg_smem, double &d, double &f) {
    const bool asian = (P == ASIAN_CALL || P == ASIAN_PUT);
    const u32 slo = (u32)n, shi = (u32)(n >> 32), lev = (u32)l;
    const double sig2h = 0.5 * p.sig * p.sig;
    const int nf = 1 << l, nc = nf >> 1;
    const double hf = p.T / nf, hc = 2.0 * hf, sqhf = sqrt(hf);
    const double af_ = 1.0 + p.mu * hf - sig2h * hf;
    const double ac_ = 1.0 + p.mu * hc - sig2h * hc;
    const double sdi = hf * sqrt(hf / 12.0);
    const int seg = nc / TS;                     // pairs per thread (even, >= 2)
    const int q0 = t * seg;
    const int q1 = min(q0 + seg, nc - 1);        // the last pair is done after the reduction
    u32 x[4] = {0u, 0u, 0u, 0u};
    double xf = 1.0, xc = 1.0, xf_prev = 1.0, xc_prev = 1.0, af = 0.0, ac = 0.0, dw1 = 0.0;
    for (int q = q0; q < q1; ++q)
        pair_step<P>(q, slo, shi, lev, p, x, sqhf, hf, hc, af_, ac_, sdi, sig2h, xf, xf_prev, xc, xc_prev, af, ac, dw1);
    Seg s;
    s.pf = xf; s.qf = af; s.pc = xc; s.qc = ac;
    // ordered reduction within the warp: after offset o, lane i (i % 2o == 0) holds [i, i + 2o)
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        Seg other = shfl_down_seg(s, o);
        if (((t & 31) & (2 * o - 1)) == 0) s = combine(s, other);
    }
    if (TS > 32) {
        const int w = t >> 5;
        __syncwarp();
        if ((t & 31) == 0) seg_smem[w] = s;
        __syncthreads();
        if (t == 0)
            for (int k = 1; k < TS / 32; ++k) s = combine(s, seg_smem[k]);
        __syncthreads();
    }
    if (t != 0) return;
    // the team's thread 0: absolute values, then the last pair sequentially
    xf = p.S0 * s.pf;
    xc = p.S0 * s.pc;
    af = 0.5 * hf * p.S0 + p.S0 * s.qf;
    ac = 0.5 * hc * p.S0 + p.S0 * s.qc;
    const int ql = nc - 1;
    if (!asian && (ql & 1)) gen((u64)(ql >> 1), slo, shi, lev, p, x);  // words (2, 3) of the last group
    pair_step<P>(ql, slo, shi, lev, p, x, sqhf, hf, hc, af_, ac_, sdi, sig2h, xf, xf_prev, xc, xc_prev, af, ac, dw1);
    payoffs<P>(p, hf, hc, sqhf, xf, xf_prev, xc, xc_prev, af, ac, dw1, d, f);
}

// ------------------------------------------------------------------------------- kernels

// fixed-order block sum of acc[] (all BLOCK threads), result in thread 0
__device__ __forceinline__ void block_sum(double acc[NSTAT], double *smem) {
    const int t = threadIdx.x;
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) {
        double v = acc[k];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        acc[k] = v;
    }
    if ((t & 31) == 0)
        for (int k = 0; k < NSTAT; ++k) smem[(t >> 5) * NSTAT + k] = acc[k];
    __syncthreads();
    if (t == 0)
        for (int k = 0; k < NSTAT; ++k) {
            double v = smem[k];
            for (int w = 1; w < BLOCK / 32; ++w) v += smem[w * NSTAT + k];
            acc[k] = v;
        }
}

template <int P>
__global__ void __launch_bounds__(BLOCK, MLMC_MINB) mlmc_tiles(const i64 *tab, int n_entries, double S0, double K, double T,
                                                    double mu, double sig, double disc, double payout, u32 k0, u32 k1,
                                                    double *partial) {
    Prm p;
    p.S0 = S0; p.K = K; p.T = T; p.mu = mu; p.sig = sig; p.disc = disc; p.payout = payout; p.k0 = k0; p.k1 = k1;
    __shared__ double smem[(BLOCK / 32) * NSTAT];
    __shared__ Seg seg_smem[BLOCK / 32];
    const i64 b = blockIdx.x;
    int j = 0;
    while (j + 1 < n_entries && tab[(j + 1) * T_COLS + T_BLOCK_OFF] <= b) ++j;
    const i64 *e = tab + j * T_COLS;
    const int l = (int)e[T_LEVEL], ts = (int)e[T_TS];
    const i64 start = e[T_START], count = e[T_COUNT], cs = e[T_CS], tile = e[T_TILE], tpc = e[T_TPC];
    const i64 local = b - e[T_BLOCK_OFF];
    const i64 chunk = local / tpc, ti = local % tpc;
    const i64 chunk_end = start + min((chunk + 1) * cs, count);
    const i64 a = start + chunk * cs + ti * tile;
    const i64 z = min(a + tile, chunk_end);
    double acc[NSTAT];
#pragma unroll
    for (int k = 0; k < NSTAT; ++k) acc[k] = 0.0;
    const int t = threadIdx.x;
    double d, f;
    if (ts == 1 && l == 0) {
        level0_tile<P>(a, z, p, acc);
    } else if (ts == 1) {
        for (i64 n = a + t; n < z; n += BLOCK) {
            sample_seq<P>(l, (u64)n, p, d, f);
            add_stats(acc, d, f);
        }
    } else if (ts == 32) {
        const int team = t >> 5, lane = t & 31;
        for (i64 n = a + team; n - team < z; n += BLOCK / 32) {
            if (n < z) {  // whole warps stay converged: the condition is uniform per warp
                sample_team<P, 32>(l, (u64)n, p, lane, seg_smem, d, f);
                if (lane == 0) add_stats(acc, d, f);
            }
        }
    } else {
        for (i64 n = a; n < z; ++n) {
            sample_team<P, BLOCK>(l, (u64)n, p, t, seg_smem, d, f);
            if (t == 0) add_stats(acc, d, f);
        }
    }
    __syncthreads();
    block_sum(acc, smem);
    if (t == 0)
        for (int k = 0; k < NSTAT; ++k) partial[b * NSTAT + k] = acc[k];
}

// one warp per chunk: sums the chunk's tpc tile partials (lane-strided, then a fixed tree)
extern "C" __global__ void mlmc_chunk_sums(const i64 *tab, int n_entries, const double *partial, double *out,
                                           i64 n_chunks) {
    const i64 g = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (g >= n_chunks) return;
    int j = 0;
    while (j + 1 < n_entries && tab[(j + 1) * T_COLS + T_CHUNK_OFF] <= g) ++j;
    const i64 *e = tab + j * T_COLS;
    const i64 c = g - e[T_CHUNK_OFF], tpc = e[T_TPC];
    const double *src = partial + (e[T_BLOCK_OFF] + c * tpc) * NSTAT;
    for (int k = 0; k < NSTAT; ++k) {
        double v = 0.0;
        for (i64 i = lane; i < tpc; i += 32) v += src[i * NSTAT + k];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) out[g * NSTAT + k] = v;
    }
}

// mlmc_tiles<P> is instantiated for the one payoff a module needs through CuPy's
// name_expressions ("mlmc_tiles<0>" .. "mlmc_tiles<5>", codes as above).
