"""Stop signals treated as Ctrl-C: the finished cases are written, the run is swept.

Inside :class:`StopSignals`, SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` (a
``KeyboardInterrupt``, so every ``except KeyboardInterrupt`` clean-up runs for all three) the
first time; later ones while the run is winding down are counted, not raised, so a second
Ctrl-C cannot interrupt the saving of the file. The exit status is 128 + the first signal's
number (INT 130, HUP 129, TERM 143), as shells report it.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

#: The signals a run turns into an orderly stop.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_status(signum: int) -> int:
    """The exit status of a run stopped by ``signum``: 128 + its number."""
    return 128 + signum


class StopSignals:
    """Context manager: stop signals raise :class:`Stopped` once, then are only noted.

    ``first`` is the first signal received (None while none came); after :meth:`hold` a signal
    is only noted, and the caller exits with its status once the file is safe. Outside the main thread
    (where handlers cannot be installed) it does nothing. The previous handlers come back on
    exit.
    """

    def __init__(self) -> None:
        self.first: int | None = None
        self.later = 0
        self._held = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.first is not None:
            self.later += 1  # already stopping: the file is being written; let it finish
            return
        self.first = signum
        if not self._held:
            raise Stopped(signum)

    def hold(self) -> None:
        """From now on stop signals are only noted: the run is winding down (deriving, saving)."""
        self._held = True

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
