"""Built-in backends: cpu, opencl, cuda, rocm."""
