"""Platform probes that are not kernels: storage IOPS with fio (:mod:`.storage`) and time to
first step from a fresh process (:mod:`.startup`, whose child is :mod:`.first_step`). Each
writes an ordinary results file.

May import: ``hwbench.core``, ``hwbench.run`` and ``hwbench.results``.
"""
