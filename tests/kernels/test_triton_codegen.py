"""The Triton kernels as Triton's JIT compiles them at run time, cross-compiled and read without a GPU.

One child process (module fixture) compiles each case twice for its target: once the way
``hwbench compile`` does (:func:`hwbench.compile.stats.variant_record`, which builds the
``ASTSource`` through :func:`hwbench.kernels.triton_compat.ast_source`), once through Triton's own
JIT (``kernel.warmup(...)`` of the same call, with a stand-in driver that names the target:
``triton.runtime.driver.set_active``, in Triton 3.6 and 3.9 alike). The tests then read the
generated code of the JIT's build: global load widths and ``cp.async`` sizes in PTX,
``*_load_dwordx4`` in AMDGCN, tensor-memory (TMA) copies, pipeline stages and spills. Without
compiling, the specialization ``hwbench compile`` derives is checked against the one Triton's
own binder derives for arguments of every kind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import needs
import pytest

needs.module("triton")
needs.module("torch", "Triton's JIT takes torch dtypes for its tensor arguments")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from hwbench.kernels import triton_compat as compat  # noqa: E402

#: (kernel, target, variant) compiled by the child.
CASES = [
    *(("gemm", "sm_90", f"gemm_{d}") for d in ("fp16", "bf16", "fp32", "tf32")),
    *(("gemm", "sm_90", f"gemm_{d}_tma") for d in ("fp16", "bf16", "tf32", "fp8")),
    *(("gemm", "sm_80", f"gemm_{d}") for d in ("fp16", "bf16", "tf32")),
    *(("gemm", "gfx942", f"gemm_{d}") for d in ("fp16", "bf16")),
    ("attention", "sm_90", "attention_bf16_d128_causal"),
    ("attention", "sm_80", "attention_fp16_d64"),
    ("attention", "gfx942", "attention_bf16_d128_causal"),
]

_CHILD = textwrap.dedent("""
    import hashlib, json, sys
    import torch
    from triton.runtime.driver import driver
    from triton.tools.tensor_descriptor import TensorDescriptor
    from hwbench.compile.stats import compile_variant, triton_stats, triton_target, variant_record
    from hwbench.core.kernel import get_kernel
    from hwbench.kernels.triton_compat import DescriptorArg, Pointer

    TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp8e4nv": torch.float8_e4m3fn}

    class Tensor:
        # What Triton's JIT reads of a tensor argument (its MockTensor has wrong strides beyond 2-D).
        def __init__(self, p):
            self.dtype, self.shape, self._p = TORCH[p.element], list(p.shape), p
        def data_ptr(self):
            return self._p.data_ptr()
        def stride(self):
            return self._p.stride()
        def ptr_range(self):
            return self._p.ptr_range()

    class Driver:
        # Triton's JIT asks the active driver for the device, the stream and the target only; it
        # keeps one target per device, so each target is a device of its own.
        def __init__(self, target, device):
            self.target, self.device = target, device
        def get_current_device(self):
            return self.device
        def get_current_stream(self, device=None):
            return 0
        def get_current_target(self):
            return self.target

    def jit_arg(value):
        if isinstance(value, Pointer):
            return Tensor(value)
        if isinstance(value, DescriptorArg):
            base = Tensor(value.base)
            return TensorDescriptor(base, base.shape, list(base.stride()), list(value.block_shape))
        return value

    def facts(compiled, arch):
        key = "ptx" if arch.startswith("sm_") else "amdgcn"
        stats = triton_stats(compiled, arch)
        return {
            "asm": compiled.asm[key],
            "forms": stats.get("tensor_core_forms"),
            "asm_sha": hashlib.sha256(compiled.asm[key].encode()).hexdigest(),
            "num_stages": compiled.metadata.num_stages,
            "shared": compiled.metadata.shared,
            **{k: stats.get(k) for k in ("registers", "spilled", "shared_bytes", "spill_stores_bytes", "vgpr_spills")},
        }

    out = {}
    for kernel, arch, name in json.loads(sys.argv[1]):
        target = triton_target(arch)
        (variant,) = [v for v in get_kernel(kernel).source_module("triton").compile_variants(arch) if v["name"] == name]
        record = variant_record(kernel, arch, variant, target)
        ours = facts(compile_variant(variant, target), arch)
        driver.set_active(Driver(target, sorted({c[1] for c in json.loads(sys.argv[1])}).index(arch)))
        args = {k: jit_arg(v) for k, v in variant["args"].items()}
        jit = facts(variant["fn"].warmup(grid=(1,), **args, **variant["options"]), arch)
        out[f"{arch}/{name}"] = {"record": record, "ours": ours, "jit": jit, "config": variant["config"]}
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every case compiled both ways in one child; facts by ``target/variant``."""
    cache = tmp_path_factory.mktemp("triton-cache")
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache), TRITON_DEFAULT_FP_FUSION="1", TRITON_INTERPRET="0")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(CASES)], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ptx_loads(ptx: str) -> dict[str, list[int]]:
    """Bytes per instruction of each kind of global load in PTX: ``ld.global`` (to registers),
    ``cp.async`` (global to shared) and ``cp.async.bulk.tensor`` (TMA, counted as 0 bytes)."""
    widths = []
    for op in re.findall(r"^\s*(?:@!?%p\d+\s+)?ld\.global((?:\.[\w:]+)*)\s", ptx, re.M):
        vec = re.search(r"\.v(\d)", op)
        bits = re.search(r"\.[bfsu](\d+)$", op)
        widths.append((int(vec.group(1)) if vec else 1) * (int(bits.group(1)) // 8 if bits else 0))
    copies = [int(size, 0) for size in re.findall(r"cp\.async\.c[ag]\.shared\.global[^;]*?,[^;]*?,\s*(\w+)", ptx)]
    tma = re.findall(r"^\s*(?:@!?%p\d+\s+)?cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global", ptx, re.M)
    return {"ld.global": widths, "cp.async": copies, "tma": [0] * len(tma)}


def amd_loads(amdgcn: str) -> list[str]:
    """The global and buffer load instructions of AMDGCN assembly (``global_load_dwordx4``, ...)."""
    return re.findall(r"^\s*((?:global|buffer)_load_\w+)", amdgcn, re.M)


def back_edges(ptx: str) -> int:
    """Branches in PTX to a label above them (loops)."""
    labels: set[str] = set()
    count = 0
    for line in ptx.splitlines():
        if m := re.match(r"^(\$L__\w+):", line):
            labels.add(m.group(1))
        elif m := re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", line):
            count += m.group(1) in labels
    return count


def test_load_parsers_on_frozen_code() -> None:
    ptx = (
        "\tld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];\n"
        "\t@%p3 ld.global.b16 { %rs1 }, [ %rd2 + 0 ];\n"
        "\tcp.async.cg.shared.global [ %r5 + 0 ], [ %rd3 + 0 ], 0x10, %r6;\n"
        "\tcp.async.ca.shared.global [ %r7 + 0 ], [ %rd4 + 0 ], 4, %r6;\n"
        "\t@%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%r1], [%rd5, {%r2, %r3}], [%r4];\n"
        "\tcp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd6, {%r8, %r9}], [%r10];\n"
    )
    assert ptx_loads(ptx) == {"ld.global": [16, 2], "cp.async": [16, 4], "tma": [0]}
    amd = "  buffer_load_dwordx4 v[0:3], v4, s[0:3], 0 offen\n  global_load_ushort v5, v[6:7], off\n"
    assert amd_loads(amd) == ["buffer_load_dwordx4", "global_load_ushort"]
    loop = "$L__BB0_1:\n\tadd.s32 %r1, %r1, %r2;\n\t@%p1 bra $L__BB0_1;\n\tbra.uni $L__BB0_2;\n$L__BB0_2:\n\tret;\n"
    assert back_edges(loop) == 1


@pytest.mark.parametrize("kernel,target,variant", CASES)
def test_hwbench_compile_builds_the_kernel_the_jit_builds(built: dict, kernel: str, target: str, variant: str) -> None:
    case = built[f"{target}/{variant}"]
    record, ours, jit = case["record"], case["ours"], case["jit"]
    assert record["status"] == "ok", record["reason"]
    assert ours["asm_sha"] == jit["asm_sha"]  # the same code, so the same figures
    for key in ("registers", "spilled", "shared_bytes"):
        assert record[key] == jit[key], (key, record[key], jit[key])
    assert record["config"]["num_stages"] == jit["num_stages"]


def _operand_bytes(config: dict, dtype: str) -> int:
    size = 2 if dtype in ("fp16", "bf16") else 4
    return (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * size


def _buffered(jit: dict, config: dict, dtype: str) -> bool:
    """Whether shared memory holds at least ``num_stages - 1`` copies of both operand tiles (the
    loads in flight while the oldest is multiplied)."""
    return jit["shared"] >= (jit["num_stages"] - 1) * _operand_bytes(config, dtype)


# sm_90 tf32 is left out: wgmma takes tf32 B K-major only, so Triton copies the classic kernel's
# row-major B 4 bytes at a time there; the TMA kernel is that case's fast path (below).
@pytest.mark.parametrize(
    "target,dtype",
    [("sm_90", "fp16"), ("sm_90", "bf16"), ("sm_90", "fp32"), ("sm_80", "fp16"), ("sm_80", "bf16"), ("sm_80", "tf32")],
)
def test_classic_gemm_loads_both_operands_16_bytes_wide_and_pipelined(built: dict, target: str, dtype: str) -> None:
    case = built[f"{target}/gemm_{dtype}"]
    jit, config = case["jit"], case["config"]
    loads = ptx_loads(jit["asm"])
    assert loads["cp.async"] and set(loads["cp.async"]) == {16}, loads
    assert set(loads["ld.global"]) <= {16}, loads  # no scalar loads of A or B
    assert jit["num_stages"] >= 3 and _buffered(jit, config, dtype), (jit["num_stages"], jit["shared"])
    assert jit["spilled"] is False and jit["spill_stores_bytes"] == 0


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_classic_gemm_on_gfx942_loads_dwordx4(built: dict, dtype: str) -> None:
    jit = built[f"gfx942/gemm_{dtype}"]["jit"]
    loads = amd_loads(jit["asm"])
    assert loads and set(loads) <= {"global_load_dwordx4", "buffer_load_dwordx4"}, sorted(set(loads))
    assert jit["spilled"] is False and jit["vgpr_spills"] == 0


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
def test_tma_gemm_is_persistent_and_loads_through_tma(built: dict, dtype: str) -> None:
    from hwbench.kernels.gemm.gpu import triton as gemm_tt

    case = built[f"sm_90/gemm_{dtype}_tma"]
    jit, config, ptx = case["jit"], case["config"], case["jit"]["asm"]
    loads = ptx_loads(ptx)
    assert loads["tma"] and not loads["cp.async"] and not loads["ld.global"], loads
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx)  # C stored by TMA as well
    assert config["kernel"] == "tma_persistent" and config["grid"] == [gemm_tt.COMPILE_SMS]
    assert "%nctaid.x" in ptx and back_edges(ptx) >= 1  # a loop over tiles, striding by the grid
    assert jit["num_stages"] >= 3 and _buffered(jit, config, dtype), (jit["num_stages"], jit["shared"])
    assert jit["spilled"] is False and jit["spill_stores_bytes"] == 0


#: One SASS instruction of ``cuobjdump -sass``: address, predicate, opcode with modifiers, operands.
_SASS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\b([^;]*);")


def sass_of(ptx: str, arch: str) -> str:
    """``cuobjdump -sass`` of ``ptx`` assembled by Triton's ``ptxas`` for ``arch`` (both ship in Triton's wheel)."""
    from hwbench.compile.stats import find_cuobjdump, find_ptxas

    ptxas = find_ptxas(True, arch)
    cuobjdump = find_cuobjdump(ptxas) if ptxas else None
    if not cuobjdump:
        pytest.skip("no ptxas/cuobjdump in this Triton install")
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M).group(1)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "k.ptx").write_text(ptx)
        subprocess.run([ptxas, f"-arch={target}", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"], check=True, timeout=300)
        return subprocess.run([cuobjdump, "-sass", f"{tmp}/k.cubin"], capture_output=True, text=True, check=True).stdout


def sass_loop_with(sass: str, opcode: str) -> list[str]:
    """Opcodes of the smallest loop (a conditional branch back to an earlier address, through it) that
    holds ``opcode``: the main loop, for the tensor-core instruction."""
    code = [(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4)) for m in _SASS.finditer(sass)]
    spans = []
    for addr, pred, op, operands in code:
        target = re.match(r"\s*0x([0-9a-f]+)", operands)
        if op.startswith("BRA") and pred and target and int(target.group(1), 16) <= addr:
            ops = [o for a, p, o, _ in code if int(target.group(1), 16) <= a <= addr and p != "@!PT"]
            if any(o.split(".")[0] == opcode for o in ops):
                spans.append(ops)
    return min(spans, key=len) if spans else []


def test_fp8_tma_gemm_feeds_k_major_operands_by_tma_to_e4m3_wgmma(built: dict) -> None:
    """fp8's persistent TMA GEMM: A and B^T (the K-major B) reach shared memory by TMA only, wgmma
    multiplies e4m3 by e4m3 from there, C leaves by TMA, and nothing spills."""
    case = built["sm_90/gemm_fp8_tma"]
    jit, config, ptx = case["jit"], case["config"], case["jit"]["asm"]
    assert config["kernel"] == "tma_persistent" and config["b_layout"] == "k_major" and config["grid"] == [132]
    loads = ptx_loads(ptx)
    assert loads["tma"] and not loads["cp.async"] and loads["ld.global"] == [4, 4], loads  # the two scales
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx)  # C stored by TMA
    e4m3 = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.e4m3\.e4m3")
    assert jit["forms"] and all(e4m3.fullmatch(f) for f in jit["forms"]), jit["forms"]
    assert "%nctaid.x" in ptx and back_edges(ptx) >= 1
    stage = (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"]  # one byte an element
    assert jit["num_stages"] >= 3 and jit["shared"] >= (jit["num_stages"] - 1) * stage, jit["shared"]
    assert jit["spilled"] is False and jit["spill_stores_bytes"] == 0
    loop = sass_loop_with(sass_of(ptx, "sm_90"), "QGMMA")  # QGMMA: Hopper's fp8 warpgroup MMA
    assert any(op.startswith("QGMMA.") and op.endswith(".F32.E4M3.E4M3") for op in loop), sorted(set(loop))
    assert "UTMALDG.2D" in loop and "SYNCS.PHASECHK.TRANS64.TRYWAIT" in loop  # TMA loads, mbarrier waits
    assert not {op.split(".")[0] for op in loop} & {"LDG", "LDGSTS", "LDS", "LDSM", "STL", "LDL"}, sorted(set(loop))


@pytest.mark.parametrize("target,variant", [("sm_90", "attention_bf16_d128_causal"), ("sm_80", "attention_fp16_d64")])
def test_attention_loads_are_16_bytes_wide_and_pipelined(built: dict, target: str, variant: str) -> None:
    jit = built[f"{target}/{variant}"]["jit"]
    loads = ptx_loads(jit["asm"])
    assert loads["cp.async"] and set(loads["cp.async"]) == {16}, loads  # K and V
    assert loads["ld.global"] and set(loads["ld.global"]) == {16}, loads  # Q
    assert jit["num_stages"] >= 3 and jit["spilled"] is False


def test_attention_on_gfx942_loads_dwordx4(built: dict) -> None:
    jit = built["gfx942/attention_bf16_d128_causal"]["jit"]
    loads = amd_loads(jit["asm"])
    assert loads and set(loads) <= {"global_load_dwordx4", "buffer_load_dwordx4"}, sorted(set(loads))
    assert jit["spilled"] is False


@triton.jit(do_not_specialize=["nospec"], do_not_specialize_on_alignment=["noalign"])
def _every_kind(
    p, q, big_p, n, odd, one, big, huge, neg, flag, x, desc, nospec, noalign, typed: tl.int64, C: tl.constexpr
):
    pass


class _JitTensor:
    """What Triton's JIT reads of a tensor argument, for a :class:`compat.Pointer`."""

    def __init__(self, p: compat.Pointer) -> None:
        self.dtype = {"fp16": torch.float16, "fp32": torch.float32}[p.element]
        self.shape, self._p = list(p.shape), p

    def data_ptr(self) -> int:
        return self._p.data_ptr()

    def stride(self) -> tuple[int, ...]:
        return self._p.stride()

    def ptr_range(self) -> int:
        return self._p.ptr_range()


@pytest.mark.parametrize(
    "target", [GPUTarget("cuda", 90, 32), GPUTarget("cuda", 80, 32), GPUTarget("hip", "gfx942", 64)]
)
def test_specialization_is_the_jit_binders(target: GPUTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when the options leave it unset
    base = compat.Pointer("fp16", (64, 64))
    ours = {
        "p": base,
        "q": compat.Pointer("fp16", (64,), address=8),  # not 16-byte aligned
        "big_p": compat.Pointer("fp32", (2**30,)),  # 4 GiB: past AMD's 32-bit buffer range
        "n": 4096,
        "odd": 37,
        "one": 1,
        "big": 2**40,
        "huge": 2**63,
        "neg": -16,
        "flag": True,
        "x": 1.5,
        "desc": compat.descriptor(base, (32, 16)),
        "nospec": 1,
        "noalign": 64,
        "typed": 1,
        "C": 8,
    }
    jit = {k: _JitTensor(v) if isinstance(v, compat.Pointer) else v for k, v in ours.items()}
    jit["desc"] = TensorDescriptor(jit["p"], [64, 64], [64, 1], [32, 16])
    backend = make_backend(target)
    binder = create_function_from_signature(_every_kind.signature, _every_kind.params, backend)
    bound, specialization, options = binder(**jit)
    _, signature, constants, attrs = _every_kind._pack_args(backend, {}, bound, specialization, options)
    got_signature, got_constants, got_attrs = compat.jit_specialization(_every_kind, ours, target)
    assert got_signature == signature
    assert got_constants == constants
    assert {k: v for k, v in got_attrs.items() if v} == {k: v for k, v in attrs.items() if v}
    assert signature["one"] == "constexpr" and signature["nospec"] == "i32" and signature["typed"] == "i64"
    assert signature["desc"] == "tensordesc<fp16[32, 16]>"
    assert got_attrs[(3,)] == [["tt.divisibility", 16]] and got_attrs[(4,)] == []  # n = 4096, odd = 37


def test_specialization_refuses_a_call_that_does_not_fit() -> None:
    args = {p.name: 1 for p in _every_kind.params}
    del args["C"]
    with pytest.raises(ValueError, match="missing \\['C'\\]"):
        compat.jit_specialization(_every_kind, args, GPUTarget("cuda", 90, 32))
    with pytest.raises(TypeError, match="no compile-only form"):
        compat.jit_specialization(_every_kind, {**args, "C": 1, "p": object()}, GPUTarget("cuda", 90, 32))


def test_pointer_stand_in_is_row_major() -> None:
    p = compat.Pointer("bf16", (2, 3, 5, 7))
    assert p.stride() == (105, 35, 7, 1) and p.ptr_range() == 2 * 3 * 5 * 7 * 2 and p.data_ptr() == 0
