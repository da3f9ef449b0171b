/* Attention forward O = softmax(Q K^T / sqrt(D)) V in OpenCL C (flash style, online softmax).
 *
 * q, k, v, o are (batch*heads, S, D) row-major. Each work-item owns BQ = QV * VW query
 * rows of one (batch, head), with the vector lanes running over those rows, so that
 *   S^T[j] = sum_d K[j, d] * Qt[d]   is broadcast-FMA against a transposed Q tile,
 *   the running max / sum of the online softmax are element-wise (no reductions),
 *   Ot[d] = Ot[d] * alpha + sum_j V[j, d] * P^T[j]   is broadcast-FMA again.
 * Q is pre-scaled by log2(e) / sqrt(D) so the softmax uses exp2. Keys are taken BK at a
 * time; blocks past the causal diagonal are skipped; keys past Sk (clamped, in-bounds
 * reads) or above the diagonal get -inf; query rows past Sq are computed on a clamped
 * row and never stored.
 *
 * Build options (chosen per device by the backend):
 *   -DDTYPE_FP32 | -DDTYPE_FP64 | -DDTYPE_FP16   (fp16: half storage, float math)
 *   -DHD= head_dim   -DVW= lanes   -DQV= vectors of query rows   -DBK= keys per block
 *   -DWG0= work-group size along dimension 0 (reqd_work_group_size)
 */
/* T, ACC, LD, ST and CAT come from kernels/opencl_dtypes.cl, prepended by the backend. */
#if VW == 1
typedef ACC ACCV;
#define VLD(p) (*(p))
#define VST(x, p) (*(p) = (x))
#else
typedef CAT(ACC, VW) ACCV;
#define VLD(p) CAT(vload, VW)(0, (p))
#define VST(x, p) CAT(vstore, VW)((x), 0, (p))
#endif
#define BQ (QV * VW)

/* Scores of keys j0 + j outside [0, Sk) or above the diagonal become -inf. */
inline void mask_block(ACCV s[BK][QV], const int j0, const int i0, const int Sk, const int causal)
{
    for (int j = 0; j < BK; ++j)
        for (int v = 0; v < QV; ++v) {
            ACC lanes[VW];
            VST(s[j][v], lanes);
            for (int l = 0; l < VW; ++l) {
                const int key = j0 + j, row = i0 + v * VW + l;
                if (key >= Sk || (causal && key > row))
                    lanes[l] = -INFINITY;
            }
            s[j][v] = VLD(lanes);
        }
}

__kernel __attribute__((reqd_work_group_size(WG0, 1, 1)))
void attention(__global const T *restrict Q, __global const T *restrict Kmat, __global const T *restrict V,
               __global T *restrict O, const int Sq, const int Sk, const int causal, const ACC scale)
{
    const int i0 = (int)get_global_id(0) * BQ;
    const size_t bh = get_global_id(1);
    if (i0 >= Sq || Sk <= 0)
        return;
    __global const T *q = Q + bh * (size_t)Sq * HD;
    __global const T *kb = Kmat + bh * (size_t)Sk * HD;
    __global const T *vb = V + bh * (size_t)Sk * HD;
    ACC qt[HD * BQ];
    ACC ot[HD * BQ];
    for (int i = 0; i < BQ; ++i) {
        const size_t row = (size_t)min(i0 + i, Sq - 1) * HD;
        for (int d = 0; d < HD; ++d) {
            qt[d * BQ + i] = LD(q, row + d) * scale;
            ot[d * BQ + i] = 0;
        }
    }
    ACCV m[QV], l[QV];
    for (int v = 0; v < QV; ++v) {
        m[v] = (ACCV)(-INFINITY);
        l[v] = (ACCV)(0);
    }
    const int kend = causal ? min(Sk, i0 + BQ) : Sk;
    for (int j0 = 0; j0 < kend; j0 += BK) {
        size_t rows[BK];
        ACCV s[BK][QV];
#pragma unroll
        for (int j = 0; j < BK; ++j) {
            rows[j] = (size_t)min(j0 + j, Sk - 1) * HD;
#pragma unroll
            for (int v = 0; v < QV; ++v)
                s[j][v] = (ACCV)(0);
        }
        for (int d = 0; d < HD; ++d) {
            ACCV qv[QV];
#pragma unroll
            for (int v = 0; v < QV; ++v)
                qv[v] = VLD(qt + d * BQ + v * VW);
#pragma unroll
            for (int j = 0; j < BK; ++j) {
                const ACCV kj = (ACCV)(LD(kb, rows[j] + d));
#pragma unroll
                for (int v = 0; v < QV; ++v)
                    s[j][v] = fma(kj, qv[v], s[j][v]);
            }
        }
        if (j0 + BK > Sk || (causal && j0 + BK - 1 > i0))
            mask_block(s, j0, i0, Sk, causal);
        ACCV alpha[QV];
#pragma unroll
        for (int v = 0; v < QV; ++v) {
            ACCV mx = m[v];
#pragma unroll
            for (int j = 0; j < BK; ++j)
                mx = fmax(mx, s[j][v]);
            alpha[v] = exp2(m[v] - mx);
            ACCV sum = l[v] * alpha[v];
#pragma unroll
            for (int j = 0; j < BK; ++j) {
                s[j][v] = exp2(s[j][v] - mx);
                sum += s[j][v];
            }
            m[v] = mx;
            l[v] = sum;
        }
        for (int d = 0; d < HD; ++d) {
#pragma unroll
            for (int v = 0; v < QV; ++v) {
                ACCV o = VLD(ot + d * BQ + v * VW) * alpha[v];
#pragma unroll
                for (int j = 0; j < BK; ++j)
                    o = fma((ACCV)(LD(vb, rows[j] + d)), s[j][v], o);
                VST(o, ot + d * BQ + v * VW);
            }
        }
    }
    ACC inv[BQ];
    for (int v = 0; v < QV; ++v)
        VST((ACCV)(1) / l[v], inv + v * VW);
    __global T *out = O + bh * (size_t)Sq * HD;
    const int valid = min(BQ, Sq - i0);
    for (int i = 0; i < valid; ++i)
        for (int d = 0; d < HD; ++d)
            ST(ot[d * BQ + i] * inv[i], out, (size_t)(i0 + i) * HD + d);
}
