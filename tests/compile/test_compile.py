"""``hwbench compile``: every GPU kernel compiled for sm_90 and gfx942 without a GPU.

One run of the command (module fixture) compiles every Triton variant and llvmlite kernel;
the tests then read its results file. The parsers are checked on frozen compiler output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import needs
import pytest
from conftest import hwbench_cmd

from hwbench.compile.stats import amdgcn_stats, short_form, tensor_core_counts
from hwbench.results.files import validate

needs.module("triton")
needs.module("llvmlite")

TARGETS = ("sm_90", "gfx942")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("compile") / "compile.json"
    temp = tmp_path_factory.mktemp("compile-tmp")  # the run's TMPDIR: it must be empty afterwards
    proc = subprocess.run(
        hwbench_cmd("compile", "--target", ",".join(TARGETS), "--out", str(out), "--quiet"),
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TMPDIR": str(temp)},  # conftest set TRITON_CACHE_DIR: the user's own is kept
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    doc["_stdout"] = proc.stdout
    doc["_rc"] = proc.returncode
    doc["_left_in_tmp"] = sorted(p.name for p in temp.iterdir())
    return doc


def test_results_file_is_valid_and_has_only_compile_records(compiled: dict) -> None:
    doc = {k: v for k, v in compiled.items() if not k.startswith("_")}
    assert validate(doc) == []
    assert doc["records"] == [] and doc["compile"]
    assert doc["software"]["triton"] and doc["software"]["llvmlite"]


@pytest.mark.parametrize("target", TARGETS)
def test_every_kernel_compiles_for_target(compiled: dict, target: str) -> None:
    mine = [r for r in compiled["compile"] if r["target"] == target]
    failed = [(r["variant"], r["reason"]) for r in mine if r["status"] != "ok"]
    assert not failed, failed
    variants = {(r["impl"], r["variant"]) for r in mine}
    for dtype in ("fp16", "bf16", "fp32", "tf32"):
        assert ("triton", f"gemm_{dtype}") in variants
        # the persistent TMA GEMM: sm_90 and newer, tensor-core dtypes only
        assert (("triton", f"gemm_{dtype}_tma") in variants) == (target == "sm_90" and dtype != "fp32")
    for dtype in ("fp16", "bf16", "fp32"):
        for d in (64, 128):
            assert ("triton", f"attention_{dtype}_d{d}") in variants
            assert ("triton", f"attention_{dtype}_d{d}_causal") in variants
    for kernel in ("gemm", "attention"):
        for dtype in ("fp32", "fp64"):
            assert ("llvm", f"{kernel}_{dtype}") in variants
    assert compiled["_rc"] == 0


@pytest.mark.parametrize("target", TARGETS)
def test_records_carry_compiler_facts(compiled: dict, target: str) -> None:
    for r in (r for r in compiled["compile"] if r["target"] == target):
        assert r["registers"] and r["registers"] > 0, r
        assert r["compile_s"] > 0 and r["spilled"] in (True, False)
        assert r["shared_bytes"] is not None and r["private_bytes"] is not None
        if target.startswith("sm_"):
            assert r["assembler"]["tool"] == "ptxas" and r["assembler"]["arch"].startswith(target)
            assert r["spill_stores_bytes"] is not None
        else:
            assert r["sgprs"] and r["vgpr_spills"] is not None


def test_tensor_cores_are_used_where_they_should_be(compiled: dict) -> None:
    # Triton's variants; the llvmlite work-group kernels have no mma path yet (FMA units).
    by = {(r["target"], r["variant"]): r["tensor_core"] for r in compiled["compile"] if r["impl"] == "triton"}
    for dtype in ("fp16", "bf16", "tf32"):
        assert by[("sm_90", f"gemm_{dtype}")]["wgmma"] > 0
        assert by[("sm_90", f"gemm_{dtype}_tma")]["wgmma"] > 0
        assert by[("gfx942", f"gemm_{dtype}")]["mfma"] > 0
    assert by[("sm_90", "gemm_fp32")] == {"mma": 0, "wgmma": 0, "mfma": 0}  # IEEE fp32: FMA units
    for dtype in ("fp16", "bf16"):
        assert sum(by[("sm_90", f"attention_{dtype}_d128_causal")].values()) > 0
        assert by[("gfx942", f"attention_{dtype}_d128_causal")]["mfma"] > 0


@pytest.mark.parametrize(
    ("target", "variant", "form"),
    [
        ("sm_90", "gemm_fp8", r"^wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.e4m3\.e4m3$"),
        ("sm_90", "gemm_int8", r"^wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.s32\.s8\.s8$"),
        ("gfx942", "gemm_fp8", r"^v_mfma_f32_\d+x\d+x\d+_fp8_fp8$"),
        ("gfx942", "gemm_int8", r"^v_mfma_i32_\d+x\d+x\d+_i8$"),
    ],
)
def test_fp8_and_int8_gemm_use_their_tensor_core_instructions_without_spills(
    compiled: dict, target: str, variant: str, form: str
) -> None:
    (r,) = [r for r in compiled["compile"] if (r["target"], r["impl"], r["variant"]) == (target, "triton", variant)]
    assert r["status"] == "ok" and r["spilled"] is False, r
    forms = r["tensor_core_forms"]
    assert forms and all(re.match(form, f) for f in forms), forms
    assert sum(forms.values()) == sum(r["tensor_core"].values()) > 0
    assert r["config"]["BLOCK_K"] >= 64  # one-byte operands: at least bf16's bytes per stage
    line = next(x for x in compiled["_stdout"].splitlines() if x.startswith(target) and f" {variant} " in x)
    assert short_form(next(iter(forms))) in line


@pytest.mark.parametrize("variant", ["gemm_bf16", "gemm_bf16_tma"])
def test_sm90_bf16_gemm_compiles_pipelined_without_spills(compiled: dict, variant: str) -> None:
    (r,) = [r for r in compiled["compile"] if (r["target"], r["impl"], r["variant"]) == ("sm_90", "triton", variant)]
    cfg = r["config"]
    tiles = (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2  # one stage of A and B, bf16
    assert r["spilled"] is False and cfg["num_stages"] >= 3
    # as the JIT compiles it (tests/kernels/test_triton_codegen.py): A and B multi-buffered in shared memory
    assert r["shared_bytes"] >= (cfg["num_stages"] - 1) * tiles
    assert cfg["shape"] == {"M": 4096, "N": 4096, "K": 4096}


@pytest.mark.parametrize("target", TARGETS)
def test_the_llvm_mma_gemm_records_carry_its_data_path(compiled: dict, target: str) -> None:
    (r,) = [r for r in compiled["compile"] if (r["target"], r["impl"], r["variant"]) == (target, "llvm", "gemm_bf16")]
    path = r["data_path"]
    assert path["scope"] == "main loop" and path["barriers_per_k_tile"] == 1 and path["tensor_ops"] > 0, path
    assert path["spill_traffic"] == 0 and path["fragment_loads"] > 0, path  # ldmatrix / ds_read_b128
    if target.startswith("sm_"):  # cp.async only: no global load into registers at all
        assert path["async_copies"] > 0 and path["global_loads"] == {} and r["registers"] <= 128, (path, r)
    else:  # global_load_dwordx4 only
        assert set(path["global_loads"]) == {"128"} and set(path["shared_loads"]) == {"128"}, path


def test_summary_is_printed(compiled: dict) -> None:
    assert "wrote " in compiled["_stdout"] and "gemm_bf16" in compiled["_stdout"]


@pytest.mark.parametrize("target", ["sm_xx", "gfx", "cuda", ""])
def test_bad_target_is_one_line_and_exit_2(tmp_path: Path, target: str) -> None:
    proc = subprocess.run(
        hwbench_cmd("compile", "--target", target, "--out", str(tmp_path / "x.json")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--target" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_unknown_kernel_is_rejected(tmp_path: Path) -> None:
    proc = subprocess.run(
        hwbench_cmd("compile", "--kernel", "allreduce", "--out", str(tmp_path / "x.json")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "unknown --kernel 'allreduce'" in proc.stderr


def test_amdgcn_metadata_parser() -> None:
    text = """
    .amdgpu_metadata
    amdhsa.kernels:
      - .agpr_count:     4
        .group_segment_fixed_size: 16384
        .private_segment_fixed_size: 96
        .sgpr_count:     88
        .sgpr_spill_count: 3
        .vgpr_count:     200
        .vgpr_spill_count: 7
    v_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], a[0:15]
      v_mfma_f32_32x32x8_f16 a[0:15], v[4:5], v[6:7], a[0:15]
    """
    stats = amdgcn_stats(text)
    assert (stats["registers"], stats["sgprs"], stats["agprs"]) == (200, 88, 4)
    assert (stats["vgpr_spills"], stats["sgpr_spills"], stats["spilled"]) == (7, 3, True)
    assert (stats["shared_bytes"], stats["private_bytes"]) == (16384, 96)
    assert tensor_core_counts(text) == {"mma": 0, "wgmma": 0, "mfma": 2}


def test_ptx_tensor_core_counter() -> None:
    ptx = (
        "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f1};\n"
        "\twgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 1;\n"
        "\twgmma.fence.sync.aligned;\n// mma.sync in a comment\n"
    )
    assert tensor_core_counts(ptx) == {"mma": 1, "wgmma": 1, "mfma": 0}


#: ``cuobjdump -sass`` lines of Triton 3.9's sm_90 GEMMs (fp8 ``QGMMA``, int8 ``IGMMA``, bf16 ``HGMMA``):
#: a first loop without tensor-core instructions, then the main loop (the padding ``@!PT`` not run).
SASS = """
        /*0380*/                   LDG.E.128 R4, desc[UR6][R2.64] ;                             /* 0x0000000602047981 */
        /*0390*/                   IMAD.X R3, RZ, RZ, R5, P0 ;                                  /* 0x000000ffff037224 */
        /*03a0*/              @!P0 BRA 0x380 ;                                                  /* 0xfffffff400e88947 */
        /*2610*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR20+0x30000], R35 ;     /* 0x03000023ff0075a7 */
        /*2620*/                   WARPGROUP.ARRIVE ;                                           /* 0x00000000000079c5 */
        /*2630*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR16], RZ, !UPT ;   /* 0x01e00000101879f3 */
        /*2640*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR16], R24, gsb0 ;  /* 0x01e00000101879f3 */
        /*2650*/                   IGMMA.64x128x32.S8.S8 R88, gdesc[UR20], R88 ;                /* 0x03600000145879f1 */
        /*2660*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8].tnspB, R24 ;        /* 0x41e00000081879f0 */
        /*2670*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;                              /* 0x00008000000079c5 */
        /*2680*/                   @UP0 UTMALDG.2D [UR36], [UR16] ;                             /* 0x00000024100005b4 */
        /*2690*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                                /* 0x0000000000007b1d */
        /*26a0*/               @P0 BRA 0x2610 ;                                                 /* 0xffffffe400fc0947 */
        /*26b0*/                  @!PT LDS RZ, [RZ] ;                                           /* 0x00000000fffff984 */
        /*26c0*/                   BRA 0x26c0;                                                  /* 0xfffffffc00fc7947 */
"""


def test_the_sass_main_loop_is_the_one_with_wgmma_of_every_type_and_keeps_whole_opcodes() -> None:
    from hwbench.compile.stats import sass_counts, sass_instructions, sass_main_loop

    ops = [op for _, op, _ in sass_instructions(SASS)]
    assert "IMAD.X" in ops and "HGMMA.64x256x16.F32.BF16" in ops and "LDS" not in ops
    loop = sass_main_loop(SASS)
    assert loop[0] == "SYNCS.PHASECHK.TRANS64.TRYWAIT" and loop[-1] == "BRA", loop
    assert loop.count("QGMMA.64x128x32.F32.E4M3.E4M3") == 2 and "IGMMA.64x128x32.S8.S8" in loop, loop
    counts = sass_counts(loop)
    assert counts["tensor_ops"] == 4 and counts["global_loads"] == {} and counts["barriers"] == 1, counts
    fp8_only = "\n".join(line for line in SASS.splitlines() if "HGMMA" not in line)
    assert sass_main_loop(fp8_only) == [op for op in loop if not op.startswith("HGMMA")]  # not the first loop
    assert sass_counts(["HMMA.16816.F32.BF16", "IMMA.16832.S8.S8", "UTCQMMA", "HMNMX2", "DMUL"])["tensor_ops"] == 3


def test_ptxas_parser_on_real_ptx(tmp_path: Path) -> None:
    from hwbench.compile.stats import find_ptxas, ptxas_stats

    ptxas = find_ptxas(prefer_triton=False)
    if ptxas is None:
        pytest.skip("no ptxas on PATH and none bundled with Triton")
    ptx = (
        ".version 7.8\n.target sm_80\n.address_size 64\n"
        ".visible .entry k(.param .u64 p)\n{\n.reg .b64 %rd<2>;\n.reg .f32 %f<2>;\n"
        "ld.param.u64 %rd1, [p];\ncvta.to.global.u64 %rd1, %rd1;\nmov.f32 %f1, 0f3F800000;\n"
        "st.global.f32 [%rd1], %f1;\nret;\n}\n"
    )
    stats = ptxas_stats(ptx, ptxas)
    assert stats["registers"] is not None and 0 < stats["registers"] < 32
    assert stats["spill_stores_bytes"] == 0 and stats["spilled"] is False
    assert stats["assembler"]["arch"] == "sm_80" and stats["shared_bytes"] == 0


def test_compile_runs_in_children_and_records_crashes() -> None:
    from hwbench.compile.jobs import run_jobs

    records = run_jobs([{"arch": "sm_90", "kernel": "nonexistent", "impl": "llvm", "variant": "fp32"}], 1)
    assert len(records) == 1 and records[0]["status"] == "crashed"
    assert "nonexistent" in records[0]["reason"]


def test_a_compile_run_leaves_nothing_in_the_temporary_folder(compiled: dict) -> None:
    assert compiled["_left_in_tmp"] == []


@pytest.mark.parametrize("user_cache", [False, True])
def test_compile_jobs_leave_no_triton_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_cache: bool
) -> None:
    from hwbench.compile.jobs import run_jobs

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the children's temporary folder
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # and this process's
    mine = tmp_path / "my-triton-cache"
    if user_cache:
        monkeypatch.setenv("TRITON_CACHE_DIR", str(mine))
    else:
        monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    jobs = [{"arch": "sm_90", "kernel": "nonexistent", "impl": "llvm", "variant": d} for d in ("fp32", "fp16")]
    records = run_jobs(jobs, 2)
    assert [r["status"] for r in records] == ["crashed", "crashed"]
    assert list(temp.iterdir()) == []
    assert not mine.exists()  # a user's cache folder is named to Triton, never made by hwbench


def test_compile_children_use_the_runs_triton_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hwbench.compile.jobs import child_env, triton_cache

    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "0")  # child_env sets these: restored after the test
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with triton_cache() as folder:
        assert Path(folder).is_dir() and Path(folder).parent == tmp_path
        child_env(folder)
        assert os.environ["TRITON_CACHE_DIR"] == folder and os.environ["TRITON_ALWAYS_COMPILE"] == "1"
    assert not Path(folder).exists()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    with triton_cache() as folder:
        assert folder == str(tmp_path / "mine")


def test_compile_progress_prints_names_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    from hwbench.compile.jobs import run_jobs

    (record,) = run_jobs([{"arch": "sm_90", "kernel": "evil\x1b[2J", "impl": "llvm", "variant": "fp32"}], 1, True)
    assert record["status"] == "crashed"
    err = capsys.readouterr().err
    assert "evil\\x1b[2J" in err and "\x1b" not in err
