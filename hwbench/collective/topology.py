"""Who this rank is: global and local rank, node, and the process groups built from them.

Ranks come from the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``), which hwbench's own launcher sets the same way.
Ranks of one node are contiguous (``rank = node * local_size + local_rank``), as torchrun
assigns them.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hwbench.collective.shm import CollectiveError
from hwbench.core.host import cpu_info

#: Set by hwbench's launcher: names the shared segments of one launch (swept at its end).
TOKEN_ENV = "HWBENCH_AR_TOKEN"


def joined_rank(env: Mapping[str, str] | None = None) -> int | None:
    """This process's rank when a launcher such as torchrun started it as one of many, else None."""
    env = os.environ if env is None else env
    if all(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")) and "MASTER_ADDR" in env:
        try:
            return int(env["RANK"])
        except ValueError:
            return None
    return None


@dataclass
class World:
    """This rank's place among all ranks."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    node: int
    token: str | None = None
    #: The process group every measured and control collective uses (its timeout is the case timeout).
    group: Any = None
    timeout_s: float = 300.0
    _groups: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> World:
        env = os.environ if env is None else env
        try:
            rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
            local_rank = int(env.get("LOCAL_RANK", "0"))
            local_size = int(env.get("LOCAL_WORLD_SIZE", str(size)))
            node = int(env["GROUP_RANK"]) if "GROUP_RANK" in env else rank // local_size
        except (KeyError, ValueError) as exc:
            raise CollectiveError(f"rank environment is incomplete or malformed: {exc}") from None
        if size % local_size or rank != node * local_size + local_rank:
            raise CollectiveError(
                f"rank {rank} of {size} is local rank {local_rank} of {local_size} on node {node}: "
                "hwbench needs the same number of ranks on every node, numbered node by node"
            )
        return cls(rank, size, local_rank, local_size, node, env.get(TOKEN_ENV))

    @property
    def nodes(self) -> int:
        return self.size // self.local_size

    @property
    def node_leader(self) -> int:
        """Global rank of local rank 0 on this node."""
        return self.node * self.local_size

    def cross_group(self) -> Any:
        """The group of ranks with this local rank on every node (None on one node); collective."""
        if self.nodes == 1:
            return None
        if "cross" not in self._groups:
            import torch.distributed as dist

            for local in range(self.local_size):  # every rank creates every group, in the same order
                group = dist.new_group(
                    [node * self.local_size + local for node in range(self.nodes)],
                    timeout=dt.timedelta(seconds=self.timeout_s),
                )
                if local == self.local_rank:
                    self._groups["cross"] = group
        return self._groups["cross"]


def describe_rank(world: World, gpu: bool = False) -> dict[str, Any]:
    """This rank's host and device (its GPU when ``gpu``), for the results file's list of participants."""
    cpu = cpu_info()
    device = f"{cpu['model']} ({cpu['cores']} cores)"
    if gpu:
        try:
            import torch

            device = f"{torch.cuda.get_device_name(world.local_rank)} (GPU {world.local_rank})"
        except Exception as exc:  # no GPU for this rank: its cases say why
            device = f"no GPU {world.local_rank}: {exc}"[:200]
    return {
        "rank": world.rank,
        "local_rank": world.local_rank,
        "node": world.node,
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "device": device,
        "pid": os.getpid(),
    }
