"""Text in and out: reading a user's file only when it is a regular file of sane size, and names
from files made safe to print on a terminal.

A path that names a FIFO, a device (``/dev/zero``) or a folder would hang a reader or exhaust its
memory; :func:`read_regular_text` refuses them, and files over a limit, in one line. Names read
from files (backends, devices, kernels, shapes, platform names) may hold control characters, an
ANSI escape among them, that a terminal would obey; :func:`printable` writes them as escapes.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from hwbench.core.errors import UserError

#: The largest results file hwbench reads (2 GiB).
MAX_RESULTS_BYTES = 2 * 1024**3
#: The largest settings file (platform, catalog, weights TOML) hwbench reads (64 MiB).
MAX_SETTINGS_BYTES = 64 * 1024**2

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _size(size: int) -> str:
    return f"{size / 1024**3:.3g} GiB" if size >= 1024**3 else f"{size / 1024**2:.3g} MiB"


def check_regular(path: str | Path, limit: int, what: str = "file") -> int:
    """The size of ``path`` when it is a regular file (links followed) of at most ``limit`` bytes;
    UserError (one line naming ``what`` and the path) otherwise. Opens nothing."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    return _checked(info, path, limit, what)


def _checked(info: os.stat_result, path: str | Path, limit: int, what: str) -> int:
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{what} {path} is {_kind(info.st_mode)}, not a regular file; name a file")
    if info.st_size > limit:
        raise UserError(
            f"{what} {path} is {info.st_size:,} bytes, over the {_size(limit)} hwbench reads: is it the right file?"
        )
    return info.st_size


def read_regular_text(path: str | Path, limit: int = MAX_RESULTS_BYTES, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped), read only when it is a regular
    file of at most ``limit`` bytes.

    The file is opened without blocking (a FIFO cannot stall the open) and checked on the open
    descriptor, so a path swapped after a check is still refused; a file that grows past
    ``limit`` while read is refused too. Every failure is one UserError line naming ``what``."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UserError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        _checked(os.fstat(fd), path, limit, what)
        data = bytearray()
        while len(data) <= limit:
            chunk = os.read(fd, min(1 << 24, limit + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UserError(f"{what} {path} grew past the {_size(limit)} hwbench reads while it was read")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {exc.start} is not): is it the right file?") from None


#: C0 controls and DEL, C1 controls, and the Unicode marks that reorder or break what a terminal shows.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` as a string a terminal shows as it is: control characters (an ANSI escape's ESC
    among them), line breaks and bidirectional marks become ``repr``-style escapes."""
    return _UNSAFE.sub(_escape, str(text))


def aligned(rows: Iterable[Sequence[str]], headers: Sequence[str], right: Collection[str]) -> str:
    """Rows under headers and a rule, columns padded to their widest cell, those whose header is in
    ``right`` right-aligned (numbers), every cell made printable."""
    cells = [tuple(printable(c) for c in r) for r in (headers, *rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        line = [c.rjust(w) if h in right else c.ljust(w) for h, c, w in zip(headers, r, widths, strict=False)]
        lines.append("  ".join(line).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
