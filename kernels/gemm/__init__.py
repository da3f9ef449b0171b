"""GEMM: C = A @ B."""
