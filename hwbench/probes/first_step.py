"""Child process of the startup probe: start, initialise a backend, compile the GEMM, run one step.

``python -m hwbench.probes.first_step REQUEST_JSON ANSWER_PATH``. Each phase is stamped with
``time.monotonic()`` (CLOCK_MONOTONIC, shared by every process of the machine), so the
parent can time from the moment it launched this process to the end of the first step.
The output is checked against float64 only after the step, outside the timed path.
"""

from __future__ import annotations

import time

T_START = time.monotonic()

import json  # noqa: E402  (imports come after the first timestamp on purpose)
import sys  # noqa: E402
from typing import Any  # noqa: E402


def _step(request: dict[str, Any], answer: dict[str, Any]) -> None:
    from hwbench.core.registry import get_backend, get_kernel
    from hwbench.run import parity
    from hwbench.run.case import error_line

    answer["t_imported"] = time.monotonic()
    backend = get_backend(request["backend"])
    available = backend.probe()
    if not available.ok:
        answer.update(status="skipped", reason=f"backend {request['backend']} unavailable: {available.reason}")
        return
    device = backend.devices()[request["device_index"]]
    answer["t_initialised"] = time.monotonic()
    kernel = get_kernel("gemm")
    impl = next(i for i in backend.implementations("gemm") if i.name == request["impl"])
    shape, dtype = request["shape"], request["dtype"]
    inputs = kernel.make_inputs(shape, dtype, 0)
    answer["t_inputs"] = time.monotonic()
    try:
        prepared = backend.prepare(impl, kernel, inputs, shape, dtype, device)
    except backend.compile_errors() as exc:
        answer.update(status="compile_error", reason=error_line(exc))
        return
    answer["t_compiled"] = time.monotonic()
    prepared.run()
    output = prepared.result()  # brings the result to the host: the step is finished
    answer["t_first_step"] = time.monotonic()
    check = parity.check(output, kernel.reference(inputs, shape), kernel.tolerance(dtype, shape))
    answer["parity"] = {
        "max_abs_err": check.max_abs_err,
        "max_rel_err": check.max_rel_err,
        "atol": check.atol,
        "rtol": check.rtol,
        "mismatches": check.mismatches,
        "passed": check.passed,
    }
    answer.update(
        status="ok" if check.passed else "parity_failed",
        reason="" if check.passed else check.reason,
        compile_s=getattr(prepared, "compile_s", None),
    )


def main(argv: list[str]) -> int:
    """Run the request in ``argv[0]`` and write the answer (JSON) to the path ``argv[1]``."""
    request = json.loads(argv[0])
    answer: dict[str, Any] = {"t_start": T_START, "status": "runtime_error", "reason": ""}
    try:
        _step(request, answer)
    except Exception as exc:
        from hwbench.run.case import error_line

        answer.update(status="runtime_error", reason=error_line(exc))
    with open(argv[1], "w", encoding="utf-8") as handle:
        json.dump(answer, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
