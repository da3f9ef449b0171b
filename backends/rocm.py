"""AMD GPUs through torch's ROCm (HIP) build."""

from .torch_gpu import TorchGPUBackend


class ROCmBackend(TorchGPUBackend):
    """ROCm devices (Triton and llvmlite-AMDGCN kernels beside rocBLAS and SDPA)."""

    name = "rocm"
    description = "AMD GPUs through torch (ROCm/HIP build)"
    flavor = "hip"
    vendor = "AMD"
