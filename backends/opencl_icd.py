"""Intel's OpenCL CPU runtime beside the system's OpenCL drivers, in one process.

Debian's PoCL takes no SPIR-V; Intel's OpenCL CPU runtime (``pip install 'hwbench[intel-opencl]'``,
x86_64 Linux) takes SPIR-V 1.0-1.4 on any x86 CPU. pip puts ``libintelocl.so`` in the
environment's ``lib/``, where no ICD loader looks, and its wheel's own ``.icd`` file names a
build-time path. :func:`ensure_icd_vendors` therefore writes a vendors folder in hwbench's cache
folder (:func:`hwbench.core.caches.cache_root`) holding one ``.icd`` file per driver the loader
would have read (``$OCL_ICD_VENDORS``, else ``$OPENCL_VENDOR_PATH``, else ``/etc/OpenCL/vendors``)
plus ``intel-cpu.icd`` naming the library, and points ``OCL_ICD_VENDORS`` at it. The loader reads
that variable once, at the process's first platform query, so this must run before it.

``HWBENCH_INTEL_OPENCL=0`` turns it off; ``HWBENCH_INTEL_OPENCL_LIB=PATH`` names the library
instead of looking for it (tests point it at a missing file).
"""

from __future__ import annotations

import hashlib
import os
import platform
import site
import sys
import sysconfig
import tempfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hwbench.core.caches import cache_root, cache_roots

LIBRARY = "libintelocl.so"
INTEL_ICD = "intel-cpu.icd"
#: The name of the platform Intel's OpenCL CPU runtime presents.
INTEL_PLATFORM = "Intel(R) OpenCL"
SYSTEM_VENDORS = "/etc/OpenCL/vendors"
INSTALL_HINT = (
    "Intel's OpenCL CPU runtime (SPIR-V intake for the llvm kernels) is not installed: "
    "pip install 'hwbench[intel-opencl]'"
)

Status = Literal["applied", "present", "absent", "unsupported", "disabled", "late", "unwritable"]


@dataclass(frozen=True)
class IcdSetup:
    """What :func:`ensure_icd_vendors` did: ``status`` ``applied`` (``OCL_ICD_VENDORS`` names
    ``folder``) or why it left the environment alone, said in ``reason``."""

    status: Status
    reason: str
    library: Path | None = None
    folder: Path | None = None
    entries: Mapping[str, str] | None = None  # .icd file name -> the library line it holds


#: This process's setup: the ICD loader reads the environment once per process, so this is done once.
_SETUP: IcdSetup | None = None


def intel_library(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The environment's ``libintelocl.so`` (``HWBENCH_INTEL_OPENCL_LIB`` when set), or None."""
    if environ.get("HWBENCH_INTEL_OPENCL_LIB"):
        named = Path(environ["HWBENCH_INTEL_OPENCL_LIB"])
        return named.resolve() if named.is_file() else None
    # pip installs the wheel's data files under the scheme's data root: <prefix>/lib, or the user base's lib.
    roots = [Path(sys.prefix), Path(site.getuserbase())]
    roots += [Path(sysconfig.get_paths()[key]).parents[2] for key in ("purelib", "platlib")]
    for root in dict.fromkeys(roots):
        if (root / "lib" / LIBRARY).is_file():
            return (root / "lib" / LIBRARY).resolve()
    return None


def loader_source(environ: Mapping[str, str] = os.environ) -> str:
    """Where the ICD loader finds its drivers: a folder of ``.icd`` files, one ``.icd`` file or a library."""
    return environ.get("OCL_ICD_VENDORS") or environ.get("OPENCL_VENDOR_PATH") or SYSTEM_VENDORS


def icd_entries(source: str) -> dict[str, str]:
    """The drivers ``source`` gives the loader, as .icd file name -> library line (unreadable ones left out)."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.endswith(".icd"))
    elif path.name.endswith(".icd"):
        files = [path]
    else:  # a library name or path, which ocl-icd loads as it is
        return {f"{path.name}.icd": source}
    entries = {}
    for file in files:
        try:
            line = next((ln.strip() for ln in file.read_text().splitlines() if ln.strip()), "")
        except (OSError, UnicodeDecodeError):
            continue
        if line:
            entries[file.name] = line
    return entries


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically (a hidden temporary file in the same folder, then a rename)."""
    if path.is_file() and path.read_text() == text:
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_vendors(entries: Mapping[str, str], roots: Iterable[Path]) -> Path | None:
    """A folder holding one ``.icd`` file per entry, under the first writable root; None if none is.

    The folder's name is a digest of the entries, so processes with the same drivers share it and
    never see one another's half-written files, and one with other drivers never changes it."""
    digest = hashlib.sha256(repr(sorted(entries.items())).encode()).hexdigest()[:16]
    for root in roots:
        folder = root / "opencl-vendors" / digest
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for name, line in entries.items():
                _write(folder / name, f"{line}\n")
        except OSError:
            continue
        return folder
    return None


def _loaded_libraries() -> set[str]:
    """File names of the shared objects mapped into this process (empty where /proc is missing)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return set()
    fields = (line.split(maxsplit=5) for line in maps.splitlines())
    return {Path(f[5]).name for f in fields if len(f) == 6 and f[5].startswith("/")}


def plan_vendors(environ: Mapping[str, str] = os.environ, loaded: Collection[str] = ()) -> IcdSetup:
    """Write the vendors folder that adds Intel's runtime to the loader's drivers (environment
    untouched); none when a driver's library is among ``loaded`` (the loader already ran)."""
    if environ.get("HWBENCH_INTEL_OPENCL", "").strip().lower() in ("0", "no", "off", "false"):
        return IcdSetup("disabled", "HWBENCH_INTEL_OPENCL=0")
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return IcdSetup("unsupported", f"Intel's OpenCL CPU runtime runs on x86_64 Linux, not {platform.machine()}")
    library = intel_library(environ)
    if library is None:
        return IcdSetup("absent", INSTALL_HINT)
    source = loader_source(environ)
    entries = icd_entries(source)
    if any(Path(line).name.startswith("libintelocl") for line in entries.values()):
        return IcdSetup("present", f"the ICD loader's drivers ({source}) already name {LIBRARY}", library)
    if any(Path(line).name in loaded for line in entries.values()):
        return IcdSetup("late", "the ICD loader already ran in this process; OCL_ICD_VENDORS left as it is", library)
    entries.pop(INTEL_ICD, None)
    entries[INTEL_ICD] = str(library)
    root = cache_root(environ)
    folder = None if root is None else write_vendors(entries, [root])
    if folder is None:
        where = ", ".join(str(d) for d in cache_roots(environ))
        return IcdSetup("unwritable", f"no writable folder for the ICD vendors ({where})", library)
    return IcdSetup("applied", f"OCL_ICD_VENDORS={folder} ({source} and {library})", library, folder, entries)


def ensure_icd_vendors() -> IcdSetup:
    """Add Intel's OpenCL CPU runtime to this process's ICD loader: call before pyopencl's first
    ``get_platforms``. Done once per process; later calls return the first answer."""
    global _SETUP
    if _SETUP is None:
        setup = plan_vendors(os.environ, _loaded_libraries())
        if setup.folder is not None:
            os.environ["OCL_ICD_VENDORS"] = str(setup.folder)
        _SETUP = setup
    return _SETUP


def intel_note(platforms: Iterable[str]) -> str:
    """What to say about Intel's runtime given the platforms found: '' when it is among them (or
    cannot be added here), else how to add it or why it is missing."""
    if INTEL_PLATFORM in {name.strip() for name in platforms}:
        return ""
    setup = ensure_icd_vendors()
    if setup.status in ("disabled", "unsupported"):
        return ""
    if setup.status == "absent":
        return setup.reason
    if setup.status == "applied":
        return f"Intel's OpenCL CPU runtime ({setup.library}) is installed but lists no device on this CPU"
    return f"Intel's OpenCL CPU runtime ({setup.library}) lists no device: {setup.reason}"
