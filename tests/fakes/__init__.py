"""Stand-ins the tests register in place of real backends and vendor libraries: ``backend.py``,
one configurable third-party backend that misbehaves on purpose (fails, hangs, crashes, cheats,
reuses an answer, burns wrongly, breaks the contract) and the real OpenCL backend launching out of
its buffers; ``nvml.py``, one NVML module that answers the sensors and the health readers as a
driver would; ``xpu_backend.py``, a GPU-like backend computing with NumPy (a new vendor's GPU
runtime, registered without changing hwbench)."""
