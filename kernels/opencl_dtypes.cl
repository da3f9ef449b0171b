/* Element types shared by the OpenCL C kernels; the opencl backend prepends this file to
 * each kernels/<name>/opencl.cl (a #line directive keeps build-log line numbers right).
 *
 *   -DDTYPE_FP32 | -DDTYPE_FP64 | -DDTYPE_FP16: T is the storage type, ACC the math type
 *   (fp16: half storage, float math); LD/ST load and store one element; CAT pastes tokens.
 */
#if defined(DTYPE_FP64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double T;
#define ACC double
#define LD(p, i) ((p)[i])
#define ST(x, p, i) ((p)[i] = (x))
#elif defined(DTYPE_FP16)
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half T;
#define ACC float
#define LD(p, i) vload_half((i), (p))
#define ST(x, p, i) vstore_half((x), (i), (p))
#else
typedef float T;
#define ACC float
#define LD(p, i) ((p)[i])
#define ST(x, p, i) ((p)[i] = (x))
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
