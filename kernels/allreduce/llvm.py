"""AllReduce (sum) over buffers that the ranks of one node share, written once in llvmlite IR.

The reduction *and* the synchronisation live in this one module, so one operation costs a
single ``ctypes`` call from Python. Every rank maps the same shared segment:

* a control block: an arrival counter (i32, a futex word), a sleeper count, an abort flag
  and one generation flag per rank (which rank arrived last, for error messages);
* one-shot slots ``[2][ranks][slot_bytes]``: small messages are copied into the slot of
  the barrier's parity, so one barrier per operation is enough (arriving at barrier ``g``
  means a rank finished reading the slots of barrier ``g - 1``);
* a symmetric heap, one region per rank at the same offset: large messages live there
  (as symmetric memory does on GPUs) and are reduced with reduce-scatter (rank ``r`` sums
  slice ``r`` of every rank's buffer into its own) and all-gather (copy every other slice
  from its owner), with barriers before, between and after.

A barrier is a monotonic generation counter: barrier ``g`` is passed once the counter
reaches ``ranks * g`` (no reset, wrap-safe signed comparison). Waiting spins briefly
with a CPU pause, yields a few times, then sleeps on a futex (shared, not private: the
waiters are processes); the last rank to arrive wakes sleepers only when there are any.
Waiting gives up with status 1 after ``timeout_ns`` (and raises the abort flag, so every
other rank leaves at once with status 2): a dead rank never hangs the others.
"""

from __future__ import annotations

import ctypes
import platform
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from llvmlite import ir

from hwbench.kernels.llvmir.irutil import F32, F64, I32, I64, PTR, VOID, elem_ptr, for_range, i64, load_vec, store_vec
from hwbench.kernels.llvmir.jit import CompiledModule, get_or_compile
from hwbench.kernels.llvmir.target import CPUTarget, host_target

DTYPES = ("fp32", "fp64")
ELEM = {"fp32": F32, "fp64": F64}
#: Control block layout (bytes); every field has its own cache line.
COUNTER, SLEEPERS, ABORT, FLAGS, LINE = 0, 64, 128, 192, 64
MAX_LOCAL_RANKS = 64
CONTROL_BYTES = 8192
#: Slice boundaries are multiples of this many bytes, so ranks never share a cache line.
SLICE_ALIGN = 64
#: Status codes of every entry point.
OK, TIMED_OUT, ABORTED = 0, 1, 2

_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "ppc64le": 221, "s390x": 238, "riscv64": 98}
_CLOCK_MONOTONIC = 1
_EXTERNALS = ("syscall", "sched_yield", "clock_gettime", "memcpy")

# Waiter arguments shared by every entry point: ctrl, rank, ranks, state, timeout_ns, spins, yields.
_SYNC_ARGS = [PTR, I64, I64, PTR, I64, I64, I64]


def _ptr_at(b: ir.IRBuilder, base: ir.Value, offset: ir.Value | int) -> ir.Value:
    off = i64(offset) if isinstance(offset, int) else offset
    return b.gep(base, [off], inbounds=True, source_etype=ir.IntType(8))


def _declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type], var_arg: bool = False) -> ir.Function:
    found = module.globals.get(name)
    return found if found is not None else ir.Function(module, ir.FunctionType(ret, args, var_arg=var_arg), name=name)


def _entry_alloca(b: ir.IRBuilder, ty: ir.Type) -> ir.Value:
    """A stack slot in the function's entry block (where SROA promotes it to registers)."""
    with b.goto_block(b.function.entry_basic_block):
        return b.alloca(ty)


def _pause(b: ir.IRBuilder) -> None:
    machine = platform.machine()
    if machine in ("x86_64", "AMD64", "i686"):
        b.call(_declare(b.module, "llvm.x86.sse2.pause", VOID, []), [])
    elif machine in ("aarch64", "arm64"):
        b.call(_declare(b.module, "llvm.aarch64.hint", VOID, [I32]), [ir.Constant(I32, 1)])


def _now_ns(b: ir.IRBuilder, ts: ir.Value) -> ir.Value:
    clock = _declare(b.module, "clock_gettime", I32, [I32, PTR])
    b.call(clock, [ir.Constant(I32, _CLOCK_MONOTONIC), ts])
    sec = b.load(ts, typ=I64)
    nsec = b.load(_ptr_at(b, ts, 8), typ=I64)
    return b.add(b.mul(sec, i64(1_000_000_000)), nsec)


def _futex(b: ir.IRBuilder, word: ir.Value, op: int, value: ir.Value, ts: ir.Value) -> None:
    sys_futex = _SYS_FUTEX.get(platform.machine(), 202)
    syscall = _declare(b.module, "syscall", I64, [I64], var_arg=True)
    b.call(
        syscall, [i64(sys_futex), word, ir.Constant(I32, op), value, ts, ir.Constant(PTR, None), ir.Constant(I32, 0)]
    )


def _emit_barrier(module: ir.Module) -> ir.Function:
    """``i32 hw_ar_barrier(ctrl, rank, ranks, state, timeout_ns, spins, yields)``."""
    fn = ir.Function(module, ir.FunctionType(I32, _SYNC_ARGS), name="hw_ar_barrier")
    ctrl, rank, ranks, state, timeout, spins, yields = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with b.goto_block(fn.entry_basic_block):
        ts = b.alloca(I64, size=i64(2))
    counter, sleepers, abort = (_ptr_at(b, ctrl, off) for off in (COUNTER, SLEEPERS, ABORT))
    gen = b.add(b.load(state, typ=I64), i64(1))
    b.store(gen, state)
    b.atomic_rmw("xchg", _ptr_at(b, ctrl, b.add(i64(FLAGS), b.mul(rank, i64(LINE)))), gen, "release")
    target = b.trunc(b.mul(ranks, gen), I32)
    old = b.atomic_rmw("add", counter, ir.Constant(I32, 1), "seq_cst")

    def reached(value: ir.Value) -> ir.Value:
        return b.icmp_signed(">=", b.sub(value, target), ir.Constant(I32, 0))

    last, wait, wake = (fn.append_basic_block(n) for n in ("last", "wait", "wake"))
    done = fn.append_basic_block("done")
    b.cbranch(b.icmp_signed("==", b.add(old, ir.Constant(I32, 1)), target), last, wait)
    b.position_at_end(last)
    b.cbranch(b.icmp_signed(">", b.load_atomic(sleepers, "seq_cst", 4, typ=I32), ir.Constant(I32, 0)), wake, done)
    b.position_at_end(wake)
    _futex(b, counter, _FUTEX_WAKE, ir.Constant(I32, 2**31 - 1), ir.Constant(PTR, None))
    b.branch(done)
    b.position_at_end(done)
    b.ret(ir.Constant(I32, OK))

    # Spin, then yield, then sleep on the futex until the deadline.
    b.position_at_end(wait)
    tries = _entry_alloca(b, I64)
    b.store(i64(0), tries)
    spin_head, spin_body, sleep_setup = (fn.append_basic_block(n) for n in ("spin", "spin.body", "sleep.setup"))
    pause_bb, relax, yield_bb = (fn.append_basic_block(n) for n in ("pause", "relax", "yield"))
    b.branch(spin_head)
    b.position_at_end(spin_head)
    b.cbranch(reached(b.load_atomic(counter, "acquire", 4, typ=I32)), done, spin_body)
    b.position_at_end(spin_body)
    nxt = b.add(b.load(tries), i64(1))
    b.store(nxt, tries)
    b.cbranch(b.icmp_signed("<", nxt, spins), pause_bb, relax)
    b.position_at_end(pause_bb)
    _pause(b)
    b.branch(spin_head)
    b.position_at_end(relax)
    b.cbranch(b.icmp_signed("<", nxt, b.add(spins, yields)), yield_bb, sleep_setup)
    b.position_at_end(yield_bb)
    b.call(_declare(module, "sched_yield", I32, []), [])
    b.branch(spin_head)

    b.position_at_end(sleep_setup)
    deadline = b.add(_now_ns(b, ts), timeout)
    sleep, check = fn.append_basic_block("sleep"), fn.append_basic_block("check")
    failed, aborted = fn.append_basic_block("timed_out"), fn.append_basic_block("aborted")
    b.branch(sleep)
    b.position_at_end(sleep)
    b.atomic_rmw("add", sleepers, ir.Constant(I32, 1), "seq_cst")
    seen = b.load_atomic(counter, "seq_cst", 4, typ=I32)
    flag = b.load_atomic(abort, "seq_cst", 4, typ=I32)
    really = fn.append_basic_block("futex")
    leave = fn.append_basic_block("leave")
    b.cbranch(b.or_(reached(seen), b.icmp_signed("!=", flag, ir.Constant(I32, 0))), leave, really)
    b.position_at_end(really)
    b.store(i64(0), ts)
    b.store(i64(2_000_000), _ptr_at(b, ts, 8))  # wake every 2 ms to look at the deadline
    _futex(b, counter, _FUTEX_WAIT, seen, ts)
    b.branch(leave)
    b.position_at_end(leave)
    b.atomic_rmw("sub", sleepers, ir.Constant(I32, 1), "seq_cst")
    b.cbranch(reached(b.load_atomic(counter, "acquire", 4, typ=I32)), done, check)
    b.position_at_end(check)
    nonzero = b.icmp_signed("!=", b.load_atomic(abort, "acquire", 4, typ=I32), ir.Constant(I32, 0))
    late = fn.append_basic_block("late")
    b.cbranch(nonzero, aborted, late)
    b.position_at_end(late)
    b.cbranch(b.icmp_signed(">", _now_ns(b, ts), deadline), failed, sleep)
    b.position_at_end(aborted)
    b.ret(ir.Constant(I32, ABORTED))
    b.position_at_end(failed)
    b.atomic_rmw("xchg", abort, ir.Constant(I32, 1), "seq_cst")
    _futex(b, counter, _FUTEX_WAKE, ir.Constant(I32, 2**31 - 1), ir.Constant(PTR, None))
    b.ret(ir.Constant(I32, TIMED_OUT))
    return fn


def _memcpy(b: ir.IRBuilder, dst: ir.Value, src: ir.Value, nbytes: ir.Value) -> None:
    fn = _declare(b.module, "llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, ir.IntType(1)])
    b.call(fn, [dst, src, nbytes, ir.Constant(ir.IntType(1), 0)])


def _emit_sum(module: ir.Module, dtype: str, width: int) -> ir.Function:
    """``void sum(out, base, stride, lo, hi, ranks)``: out[i] = sum_s (base + s*stride)[i], i in [lo, hi)."""
    t = ELEM[dtype]
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64, I64, I64, I64]), name=f"hw_ar_sum_{dtype}")
    fn.linkage = "internal"
    out, base, stride, lo, hi, ranks = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    unroll = 2
    step = width * unroll
    span = b.sub(hi, lo)
    vec_end = b.add(lo, b.mul(b.sdiv(span, i64(step)), i64(step)))

    def src(s: ir.Value) -> ir.Value:
        return _ptr_at(b, base, b.mul(s, stride))

    with for_range(b, lo, vec_end, step, name="vec") as i:
        first = src(i64(0))
        accs = [load_vec(b, first, t, b.add(i, i64(u * width)), width) for u in range(unroll)]
        slots = [_entry_alloca(b, ir.VectorType(t, width)) for _ in range(unroll)]
        for acc, slot in zip(accs, slots, strict=False):
            b.store(acc, slot)
        with for_range(b, i64(1), ranks, name="rank") as s:
            other = src(s)
            for u, slot in enumerate(slots):
                v = load_vec(b, other, t, b.add(i, i64(u * width)), width)
                b.store(b.fadd(b.load(slot), v), slot)
        for u, slot in enumerate(slots):
            store_vec(b, b.load(slot), out, b.add(i, i64(u * width)))
    with for_range(b, vec_end, hi, name="tail") as i:
        acc_slot = _entry_alloca(b, t)
        b.store(b.load(elem_ptr(b, src(i64(0)), t, i), typ=t), acc_slot)
        with for_range(b, i64(1), ranks, name="tail.rank") as s:
            b.store(b.fadd(b.load(acc_slot), b.load(elem_ptr(b, src(s), t, i), typ=t)), acc_slot)
        b.store(b.load(acc_slot), elem_ptr(b, out, t, i))
    b.ret_void()
    return fn


def _slice(b: ir.IRBuilder, count: ir.Value, ranks: ir.Value, who: ir.Value, esize: int) -> tuple[ir.Value, ir.Value]:
    """Rank ``who``'s element range of a reduce-scatter: cache-line aligned, clamped to count."""
    per_line = SLICE_ALIGN // esize
    lines = b.sdiv(b.add(count, i64(per_line - 1)), i64(per_line))
    chunk = b.mul(b.sdiv(b.add(lines, b.sub(ranks, i64(1))), ranks), i64(per_line))
    clamp = lambda v: b.select(b.icmp_signed("<", v, count), v, count)  # noqa: E731
    lo = clamp(b.mul(who, chunk))
    return lo, clamp(b.add(lo, chunk))


def _return_unless_ok(b: ir.IRBuilder, rc: ir.Value) -> None:
    """Return ``rc`` from the current function unless it is OK; continue in a fresh block otherwise."""
    fn = b.function
    ok, bad = fn.append_basic_block("ok"), fn.append_basic_block("bad")
    b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, OK)), ok, bad)
    b.position_at_end(bad)
    b.ret(rc)
    b.position_at_end(ok)


def _emit_entries(module: ir.Module, dtype: str, width: int, barrier: ir.Function) -> None:
    esize = 4 if dtype == "fp32" else 8
    total = _emit_sum(module, dtype, width)

    # i32 oneshot(sync..., slots, slot_bytes, in, out, count)
    fn = ir.Function(
        module, ir.FunctionType(I32, _SYNC_ARGS + [PTR, I64, PTR, PTR, I64]), name=f"hw_ar_oneshot_{dtype}"
    )
    sync = list(fn.args[:7])
    ctrl, rank, ranks, state = sync[:4]
    slots, slot_bytes, src, dst, count = fn.args[7:]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    parity = b.and_(b.add(b.load(state, typ=I64), i64(1)), i64(1))
    bank = _ptr_at(b, slots, b.mul(b.mul(parity, ranks), slot_bytes))
    _memcpy(b, _ptr_at(b, bank, b.mul(rank, slot_bytes)), src, b.mul(count, i64(esize)))
    _return_unless_ok(b, b.call(barrier, sync))
    b.call(total, [dst, bank, slot_bytes, i64(0), count, ranks])
    b.ret(ir.Constant(I32, OK))

    # i32 reduce_scatter(sync..., heap, stride, in_off, out_off, count): B1, then my slice of every buffer.
    rs = ir.Function(
        module, ir.FunctionType(I32, _SYNC_ARGS + [PTR, I64, I64, I64, I64]), name=f"hw_ar_reduce_scatter_{dtype}"
    )
    sync = list(rs.args[:7])
    rank, ranks = sync[1], sync[2]
    heap, stride, in_off, out_off, count = rs.args[7:]
    b = ir.IRBuilder(rs.append_basic_block("entry"))
    _return_unless_ok(b, b.call(barrier, sync))
    lo, hi = _slice(b, count, ranks, rank, esize)
    mine = _ptr_at(b, heap, b.add(b.mul(rank, stride), out_off))
    b.call(total, [mine, _ptr_at(b, heap, in_off), stride, lo, hi, ranks])
    b.ret(ir.Constant(I32, OK))

    # i32 all_gather(sync..., heap, stride, out_off, count): B2, copy every other slice from its owner, B3.
    ag = ir.Function(module, ir.FunctionType(I32, _SYNC_ARGS + [PTR, I64, I64, I64]), name=f"hw_ar_all_gather_{dtype}")
    sync = list(ag.args[:7])
    rank, ranks = sync[1], sync[2]
    heap, stride, out_off, count = ag.args[7:]
    b = ir.IRBuilder(ag.append_basic_block("entry"))
    _return_unless_ok(b, b.call(barrier, sync))
    mine = _ptr_at(b, heap, b.add(b.mul(rank, stride), out_off))
    with for_range(b, i64(1), ranks, name="peer") as k:
        owner = b.srem(b.add(rank, k), ranks)  # start at the next rank: owners are read evenly
        lo, hi = _slice(b, count, ranks, owner, esize)
        theirs = _ptr_at(b, heap, b.add(b.mul(owner, stride), out_off))
        offset = b.mul(lo, i64(esize))
        _memcpy(b, _ptr_at(b, mine, offset), _ptr_at(b, theirs, offset), b.mul(b.sub(hi, lo), i64(esize)))
    b.ret(b.call(barrier, sync))

    # i32 allreduce(sync..., heap, stride, in_off, out_off, count): the two phases in one call.
    both = ir.Function(
        module, ir.FunctionType(I32, _SYNC_ARGS + [PTR, I64, I64, I64, I64]), name=f"hw_ar_allreduce_{dtype}"
    )
    b = ir.IRBuilder(both.append_basic_block("entry"))
    sync = list(both.args[:7])
    heap, stride, in_off, out_off, count = both.args[7:]
    _return_unless_ok(b, b.call(rs, sync + [heap, stride, in_off, out_off, count]))
    b.ret(b.call(ag, sync + [heap, stride, out_off, count]))


def build(target: CPUTarget) -> ir.Module:
    """The whole module: barrier, then one-shot, reduce-scatter, all-gather and fused entries per dtype."""
    module = target.new_module("allreduce")
    barrier = _emit_barrier(module)
    for dtype in DTYPES:
        _emit_entries(module, dtype, target.vector_width(dtype), barrier)
    return module


@lru_cache(maxsize=1)
def _register_externals() -> None:
    import llvmlite.binding as llvm

    libc = ctypes.CDLL(None)
    for name in _EXTERNALS:
        llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)


_SYNC_C = [
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
]
_PROTOTYPES: dict[str, list[Any]] = {
    "barrier": [],
    "oneshot": [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64],
    "reduce_scatter": [ctypes.c_void_p] + [ctypes.c_int64] * 4,
    "all_gather": [ctypes.c_void_p] + [ctypes.c_int64] * 3,
    "allreduce": [ctypes.c_void_p] + [ctypes.c_int64] * 4,
}


@dataclass
class Kernels:
    """ctypes entry points of the compiled module for one dtype (every call returns a status)."""

    barrier: Any
    oneshot: Any
    reduce_scatter: Any
    all_gather: Any
    allreduce: Any
    compiled: CompiledModule
    compile_s: float


def load(dtype: str, target: CPUTarget | None = None) -> Kernels:
    """Compile (once per process) and bind the entry points for ``dtype``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    _register_externals()
    target = target or host_target()
    compiled, fresh = get_or_compile(
        ("allreduce", target.cache_key), lambda: build(target), target.cpu_name, target.features
    )
    funcs = {}
    for name, tail in _PROTOTYPES.items():
        symbol = "hw_ar_barrier" if name == "barrier" else f"hw_ar_{name}_{dtype}"
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, *_SYNC_C, *tail)
        funcs[name] = proto(compiled.function_address(symbol))
    return Kernels(compiled=compiled, compile_s=compiled.compile_s if fresh else 0.0, **funcs)


def slice_bounds(count: int, ranks: int, rank: int, esize: int) -> tuple[int, int]:
    """The element range rank ``rank`` reduces (the same arithmetic as the kernel's)."""
    per_line = SLICE_ALIGN // esize
    lines = -(-count // per_line)
    chunk = -(-lines // ranks) * per_line
    lo = min(rank * chunk, count)
    return lo, min(lo + chunk, count)
