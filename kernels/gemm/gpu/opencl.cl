/* GEMM C = A @ B in OpenCL C (row-major; A is M x K, B is K x N).
 *
 * Each work-item owns a TM x (TNV * VW) tile of C held in registers: per k it loads TNV
 * vectors of a row of B, broadcasts TM elements of a column of A and issues TM * TNV
 * vector FMAs. Interior tiles use unchecked vector loads; tiles on the right or bottom
 * edge read clamped (in-bounds) indices and store only valid elements, so any M, N, K
 * works. Work-items along dimension 0 walk down M and share one panel of B in cache.
 *
 * Build options (chosen per device by the backend):
 *   -DDTYPE_FP32 | -DDTYPE_FP64 | -DDTYPE_FP16   element type (fp16: half storage, float math)
 *   -DVW=  vector lanes (1, 2, 4, 8, 16)   -DTM=  rows per tile   -DTNV=  vectors per tile row
 *   -DWG0= work-group size along dimension 0 (reqd_work_group_size)
 */
/* T, ACC, LD, ST and CAT come from kernels/opencl_dtypes.cl, prepended by the backend. */
#if VW == 1
typedef ACC ACCV;
#define LDV(p, i) LD(p, i)
#define STV(x, p, i) ST(x, p, i)
#else
typedef CAT(ACC, VW) ACCV;
#if defined(DTYPE_FP16)
#define LDV(p, i) CAT(vload_half, VW)(0, (p) + (i))
#define STV(x, p, i) CAT(vstore_half, VW)((x), 0, (p) + (i))
#else
#define LDV(p, i) CAT(vload, VW)(0, (p) + (i))
#define STV(x, p, i) CAT(vstore, VW)((x), 0, (p) + (i))
#endif
#endif
#define TN (TNV * VW)

/* One row of B from column j: a whole vector, or lane by lane with clamped columns. */
inline ACCV load_b(__global const T *row, const int j, const int N, const int edge)
{
    if (!edge)
        return LDV(row, j);
    ACC lanes[VW];
    for (int l = 0; l < VW; ++l)
        lanes[l] = LD(row, min(j + l, N - 1));
#if VW == 1
    return lanes[0];
#else
    return CAT(vload, VW)(0, lanes);
#endif
}

inline void store_c(__global T *C, const ACCV x, const int i, const int j, const int M, const int N,
                    const int edge)
{
    if (!edge) {
        STV(x, C, (size_t)i * N + j);
        return;
    }
    if (i >= M)
        return;
    ACC lanes[VW];
#if VW == 1
    lanes[0] = x;
#else
    CAT(vstore, VW)(x, 0, lanes);
#endif
    for (int l = 0; l < VW && j + l < N; ++l)
        ST(lanes[l], C, (size_t)i * N + j + l);
}

inline void tile(__global const T *restrict A, __global const T *restrict B, __global T *restrict C,
                 const int M, const int N, const int K, const int i0, const int j0, const int edge)
{
    ACCV acc[TM][TNV];
    __global const T *arow[TM];
#pragma unroll
    for (int r = 0; r < TM; ++r) {
        arow[r] = A + (size_t)(edge ? min(i0 + r, M - 1) : i0 + r) * K;
#pragma unroll
        for (int v = 0; v < TNV; ++v)
            acc[r][v] = (ACCV)(0);
    }
    for (int k = 0; k < K; ++k) {
        __global const T *brow = B + (size_t)k * N;
        ACCV bv[TNV];
#pragma unroll
        for (int v = 0; v < TNV; ++v)
            bv[v] = load_b(brow, j0 + v * VW, N, edge);
#pragma unroll
        for (int r = 0; r < TM; ++r) {
            const ACCV a = (ACCV)(LD(arow[r], k));
#pragma unroll
            for (int v = 0; v < TNV; ++v)
                acc[r][v] = fma(a, bv[v], acc[r][v]);
        }
    }
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int v = 0; v < TNV; ++v)
            store_c(C, acc[r][v], i0 + r, j0 + v * VW, M, N, edge);
}

__kernel __attribute__((reqd_work_group_size(WG0, 1, 1)))
void gemm(__global const T *restrict A, __global const T *restrict B, __global T *restrict C,
          const int M, const int N, const int K)
{
    const int i0 = (int)get_global_id(0) * TM;
    const int j0 = (int)get_global_id(1) * TN;
    if (i0 >= M || j0 >= N)
        return;
    if (i0 + TM <= M && j0 + TN <= N)
        tile(A, B, C, M, N, K, i0, j0, 0);
    else
        tile(A, B, C, M, N, K, i0, j0, 1);
}
