"""GPU cache flush without a GPU: it covers the last-level cache, the larger of the L2 the runtime
reports and the catalog's (MI300X's 256 MB Infinity Cache sits behind the 4 MB L2 HIP reports).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hwbench.backends.torch_gpu import flush_bytes
from hwbench.core.backend import DeviceInfo
from hwbench.core.registry import get_backend


@pytest.mark.parametrize(
    ("name", "l2", "flushed"),
    [
        ("AMD Instinct MI300X", 4 * 2**20, 2 * 256 * 2**20),  # the Infinity Cache, not one XCD's L2
        ("NVIDIA H200", 50 * 2**20, 2 * 60 * 2**20),  # the catalog's L2 where it is the larger
        ("NVIDIA H100 80GB HBM3", 50 * 2**20, 2 * 50 * 2**20),
        ("Some New GPU", 96 * 2**20, 2 * 96 * 2**20),  # unknown to the catalog: the reported L2
    ],
)
def test_the_flush_covers_the_last_level_cache(
    name: str, l2: int, flushed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    backend = get_backend("rocm" if "AMD" in name else "cuda")
    props = SimpleNamespace(name=name, L2_cache_size=l2, warp_size=32, shared_memory_per_block=0, major=9, minor=0)
    props.multi_processor_count = 132
    extra = backend.device_extra(0, props)
    assert flush_bytes(extra) == flushed
    if flushed > 2 * l2:
        assert extra["llc_source"].startswith("catalog ") and extra["llc_bytes"] == flushed // 2
    sizes: list[int] = []
    monkeypatch.setattr(torch, "empty", lambda count, dtype, device: sizes.append(count * 4) or torch.zeros(1))
    device = DeviceInfo(backend.name, 0, name, "test", "gpu", extra=extra)
    backend.flush(device)
    assert sizes == [flushed]
