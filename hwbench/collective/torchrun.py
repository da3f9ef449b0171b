"""What ``hwbench run`` does differently for AllReduce: ``--ranks``, and joining a torchrun world."""

from __future__ import annotations

import argparse
import os
import threading
import time

from hwbench.collective.rank import follow
from hwbench.collective.shm import CollectiveError
from hwbench.collective.topology import World, joined_rank
from hwbench.core.errors import UserError


def follow_if_joined(args: argparse.Namespace) -> int | None:
    """On a torchrun rank other than 0, take part in rank 0's run and return the exit status; else None."""
    rank = joined_rank()
    if rank is None:
        return None
    kernels = [k.strip() for k in (args.kernel or "").split(",") if k.strip()]
    if kernels != ["allreduce"]:
        raise UserError("under torchrun (RANK/WORLD_SIZE set) hwbench runs only AllReduce: add --kernel allreduce")
    _world()
    _exit_with_launcher()
    if rank == 0:
        return None
    return follow(args.timeout)


def _world() -> World:
    """This rank's world from torchrun's variables; UserError when they do not add up."""
    try:
        return World.from_env()
    except CollectiveError as exc:
        raise UserError(f"{exc} (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK)") from None


def _exit_with_launcher() -> None:
    """Leave at once if the launcher (torchrun's agent) dies: a rank never outlives it as an orphan."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="hwbench-launcher-watch", daemon=True).start()


def set_ranks(shapes: dict[str, list[dict[str, int]]], ranks: int | None) -> dict[str, list[dict[str, int]]]:
    """AllReduce shapes with ``ranks`` from ``--ranks`` (or the torchrun world's size)."""
    if ranks is not None and ranks < 1:
        raise UserError(f"--ranks must be a positive number of processes, got {ranks}")
    if ranks is not None and "allreduce" not in shapes:
        raise UserError("--ranks applies to AllReduce only: add --kernel allreduce")
    if joined_rank() is not None:
        world = _world().size
        if ranks is not None and ranks != world:
            raise UserError(f"--ranks {ranks} differs from torchrun's world of {world} ranks: drop --ranks")
        ranks = world
    if ranks is None or "allreduce" not in shapes:
        return shapes
    return {**shapes, "allreduce": [{**s, "ranks": ranks} for s in shapes["allreduce"]]}
