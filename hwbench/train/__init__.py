"""The training workload: a decoder-only transformer trained on seeded synthetic tokens.

``hwbench train`` times a real training job on a backend (submit to first step, steady tokens/s,
MFU, peak memory, the loss falling), on one rank or several under torchrun; ``hwbench drill``
kills one rank of a checkpointed run and measures how long its launcher takes to resume it.
The workload lives beside ``kernels/`` rather than in it: it has no float64 reference and no
portable source, and its figures (time to first step, recovery) feed the platform score.
"""
