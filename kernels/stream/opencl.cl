/* STREAM (BabelStream's copy, mul, add, triad, dot) in OpenCL C; see opencl.py.
 *
 *   OP       0 copy c=a, 1 mul b=s*c, 2 add c=a+b, 3 triad a=b+s*c, 4 dot sum(a*b)
 *   VW       elements per vector load and store (2, 4, 8 or 16)
 *   BLOCKED  1: each work-item takes `per` consecutive vectors (CPU devices);
 *            0: consecutive work-items take consecutive vectors, striding by the grid (GPUs)
 *   WG       work-items of the one work-group of a dot
 */
#if defined(DTYPE_FP64)
#define TN double
#else
#define TN float
#endif
#define VT CAT(TN, VW)
#define VLOAD CAT(vload, VW)
#define VSTORE CAT(vstore, VW)
#define SCALAR ((T)0.375)

#if OP == 0
#define IN_ARGS __global const T* restrict x
#define F(x, y) (x)
#elif OP == 1
#define IN_ARGS __global const T* restrict x
#define F(x, y) (SCALAR * (x))
#elif OP == 2
#define IN_ARGS __global const T* restrict x, __global const T* restrict y
#define F(x, y) ((x) + (y))
#else
#define IN_ARGS __global const T* restrict x, __global const T* restrict y
#define F(x, y) ((x) + SCALAR * (y))
#endif

#if OP != 4
/* x, y: the arrays read, in BabelStream's order (add: a, b; triad: b, c) */
__kernel void stream(IN_ARGS, __global T* restrict out, long n, long per) {
    long vectors = n / VW;
    long gid = get_global_id(0);
#if BLOCKED
    long start = gid * per, stop = min(start + per, vectors), step = 1;
#else
    long start = gid, stop = vectors, step = get_global_size(0);
#endif
    for (long v = start; v < stop; v += step) {
#if OP < 2
        VSTORE(F(VLOAD(v, x), 0), v, out);
#else
        VSTORE(F(VLOAD(v, x), VLOAD(v, y)), v, out);
#endif
    }
    if (gid == 0) {
        for (long i = vectors * VW; i < n; ++i) {
#if OP < 2
            out[i] = F(x[i], 0);
#else
            out[i] = F(x[i], y[i]);
#endif
        }
    }
}
#else
/* dot: one work-group of WG work-items, each summing a stride of vectors, then halving in local memory */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void stream(__global const T* restrict a, __global const T* restrict b, __global T* restrict out, long n, long per) {
    __local T sums[WG];
    long lid = get_local_id(0);
    long vectors = n / VW;
    VT acc = (VT)(0);
    for (long v = lid; v < vectors; v += WG) {
        acc += VLOAD(v, a) * VLOAD(v, b);
    }
    T mine = 0;
    T lanes[VW];
    VSTORE(acc, 0, lanes);
    for (int k = 0; k < VW; ++k) {
        mine += lanes[k];
    }
    for (long i = vectors * VW + lid; i < n; i += WG) {
        mine += a[i] * b[i];
    }
    sums[lid] = mine;
    for (int h = WG / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < h) {
            sums[lid] += sums[lid + h];
        }
    }
    if (lid == 0) {
        out[0] = sums[0];
    }
}
#endif
