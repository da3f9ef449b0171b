"""Running cases: the runner that walks the matrix, the worker process that isolates each
case, the one case pipeline (resolve, inputs, prepare, check, time), timing, statistics,
parity, and the sustained load of ``hwbench burn`` (:mod:`.burn`).

May import: ``hwbench.core`` (and, by name through the registry, kernels and backends) and
``hwbench.sensors`` (a timed case's energy).
Never ``results``, ``decide``, ``collective``, ``report`` or ``cli``: a rank-spanning
kernel's cases are handed to an executor the caller supplies.
"""
