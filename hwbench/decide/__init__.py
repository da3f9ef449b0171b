"""Deciding between platforms from results files: the weighted score (:mod:`.score`,
:mod:`.weights`, :mod:`.platform`), run-to-run comparison with its statistics
(:mod:`.compare`, :mod:`.mann_whitney`), performance portability (:mod:`.portability`) and
the catalog of datasheet peaks and prices (:mod:`.catalog`, data in ``data/``).

May import: ``hwbench.core``, ``hwbench.run`` and ``hwbench.results``.
"""
