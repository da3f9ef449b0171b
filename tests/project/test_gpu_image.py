"""ci/gpu-check.sh against the GPU machine's own packages, without the GPU machine.

The GPU machine's image (Python 3.12, torch 2.11 on CUDA 13, Triton 3.6, cupy-cuda13x 14.2,
nvidia-ml-py, llvmlite, ml-dtypes, NumPy, mpi4py; no orjson, no jsonschema) is simulated in a
folder: a virtual environment without pip of its own whose site-packages holds exactly those
distributions. torch, Triton, CuPy, nvidia-ml-py and mpi4py are stand-ins: their ``*.dist-info`` at
the image's versions and the modules hwbench's availability checks import, which report what the
real ones report on an H200 (``torch.version.cuda`` "13.0", one "NVIDIA H200" of compute capability
9.0 with 132 SMs). NumPy, ml_dtypes and llvmlite are this machine's real ones (hwbench computes with
them; llvmlite lowers the SIMT kernels to PTX for real), pip and setuptools the installer's.

In that environment, with no index (``PIP_NO_INDEX=1``), the test
(a) runs the install step of ``bash ci/gpu-check.sh --dry-run`` as it stands (the checkout's package
    sources staged as the script stages them): it must succeed offline, add nothing but hwbench to
    the check's folder, leave the image's packages as they were, and build a wheel any Python 3
    takes (the image's 3.12);
(b) asks hwbench, as the check would, whether each row of the check would run: every ``hwbench run``
    step of the dry run is planned by hwbench itself in the simulated image (its real worker
    describes the backend there), each planned case resolved as a worker resolves it (the backend's
    probe, its implementations, ``supports``) with the native beside it, each llvmlite row lowered to
    PTX for the H200 (an ISA version CUDA 13.0 takes; assembled by a CUDA 13 ``ptxas`` where one is
    installed), the compile step's ``--target local`` and jobs, NVML through ``pynvml``, and the
    results files read back without orjson (``hwbench validate``, the report's first step).
A row that would be skipped fails the test with its reason. The same check run on images that lack
something (Triton 3.5, no cupy-cuda13x, no nvidia-ml-py, a CPU build of torch) must fail, so the
test can.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import venv
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import hwbench

ROOT = Path(__file__).resolve().parents[2]
#: The dist-info folder the install writes (this checkout's version).
INFO = f"hwbench-{hwbench.__version__}.dist-info"
SCRIPT = ROOT / "ci" / "gpu-check.sh"
BASH = shutil.which("bash") or "bash"

#: The image's distributions that are stand-ins here (name -> version, as ``pip list`` shows them
#: there; nvidia-ml-py: the release that matches its 580 driver, CUDA 13.0).
IMAGE = {
    "torch": "2.11.0",
    "triton": "3.6.0",
    "cupy-cuda13x": "14.2.0",
    "nvidia-ml-py": "13.580.82",
    "mpi4py": "4.1.2",
}
#: The image's distributions whose real code comes from this machine (their versions are this
#: machine's; the image's may differ), and the installer the image has.
REAL = ("numpy", "ml_dtypes", "llvmlite")
INSTALLER = ("pip", "setuptools")
#: What the image lacks that hwbench names: a run-time dependency hwbench does without.
NOT_IN_IMAGE = ("orjson", "jsonschema")
#: The extras a user of the image is told to install for the check (docs/gpus.md): each must be met.
EXTRAS = ("cuda", "cupy-cuda13", "gpu-compile")
#: The newest PTX ISA the CUDA 13.0 driver's JIT (the image's driver is 580, CUDA 13.0) loads.
PTX_ISA = (9, 0)

TORCH = '''"""Stand-in for torch {version}+cu130: what hwbench reads before a case runs."""
__version__ = "{version}+cu130"
from torch import backends, cuda, version  # noqa: E402

for _name in ("float16", "bfloat16", "float32", "float64", "int8", "int32", "float8_e4m3fn", "float8_e5m2"):
    globals()[_name] = _name


class Tensor:
    """No memory: device tensors of a case prepared here, never run."""

    def __init__(self, dtype="float32"):
        self.dtype = dtype

    def to(self, *args, **kwargs):
        return self

    def contiguous(self):
        return self

    def t(self):
        return self

    def __mul__(self, other):
        return self

    def __matmul__(self, other):
        return self

    def data_ptr(self):
        return 0

    def is_floating_point(self):
        return True


def from_numpy(array):
    return Tensor()


def zeros(*shape, dtype="float32", device=None):
    return Tensor(dtype)


ones = empty = full = zeros
'''
TORCH_VERSION = """__version__ = "{version}+cu130"
git_version = "0000000000000000000000000000000000000000"
cuda = {cuda}
hip = None
"""
TORCH_CUDA = '''"""torch.cuda as torch reports one H200."""


class _CudaDeviceProperties:
    name = "NVIDIA H200"
    major, minor = 9, 0
    multi_processor_count = 132
    total_memory = 150_754_820_096
    L2_cache_size = 62_914_560
    warp_size = 32
    shared_memory_per_block = 49_152
    shared_memory_per_block_optin = 232_448
    shared_memory_per_multiprocessor = 233_472
    regs_per_multiprocessor = 65_536
    max_threads_per_multi_processor = 2_048
    is_integrated = 0
    is_multi_gpu_board = 0
    gcnArchName = "NVIDIA H200"
    uuid = "11111111-2222-3333-4444-555555555555"
    pci_domain_id, pci_bus_id, pci_device_id = 0, 59, 0


def is_available():
    return {available}


def device_count():
    return 1 if is_available() else 0


def get_device_properties(index=0):
    if not 0 <= int(str(index).split(":")[-1]) < device_count():
        raise RuntimeError(f"no CUDA device {{index}}")
    return _CudaDeviceProperties()


def get_device_capability(index=0):
    return (9, 0)


def get_device_name(index=0):
    return _CudaDeviceProperties.name


def set_device(index):
    get_device_properties(index)


def current_device():
    return 0


def synchronize(device=None):
    pass


class _Stream:
    cuda_stream = 0
    device = type("device", (), {{"index": 0}})()


def current_stream(device=None):
    return _Stream()
'''
TORCH_BACKENDS = "from torch.backends import cuda, cudnn  # noqa: F401\n"
TORCH_BACKENDS_CUDNN = "def version():\n    return 91300\n\n\nallow_tf32 = True\n"
TORCH_BACKENDS_CUDA = "class matmul:\n    allow_tf32 = False\n"
CUPY = '''"""Stand-in for CuPy {version} (CUDA 13): the PTX loader of the llvmlite kernels."""
__version__ = "{version}"
loaded = []


class RawModule:
    def __init__(self, path=None, code=None, **kwargs):
        loaded.append(path)

    def get_function(self, name):
        return lambda *args, **kwargs: None
'''
PYNVML = '''"""Stand-in for nvidia-ml-py {version}'s pynvml: one H200."""
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1


class NVMLError(Exception):
    def __init__(self, value=3):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return "Not Supported"


_energy = [123_456_789]


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "580.159.03"


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(index):
    if index != 0:
        raise NVMLError(2)
    return "h200"


def nvmlDeviceGetHandleByUUID(uuid):
    return "h200"


def nvmlDeviceGetHandleByPciBusId(bus):
    return "h200"


def nvmlDeviceGetName(handle):
    return "NVIDIA H200"


def nvmlDeviceGetTotalEnergyConsumption(handle):
    _energy[0] += 350
    return _energy[0]


def nvmlDeviceGetPowerUsage(handle):
    return 350_000


def nvmlDeviceGetTemperature(handle, sensor):
    return 41


def nvmlDeviceGetClockInfo(handle, clock):
    return 1980


def __getattr__(name):
    if name.startswith("NVML_"):
        return 0
    if name.startswith("nvml"):
        def unsupported(*args, **kwargs):
            raise NVMLError(3)

        return unsupported
    raise AttributeError(name)
'''
#: Stand-in distributions: name -> (its files, relative to site-packages).
STAND_INS: dict[str, dict[str, str]] = {
    "torch": {
        "torch/__init__.py": TORCH,
        "torch/version.py": TORCH_VERSION,
        "torch/cuda/__init__.py": TORCH_CUDA,
        "torch/backends/__init__.py": TORCH_BACKENDS,
        "torch/backends/cudnn/__init__.py": TORCH_BACKENDS_CUDNN,
        "torch/backends/cuda/__init__.py": TORCH_BACKENDS_CUDA,
    },
    "triton": {"triton/__init__.py": '__version__ = "{version}"\n'},
    "cupy-cuda13x": {"cupy/__init__.py": CUPY},
    "nvidia-ml-py": {"pynvml.py": PYNVML},
    "mpi4py": {"mpi4py/__init__.py": '__version__ = "{version}"\n'},
}


@dataclass
class Image:
    """A simulated image: its interpreter, its site-packages and what it was made with."""

    python: Path
    site: Path
    versions: dict[str, str] = field(default_factory=dict)


def make_image(
    root: Path, versions: dict[str, str] | None = None, without: tuple[str, ...] = (), cuda: str | None = "13.0"
) -> Image:
    """The image in ``root``: the stand-ins at ``versions`` (default :data:`IMAGE`) less ``without``,
    torch built for ``cuda`` (None: a CPU build, which sees no GPU), the real packages linked in."""
    versions = {**IMAGE, **(versions or {})}
    venv.EnvBuilder(with_pip=False, system_site_packages=False, symlinks=True).create(root)
    (site,) = root.glob("lib/python3*/site-packages")
    for name, files in STAND_INS.items():
        if name in without:
            continue
        version = versions[name]
        values = {"version": version, "cuda": repr(cuda), "available": cuda is not None}
        written = []
        for rel, text in files.items():
            path = site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.format(**values) if "{" in text else text)
            written.append(rel)
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("pip\n")
        (info / "top_level.txt").write_text(sorted({Path(r).parts[0].removesuffix(".py") for r in written})[0] + "\n")
        record = [*written, *(f"{info.name}/{f}" for f in ("METADATA", "INSTALLER", "top_level.txt", "RECORD"))]
        (info / "RECORD").write_text("".join(f"{r},,\n" for r in record))
    for name in (*REAL, *INSTALLER):
        if name in without:
            continue
        dist = metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source, target_is_directory=source.is_dir())
    return Image(root / "bin" / "python", site, versions)


def image_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment the check runs in: nothing of this machine's Python, no index, caches in ``tmp``."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp / "home"),
        "LANG": "C.UTF-8",
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "HWBENCH_GPU_CHECK_CACHE": str(tmp / "check"),
    }
    for var in ("TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "CUPY_CACHE_DIR", "XDG_CACHE_HOME"):
        env[var] = str(tmp / "caches" / var.lower())
    return {**env, **extra}


def script_exports() -> dict[str, str]:
    """The variables ci/gpu-check.sh exports with a literal value, for every step it runs."""
    found = re.findall(r"^export (\w+)=([\w.:/-]+)\s*(?:#.*)?$", SCRIPT.read_text(), re.MULTILINE)
    return dict(found)


@dataclass
class Section:
    name: str
    steps: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def dry_run(image: Image, env: dict[str, str]) -> list[Section]:
    """The sections of ``bash ci/gpu-check.sh --dry-run`` with the image's interpreter, and their steps."""
    done = subprocess.run(
        [BASH, str(SCRIPT), "--dry-run"],
        capture_output=True,
        text=True,
        env={**env, "PYTHON": str(image.python)},
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    sections: list[Section] = []
    for line in done.stdout.splitlines():
        if match := re.fullmatch(r"section (\w+) \d+ s", line):
            sections.append(Section(match.group(1)))
        elif line.startswith("  step: "):
            sections[-1].steps.append(shlex.split(line[len("  step: ") :]))
        elif line.startswith("  note: "):
            sections[-1].notes.append(line[len("  note: ") :])
    return sections


def hwbench_args(step: list[str]) -> list[str] | None:
    for i in range(len(step) - 1):
        if step[i : i + 2] == ["-m", "hwbench"]:
            return step[i + 2 :]
    return None


def stage(cache: Path) -> Path:
    """The checkout's package sources copied where the script's ``stage`` copies them."""
    sources = re.search(r"^SOURCES=\((.*)\)$", SCRIPT.read_text(), re.MULTILINE)
    assert sources is not None, "ci/gpu-check.sh no longer names its SOURCES"
    src = cache / "src"
    src.mkdir(parents=True)
    for name in shlex.split(sources.group(1)):
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    return src


def tree(folder: Path) -> dict[str, float]:
    """Every file and link under ``folder`` (links not followed) with its modification time."""
    return {str(p.relative_to(folder)): p.lstat().st_mtime for p in folder.rglob("*")}


@dataclass
class Installed:
    image: Image
    env: dict[str, str]
    sections: list[Section]
    site: Path
    pip: subprocess.CompletedProcess[str]
    before: dict[str, float]


def install(tmp: Path) -> Installed:
    """The image made in ``tmp`` and the checkout installed into the check's folder by the script's
    own install step (as its dry run prints it)."""
    image = make_image(tmp / "image")
    env = image_env(tmp, **script_exports())
    sections = dry_run(image, env)
    (section,) = [s for s in sections if s.name == "install"]
    # The image's interpreter has no hwbench installed: the check must install it.
    assert len(section.steps) == 1, f"the check would install nothing with the image's Python: {section.notes}"
    (step,) = section.steps
    assert step[0] == str(image.python), step
    cache = Path(env["HWBENCH_GPU_CHECK_CACHE"])
    assert step[-1] == str(cache / "src") and step[step.index("--target") + 1] == str(cache / "site"), step
    stage(cache)
    before = tree(image.site)
    done = subprocess.run(step, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    return Installed(image, env, sections, cache / "site", done, before)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    for name in (*REAL, *INSTALLER, "packaging"):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{name} is not installed here: the image's copy comes from this environment")
    return install(tmp_path_factory.mktemp("gpu-image"))


# --- (a) the install ------------------------------------------------------------------------------


def test_the_install_step_runs_offline_and_adds_only_hwbench(installed: Installed) -> None:
    done = installed.pip
    assert done.returncode == 0, f"the check's install failed in the image:\n{done.stdout}\n{done.stderr}"
    step = installed.sections[0].steps[0]
    assert {"--no-index", "--no-deps", "--no-build-isolation"} <= set(step)  # nothing fetched, nothing resolved
    top = sorted(p.name for p in installed.site.iterdir())
    assert top == ["bin", "hwbench", INFO], f"the install pulled more than hwbench: {top}"
    assert tree(installed.image.site) == installed.before, "the install changed the image's own packages"
    assert (installed.image.site / "torch" / "version.py").read_text().startswith('__version__ = "2.11.0+cu130"')
    wheel = (installed.site / INFO / "WHEEL").read_text()
    assert "Tag: py3-none-any" in wheel and "Root-Is-Purelib: true" in wheel  # Python 3.12 takes it as is
    data = {p.name for p in (installed.site / "hwbench").rglob("*") if p.suffix in (".json", ".toml", ".cl")}
    assert {"results-v2.json", "floors.toml"} <= data, sorted(data)  # package data came along


def test_the_image_meets_every_requirement_the_check_names(installed: Installed) -> None:
    """hwbench's run-time requirements and the extras the check's users are told to install, each
    met by the image's distributions at their versions, on its Python (orjson: optional in practice,
    the results files are read without it, which the next test shows)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    have = {canonicalize_name(k): v for k, v in installed.image.versions.items()}
    have.update({canonicalize_name(n): metadata.version(n) for n in (*REAL, *INSTALLER)})
    meta = metadata.Distribution.at(installed.site / INFO).metadata
    py312 = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3"}
    problems = []
    extras = set(meta.get_all("Provides-Extra") or [])
    assert set(EXTRAS) <= extras, f"hwbench has no extra {sorted(set(EXTRAS) - extras)}"
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        wanted = [
            extra for extra in ("", *EXTRAS) if req.marker is None or req.marker.evaluate({**py312, "extra": extra})
        ]
        if not wanted:
            continue  # another extra's, or not on Python 3.12
        name = canonicalize_name(req.name)
        if name in NOT_IN_IMAGE and "" in wanted:  # orjson: hwbench reads and writes json without it
            continue
        where = "hwbench" if "" in wanted else f"hwbench[{','.join(wanted)}]"
        if name not in have:
            problems.append(f"{where} needs {req}: the image has no distribution {req.name!r}")
        elif not req.specifier.contains(have[name], prereleases=True):
            problems.append(f"{where} needs {req}: the image has {req.name} {have[name]}")
    assert not problems, "\n".join(problems)
    from hwbench.backends.torch_gpu import TRITON_OLDEST  # the Triton the backends refuse below

    triton = {
        str(s)
        for line in meta.get_all("Requires-Dist") or []
        if (r := Requirement(line)).name == "triton"
        for s in r.specifier
    }
    assert triton == {">=" + ".".join(map(str, TRITON_OLDEST))}, triton  # every extra asks for what the backends take


# --- (b) every row of the check, as hwbench would run it in the image -------------------------------

#: Run in the image (``python PROBE TASK.json OUT.json``): what hwbench says of each row of the check.
PROBE = r'''
import importlib, importlib.util, json, re, subprocess, sys
from pathlib import Path

import numpy as np

task = json.loads(Path(sys.argv[1]).read_text())
out = {"rows": [], "plan_skips": [], "lowered": [], "problems": []}
import hwbench

out["hwbench"] = hwbench.__file__
out["missing"] = [m for m in task["absent"] if importlib.util.find_spec(m) is not None]
from hwbench.backends.torch_gpu import simt_limits
from hwbench.cli.main import main
from hwbench.core.registry import get_backend
from hwbench.run import runner
from hwbench.run.case import CaseSkipped, Pipeline

backend = get_backend("cuda")
probe = backend.probe()
out["probe"] = [probe.ok, probe.reason]
pipeline = Pipeline()
section = [""]


def lower(case):
    """An llvmlite row prepared as the backend prepares it (PTX lowered for real, loaded by the stand-in CuPy)."""
    import cupy

    kernel = case.kernel
    shapes = [s for p in kernel.profiles for s in kernel.shapes(p)]
    small = min(shapes, key=lambda s: kernel.memory_bytes(s, case.dtype))
    dummy = {name: np.zeros((1, 1), np.float32) for name in kernel.make_inputs(small, case.dtype, 0)}  # names only
    before = len(cupy.loaded)
    backend.prepare(case.impl, case.kernel, dummy, case.shape, case.dtype, case.device)
    (path,) = cupy.loaded[before:]
    ptx = Path(path).read_text()
    version = re.search(r"^\.version (\d+)\.(\d+)", ptx, re.M)
    target = re.search(r"^\.target (\w+)", ptx, re.M)
    entry = {"row": row_name(case.request), "path": path,
             "version": [int(version.group(1)), int(version.group(2))] if version else None,
             "target": target.group(1) if target else None}
    if task["ptxas"]:
        assemble = [task["ptxas"], "-arch=sm_90", path, "-o", path + ".cubin"]
        done = subprocess.run(assemble, capture_output=True, text=True)
        entry["ptxas"] = done.returncode, (done.stderr + done.stdout).strip()[-300:]
    out["lowered"].append(entry)


def row_name(r):
    shape = ",".join(f"{k}={v}" for k, v in sorted(r.shape.items()))
    return f"{section[0]}: {r.kernel} {r.impl} {r.dtype} {shape} on {r.backend}:{r.device_index}"


def run_cases(cases, worker, timeout, progress=None, backends=None):
    for request in cases:
        row = {"row": row_name(request), "section": section[0], "kernel": request.kernel, "impl": request.impl,
               "case": [request.dtype, sorted(request.shape.items()), request.device_index], "why": ""}
        try:
            case = pipeline.resolve(request, probe=True)
            row["language"], row["kind"] = case.impl.language, case.impl.kind
            if case.impl.kind == "portable" and importlib.util.find_spec(case.impl.entry) is None:
                row["why"] = f"its module {case.impl.entry} is not installed"
            elif case.impl.language == "llvmlite" and task["lower"]:
                try:
                    lower(case)
                except Exception as exc:
                    row["why"] = f"preparing it failed: {type(exc).__name__}: {exc}"
        except CaseSkipped as exc:
            row["why"] = f"skipped: {exc}"
        out["rows"].append(row)
    return [], False


runner.run_cases = run_cases
for name, args in task["runs"]:
    section[0] = name
    code = main(args)
    path = Path(args[args.index("--out") + 1])
    if not path.is_file():
        out["problems"].append(f"{name}: hwbench run exited {code} and wrote no results file")
        continue
    doc = json.loads(path.read_text())
    for backend_doc in doc["backends"]:
        if not backend_doc["available"]:
            out["problems"].append(f"{name}: backend {backend_doc['name']} unavailable: {backend_doc['reason']}")
    for record in doc["records"]:
        out["plan_skips"].append(f"{name}: {record['kernel']} {record['impl']} {record['dtype']}: "
                                 f"{record['status']}: {record['reason']}")
    out.setdefault("files", []).append(str(path))
out["validate"] = main(["validate", *out.get("files", [])]) if out.get("files") else None

from hwbench.compile.jobs import compiled_kernels, parse_targets, plan_jobs

try:
    targets = parse_targets(task["compile_target"])
    out["compile"] = {"targets": targets, "jobs": sorted({(j["kernel"], j["impl"]) for j in
                                                          plan_jobs(targets, compiled_kernels(), ["triton", "llvm"])})}
except Exception as exc:
    out["compile"] = {"error": f"{type(exc).__name__}: {exc}"}

from hwbench.run.describe import describe_backend
from hwbench.sensors.devices import open_sensors

described = describe_backend("cuda")
devices = described["devices"]
if devices:
    sensors = open_sensors("cuda", 0, devices[0])
    out["nvml"] = sensors if isinstance(sensors, str) else [sensors.source, sensors.reason, sensors.energy_resolution_j]
    out["device"] = {k: devices[0][k] for k in ("name", "arch", "compute_units", "memory_bytes", "runtime")}
    out["libraries"] = devices[0]["libraries"]
else:
    out["nvml"] = f"no device: {described['reason']}"
Path(sys.argv[2]).write_text(json.dumps(out))
'''


def ptxas_13() -> str:
    """A CUDA 13 ``ptxas`` on PATH, as the image has (empty where this machine has none)."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return ""
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    return ptxas if re.search(r"release 13\.", version) else ""


def probe(inst: Installed, image: Image, tmp: Path, lower: bool = True) -> dict[str, Any]:
    """What hwbench, installed by the check, says of each row in ``image``."""
    tmp.mkdir(parents=True, exist_ok=True)
    runs = []
    for section in inst.sections:
        for step in section.steps:
            args = hwbench_args(step)
            if args and args[0] == "run":
                out = args.index("--out") + 1
                runs.append([section.name, [*args[:out], str(tmp / f"{section.name}.json"), *args[out + 1 :]]])
    (compile_step,) = [a for s in inst.sections for st in s.steps if (a := hwbench_args(st)) and a[0] == "compile"]
    task = {
        "runs": runs,
        "lower": lower,
        "ptxas": ptxas_13() if lower else "",
        "absent": list(NOT_IN_IMAGE),
        "compile_target": compile_step[compile_step.index("--target") + 1],
    }
    (tmp / "task.json").write_text(json.dumps(task))
    (tmp / "probe.py").write_text(PROBE)
    env = {**inst.env, "PYTHONPATH": str(inst.site)}  # as the script exports it after the install
    # Run as the script runs its steps: from the checkout's root, through -c (as -m, -c and stdin
    # do, the current folder would come first on sys.path unless the script keeps it off).
    run_probe = "import runpy, sys; sys.argv[:] = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    done = subprocess.run(
        [str(image.python), "-c", run_probe, str(tmp / "probe.py"), str(tmp / "task.json"), str(tmp / "answer.json")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
    )
    assert done.returncode == 0, f"the probe failed in the image:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    answer: dict[str, Any] = json.loads((tmp / "answer.json").read_text())
    answer["runs"] = runs
    return answer


#: The rows each run step of the check has, (kernel, impl), and the native beside each portable row.
EXPECTED = {
    "figures": {
        ("gemm", "torch_matmul"),
        ("gemm", "triton"),
        ("gemm", "llvm"),
        ("attention", "torch_sdpa"),
        ("attention", "triton"),
        ("attention", "llvm"),
    },
    "simt": {("gemm", "torch_matmul"), ("gemm", "llvm"), ("attention", "torch_sdpa"), ("attention", "llvm")},
    "bandwidth": {("stream", "torch"), ("stream", "triton"), ("stream", "llvm"), ("transfer", "torch_copy")},
    "lowprec": {("gemm", "torch_scaled_mm"), ("gemm", "triton")},
}


def findings(answer: dict[str, Any], lowered: bool = True) -> list[str]:
    """Every reason a row of the check would not run in the image (empty: each would be attempted)."""
    found = list(answer["problems"]) + list(answer["plan_skips"])
    if not answer["probe"][0] or answer["probe"][1]:
        found.append(f"the cuda backend's probe: ok={answer['probe'][0]}, reason {answer['probe'][1]!r}")
    found += [f"{r['row']}: {r['why']}" for r in answer["rows"] if r["why"]]
    natives = {(r["section"], r["kernel"], str(r["case"])) for r in answer["rows"] if r.get("kind") == "native"}
    found += [
        f"{r['row']}: no native of the same case in its step (its ratio cannot be computed)"
        for r in answer["rows"]
        if r.get("kind") == "portable" and (r["section"], r["kernel"], str(r["case"])) not in natives
    ]
    seen: dict[str, set[tuple[str, str]]] = {}
    for row in answer["rows"]:
        seen.setdefault(row["section"], set()).add((row["kernel"], row["impl"]))
    for name, rows in EXPECTED.items():
        if seen.get(name, set()) != rows:
            found.append(f"{name}: planned {sorted(seen.get(name, set()))}, the check has {sorted(rows)}")
    if answer["missing"]:
        found.append(f"the image has no {answer['missing']}, yet hwbench found them")
    if answer.get("validate") != 0:
        found.append(f"hwbench validate (orjson absent) exited {answer.get('validate')}")
    compiled = answer["compile"]
    if compiled.get("targets") != ["sm_90"]:
        found.append(f"compile --target local: {compiled}")
    else:
        for kernel in ("gemm", "attention"):
            for impl in ("triton", "llvm"):
                if [kernel, impl] not in compiled["jobs"]:
                    found.append(f"compile: no {kernel} {impl} job for sm_90")
    if not isinstance(answer["nvml"], list) or answer["nvml"][0] != "nvml" or answer["nvml"][2] is None:
        found.append(f"NVML (energy, sensors) through pynvml: {answer['nvml']}")
    if lowered:
        llvm_rows = [r["row"] for r in answer["rows"] if r.get("language") == "llvmlite" and not r["why"]]
        done = {entry["row"]: entry for entry in answer["lowered"]}
        for row in llvm_rows:
            entry = done.get(row)
            if entry is None:
                found.append(f"{row}: not lowered to PTX")
            elif entry["target"] != "sm_90" or entry["version"] is None or tuple(entry["version"]) > PTX_ISA:
                found.append(
                    f"{row}: PTX .target {entry['target']} .version {entry['version']} (CUDA 13.0 loads <= 9.0)"
                )
            elif "ptxas" in entry and entry["ptxas"][0] != 0:
                found.append(f"{row}: CUDA 13 ptxas refused its PTX: {entry['ptxas'][1]}")
    return found


def test_every_row_of_the_check_would_be_attempted_in_the_image(installed: Installed, tmp_path: Path) -> None:
    assert installed.pip.returncode == 0, installed.pip.stderr
    answer = probe(installed, installed.image, tmp_path)
    assert answer["hwbench"].startswith(str(installed.site)), answer["hwbench"]  # the check's own install
    problems = findings(answer)
    assert not problems, "rows of the GPU check that would not run on the GPU machine:\n" + "\n".join(problems)
    assert answer["device"] == {
        "name": "NVIDIA H200",
        "arch": "sm_90",
        "compute_units": 132,
        "memory_bytes": 150_754_820_096,
        "runtime": "cuda 13.0",
    }
    assert answer["libraries"]["triton"] == "3.6.0" and answer["libraries"]["cupy"] == "14.2.0"
    lowered = sorted((r["row"].split(":")[0], r["row"].split()[1]) for r in answer["lowered"])
    assert lowered == [("bandwidth", "stream"), ("figures", "attention"), ("figures", "gemm")] + [
        ("simt", "attention"),
        ("simt", "gemm"),
    ]  # every llvmlite row: GEMM and attention in bf16 (mma.sync) and fp32, the stream kernel


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"versions": {"triton": "3.5.1"}}, "triton 3.5.1 is older than 3.6"),
        ({"without": ("cupy-cuda13x",)}, "loading llvmlite PTX needs CuPy"),
        ({"without": ("nvidia-ml-py",)}, "nvidia-ml-py is not installed"),
        ({"without": ("triton",)}, "triton is not installed"),
        ({"cuda": None}, "is a CPU-only build, not a CUDA build"),
    ],
    ids=["triton-3.5", "no-cupy", "no-nvml", "no-triton", "cpu-torch"],
)
def test_an_image_that_lacks_something_fails_the_check(
    installed: Installed, tmp_path: Path, change: dict[str, Any], expected: str
) -> None:
    assert installed.pip.returncode == 0, installed.pip.stderr
    image = make_image(tmp_path / "image", **change)
    problems = findings(probe(installed, image, tmp_path / "probe", lower=False), lowered=False)
    assert any(expected in p for p in problems), problems


def test_the_built_wheel_needs_no_binary_for_python_312(installed: Installed) -> None:
    """The check carries no wheel: hwbench is the only thing installed, pure Python; nothing in the
    checkout is a wheel the image would have to take."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.whl"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert listed.returncode != 0 or listed.stdout == "", f"wheels in the checkout: {listed.stdout}"
    record = (installed.site / INFO / "RECORD").read_text().splitlines()
    assert record and not [r for r in record if r.split(",")[0].endswith((".so", ".pyd", ".dylib"))]
