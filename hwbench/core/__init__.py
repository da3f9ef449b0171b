"""The contracts every other part of hwbench is written against, and the facts they all read.

Owns the kernel spec (:mod:`.kernel`), the backend contract (:mod:`.backend`), the
registry of kernels and backends (:mod:`.registry`), records and results documents
(:mod:`.records`), the dtype table (:mod:`.dtypes`), errors a user can act on
(:mod:`.errors`) and host and software facts (:mod:`.host`).

May import: the standard library and NumPy, and other modules of ``hwbench.core``; never
a device SDK at import time, nor any other hwbench package (kernels and backends are
loaded by name through the registry).
"""
