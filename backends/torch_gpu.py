"""What the CUDA and ROCm backends share: torch's two GPU builds drive the device.

Portable implementations: the Triton kernels (``hwbench.kernels.*.triton``, tuned over a
small per-architecture space at prepare time) and the llvmlite kernels lowered to PTX or
AMDGCN (``hwbench.kernels.llvmir.gpu``). Natives: ``torch.matmul`` (the vendor BLAS) and
``scaled_dot_product_attention`` (with the SDPA backend that ran). Timing uses device
events; the flush writes a buffer twice the size of the L2 cache before each timed call.
Vendor specifics (library versions, loading a code object, extra natives) live in
``cuda.py`` and ``rocm.py``.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hwbench.backends._probe import missing_modules
from hwbench.core.backend import Availability, Backend, DeviceInfo, Implementation, Prepared, Timer
from hwbench.core.kernel import Kernel, Shape

TORCH_DTYPES = ("fp16", "bf16", "fp32", "tf32", "fp64")
TRITON_DTYPES = {"gemm": ("fp16", "bf16", "fp32", "tf32"), "attention": ("fp16", "bf16", "fp32")}
ALLREDUCE_DTYPES = ("fp32", "bf16", "fp16")
LLVM_DTYPES = ("fp32", "fp64")
#: Seconds of timed calls per configuration when tuning a Triton kernel.
TUNE_BUDGET_S = 0.05


class KernelCompileError(RuntimeError):
    """A portable kernel that the device's compiler rejected (a compile_error record)."""


def torch_dtype(dtype: str) -> Any:
    """The torch dtype that holds ``dtype`` on the device (tf32 is stored as fp32)."""
    import torch

    return {
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp64": torch.float64,
    }[dtype]


class TorchPrepared(Prepared):
    """A call on device tensors; ``result`` copies the output to the host (narrow dtypes as fp32)."""

    def __init__(
        self,
        call: Callable[[], Any],
        out: Any,
        config: Mapping[str, Any],
        compile_s: float = 0.0,
        keepalive: Any = None,
    ) -> None:
        self._call = call
        self._out = out
        self._keepalive = keepalive
        self.config = dict(config)
        self.compile_s = compile_s

    def run(self) -> None:
        value = self._call()
        if self._out is None:
            self._last = value

    def result(self) -> np.ndarray:
        import torch

        out = self._out if self._out is not None else self._last
        torch.cuda.synchronize()
        if out.dtype in (torch.float16, torch.bfloat16):
            out = out.float()
        return out.cpu().numpy()


class EventTimer(Timer):
    """Device events around the call (CUDA events, or HIP events on ROCm)."""

    def __init__(self, name: str) -> None:
        import torch

        self.name = name
        self.resolution_s = 0.5e-6  # documented resolution of cudaEventElapsedTime
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def time(self, fn: Callable[[], None]) -> float:
        self._start.record()
        fn()
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) * 1e-3


class TorchGPUBackend(Backend):
    """GPUs that torch drives: ``flavor`` is "cuda" (NVIDIA) or "hip" (AMD ROCm)."""

    flavor = "cuda"
    vendor = "NVIDIA"
    event_name = "cuda_event"
    blas_name = "cuBLAS"
    ccl_name = "NCCL"

    # -- availability and description ---------------------------------------------------
    def probe(self) -> Availability:
        if missing_modules("torch"):
            return Availability(False, f"torch is not installed (pip install 'hwbench[{self.name}]')")
        try:
            import torch
        except Exception as exc:  # a broken install is a reason, not a crash
            return Availability(False, f"torch fails to import: {exc}")
        build = getattr(torch.version, self.flavor, None)
        if not build:
            other = "HIP" if torch.version.hip else "CUDA" if torch.version.cuda else "CPU-only"
            return Availability(
                False, f"torch {torch.__version__} is a {other} build, not a {self.flavor.upper()} build"
            )
        if not torch.cuda.is_available():
            return Availability(
                False, f"torch {torch.__version__} ({self.flavor} {build}) sees no GPU: no device or no driver"
            )
        if missing_modules("triton"):
            return Availability(
                True, f"triton is not installed: Triton kernels are skipped (pip install 'hwbench[{self.name}]')"
            )
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        import torch

        found = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            found.append(
                DeviceInfo(
                    backend=self.name,
                    index=index,
                    name=props.name,
                    vendor=self.vendor,
                    kind="gpu",
                    arch=self.arch(index),
                    compute_units=props.multi_processor_count,
                    memory_bytes=props.total_memory,
                    driver=self.driver_version(),
                    runtime=f"{self.flavor} {getattr(torch.version, self.flavor)}",
                    libraries=self.libraries(),
                    extra=self.device_extra(index, props),
                )
            )
        return found

    def arch(self, index: int) -> str:
        """Architecture name Triton and LLVM take: ``sm_90`` or ``gfx942``."""
        import torch

        props = torch.cuda.get_device_properties(index)
        return (getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}").split(":")[0]

    def device_extra(self, index: int, props: Any) -> dict[str, Any]:
        """Facts beyond DeviceInfo's fields (vendors add clocks and more)."""
        return {
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "warp_size": getattr(props, "warp_size", None),
            "multi_processor_count": props.multi_processor_count,
        }

    def driver_version(self) -> str:
        """Kernel driver version (vendor specific)."""
        return ""

    def libraries(self) -> dict[str, str]:
        """Versions of torch, Triton and the vendor libraries."""
        import torch

        from hwbench.core.host import package_version

        return {
            k: v
            for k, v in {
                "torch": torch.__version__,
                "triton": package_version("triton"),
                "llvmlite": package_version("llvmlite"),
            }.items()
            if v
        }

    def environment(self) -> dict[str, Any]:
        from hwbench.core.host import package_version

        env: dict[str, Any] = {
            "torch": package_version("torch"),
            "triton": package_version("triton"),
            "llvmlite": package_version("llvmlite"),
        }
        if self.probe().ok:
            env.update(self.libraries())
            env["driver"] = self.driver_version()
        return env

    # -- implementations ------------------------------------------------------------------
    def native_impls(self, kernel: str) -> list[Implementation]:
        """The vendor's own implementations of ``kernel``, first = the porting-overhead baseline."""
        if kernel == "gemm":
            return [
                Implementation(
                    "gemm",
                    "torch_matmul",
                    "native",
                    self.blas_name.lower(),
                    f"torch.matmul on {self.blas_name}",
                    TORCH_DTYPES,
                )
            ]
        if kernel == "attention":
            return [
                Implementation(
                    "attention",
                    "torch_sdpa",
                    "native",
                    "torch",
                    "torch scaled_dot_product_attention (flash, efficient, cuDNN or math: recorded)",
                    ("fp16", "bf16", "fp32"),
                )
            ]
        return []

    def implementations(self, kernel: str) -> list[Implementation]:
        if kernel == "allreduce":  # run across processes (one per GPU) by hwbench.collective, not by prepare()
            return [
                Implementation(
                    "allreduce",
                    "nccl",
                    "native",
                    "torch.distributed",
                    f"torch.distributed.all_reduce on {self.ccl_name} (the nccl backend)",
                    ALLREDUCE_DTYPES,
                ),
                Implementation(
                    "allreduce",
                    "triton_symm",
                    "portable",
                    "triton",
                    "Triton reduction over torch symmetric memory: one-shot, or reduce-scatter + "
                    "all-gather; signal-pad synchronisation",
                    ALLREDUCE_DTYPES,
                ),
            ]
        if kernel not in TRITON_DTYPES:
            return []
        return self.native_impls(kernel) + [
            Implementation(
                kernel,
                "triton",
                "portable",
                "triton",
                f"Triton {kernel} (kernels/{kernel}/triton.py), tuned over a small per-arch space",
                TRITON_DTYPES[kernel],
            ),
            Implementation(
                kernel,
                "llvm",
                "portable",
                "llvmlite",
                f"the CPU's llvmlite {kernel} lowered to {'PTX' if self.flavor == 'cuda' else 'AMDGCN'}, "
                "one program per GPU thread",
                LLVM_DTYPES,
            ),
        ]

    def loader_missing(self) -> str:
        """Why llvmlite code objects cannot be loaded here (empty when they can)."""
        return ""

    def supports(self, impl: Implementation, dtype: str, device: DeviceInfo) -> Availability:
        if impl.language == "triton" and missing_modules("triton"):
            return Availability(False, f"triton is not installed (pip install 'hwbench[{self.name}]')")
        if impl.language == "llvmlite":
            if missing_modules("llvmlite"):
                return Availability(False, "llvmlite is not installed (pip install 'hwbench[cpu]')")
            why = self.loader_missing()
            if why:
                return Availability(False, why)
        if impl.kernel == "allreduce":
            why = _allreduce_missing(impl.name)
            if why:
                return Availability(False, why)
        return super().supports(impl, dtype, device)

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        errors: list[type[BaseException]] = [KernelCompileError]
        if not missing_modules("triton"):
            from triton.compiler.errors import CompilationError

            errors.append(CompilationError)
        return tuple(errors)

    def timer(self, device: DeviceInfo) -> Timer:
        import torch

        torch.cuda.set_device(device.index)
        return EventTimer(self.event_name)

    def flush(self, device: DeviceInfo) -> Callable[[], None]:
        import torch

        l2 = int(device.extra.get("l2_bytes") or 64 * 2**20)
        buffer = torch.empty(2 * l2 // 4, dtype=torch.int32, device=f"cuda:{device.index}")

        def flush() -> None:
            buffer.zero_()  # writes every line of a buffer twice the L2: inputs and outputs are evicted

        return flush

    # -- preparing cases ------------------------------------------------------------------
    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        import torch

        torch.cuda.set_device(device.index)
        dev = f"cuda:{device.index}"
        tensors = {k: torch.from_numpy(v).to(dev).to(torch_dtype(dtype)).contiguous() for k, v in inputs.items()}
        if impl.language == "triton":
            return self._triton(impl.kernel, tensors, shape, dtype, device)
        if impl.language == "llvmlite":
            return self._llvm(impl.kernel, tensors, shape, dtype, device)
        return self.prepare_native(impl, tensors, shape, dtype)

    def prepare_native(self, impl: Implementation, t: dict[str, Any], shape: Shape, dtype: str) -> Prepared:
        """Bind a native implementation to device tensors."""
        import torch

        _set_fp32_precision(dtype)
        if impl.name == "torch_matmul":
            out = torch.empty((shape["M"], shape["N"]), dtype=t["A"].dtype, device=t["A"].device)
            return TorchPrepared(
                lambda: torch.matmul(t["A"], t["B"], out=out),
                out,
                {"library": self.blas_library(), "tf32": dtype == "tf32"},
            )
        if impl.name == "torch_sdpa":
            return _sdpa(t, bool(shape["causal"]))
        raise ValueError(f"{self.name} has no implementation {impl.name}")

    def blas_library(self) -> str:
        """Which BLAS torch.matmul calls here, with its version."""
        import torch

        try:
            preferred = str(torch.backends.cuda.preferred_blas_library()).rsplit(".", 1)[-1]
        except Exception:  # older torch: no preference to report
            preferred = ""
        return f"{self.blas_name} ({preferred})" if preferred else self.blas_name

    def _triton(self, kernel: str, t: dict[str, Any], shape: Shape, dtype: str, device: DeviceInfo) -> Prepared:
        import torch

        source = importlib.import_module(f"hwbench.kernels.{kernel}.triton")
        if kernel == "gemm":
            out = torch.empty((shape["M"], shape["N"]), dtype=t["A"].dtype, device=t["A"].device)
            space = source.configs(device.arch, dtype)
            make = lambda cfg: lambda: source.launch(t["A"], t["B"], out, dtype, cfg)  # noqa: E731
        else:
            out = torch.empty_like(t["q"])
            space = source.configs(device.arch, dtype, shape["head_dim"])
            causal = bool(shape["causal"])
            make = lambda cfg: lambda: source.launch(t["q"], t["k"], t["v"], out, causal, cfg)  # noqa: E731
        start = time.perf_counter()
        best, tried = tune(space, make, EventTimer(self.event_name))
        config = {**best.as_dict(), "arch": device.arch, "tuned": tried}
        return TorchPrepared(make(best), out, config, compile_s=time.perf_counter() - start)

    def _llvm(self, kernel: str, t: dict[str, Any], shape: Shape, dtype: str, device: DeviceInfo) -> Prepared:
        import torch

        from hwbench.kernels.llvmir.gpu import compile_module, target_for

        source = importlib.import_module(f"hwbench.kernels.{kernel}.llvm")
        target = target_for(device.arch)
        start = time.perf_counter()
        try:
            binary = compile_module(source.build(target, dtype), target, source.KERNEL)
        except Exception as exc:
            raise KernelCompileError(f"llvmlite {kernel} for {device.arch}: {exc}") from exc
        launch = self.load_binary(binary, device)
        compile_s = time.perf_counter() - start
        scalar = np.float32 if dtype == "fp32" else np.float64
        if kernel == "gemm":
            m, n, k = shape["M"], shape["N"], shape["K"]
            lim = source.block_limits(target, dtype)
            out = torch.zeros((m, n), dtype=t["A"].dtype, device=t["A"].device)
            grid = (-(-n // lim["nc"]), -(-m // lim["mc"]), 1) if m and n and k else (0, 0, 0)
            args = [(t["A"], "ptr"), (t["B"], "ptr"), (out, "ptr")] + [
                (v, "i64") for v in (m, n, k, k, n, n, lim["mc"], lim["nc"], lim["kc"])
            ]
            config = {**lim, **source.tile_sizes(dtype, 1)}
        else:
            sq, sk, d = shape["seq_q"], shape["seq_k"], shape["head_dim"]
            if d > source.max_head_dim(target, dtype):
                raise ValueError(
                    f"head_dim {d} exceeds the {source.max_head_dim(target, dtype)} that fits "
                    f"a GPU thread's {target.private_bytes} bytes for {dtype}"
                )
            out = torch.zeros_like(t["q"])
            bq = source.tile_sizes(dtype, 1)["BQ"]
            grid = (-(-sq // bq), shape["batch"] * shape["heads"], 1)
            args = (
                [(t[x], "ptr") for x in ("q", "k", "v")]
                + [(out, "ptr")]
                + [(v, "i64") for v in (sq, sk, d, int(shape["causal"]))]
                + [(scalar(1.0 / np.sqrt(d)), dtype)]
            )
            config = {**source.tile_sizes(dtype, 1), "max_head_dim": source.max_head_dim(target, dtype)}
        blocks, threads = target.launch_grid(grid)
        full = [(v, "i64") for v in grid] + args
        config.update(arch=device.arch, threads_per_block=threads[0], loader=self.loader_name())
        return TorchPrepared(lambda: launch(blocks, threads, full), out, config, compile_s=compile_s, keepalive=binary)

    def loader_name(self) -> str:
        """Name of the library that loads llvmlite code objects."""
        return ""

    def load_binary(self, binary: Any, device: DeviceInfo) -> Callable[..., None]:
        """Load a compiled llvmlite module; returns ``launch(blocks, threads, [(value, kind), ...])``."""
        raise NotImplementedError


def _allreduce_missing(impl: str) -> str:
    """Why an AllReduce implementation cannot run on this node's GPUs (empty when it can)."""
    import torch

    found = torch.cuda.device_count()
    if found < 2:
        return f"needs at least 2 GPUs, found {found}"
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        return f"torch {torch.__version__} was built without NCCL"
    if impl == "triton_symm":
        try:
            import torch.distributed._symmetric_memory  # noqa: F401
        except ImportError as exc:
            return f"torch {torch.__version__} has no symmetric memory: {exc}"
    return ""


def _set_fp32_precision(dtype: str) -> None:
    """fp32 runs in IEEE single precision, tf32 on the tensor cores' TF32 path (torch's global switch)."""
    import torch

    tf32 = dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def tune(space: list[Any], make: Callable[[Any], Callable[[], None]], timer: Timer) -> tuple[Any, list[dict[str, Any]]]:
    """Fastest configuration of ``space`` by median event time; configurations that fail are noted."""
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    tried: list[dict[str, Any]] = []
    best, best_t, first_error = None, float("inf"), None
    for cfg in space:
        call = make(cfg)
        try:
            call()  # compiles
            samples = [timer.time(call)]
            while sum(samples) < TUNE_BUDGET_S and len(samples) < 50:
                samples.append(timer.time(call))
        except (CompilationError, OutOfResources) as exc:
            first_error = first_error or exc
            tried.append({**cfg.as_dict(), "error": str(exc).splitlines()[0][:200]})
            continue
        median = float(np.median(samples))
        tried.append({**cfg.as_dict(), "median_s": median})
        if median < best_t:
            best, best_t = cfg, median
    if best is None:
        raise first_error or RuntimeError("no configuration to tune")
    return best, tried


def _sdpa(t: dict[str, Any], causal: bool) -> Prepared:
    """torch SDPA pinned to the backend torch picks for these inputs (recorded in the config)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = t["q"], t["k"], t["v"]
    try:
        chosen = SDPBackend(torch._fused_sdp_choice(q, k, v, is_causal=causal))
    except Exception:  # private API gone: let SDPA choose, and say the choice is unknown
        chosen = None
    fn = torch.nn.functional.scaled_dot_product_attention

    def call() -> Any:
        if chosen is None:
            return fn(q, k, v, is_causal=causal)
        with sdpa_kernel([chosen]):
            return fn(q, k, v, is_causal=causal)

    name = chosen.name.lower() if chosen is not None else "unknown"
    return TorchPrepared(call, None, {"library": f"torch {torch.__version__}", "sdpa_backend": name})
