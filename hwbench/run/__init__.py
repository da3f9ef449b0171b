"""Running cases: the runner that walks the matrix, the worker process that isolates each
case, the one case pipeline (resolve, inputs, prepare, check, time), timing, statistics and
parity.

May import: ``hwbench.core`` (and, by name through the registry, kernels and backends).
Never ``results``, ``decide``, ``collective``, ``report`` or ``cli``: a rank-spanning
kernel's cases are handed to an executor the caller supplies.
"""
