"""STREAM: BabelStream's five operations on arrays far larger than the last-level cache.

One shape field ``op`` picks the operation (0 copy ``c = a``, 1 mul ``b = s*c``, 2 add
``c = a + b``, 3 triad ``a = b + s*c``, 4 dot ``sum(a*b)``); ``n`` is the elements of each
array. Bytes are counted as BabelStream counts them: copy and mul move 2 arrays, add and
triad 3, dot 2. Each case reads the arrays its operation reads and writes a separate output,
so a timed call can be repeated: the result is the same every time.

The values are exactly representable and every result is exact in fp32 and fp64 (checked
element by element for equality, as BabelStream checks its arrays against the values it
expects), which BabelStream's 0.1/0.2/0.0 start values cannot be:

- ``a``, ``b``, ``c``: ``1 + k/1024`` for ``k`` in 0..1020, a pattern of period 1021 (no
  vector or chunk width divides it), so 11 significant bits; ``s = 0.375`` (BabelStream's 0.4
  is not representable) adds 2: ``b + s*c`` needs 15 bits, under fp32's 24;
- dot: ``a`` holds integers 1..12, ``b`` ones at every ``stride``-th element and at the
  last, zeros elsewhere, with ``stride`` the power of two that keeps the sum of the
  products under 2^23: every partial sum, in any order an implementation adds them, is an
  integer fp32 holds exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hwbench.core.dtypes import DTYPE_BYTES, storage_dtype
from hwbench.core.errors import UserError
from hwbench.core.kernel import Kernel, Native, Shape, ShapeParam, Source, Tolerance

#: The operations in BabelStream's order; ``op`` is the index.
OPS = ("copy", "mul", "add", "triad", "dot")
COPY, MUL, ADD, TRIAD, DOT = range(5)
#: Arrays each operation reads, and the array it writes (BabelStream's names).
READS = {COPY: ("a",), MUL: ("c",), ADD: ("a", "b"), TRIAD: ("b", "c"), DOT: ("a", "b")}
WRITES = {COPY: "c", MUL: "b", ADD: "c", TRIAD: "a", DOT: "sum"}
#: Arrays moved per element (BabelStream's count).
ARRAYS_MOVED = {COPY: 2, MUL: 2, ADD: 3, TRIAD: 3, DOT: 2}
#: Floating-point operations per element.
FLOPS = {COPY: 0, MUL: 1, ADD: 1, TRIAD: 2, DOT: 2}
#: The scalar of mul and triad (exactly representable; BabelStream's is 0.4).
SCALAR = 0.375
#: Period of the array values (prime: no vector width, unroll or chunk divides it).
PERIOD = 1021
#: The sum of dot's products stays under this (fp32 holds every integer up to 2^24).
DOT_SUM_BOUND = 2**23
DOT_A_MAX = 12
#: BabelStream's default array size.
DEFAULT_N = 2**25


def op_name(op: int) -> str:
    """The BabelStream name of operation ``op``."""
    return OPS[op]


def dot_stride(n: int) -> int:
    """The spacing of the ones in dot's ``b``: the smallest power of two keeping the sum of the
    products (at most DOT_A_MAX each, one more for the last element) under DOT_SUM_BOUND."""
    stride = 1
    while DOT_A_MAX * (-(-n // stride) + 1) >= DOT_SUM_BOUND:
        stride *= 2
    return stride


def array_values(n: int, salt: int, seed: int) -> np.ndarray:
    """``1 + k/1024`` with ``k`` running through 0..PERIOD-1 from an offset of ``salt`` and ``seed``."""
    offset = (salt * 337 + seed * 101) % PERIOD
    period = 1.0 + ((np.arange(PERIOD) * 7 + offset) % PERIOD) / 1024.0
    return np.resize(period, n)


def dot_values(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """dot's ``a`` (integers 1..12) and ``b`` (ones every :func:`dot_stride` elements and at the last)."""
    a = np.resize(1.0 + (np.arange(PERIOD) * 5 + seed) % DOT_A_MAX, n)
    b = np.zeros(n)
    b[:: dot_stride(n)] = 1.0
    if n:
        b[-1] = 1.0
    return a, b


def _shape(op: int, n: int) -> dict[str, int]:
    return {"op": op, "n": n}


def _all(n: int) -> tuple[dict[str, int], ...]:
    return tuple(_shape(op, n) for op in range(len(OPS)))


TORCH_MISSING = "torch is not installed (pip install torch)"


#: The stream operations in torch on a GPU, the native of every backend torch drives GPUs through.
TORCH_DEVICE = Native(
    "torch",
    "torch",
    "torch: copy_, mul(out=), add(out=), add(alpha=, out=) (one-pass triad), dot",
    ("fp32", "fp64"),
    "natives:torch_device",
)


class Stream(Kernel):
    """BabelStream's copy, mul, add, triad and dot."""

    name = "stream"
    description = "BabelStream: copy c=a, mul b=s*c, add c=a+b, triad a=b+s*c, dot sum(a*b) (op 0..4)"
    params = (
        ShapeParam("op", "operation: 0 copy, 1 mul, 2 add, 3 triad, 4 dot", default=TRIAD, minimum=0),
        ShapeParam("n", "elements of each array", default=DEFAULT_N, aliases=("N", "size")),
    )
    dtypes = ("fp32", "fp64")
    bandwidth_bound = True
    # quick: triad only, 2^22 elements (16 MiB per array in fp32, 32 MiB in fp64: under a large
    # L3, but the cache flush before every timed call makes each call stream from memory); standard:
    # every operation on 2^27 (512 MiB or 1 GiB per array: 4x a 105 MiB L3 in fp32, 1 GiB per
    # array on a GPU in fp64); full: 2^28 (1 GiB per array in fp32 too).
    profiles = {
        "quick": (_shape(TRIAD, 2**22),),
        "standard": _all(2**27),
        "full": _all(2**28),
    }

    sources = (
        Source(
            "opencl",
            "opencl-c",
            "opencl",
            ("fp32", "fp64"),
            "OpenCL C: vector loads and stores, a grid-stride loop; dot reduced in one work-group",
        ),
        Source(
            "triton",
            "triton",
            "triton",
            ("fp32", "fp64"),
            "Triton: one block of elements per program; dot as per-program sums and a second pass",
        ),
        Source(
            "llvm",
            "llvmlite",
            "llvm",
            ("fp32", "fp64"),
            "llvmlite IR: SIMD chunks on all cores (non-temporal stores) on the CPU, work-groups on SIMT targets",
        ),
    )
    natives = {
        "cpu": (
            Native(
                "torch",
                "torch",
                "torch on the CPU: copy_, mul(out=), add(out=), add(alpha=, out=) (one-pass triad), dot",
                ("fp32", "fp64"),
                "natives:torch_host",
                listed_with=("torch",),
            ),
            Native(
                "numpy",
                "numpy",
                "NumPy: copyto, multiply(out=), add(out=), triad in two passes (multiply, add), dot",
                ("fp32", "fp64"),
                "natives:numpy_stream",
            ),
        ),
        "opencl": (
            Native(
                "clblast",
                "clblast",
                "clEnqueueCopyBuffer (copy); mul, add, triad as that copy and CLBlast xSCAL/xAXPY (two passes); "
                "CLBlast xDOT (dot)",
                ("fp32", "fp64"),
                "natives:opencl_stream",
                {"pyclblast": "pyclblast is not installed (pip install 'hwbench[clblast]')"},
            ),
        ),
        "cuda": (TORCH_DEVICE,),
        "rocm": (TORCH_DEVICE,),
    }

    def derive(self, shape: dict[str, int]) -> dict[str, int]:
        if not 0 <= shape["op"] < len(OPS):
            names = ", ".join(f"{i} {name}" for i, name in enumerate(OPS))
            raise UserError(f"stream op={shape['op']}: use one of {names}")
        return shape

    def describe_shape(self, shape: Shape) -> str:
        """``triad,n=16777216``: the operation by its BabelStream name."""
        return f"{op_name(shape['op'])},n={shape['n']}"

    def output_shape(self, shape: Shape) -> tuple[int, ...]:
        return () if shape["op"] == DOT else (shape["n"],)

    def flops(self, shape: Shape) -> float:
        return float(FLOPS[shape["op"]] * shape["n"])

    def bytes_moved(self, shape: Shape, dtype: str) -> float:
        return float(ARRAYS_MOVED[shape["op"]] * shape["n"] * DTYPE_BYTES[dtype])

    def memory_bytes(self, shape: Shape, dtype: str) -> int:
        """Inputs and output in storage dtype, the float64 reference, and the parity check's
        float64 copies of output and error (four arrays of float64)."""
        n, op = shape["n"], shape["op"]
        stored = (len(READS[op]) + 1) * n * storage_dtype(dtype).itemsize
        return int(stored + (0 if op == DOT else 5 * 8 * n) + len(READS[op]) * 8 * n)

    def make_inputs(self, shape: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        n, op = shape["n"], shape["op"]
        host = storage_dtype(dtype)
        if op == DOT:
            a, b = dot_values(n, seed)
            return {"a": a.astype(host), "b": b.astype(host)}
        salts = {"a": 1, "b": 2, "c": 3}
        return {name: array_values(n, salts[name], seed).astype(host) for name in READS[op]}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Shape) -> np.ndarray:
        op = shape["op"]
        x = {name: inputs[name].astype(np.float64) for name in READS[op]}
        if op == COPY:
            return x["a"]
        if op == MUL:
            return SCALAR * x["c"]
        if op == ADD:
            return x["a"] + x["b"]
        if op == TRIAD:
            return x["b"] + SCALAR * x["c"]
        return np.asarray(np.dot(x["a"], x["b"]))

    def tolerance(self, dtype: str, shape: Shape) -> Tolerance:
        # Every result is exact by the choice of values (see the module's docstring).
        return Tolerance(atol=0.0, rtol=0.0, exact=True)


KERNEL = Stream()
