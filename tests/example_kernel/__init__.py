"""A worked example kernel, ``axpy`` (``out = alpha*x + y``), registered without packaging.

``docs/extending.md`` walks through it; ``tests/project/test_extending.py`` runs it on the cpu and
opencl backends with ``HWBENCH_KERNELS=axpy=example_kernel.spec:KERNEL`` and ``tests/`` on
``PYTHONPATH``. One file per part: ``spec.py`` (what the kernel is), ``llvm.py`` (the host CPU's
llvmlite source), ``opencl.cl`` + ``opencl.py`` (the OpenCL C source and its bindings) and
``natives.py`` (the NumPy call a user would make instead).
"""
