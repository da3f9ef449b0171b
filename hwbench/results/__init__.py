"""Results files and the figures in them: load, migrate, validate and save documents
(:mod:`.files`, schema in ``schema/``), figure-checked loading for downstream commands
(:mod:`.checked`), derived metrics (:mod:`.derive`, :mod:`.metrics`, :mod:`.collective_figures`)
and terminal tables (:mod:`.tables`).

May import: ``hwbench.core`` and ``hwbench.run``. Reference data (device peaks, prices) is
handed in by the caller, never imported from ``hwbench.decide``.
"""
