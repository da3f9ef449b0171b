"""NVIDIA GPUs through torch's CUDA build."""

from .torch_gpu import TorchGPUBackend


class CUDABackend(TorchGPUBackend):
    """CUDA devices (Triton and llvmlite-PTX kernels beside cuBLAS and SDPA)."""

    name = "cuda"
    description = "NVIDIA GPUs through torch (CUDA build)"
    flavor = "cuda"
    vendor = "NVIDIA"
