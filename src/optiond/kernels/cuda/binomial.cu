// CRR binomial trees on NVIDIA GPUs (compiled at run time with NVRTC through CuPy's RawModule).
//
// The recurrence is the CPU reference's (optiond.kernels.binomial_cpu.crr_tree), node for node:
//
//   leaves   x_j = sign * (S exp((2j - N) a) - K),  V_j = max(x_j, 0),  X_j = x_j
//   level t  V[j] <- max(pu V[j+1] + pd V[j], X[j]),  X[j] <- X[j] u + c   (c = sign K (u - 1))
//            and X re-anchored from exp when (N - t) % 64 == 0 (American exercise only; FP32
//            trees with a large step a = sigma sqrt(dt) re-anchor every 2 / a levels instead,
//            since the recurrence multiplies rounding errors by u per level)
//
// with the per-tree scalars (a, u, pu, pd, c, sign) computed on the host bit for bit as the CPU
// reference computes them, and the node arithmetic written with the same fused multiply-adds
// as the reference's compiled loop (cont = fma(pd, V[j], pu V[j+1]), X = fma(X, u, c),
// x = sign fma(S, e, -K)). FP64 results then differ from the CPU's only where the GPU's exp
// and the CPU's libm exp round a leaf or re-anchored node differently (an ulp at that node;
// backward induction is a convex average, so such differences do not grow).
//
// FP32 ("FWD" scheme): values are carried discounted to time 0, W_t = V_t e^{-r t dt}, so the
// update is W[j] <- max(p W[j+1] + (1 - p) W[j], X'[j]) with p + (1 - p) == 1 exactly in
// float, X'[j] <- X'[j] (u e^{r dt}) + c e^{-r t dt}; this removes the systematic drift of
// float discount factors over N levels. W_0 = V_0.
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
//                     __syncthreads per slab.
//   crr_pipe_block    the same for one tree and one block over a level range (latency phase).
//   crr_pipe_grid     the same over the whole GPU with one cooperative grid barrier per slab
//                     (throughput phase; only in the module built with -DCRR_COOP).
//   crr_naive_*       one launch per level, one thread per node, global memory (baseline).
//
// Sources: Cox, Ross & Rubinstein (1979); V. Podlozhnyuk, "Binomial option pricing model",
// NVIDIA CUDA SDK (2007) (tiles of CACHE_DELTA levels with recomputed aprons); the hybrid
// pipeline and warp-per-block kernels of the binomial_hybrid_cpu_gpu_mpi seed, section 5.

#ifdef CRR_COOP
#include <cooperative_groups.h>
#endif

#define CRR_NPAR 12
#define CRR_FULL 0xffffffffu

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
#define P_ANCHOR 10 // re-anchoring period in levels: 64 (FP64, as the CPU) or less (FP32, large a)

template <typename T> struct Par {
    T S, K, a, xm, wu, wd, c, sign, argmax;
    double rdt;
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
    return P;
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
#pragma unroll
    for (int k = 0; k < G; ++k) {
        const T right = (k < G - 1) ? V[r][(k < G - 1) ? k + 1 : k] : nb;
        const T cont = crr_fma<T>(P.wd, V[r][k], P.wu * right);
        if (AM) {
            T x;
            if (ANCHOR)
                x = exercise<T, FWD>(P, jrow + k, t, g);
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
// live: straight-line code over the rows, so the RA*G independent nodes interleave.
template <typename T, int G, int R, int RA, bool AM, bool FWD>
__device__ __forceinline__ void levels_fixed(T (&V)[R][G], T (&X)[R][G], const Par<T>& P, int t, int n) {
#pragma unroll 2
    for (int i = 0; i < n; ++i, --t) {
        const T g = level_scale<T, FWD>(P, t - 1);
        const T ct = FWD ? P.c * g : P.c;
        T nb[R];
        neighbours<T, G, R, RA>(V, nb);
#pragma unroll
        for (int r = 0; r < RA; ++r) update_row<T, G, R, AM, false, FWD>(V, X, P, r, nb[r], 0, t - 1, g, ct);
    }
}

// levels_fixed<RA = ra>: a switch made of templates (RA = 1 .. R).
template <typename T, int G, int R, int RA, bool AM, bool FWD>
__device__ __forceinline__ void levels_dispatch(T (&V)[R][G], T (&X)[R][G], const Par<T>& P, int t, int n, int ra) {
    if constexpr (RA >= 1) {
        if (ra == RA)
            levels_fixed<T, G, R, RA, AM, FWD>(V, X, P, t, n);
        else
            levels_dispatch<T, G, R, RA - 1, AM, FWD>(V, X, P, t, n, ra);
    }
}

// Levels t_from - 1 down to t_to of the chunk starting at node j0, whose inputs (level t_from)
// are valid at local positions p < lim. Writes levels 2, 1, 0 to lv (if j0 == 0).
//
// At level t the live local positions are 0 .. pmax = min(t - j0, lim - 2 - k) (k levels done);
// rows above pmax / (32 G) are skipped. Runs of levels with the same live row count and no
// re-anchoring go through levels_fixed; re-anchoring levels and t <= 2 through level_generic.
template <typename T, int G, int R, bool AM, bool FWD>
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
        levels_dispatch<T, G, R, R, AM, FWD>(V, X, P, t + 1, n, ra);
        t -= n;
    }
}

// ------------------------------------------------------------------ warp per tree (batches)

template <typename T, int G, int R, bool FWD>
__device__ __forceinline__ void warp_tree(const double* __restrict__ par, int N, bool am, double* __restrict__ price,
                                          double* __restrict__ lv) {
    const Par<T> P = load_par<T>(par, N);
    const int lane = threadIdx.x & 31;
    T V[R][G], X[R][G];
    const T gN = level_scale<T, FWD>(P, N);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int k = 0; k < G; ++k) {
            const int j = r * 32 * G + lane * G + k;
            if (j <= N) {
                const T x = exercise<T, FWD>(P, j, N, gN);
                X[r][k] = x;
                V[r][k] = crr_max<T>(x, (T)0);
            } else {
                X[r][k] = (T)0;
                V[r][k] = (T)0;
            }
        }
    record_level<T, G, R>(V, 0, N, lv);  // N <= 2: the leaves are one of the first levels
    if (am)
        run_levels<T, G, R, true, FWD>(V, X, P, 0, N, 0, 1 << 30, lv);
    else
        run_levels<T, G, R, false, FWD>(V, X, P, 0, N, 0, 1 << 30, lv);
    if (lane == 0) *price = (double)V[0][0];
}

// Persistent warps; tree order[idx] for idx = warp id, then from the atomic counter (which the
// host zeroes before the launch). Trees must satisfy N + 1 <= 32 G R.
template <typename T, int G, int R, bool FWD>
__global__ void crr_batch_warp(const double* __restrict__ par, const int* __restrict__ steps,
                                                      const int* __restrict__ flags, const int* __restrict__ order,
                                                      int ntrees, int* __restrict__ counter, double* __restrict__ price,
                                                      double* __restrict__ lv) {
    const int lane = threadIdx.x & 31;
    const int nw = (gridDim.x * blockDim.x) >> 5;
    int idx = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    while (idx < ntrees) {
        const int i = order[idx];
        warp_tree<T, G, R, FWD>(par + (size_t)i * CRR_NPAR, steps[i], (flags[i] & 1) != 0, price + i, lv + (size_t)6 * i);
        int nxt = 0;
        if (lane == 0) nxt = atomicAdd(counter, 1) + nw;
        idx = __shfl_sync(CRR_FULL, nxt, 0);
    }
}

// ------------------------------------------------------------------ tiles: chunks x slabs

// Backward induction of one tree from level t_hi (in buffers [src]; or the leaves if
// t_hi == N) down to level t_lo (left in buffers [src ^ (number of slabs & 1)]), K levels per
// slab, chunks distributed over warps [warp_id, nwarps); SYNC() between slabs.
// Vb/Xb hold two buffers of `stride` elements each. Only output nodes <= out_cap are produced.
template <typename T, int G, int R, bool AM, bool FWD, bool LDCG, typename Sync>
__device__ __forceinline__ void tiles_tree(const Par<T>& P, T* __restrict__ Vb, T* __restrict__ Xb, size_t stride,
                                           int t_hi, int t_lo, int K, int src, int out_cap, int warp_id, int nwarps,
                                           double* __restrict__ price, double* __restrict__ lv, Sync sync) {
    const int CW = 32 * G * R;
    const int VW = CW - K;
    const int lane = threadIdx.x & 31;
    int t = t_hi;
    while (t > t_lo) {
        const int kk = min(K, t - t_lo);
        const int out_last = min(t - kk, out_cap);
        const int nchunks = out_last / VW + 1;
        const T* Vin = Vb + (size_t)src * stride;
        const T* Xin = Xb + (size_t)src * stride;
        T* Vout = Vb + (size_t)(src ^ 1) * stride;
        T* Xout = Xb + (size_t)(src ^ 1) * stride;
        for (int c = warp_id; c < nchunks; c += nwarps) {
            const int j0 = c * VW;
            T V[R][G], X[R][G];
            if (t == P.N) {
                const T gN = level_scale<T, FWD>(P, t);
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int k = 0; k < G; ++k) {
                        const int j = j0 + r * 32 * G + lane * G + k;
                        if (j <= t) {
                            const T x = exercise<T, FWD>(P, j, t, gN);
                            X[r][k] = x;
                            V[r][k] = crr_max<T>(x, (T)0);
                        } else {
                            X[r][k] = (T)0;
                            V[r][k] = (T)0;
                        }
                    }
                record_level<T, G, R>(V, j0, t, lv);
            } else {
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int k = 0; k < G; ++k) {
                        const int j = j0 + r * 32 * G + lane * G + k;
                        if (j <= t) {
                            V[r][k] = LDCG ? crr_ldcg<T>(Vin + j) : Vin[j];
                            X[r][k] = AM ? (LDCG ? crr_ldcg<T>(Xin + j) : Xin[j]) : (T)0;
                        } else {
                            V[r][k] = (T)0;
                            X[r][k] = (T)0;
                        }
                    }
            }
            run_levels<T, G, R, AM, FWD>(V, X, P, j0, t, t - kk, CW, lv);
            const int tn = t - kk;
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int k = 0; k < G; ++k) {
                    const int p = r * 32 * G + lane * G + k;
                    const int j = j0 + p;
                    if (p < VW && j <= out_last) {
                        Vout[j] = V[r][k];
                        if (AM) Xout[j] = X[r][k];
                    }
                }
            if (tn == 0 && j0 == 0 && lane == 0 && price != nullptr) *price = (double)V[0][0];
        }
        sync();
        src ^= 1;
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
            tiles_tree<T, G, R, true, FWD, false>(P, Vb, Xb, stride, N, 0, K, 0, 1 << 30, threadIdx.x >> 5,
                                                  blockDim.x >> 5, price + i, lv + (size_t)6 * i, BlockSync());
        else
            tiles_tree<T, G, R, false, FWD, false>(P, Vb, Xb, stride, N, 0, K, 0, 1 << 30, threadIdx.x >> 5,
                                                   blockDim.x >> 5, price + i, lv + (size_t)6 * i, BlockSync());
        if (threadIdx.x == 0) s_idx = atomicAdd(counter, 1) + gridDim.x;
        __syncthreads();
        idx = s_idx;
        __syncthreads();
    }
}

// One tree, one block, levels t_hi -> t_lo (latency phase of the single-option pipeline).
// With smem_stride > 0 the tree lives in shared memory (4 arrays of smem_stride elements,
// dynamic shared memory): level t_hi is copied in from buffer `src` of Vb/Xb (unless it is
// the leaves), and level t_lo, if > 0, is copied back to buffer src ^ (slabs & 1), as the
// global-memory path leaves it.
template <typename T, int G, int R, bool FWD>
__global__ void __launch_bounds__(512) crr_pipe_block(const double* __restrict__ par, int N, int am, int t_hi,
                                                       int t_lo, int K, int src, int out_cap, T* __restrict__ Vb,
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
        tiles_tree<T, G, R, true, FWD, false>(P, V, X, st, t_hi, t_lo, K, s0, out_cap, threadIdx.x >> 5,
                                              blockDim.x >> 5, price, lv, BlockSync());
    else
        tiles_tree<T, G, R, false, FWD, false>(P, V, X, st, t_hi, t_lo, K, s0, out_cap, threadIdx.x >> 5,
                                               blockDim.x >> 5, price, lv, BlockSync());
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

#ifdef CRR_COOP
struct GridSync {
    __device__ __forceinline__ void operator()() const { cooperative_groups::this_grid().sync(); }
};

// One tree over the whole GPU, levels t_hi -> t_lo, one grid barrier per slab. Launch
// cooperatively with no more blocks than can be resident.
template <typename T, int G, int R, bool FWD>
__global__ void crr_pipe_grid(const double* __restrict__ par, int N, int am, int t_hi,
                                                      int t_lo, int K, int src, int out_cap, T* __restrict__ Vb,
                                                      T* __restrict__ Xb, size_t stride, double* __restrict__ price,
                                                      double* __restrict__ lv) {
    const Par<T> P = load_par<T>(par, N);
    const int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int nw = (gridDim.x * blockDim.x) >> 5;
    if (am)
        tiles_tree<T, G, R, true, FWD, true>(P, Vb, Xb, stride, t_hi, t_lo, K, src, out_cap, w, nw, price, lv,
                                             GridSync());
    else
        tiles_tree<T, G, R, false, FWD, true>(P, Vb, Xb, stride, t_hi, t_lo, K, src, out_cap, w, nw, price, lv,
                                              GridSync());
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
