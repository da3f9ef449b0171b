"""Child process of the startup probe: start, initialise a backend, compile the GEMM, run one step.

``python -m hwbench.probes.first_step REQUEST_JSON ANSWER_PATH``. Each phase is stamped with
``time.monotonic()`` (CLOCK_MONOTONIC, shared by every process of the machine), so the
parent can time from the moment it launched this process to the end of the first step.
The steps are the case pipeline's (``hwbench.run.case``); the output is checked against
float64 only after the step, outside the timed path.
"""

from __future__ import annotations

import time

T_START = time.monotonic()

import json  # noqa: E402  (imports come after the first timestamp on purpose)
import sys  # noqa: E402
from typing import Any  # noqa: E402

from hwbench.run.case import CaseFailed, CaseRequest, CaseSkipped, Pipeline, error_line  # noqa: E402


def _step(request: dict[str, Any], answer: dict[str, Any]) -> None:
    answer["t_imported"] = time.monotonic()
    steps = Pipeline()
    case_request = CaseRequest(
        "gemm", request["impl"], request["backend"], request["device_index"], request["dtype"], request["shape"]
    )
    try:
        case = steps.resolve(case_request, probe=True)
        answer["t_initialised"] = time.monotonic()
        steps.inputs(case)
        answer["t_inputs"] = time.monotonic()
        prepared = steps.prepare(case)
        answer["t_compiled"] = time.monotonic()
        output = steps.first_output(prepared)  # brings the result to the host: the step is finished
        answer["t_first_step"] = time.monotonic()
    except CaseSkipped as skip:
        answer.update(status="skipped", reason=str(skip))
        return
    except CaseFailed as fail:
        answer.update(status=fail.status, reason=fail.reason)
        return
    found, why = steps.parity(case, output)
    answer["parity"] = {k: found[k] for k in ("max_abs_err", "max_rel_err", "atol", "rtol", "mismatches", "passed")}
    answer.update(status="parity_failed" if why else "ok", reason=why, compile_s=prepared.compile_s)


def main(argv: list[str]) -> int:
    """Run the request in ``argv[0]`` and write the answer (JSON) to the path ``argv[1]``."""
    request = json.loads(argv[0])
    answer: dict[str, Any] = {"t_start": T_START, "status": "runtime_error", "reason": ""}
    try:
        _step(request, answer)
    except Exception as exc:
        answer.update(status="runtime_error", reason=error_line(exc))
    with open(argv[1], "w", encoding="utf-8") as handle:
        json.dump(answer, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
