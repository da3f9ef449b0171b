"""AllReduce across processes: launch or join ranks, native and portable implementations, sweep.

``run.run_collective`` is what the runner calls for every ``allreduce`` case; ``rank`` is
each rank's entry point, ``launch`` starts and watches local ranks, ``shm`` is the shared
memory transport of the portable CPU AllReduce, ``impls`` the implementations, ``sweep``
the measurement and ``summary`` the run-level figures (small-message latency, peak busbw).
"""
