"""The portable GPU AllReduce in Triton: one launch per call, one source for NVIDIA and AMD.

Ranks of one node see each other's buffers (torch symmetric memory): each rank passes the
device tables of every rank's input, output and signal-pad addresses. One launch does the
whole AllReduce, synchronised inside the kernel, as NCCL's one launch is:

* one-shot (small messages): every program sums its ``BLOCK`` elements from every rank's
  input into this rank's output;
* two-shot: rank ``r`` sums its slice ``[lo, hi)`` of every rank's input and writes the sum
  into every rank's output (reduce-scatter and all-gather in one pass).

Programs synchronise pairwise across ranks (program ``p`` of every rank) through the
signal pads, before reading (every input written) and after writing (every peer done
reading this rank's input, every peer's result written here). A signal is a 32-bit slot
set 0 -> 1 by the sender and taken 1 -> 0 by the receiver, so the pads are zero again after
each barrier. A barrier works in lanes, one a peer: each lane sets its peer's slot with one
release exchange (all peers signalled at once, not one after another), then polls its own
slot with loads (``ld.acquire.sys`` on NVIDIA; on AMD loads past the caches, with one acquire
exchange when the signal came), never with read-modify-writes. Every wait is bounded: past
``timeout`` the kernel sets ``err[0]`` and goes on, so a missing peer ends in a timeout record,
never in ``__trap()`` and a poisoned context. Programs wait for their peers' programs, so a
launch's whole grid must be resident at once: :func:`co_resident` refuses a grid the GPU's
SMs cannot hold (from the compiled kernel's registers and shared memory).
``CLOCK`` says what bounds a wait: 1 NVIDIA's ``%globaltimer`` (ns), 2 AMD's
``s_memrealtime`` (100 MHz), 0 a count of spins (the interpreter, which has no clock).
fp16/bf16 accumulate in fp32 and round once on the store; AllReduce inputs are small
integers, so the result is exact in any order. Runs under ``TRITON_INTERPRET=1`` on the CPU.

Importing this module imports Triton: only GPU backends, tests and ``hwbench compile`` do.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

KERNEL = "allreduce"
DTYPES = ("fp32", "fp16", "bf16")
#: Ranks one launch serves; a node has at most this many GPUs in one NVLink/XGMI domain.
MAX_RANKS = 8
BLOCK = 2048
NUM_WARPS = 8
#: Warps a program where :data:`NUM_WARPS` spills, by (architecture, dtype): fp16 on sm_80, where
#: ptxas 12.9+ (Triton 3.9) keeps 48 registers at 8 warps and spills 8 B of a signal-pad address
#: across a call it inserts; at 4 warps 116 registers and none, each thread's loads still 16 bytes.
FEWER_WARPS = {("sm_80", "fp16"): 4}
#: hwbench's dtype names of the torch dtypes an output may have.
_DTYPE_NAMES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}
#: Signal slots each program uses per peer: one before reading, one after writing.
PHASES = 2
CLOCKS = {"spins": 0, "globaltimer": 1, "memrealtime": 2}


@triton.jit
def _now(CLOCK: tl.constexpr):
    """The time in ns (CLOCK 1, 2), or 0 where the wait counts spins (CLOCK 0)."""
    if CLOCK == 1:
        t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    elif CLOCK == 2:
        ticks = tl.inline_asm_elementwise(
            "s_memrealtime $0\ns_waitcnt lgkmcnt(0)", "=s", [], dtype=tl.int64, is_pure=False, pack=1
        )
        t = ticks * 10
    else:
        t = tl.zeros((), dtype=tl.int64)
    return t


@triton.jit
def _poll(flags, CLOCK: tl.constexpr):
    """Each lane's flag. NVIDIA: ``ld.acquire.sys`` (a load, no read-modify-write, that orders what
    follows after the peer's release); elsewhere a volatile load, which reads memory each time, with
    the acquire made once when the wait ends (:func:`_take`)."""
    if CLOCK == 1:
        got = tl.inline_asm_elementwise(
            "ld.acquire.sys.global.b32 $0, [$1];", "=r,l", [flags], dtype=tl.int32, is_pure=False, pack=1
        )
    else:
        got = tl.load(flags, cache_modifier=".cv", volatile=True)
    return got


@triton.jit
def _take(flags, live, start, timeout, CLOCK: tl.constexpr):
    """Wait until every ``live`` lane's flag is 1, then turn those back to 0 (one exchange per lane,
    acquire at system scope); 1 when all came, 0 when ``timeout`` passed first."""
    came = (_poll(flags, CLOCK) == 1) | (live == 0)
    waited = tl.zeros((), dtype=tl.int64)
    while (tl.min(came.to(tl.int32), axis=0) == 0) & (waited < timeout):
        came = came | (_poll(flags, CLOCK) == 1)
        if CLOCK == 0:
            waited += 1
        else:
            waited = _now(CLOCK) - start
    tl.atomic_xchg(flags, tl.zeros(flags.shape, dtype=tl.int32), mask=came & (live != 0), sem="acquire", scope="sys")
    return tl.min(came.to(tl.int32), axis=0)


@triton.jit
def _barrier(pad_ptrs, slot, rank, err_ptr, timeout, NRANKS: tl.constexpr, LANES: tl.constexpr, CLOCK: tl.constexpr):
    """Meet program ``slot // PHASES`` of every rank: lane ``p`` (of ``LANES``, a power of two at least
    ``NRANKS``) signals peer ``p`` (one release exchange per lane, all peers at once), then every lane
    waits for its peer's signal (:func:`_take`)."""
    tl.debug_barrier()  # every thread's memory accesses before the signal
    pads = pad_ptrs.to(tl.pointer_type(tl.uint64))
    lanes = tl.arange(0, LANES)
    live = lanes < NRANKS
    peer = tl.where(live, lanes, 0)
    theirs = tl.load(pads + peer).to(tl.pointer_type(tl.int32))
    own = tl.load(pads + rank).to(tl.pointer_type(tl.int32))
    start = _now(CLOCK)
    ones = tl.full((LANES,), 1, tl.int32)
    tl.atomic_xchg(theirs + slot * NRANKS + rank, ones, mask=live, sem="release", scope="sys")
    ok = _take(own + slot * NRANKS + peer, live.to(tl.int32), start, timeout, CLOCK)
    if ok == 0:
        tl.atomic_max(err_ptr, 1, sem="relaxed", scope="gpu")
    tl.debug_barrier()  # no thread reads before the signals are taken


@triton.jit
def _aligned(base, offs, BLOCK: tl.constexpr):
    """``base + offs``, told to be consecutive addresses from a 16-byte boundary (symmetric buffers
    are page-aligned and two-shot slices start on cache lines, which an address loaded from a table
    cannot tell), so full blocks move as 16-byte vectors. The hint must sit where the sum is made."""
    return tl.max_contiguous(tl.multiple_of(base + offs, 16), BLOCK)


@triton.jit
def _sum(in_ptrs, offs, end, NRANKS: tl.constexpr, ELEMENT: tl.constexpr, BLOCK: tl.constexpr, FULL: tl.constexpr):
    """Every rank's input at ``offs`` (those below ``end`` unless the block is ``FULL``), summed in fp32."""
    table = in_ptrs.to(tl.pointer_type(tl.uint64))
    acc = tl.zeros(offs.shape, dtype=tl.float32)
    for peer in tl.static_range(NRANKS):
        ptrs = _aligned(tl.load(table + peer).to(tl.pointer_type(ELEMENT)), offs, BLOCK)
        if FULL:  # no mask: the loads are 16-byte vectors
            acc += tl.load(ptrs).to(tl.float32)
        else:
            acc += tl.load(ptrs, mask=offs < end, other=0.0).to(tl.float32)
    return acc


@triton.jit
def _put(base, offs, end, value, BLOCK: tl.constexpr, FULL: tl.constexpr):
    """Store ``value`` at ``base + offs`` (those below ``end`` unless the block is ``FULL``)."""
    ptrs = _aligned(base, offs, BLOCK)
    if FULL:
        tl.store(ptrs, value)
    else:
        tl.store(ptrs, value, mask=offs < end)


@triton.jit
def _reduce(in_ptrs, offs, end, NRANKS: tl.constexpr, ELEMENT: tl.constexpr, BLOCK: tl.constexpr):
    """:func:`_sum` of one block, unmasked when the whole block lies below ``end``, in ``ELEMENT``."""
    if offs.min() + BLOCK <= end:
        acc = _sum(in_ptrs, offs, end, NRANKS, ELEMENT, BLOCK, True)
    else:
        acc = _sum(in_ptrs, offs, end, NRANKS, ELEMENT, BLOCK, False)
    return acc.to(ELEMENT)


@triton.jit
def _store(base, offs, end, value, BLOCK: tl.constexpr):
    """:func:`_put`, unmasked when the whole block lies below ``end``."""
    if offs.min() + BLOCK <= end:
        _put(base, offs, end, value, BLOCK, True)
    else:
        _put(base, offs, end, value, BLOCK, False)


@triton.jit
def allreduce_kernel(
    in_ptrs,
    out_ptrs,
    pad_ptrs,
    err_ptr,
    out_local,
    count,
    lo,
    hi,
    rank,
    timeout,
    NRANKS: tl.constexpr,
    LANES: tl.constexpr,
    ONESHOT: tl.constexpr,
    IN_PLACE: tl.constexpr,
    BLOCK: tl.constexpr,
    CLOCK: tl.constexpr,
):
    """One AllReduce of ``count`` elements over ``NRANKS`` ranks (``out_local``: this rank's output)."""
    pid = tl.program_id(0)
    element = out_local.dtype.element_ty
    _barrier(pad_ptrs, pid * 2, rank, err_ptr, timeout, NRANKS, LANES, CLOCK)  # every input written
    if ONESHOT:
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc = _reduce(in_ptrs, offs, count, NRANKS, element, BLOCK)
        if IN_PLACE:  # this rank's input is its output: peers must be done reading it first
            _barrier(pad_ptrs, pid * 2 + 1, rank, err_ptr, timeout, NRANKS, LANES, CLOCK)
            _store(out_local, offs, count, acc, BLOCK)
        else:
            _store(out_local, offs, count, acc, BLOCK)
            _barrier(pad_ptrs, pid * 2 + 1, rank, err_ptr, timeout, NRANKS, LANES, CLOCK)
    else:
        outs = out_ptrs.to(tl.pointer_type(tl.uint64))
        step = tl.num_programs(0).to(tl.int64) * BLOCK
        for first in range(lo + pid.to(tl.int64) * BLOCK, hi, step):
            offs = first + tl.arange(0, BLOCK)
            acc = _reduce(in_ptrs, offs, hi, NRANKS, element, BLOCK)
            for peer in tl.static_range(NRANKS):  # the all-gather: this slice into every rank's output
                _store(tl.load(outs + peer).to(tl.pointer_type(element)), offs, hi, acc, BLOCK)
        _barrier(pad_ptrs, pid * 2 + 1, rank, err_ptr, timeout, NRANKS, LANES, CLOCK)  # every slice here


def slices(count: int, ranks: int, itemsize: int) -> list[tuple[int, int]]:
    """Each rank's ``[lo, hi)`` of a two-shot AllReduce (cache-line multiples, the last one short)."""
    per_line = max(1, 128 // itemsize)
    lines = -(-count // per_line)
    chunk = -(-lines // ranks) * per_line
    return [(min(r * chunk, count), min((r + 1) * chunk, count)) for r in range(ranks)]


def max_programs(signal_pad_bytes: int, ranks: int) -> int:
    """Programs a launch may have: each uses :data:`PHASES` 32-bit slots per rank of the signal pad."""
    return max(1, signal_pad_bytes // (4 * PHASES * ranks))


def plan(
    count: int, ranks: int, rank: int, itemsize: int, oneshot_max_bytes: int, programs: int, block: int = BLOCK
) -> dict[str, Any]:
    """The grid and the arguments that differ between calls: one-shot when the message is small enough
    for one element block per program, else two-shot; every rank gets the same grid."""
    blocks = -(-count // block)
    if count * itemsize <= oneshot_max_bytes and blocks <= programs:
        return {"grid": (max(blocks, 1),), "ONESHOT": True, "lo": 0, "hi": count}
    bounds = slices(count, ranks, itemsize)
    widest = max(hi - lo for lo, hi in bounds)
    lo, hi = bounds[rank]
    return {"grid": (max(1, min(programs, -(-widest // block))),), "ONESHOT": False, "lo": lo, "hi": hi}


def arguments(
    tables: Mapping[str, int],
    err: Any,
    out_local: Any,
    count: int,
    rank: int,
    ranks: int,
    step: Mapping[str, Any],
    in_place: bool,
    timeout: int,
    clock: int,
    block: int = BLOCK,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The positional arguments and the constexprs and options of one launch of :func:`allreduce_kernel`;
    ``tables`` holds the device addresses of the ``inputs``, ``outputs`` and ``pads`` tables, ``step``
    what :func:`plan` gave."""
    if not 1 <= ranks <= MAX_RANKS:
        raise ValueError(f"one launch serves 1 to {MAX_RANKS} ranks, got {ranks}")
    args: tuple[Any, ...] = (tables["inputs"], tables["outputs"], tables["pads"], err, out_local, count)
    args += (step["lo"], step["hi"], rank, timeout)
    constexprs = {
        "NRANKS": ranks,
        "LANES": triton.next_power_of_2(ranks),
        "ONESHOT": step["ONESHOT"],
        "IN_PLACE": in_place,
        "BLOCK": block,
        "CLOCK": clock,
        "num_warps": warps_for(out_local),
    }
    return args, constexprs


def launch(
    tables: Mapping[str, int],
    err: Any,
    out_local: Any,
    count: int,
    rank: int,
    ranks: int,
    step: Mapping[str, Any],
    in_place: bool,
    timeout: int,
    clock: int,
    block: int = BLOCK,
) -> None:
    """One launch of :func:`allreduce_kernel` (the arguments as :func:`arguments` takes them)."""
    args, constexprs = arguments(tables, err, out_local, count, rank, ranks, step, in_place, timeout, clock, block)
    allreduce_kernel[step["grid"]](*args, **constexprs)


def compiled(
    tables: Mapping[str, int],
    err: Any,
    out_local: Any,
    count: int,
    rank: int,
    ranks: int,
    step: Mapping[str, Any],
    in_place: bool,
    timeout: int,
    clock: int,
    block: int = BLOCK,
) -> Any:
    """The kernel Triton builds for that launch (compiled, loaded, not launched), to read its footprint."""
    args, constexprs = arguments(tables, err, out_local, count, rank, ranks, step, in_place, timeout, clock, block)
    kernel = allreduce_kernel.warmup(*args, grid=step["grid"], **constexprs)
    init = getattr(kernel, "_init_handles", None)
    if callable(init):  # loads the module: the driver then reports its registers
        init()
    return kernel


def footprint(kernel: Any) -> dict[str, int]:
    """Registers a thread, shared memory a block (bytes) and threads a block of a compiled kernel."""
    meta = kernel.metadata
    warp = int(getattr(meta, "warp_size", 0) or getattr(getattr(meta, "target", None), "warp_size", 0) or 32)
    return {"registers": int(kernel.n_regs or 0), "shared": int(meta.shared or 0), "threads": meta.num_warps * warp}


#: Blocks one SM holds at most, by compute capability (CUDA's occupancy tables); 16 for others.
BLOCKS_PER_SM = {(7, 0): 32, (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24, (9, 0): 32, (10, 0): 32}


def resident_per_sm(props: Any, registers: int, shared: int, threads: int) -> tuple[int, str]:
    """Blocks of a kernel one SM (CU on AMD) holds at once, and what limits it, from the device's
    properties as ``torch.cuda.get_device_properties`` reports them and the kernel's :func:`footprint`.
    NVIDIA allocates registers a warp at a time in units of 256 and reserves 1 KB of shared memory a
    block from sm_80 on; a limit torch does not report is left out."""
    hip = str(getattr(props, "gcnArchName", "")).startswith("gfx")
    warp = int(getattr(props, "warp_size", 0) or (64 if hip else 32))
    major, minor = int(props.major), int(props.minor)
    limits = {"threads": int(getattr(props, "max_threads_per_multi_processor", 0) or 2048) // max(threads, 1)}
    if not hip:
        limits["blocks"] = BLOCKS_PER_SM.get((major, minor), 16)
    register_file = int(getattr(props, "regs_per_multiprocessor", 0) or 0)
    if register_file and registers:
        per_warp = registers * warp if hip else -(-registers * warp // 256) * 256
        limits["registers"] = (register_file // per_warp) // max(1, -(-threads // warp))
    shared_per_sm = int(getattr(props, "shared_memory_per_multiprocessor", 0) or 0)
    per_block = shared + (1024 if not hip and major >= 8 else 0)
    if shared_per_sm and per_block:
        limits["shared memory"] = shared_per_sm // per_block
    limit = min(limits, key=lambda name: limits[name])
    return max(0, limits[limit]), limit


def co_resident(programs: int, props: Any, footprint: Mapping[str, int]) -> str:
    """Why a grid of ``programs`` cannot all be resident at once on the device of ``props`` (empty when it
    can). Programs of one launch wait for their peers' programs, so a program left waiting for an SM would
    wait for ever: such a grid is refused, never launched."""
    per_sm, limit = resident_per_sm(props, footprint["registers"], footprint["shared"], footprint["threads"])
    sms = int(props.multi_processor_count)
    if programs <= sms * per_sm:
        return ""
    return (
        f"a grid of {programs} programs cannot be resident at once on {getattr(props, 'name', 'this GPU')}: "
        f"{sms} SMs x {per_sm} blocks each (limited by {limit}: {footprint['registers']} registers a thread, "
        f"{footprint['shared']} B of shared memory and {footprint['threads']} threads a block), and every "
        "program waits for its peers' programs inside the launch"
    )


def num_warps(arch: str, dtype: str) -> int:
    """Warps a program of ``dtype`` on ``arch`` (``sm_80``, ``gfx942``): :data:`NUM_WARPS` but where
    :data:`FEWER_WARPS` says."""
    return FEWER_WARPS.get((arch, dtype), NUM_WARPS)


@functools.cache
def _cuda_arch(index: int) -> str:
    import torch  # only where an output is a CUDA tensor

    if getattr(torch.version, "hip", None):
        return str(getattr(torch.cuda.get_device_properties(index), "gcnArchName", "gfx")).split(":")[0]
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


def warps_for(out_local: Any) -> int:
    """:func:`num_warps` for an output tensor: its dtype on its device's architecture (a tensor on
    no GPU, as under the interpreter, gets :data:`NUM_WARPS`)."""
    device = getattr(out_local, "device", None)
    dtype = _DTYPE_NAMES.get(str(getattr(out_local, "dtype", "")))
    if dtype is None or getattr(device, "type", "") != "cuda":
        return NUM_WARPS
    return num_warps(_cuda_arch(getattr(device, "index", None) or 0), dtype)


def clock_for(arch: str) -> int:
    """What bounds a wait on ``arch``: AMD's real-time counter on ``gfx*``, NVIDIA's global timer else."""
    return CLOCKS["memrealtime"] if arch.startswith("gfx") else CLOCKS["globaltimer"]


def compile_variants(arch: str) -> list[dict[str, Any]]:
    """Ahead-of-time variants (``triton.compiler.ASTSource`` arguments) for ``hwbench compile`` and tests."""
    variants = []
    for dtype in DTYPES:
        warps = num_warps(arch, dtype)
        for oneshot in (True, False):
            signature = {
                "in_ptrs": "i64",
                "out_ptrs": "i64",
                "pad_ptrs": "i64",
                "err_ptr": "*i32",
                "out_local": f"*{dtype}",
                "count": "i64",
                "lo": "i64",
                "hi": "i64",
                "rank": "i32",
                "timeout": "i64",
            }
            constexprs = {
                "NRANKS": MAX_RANKS,
                "LANES": MAX_RANKS,
                "ONESHOT": oneshot,
                "IN_PLACE": False,
                "BLOCK": BLOCK,
                "CLOCK": clock_for(arch),
            }
            variants.append(
                {
                    "name": f"allreduce_{'oneshot' if oneshot else 'twoshot'}_{dtype}_r{MAX_RANKS}",
                    "dtype": dtype,
                    "fn": allreduce_kernel,
                    "signature": signature,
                    "constexprs": constexprs,
                    "config": {"BLOCK": BLOCK, "NRANKS": MAX_RANKS, "ONESHOT": oneshot, "num_warps": warps},
                    "options": {"num_warps": warps},
                }
            )
    return variants
