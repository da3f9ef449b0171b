"""Kernels that span ranks (AllReduce): launch or join ranks, native and portable
implementations, the nccl-tests-style sweep.

``run.run_collective`` is the collective runner ``hwbench run`` hands the runner for those
kernels' cases; ``rank`` is each rank's entry point, ``launch`` starts and watches local
ranks, ``torchrun`` joins a torchrun world, ``dispatch`` creates the implementation a case
names (``impls``, ``gpu``, ``mpi``) and says why one cannot run here, ``shm`` is the shared
memory transport of the portable CPU AllReduce and ``sweep`` the measurement; ``rendezvous``
joins the ranks' process group within a deadline, ``debris`` names what a run creates after
its owner and sweeps what killed runs left, ``sizes`` the byte-size sweeps of ``--sizes``. The run-level
figures (small-message latency, peak busbw) are ``hwbench.results.collective_figures``.

May import: ``hwbench.core``, ``hwbench.kernels`` (the allreduce kernel's sources) and
``hwbench.run``; torch, mpi4py and Triton inside functions.
"""
