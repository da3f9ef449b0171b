"""Device sensors: power, energy, temperature, clocks and health, read the same way for every backend.

One layer that timing (energy per case), ``hwbench burn`` (its time series) and the health
section of a results file share: NVML on NVIDIA GPUs, amdsmi on AMD GPUs, RAPL and sysfs on
the CPU. Every reader takes the root of the file tree it reads (``/``) or the SDK module, so a
fake tree or a fake NVML stands in for the real one; what is not readable is said, never guessed.

May import: ``hwbench.core`` only; ``run``, ``cli`` and the layers above may import it.
"""

from hwbench.sensors.devices import open_sensors

__all__ = ["open_sensors"]
