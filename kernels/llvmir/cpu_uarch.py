"""What a CPU's core is known to have, by vendor and family/model: its FMA pipes, their width and
latency. A cross-check of what hwbench measures, never the source of a peak: a hypervisor may
report another model than the host's, and a part may have fewer pipes than its family.

Sources: Intel's optimization reference manual (port tables, AVX-512 "two FMA units" per SKU),
AMD's software optimization guides for families 17h, 19h and 1Ah, Arm's Neoverse software
optimization guides, and Agner Fog's instruction tables for latencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Microarchitecture:
    """One core design: its FMA pipes, the widest vector each takes in one pass, and FMA latency."""

    name: str
    fma_pipes: int
    fma_bits: int
    fma_latency: int
    #: Whether the core has AMX tiles.
    amx: bool = False
    note: str = ""

    def pipes_for(self, vector_bits: int) -> float:
        """FMAs per cycle of ``vector_bits``-wide vectors (a 512-bit FMA on two 256-bit pipes is one)."""
        return self.fma_pipes * min(1.0, self.fma_bits / vector_bits)


def _models(*ranges: tuple[int, int]) -> frozenset[int]:
    return frozenset(m for lo, hi in ranges for m in range(lo, hi + 1))


_ZEN = Microarchitecture("Zen / Zen+", 2, 128, 5)
_ZEN2 = Microarchitecture("Zen 2", 2, 256, 5)
_ZEN3 = Microarchitecture("Zen 3", 2, 256, 4)
_ZEN4 = Microarchitecture("Zen 4", 2, 256, 4, note="AVX-512 on two 256-bit pipes")
_ZEN5 = Microarchitecture("Zen 5", 2, 512, 4, note="mobile parts have a 256-bit data path")

#: (vendor_id, family) -> [(models, microarchitecture)]
X86_TABLE: dict[tuple[str, int], list[tuple[frozenset[int], Microarchitecture]]] = {
    ("AuthenticAMD", 0x17): [
        (_models((0x00, 0x2F)), _ZEN),
        (_models((0x30, 0xFF)), _ZEN2),
    ],
    ("AuthenticAMD", 0x19): [
        (_models((0x00, 0x0F), (0x20, 0x5F)), _ZEN3),
        (_models((0x10, 0x1F), (0x60, 0xAF)), _ZEN4),
    ],
    ("AuthenticAMD", 0x1A): [(_models((0x00, 0xFF)), _ZEN5)],
    ("GenuineIntel", 6): [
        (_models((0x3C, 0x3C), (0x3F, 0x3F), (0x45, 0x46)), Microarchitecture("Haswell", 2, 256, 5)),
        (_models((0x3D, 0x3D), (0x47, 0x47), (0x4F, 0x4F), (0x56, 0x56)), Microarchitecture("Broadwell", 2, 256, 5)),
        (_models((0x4E, 0x4E), (0x5E, 0x5E), (0x8E, 0x8E), (0x9E, 0x9E)), Microarchitecture("Skylake", 2, 256, 4)),
        (
            _models((0x55, 0x55)),
            Microarchitecture(
                "Skylake-SP / Cascade Lake", 2, 512, 4, note="Silver and Bronze parts have one 512-bit FMA unit"
            ),
        ),
        (_models((0x6A, 0x6A), (0x6C, 0x6C)), Microarchitecture("Ice Lake-SP", 2, 512, 4)),
        (_models((0x7D, 0x7E)), Microarchitecture("Ice Lake", 2, 256, 4, note="AVX-512 on two 256-bit pipes")),
        (_models((0xA7, 0xA7)), Microarchitecture("Rocket Lake", 2, 256, 4, note="AVX-512 on two 256-bit pipes")),
        (_models((0x8F, 0x8F)), Microarchitecture("Sapphire Rapids", 2, 512, 4, amx=True)),
        (_models((0xCF, 0xCF)), Microarchitecture("Emerald Rapids", 2, 512, 4, amx=True)),
        (_models((0xAD, 0xAE)), Microarchitecture("Granite Rapids", 2, 512, 4, amx=True)),
        (
            _models((0x97, 0x97), (0x9A, 0x9A), (0xB7, 0xB7), (0xBA, 0xBA), (0xBF, 0xBF)),
            Microarchitecture("Alder Lake / Raptor Lake", 2, 256, 4, note="P-cores; E-cores have 2 x 128-bit"),
        ),
        (_models((0xAF, 0xAF)), Microarchitecture("Sierra Forest", 2, 128, 4)),
    ],
}

#: (implementer, part) -> microarchitecture, for Arm cores (``CPU implementer`` / ``CPU part``).
ARM_TABLE: dict[tuple[int, int], Microarchitecture] = {
    (0x41, 0xD0C): Microarchitecture("Neoverse N1", 2, 128, 4),
    (0x41, 0xD49): Microarchitecture("Neoverse N2", 2, 128, 4),
    (0x41, 0xD8E): Microarchitecture("Neoverse N3", 2, 128, 4),
    (0x41, 0xD40): Microarchitecture("Neoverse V1", 4, 128, 4, note="SVE: 2 x 256-bit"),
    (0x41, 0xD4F): Microarchitecture("Neoverse V2", 4, 128, 4),
    (0x41, 0xD84): Microarchitecture("Neoverse V3", 4, 128, 4),
}


@dataclass(frozen=True)
class Identity:
    """What ``/proc/cpuinfo`` says the first core is."""

    vendor: str
    family: int | None
    model: int | None
    #: Arm: implementer and part.
    part: tuple[int, int] | None = None

    def __str__(self) -> str:
        if self.part is not None:
            return f"{self.vendor} implementer 0x{self.part[0]:x} part 0x{self.part[1]:x}"
        return f"{self.vendor} family {self.family} model {self.model}"


def _number(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


def read_identity(cpuinfo: str | None = None) -> Identity:
    """The first core's vendor and family/model (or Arm implementer/part) from ``/proc/cpuinfo``."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # the first core's block ends at its blank line
            continue
        fields.setdefault(key.strip(), value.strip())
    if "CPU implementer" in fields:
        imp, part = _number(fields["CPU implementer"]), _number(fields.get("CPU part", ""))
        return Identity("ARM", None, None, (imp, part) if imp is not None and part is not None else None)
    return Identity(
        fields.get("vendor_id", "unknown"), _number(fields.get("cpu family", "")), _number(fields.get("model", ""))
    )


def lookup(identity: Identity) -> Microarchitecture | None:
    """The table's entry for ``identity``, or None when the table does not know it."""
    if identity.part is not None:
        return ARM_TABLE.get(identity.part)
    if identity.family is None or identity.model is None:
        return None
    for models, arch in X86_TABLE.get((identity.vendor, identity.family), []):
        if identity.model in models:
            return arch
    return None
