"""The call a user would make instead of the portable sources: NumPy, on the host.

A native follows its backend's convention (the cpu backend calls ``fn(inputs, shape, dtype)``)
and returns the call to time and what the record's ``config`` says of it. The output is
allocated once, here, so the timed call only computes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from example_kernel.spec import ALPHA
from hwbench.core.kernel import Shape


def numpy_axpy(inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str) -> tuple[Callable[[], Any], dict[str, Any]]:
    """``np.multiply(alpha, x, out=out)`` then ``np.add(out, y, out=out)``: two passes."""
    x, y = inputs["x"], inputs["y"]
    out = np.empty_like(x)
    alpha = x.dtype.type(ALPHA)  # a scalar of the arrays' dtype: no widening to float64

    def axpy() -> np.ndarray:
        np.multiply(alpha, x, out=out)
        return np.add(out, y, out=out)

    return axpy, {"library": f"numpy {np.__version__}", "passes": 2}
