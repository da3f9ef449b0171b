"""Platform probes that are not kernels: storage IOPS with fio (:mod:`.storage`) and time to
first step from a fresh process (:mod:`.startup`, whose child is :mod:`.first_step`). Each
writes an ordinary results file (built by :mod:`hwbench.core.records`).

Probe records are ordinary records with kernel names of their own: ``storage`` (fio random
reads; ``metrics.iops``) and ``startup`` (process start to first GEMM step;
``shape.warm_cache`` 0 or 1), so ``show``, ``validate``, ``compare`` and ``score`` read
them like any other.

May import: ``hwbench.core``, ``hwbench.run`` and ``hwbench.results``.
"""
