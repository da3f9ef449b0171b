"""Compile one GPU kernel variant without a GPU and read what the compiler reports.

NVIDIA: the PTX is assembled by ``ptxas -v`` for the architecture, and registers, spill
bytes, stack and shared memory come from its log. AMD: the AMDGCN assembly carries the
code object metadata (``.vgpr_count``, ``.sgpr_count``, spill counts, LDS and scratch
sizes). Tensor-core instructions are counted in the PTX (``mma``, ``wgmma``) or the
AMDGCN assembly (``v_mfma``). Used by ``hwbench compile`` inside its child processes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hwbench.core.kernel import get_kernel

_PTXAS_TIMEOUT_S = 300


def base_record(kernel: str, impl: str, arch: str, variant: str, dtype: str | None) -> dict[str, Any]:
    """A compile record with its coordinates and every measurement empty."""
    return {
        "kernel": kernel,
        "impl": impl,
        "language": "triton" if impl == "triton" else "llvmlite",
        "target": arch,
        "vendor": "nvidia" if arch.startswith("sm_") else "amd",
        "variant": variant,
        "dtype": dtype,
        "status": "ok",
        "reason": "",
        "config": {},
        "registers": None,
        "sgprs": None,
        "agprs": None,
        "spill_stores_bytes": None,
        "spill_loads_bytes": None,
        "vgpr_spills": None,
        "sgpr_spills": None,
        "spilled": None,
        "shared_bytes": None,
        "private_bytes": None,
        "tensor_core": {"mma": 0, "wgmma": 0, "mfma": 0},
        "tensor_core_forms": {},
        "compile_s": None,
        "assembler": None,
    }


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    text = " | ".join((errors or lines)[:3]) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:600]}"


def tensor_core_counts(assembly: str) -> dict[str, int]:
    """mma / wgmma instructions in PTX, mfma instructions in AMDGCN assembly."""
    return {
        "mma": len(re.findall(r"^\s*mma\.", assembly, re.M)),
        "wgmma": len(re.findall(r"^\s*wgmma\.mma_async", assembly, re.M)),
        "mfma": len(re.findall(r"^\s*v_mfma_", assembly, re.M)),
    }


_FORM = re.compile(r"^\s*((?:wgmma\.mma_async|mma)\.[\w.]+|v_mfma_\w+)", re.M)


def tensor_core_forms(assembly: str) -> dict[str, int]:
    """Each tensor-core instruction form and its count: the PTX opcode with its shape and types
    (``wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3``, ``mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32``)
    or the AMDGCN mnemonic (``v_mfma_f32_32x32x16_fp8_fp8``, ``v_mfma_i32_32x32x16_i8``)."""
    forms: dict[str, int] = {}
    for found in _FORM.finditer(assembly):
        forms[found.group(1)] = forms.get(found.group(1), 0) + 1
    return dict(sorted(forms.items()))


def short_form(form: str) -> str:
    """A tensor-core instruction form without the qualifiers every one of its kind has."""
    for noise in (".mma_async.sync.aligned", ".sync.aligned", ".row.col"):
        form = form.replace(noise, "")
    return form


def find_ptxas(prefer_triton: bool, arch: str = "sm_90") -> str | None:
    """``ptxas``: the one Triton uses for ``arch`` (it matches the PTX version Triton emits) or PATH's."""
    bundled = None
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        bundled = get_ptxas(int(arch[3:].rstrip("a"))).path
    except Exception:  # no Triton, or no ptxas in it
        pass
    found = shutil.which("ptxas")
    order = [bundled, found] if prefer_triton else [found, bundled]
    return next((p for p in order if p), None)


def ptxas_stats(ptx: str, ptxas: str) -> dict[str, Any]:
    """Assemble ``ptx`` for the architecture of its ``.target`` line and parse ``ptxas -v``."""
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
    arch = target.group(1) if target else "sm_90"
    with tempfile.TemporaryDirectory(prefix="hwbench-ptxas-") as tmp:
        src = Path(tmp, "k.ptx")
        src.write_text(ptx)
        proc = subprocess.run(
            [ptxas, "-v", f"-arch={arch}", str(src), "-o", str(Path(tmp, "k.cubin"))],
            capture_output=True,
            text=True,
            timeout=_PTXAS_TIMEOUT_S,
        )
    log = proc.stderr + proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas -arch={arch} failed: {log.strip()}")
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    num = lambda pattern: int(m.group(1)) if (m := re.search(pattern, log)) else None  # noqa: E731
    stores, loads = num(r"(\d+) bytes spill stores"), num(r"(\d+) bytes spill loads")
    return {
        "registers": num(r"Used (\d+) registers"),
        "spill_stores_bytes": stores,
        "spill_loads_bytes": loads,
        "spilled": bool(stores or loads),
        "private_bytes": num(r"(\d+) bytes stack frame"),
        "shared_bytes": num(r"(\d+) bytes smem") or 0,
        "assembler": {"tool": "ptxas", "arch": arch, "version": version[-1] if version else "", "path": ptxas},
    }


def amdgcn_stats(assembly: str) -> dict[str, Any]:
    """Registers, spills, LDS and scratch from the code object metadata in AMDGCN assembly."""

    def num(key: str) -> int | None:
        m = re.search(rf"^\s*(?:-\s*)?\.{key}:\s*(\d+)", assembly, re.M)  # the first key follows "- "
        return int(m.group(1)) if m else None

    vspill, sspill = num("vgpr_spill_count"), num("sgpr_spill_count")
    return {
        "registers": num("vgpr_count"),
        "sgprs": num("sgpr_count"),
        "agprs": num("agpr_count"),
        # SGPR spills land in spare VGPR lanes; only VGPR spills go to scratch memory.
        "vgpr_spills": vspill,
        "sgpr_spills": sspill,
        "spilled": bool(vspill),
        "shared_bytes": num("group_segment_fixed_size"),
        "private_bytes": num("private_segment_fixed_size"),
        "assembler": {"tool": "llvm amdgcn", "arch": None, "version": "", "path": None},
    }


def triton_target(arch: str) -> Any:
    """Triton's ``GPUTarget`` of an architecture name (``sm_90``, ``gfx942``)."""
    from triton.backends.compiler import GPUTarget  # Triton is optional

    if arch.startswith("sm_"):
        return GPUTarget("cuda", int(arch[3:].rstrip("a")), 32)
    return GPUTarget("hip", arch, 64)


def _precision_skip(target: Any, precision: str | None) -> str:
    """Why a dot precision cannot compile for ``target`` (empty when it can)."""
    if not precision or precision == "ieee":
        return ""
    from triton.compiler.compiler import make_backend

    allowed = make_backend(target).parse_options({}).allowed_dot_input_precisions
    if precision in allowed:
        return ""
    return f"{target.arch} has no {precision} dot (Triton allows {', '.join(allowed)} there)"


def compile_variant(variant: Mapping[str, Any], target: Any) -> Any:
    """Compile one variant of a Triton source's ``compile_variants`` for ``target``: a variant with
    the call's ``args`` as the JIT compiles that call (:func:`~hwbench.kernels.triton_compat.ast_source`),
    one with a ``signature`` and ``constexprs`` as given."""
    # Both paths import Triton, which is optional (hwbench compile's children only).
    import triton
    from triton.compiler import ASTSource

    from hwbench.kernels import triton_compat  # imports Triton

    if "args" in variant:
        return triton_compat.compile_call(variant["fn"], variant["args"], target, variant["options"])
    source = ASTSource(variant["fn"], variant["signature"], variant["constexprs"])
    return triton.compile(source, target=target, options=dict(variant["options"]))


def triton_records(arch: str, kernel: str) -> list[dict[str, Any]]:
    """Compile each variant of a Triton kernel (default configuration) for ``arch``."""
    source = get_kernel(kernel).source_module("triton")
    target = triton_target(arch)
    return [variant_record(kernel, arch, v, target) for v in source.compile_variants(arch)]


def variant_record(kernel: str, arch: str, variant: Mapping[str, Any], target: Any) -> dict[str, Any]:
    """The compile record of one variant of a Triton source's ``compile_variants``."""
    record = base_record(kernel, "triton", arch, variant["name"], variant["dtype"])
    record["config"] = dict(variant["config"])
    skip = variant.get("skip") or _precision_skip(target, variant.get("precision"))
    if skip:
        record.update(status="skipped", reason=skip)
        return record
    t0 = time.perf_counter()
    try:
        compiled = compile_variant(variant, target)
        record["compile_s"] = time.perf_counter() - t0
        record.update(triton_stats(compiled, arch))
    except Exception as exc:  # the compiler's rejection is the record
        record.update(status="compile_error", reason=_one_line(exc), compile_s=time.perf_counter() - t0)
    return record


def triton_stats(compiled: Any, arch: str) -> dict[str, Any]:
    """Registers, spills, shared memory and tensor-core instructions of a compiled Triton kernel
    (``ptxas -v`` with Triton's ``ptxas`` for NVIDIA, the code object metadata for AMD)."""
    stats = _stats(compiled.asm, arch, prefer_triton=True)
    stats["shared_bytes"] = max(stats["shared_bytes"] or 0, int(compiled.metadata.shared or 0))
    return stats


def _stats(asm: dict[str, Any], arch: str, prefer_triton: bool) -> dict[str, Any]:
    if arch.startswith("sm_"):
        ptxas = find_ptxas(prefer_triton, arch)
        if ptxas is None:
            raise RuntimeError("no ptxas on PATH and no Triton install to borrow one from")
        text = asm["ptx"]
        return {
            **ptxas_stats(text, ptxas),
            "tensor_core": tensor_core_counts(text),
            "tensor_core_forms": tensor_core_forms(text),
        }
    text = asm["amdgcn"]
    return {**amdgcn_stats(text), "tensor_core": tensor_core_counts(text), "tensor_core_forms": tensor_core_forms(text)}


def llvm_record(arch: str, kernel: str, dtype: str) -> dict[str, Any]:
    """Lower the llvmlite work-group kernel for ``arch`` in its default configuration for that
    architecture (PTX through ptxas, or an AMDGCN code object)."""
    from hwbench.kernels.llvmir.gpu import target_for  # imports llvmlite, which is optional

    source = get_kernel(kernel).source_module("llvmlite")
    target = target_for(arch)
    record = base_record(kernel, "llvm", arch, f"{kernel}_{dtype}", dtype)
    if not hasattr(source, "simt_config"):
        record.update(status="skipped", reason="no work-group (SIMT) kernel in this llvmlite source")
        return record
    config = source.simt_config(target, dtype)
    record["config"] = {**config, "device_limits": target.limits.as_dict()}
    t0 = time.perf_counter()
    try:
        binary = target.lower(source.build(target, dtype, config), source.KERNEL)
        key = "ptx" if arch.startswith("sm_") else "amdgcn"
        record.update(_stats({key: binary.assembly}, arch, prefer_triton=False))
        record["data_path"] = llvm_data_path(binary.assembly, arch, config)
        record["compile_s"] = time.perf_counter() - t0
    except Exception as exc:
        record.update(status="compile_error", reason=_one_line(exc), compile_s=time.perf_counter() - t0)
    return record


def summary_lines(records: list[dict[str, Any]]) -> list[str]:
    """One line per record: status, registers, spills, shared memory, tensor-core instructions (their
    count, then each form), or the reason."""
    lines = [
        f"{'target':<7} {'impl':<6} {'variant':<28} {'status':<13} {'regs':>5} {'spills':>6} "
        f"{'smem':>7} {'tc':>5} {'s':>6}"
    ]
    for r in records:
        tc = sum(r["tensor_core"].get(kind, 0) for kind in ("mma", "wgmma", "mfma"))
        forms = ", ".join(short_form(f) for f in r.get("tensor_core_forms") or {})
        spills = "-" if r["spilled"] is None else ("yes" if r["spilled"] else "no")
        regs = "-" if r["registers"] is None else str(r["registers"])
        smem = "-" if r["shared_bytes"] is None else str(r["shared_bytes"])
        secs = "-" if r["compile_s"] is None else f"{r['compile_s']:.2f}"
        lines.append(
            f"{r['target']:<7} {r['impl']:<6} {r['variant']:<28} {r['status']:<13} {regs:>5} {spills:>6} "
            f"{smem:>7} {tc:>5} {secs:>6}"
            + (f"  {r['reason'][:100]}" if r["reason"] else f"  {forms}" if forms else "")
        )
    return lines


#: One SASS instruction: its address, optional predicate, opcode with modifiers (shapes such as
#: ``64x128x32`` among them), operands.
_SASS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][\w.]*)([^;]*);")
#: A tensor-core opcode (without modifiers): ``mma.sync`` (HMMA, IMMA, QMMA, DMMA, BMMA), ``wgmma``
#: (HGMMA, IGMMA, QGMMA, BGMMA) and ``tcgen05.mma`` (UTCHMMA, UTCQMMA, ...).
SASS_TENSOR = re.compile(r"(?:UTC)?[BDHIOQ]G?MMA(?=\.|$)")
_AMD_BRANCH = re.compile(r"^\s*s_(?:cbranch_\w+|branch)\s+(\.\w+)")
_AMD_LABEL = re.compile(r"^(\.\w+):")
_AMD_OP = re.compile(r"^\s*([a-z][a-z0-9_]*)\b")


def sass_instructions(sass: str) -> list[tuple[int, str, str]]:
    """(address, opcode with modifiers, operands) of every instruction in ``cuobjdump -sass`` text
    that can run (not those predicated on ``!PT``, never true: ptxas's padding)."""
    return [
        (int(m.group(1), 16), m.group(3), m.group(4).strip())
        for m in _SASS.finditer(sass)
        if (m.group(2) or "").strip() != "@!PT"
    ]


def _innermost(loops: list[list[str]], tensor: re.Pattern[str]) -> list[str]:
    """Of the loops (each its opcodes, in code order), the one with the most tensor-core
    instructions, the first on a tie (compilers lay the likely path out first)."""
    if not loops:
        return []
    return max(loops, key=lambda ops: sum(1 for op in ops if tensor.match(op)))


def sass_main_loop(sass: str) -> list[str]:
    """The opcodes of the main loop: of the spans from a backward branch's target to the branch,
    the one with the most tensor-core instructions (:data:`SASS_TENSOR`; the first on a tie)."""
    code = sass_instructions(sass)
    loops = []
    for addr, op, operands in code:
        target = re.match(r"(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", operands)
        if op.startswith("BRA") and target and target.group(1) and int(target.group(1), 16) <= addr:
            start = int(target.group(1), 16)
            loops.append([o for a, o, _ in code if start <= a <= addr])
    return _innermost(loops, SASS_TENSOR)


def _sass_width(op: str) -> int:
    mods = op.split(".")[1:]
    for mod, width in (("128", 128), ("64", 64), ("U16", 16), ("S16", 16), ("U8", 8), ("S8", 8)):
        if mod in mods:
            return width
    return 32


def sass_counts(ops: list[str]) -> dict[str, Any]:
    """What a span of SASS opcodes moves and computes: global loads, shared stores and loads by
    width in bits, asynchronous copies (``LDGSTS``), ``LDSM`` fragments, tensor-core instructions,
    barriers and local-memory (spill) loads and stores."""
    out: dict[str, Any] = {"global_loads": {}, "shared_stores": {}, "shared_loads": {}}
    for key, kind in (("LDG", "global_loads"), ("STS", "shared_stores"), ("LDS", "shared_loads")):
        for op in ops:
            if op.split(".")[0] == key:
                width = str(_sass_width(op))
                out[kind][width] = out[kind].get(width, 0) + 1
    first = [op.split(".")[0] for op in ops]
    out.update(
        async_copies=first.count("LDGSTS"),
        fragment_loads=first.count("LDSM"),
        tensor_ops=sum(1 for op in first if SASS_TENSOR.match(op)),
        barriers=sum(1 for op in ops if op.startswith("BAR.SYNC") or op == "BAR"),
        spill_traffic=first.count("LDL") + first.count("STL"),
    )
    return out


def amdgcn_main_loop(assembly: str) -> list[str]:
    """The mnemonics of the main loop of AMDGCN assembly: of the spans from a label to a later
    branch back to it, the one with the most ``v_mfma`` (the first where several have as many)."""
    lines = assembly.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _AMD_LABEL.match(line))}
    loops = []
    for i, line in enumerate(lines):
        found = _AMD_BRANCH.match(line)
        if found and labels.get(found.group(1), i + 1) < i:
            span = lines[labels[found.group(1)] : i + 1]
            loops.append([m.group(1) for text in span if (m := _AMD_OP.match(text))])
    return _innermost(loops, re.compile(r"v_mfma_"))


_AMD_WIDTH = {"ubyte": 8, "sbyte": 8, "ushort": 16, "sshort": 16, "short": 16, "u8": 8, "i8": 8, "u16": 16}
_AMD_WIDTH.update({"i16": 16, "b16": 16, "b8": 8, "dword": 32, "b32": 32, "dwordx2": 64, "b64": 64})
_AMD_WIDTH.update({"dwordx3": 96, "b96": 96, "dwordx4": 128, "b128": 128})


def _amd_width(op: str) -> str:
    parts = op.split("_")
    widths = [_AMD_WIDTH[p] for p in parts[2:] if p in _AMD_WIDTH]
    width = str(widths[0] if widths else 32)
    return f"2x{width}" if op.startswith(("ds_write2", "ds_read2")) else width


def amdgcn_counts(ops: list[str]) -> dict[str, Any]:
    """:func:`sass_counts` for AMDGCN mnemonics: ``global_load``/``buffer_load`` by width, LDS
    stores (``ds_write``) and loads (``ds_read``) by width, ``ds_read_b128`` as fragment loads,
    LDS-direct loads as asynchronous copies, ``v_mfma`` and ``s_barrier``."""
    out: dict[str, Any] = {"global_loads": {}, "shared_stores": {}, "shared_loads": {}}
    for prefix, kind in (("global_load", "global_loads"), ("buffer_load", "global_loads")):
        for op in (op for op in ops if op.startswith(prefix) and "lds" not in op):
            out[kind][_amd_width(op)] = out[kind].get(_amd_width(op), 0) + 1
    for prefix, kind in (("ds_write", "shared_stores"), ("ds_store", "shared_stores")):
        for op in (op for op in ops if op.startswith(prefix)):
            out[kind][_amd_width(op)] = out[kind].get(_amd_width(op), 0) + 1
    for op in (op for op in ops if op.startswith(("ds_read", "ds_load"))):
        out["shared_loads"][_amd_width(op)] = out["shared_loads"].get(_amd_width(op), 0) + 1
    out.update(
        async_copies=sum(1 for op in ops if op.startswith(("global_load", "buffer_load")) and "lds" in op),
        fragment_loads=sum(1 for op in ops if op in ("ds_read_b128", "ds_load_b128")),
        tensor_ops=sum(1 for op in ops if op.startswith("v_mfma")),
        barriers=ops.count("s_barrier"),
        spill_traffic=sum(1 for op in ops if op.startswith("scratch_")),
    )
    return out


def find_cuobjdump(ptxas: str) -> str | None:
    """``cuobjdump``: beside ``ptxas`` (Triton's wheel ships both), else on PATH."""
    beside = Path(ptxas).parent / "cuobjdump"
    return str(beside) if beside.is_file() else shutil.which("cuobjdump")


def data_path(code: str, vendor: str, tensor_per_k_tile: int | None = None) -> dict[str, Any]:
    """The main loop's data path (:func:`sass_counts` of ``cuobjdump -sass`` text, or
    :func:`amdgcn_counts` of AMDGCN assembly): with ``tensor_per_k_tile`` (the tensor-core
    instructions one K tile issues), also the K tiles one trip of the loop covers and its
    barriers per K tile."""
    if vendor == "nvidia":
        counts = sass_counts(sass_main_loop(code))
    else:
        counts = amdgcn_counts(amdgcn_main_loop(code))
    counts["scope"] = "main loop"
    tiles = counts["tensor_ops"] // tensor_per_k_tile if tensor_per_k_tile else 0
    counts["k_tiles"] = tiles or None
    counts["barriers_per_k_tile"] = counts["barriers"] / tiles if tiles else None
    return counts


def llvm_data_path(assembly: str, arch: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """:func:`data_path` of an llvmlite kernel's PTX (assembled, then ``cuobjdump -sass``) or
    AMDGCN assembly; per K tile for the mma form (``FM x FN`` instructions per 16 K); None
    where no ``cuobjdump`` is found."""
    per_tile = config["FM"] * config["FN"] * config["TK"] // 16 if config.get("MMA") else None
    if not arch.startswith("sm_"):
        return data_path(assembly, "amd", per_tile)
    ptxas = find_ptxas(True, arch)  # Triton's wheel ships cuobjdump beside its ptxas
    cuobjdump = find_cuobjdump(ptxas) if ptxas else None
    if ptxas is None or cuobjdump is None:
        return None
    with tempfile.TemporaryDirectory(prefix="hwbench-sass-") as tmp:
        Path(tmp, "k.ptx").write_text(assembly)
        cubin = str(Path(tmp, "k.cubin"))
        subprocess.run(
            [ptxas, f"-arch={arch}", str(Path(tmp, "k.ptx")), "-o", cubin], check=True, timeout=_PTXAS_TIMEOUT_S
        )
        sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, check=True).stdout
    return data_path(sass, "nvidia", per_tile)
