"""One description of a CPU target, from which every ISA-dependent choice is derived: vector
registers and their width, lanes per dtype, the FMA latency and pipes to cover, the caches and
the cores. Kernels and peak loops read it; none of them holds a constant chosen on one CPU.

The register file and width come from LLVM's feature string (what the code is compiled for, so a
restricted ISA level describes the smaller CPU); caches and cores from the host (sysfs, the
scheduler's affinity); FMA pipes and latency from :mod:`.cpu_uarch` where the table knows the core,
else the largest of any core in it (latency 5, 2 pipes), so that loops cover every core.

An ISA level below the host's (``x86-64-v2``, ``x86-64-v3``, ``x86-64-v4``; ``neon`` on Arm) is
chosen with the ``HWBENCH_CPU_ISA`` environment variable: the host's features outside that level
are switched off, so a run previews a smaller CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError
from hwbench.kernels.llvmir import cpu_uarch

#: The environment variable naming an ISA level to compile for, below the host's.
ISA_ENV = "HWBENCH_CPU_ISA"

#: x86-64 micro-architecture levels (as psABI defines them), each with the vector features it adds
#: in LLVM's names; features not named by any level are left as the host has them.
X86_LEVELS: dict[str, frozenset[str]] = {
    "x86-64-v2": frozenset({"sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "sahf"}),
    "x86-64-v3": frozenset({"avx", "avx2", "fma", "f16c", "bmi", "bmi2", "lzcnt", "movbe", "xsave"}),
    "x86-64-v4": frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "evex512"}),
}
#: Arm levels: NEON (Advanced SIMD) alone, or with SVE.
ARM_LEVELS: dict[str, frozenset[str]] = {"neon": frozenset({"neon", "fp-armv8"}), "sve": frozenset({"sve", "sve2"})}
#: Features that widen vectors or add vector instructions; a level switches off those it does not
#: include (AMX, VNNI, BF16, FP16 and the rest of AVX-512 above x86-64-v4 stay where v4 is kept).
_X86_VECTOR_PREFIXES = ("sse", "ssse", "avx", "amx", "fma", "f16c", "vaes", "vpclmulqdq", "gfni", "xop", "evex512")
_ABOVE_V4 = ("avx512", "amx", "avxvnni", "avxifma", "avxneconvert", "avx10")

#: Defaults where the table does not know the core: the largest latency and pipe count of any core in
#: it, so that a loop written for them covers every core.
LATENCY_BOUND, PIPES_BOUND = 5, 2


#: The vector features that make a CPU one of each level (what the level's code needs).
LEVEL_REQUIRES: dict[str, frozenset[str]] = {
    "x86-64-v2": frozenset({"sse4.2", "ssse3"}),
    "x86-64-v3": frozenset({"avx2", "fma"}),
    "x86-64-v4": frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
}


def x86_level(features: frozenset[str]) -> str:
    """The highest x86-64 level a feature set holds."""
    for level in reversed(list(LEVEL_REQUIRES)):
        if all(
            LEVEL_REQUIRES[lower] <= features for lower in list(LEVEL_REQUIRES)[: list(LEVEL_REQUIRES).index(level) + 1]
        ):
            return level
    return "x86-64"


def _levels_up_to(level: str) -> frozenset[str]:
    names = list(X86_LEVELS)
    return frozenset().union(*(X86_LEVELS[n] for n in names[: names.index(level) + 1]))


def _is_vector_feature(name: str) -> bool:
    return name.startswith(_X86_VECTOR_PREFIXES) or "avx" in name


def restrict_features(features: str, level: str) -> str:
    """The LLVM feature string ``features`` with every vector feature above ``level`` switched off.

    Raises :class:`UserError` for an unknown level or one the features do not reach (the host
    cannot run code of a larger CPU)."""
    parts = [f for f in features.split(",") if f]
    enabled = frozenset(f[1:] for f in parts if f.startswith("+"))
    if level in ARM_LEVELS:
        if "neon" not in enabled and "fp-armv8" not in enabled:
            raise UserError(f"{ISA_ENV}={level}: this CPU is not an Arm CPU with NEON")
        if level == "sve" and "sve" not in enabled:
            raise UserError(f"{ISA_ENV}=sve: this CPU has no SVE; choose neon")
        drop = ("sve", "sme") if level == "neon" else ()
        return ",".join(f"-{f[1:]}" if drop and f.startswith("+") and f[1:].startswith(drop) else f for f in parts)
    if level not in X86_LEVELS:
        known = ", ".join([*X86_LEVELS, *ARM_LEVELS])
        raise UserError(f"{ISA_ENV}={level!r} is not an ISA level; use one of {known} (or unset it)")
    if "neon" in enabled or "fp-armv8" in enabled:
        raise UserError(f"{ISA_ENV}={level}: this CPU is not an x86-64 CPU; use neon or sve")
    host = x86_level(enabled)
    order = ["x86-64", *X86_LEVELS]
    if order.index(host) < order.index(level):
        missing = ", ".join(sorted(frozenset().union(*LEVEL_REQUIRES.values()) & _levels_up_to(level) - enabled))
        raise UserError(f"{ISA_ENV}={level}: this CPU is {host} and lacks {missing}; choose {host} or lower")
    if host == level:
        return features  # the host's own level: nothing to switch off
    kept = _levels_up_to(level)

    def allowed(name: str) -> bool:
        if not _is_vector_feature(name):
            return True
        if level == "x86-64-v4" and name.startswith(_ABOVE_V4):
            return True  # AVX-512's extensions (VNNI, BF16, ...) and AMX belong to a v4 CPU
        return name in kept

    return ",".join(f if not f.startswith("+") or allowed(f[1:]) else f"-{f[1:]}" for f in parts)


@dataclass(frozen=True)
class Caches:
    """Data cache sizes in bytes: L1d and L2 per core, the last level in all."""

    l1d: int
    l2: int
    llc: int
    source: str


def _size(text: str) -> int | None:
    text = text.strip()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else None


def read_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> Caches:
    """The first core's caches from sysfs; a typical server core's (48 KiB, 2 MiB, 32 MiB) where
    sysfs says nothing, and the source says so."""
    found: dict[int, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size:
            found[level] = max(found.get(level, 0), size)
    if 1 not in found:
        return Caches(48 * 2**10, 2 * 2**20, 32 * 2**20, "defaults (sysfs lists no caches)")
    l2 = found.get(2, 4 * found[1])
    return Caches(found[1], l2, found.get(max(found), l2), f"sysfs {root}")


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _smt_shared(root: Path = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")) -> bool:
    try:
        text = root.read_text().strip()
    except OSError:
        return False
    return "," in text or "-" in text


@dataclass(frozen=True)
class CPUDescription:
    """What the code is compiled for and the host it runs on; see the module docstring."""

    arch: str
    isa_level: str
    #: Whether ``isa_level`` is below the host's (``HWBENCH_CPU_ISA``).
    restricted: bool
    vector_bytes: int
    vector_registers: int
    #: Whether a multiply-add takes one lane of a register as its scalar (AArch64's by-element FMLA):
    #: a kernel's A values then sit several to a register instead of one broadcast.
    lane_multiply_add: bool
    fma_latency: int
    fma_pipes: float
    caches: Caches
    cores: int
    smt_shared: bool
    uarch: cpu_uarch.Microarchitecture | None
    identity: str
    sources: dict[str, str] = field(default_factory=dict)

    def lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` in one vector register."""
        return max(1, self.vector_bytes // DTYPE_BYTES[dtype])

    @property
    def chains(self) -> int:
        """Independent FMA chains a loop needs to keep every pipe busy: latency x pipes."""
        return max(1, round(self.fma_latency * self.fma_pipes))

    def as_config(self) -> dict[str, Any]:
        """What a record's ``config`` says this description was derived from."""
        return {
            "isa_level": self.isa_level + (" (restricted)" if self.restricted else ""),
            "vector_bits": self.vector_bytes * 8,
            "vector_registers": self.vector_registers,
            "fma_latency": self.fma_latency,
            "fma_pipes": self.fma_pipes,
            "l1d_bytes": self.caches.l1d,
            "l2_bytes": self.caches.l2,
            "llc_bytes": self.caches.llc,
            "cores": self.cores,
            "uarch": self.uarch.name if self.uarch else None,
            "fma_source": self.sources.get("fma", ""),
            "cache_source": self.caches.source,
        }


def describe(
    triple: str,
    features: str,
    *,
    restricted: bool = False,
    host_features: str | None = None,
    caches: Caches | None = None,
    cores: int | None = None,
    identity: cpu_uarch.Identity | None = None,
) -> CPUDescription:
    """The description of code compiled for ``triple`` with LLVM ``features`` (on this host, unless
    ``caches``, ``cores`` and ``identity`` say otherwise, as for a cross-compiled target);
    ``host_features``, the host's own where ``features`` is restricted, check the table's entry."""
    enabled = frozenset(f[1:] for f in features.split(",") if f.startswith("+"))
    arch = triple.split("-")[0]
    if arch in ("aarch64", "arm64"):
        level = "sve" if "sve" in enabled else "neon"
        vector_bytes, registers = 16, 32  # fixed-length code: SVE's registers alias NEON's 128-bit ones
    else:
        level = x86_level(enabled)
        if "avx512f" in enabled and "evex512" not in {f[1:] for f in features.split(",") if f.startswith("-")}:
            vector_bytes, registers = 64, 32
        elif "avx" in enabled or "avx2" in enabled:
            vector_bytes, registers = 32, 16
        else:
            vector_bytes, registers = 16, 16
    identity = identity or cpu_uarch.read_identity()
    uarch = cpu_uarch.lookup(identity)
    host_amx = "+amx-tile" in (host_features or features).split(",")
    if uarch is not None and arch == "x86_64" and uarch.amx != host_amx:
        # A core the table lists without AMX that has AMX (or the other way round) is not the model
        # it reports: a hypervisor's stand-in. The table is then no guide.
        table = f"the table's {uarch.name} ({identity}) {'has' if uarch.amx else 'lacks'} AMX, unlike this CPU"
        uarch = None
    else:
        table = ""
    if uarch is not None:
        latency, pipes = uarch.fma_latency, uarch.pipes_for(vector_bytes * 8)
        table = f"table: {uarch.name} ({identity})"
    else:
        latency, pipes = LATENCY_BOUND, float(PIPES_BOUND)
        why = table or f"not in the table ({identity})"
        table = f"{why}: latency {LATENCY_BOUND} x {PIPES_BOUND} pipes, the table's largest"
    caches = caches or read_caches()
    return CPUDescription(
        arch=arch,
        isa_level=level,
        restricted=restricted,
        vector_bytes=vector_bytes,
        vector_registers=registers,
        lane_multiply_add=arch in ("aarch64", "arm64"),
        fma_latency=latency,
        fma_pipes=pipes,
        caches=caches,
        cores=cores or _cores(),
        smt_shared=_smt_shared(),
        uarch=uarch,
        identity=str(identity),
        sources={"registers": f"LLVM features ({level})", "fma": table, "caches": caches.source},
    )


def isa_level_from_env() -> str | None:
    """The ISA level ``HWBENCH_CPU_ISA`` asks for, or None."""
    value = os.environ.get(ISA_ENV, "").strip()
    return value or None


def check_level(level: str, host_features: str | None) -> None:
    """:class:`UserError` when ``level`` is not an ISA level, or (given the host's LLVM features)
    one this CPU cannot run."""
    if level not in X86_LEVELS and level not in ARM_LEVELS:
        restrict_features("", level)  # raises, naming the levels
    if host_features is not None:
        restrict_features(host_features, level)


#: Loads a microkernel may issue per FMA: cores load two vectors per cycle and run two FMAs, and a
#: quarter of the load slots is left for the packing and the stores.
LOADS_PER_FMA = 0.75


def register_tile(
    registers: int,
    chains: int = 1,
    max_vectors: int = 4,
    spare: int = 1,
    loads_per_fma: float = LOADS_PER_FMA,
    a_lanes: int | None = None,
) -> tuple[int, int]:
    """``(MR, NR_VECTORS)`` of an outer-product microkernel: MR rows of A times NR_VECTORS vectors of
    accumulators, plus NR_VECTORS loaded vectors of B and A's values, within ``registers`` less
    ``spare``. A takes one broadcast register (x86), or, where the multiply-add takes a lane of a
    register (``a_lanes`` per register: AArch64's by-element FMLA), ``ceil(MR / a_lanes)``.
    Among the tiles whose loads per FMA (``(MR + NR_VECTORS) / (MR * NR_VECTORS)``) are within
    ``loads_per_fma`` and whose accumulators cover ``chains`` (FMA latency x pipes), the most
    accumulators win, then the fewest loads per FMA."""
    candidates = []
    for nv in range(1, max_vectors + 1):
        mr = (registers - spare - 1 - nv) // nv
        while mr >= 1 and a_lanes and mr * nv + nv + -(-mr // a_lanes) + spare > registers:
            mr -= 1
        if mr >= 1:
            acc, loads = mr * nv, (mr + nv) / (mr * nv)
            candidates.append(((loads <= loads_per_fma, acc >= chains, acc, -loads), (mr, nv)))
    return max(candidates)[1] if candidates else (1, 1)
