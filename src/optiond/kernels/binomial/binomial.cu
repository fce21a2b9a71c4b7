// CRR binomial trees on NVIDIA GPUs (compiled at run time with NVRTC through CuPy's RawModule).
//
// The recurrence is the CPU reference's (optiond.kernels.binomial_cpu.crr_tree), node for node:
//
//   leaves   x_j = sign * (S exp((2j - N) a) - K),  V_j = max(x_j, 0),  X_j = x_j
//   level t  V[j] <- max(pu V[j+1] + pd V[j], X[j]),  X[j] <- X[j] u + c   (c = sign K (u - 1))
//            and X re-anchored from exp when (N - t) % 64 == 0 (American exercise only; 64 / ...
//            fewer levels where 64 a > 8 (binomial_cpu.reanchor_period); FP32
//            trees with a large step a = sigma sqrt(dt) re-anchor every 2 / a levels instead,
//            since the recurrence multiplies rounding errors by u per level)
//
// with the per-tree scalars (a, u, pu, pd, c, sign) computed on the host bit for bit as the CPU
// reference computes them, and the node arithmetic written with the same fused multiply-adds
// as the reference's compiled loop (cont = fma(pd, V[j], pu V[j+1]), X = fma(X, u, c),
// x = sign fma(S, e, -K)). Leaves and re-anchored exercise values take one exp per row of G
// nodes and e <- e u^2 along the row (exercise_row): within a few ulps of an exp per node.
// FP64 results then differ from the CPU's only by those few ulps at leaves and re-anchored
// nodes (backward induction is a convex average, so such differences do not grow; measured
// <= 1.7e-13 relative at N = 31, ~1e-14 from N = 1000 up). The single-option kernels' full
// slabs (crr_pipe_reg / crr_pipe_cluster, and crr_pipe_grid with pruned windows) take the
// American FP64 exercise values by shifting instead (X_{t-2}[j] == X_t[j+1]; run_levels_shift):
// no recurrence and no re-anchoring there, each value within a few ulps of exp, so those
// results differ from the CPU's by its recurrence's drift (measured ~1e-14 relative).
//
// Exercise rows: at a node where the exercise value X <= 0, max(cont, X) == cont (cont >= 0),
// so a row of nodes that cannot hold a positive X during a run of levels skips the X
// recurrence and the max (exercise_rows: puts below, calls above (t + ln(K/S)/a) / 2, two nodes
// of margin; X of such rows is left stale until the next re-anchoring, which recomputes it).
// For FP64 this changes no result. Near the money about half the rows skip: FP64 nodes cost
// DMUL + DFMA there instead of DMUL + 2 DFMA + DSETP + 2 FSEL. Kernels of at most
// CRR_SKIP_ROWS rows per chunk are instantiated per (live rows, exercise rows) pair.
//
// FP32 tiles ("FWD" scheme): values are carried discounted to time 0, W_t = V_t e^{-r t dt}, so
// the update is W[j] <- max(p W[j+1] + (1 - p) W[j], X'[j]) with p + (1 - p) == 1 exactly in
// float, X'[j] <- X'[j] (u e^{r dt}) + c e^{-r t dt}; this removes the systematic drift of
// float discount factors over N levels. W_0 = V_0. The FP32 batch kernel uses the scaled
// variant of this (three instructions per node; see "FP32 warp per tree, scaled scheme").
//
// Data layout inside one warp: a chunk of CW = 32 G R consecutive nodes; lane l holds, in
// registers, nodes j0 + r (32 G) + l G + g for r < R, g < G ("rows" of 32 G nodes). One
// shuffle per row and level brings the right neighbour of each lane's last node. Rows wholly
// beyond the live part of the tree are skipped: runs of levels with the same number of live
// rows go through straight-line code instantiated per row count (levels_fixed), so the
// compiler interleaves all live nodes (no branch per row); per node this is DMUL + 2 DFMA +
// DSETP + 2 FSEL, the mix of the FP64 ceiling. Re-anchoring levels and the last three levels
// take a generic path.
//
// Kernels
//   crr_batch_warp    one warp per tree (whole tree in registers, N + 1 <= CW), persistent
//                     warps pulling trees from an atomic queue: portfolios, mixed N.
//   crr_batch_block   one block per tree for trees wider than one warp's registers; the tree
//                     lives in global scratch (L2), processed in slabs of K levels by chunks
//                     of CW nodes with K-node halos recomputed (temporal blocking); one
//                     __syncthreads per slab; once the remaining tree fits one chunk, that
//                     warp finishes it alone.
//   crr_pipe_block    the same for one tree and one block over a level range (latency phase).
//   crr_pipe_grid     the same over the whole GPU with one cooperative grid barrier per slab
//                     (throughput phase; only in the module built with -DCRR_COOP); a slab's
//                     outputs spread evenly over the resident warps (units).
//   crr_pipe_reg      one tree (N <= a few thousand) in one block with the tree in registers
//                     from leaves to root: warps keep their chunk between slabs and swap only
//                     K-node halos through shared memory (one __syncthreads per slab), then one
//                     warp; no grid barrier, no chunk reloads. One SM's FP64 rate caps its
//                     widest levels: N = 1e3 71.9 us against 69.0 on crr_pipe_grid (H200), so
//                     the pipeline uses it only where PipelinePlan.reg_levels asks.
//   crr_pipe_cluster  crr_pipe_reg over a thread-block cluster of C blocks (sm_90; C = 16 with
//                     the non-portable size allowed): halos through distributed shared memory,
//                     one cluster barrier per slab. Up to ~1 warp per SM sub-partition, the FP64
//                     rate no longer caps the widest levels: H200, one American put, N = 1000
//                     57.6 us (K = 64) against 67.3 on the grid phases when it came, 49.5 us
//                     once its halo stores became one loop over consumer warps (reg_tree),
//                     45.3 us with exercise values by shifting (run_levels_shift); the
//                     pipeline's whole tree for N <= PipelinePlan.cluster_levels (4095). Not
//                     compiled with CRR_NO_CLUSTER.
//   The pipeline kernels (pipe_*) of at most 4 rows per lane unroll their level loops 4 deep
//   (CRR_PIPE_UNROLL), the batch kernels 2 (CRR_UNROLL).
//   crr_naive_*       one launch per level, one thread per node, global memory (baseline).
//
// Sources: Cox, Ross & Rubinstein (1979); V. Podlozhnyuk, "Binomial option pricing model",
// NVIDIA CUDA SDK (2007) (tiles of CACHE_DELTA levels with recomputed aprons); the hybrid
// pipeline and warp-per-block kernels of the binomial_hybrid_cpu_gpu_mpi seed, section 5.

#ifdef CRR_COOP
#include <cooperative_groups.h>
#endif

#define CRR_NPAR 16
#define CRR_FULL 0xffffffffu

// levels per iteration of the straight-line level loops: batch kernels (throughput), and the
// single-option pipeline kernels with at most 4 rows per lane (latency: a deeper unroll lets the
// compiler overlap one level's last nodes with the next level's first; H200, one put: N = 1e4
// 0.561 ms with 4 against 0.627 with 2 and 0.758 with 1, N = 1e3 in crr_pipe_reg 69.8 / 71.8 /
// 78.7 us)
#ifndef CRR_UNROLL
#define CRR_UNROLL 2
#endif
#ifndef CRR_PIPE_UNROLL
#define CRR_PIPE_UNROLL 4
#endif
#define CRR_PIPE_U(R) ((R) > 4 ? CRR_UNROLL : CRR_PIPE_UNROLL)
#define CRR_STR(x) #x
#define CRR_PRAGMA_UNROLL(n) _Pragma(CRR_STR(unroll n))

// per-tree parameter vector (float64 on the device, built by binomial_gpu._tree_table)
#define P_S 0
#define P_K 1
#define P_A 2
#define P_XM 3      // exercise multiplier: u (FP64) or u e^{r dt} (FWD)
#define P_WU 4      // pu (FP64) or p (FWD)
#define P_WD 5      // pd (FP64) or 1 - p (FWD)
#define P_C 6       // sign K (u - 1)
#define P_SIGN 7
#define P_RDT 8     // r dt (FWD only)
#define P_ARGMAX 9  // clamp of the exp argument (FP32 overflow guard)
#define P_ANCHOR 10 // re-anchoring period in levels: the CPU's (FP64, reanchor_period) or less (FP32, large a)
#define P_UR 11     // FP32 scaled scheme: 1 if p >= 1 - p (unit weight on the up node), else 0
#define P_RHO 12    // FP32 scaled scheme: rho = min(p, 1-p) / max(p, 1-p), rounded to float
#define P_LAM 13    //   lambda = 1 / (1 + rho): the per-level scale of the values
#define P_MY 14     //   u e^{r dt} / lambda: exercise multiplier
#define P_KAP 15    //   e^{r dt} / lambda: per-level factor of the exercise offset

template <typename T> struct Par {
    T S, K, a, xm, wu, wd, c, sign, argmax;
    T sS, msK;  // sign S and -sign K: x = fma(sS, e, msK) == sign fma(S, e, -K) exactly
    T u2, emax; // e^{2a} (exercise values along a row) and e^{argmax} (FP32 clamp)
    double rdt;
    double La;  // ln(K / S) / a: the exercise value of node j at level t is > 0 iff sign (2j - t - La) > 0
    int N, anchor;
};

template <typename T> __device__ __forceinline__ T crr_exp(T x);
template <> __device__ __forceinline__ double crr_exp<double>(double x) { return exp(x); }
template <> __device__ __forceinline__ float crr_exp<float>(float x) { return expf(x); }
template <typename T> __device__ __forceinline__ T crr_fma(T x, T y, T z);
template <> __device__ __forceinline__ double crr_fma<double>(double x, double y, double z) { return fma(x, y, z); }
template <> __device__ __forceinline__ float crr_fma<float>(float x, float y, float z) { return fmaf(x, y, z); }
// max as Python's max(x, y) (y if y > x else x). Double: a compare and a select (sm_90 has no
// DMNMX; fmax would add NaN handling). Float: FMNMX (one instruction; same value but for the
// sign of a zero tie).
template <typename T> __device__ __forceinline__ T crr_max(T x, T y);
template <> __device__ __forceinline__ double crr_max<double>(double x, double y) { return y > x ? y : x; }
template <> __device__ __forceinline__ float crr_max<float>(float x, float y) { return fmaxf(x, y); }
template <typename T> __device__ __forceinline__ T crr_ldcg(const T* p);
template <> __device__ __forceinline__ double crr_ldcg<double>(const double* p) { return __ldcg(p); }
template <> __device__ __forceinline__ float crr_ldcg<float>(const float* p) { return __ldcg(p); }

template <typename T> __device__ __forceinline__ Par<T> load_par(const double* __restrict__ p, int N) {
    Par<T> P;
    P.S = (T)p[P_S];
    P.K = (T)p[P_K];
    P.a = (T)p[P_A];
    P.xm = (T)p[P_XM];
    P.wu = (T)p[P_WU];
    P.wd = (T)p[P_WD];
    P.c = (T)p[P_C];
    P.sign = (T)p[P_SIGN];
    P.argmax = (T)p[P_ARGMAX];
    P.rdt = p[P_RDT];
    P.N = N;
    P.anchor = (int)p[P_ANCHOR];
    P.sS = (T)(p[P_SIGN] * p[P_S]);
    P.msK = (T)(-p[P_SIGN] * p[P_K]);
    P.u2 = (T)exp(2.0 * p[P_A]);
    P.emax = (T)exp(p[P_ARGMAX]);
    P.La = log(p[P_K] / p[P_S]) / p[P_A];
    return P;
}

// Rows that can hold a positive exercise value during a run of levels (the others need neither
// the exercise recurrence nor the max: max(cont, X) == cont when X <= 0, as cont >= 0).
// A put's exercise value is > 0 exactly at nodes j < (t + La) / 2, a call's at j > (t + La) / 2.
// Put: X at a fixed node only falls as t falls, so the rows that matter at the run's top
// level t_top cover the whole run (and later runs). Call: X rises as t falls, so the rows are
// taken at the last level t_low before the next re-anchoring (which recomputes every X), for
// every run up to it, so no row skipped early in a block is needed later in it. Two nodes of
// margin: the skipped exercise values are at least ~2a K below zero, far beyond rounding.
// Returns the number of such rows among the ra live rows of a chunk at j0 (rows of `row` nodes):
// the first na rows (pfx, put) or the last na (call).
__device__ __forceinline__ int exercise_rows(double sign, double La, int j0, int row, int ra, int t_top, int t_low,
                                             bool& pfx) {
    pfx = sign < 0.0;
    if (pfx) {
        const double jp = fmin(fmax(floor(0.5 * ((double)t_top + La)) + 2.0, -1.0), 1.0e9);
        const int jpi = (int)jp;
        return jpi < j0 ? 0 : min(ra, (jpi - j0) / row + 1);
    }
    const double jc = fmin(fmax(ceil(0.5 * ((double)t_low + La)) - 2.0, -1.0), 1.0e9);
    const int jci = (int)jc;
    const int rf = jci <= j0 ? 0 : (jci - j0) / row;
    return ra - min(rf, ra);
}

// discount factor e^{-r t dt} of level t to time 0 (FWD scheme), 1 otherwise
template <typename T, bool FWD> __device__ __forceinline__ T level_scale(const Par<T>& P, int t) {
    return FWD ? crr_exp<T>((T)(-P.rdt * (double)t)) : (T)1;
}

// exercise value of node j at level t, from exp (leaves and re-anchoring)
template <typename T, bool FWD> __device__ __forceinline__ T exercise(const Par<T>& P, int j, int t, T g) {
    T arg = (T)(2 * j - t) * P.a;
    if (FWD) arg = arg < P.argmax ? arg : P.argmax;
    T x = P.sign * crr_fma<T>(P.S, crr_exp<T>(arg), -P.K);
    return FWD ? x * g : x;
}

// Exercise values of the G consecutive nodes j .. j + G - 1 of level t (leaves and re-anchoring):
// one exp for the first node, then e <- e u^2 along the row (each value within a few ulps of
// exp per node; costs one exp per G nodes instead of G).
template <typename T, bool FWD, int G>
__device__ __forceinline__ void exercise_row(const Par<T>& P, int j, int t, T g, T (&x)[G]) {
    T arg = (T)(2 * j - t) * P.a;
    if (FWD) arg = arg < P.argmax ? arg : P.argmax;
    T e = crr_exp<T>(arg);
#pragma unroll
    for (int k = 0; k < G; ++k) {
        if (k > 0) {
            e *= P.u2;
            if (FWD) e = e < P.emax ? e : P.emax;
        }
        const T v = crr_fma<T>(P.sS, e, P.msK);
        x[k] = FWD ? v * g : v;
    }
}

// Values of level t <= 2 (nodes 0..t, held by chunk 0) into lv = [V00, V10, V11, V20, V21, V22].
template <typename T, int G, int R>
__device__ __forceinline__ void record_level(const T (&V)[R][G], int j0, int t, double* __restrict__ lv) {
    if (lv == nullptr || j0 != 0 || t > 2) return;
    const int lane = threadIdx.x & 31;
    const int base = t == 2 ? 3 : (t == 1 ? 1 : 0);
#pragma unroll
    for (int k = 0; k < G; ++k) {
        const int j = lane * G + k;
        if (j <= t) lv[base + j] = (double)V[0][k];
    }
}

// Right neighbour of each lane's last node in row r, for rows r < NR (old values): lanes 0..30
// take V[r][0] of the next lane, lane 31 takes V[r+1][0] of lane 0. Shuffles outside branches.
template <typename T, int G, int R, int NR>
__device__ __forceinline__ void neighbours(const T (&V)[R][G], T (&nb)[R]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        const T send = (lane == 0 && r + 1 < R) ? V[(r + 1 < R) ? r + 1 : r][0] : V[r][0];
        nb[r] = __shfl_sync(CRR_FULL, send, (lane + 1) & 31);
    }
}

// Node update of row r (all G nodes), given the right neighbour of its last node.
template <typename T, int G, int R, bool AM, bool ANCHOR, bool FWD>
__device__ __forceinline__ void update_row(T (&V)[R][G], T (&X)[R][G], const Par<T>& P, int r, T nb, int jrow, int t,
                                           T g, T ct) {
    T xa[G];
    if (AM && ANCHOR) exercise_row<T, FWD, G>(P, jrow, t, g, xa);
#pragma unroll
    for (int k = 0; k < G; ++k) {
        const T right = (k < G - 1) ? V[r][(k < G - 1) ? k + 1 : k] : nb;
        const T cont = crr_fma<T>(P.wd, V[r][k], P.wu * right);
        if (AM) {
            T x;
            if (ANCHOR)
                x = xa[k];
            else
                x = crr_fma<T>(X[r][k], P.xm, ct);
            X[r][k] = x;
            V[r][k] = crr_max<T>(cont, x);
        } else {
            V[r][k] = cont;
        }
    }
}

// Generic level (any number of active rows ra, any level): anchors and the last levels.
template <typename T, int G, int R, bool AM, bool ANCHOR, bool FWD>
__device__ __forceinline__ void level_generic(T (&V)[R][G], T (&X)[R][G], const Par<T>& P, int j0, int t, int ra) {
    const int lane = threadIdx.x & 31;
    const T g = level_scale<T, FWD>(P, t);
    const T ct = FWD ? P.c * g : P.c;
    T nb[R];
    neighbours<T, G, R, R>(V, nb);
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (r < ra) update_row<T, G, R, AM, ANCHOR, FWD>(V, X, P, r, nb[r], j0 + r * 32 * G + lane * G, t, g, ct);
}

// `n` recurrence levels (no anchor among them) from level t - 1 down, with exactly RA rows
// live: straight-line code over the rows, so the RA*G independent nodes interleave. Of these,
// NA rows (the first NA if PFX, else the last NA) carry the exercise value; the others are
// continuation only (exercise_rows).
template <typename T, int G, int R, int RA, int NA, bool PFX, bool AM, bool FWD, int U>
__device__ __forceinline__ void levels_fixed(T (&V)[R][G], T (&X)[R][G], const Par<T>& P, int t, int n) {
#pragma unroll U
    for (int i = 0; i < n; ++i, --t) {
        const T g = level_scale<T, FWD>(P, t - 1);
        const T ct = FWD ? P.c * g : P.c;
        T nb[R];
        neighbours<T, G, R, RA>(V, nb);
#pragma unroll
        for (int r = 0; r < RA; ++r) {
            if (AM && (PFX ? r < NA : r >= RA - NA))
                update_row<T, G, R, true, false, FWD>(V, X, P, r, nb[r], 0, t - 1, g, ct);
            else
                update_row<T, G, R, false, false, FWD>(V, X, P, r, nb[r], 0, t - 1, g, ct);
        }
    }
}

// Exercise rows are skipped (NA < RA) row by row in kernels of at most CRR_SKIP_ROWS rows; in
// wider kernels the count of exercise rows is rounded up to a multiple of CRR_SKIP_Q (code size:
// about RA / CRR_SKIP_Q bodies per live row count instead of RA). 0 disables it there.
#ifndef CRR_SKIP_ROWS
#define CRR_SKIP_ROWS 4
#endif
#ifndef CRR_SKIP_Q
#define CRR_SKIP_Q 4
#endif
// FP32 scaled batch kernel: offset and exercise factor at re-anchoring levels by recurrence (1)
// or from exp (0); minimum resident blocks of 128 threads per SM (register cap)
#ifndef CRR_SCL_RECUR
#define CRR_SCL_RECUR 1
#endif
#ifndef CRR_F32_MINB
#define CRR_F32_MINB 4
#endif
// levels per iteration of the FP32 scaled level loop: 1 (H200: 0.85 ms against 0.93 with 2 for
// 10,000 trees x N = 1000; the kernel's many straight-line bodies press on the instruction cache)
#ifndef CRR_SCL_UNROLL
#define CRR_SCL_UNROLL 1
#endif

// levels_fixed<RA, NA = na>, NA = RA, then the multiples of Q below RA down to 0 (the caller
// rounds na up to one of these; Q = 1: every count).
template <typename T, int G, int R, int RA, int NA, bool AM, bool FWD, int U, int Q = 1>
__device__ __forceinline__ void na_dispatch(T (&V)[R][G], T (&X)[R][G], const Par<T>& P, int t, int n, int na, bool pfx) {
    if constexpr (NA >= 0) {
        if (na == NA) {
            if constexpr (NA == 0 || NA == RA)
                levels_fixed<T, G, R, RA, NA, true, AM, FWD, U>(V, X, P, t, n);
            else if (pfx)
                levels_fixed<T, G, R, RA, NA, true, AM, FWD, U>(V, X, P, t, n);
            else
                levels_fixed<T, G, R, RA, NA, false, AM, FWD, U>(V, X, P, t, n);
        } else {
            constexpr int NX = NA == RA ? ((RA - 1) / Q) * Q : NA - Q;
            na_dispatch<T, G, R, RA, NX, AM, FWD, U, Q>(V, X, P, t, n, na, pfx);
        }
    }
}

// levels_fixed<RA = ra, NA = na>: a switch made of templates (RA = 1 .. R).
template <typename T, int G, int R, int RA, bool AM, bool FWD, int U>
__device__ __forceinline__ void levels_dispatch(T (&V)[R][G], T (&X)[R][G], const Par<T>& P, int t, int n, int ra,
                                                int na, bool pfx) {
    if constexpr (RA >= 1) {
        if (ra == RA) {
            if constexpr (AM && R <= CRR_SKIP_ROWS)
                na_dispatch<T, G, R, RA, RA, AM, FWD, U>(V, X, P, t, n, na, pfx);
            else if constexpr (AM && CRR_SKIP_Q > 0)
                na_dispatch<T, G, R, RA, RA, AM, FWD, U, CRR_SKIP_Q>(
                    V, X, P, t, n, min(RA, ((na + CRR_SKIP_Q - 1) / CRR_SKIP_Q) * CRR_SKIP_Q), pfx);
            else
                levels_fixed<T, G, R, RA, RA, true, AM, FWD, U>(V, X, P, t, n);
        } else {
            levels_dispatch<T, G, R, RA - 1, AM, FWD, U>(V, X, P, t, n, ra, na, pfx);
        }
    }
}

// Exercise values by shifting (American FP64 trees, the full slabs of the single-option
// kernels: crr_pipe_grid with pruned windows, crr_pipe_reg, crr_pipe_cluster): node j at
// level t - 2 has the exercise value of node j + 1 at level t (2j - (t - 2) == 2 (j + 1) - t),
// so a lane keeps X of two
// consecutive levels, XP (the level of V) and XQ (one below), and after each level moves the
// older one a node down (one shuffle per row for its top node): no multiply-add per node and no
// re-anchoring, and the values stay those loaded or synthesised from exp at the slab's start
// (X_{t-1} = X_t u + c once there), within a few ulps of exp at every level. The positions the
// shift fills from beyond the chunk lie above the live part, which loses a node per level.
// Per level and 4 nodes a lane: 4 DMUL + 4 DFMA + 4 DSETP + 8 FSEL + 4 SHFL instead of
// 4 DMUL + 8 DFMA + ... + 2 SHFL. H200, one warp in a loop: 50.9 against 58.3 cycles a level;
// one American put, N = 1e5 (pruned) 5.08 against 6.34 ms, N = 1000 (cluster) 45.3 against
// 49.4 us. Source: the CRR lattice's recombination, u d = 1.
template <typename T, int G, int R, int RA, int NA, bool PFX>
__device__ __forceinline__ void level_shift(T (&V)[R][G], const T (&Xm)[R][G], T (&Xs)[R][G], const Par<T>& P) {
    T nb[R];
    neighbours<T, G, R, RA>(V, nb);
#pragma unroll
    for (int r = 0; r < RA; ++r) {
        const bool ex = PFX ? r < NA : r >= RA - NA;
#pragma unroll
        for (int k = 0; k < G; ++k) {
            const T right = (k < G - 1) ? V[r][(k < G - 1) ? k + 1 : k] : nb[r];
            const T cont = crr_fma<T>(P.wd, V[r][k], P.wu * right);
            V[r][k] = ex ? crr_max<T>(cont, Xm[r][k]) : cont;
        }
    }
    T xn[R];
    neighbours<T, G, R, RA>(Xs, xn);
#pragma unroll
    for (int r = 0; r < RA; ++r) {
#pragma unroll
        for (int k = 0; k < G - 1; ++k) Xs[r][k] = Xs[r][k + 1];
        Xs[r][G - 1] = xn[r];
    }
}

// n levels with RA live rows, NA of them exercise rows (as levels_fixed), by pairs of levels so
// that XP and XQ swap roles without moves; on return XP is X of V's level, XQ one below.
template <typename T, int G, int R, int RA, int NA, bool PFX, int U>
__device__ __forceinline__ void levels_shift(T (&V)[R][G], T (&XP)[R][G], T (&XQ)[R][G], const Par<T>& P, int n) {
#pragma unroll U
    for (int i = 0; i < n / 2; ++i) {
        level_shift<T, G, R, RA, NA, PFX>(V, XQ, XP, P);
        level_shift<T, G, R, RA, NA, PFX>(V, XP, XQ, P);
    }
    if (n & 1) {
        level_shift<T, G, R, RA, NA, PFX>(V, XQ, XP, P);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int k = 0; k < G; ++k) {
                const T x = XP[r][k];
                XP[r][k] = XQ[r][k];
                XQ[r][k] = x;
            }
    }
}

// levels_shift<RA = ra, NA = na> (every count NA = RA .. 0; the pruned kernel has R = 1)
template <typename T, int G, int R, int RA, int NA, int U>
__device__ __forceinline__ void shift_na(T (&V)[R][G], T (&XP)[R][G], T (&XQ)[R][G], const Par<T>& P, int n, int na,
                                         bool pfx) {
    if constexpr (NA >= 0) {
        if (na != NA)
            shift_na<T, G, R, RA, NA - 1, U>(V, XP, XQ, P, n, na, pfx);
        else if (NA == 0 || NA == RA || pfx)
            levels_shift<T, G, R, RA, NA, true, U>(V, XP, XQ, P, n);
        else
            levels_shift<T, G, R, RA, NA, false, U>(V, XP, XQ, P, n);
    }
}
template <typename T, int G, int R, int RA, int U>
__device__ __forceinline__ void shift_ra(T (&V)[R][G], T (&XP)[R][G], T (&XQ)[R][G], const Par<T>& P, int n, int ra,
                                         int na, bool pfx) {
    if constexpr (RA >= 1) {
        if (ra != RA)
            shift_ra<T, G, R, RA - 1, U>(V, XP, XQ, P, n, ra, na, pfx);
        else
            shift_na<T, G, R, RA, RA, U>(V, XP, XQ, P, n, na, pfx);
    }
}

// run_levels for American FP64 trees with exercise values by shifting (above): levels
// t_from - 1 down to t_to > 2 (no level 0-2 records), XP = X of level t_from and XQ of t_from - 1
// on entry, of the last level computed and the one below on return.
template <typename T, int G, int R, int U>
__device__ __forceinline__ void run_levels_shift(T (&V)[R][G], T (&XP)[R][G], T (&XQ)[R][G], const Par<T>& P, int j0,
                                                 int t_from, int t_to, int lim) {
    const int ROW = 32 * G;
    int t = t_from - 1;  // the level computed next
    while (t >= t_to) {
        const int pmax = min(t - j0, lim - 2 - (t_from - 1 - t));
        if (pmax < 0) break;
        const int ra = min(R, pmax / ROW + 1);
        const int n = min(pmax - (ra - 1) * ROW + 1, t - t_to + 1);  // same ra throughout
        bool pfx = true;
        const int na = exercise_rows((double)P.sign, P.La, j0, ROW, ra, t, t - n + 1, pfx);
        shift_ra<T, G, R, R, U>(V, XP, XQ, P, n, ra, na, pfx);
        t -= n;
    }
}

// Levels t_from - 1 down to t_to of the chunk starting at node j0, whose inputs (level t_from)
// are valid at local positions p < lim. Writes levels 2, 1, 0 to lv (if j0 == 0).
//
// At level t the live local positions are 0 .. pmax = min(t - j0, lim - 2 - k) (k levels done);
// rows above pmax / (32 G) are skipped. Runs of levels with the same live row count and no
// re-anchoring go through levels_fixed; re-anchoring levels and t <= 2 through level_generic.
template <typename T, int G, int R, bool AM, bool FWD, int U = CRR_UNROLL>
__device__ __forceinline__ void run_levels(T (&V)[R][G], T (&X)[R][G], const Par<T>& P, int j0, int t_from, int t_to,
                                           int lim, double* __restrict__ lv) {
    const int ROW = 32 * G;
    int t = t_from - 1;  // the level computed next
    while (t >= t_to) {
        const int k = t_from - 1 - t;
        const int pmax = min(t - j0, lim - 2 - k);
        if (pmax < 0) break;
        const int ra = min(R, pmax / ROW + 1);
        const int d = (P.N - t) % P.anchor;  // 0: t re-anchors
        if ((AM && d == 0) || t <= 2) {
            if (AM && d == 0)
                level_generic<T, G, R, AM, true, FWD>(V, X, P, j0, t, ra);
            else
                level_generic<T, G, R, AM, false, FWD>(V, X, P, j0, t, ra);
            record_level<T, G, R>(V, j0, t, lv);
            --t;
            continue;
        }
        // levels t, t-1, ..., t-n+1: same ra, none re-anchors, none <= 2, none below t_to
        int n = pmax - (ra - 1) * ROW + 1;
        if (AM) n = min(n, P.anchor - d);
        n = min(n, min(t - 2, t - t_to + 1));
        bool pfx = true;
        const int na = AM ? exercise_rows((double)P.sign, P.La, j0, ROW, ra, t, max(t - (P.anchor - d) + 1, 0), pfx) : 0;
        levels_dispatch<T, G, R, R, AM, FWD, U>(V, X, P, t + 1, n, ra, na, pfx);
        t -= n;
    }
}

// ------------------------------------------------------------------ warp per tree (batches)

// Broadie-Detemple smoothing ("BBS"; binomial_cpu.crr_tree_div with smooth=True): the induction
// starts at level N - 1 from the Black-Scholes values of the last step (tau = dt) instead of one
// step from the payoff; American trees take the max with the exercise value there. FP64 only;
// the per-tree constants of kernels/black_scholes.bs_price_one at tau = dt come from the host
// (binomial_gpu._fill_params, smooth=True) in the FP32 scaled scheme's slots, which FP64 trees
// leave unused: sigma sqrt(dt) is P_A itself.
#define P_BS_DFQ 11  // e^{-q dt}
#define P_BS_DFR 12  // e^{-r dt}
#define P_BS_RQT 13  // (r - q) dt

// kernels/black_scholes._ncdf: 0.5 erfc(-x / sqrt 2)
__device__ __forceinline__ double bbs_ncdf(double x) { return __dmul_rn(0.5, erfc(__ddiv_rn(-x, 1.4142135623730951))); }

// kernels/black_scholes.bs_price_one(call, sj, K, dt, r, q, sigma) in its order, without
// contraction (the host's build is IEEE; CUDA's log, exp and erfc are within a few ulps of it).
__device__ __forceinline__ double bbs_value(bool call, double sj, double K, double sq, double dfq, double dfr,
                                            double rqt) {
    if (sq <= 0.0) {
        const double fwd = __dsub_rn(__dmul_rn(sj, dfq), __dmul_rn(K, dfr));
        return call ? fmax(fwd, 0.0) : fmax(-fwd, 0.0);
    }
    const double d1 = __dadd_rn(__ddiv_rn(__dadd_rn(log(__ddiv_rn(sj, K)), rqt), sq), __dmul_rn(0.5, sq));
    const double d2 = __dsub_rn(d1, sq);
    if (call)
        return __dsub_rn(__dmul_rn(__dmul_rn(sj, dfq), bbs_ncdf(d1)), __dmul_rn(__dmul_rn(K, dfr), bbs_ncdf(d2)));
    return __dsub_rn(__dmul_rn(__dmul_rn(K, dfr), bbs_ncdf(-d2)), __dmul_rn(__dmul_rn(sj, dfq), bbs_ncdf(-d1)));
}

// The starting level of a tree in registers: the leaves (level N: V = max(x, 0), X = x, the
// exercise values along rows as exercise_row), or with SMOOTH the smoothed level N - 1 (as
// binomial_cpu.crr_tree_div: S_j = S exp((2j - t) a) per node, x = sign (S_j - K), V the
// Black-Scholes value of the last step, max with x if American). Returns the level.
template <typename T, int G, int R, bool FWD, bool SMOOTH>
__device__ __forceinline__ int start_level(const Par<T>& P, const double* __restrict__ par, int N, bool am,
                                           T (&V)[R][G], T (&X)[R][G]) {
    const int lane = threadIdx.x & 31;
    if constexpr (SMOOTH) {
        static_assert(sizeof(T) == 8 && !FWD, "the smoothed last step is FP64");
        const int top = N - 1;
        const bool call = par[P_SIGN] > 0.0;
        const double S = par[P_S], K = par[P_K], a = par[P_A], sign = par[P_SIGN];
        const double dfq = par[P_BS_DFQ], dfr = par[P_BS_DFR], rqt = par[P_BS_RQT];
        // a rolled loop over the lane's R G nodes, each value put in its register by predicated
        // moves: one copy of the Black-Scholes code. Unrolled, its R G copies tripled the kernel's
        // code (0.76 MB against 0.25 for G = 8, R = 4): H200, 10,000 American puts, N = 1000, BBSR
        // 4.13 ms against 3.28 rolled (31.3 / 19.5 with Greeks). Skipping erfc where it saturates
        // (|d| >= 40: exactly 0 or 1) gained nothing (3.40 ms): the warp's lanes near the strike
        // still take it.
#pragma unroll 1
        for (int idx = 0; idx < R * G; ++idx) {
            const int j = (idx / G) * 32 * G + lane * G + idx % G;
            double x = 0.0, v = 0.0;
            if (j <= top) {
                const double sj = __dmul_rn(S, exp(__dmul_rn((double)(2 * j - top), a)));
                x = __dmul_rn(sign, __dsub_rn(sj, K));
                const double e = bbs_value(call, sj, K, a, dfq, dfr, rqt);
                v = am ? crr_max<double>(e, x) : e;
            }
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int k = 0; k < G; ++k)
                    if (r * G + k == idx) {
                        X[r][k] = x;
                        V[r][k] = v;
                    }
        }
        return top;
    } else {
        const T gN = level_scale<T, FWD>(P, N);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            T x[G];
            if (r * 32 * G <= N) exercise_row<T, FWD, G>(P, r * 32 * G + lane * G, N, gN, x);
#pragma unroll
            for (int k = 0; k < G; ++k) {
                const int j = r * 32 * G + lane * G + k;
                X[r][k] = j <= N ? x[k] : (T)0;
                V[r][k] = j <= N ? crr_max<T>(x[k], (T)0) : (T)0;
            }
        }
        return N;
    }
}

template <typename T, int G, int R, bool FWD, bool SMOOTH = false>
__device__ __forceinline__ void warp_tree(const double* __restrict__ par, int N, bool am, double* __restrict__ price,
                                          double* __restrict__ lv) {
    const Par<T> P = load_par<T>(par, N);
    const int lane = threadIdx.x & 31;
    T V[R][G], X[R][G];
    const int top = start_level<T, G, R, FWD, SMOOTH>(P, par, N, am, V, X);
    record_level<T, G, R>(V, 0, top, lv);  // top <= 2: the starting level is one of the first levels
    if (am)
        run_levels<T, G, R, true, FWD>(V, X, P, 0, top, 0, 1 << 30, lv);
    else
        run_levels<T, G, R, false, FWD>(V, X, P, 0, top, 0, 1 << 30, lv);
    if (lane == 0) *price = (double)V[0][0];
}

// ------------------------------------------------------------------ cash dividends (FP64 warp per tree)
//
// The spot model on the dividend-free lattice (Vellekoop & Nieuwenhuis 2006), the recurrence of
// binomial_cpu.crr_tree_div: the levels between ex-dates run as in warp_tree (run_levels); at a
// dividend's level L (host: binomial_cpu.dividend_level) the level's values go to the warp's
// scratch rows in global memory, and each node j takes the value at S_j - D by the CPU's
// interpolation (quadratic in S through the three nearest nodes; below the lowest node the two
// lowest nodes' line kept between their value and v0, the value at S = 0 from the host), then
// max with the cum-dividend exercise value
// (American). Each lane takes a run of consecutive nodes: their values come from one exp for the
// first and products along it, the bracketing node from one log and a forward walk, as the CPU's
// chain and walk (the two differ by rounding only). X rows that run_levels leaves stale hold values <= 0 (exercise_rows), which the
// max ignores as the CPU's current ones do (W >= 0 up to the interpolation's rounding).
#define CRR_MAXDIV 8

// The level's values V and exercise values X go to the warp's scratch rows (rv, rx, 32 G R
// doubles each), so that neither is live in registers while the new values are computed
// (rw), node by node across the lanes, and come back from there.
template <int G, int R>
__device__ __forceinline__ void apply_dividend(double (&V)[R][G], double (&X)[R][G], const Par<double>& P, int t,
                                               double D, double v0, bool am, double* __restrict__ rv) {
    const int lane = threadIdx.x & 31;
    double* __restrict__ rx = rv + 32 * G * R;
    double* __restrict__ rw = rx + 32 * G * R;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int k = 0; k < G; ++k) {
            const int j = r * 32 * G + lane * G + k;
            if (j <= t) {
                rv[j] = V[r][k];
                rx[j] = X[r][k];
            }
        }
    __syncwarp();
    const double a = P.a;
    const double s0 = P.S * exp(-(double)t * a);
    const double u2 = exp(2.0 * a);
    const double u = exp(a);
    const double u4 = u2 * u2;
    const double c0 = 1.0 / ((1.0 - u2) * (1.0 - u4));
    const double c1 = 1.0 / ((u2 - 1.0) * (u2 - u4));
    const double c2 = 1.0 / ((u4 - 1.0) * (u4 - u2));
    // each lane a run of consecutive nodes: one exp and one log for its first node, then the
    // CPU's product chain and forward walk
    const int per = (t + 32) / 32;
    const int jb = lane * per;
    const int je = min(jb + per - 1, t);
    if (jb <= t) {
        double sj = s0 * exp(2.0 * (double)jb * a);
        int i = 0;
        double xi = s0, xm = s0 / u2;
        const double x_first = sj - D;
        if (x_first >= s0) {
            i = min(max((int)floor(log(x_first / s0) / (2.0 * a)), 0), t);
            xi = s0 * exp(2.0 * (double)i * a);
            while (i > 0 && !(xi <= x_first)) { --i; xi = s0 * exp(2.0 * (double)i * a); }
            xm = s0 * exp(2.0 * (double)(i - 1) * a);
        }
        for (int j = jb; j <= je; ++j) {
            if (j > jb) sj *= u2;
            const double x = sj - D;
            double w;
            if (x <= 0.0) {
                w = v0;
            } else if (x < s0) {  // below the lattice: the lowest two nodes' line, between V[0] and v0
                const double e = rv[0] + (rv[1] - rv[0]) * (x - s0) / (s0 * (u2 - 1.0));
                w = fmin(fmax(e, fmin(rv[0], v0)), fmax(rv[0], v0));
            } else {
                while (i < t && xi * u2 <= x) { ++i; xm = xi; xi *= u2; }
                if (t < 2) {
                    w = i == t ? rv[i] : rv[i] + (rv[i + 1] - rv[i]) * (x - xi) / (xi * (u2 - 1.0));
                } else {
                    int j0;
                    double x0;
                    if ((x < xi * u && i > 0) || i == t - 1) { j0 = i - 1; x0 = xm; } else { j0 = i; x0 = xi; }
                    const double e = x / x0;  // Lagrange weights on x0, x0 u^2, x0 u^4
                    w = rv[j0] * (e - u2) * (e - u4) * c0 + rv[j0 + 1] * (e - 1.0) * (e - u4) * c1
                        + rv[j0 + 2] * (e - 1.0) * (e - u2) * c2;
                }
            }
            const double xe = rx[j];
            rw[j] = am ? (w > xe ? w : xe) : w;
        }
    }
    __syncwarp();
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int k = 0; k < G; ++k) {
            const int j = r * 32 * G + lane * G + k;
            if (j <= t) {
                V[r][k] = rw[j];
                X[r][k] = rx[j];
            }
        }
    __syncwarp();
}

// One FP64 tree with nd cash dividends: lev (descending order of application: the host lists
// them latest first), amt, v0 per dividend; row: this warp's scratch (3 x 32 G R doubles).
template <int G, int R>
__device__ __forceinline__ void warp_tree_div(const double* __restrict__ par, int N, bool am, int nd,
                                              const int* __restrict__ lev, const double* __restrict__ amt,
                                              const double* __restrict__ v0, double* __restrict__ row,
                                              double* __restrict__ price, double* __restrict__ lv) {
    const Par<double> P = load_par<double>(par, N);
    const int lane = threadIdx.x & 31;
    double V[R][G], X[R][G];
    int top = start_level<double, G, R, false, false>(P, par, N, am, V, X);
    record_level<double, G, R>(V, 0, N, lv);  // N <= 2: the leaves are one of the first levels
    int d = 0;
    // one call site of run_levels per exercise style: the segments between ex-dates in a loop
    while (true) {
        const int L = d < nd ? lev[d] : 0;
        if (top > L) {
            if (am)
                run_levels<double, G, R, true, false>(V, X, P, 0, top, L, 1 << 30, lv);
            else
                run_levels<double, G, R, false, false>(V, X, P, 0, top, L, 1 << 30, lv);
        }
        if (d >= nd) break;
        while (d < nd && lev[d] == L) {
            apply_dividend<G, R>(V, X, P, L, amt[d], v0[d], am, row);
            ++d;
        }
        record_level<double, G, R>(V, 0, L, lv);  // a first level (or the leaves): its cum-dividend values
        top = L;
    }
    if (lane == 0) *price = V[0][0];
}

// Persistent warps over trees with cash dividends (FP64, N + 1 <= 32 G R), as crr_batch_warp;
// per tree i: div_n[i] dividends in div_lev / div_amt / div_v0 [i * CRR_MAXDIV ...]; scratch:
// three rows of 32 G R doubles per warp of the grid.
template <int G, int R>
__global__ void __launch_bounds__(128, 1) crr_batch_warp_div(
        const double* __restrict__ par, const int* __restrict__ steps, const int* __restrict__ flags,
        const int* __restrict__ order, int ntrees, int* __restrict__ counter, const int* __restrict__ div_n,
        const int* __restrict__ div_lev, const double* __restrict__ div_amt, const double* __restrict__ div_v0,
        double* __restrict__ scratch, double* __restrict__ price, double* __restrict__ lv) {
    const int lane = threadIdx.x & 31;
    const int nw = (gridDim.x * blockDim.x) >> 5;
    const int wid = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    double* row = scratch + (size_t)wid * (3 * 32 * G * R);
    int idx = wid;
    while (idx < ntrees) {
        const int i = order[idx];
        const size_t o = (size_t)i * CRR_MAXDIV;
        warp_tree_div<G, R>(par + (size_t)i * CRR_NPAR, steps[i], (flags[i] & 1) != 0, div_n[i], div_lev + o,
                            div_amt + o, div_v0 + o, row, price + i, lv + (size_t)6 * i);
        int nxt = 0;
        if (lane == 0) nxt = atomicAdd(counter, 1) + nw;
        idx = __shfl_sync(CRR_FULL, nxt, 0);
    }
}

// ------------------------------------------------------------------ FP32 warp per tree, scaled scheme
//
// The float batch kernel carries U_t = W_t / s_t, where W_t = V_t e^{-r t dt} are the values
// discounted to time 0 (FWD above) and s_t = lam^{N-t} 2^{E} a per-level scale. With the larger
// of p, 1 - p as the "unit" side, W_t[j] = lam (W[j+1] + rho W[j]) when p >= 1 - p
// (lam = 1 / (1 + rho), rho rounded to float, so the effective probabilities lam, rho lam sum
// to 1 exactly: no drift), which gives
//
//   U_t[j] = max(fma(rho, U[j], U[j+1]), Y[j]),   Y[j] <- fma(Y[j], u e^{r dt} / lam, c g_t / s_t)
//
// three float instructions per node instead of four (European: one); c g_t / s_t is a double
// recurrence (factor e^{r dt} / lam), computed one level ahead. At the re-anchoring levels
// (every P_ANCHOR levels, American or not) the integer E is reset so that s lies in [0.5, 1),
// the values multiplied by the same power of two (exact), the exercise values recomputed and
// the offset carried on by its double recurrence times 2^e (CRR_SCL_RECUR); so U stays below 2^65 W (the exponent clamp is lowered by 46
// for that). W_t = U_t s_t for the price and the first levels. Rows without a positive exercise
// value skip Y and the max (exercise_rows).

struct ParS {
    float S, K, a, sS, msK, rho, my, u2, emax, argmax;
    double kap, c, sign, rdt, l2lam, La, sgc;
    int N, period;
    bool ur;
};

__device__ __forceinline__ ParS load_par_s(const double* __restrict__ p, int N) {
    ParS P;
    P.S = (float)p[P_S];
    P.K = (float)p[P_K];
    P.a = (float)p[P_A];
    P.sS = (float)(p[P_SIGN] * p[P_S]);
    P.msK = (float)(-p[P_SIGN] * p[P_K]);
    P.rho = (float)p[P_RHO];
    P.my = (float)p[P_MY];
    P.u2 = (float)exp(2.0 * p[P_A]);
    P.argmax = (float)(p[P_ARGMAX] - 46.0);
    P.emax = (float)exp(p[P_ARGMAX] - 46.0);
    P.kap = p[P_KAP];
    P.c = p[P_C];
    P.sign = p[P_SIGN];
    P.rdt = p[P_RDT];
    P.l2lam = log2(p[P_LAM]);
    P.La = log(p[P_K] / p[P_S]) / p[P_A];
    P.sgc = p[P_SIGN] / p[P_C];
    P.N = N;
    P.period = (int)p[P_ANCHOR];
    P.ur = p[P_UR] != 0.0;
    return P;
}

// One row's node update (scaled scheme); nb: right neighbour of the row's last node.
template <int G, int R, bool AM, bool UR, bool SPECIAL>
__device__ __forceinline__ void scl_row(float (&U)[R][G], float (&Y)[R][G], const ParS& P, int r, float nb, float ct,
                                        float sc, float fac, int jrow, int t) {
    float e = 0.f;
    if (AM && SPECIAL) {
        float arg = (float)(2 * jrow - t) * P.a;
        arg = arg < P.argmax ? arg : P.argmax;
        e = expf(arg);
    }
#pragma unroll
    for (int k = 0; k < G; ++k) {
        const float right = (k < G - 1) ? U[r][(k < G - 1) ? k + 1 : k] : nb;
        float cont = UR ? fmaf(P.rho, U[r][k], right) : fmaf(P.rho, right, U[r][k]);
        if (SPECIAL) cont *= sc;
        if (AM) {
            float y;
            if (SPECIAL) {
                if (k > 0) e = fminf(e * P.u2, P.emax);
                y = fmaf(P.S, e, -P.K) * fac;
            } else {
                y = fmaf(Y[r][k], P.my, ct);
            }
            Y[r][k] = y;
            U[r][k] = fmaxf(cont, y);
        } else {
            U[r][k] = cont;
        }
    }
}

// A generic level (re-anchoring or t <= 2): rows r < ra, every row with the exercise value.
template <int G, int R, bool AM, bool UR, bool SPECIAL>
__device__ __forceinline__ void scl_level(float (&U)[R][G], float (&Y)[R][G], const ParS& P, int t, int ra, float ct,
                                          float sc, float fac) {
    const int lane = threadIdx.x & 31;
    float nb[R];
    neighbours<float, G, R, R>(U, nb);
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (r < ra) scl_row<G, R, AM, UR, SPECIAL>(U, Y, P, r, nb[r], ct, sc, fac, r * 32 * G + lane * G, t);
}

// n plain levels with exactly RA live rows, NA of them (first if PFX, else last) with the
// exercise value; gsc: c g_t / s_t of the last level done, updated.
template <int G, int R, int RA, int NA, bool PFX, bool AM, bool UR>
__device__ __forceinline__ void scl_fixed(float (&U)[R][G], float (&Y)[R][G], const ParS& P, int n, double& gsc) {
    double gn = gsc * P.kap;
    float ctn = (float)gn;
    CRR_PRAGMA_UNROLL(CRR_SCL_UNROLL)
    for (int i = 0; i < n; ++i) {
        const float ct = ctn;
        if (AM) {
            gsc = gn;
            gn = gsc * P.kap;
            ctn = (float)gn;
        }
        float nb[R];
        neighbours<float, G, R, RA>(U, nb);
#pragma unroll
        for (int r = 0; r < RA; ++r) {
            if (AM && (PFX ? r < NA : r >= RA - NA))
                scl_row<G, R, true, UR, false>(U, Y, P, r, nb[r], ct, 1.f, 0.f, 0, 0);
            else
                scl_row<G, R, false, UR, false>(U, Y, P, r, nb[r], ct, 1.f, 0.f, 0, 0);
        }
    }
}

template <int G, int R, int RA, int NA, bool AM, bool UR>
__device__ __forceinline__ void scl_na(float (&U)[R][G], float (&Y)[R][G], const ParS& P, int n, double& gsc, int na,
                                       bool pfx) {
    if constexpr (NA >= 0) {
        if (na == NA) {
            if constexpr (NA == 0 || NA == RA)
                scl_fixed<G, R, RA, NA, true, AM, UR>(U, Y, P, n, gsc);
            else if (pfx)
                scl_fixed<G, R, RA, NA, true, AM, UR>(U, Y, P, n, gsc);
            else
                scl_fixed<G, R, RA, NA, false, AM, UR>(U, Y, P, n, gsc);
        } else {
            scl_na<G, R, RA, NA - 1, AM, UR>(U, Y, P, n, gsc, na, pfx);
        }
    }
}

template <int G, int R, int RA, bool AM, bool UR>
__device__ __forceinline__ void scl_dispatch(float (&U)[R][G], float (&Y)[R][G], const ParS& P, int n, int ra,
                                             double& gsc, int na, bool pfx) {
    if constexpr (RA >= 1) {
        if (ra == RA) {
            if constexpr (AM && R <= CRR_SKIP_ROWS)
                scl_na<G, R, RA, RA, AM, UR>(U, Y, P, n, gsc, na, pfx);
            else
                scl_fixed<G, R, RA, AM ? RA : 0, true, AM, UR>(U, Y, P, n, gsc);
        } else {
            scl_dispatch<G, R, RA - 1, AM, UR>(U, Y, P, n, ra, gsc, na, pfx);
        }
    }
}

template <int G, int R, bool AM, bool UR>
__device__ __forceinline__ void scl_levels(float (&U)[R][G], float (&Y)[R][G], const ParS& P, double* __restrict__ price,
                                           double* __restrict__ lv) {
    const int ROW = 32 * G;
    const int lane = threadIdx.x & 31;
    int E = 0;                             // s_t = lam^{N-t} 2^E
    double gsc = P.c * exp(-P.rdt * P.N);  // c g_N / s_N
    int t = P.N - 1;
    while (t >= 0) {
        const int ra = min(R, t / ROW + 1);
        const int d = (P.N - t) % P.period;
        if (d == 0 || t <= 2) {
            if (d == 0) {  // s into [0.5, 1) by E -= e; values times 2^e; re-anchor
                const double lg = (double)(P.N - t) * P.l2lam + (double)E;
                const int e = (int)floor(lg) + 1;
                E -= e;
#if CRR_SCL_RECUR
                // c g_t / s_t by the recurrence (double: drift ~1e-13 over 1e4 levels), rescaled
                // exactly by 2^e; sign g_t / s_t from it (no exp, exp2 or division per anchor)
                gsc = ldexp(gsc * P.kap, e);
                const float fac = (float)(gsc * P.sgc);
#else
                const double s = exp2(lg - (double)e);
                const double g = exp(-P.rdt * (double)t);
                gsc = P.c * g / s;
                const float fac = (float)(P.sign * g / s);
#endif
                scl_level<G, R, AM, UR, true>(U, Y, P, t, ra, 0.f, ldexpf(1.f, e), fac);
            } else {
                gsc *= P.kap;
                scl_level<G, R, AM, UR, false>(U, Y, P, t, ra, (float)gsc, 1.f, 0.f);
            }
            if (lv != nullptr && t <= 2) {
                const double s = exp2((double)(P.N - t) * P.l2lam + (double)E);
                const int base = t == 2 ? 3 : (t == 1 ? 1 : 0);
#pragma unroll
                for (int k = 0; k < G; ++k)
                    if (lane * G + k <= t) lv[base + lane * G + k] = (double)U[0][k] * s;
            }
            --t;
            continue;
        }
        int n = t - (ra - 1) * ROW + 1;
        n = min(n, P.period - d);
        n = min(n, t - 2);
        bool pfx = true;
        const int na = AM ? exercise_rows(P.sign, P.La, 0, ROW, ra, t, max(t - (P.period - d) + 1, 0), pfx) : 0;
        scl_dispatch<G, R, R, AM, UR>(U, Y, P, n, ra, gsc, na, pfx);
        t -= n;
    }
    if (lane == 0) *price = (double)U[0][0] * exp2((double)P.N * P.l2lam + (double)E);
}

template <int G, int R>
__device__ __forceinline__ void warp_tree_scl(const double* __restrict__ par, int N, bool am, double* __restrict__ price,
                                              double* __restrict__ lv) {
    const ParS P = load_par_s(par, N);
    const int lane = threadIdx.x & 31;
    float U[R][G], Y[R][G];
    const float gN = (float)exp(-P.rdt * N);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int k = 0; k < G; ++k) {
            const int j = r * 32 * G + lane * G + k;
            if (j <= N) {
                float arg = (float)(2 * j - N) * P.a;
                arg = arg < P.argmax ? arg : P.argmax;
                const float y = fmaf(P.sS, expf(arg), P.msK) * gN;
                Y[r][k] = y;
                U[r][k] = fmaxf(y, 0.f);
            } else {
                Y[r][k] = 0.f;
                U[r][k] = 0.f;
            }
        }
    if (lv != nullptr && N <= 2) {
        const int base = N == 2 ? 3 : (N == 1 ? 1 : 0);
#pragma unroll
        for (int k = 0; k < G; ++k)
            if (lane * G + k <= N) lv[base + lane * G + k] = (double)U[0][k];
    }
    if (P.ur) {
        if (am)
            scl_levels<G, R, true, true>(U, Y, P, price, lv);
        else
            scl_levels<G, R, false, true>(U, Y, P, price, lv);
    } else {
        if (am)
            scl_levels<G, R, true, false>(U, Y, P, price, lv);
        else
            scl_levels<G, R, false, false>(U, Y, P, price, lv);
    }
}

// Persistent warps; tree order[idx] for idx = warp id, then from the atomic counter (which the
// host zeroes before the launch). Trees must satisfy N + 1 <= 32 G R. Blocks of 128 threads;
// float: at most 128 registers (4 blocks per SM; the (rows, exercise rows) bodies would take more).
// SMOOTH: FP64 trees with the smoothed last step (BBS, start_level), the instances of
// crr_batch_gpu(extrapolate=True).
template <typename T, int G, int R, bool FWD, bool SMOOTH = false>
__global__ void __launch_bounds__(128, sizeof(T) == 4 ? CRR_F32_MINB : 1) crr_batch_warp(const double* __restrict__ par, const int* __restrict__ steps,
                                                      const int* __restrict__ flags, const int* __restrict__ order,
                                                      int ntrees, int* __restrict__ counter, double* __restrict__ price,
                                                      double* __restrict__ lv) {
    const int lane = threadIdx.x & 31;
    const int nw = (gridDim.x * blockDim.x) >> 5;
    int idx = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    while (idx < ntrees) {
        const int i = order[idx];
        if constexpr (FWD)
            warp_tree_scl<G, R>(par + (size_t)i * CRR_NPAR, steps[i], (flags[i] & 1) != 0, price + i,
                                lv + (size_t)6 * i);
        else
            warp_tree<T, G, R, FWD, SMOOTH>(par + (size_t)i * CRR_NPAR, steps[i], (flags[i] & 1) != 0, price + i,
                                            lv + (size_t)6 * i);
        int nxt = 0;
        if (lane == 0) nxt = atomicAdd(counter, 1) + nw;
        idx = __shfl_sync(CRR_FULL, nxt, 0);
    }
}

// ------------------------------------------------------------------ implied volatility on the device
//
// crr_iv_warp: the bracketed root find of binomial_cpu.crr_implied_vol (Brent's zeroin, R. P.
// Brent 1973 ch. 4; the same steps as kernels/brent.py) run whole on the device, one warp per
// option: each trial volatility's parameter vector is built in shared memory by the FP64 prologue
// of binomial_gpu._fill_params (crr_iv_par, below) and priced by warp_tree, so one launch
// replaces one launch, one upload and one copy back per Brent step of the host loop. Every lane
// runs the same scalar Brent recurrence on the same values (no divergence, no broadcast).
// Options per row of `opt` (IV_NOPT doubles): S, K, T, r, q, target price, lo, hi, with lo
// already raised above the bound 1.0001 |r - q| sqrt(dt) where p leaves [0, 1] (host). flags:
// bit 0 American, bit 1 call. status: 0 solved, 1 price below the tree at lo, 2 above the tree
// at hi, 3 not converged in max_iter steps (the codes of kernels/rootfind.IV_*).
#define IV_NOPT 8

struct IvBrent {
    double a, fa, b, fb, c, fc, d, e;
};

__device__ __forceinline__ void iv_brent_init(IvBrent& s, double a, double b, double fa, double fb) {
    s.a = a; s.fa = fa; s.b = b; s.fb = fb; s.c = a; s.fc = fa; s.d = b - a; s.e = b - a;
}

// kernels/brent.brent_step: true when s.b is the root; else s.b moves to the next trial point.
__device__ __forceinline__ bool iv_brent_step(IvBrent& s, double xtol, double ftol) {
    if ((s.fb > 0.0) == (s.fc > 0.0)) {
        s.c = s.a; s.fc = s.fa; s.d = s.b - s.a; s.e = s.d;
    }
    if (fabs(s.fc) < fabs(s.fb)) {
        s.a = s.b; s.fa = s.fb; s.b = s.c; s.fb = s.fc; s.c = s.a; s.fc = s.fa;
    }
    const double tol = __dadd_rn(__dmul_rn(2.0 * 2.220446049250313e-16, fabs(s.b)), 0.5 * xtol);
    const double m = 0.5 * (s.c - s.b);
    if (fabs(m) <= tol || fabs(s.fb) <= ftol) return true;
    if (fabs(s.e) >= tol && fabs(s.fa) > fabs(s.fb)) {
        const double sr = s.fb / s.fa;
        double p, q;
        if (s.a == s.c) {
            p = 2.0 * m * sr;
            q = 1.0 - sr;
        } else {
            const double qq = s.fa / s.fc, rr = s.fb / s.fc;
            p = sr * __dsub_rn(__dmul_rn(__dmul_rn(2.0 * m, qq), qq - rr), __dmul_rn(s.b - s.a, rr - 1.0));
            q = (qq - 1.0) * (rr - 1.0) * (sr - 1.0);
        }
        if (p > 0.0) q = -q; else p = -p;
        if (2.0 * p < fmin(__dsub_rn(__dmul_rn(3.0 * m, q), fabs(tol * q)), fabs(s.e * q))) {
            s.e = s.d;
            s.d = p / q;
        } else {
            s.d = m; s.e = m;
        }
    } else {
        s.d = m; s.e = m;
    }
    s.a = s.b; s.fa = s.fb;
    if (fabs(s.d) > tol) s.b += s.d; else s.b += m > 0.0 ? tol : -tol;
    return false;
}

// binomial_gpu._fill_params, FP64 branch (the layout P_*), in its order with no contraction; CUDA's
// exp and sqrt may differ from the host's by an ulp, so the parameters agree to about an ulp.
__device__ __forceinline__ void crr_iv_par(double* __restrict__ out, bool call, double S, double K, double T, double r,
                                           double q, double sigma, int N, bool pd_fma, int anchor, bool smooth) {
    const double dt = T / (double)N;
    const double a = __dmul_rn(sigma, sqrt(dt));
    const double u = exp(a);
    const double d = 1.0 / u;
    const double disc = exp(-__dmul_rn(r, dt));
    const double p = (exp(__dmul_rn(r - q, dt)) - d) / (u - d);
    const double sign = call ? 1.0 : -1.0;
    out[P_S] = S;
    out[P_K] = K;
    out[P_A] = a;
    out[P_XM] = u;
    out[P_WU] = __dmul_rn(disc, p);
    out[P_WD] = pd_fma ? fma(-disc, p, disc) : __dmul_rn(disc, 1.0 - p);
    out[P_C] = __dmul_rn(__dmul_rn(sign, K), u - 1.0);
    out[P_SIGN] = sign;
    out[P_RDT] = 0.0;
    out[P_ARGMAX] = __longlong_as_double(0x7ff0000000000000LL);  // +inf: no clamp in FP64
    // binomial_cpu.reanchor_period: fewer levels between re-anchorings where the step a is large
    out[P_ANCHOR] = (double)(((double)anchor * a <= 8.0) ? anchor : max(1, (int)(8.0 / a)));
    for (int k = P_UR; k < CRR_NPAR; ++k) out[k] = 0.0;
    if (smooth) {  // the smoothed last step's Black-Scholes constants (start_level)
        out[P_BS_DFQ] = exp(-__dmul_rn(q, dt));
        out[P_BS_DFR] = disc;
        out[P_BS_RQT] = __dmul_rn(r - q, dt);
    }
}

// DIV: options may carry cash dividends (div_n, div_lev, div_amt, div_v0 per option as
// crr_batch_warp_div reads them; scratch: three rows of 32 G R doubles per warp of the grid); their
// trees are warp_tree_div's. Without, the arguments are unused (null). BBS (not with DIV): the
// root find inverts the BBSR value of binomial_cpu._value, (N V_N - M V_M) / (N - M) over
// smoothed trees of N and M = max(N / 2, 1) steps (the smoothed tree alone where M == N),
// in that order of operations.
template <int G, int R, bool DIV, bool BBS = false>
__global__ void __launch_bounds__(128, 1) crr_iv_warp(const double* __restrict__ opt, const int* __restrict__ steps,
                                                     const int* __restrict__ flags, const int* __restrict__ order, int n,
                                                     int* __restrict__ counter, double xtol, int max_iter, int pd_fma, int anchor,
                                                     double* __restrict__ vol, int* __restrict__ status,
                                                     const int* __restrict__ div_n, const int* __restrict__ div_lev,
                                                     const double* __restrict__ div_amt, const double* __restrict__ div_v0,
                                                     double* __restrict__ scratch) {
    __shared__ double spar[4][CRR_NPAR];
    __shared__ double sprice[4];
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    const int nw = (gridDim.x * blockDim.x) >> 5;
    int idx = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    while (idx < n) {
        const int i = order[idx];
        const double* o = opt + (size_t)IV_NOPT * i;
        const double S = o[0], K = o[1], T = o[2], r = o[3], q = o[4], target = o[5], lo = o[6], hi = o[7];
        const int N = steps[i];
        const bool am = (flags[i] & 1) != 0, call = (flags[i] & 2) != 0;
        const int M = BBS ? max(N / 2, 1) : N;
        auto f = [&](double sigma) -> double {
            double v[2];
            // one call site of the tree: the BBSR's trees of N and M steps in a loop
            for (int pass = 0; pass < ((BBS && M != N) ? 2 : 1); ++pass) {
                const int n_ = pass == 0 ? N : M;
                if (lane == 0) crr_iv_par(spar[w], call, S, K, T, r, q, sigma, n_, pd_fma != 0, anchor, BBS);
                __syncwarp();
                if constexpr (DIV) {
                    static_assert(!BBS, "BBSR is not for cash dividends");
                    const size_t od = (size_t)i * CRR_MAXDIV;
                    const int wid = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
                    warp_tree_div<G, R>(spar[w], N, am, div_n[i], div_lev + od, div_amt + od, div_v0 + od,
                                        scratch + (size_t)wid * (3 * 32 * G * R), &sprice[w], nullptr);
                } else {
                    warp_tree<double, G, R, false, BBS>(spar[w], n_, am, &sprice[w], nullptr);
                }
                __syncwarp();
                v[pass] = sprice[w];
                __syncwarp();
            }
            if (BBS && M != N)
                return __dsub_rn(__ddiv_rn(__dsub_rn(__dmul_rn((double)N, v[0]), __dmul_rn((double)M, v[1])),
                                           (double)(N - M)), target);
            return v[0] - target;
        };
        const double ftol = 1e-12 * fmax(1.0, target);
        const double flo = f(lo);
        const double fhi = f(hi);
        int st;
        double x = __longlong_as_double(0x7ff8000000000000LL);  // NaN
        if (flo > ftol) {
            st = 1;
        } else if (fhi < -ftol) {
            st = 2;
        } else {
            IvBrent s;
            iv_brent_init(s, lo, hi, flo, fhi);
            st = 3;
            for (int it = 0; it < max_iter; ++it) {
                if (iv_brent_step(s, xtol, ftol)) {
                    st = 0;
                    break;
                }
                s.fb = f(s.b);
            }
            x = s.b;
        }
        if (lane == 0) {
            vol[i] = x;
            status[i] = st;
        }
        int nxt = 0;
        if (lane == 0) nxt = atomicAdd(counter, 1) + nw;
        idx = __shfl_sync(CRR_FULL, nxt, 0);
    }
}

// ------------------------------------------------------------------ tiles: chunks x slabs

// Pruned windows (single-option pipeline, FP64; win != nullptr and kinds != 0). Far from the
// money two regions of the tree are known without computing them, exactly:
//   zero side      a node whose two successors hold exactly 0 and whose exercise value is <= 0
//                  holds exactly 0 (cont = pd 0 + pu 0 = 0, max(0, X) = 0); values there are
//                  option prices that underflowed to 0 (a put far above the strike, a call far
//                  below);
//   exercise side  a node whose two successors are exercised (V = X) and that lies where
//                  X - cont = K (1 - e^{-r dt}) - S (1 - e^{-q dt}) > 0 (put; the call's mirror
//                  image) is exercised: V = X. S* = K (1 - e^{-r dt}) / (1 - e^{-q dt}) bounds
//                  that region (put: S < S*, call: S > S*; Ls = ln(S* / S0) / a), with four
//                  steps a of margin, far beyond rounding (the host enables it only where
//                  (1 - e^{-r dt}) 4a resp. (1 - e^{-q dt}) 4a >= 1e-13).
// A put has its exercise side below (low j) and its zero side above; a call the reverse; a
// European option only its zero side. kinds = low | high << 2 with 1 = exercise, 2 = zero.
// At input level t, nodes j < L are low-side and j >= H high-side (known, not stored; loads
// synthesise them: V = X or 0, X from exp). A slab of kk levels then only needs the outputs
// j in [L' - kk, H' - 1] (L' <= L and H' >= H the margins' caps): below and above, the
// rules above give the values, one node less on the low side per level. After the slab the
// outputs are classified (exercised: V == X at a node with X > 0 by position; zero: V == 0
// by position) and L, H move to the first output that is not low-side and one past the last
// that is not high-side (a min and a max reduced with atomics into win[2 + 2 ((s + 1) % 3)],
// read during the next slab; triple-buffered, so each slot is reset one slab after it is read).
// The layout of slab s + 1 is fixed before the barrier that ends slab s, from the exact L, H
// of slab s's input level (one slab stale, moved by the rules: tiles_tree_pruned), so no read
// waits behind the barrier (H200, one put, N = 1e5: 6.34 against 6.80 ms). Slabs that end at
// t_lo or at a level <= 2 are dense (every node stored; levels 0-2 for the price and the
// Greeks, and level t_lo complete for whatever comes next). win[0..1]
// carry L and H from one launch to the next. The result is the dense tree's: the skipped
// nodes hold exactly the values the recurrence would give them (zero side), or the exercise
// value it would choose by a margin of at least (1 - e^{-r dt}) 4a K (exercise side).
// Source of the idea: the exercise boundary of the American put moves monotonically (Kim and
// Byun 1994 track it to cut the tree's work); the zero side is exact underflow.
#define CRR_SIDE_EX 1
#define CRR_SIDE_ZERO 2
#define CRR_BIG (1 << 30)

__device__ __forceinline__ int clamp_level_index(double x) { return (int)fmin(fmax(x, -1.0), (double)CRR_BIG); }

// The leaves of a tile chunk at j0 (positions p < lim that lie in the tree; the rest 0):
// V = max(x, 0), X = x, and the first levels' record if the tree is that small.
template <typename T, int G, int R, bool FWD>
__device__ __forceinline__ void leaves_chunk(const Par<T>& P, int j0, int lim, T (&V)[R][G], T (&X)[R][G],
                                             double* __restrict__ lv) {
    const int ROW = 32 * G;
    const int lane = threadIdx.x & 31;
    const int t = P.N;
    const T gN = level_scale<T, FWD>(P, t);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        T x[G];
        if (r * ROW < lim) exercise_row<T, FWD, G>(P, j0 + r * ROW + lane * G, t, gN, x);
#pragma unroll
        for (int k = 0; k < G; ++k) {
            const int p = r * ROW + lane * G + k;
            const bool in = p < lim && j0 + p <= t;
            X[r][k] = in ? x[k] : (T)0;
            V[r][k] = in ? crr_max<T>(x[k], (T)0) : (T)0;
        }
    }
    record_level<T, G, R>(V, j0, t, lv);
}

// tiles_tree with pruned windows (the PRUNE instances): the same slabs and chunks over the
// window [L' - kk, H' - 1] of each slab's outputs. Kept apart from tiles_tree because the dense
// kernels lost ~15 % with the window bookkeeping compiled in, though switched off (H200,
// one put, N = 1e4: 0.648 against 0.551 ms). Backward induction of one tree from level t_hi
// (in buffers [src]; or the leaves if t_hi == N) down to level t_lo, K levels per slab, chunks distributed over warps
// [warp_id, nwarps); SYNC() between slabs. Level t_lo is left in buffers
// [src ^ (ceil((t_hi - t_lo) / K) & 1)] (the host relies on this parity).
// Vb/Xb hold two buffers of `stride` elements each. Only output nodes <= out_cap are produced.
//
// Chunk widths: at most CW nodes (CW - K outputs, K halo nodes recomputed). With units > 0 the
// outputs of a slab are spread evenly over `units` chunk slots per round (chunk widths rounded
// up to whole rows of 32 G nodes; rows beyond a chunk's width are skipped), so that no slot
// gets two chunks while another gets one. Once the whole remaining tree fits one chunk, that
// chunk runs every remaining level without a further slab barrier. With kinds != 0, pruned
// windows as above (win: 8 ints; thread 0 of warp 0 resets the slots).
template <typename T, int G, int R, bool AM, bool FWD, bool LDCG, int U, typename Sync>
__device__ __forceinline__ void tiles_tree_pruned(const Par<T>& P, T* __restrict__ Vb, T* __restrict__ Xb,
                                                  size_t stride, int t_hi, int t_lo, int K, int src, int out_cap,
                                                  int warp_id, int nwarps, int units, double* __restrict__ price,
                                                  double* __restrict__ lv, Sync sync, int* __restrict__ win,
                                                  double Ls, int kinds) {
    const int CW = 32 * G * R;
    const int ROW = 32 * G;
    const int lane = threadIdx.x & 31;
    const int nslabs = (t_hi - t_lo + K - 1) / K;
    const int last = src ^ (nslabs & 1);  // buffer of level t_lo
    const bool prune = !FWD && win != nullptr && kinds != 0;
    const int lowk = kinds & 3, highk = (kinds >> 2) & 3;
    const double Llow = lowk == CRR_SIDE_EX ? Ls : P.La;   // caps: ln(S* / S0) / a or ln(K / S0) / a
    const double Lhigh = highk == CRR_SIDE_EX ? Ls : P.La;
    const bool leader = warp_id == 0 && lane == 0;
    // Nodes j < Lsyn / j >= Hsyn of a slab's input level are known (synthesised, not loaded).
    // These bounds are one slab stale: the slab's layout is fixed before the barrier that ends
    // the slab before it, from the exact bounds Lx, Hx of that slab's own input level (read from
    // the slot of the slab before), moved by the rules above: below min(Lx, cap) - kk and at or
    // above max(Hx, cap) the outputs are known, and the slab's window [jlo, jhi] holds every
    // other output. So no window read waits behind the barrier; the window is about kk / 2
    // nodes wider on the exercise side.
    int Lsyn = 0, Hsyn = CRR_BIG;
    if (prune) {
        if (t_hi == P.N) {
            const double m = 0.5 * ((double)P.N + P.La);  // 2j - N = La: the strike
            if (lowk) Lsyn = min(clamp_level_index(floor(m) - 1.0), P.N + 1);
            if (highk) Hsyn = min(clamp_level_index(ceil(m) + 2.0), P.N + 1);
        } else {
            Lsyn = __ldcg(win);
            Hsyn = __ldcg(win + 1);
        }
    }
    int Lx = Lsyn, Hx = Hsyn;  // exact bounds of the current input level (slab 0: these)
    int jlo_p = 0, jhi_p = 0;  // the previous slab's window
    int t = t_hi;
    int cur = src;
    int s = 0;
    while (t > t_lo) {
        const bool fits = t + 1 <= CW;  // the whole level t in chunk 0
        const int kk = fits ? t - t_lo : min(K, t - t_lo);
        const int dst = fits ? last : cur ^ 1;
        const int tn = t - kk;
        int jlo = 0;
        int jhi = min(tn, out_cap);
        const bool windowed = prune && !fits && tn != t_lo && tn > 2;
        int capL = CRR_BIG, capH = -1;
        if (windowed) {
            if (lowk) capL = clamp_level_index(floor(0.5 * ((double)t + Llow)) - 2.0);
            if (highk) capH = clamp_level_index(ceil(0.5 * ((double)t + Lhigh)) + 2.0);
            jlo = max(0, min(Lsyn, capL) - kk);
            jhi = min(jhi, max(Hsyn, capH) - 1);
        }
        int* tgt = nullptr;
        int Lr = CRR_BIG, Hr = -1;  // the slab before's reduced bounds (its outputs: this input level)
        if (prune) {
            tgt = win + 2 + 2 * ((s + 1) % 3);
            if (leader) {
                int* rs = win + 2 + 2 * ((s + 2) % 3);
                rs[0] = CRR_BIG;
                rs[1] = -1;
            }
            if (s > 0) {
                Lr = __ldcg(win + 2 + 2 * (s % 3));
                Hr = __ldcg(win + 3 + 2 * (s % 3));
            }
        }
        const int nout = jhi - jlo + 1;
        int vw = CW - K;  // outputs per chunk
        if (fits) {
            vw = CW;
        } else if (units > 0 && nout > 0) {
            const int nmax = (nout - 1) / vw + 1;
            const int slots = ((nmax + units - 1) / units) * units;
            const int vb = (nout + slots - 1) / slots;
            vw = min(vw, ((vb + K + ROW - 1) / ROW) * ROW - K);
        }
        const int lim = fits ? CW : vw + K;  // positions p < lim of a chunk are loaded
        const int nchunks = nout > 0 ? (nout - 1) / vw + 1 : 0;
        const T* Vin = Vb + (size_t)cur * stride;
        const T* Xin = Xb + (size_t)cur * stride;
        T* Vout = Vb + (size_t)dst * stride;
        T* Xout = Xb + (size_t)dst * stride;
        for (int c = warp_id; c < nchunks; c += nwarps) {
            const int j0 = jlo + c * vw;
            T V[R][G], X[R][G], XQ[R][G];
            if (t == P.N) {
                leaves_chunk<T, G, R, FWD>(P, j0, lim, V, X, lv);
            } else {
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int jr = j0 + r * ROW + lane * G;  // this lane's first node of row r
                    T x[G];
                    // known (not stored) nodes in this lane's part of the row: from exp, in
                    // registers (only the pruned instances carry this code)
                    const bool known = prune && r * ROW < lim && (jr < Lsyn || jr + G - 1 >= Hsyn);
                    if (known) exercise_row<T, FWD, G>(P, jr, t, (T)1, x);
#pragma unroll
                    for (int k = 0; k < G; ++k) {
                        const int p = r * ROW + lane * G + k;
                        const int j = jr + k;
                        if (p < lim && j <= t) {
                            if (known && (j < Lsyn || j >= Hsyn)) {
                                V[r][k] = (j < Lsyn ? lowk : highk) == CRR_SIDE_EX ? x[k] : (T)0;
                                X[r][k] = x[k];
                            } else {
                                V[r][k] = LDCG ? crr_ldcg<T>(Vin + j) : Vin[j];
                                X[r][k] = AM ? (LDCG ? crr_ldcg<T>(Xin + j) : Xin[j]) : (T)0;
                            }
                        } else {
                            V[r][k] = (T)0;
                            X[r][k] = (T)0;
                        }
                    }
                }
            }
            if (AM && !FWD && !fits && tn > 2) {  // exercise values by shifting
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int k = 0; k < G; ++k) XQ[r][k] = crr_fma<T>(X[r][k], P.xm, P.c);
                run_levels_shift<T, G, R, U>(V, X, XQ, P, j0, t, tn, lim);
            } else {
                run_levels<T, G, R, AM, FWD, U>(V, X, P, j0, t, tn, lim, lv);
            }
            int mn = CRR_BIG, mx = -1;  // first output not low-side, last not high-side
            // 2j - tn < La - 2 (below the strike by two steps) iff j < jB; > La + 2 iff j >= jA
            const int jB = prune ? clamp_level_index(ceil(0.5 * ((double)tn + P.La - 2.0))) : 0;
            const int jA = prune ? clamp_level_index(floor(0.5 * ((double)tn + P.La + 2.0)) + 1.0) : CRR_BIG;
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int k = 0; k < G; ++k) {
                    const int p = r * ROW + lane * G + k;
                    const int j = j0 + p;
                    if (p < vw && j <= jhi) {
                        Vout[j] = V[r][k];
                        if (AM) Xout[j] = X[r][k];
                        if (prune) {  // below jB / from jA on: a node of this side of the strike
                            const bool ex = AM && V[r][k] == X[r][k];
                            const bool lowc = j < jB && (lowk == CRR_SIDE_EX ? ex : V[r][k] == (T)0);
                            const bool highc = j >= jA && (highk == CRR_SIDE_EX ? ex : V[r][k] == (T)0);
                            if (!lowc) mn = min(mn, j);
                            if (!highc) mx = max(mx, j);
                        }
                    }
                }
            if (prune) {
#if __CUDA_ARCH__ >= 800
                mn = __reduce_min_sync(CRR_FULL, mn);
                mx = __reduce_max_sync(CRR_FULL, mx);
#else
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    mn = min(mn, __shfl_xor_sync(CRR_FULL, mn, o));
                    mx = max(mx, __shfl_xor_sync(CRR_FULL, mx, o));
                }
#endif
                if (lane == 0) {
                    if (mn < CRR_BIG) atomicMin(tgt, mn);
                    if (mx >= 0) atomicMax(tgt + 1, mx);
                }
            }
            if (tn == 0 && j0 == 0 && lane == 0 && price != nullptr) *price = (double)V[0][0];
        }
        if (prune) {
            if (s > 0) {  // exact bounds of this slab's input level
                Lx = lowk ? min(Lr, jhi_p + 1) : 0;
                Hx = highk ? max(Hr, jlo_p - 1) + 1 : CRR_BIG;
            }
            // the next slab's known nodes: below min(Lx, cap) - kk / from max(Hx, cap) on (the
            // rules), and everything outside this slab's window
            Lsyn = lowk && windowed ? max(jlo, min(Lx, capL) - kk) : 0;
            Hsyn = highk && windowed ? min(max(Hx, capH), jhi + 1) : CRR_BIG;
            jlo_p = jlo;
            jhi_p = jhi;
        }
        sync();
        cur = dst;
        t = tn;
        ++s;
    }
    if (prune && leader) {  // for the next launch: the exact L, H of level t_lo; its first slot reset
        win[0] = s == 0 ? Lsyn : (lowk ? min(__ldcg(win + 2 + 2 * (s % 3)), jhi_p + 1) : 0);
        win[1] = s == 0 ? Hsyn : (highk ? max(__ldcg(win + 3 + 2 * (s % 3)), jlo_p - 1) + 1 : CRR_BIG);
        win[4] = CRR_BIG;
        win[5] = -1;
    }
}

// Backward induction of one tree from level t_hi (in buffers [src]; or the leaves if
// t_hi == N) down to level t_lo, K levels per slab, chunks distributed over warps
// [warp_id, nwarps); SYNC() between slabs. Level t_lo is left in buffers
// [src ^ (ceil((t_hi - t_lo) / K) & 1)] (the host relies on this parity).
// Vb/Xb hold two buffers of `stride` elements each. Only output nodes <= out_cap are produced.
//
// Chunk widths: at most CW nodes (CW - K outputs, K halo nodes recomputed). With units > 0 the
// outputs of a slab are spread evenly over `units` chunk slots per round (chunk widths rounded
// up to whole rows of 32 G nodes; rows beyond a chunk's width are skipped), so that no slot
// gets two chunks while another gets one. Once the whole remaining tree fits one chunk, that
// chunk runs every remaining level without a further slab barrier. PRUNE: tiles_tree_pruned.
template <typename T, int G, int R, bool AM, bool FWD, bool LDCG, int U, typename Sync, bool PRUNE = false>
__device__ __forceinline__ void tiles_tree(const Par<T>& P, T* __restrict__ Vb, T* __restrict__ Xb, size_t stride,
                                           int t_hi, int t_lo, int K, int src, int out_cap, int warp_id, int nwarps,
                                           int units, double* __restrict__ price, double* __restrict__ lv,
                                           Sync sync, int* __restrict__ win = nullptr, double Ls = 0.0,
                                           int kinds = 0) {
    if constexpr (PRUNE) {
        tiles_tree_pruned<T, G, R, AM, FWD, LDCG, U, Sync>(P, Vb, Xb, stride, t_hi, t_lo, K, src, out_cap, warp_id,
                                                           nwarps, units, price, lv, sync, win, Ls, kinds);
        return;
    }
    const int CW = 32 * G * R;
    const int ROW = 32 * G;
    const int lane = threadIdx.x & 31;
    const int nslabs = (t_hi - t_lo + K - 1) / K;
    const int last = src ^ (nslabs & 1);  // buffer of level t_lo
    int t = t_hi;
    int cur = src;
    while (t > t_lo) {
        const bool fits = t + 1 <= CW;  // the whole level t in chunk 0
        const int kk = fits ? t - t_lo : min(K, t - t_lo);
        const int dst = fits ? last : cur ^ 1;
        const int out_last = min(t - kk, out_cap);
        int vw = CW - K;  // outputs per chunk
        if (fits) {
            vw = CW;
        } else if (units > 0) {
            const int nmax = out_last / vw + 1;
            const int slots = ((nmax + units - 1) / units) * units;
            const int vb = (out_last + slots) / slots;  // ceil((out_last + 1) / slots)
            vw = min(vw, ((vb + K + ROW - 1) / ROW) * ROW - K);
        }
        const int lim = fits ? CW : vw + K;  // positions p < lim of a chunk are loaded
        const int nchunks = out_last / vw + 1;
        const T* Vin = Vb + (size_t)cur * stride;
        const T* Xin = Xb + (size_t)cur * stride;
        T* Vout = Vb + (size_t)dst * stride;
        T* Xout = Xb + (size_t)dst * stride;
        for (int c = warp_id; c < nchunks; c += nwarps) {
            const int j0 = c * vw;
            T V[R][G], X[R][G];
            if (t == P.N) {
                leaves_chunk<T, G, R, FWD>(P, j0, lim, V, X, lv);
            } else {
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int k = 0; k < G; ++k) {
                        const int p = r * ROW + lane * G + k;
                        const int j = j0 + p;
                        if (p < lim && j <= t) {
                            V[r][k] = LDCG ? crr_ldcg<T>(Vin + j) : Vin[j];
                            X[r][k] = AM ? (LDCG ? crr_ldcg<T>(Xin + j) : Xin[j]) : (T)0;
                        } else {
                            V[r][k] = (T)0;
                            X[r][k] = (T)0;
                        }
                    }
            }
            run_levels<T, G, R, AM, FWD, U>(V, X, P, j0, t, t - kk, lim, lv);
            const int tn = t - kk;
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int k = 0; k < G; ++k) {
                    const int p = r * ROW + lane * G + k;
                    const int j = j0 + p;
                    if (p < vw && j <= out_last) {
                        Vout[j] = V[r][k];
                        if (AM) Xout[j] = X[r][k];
                    }
                }
            if (tn == 0 && j0 == 0 && lane == 0 && price != nullptr) *price = (double)V[0][0];
        }
        sync();
        cur = dst;
        t -= kk;
    }
}

struct BlockSync {
    __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

// Batch of wide trees: persistent blocks, one tree at a time per block, scratch slot per block
// (4 arrays of `stride` elements: V and X, double-buffered).
template <typename T, int G, int R, bool FWD>
__global__ void crr_batch_block(const double* __restrict__ par, const int* __restrict__ steps,
                                                       const int* __restrict__ flags, const int* __restrict__ order,
                                                       int ntrees, int* __restrict__ counter, int K,
                                                       T* __restrict__ scratch, size_t stride,
                                                       double* __restrict__ price, double* __restrict__ lv) {
    __shared__ int s_idx;
    T* Vb = scratch + (size_t)blockIdx.x * 4 * stride;
    T* Xb = Vb + 2 * stride;
    int idx = blockIdx.x;
    while (idx < ntrees) {
        const int i = order[idx];
        const int N = steps[i];
        const Par<T> P = load_par<T>(par + (size_t)i * CRR_NPAR, N);
        if (flags[i] & 1)
            tiles_tree<T, G, R, true, FWD, false, CRR_UNROLL>(P, Vb, Xb, stride, N, 0, K, 0, 1 << 30, threadIdx.x >> 5,
                                                  blockDim.x >> 5, 0, price + i, lv + (size_t)6 * i, BlockSync());
        else
            tiles_tree<T, G, R, false, FWD, false, CRR_UNROLL>(P, Vb, Xb, stride, N, 0, K, 0, 1 << 30, threadIdx.x >> 5,
                                                   blockDim.x >> 5, 0, price + i, lv + (size_t)6 * i, BlockSync());
        if (threadIdx.x == 0) s_idx = atomicAdd(counter, 1) + gridDim.x;
        __syncthreads();
        idx = s_idx;
        __syncthreads();
    }
}

// One tree, one block, levels t_hi -> t_lo (latency phase of the single-option pipeline; units
// as tiles_tree). With smem_stride > 0 the tree lives in shared memory (4 arrays of smem_stride elements,
// dynamic shared memory): level t_hi is copied in from buffer `src` of Vb/Xb (unless it is
// the leaves), and level t_lo, if > 0, is copied back to buffer src ^ (slabs & 1), as the
// global-memory path leaves it.
template <typename T, int G, int R, bool FWD>
__global__ void __launch_bounds__(1024) crr_pipe_block(const double* __restrict__ par, int N, int am, int t_hi,
                                                       int t_lo, int K, int src, int out_cap, int units,
                                                       T* __restrict__ Vb,
                                                       T* __restrict__ Xb, size_t stride, double* __restrict__ price,
                                                       double* __restrict__ lv, int smem_stride) {
    extern __shared__ __align__(16) unsigned char crr_smem[];
    const Par<T> P = load_par<T>(par, N);
    T* V = Vb;
    T* X = Xb;
    size_t st = stride;
    int s0 = src;
    if (smem_stride > 0) {
        V = reinterpret_cast<T*>(crr_smem);
        X = V + 2 * (size_t)smem_stride;
        st = (size_t)smem_stride;
        s0 = 0;
        if (t_hi < N) {
            for (int j = threadIdx.x; j <= t_hi; j += blockDim.x) {
                V[j] = Vb[(size_t)src * stride + j];
                X[j] = Xb[(size_t)src * stride + j];
            }
            __syncthreads();
        }
    }
    if (am)
        tiles_tree<T, G, R, true, FWD, false, CRR_PIPE_U(R)>(P, V, X, st, t_hi, t_lo, K, s0, out_cap, threadIdx.x >> 5,
                                              blockDim.x >> 5, units, price, lv, BlockSync());
    else
        tiles_tree<T, G, R, false, FWD, false, CRR_PIPE_U(R)>(P, V, X, st, t_hi, t_lo, K, s0, out_cap, threadIdx.x >> 5,
                                               blockDim.x >> 5, units, price, lv, BlockSync());
    if (smem_stride > 0 && t_lo > 0) {
        const int nslabs = (t_hi - t_lo + K - 1) / K;
        const int b = nslabs & 1;
        const int dst = src ^ b;
        for (int j = threadIdx.x; j <= t_lo; j += blockDim.x) {
            Vb[(size_t)dst * stride + j] = V[(size_t)b * smem_stride + j];
            Xb[(size_t)dst * stride + j] = X[(size_t)b * smem_stride + j];
        }
    }
}

// ------------------------------------------------------------------ the tree in registers: one block, or a cluster
//
// One tree, the whole tree in registers all the way, in one block of nw warps (crr_pipe_reg) or
// in a thread-block cluster of C blocks of W warps each, nw = C W (crr_pipe_cluster; sm_90). Warp
// g (g = rank W + w in a cluster) holds the chunk of CW = 32 G R nodes at j0 = g (CW - K) (the
// layout of the warp kernels) and runs K levels per slab with one shuffle per row and level
// (run_levels); its top K positions are a halo that goes stale one node per level. After a
// slab, every warp stores its first K nodes into the halo slot of the warp on its left (slot
// indexed by the consumer, 2 buffers by slab parity, in the consumer's block's shared memory:
// across blocks of a cluster through distributed shared memory, a plain store to the address
// that mapa gives), then one barrier (__syncthreads, or the cluster barrier: barrier.cluster
// arrive.release + wait.acquire) and every warp reloads its halo from its own block's shared
// memory; nothing else leaves the registers. The slot of the last warp (beyond the tree) stays
// zero. Once the whole remaining level fits one chunk (t + 1 <= CW), warp 0 finishes it alone,
// without barriers. Against crr_pipe_block / crr_pipe_grid: no chunk loads and stores per slab
// and no grid barriers; idea as the register tiles of the cooperative kernels with the chunk
// kept between slabs (temporal blocking, halo exchange instead of reload). The cluster spreads
// the widest levels over C multiprocessors (FP64 rate x C, at most ~1 warp per SM
// sub-partition) for a barrier of a few hundred ns; the start-up barrier that the CUDA
// Programming Guide asks for before any distributed-shared-memory access (every block of the
// cluster running) is split: arrive before the first slab, wait after it. Source: CUDA C++
// Programming Guide, "Thread Block Clusters" and "Distributed Shared Memory" (sm_90). Needs
// K < CW and N / (CW - K) + 1 <= nw warps; dynamic shared memory 4 W K sizeof(T). With
// 2 K > CW a warp's halo spans the first nodes of the next I = ceil(K / (CW - K)) warps, and
// each warp writes into the slots of the I warps on its left (fewer slabs, so fewer barriers,
// for more halo recomputed: H200, N = 1000, K = 96 / 112: 50.9 / 54.0 us against 49.5 with
// K = 64, so the pipeline keeps K = 64; the benchmark sweeps K = 96).
#ifndef CRR_NO_CLUSTER
__device__ __forceinline__ int cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return (int)r;
}
__device__ __forceinline__ int cluster_size() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return (int)r;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// generic address of the same shared-memory location in block `rank` of the cluster
template <typename T> __device__ __forceinline__ T* cluster_map(T* p, int rank) {
    unsigned long long out;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(out) : "l"(reinterpret_cast<unsigned long long>(p)), "r"(rank));
    return reinterpret_cast<T*>(out);
}
#endif

template <typename T, int G, int R, bool AM, bool FWD, bool CL>
__device__ __forceinline__ void reg_tree(const Par<T>& P, int K, double* __restrict__ price, double* __restrict__ lv,
                                         T* __restrict__ sh) {
    const int CW = 32 * G * R;
    const int ROW = 32 * G;
    const int vw = CW - K;
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    const int W = blockDim.x >> 5;
    int rank = 0, C = 1;
#ifndef CRR_NO_CLUSTER
    if (CL) {
        rank = cluster_rank();
        C = cluster_size();
    }
#endif
    const int gw = rank * W + w;
    const int nw = C * W;
    const int j0 = gw * vw;
    T V[R][G], X[R][G];
    const T gN = level_scale<T, FWD>(P, P.N);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        T x[G];
        exercise_row<T, FWD, G>(P, j0 + r * ROW + lane * G, P.N, gN, x);
#pragma unroll
        for (int k = 0; k < G; ++k) {
            const bool in = j0 + r * ROW + lane * G + k <= P.N;
            X[r][k] = in ? x[k] : (T)0;
            V[r][k] = in ? crr_max<T>(x[k], (T)0) : (T)0;
        }
    }
    if (gw == 0) record_level<T, G, R>(V, 0, P.N, lv);
    // halo slots: [parity][consumer warp w < W][K] for V, then the same for X
    const int slab = W * K;
    T* shV = sh;
    T* shX = sh + 2 * slab;
    // the halo of warp g comes from warps g + 1 .. g + I (I = 1 if 2 K <= CW): warp g + i
    // writes its first min(vw, K - (i - 1) vw) nodes at offset (i - 1) vw of g's slot
    const int I = (K + vw - 1) / vw;
    if (gw + I >= nw)  // a slot that warps beyond the tree would write: zero (both parities)
        for (int i = lane; i < 2 * K; i += 32) {
            const int o = (i / K) * slab + w * K + i % K;
            shV[o] = (T)0;
            shX[o] = (T)0;
        }
#ifndef CRR_NO_CLUSTER
    if (CL) cluster_arrive();  // start-up barrier, waited on after the first slab's levels
#endif
    bool started = !CL;
    int t = P.N;
    int s = 0;
    while (t + 1 > CW) {  // t >= CW > K: full slabs
        if (j0 <= t) {
            if (AM && !FWD && t - K > 2) {  // exercise values by shifting (run_levels_shift)
                T XQ[R][G];
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int k = 0; k < G; ++k) XQ[r][k] = crr_fma<T>(X[r][k], P.xm, P.c);
                run_levels_shift<T, G, R, CRR_PIPE_U(R)>(V, X, XQ, P, j0, t, t - K, CW);
            } else {
                run_levels<T, G, R, AM, FWD, CRR_PIPE_U(R)>(V, X, P, j0, t, t - K, CW, lv);
            }
        }
#ifndef CRR_NO_CLUSTER
        if (!started) {
            cluster_wait();
            started = true;
        }
#endif
        const int par = (s & 1) * slab;
        for (int i = 1; i <= I && gw - i >= 0; ++i) {
            const int c = gw - i;  // consumer warp
            const int off = (i - 1) * vw;
            T* dV = shV + par + (c % W) * K + off;
            T* dX = shX + par + (c % W) * K + off;
#ifndef CRR_NO_CLUSTER
            if (CL && c / W != rank) {
                dV = cluster_map(dV, c / W);
                dX = cluster_map(dX, c / W);
            }
#endif
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int k = 0; k < G; ++k) {
                    const int p = r * ROW + lane * G + k;
                    if (p < vw && off + p < K) {
                        dV[p] = V[r][k];
                        if (AM) dX[p] = X[r][k];
                    }
                }
        }
#ifndef CRR_NO_CLUSTER
        if (CL) {
            cluster_arrive();
            cluster_wait();
        } else
#endif
            __syncthreads();
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int k = 0; k < G; ++k) {
                const int p = r * ROW + lane * G + k;
                if (p >= vw) {
                    V[r][k] = shV[par + w * K + p - vw];
                    if (AM) X[r][k] = shX[par + w * K + p - vw];
                }
            }
        t -= K;
        ++s;
    }
#ifndef CRR_NO_CLUSTER
    if (!started) cluster_wait();
#endif
    if (gw == 0) {
        if (t > 0) run_levels<T, G, R, AM, FWD, CRR_PIPE_U(R)>(V, X, P, 0, t, 0, CW, lv);
        if (lane == 0 && price != nullptr) *price = (double)V[0][0];
    }
}

// The register kernels' common entry: the tree's parameters, the American / European switch.
template <typename T, int G, int R, bool FWD, bool CL>
__device__ __forceinline__ void reg_tree_entry(const double* __restrict__ par, int N, int am, int K,
                                               double* __restrict__ price, double* __restrict__ lv) {
    extern __shared__ __align__(16) unsigned char crr_smem[];
    const Par<T> P = load_par<T>(par, N);
    T* sh = reinterpret_cast<T*>(crr_smem);
    if (am)
        reg_tree<T, G, R, true, FWD, CL>(P, K, price, lv, sh);
    else
        reg_tree<T, G, R, false, FWD, CL>(P, K, price, lv, sh);
}

template <typename T, int G, int R, bool FWD>
__global__ void __launch_bounds__(1024) crr_pipe_reg(const double* __restrict__ par, int N, int am, int K,
                                                     double* __restrict__ price, double* __restrict__ lv) {
    reg_tree_entry<T, G, R, FWD, false>(par, N, am, K, price, lv);
}

#ifndef CRR_NO_CLUSTER
// One tree in one cluster of C blocks (grid = C blocks; C <= 8 portable, 16 with the
// non-portable cluster size allowed on the function).
template <typename T, int G, int R, bool FWD, int C>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(1024)
    crr_pipe_cluster(const double* __restrict__ par, int N, int am, int K, double* __restrict__ price,
                     double* __restrict__ lv) {
    reg_tree_entry<T, G, R, FWD, true>(par, N, am, K, price, lv);
}
#endif

#ifdef CRR_COOP
struct GridSync {
    __device__ __forceinline__ void operator()() const { cooperative_groups::this_grid().sync(); }
};

// One tree over the whole GPU, levels t_hi -> t_lo, one grid barrier per slab (units as
// tiles_tree). Launch cooperatively with no more blocks than can be resident.
template <typename T, int G, int R, bool FWD, bool PRUNE>
__global__ void crr_pipe_grid(const double* __restrict__ par, int N, int am, int t_hi,
                                                      int t_lo, int K, int src, int out_cap, int units,
                                                      T* __restrict__ Vb,
                                                      T* __restrict__ Xb, size_t stride, double* __restrict__ price,
                                                      double* __restrict__ lv, int* __restrict__ win, double Ls,
                                                      int kinds) {
    const Par<T> P = load_par<T>(par, N);
    const int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int nw = (gridDim.x * blockDim.x) >> 5;
    if (am)
        tiles_tree<T, G, R, true, FWD, true, CRR_PIPE_U(R), GridSync, PRUNE>(P, Vb, Xb, stride, t_hi, t_lo, K, src, out_cap, w, nw, units, price,
                                             lv, GridSync(), win, Ls, kinds);
    else
        tiles_tree<T, G, R, false, FWD, true, CRR_PIPE_U(R), GridSync, PRUNE>(P, Vb, Xb, stride, t_hi, t_lo, K, src, out_cap, w, nw, units, price,
                                              lv, GridSync(), win, Ls, kinds);
}
#endif

// ------------------------------------------------------------------ naive baseline

// Leaves of `ntrees` trees of equal N (tree y in row y of V, row stride N + 2).
__global__ void crr_naive_leaves(const double* __restrict__ par, int N, double* __restrict__ V) {
    const int y = blockIdx.y;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j > N) return;
    const Par<double> P = load_par<double>(par + (size_t)y * CRR_NPAR, N);
    V[(size_t)y * (N + 2) + j] = fmax(exercise<double, false>(P, j, N, 1.0), 0.0);
}

// One level t of `ntrees` equal-N trees: Vout[j] = max(pu Vin[j+1] + pd Vin[j], exercise(j, t)),
// the exercise value from exp at every node (no recurrence). One launch per level.
__global__ void crr_naive_step(const double* __restrict__ par, int N, int am, int t, const double* __restrict__ Vin,
                               double* __restrict__ Vout) {
    const int y = blockIdx.y;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j > t) return;
    const Par<double> P = load_par<double>(par + (size_t)y * CRR_NPAR, N);
    const size_t o = (size_t)y * (N + 2);
    const double cont = fma(P.wd, Vin[o + j], P.wu * Vin[o + j + 1]);
    Vout[o + j] = am ? fmax(cont, exercise<double, false>(P, j, t, 1.0)) : cont;
}
