"""Deciding between platforms from results files: the weighted score (:mod:`.score`,
:mod:`.weights`, :mod:`.platform`), run-to-run comparison with its statistics
(:mod:`.compare`, :mod:`.mann_whitney`), performance portability (:mod:`.portability`) and
the catalog of datasheet peaks and prices (:mod:`.catalog`, data in ``data/``), a node's
verdict against floors (:mod:`.acceptance`, :mod:`.floors`), a fleet's outliers
(:mod:`.fleet`) and owning against renting (:mod:`.tco`, :mod:`.tco_model`).

May import: ``hwbench.core``, ``hwbench.run`` and ``hwbench.results``.
"""
