"""Compile-only statistics for GPU targets: every GPU kernel compiled for an architecture
without a GPU, and what the compilers report (registers, spills, shared memory, tensor-core
instructions). :mod:`.stats` compiles one variant and reads the compiler's report;
:mod:`.jobs` plans the jobs, runs them in child processes and builds the results document.

May import: ``hwbench.core``, ``hwbench.kernels`` and ``hwbench.run``.
"""
