"""GEMM ``C = A @ B`` as a work-group (SIMT) kernel in llvmlite IR, for SPIR-V, NVPTX and AMDGCN.

A work-group of ``WGN x WGM`` work-items computes a ``BM x BN`` block of C
(``BM = WGM*TM*MT``, ``BN = WGN*TNV*VW*NT``). Work-item ``(tx, ty)`` holds a ``TM x TNV``
register tile of ``VW``-wide vectors: rows ``ty*TM + r`` and column vectors
``(tx + v*WGN)*VW`` of the block, so neighbouring work-items touch neighbouring
columns (coalesced on a GPU; one SIMD program per work-item on a CPU device).

Two ways to feed the register tiles, both from this one source:

* ``TK > 0``: the work-group stages ``BM x TK`` of A (transposed) and ``TK x BN`` of B
  in shared memory, each work-item copying its share with clamped, zero-masked loads;
  a barrier; ``TK`` unrolled steps of ``TM`` shared loads of A, ``TNV`` vector loads of
  B and ``TM*TNV`` FMAs; a barrier. Edges of M, N and K are zeros in the tiles.
* ``TK == 0`` (:mod:`.simt_streamed`, a CPU device's): every work-item streams its rows of A
  and its columns of B from global memory, its caches doing the staging. With ``MT``, ``NT``
  and ``KC`` it walks ``MT x NT`` register tiles ``KC`` steps of K at a time, the partial sums
  kept in C between chunks (fp32 and fp64, where C holds the compute type), and with ``PA`` /
  ``PB`` each chunk of A / B is first packed into local memory, as a CPU library blocks and
  packs. Blocks inside the matrix take an unchecked path; on an edge block, register tiles
  inside the matrix too, the others read clamped, in-bounds indices.

Stores are masked to ``M x N`` either way, so any shape works. The configuration comes
from the device (:func:`choose_config`) and is written into each record.
"""

from __future__ import annotations

from collections.abc import Mapping

from llvmlite import ir

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.gemm.gpu import simt_mma
from hwbench.kernels.gemm.gpu.simt_streamed import (
    Block,
    Operands,
    block_shape,
    chunked,
    packed_a_stride,
    store_tile,
    streamed,
    tile_width,
)
from hwbench.kernels.llvmir.irutil import I32, I64, PTR, i64, loop_carry, whole_steps_then_tail
from hwbench.kernels.llvmir.mma import MatrixInstruction
from hwbench.kernels.llvmir.simt import (
    DeviceLimits,
    Elements,
    SIMTContext,
    SIMTTarget,
    clamped_lanes,
    compute_dtype,
    share_rounds,
)

KERNEL = "gemm"
DTYPES = ("fp32", "fp64", "fp16", "bf16")
CONFIG_KEYS = ("WGN", "WGM", "TM", "TNV", "VW", "TK", "MT", "NT", "KC", "PA", "PB")
#: What a configuration that leaves them out means: one register tile per work-item, all of K at once.
CONFIG_DEFAULTS = {"MT": 1, "NT": 1, "KC": 0, "PA": 0, "PB": 0}
#: Steps of a shared K tile unrolled in straight-line code (longer tiles loop over such runs).
UNROLL_K = 16


def choose_config(limits: DeviceLimits, dtype: str, vector_width: int) -> dict[str, int]:
    """Work-group shape and tiles for a device.

    A CPU device gets one SIMD microkernel per work-item (12 x 2 vectors, no shared memory for
    the register tiles, as its caches stage the data); in fp32 and fp64 each work-item walks
    6 x 4 such tiles 256 steps of K at a time, from chunks of A and B packed into its local
    memory (fewer steps where that memory is smaller). A GPU gets 16 x 16 threads with 8 x 8
    (fp64: 4 x 4) register tiles and shared-memory K tiles."""
    if limits.kind == "cpu":
        cfg = {"WGN": 1, "WGM": 1, "TM": 12 if vector_width >= 8 else 6, "TNV": 2, "VW": vector_width, "TK": 0}
        if compute_dtype(dtype) != dtype:  # C in fp16 / bf16 cannot hold partial sums
            return full_config(cfg)
        cfg.update(MT=6, NT=4, KC=256, PA=1, PB=1)
        while shared_bytes(cfg, DTYPE_BYTES[dtype]) > limits.local_mem_bytes and cfg["KC"] > 32:
            cfg["KC"] //= 2
        if shared_bytes(cfg, DTYPE_BYTES[dtype]) > limits.local_mem_bytes:
            cfg.update(PA=0, PB=0)
        return full_config(cfg)
    side = 16 if limits.max_work_group >= 256 else 8
    tile = 4 if dtype == "fp64" else 8
    cfg = {"WGN": side, "WGM": side, "TM": tile, "TNV": tile, "VW": 1, "TK": 16}
    while shared_bytes(cfg, DTYPE_BYTES[compute_dtype(dtype)]) > limits.local_mem_bytes and cfg["TK"] > 1:
        cfg["TK"] //= 2
    return full_config(cfg)


def fit_config(cfg: Mapping[str, int], shape: Shape) -> dict[str, int]:
    """``cfg`` with no more register tiles down or across a block (``MT``, ``NT``) than the
    shape has rows and columns for, so that a small matrix still spreads over the device
    (the mma form as it is)."""
    if cfg.get("MMA"):
        return dict(cfg)
    full = full_config(cfg)
    rows, cols = full["WGM"] * full["TM"], tile_width(full)
    full["MT"] = max(1, min(full["MT"], -(-int(shape["M"]) // rows)))
    full["NT"] = max(1, min(full["NT"], -(-int(shape["N"]) // cols)))
    return full


def full_config(cfg: Mapping[str, int]) -> dict[str, int]:
    """``cfg`` with :data:`CONFIG_DEFAULTS` for the keys it leaves out, checked: the streamed
    blocking (``MT``, ``KC``) has no shared-memory form, and chunks of K keep partial sums in C,
    so only where C holds the compute type."""
    unknown = sorted(set(cfg) - set(CONFIG_KEYS))
    missing = sorted(set(CONFIG_KEYS) - set(cfg) - set(CONFIG_DEFAULTS))
    if unknown or missing:
        raise ValueError(f"GEMM configuration: unknown keys {unknown}, missing keys {missing}")
    full = {key: int(cfg.get(key, CONFIG_DEFAULTS.get(key, 0))) for key in CONFIG_KEYS}
    if full["TK"] and (full["MT"] != 1 or full["NT"] != 1 or full["KC"]):
        raise ValueError("MT, NT and KC block the streamed kernel (TK = 0) only")
    if (full["PA"] or full["PB"]) and not full["KC"]:
        raise ValueError("PA and PB pack a chunk of K of A or B: give KC > 0")
    if min(full[key] for key in ("WGN", "WGM", "TM", "TNV", "VW", "MT", "NT")) < 1 or min(full["TK"], full["KC"]) < 0:
        raise ValueError(f"configuration values must be positive (TK and KC may be 0): {full}")
    return full


def shared_bytes(cfg: Mapping[str, int], compute_bytes: int) -> int:
    """Shared memory of a work-group: the A and B tiles, or the packed chunk of B (``PB``)."""
    bm, bn = block_shape(cfg)
    if cfg.get("KC"):
        packed_a = bm * packed_a_stride(cfg, compute_bytes) if cfg.get("PA") else 0
        return (packed_a + (cfg["KC"] * bn if cfg.get("PB") else 0)) * compute_bytes
    return (bm * a_stride(cfg) + cfg["TK"] * bn) * compute_bytes if cfg["TK"] else 0


def _copy(
    el: Elements,
    src: ir.Value,
    index: ir.Value,
    dst: ir.Value,
    slot: ir.Value,
    lanes: list[tuple[ir.Value, ir.Value]] | None,
) -> None:
    """dst[slot:slot+VW] = src[index:index+VW]; with ``lanes`` (one i1 per lane, False past an
    edge) lane by lane, reading clamped indices given by the caller and storing zeros where off."""
    b = el.b
    if lanes is None:
        value = el.load_vec(src, index)
    else:
        value = ir.Constant(el.vty, ir.Undefined) if el.vw > 1 else None
        for lane, (where, ok) in enumerate(lanes):
            x = b.select(ok, el.load(src, where), ir.Constant(el.ty, 0.0))
            value = x if value is None else b.insert_element(value, x, ir.Constant(I32, lane))
    Elements(b, compute_dtype(el.dtype), el.vw).store_vec(value, dst, slot)


def _stage(blk: Block, src: ir.Value, dst: ir.Value, k0: ir.Value, k: ir.Value, is_a: bool, checked: bool) -> None:
    """Copy this work-item's share of the ``BM x TK`` tile of A (``[m][kk]``, rows padded) or the
    ``TK x BN`` tile of B (``[kk][n]``) into shared memory, ``VW`` elements at a time;
    ``checked`` copies mask rows, columns and steps of K outside the matrix to zeros."""
    b, el, c = blk.b, blk.el, blk.cfg
    threads, vw, tk = c["WGM"] * c["WGN"], c["VW"], c["TK"]
    per_row = tk // vw if is_a else blk.bn // vw
    lines = blk.bm if is_a else tk
    for major, minor in share_rounds(b, blk.tid, threads, lines, per_row, vw):
        if is_a:  # row ``major`` of the block, K from k0 + minor
            row, col, size = b.add(blk.i0, major), b.add(k0, minor), (blk.m, k)
            slot = b.add(b.mul(major, i64(a_stride(c))), minor)
        else:  # step ``major`` of K, columns from j0 + minor
            row, col, size = b.add(k0, major), b.add(blk.j0, minor), (k, blk.n)
            slot = b.add(b.mul(major, i64(blk.bn)), minor)
        width = size[1]
        lanes = clamped_lanes(b, (row, col), size, width, vw) if checked else None
        _copy(el, src, b.add(b.mul(row, width), col), dst, slot, lanes)


def a_stride(cfg: Mapping[str, int]) -> int:
    """Row stride of the shared A tile: TK padded by a vector, so that rows fall in different
    cache sets and banks."""
    return cfg["TK"] + cfg["VW"]


def _tiled(
    blk: Block,
    ctx: SIMTContext,
    a: ir.Value,
    bmat: ir.Value,
    k: ir.Value,
    tiles: tuple[ir.Value, ir.Value],
    edge: bool,
) -> list[ir.Value]:
    """Accumulators of the register tile, A and B staged through the shared ``tiles`` ``TK`` at a time."""
    b, el, c = blk.b, blk.el, blk.cfg
    tk = c["TK"]
    a_tile, b_tile = tiles
    sh = Elements(b, compute_dtype(el.dtype), c["VW"])
    unroll = tk if tk <= UNROLL_K or tk % UNROLL_K else UNROLL_K  # long K tiles loop over unrolled steps
    rows = [b.mul(blk.local_row(r), i64(a_stride(c))) for r in range(c["TM"])]
    cols = [blk.local_col(v) for v in range(c["TNV"])]

    def step(k0: ir.Value, acc: list[ir.Value], checked: bool) -> list[ir.Value]:
        _stage(blk, a, a_tile, k0, k, True, checked)
        _stage(blk, bmat, b_tile, k0, k, False, checked)
        ctx.barrier()

        def steps(kk0: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            for u in range(unroll):
                kk = b.add(kk0, i64(u))
                bv = [sh.load_vec(b_tile, b.add(b.mul(kk, i64(blk.bn)), col)) for col in cols]
                av = [sh.splat(sh.load(a_tile, b.add(row, kk))) for row in rows]
                acc = [sh.fma(av[r], bv[v], acc[r * c["TNV"] + v]) for r in range(c["TM"]) for v in range(c["TNV"])]
            return acc

        acc = steps(i64(0), acc) if unroll == tk else loop_carry(b, i64(0), i64(tk), unroll, acc, steps, name="kk")
        ctx.barrier()
        return acc

    zeros = [el.const(0.0)] * (c["TM"] * c["TNV"])
    if edge:
        return loop_carry(b, i64(0), k, tk, zeros, lambda k0, acc: step(k0, acc, True), name="k0")
    # Whole K tiles unchecked, then the last, partial one (if any) checked: no branch between barriers.
    return whole_steps_then_tail(b, k, tk, zeros, step, name="k0")


def config_for(target: SIMTTarget, dtype: str) -> dict[str, int]:
    """The device's configuration on ``target``: the matrix-multiply form (:mod:`.simt_mma`)
    where a GPU target has the instruction for ``dtype`` and its tiles fit the shared memory,
    else :func:`choose_config`'s FMA kernel."""
    inst = target.mma(dtype) if target.limits.kind == "gpu" else None
    if inst is not None:
        cfg = simt_mma.default_config(inst, target.limits.max_work_group)
        if simt_mma.shared_bytes(cfg, inst) <= target.limits.local_mem_bytes:
            return cfg
    return choose_config(target.limits, dtype, target.vector_width(dtype))


def _instruction(target: SIMTTarget, dtype: str) -> MatrixInstruction:
    inst = target.mma(dtype)
    if inst is None:
        raise ValueError(f"MMA = 1 needs a matrix-multiply instruction for {dtype} on {target.name}")
    return inst


def _check_fits(target: SIMTTarget, shared: int, cfg: Mapping[str, int]) -> None:
    if shared > target.limits.local_mem_bytes:
        raise ValueError(
            f"GEMM configuration {dict(cfg)} needs {shared} bytes of shared (local) memory; "
            f"the device has {target.limits.local_mem_bytes}"
        )


def build(target: SIMTTarget, dtype: str, cfg: Mapping[str, int]) -> ir.Module:
    """The SIMT GEMM module: entry ``gemm(A, B, C, M, N, K)`` over work-groups of
    ``(WGN, WGM)`` work-items (the mma form: ``(lanes, WM*WN)``), grid ``(ceil(N/BN), ceil(M/BM))``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    module = target.new_module(f"{KERNEL}_{dtype}")
    args = [PTR, PTR, PTR, I64, I64, I64]
    if cfg.get("MMA"):
        inst = _instruction(target, dtype)
        checked = simt_mma.check_config(cfg, inst)
        _check_fits(target, simt_mma.shared_bytes(checked, inst), checked)
        target.define_simt_kernel(
            module,
            KERNEL,
            args,
            lambda ctx, values: simt_mma.body(ctx, values, dtype, checked, inst),
            (*simt_mma.local_size(checked, inst), 1),
        )
        return module
    cfg = full_config(cfg)
    if cfg["KC"] and compute_dtype(dtype) != dtype:
        raise ValueError(f"KC keeps partial sums in C, which {dtype} would round: give KC = 0")
    _check_fits(target, shared_bytes(cfg, DTYPE_BYTES[compute_dtype(dtype)]), cfg)

    def body(ctx: SIMTContext, args: list[ir.Argument]) -> None:
        a, bmat, cmat, m, n, k = args
        b = ctx.builder
        el = Elements(b, dtype, cfg["VW"])
        blk = Block(ctx, el, cfg, m, n)
        if cfg["TK"]:
            tiles = (ctx.shared(el.ty, blk.bm * a_stride(cfg)), ctx.shared(el.ty, cfg["TK"] * blk.bn))
        ops = Operands(
            a,
            bmat,
            cmat,
            k,
            ctx.shared(el.ty, blk.bm * packed_a_stride(cfg, DTYPE_BYTES[dtype])) if cfg["PA"] else None,
            ctx.shared(el.ty, cfg["KC"] * blk.bn) if cfg["PB"] else None,
        )
        interior = b.and_(
            b.icmp_signed("<=", b.add(blk.i0, i64(blk.bm)), m), b.icmp_signed("<=", b.add(blk.j0, i64(blk.bn)), n)
        )
        with b.if_else(interior, likely=True) as (inside, edge):
            for branch, on_edge in ((inside, False), (edge, True)):
                with branch:
                    if cfg["TK"]:
                        store_tile(blk, cmat, _tiled(blk, ctx, a, bmat, k, tiles, on_edge), on_edge)
                    elif cfg["MT"] > 1 or cfg["NT"] > 1 or cfg["KC"]:
                        chunked(blk, ctx, ops, on_edge)
                    else:
                        store_tile(blk, cmat, streamed(blk, ops, on_edge), on_edge)

    target.define_simt_kernel(module, KERNEL, args, body, (cfg["WGN"], cfg["WGM"], 1))
    return module


def launch(shape: Shape, dtype: str, target: SIMTTarget, cfg: Mapping[str, int]) -> Launch:
    """``gemm(A, B, C, M, N, K)`` over ``(ceil(N/BN), ceil(M/BM))`` work-groups of ``(WGN, WGM)``
    (the mma form: ``(lanes, WM*WN)``)."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    if cfg.get("MMA"):
        inst = _instruction(target, dtype)
        cfg = simt_mma.check_config(cfg, inst)
        (bm, bn), local = simt_mma.block_shape(cfg, inst), simt_mma.local_size(cfg, inst)
        form = {**cfg, "instruction": inst.name, "shared_bytes": simt_mma.shared_bytes(cfg, inst)}
    else:
        cfg = full_config(cfg)
        (bm, bn), local = block_shape(cfg), (cfg["WGN"], cfg["WGM"])
        form = {**cfg, "shared_bytes": shared_bytes(cfg, DTYPE_BYTES[compute_dtype(dtype)])}
    grid = (-(-n // bn), -(-m // bm)) if m and n and k else (0, 0)
    args = (buffer("A"), buffer("B"), output(), *(i64_arg(v) for v in (m, n, k)))
    config = {
        "kernel": KERNEL,
        "dtype": dtype,
        "target": target.name,
        "model": "simt",
        **form,
        "block": f"{bm}x{bn}",
        "work_group": list(local),
        "device_kind": target.limits.kind,
    }
    return Launch(KERNEL, args, grid, (m, n), local=local, config=config)


#: A CPU device's register tiles (TM x TNV vectors) by expected merit, after the derived one: on
#: 32 vector registers the wide tiles, then those that fit 16 (AVX2's: the derived 12 x 2 spills there).
CPU_TILES = ((12, 2), (8, 3), (6, 4), (6, 2), (4, 3))
#: A CPU device's blockings (MT x NT register tiles) tried with the derived tile.
CPU_BLOCKS = ((4, 4), (6, 2), (3, 8))
#: A GPU's FMA register tiles and work-group shapes (WGN x WGM) tried beside the derived ones.
GPU_TILES = ((8, 8), (4, 8), (8, 4), (4, 4))
GPU_GROUPS = ((16, 16), (8, 8), (32, 8))
#: The mma form's instruction tiles per warp (FM x FN) and warp grids (WM x WN).
MMA_TILES = ((4, 4), (2, 4), (4, 2), (2, 2))
MMA_WARPS = ((2, 4), (4, 2), (2, 2))


def fits(target: SIMTTarget, dtype: str, cfg: Mapping[str, int]) -> bool:
    """Whether :func:`build` takes ``cfg`` on ``target``: its keys and sizes check, its shared
    memory fits the device's local memory and its work-group the largest the device runs."""
    try:
        if cfg.get("MMA"):
            inst = _instruction(target, dtype)
            checked = simt_mma.check_config(cfg, inst)
            shared, local = simt_mma.shared_bytes(checked, inst), simt_mma.local_size(checked, inst)
        else:
            full = full_config(cfg)
            if full["KC"] and compute_dtype(dtype) != dtype:
                return False
            shared, local = shared_bytes(full, DTYPE_BYTES[compute_dtype(dtype)]), (full["WGN"], full["WGM"])
    except ValueError:
        return False
    return shared <= target.limits.local_mem_bytes and local[0] * local[1] <= target.limits.max_work_group


def _variants(target: SIMTTarget, dtype: str, base: Mapping[str, int]) -> list[dict[str, int]]:
    """Configurations near ``base`` (the derived one), by expected merit: the register tile first
    (it decides the FMA rate), then the K tile or chunk, then the blocking or work-group shape."""
    cfg = dict(base)
    if cfg.get("MMA"):
        return [
            *({**cfg, "FM": fm, "FN": fn} for fm, fn in MMA_TILES),
            *({**cfg, "TK": tk} for tk in (64, 16)),
            *({**cfg, "WM": wm, "WN": wn} for wm, wn in MMA_WARPS),
        ]
    if cfg["TK"]:
        return [
            *({**cfg, "TM": tm, "TNV": tn} for tm, tn in GPU_TILES),
            *({**cfg, "TK": tk} for tk in (cfg["TK"] // 2, cfg["TK"] * 2)),
            *({**cfg, "WGN": wn, "WGM": wm} for wn, wm in GPU_GROUPS),
        ]
    found = [{**cfg, "TM": tm, "TNV": tn} for tm, tn in CPU_TILES]
    if cfg["KC"]:
        found += [{**cfg, "KC": kc} for kc in (cfg["KC"] // 2, cfg["KC"] * 2)]
        found += [{**cfg, "MT": mt, "NT": nt} for mt, nt in CPU_BLOCKS]
        found += [{**cfg, "PA": 0}, {**cfg, "PA": 0, "PB": 0}]
    return found


def tuning_space(target: SIMTTarget, dtype: str, shape: Shape) -> list[dict[str, int]]:
    """Candidate configurations of ``shape`` on ``target`` for ``hwbench tune``: :func:`config_for`'s
    first, then variants of it one choice at a time (:func:`_variants`), each fitted to the shape
    (:func:`fit_config`) and kept only where :func:`fits` (a candidate that cannot be built is
    left out, not tried); no more than a dozen, as a device's compiler may take seconds for each."""
    derived = fit_config(config_for(target, dtype), shape)
    found = [derived]
    for cfg in _variants(target, dtype, derived):
        fitted = fit_config(cfg, shape)
        if fitted not in found and fits(target, dtype, fitted):
            found.append(fitted)
    return found[:12]
