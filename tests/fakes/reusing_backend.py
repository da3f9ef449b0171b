"""A test-only backend whose kernels compute on their first call and then reuse that answer
(KernelBench's adversarial case), none of them clearing its output (``Prepared.clear_output``
is the default "cannot"), beside honest ones the pipeline must still verify.

Registered through ``HWBENCH_BACKENDS=reuse=fakes.reusing_backend:ReusingBackend``; GEMM in fp32 and
int8 (int32 output).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hwbench.backend import Availability, Backend, DeviceInfo, Implementation, Kernel, Prepared, Shape

#: How each implementation computes and hands its output back:
#: reuses: first call only, ``result()`` the same writable array each time (filled by the pipeline);
#: copies: first call only, ``result()`` a new copy each time (nothing can show the calls computed);
#: frozen: first call only, ``result()`` the same read-only array each time;
#: honest: every call into one array, ``result()`` that array;
#: fresh: every call a new read-only array, ``result()`` the last one (verified by its identity).
BEHAVIOURS = ("reuses", "copies", "frozen", "honest", "fresh")


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A @ B as the GEMM kernel's reference rounds it: int8 summed exactly in int32."""
    if a.dtype == np.int8:
        return np.matmul(a.astype(np.int32), b.astype(np.int32))
    return np.matmul(a, b)


class _Prepared(Prepared):
    def __init__(self, behaviour: str, a: np.ndarray, b: np.ndarray) -> None:
        self.behaviour, self.a, self.b, self.calls = behaviour, a, b, 0
        self.out = np.zeros((a.shape[0], b.shape[1]), dtype=np.int32 if a.dtype == np.int8 else a.dtype)

    def run(self) -> None:
        self.calls += 1
        if self.behaviour == "fresh":
            self.out = _product(self.a, self.b)
            self.out.setflags(write=False)
        elif self.calls == 1 or self.behaviour == "honest":
            self.out[...] = _product(self.a, self.b)
            if self.behaviour == "frozen":
                self.out.setflags(write=False)

    def result(self) -> np.ndarray:
        return self.out.copy() if self.behaviour == "copies" else self.out


class ReusingBackend(Backend):
    """GEMM only; one implementation per way of handing the output back."""

    name = "reuse"
    description = "test backend whose kernels reuse their first answer"

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(backend=self.name, index=0, name="Reusing Device", vendor="test", kind="accelerator")]

    def implementations(self, kernel: str) -> list[Implementation]:
        if kernel != "gemm":
            return []
        return [Implementation("gemm", b, "portable", "test", f"output: {b}", ("fp32", "int8")) for b in BEHAVIOURS]

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        return _Prepared(impl.name, inputs["A"], inputs["B"])
