"""Portable kernels in LLVM IR built with llvmlite, JIT-compiled and launched on the host CPU.

``target`` holds the one target interface (:class:`~.target.LLVMTarget`),
``jit`` compiles and caches modules, ``cpu_launch`` runs them on all cores,
``vecmath``/``irutil`` are the shared IR helpers.
"""
