/* axpy in OpenCL C: out[i] = alpha * x[i] + y[i], one element per work-item (see opencl.py).
 *
 * The opencl backend puts hwbench's element-type prelude (kernels/opencl_dtypes.cl) before this
 * file and builds it with -DDTYPE_FP32 or -DDTYPE_FP64: T is then float or double (and fp64
 * enabled). The grid is rounded up to whole work-groups, so work-items past n do nothing.
 */
__kernel void axpy(__global const T* restrict x, __global const T* restrict y, __global T* restrict out, T alpha,
                   long n) {
    long i = get_global_id(0);
    if (i < n) {
        out[i] = alpha * x[i] + y[i];
    }
}
