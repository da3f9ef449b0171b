"""Joining the ranks' process group at MASTER_ADDR:MASTER_PORT, within one deadline.

torch's env:// rendezvous tries a refused address twice over (each try as long as the
timeout) and prints C++ stack dumps meanwhile. Here a rank that does not host the store
first waits, with plain TCP connects, until something listens at the address, then joins
in the time left; what torch prints while joining is shown only when the join succeeds.
Either failure is one :class:`CollectiveError` (status ``timeout``) naming the address.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator

from hwbench.collective.shm import CollectiveError
from hwbench.collective.topology import World

#: Ranks hwbench starts itself get at least this long to meet: ranks that import torch on a busy
#: host arrive seconds apart, which says nothing about a case's collectives.
INIT_TIMEOUT_S = 120.0
#: Under torchrun, rank 0 describes the backends before it joins (a few seconds): the least wait.
JOIN_MIN_S = 15.0
#: Seconds between connection attempts while nothing listens at the address.
RETRY_S = 0.2


def join_timeout(timeout_s: float) -> float:
    """How long a rank of a torchrun world waits for the others, for ``--timeout`` ``timeout_s``."""
    return max(timeout_s, JOIN_MIN_S)


def init_process_group(world: World, timeout_s: float, join_s: float | None = None) -> None:
    """Join the default gloo group (env://) within ``join_s`` (default: ``max(timeout_s,``
    :data:`INIT_TIMEOUT_S` ``)``), then make ``world.group``, whose collectives time out after ``timeout_s``."""
    import torch.distributed as dist  # torch, optional: only ranks import it

    if not dist.is_initialized():
        _join(world, max(timeout_s, INIT_TIMEOUT_S) if join_s is None else join_s)
    world.timeout_s = timeout_s
    world.group = dist.new_group(backend="gloo", timeout=dt.timedelta(seconds=timeout_s))


def _join(world: World, wait_s: float) -> None:
    import torch.distributed as dist  # torch, optional: only ranks import it

    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    where = f"{host}:{port}"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise CollectiveError(f"MASTER_PORT is '{port}', not a TCP port number: set MASTER_ADDR and MASTER_PORT")
    deadline = time.monotonic() + wait_s
    hosts_store = world.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    if not hosts_store:
        why = _wait_for_listener(host, int(port), deadline)
        if why is not None:
            raise CollectiveError(
                f"rank {world.rank} could not reach {where} (MASTER_ADDR:MASTER_PORT) within {wait_s:g} s "
                f"({why}): rank 0 is not running there or has exited",
                "timeout",
            )
    with _held_stderr() as show:
        try:
            dist.init_process_group(
                "gloo", init_method="env://", timeout=dt.timedelta(seconds=max(deadline - time.monotonic(), 1.0))
            )
        except (RuntimeError, ValueError) as exc:  # torch's DistError family is RuntimeError
            show[0] = False
            lines = str(exc).strip().splitlines()
            raise CollectiveError(
                f"rank {world.rank} could not meet the other {world.size - 1} rank(s) at {where} within "
                f"{wait_s:g} s: {lines[0][:300] if lines else exc.__class__.__name__}",
                "timeout",
            ) from None


def _wait_for_listener(host: str, port: int, deadline: float) -> str | None:
    """None once something accepts connections at ``host:port``; else, at ``deadline``, the last error."""
    last = "nothing answered"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return last
        try:
            socket.create_connection((host, port), timeout=min(left, 2.0)).close()
            return None
        except OSError as exc:
            last = exc.strerror or str(exc) or exc.__class__.__name__
        time.sleep(max(min(RETRY_S, deadline - time.monotonic()), 0.0))


@contextlib.contextmanager
def _held_stderr() -> Iterator[list[bool]]:
    """File descriptor 2 goes to a temporary file meanwhile; what was written there is written out
    afterwards unless the caller sets ``show[0] = False``."""
    sys.stderr.flush()
    saved = os.dup(2)
    show = [True]
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield show
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if show[0]:
                held.seek(0)
                data = memoryview(held.read())
                while data:
                    data = data[os.write(2, data) :]
