"""The terminal table: a device column where a backend has several devices, names with their platform."""

from __future__ import annotations

from synthetic_results import device, document, record

from hwbench.results.tables import summary

SHAPE = {"M": 8, "N": 8, "K": 8}


def _doc(devices: int, fail: bool = False) -> dict:
    names = ["Host CPU (PoCL)", "Host CPU (Intel OpenCL)"][:devices]
    return document(
        [
            record("gemm", "opencl", "fp32", SHAPE, backend="opencl", device=name, index=i, tflops=0.1)
            for i, name in enumerate(names)
        ]
        + (
            [
                record(
                    "gemm",
                    "clblast",
                    "fp16",
                    SHAPE,
                    backend="opencl",
                    device=names[-1],
                    index=devices - 1,
                    status="parity_failed",
                )
            ]
            if fail
            else []
        ),
        [device("opencl", name, "cpu", index=i) for i, name in enumerate(names)],
    )


def test_two_devices_of_one_backend_get_a_device_column() -> None:
    text = summary(_doc(2, fail=True))
    header = next(line for line in text.splitlines() if line.startswith("backend ") and "status" in line)
    assert header.split()[:3] == ["backend", "device", "kernel"]
    rows = [line.split() for line in text.splitlines() if line.startswith("opencl ")]
    assert [r[1] for r in rows] == ["opencl:0", "opencl:1", "opencl:1"]
    assert "backend opencl: opencl:0 Host CPU (PoCL), opencl:1 Host CPU (Intel OpenCL)" in text
    assert "parity_failed: opencl:1 gemm clblast fp16 M=8,N=8,K=8: parity_failed on purpose" in text


def test_one_device_needs_no_device_column() -> None:
    text = summary(_doc(1))
    header = next(line for line in text.splitlines() if line.startswith("backend ") and "status" in line)
    assert header.split()[:2] == ["backend", "kernel"]
    assert "backend opencl: Host CPU (PoCL)" in text


def test_the_progress_line_shows_the_elapsed_time() -> None:
    import io

    from hwbench.results.tables import ProgressLine, elapsed
    from hwbench.run.case import CaseRequest

    now = [100.0]
    stream = io.StringIO()
    progress = ProgressLine(stream, clock=lambda: now[0])
    case = CaseRequest("gemm", "numpy", "cpu", 0, "fp32", SHAPE)
    now[0] = 107.4
    progress(1, 3, record("gemm", "numpy", "fp32", SHAPE, median=2e-3), case)
    assert stream.getvalue() == "[1/3 0:07] cpu gemm numpy fp32 M=8,N=8,K=8 ok 2 ms\n"
    progress(4, 0, record("gemm", "numpy", "fp32", SHAPE, median=2e-3), case)  # a search: no total
    assert stream.getvalue().splitlines()[-1] == "[4 0:07] cpu gemm numpy fp32 M=8,N=8,K=8 ok 2 ms"
    assert (elapsed(59.9), elapsed(754), elapsed(3723)) == ("0:59", "12:34", "1:02:03")
