"""The GEMM's host CPU kernels: llvmlite IR JIT-compiled for the host's vector ISA (one blocked
driver, :mod:`.driver`; each dtype's microkernel and packing beside it)."""
