"""The MPI native on the CPU: ``MPI.COMM_WORLD.Allreduce`` through mpi4py, ranks started by mpirun.

When a launch includes ``mpi`` cases, hwbench's launcher starts its ranks with Open MPI's
``mpirun`` instead of one process each; every rank still joins the gloo process group
for control messages and the other implementations, so gloo, mpi and llvm_shm run side
by side in one launch. ``mpirun`` gets the launcher's deadlines and is killed with it;
the ranks (each a process group of mpirun's making) die with mpirun (``PR_SET_PDEATHSIG``)
and are killed by pid as well. Open MPI's session directory and shared-memory files go
under the launch's own directories, which the launcher removes.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hwbench.collective.impls import Collective
from hwbench.collective.shm import CollectiveError
from hwbench.collective.topology import World
from hwbench.core.dtypes import device_numpy

#: Set to "1" by the launcher in the environment of ranks it starts through mpirun.
MPI_ENV = "HWBENCH_AR_MPI"
INSTALL = "pip install 'hwbench[mpi]' after apt-get install openmpi-bin libopenmpi-dev"


@functools.cache
def _mpirun_version(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    return (done.stdout + done.stderr).strip()


def mpirun() -> str | None:
    """Path of the ``mpirun`` on PATH, or None."""
    return shutil.which("mpirun")


def missing() -> str:
    """Why the mpi native cannot run here (empty when it can)."""
    from importlib.util import find_spec

    if find_spec("mpi4py") is None:
        return f"mpi4py is not installed ({INSTALL})"
    path = mpirun()
    if path is None:
        return "mpirun is not on PATH (apt-get install openmpi-bin)"
    version = _mpirun_version(path)
    if "Open MPI" not in version and "OpenRTE" not in version:
        first = version.splitlines()[0] if version else "?"
        return f"hwbench launches MPI ranks with Open MPI's mpirun; {path} is: {first}"
    return ""


def command(ranks: int, argv: list[str], session_dir: str, shm_dir: str) -> list[str]:
    """The mpirun command line that starts ``ranks`` local ranks running ``argv``."""
    path = mpirun()
    if path is None:
        raise CollectiveError("mpirun is not on PATH (apt-get install openmpi-bin)", "skipped")
    return [
        path,
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-n",
        str(ranks),
        "--mca",
        "orte_tmpdir_base",
        session_dir,
        "--mca",
        "btl_vader_backing_directory",
        shm_dir,
        *argv,
    ]


def rank_environment(env: Mapping[str, str]) -> dict[str, str]:
    """RANK and LOCAL_RANK of a rank mpirun started, from Open MPI's variables."""
    try:
        return {"RANK": env["OMPI_COMM_WORLD_RANK"], "LOCAL_RANK": env["OMPI_COMM_WORLD_LOCAL_RANK"]}
    except KeyError as exc:
        raise CollectiveError(f"started for MPI but {exc.args[0]} is not set: not an Open MPI mpirun rank") from None


_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
_EXITED = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+)")


def exit_codes(log: str, ranks: int) -> list[int | None]:
    """Per-rank exit codes mpirun reported (negative: killed by that signal); None where it said nothing."""
    codes: list[int | None] = [None] * ranks
    for found, sign in ((_SIGNALLED.findall(log), -1), (_EXITED.findall(log), 1)):
        for rank, value in found:
            if int(rank) < ranks:
                codes[int(rank)] = sign * int(value)
    return codes


def finalize() -> None:
    """MPI_Finalize if this rank initialised MPI (only after a clean run: it waits for every rank)."""
    module = sys.modules.get("mpi4py.MPI")
    if module is not None and module.Is_initialized() and not module.Is_finalized():
        module.Finalize()


def initialized() -> bool:
    """Whether this process initialised MPI (then it must leave with ``os._exit`` after a failure)."""
    module = sys.modules.get("mpi4py.MPI")
    return module is not None and bool(module.Is_initialized())


def _arrive(world: World) -> None:
    """Every rank reaches here, or the gloo timeout says who did not (MPI itself never times out)."""
    import torch.distributed as dist

    dist.barrier(group=world.group)


class MpiAllReduce(Collective):
    """``MPI.COMM_WORLD.Allreduce``: in place with ``MPI.IN_PLACE``, out of place with two buffers."""

    name, kind, language = "mpi", "native", "mpi4py"

    def __init__(self, world: World) -> None:
        if os.environ.get(MPI_ENV) != "1":
            raise CollectiveError(
                "these ranks are not MPI processes (hwbench starts mpi cases with mpirun; "
                "under torchrun run them with --ranks N instead)",
                "skipped",
            )
        self.world = world
        _arrive(world)
        import mpi4py

        mpi4py.rc.thread_level = "funneled"  # only the main thread calls MPI
        mpi4py.rc.finalize = False  # finalize() after a clean run; a failed rank must not wait for the others
        from mpi4py import MPI

        self.mpi, self.comm = MPI, MPI.COMM_WORLD
        if (self.comm.Get_rank(), self.comm.Get_size()) != (world.rank, world.size):
            raise CollectiveError(
                f"MPI rank {self.comm.Get_rank()} of {self.comm.Get_size()} is not rank {world.rank} of {world.size}"
            )
        self.config = {
            "library": MPI.Get_library_version().split(",")[0].strip(),
            "mpi4py": mpi4py.__version__,
            "launcher": "mpirun --oversubscribe --bind-to none",
            "in_place": "Allreduce(MPI.IN_PLACE, buf)",
            "out_of_place": "Allreduce(sendbuf, recvbuf)",
        }

    def buffers(self, count: int, dtype: str, in_place: bool) -> tuple[np.ndarray, np.ndarray]:
        _arrive(self.world)
        inp = np.empty(count, dtype=device_numpy(dtype))
        return inp, inp if in_place else np.empty(count, dtype=device_numpy(dtype))

    def operation(self, inp: np.ndarray, out: np.ndarray, dtype: str) -> Callable[[], None]:
        MPI, comm = self.mpi, self.comm
        kind: Any = {"fp32": MPI.FLOAT, "fp64": MPI.DOUBLE}[dtype]
        recv = [out, kind]
        if inp is out:
            return lambda: comm.Allreduce(MPI.IN_PLACE, recv, op=MPI.SUM)
        send = [inp, kind]
        return lambda: comm.Allreduce(send, recv, op=MPI.SUM)
