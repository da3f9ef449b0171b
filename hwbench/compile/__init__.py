"""Compile-only statistics for GPU targets: every GPU kernel compiled for an architecture
without a GPU, and what the compilers report (registers, spills, shared memory, tensor-core
instructions).

May import: ``hwbench.core``, ``hwbench.kernels`` and ``hwbench.run``.
"""
