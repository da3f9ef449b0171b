"""The GEMM's device kernels: the llvmlite work-group (SIMT) kernels, OpenCL C and Triton."""
