"""Message sizes in bytes, swept as nccl-tests sweeps them (``-b 8 -e 128M -f 2``).

``--sizes`` takes what nccl-tests' ``-b``/``-e``/``-f``/``-i`` say in one word, items separated
by commas::

    8:128M:x2      8 B to 128 MiB, doubling (nccl-tests -b 8 -e 128M -f 2)
    1M:8M:+1M      1 MiB to 8 MiB in steps of 1 MiB (nccl-tests -b 1M -e 8M -i 1M)
    4K             one size
    8,1K,64M       a list; ranges and sizes mix (8:1K:x4,1M)

A size is a whole number of bytes, optionally with ``K``, ``M`` or ``G`` (powers of 1024, as
nccl-tests: ``128M`` is 134217728 bytes; upper or lower case; ``0.5M`` is 524288). A range
starts at MIN and keeps multiplying (``xFACTOR``, an integer of at least 2) or adding
(``+STEP``, a size) while the size is at most MAX, so MAX itself is in the sweep only when the
steps land on it (``8:100:x2`` ends at 64), as in nccl-tests.

How ``hwbench run --sizes`` uses this module, per dtype::

    sizes = parse_sizes(args.sizes)                 # ascending bytes, each once
    counts = sizes_to_counts(sizes, dtype)          # elements per rank of that dtype
    shapes = [kernel.complete({"count": c, "ranks": ranks}) for c in counts]

Counts depend on the dtype (1 MiB is 262144 fp32 elements, 524288 fp16 ones), while the run
matrix pairs every shape with every dtype: with several dtypes, one list of shapes would give
each dtype the others' counts too. Either sweep one dtype per ``--sizes`` or build the counts
per dtype. Both functions raise :class:`~hwbench.core.errors.UserError` with one line naming
the offending part and the syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError

#: Bytes of each size suffix (binary, as nccl-tests: M is MiB).
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
#: The most sizes one ``--sizes`` may name (a ``+STEP`` sweep grows fast: 8:128M:+8 is 16 million).
MAX_SIZES = 1024
SYNTAX = "SIZE, MIN:MAX:xFACTOR or MIN:MAX:+STEP, comma-separated; sizes in bytes with K, M, G (e.g. 8:128M:x2)"

_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([KMG]?)", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of one size such as ``8``, ``4K``, ``128M``, ``0.5G``; UserError unless a whole,
    positive number of bytes."""
    word = text.strip()
    match = _SIZE.fullmatch(word)
    if match is None:
        raise UserError(f"--sizes: '{word}' is not a size (bytes, or a number with K, M or G); expected {SYNTAX}")
    number, unit = match.groups()
    whole, _, fraction = number.partition(".")
    scale = UNITS[unit.upper()]
    numerator = int(whole + fraction) * scale
    denominator = 10 ** len(fraction)
    if numerator % denominator:
        raise UserError(f"--sizes: '{word}' is not a whole number of bytes")
    size = numerator // denominator
    if size < 1:
        raise UserError(f"--sizes: '{word}' is no bytes; a size is at least 1 byte")
    return size


def _range(item: str) -> list[int]:
    """The sizes of one ``MIN:MAX:xFACTOR`` or ``MIN:MAX:+STEP``."""
    parts = item.split(":")
    if len(parts) != 3:
        hint = " (add the step: :x2 doubles, :+1M adds 1 MiB)" if len(parts) == 2 else ""
        raise UserError(f"--sizes: '{item}' is not MIN:MAX:xFACTOR or MIN:MAX:+STEP{hint}")
    low, high, step = parse_size(parts[0]), parse_size(parts[1]), parts[2].strip()
    if low > high:
        raise UserError(f"--sizes: '{item}' starts above its end ({low} > {high} bytes)")
    if step[:1].lower() == "x":
        factor = step[1:].strip()
        if not re.fullmatch("[0-9]+", factor) or int(factor) < 2:
            raise UserError(f"--sizes: '{item}' multiplies by '{factor}'; the factor is an integer of at least 2")
        sizes, size = [], low
        while size <= high:
            sizes.append(size)
            size *= int(factor)
        return sizes
    if step[:1] == "+":
        add = parse_size(step[1:])
        many = (high - low) // add + 1
        if many > MAX_SIZES:
            raise UserError(f"--sizes: '{item}' names {many} sizes, more than {MAX_SIZES}; take a larger step")
        return list(range(low, high + 1, add))
    raise UserError(f"--sizes: '{item}' steps by '{step}'; write xFACTOR (x2 doubles) or +STEP (+1M)")


def parse_sizes(text: str) -> list[int]:
    """The sizes in bytes ``text`` names (``--sizes``, syntax in the module docstring),
    ascending, each once.

    >>> parse_sizes("8:128:x2")
    [8, 16, 32, 64, 128]
    >>> parse_sizes("1K:4K:+1K,64")
    [64, 1024, 2048, 3072, 4096]
    """
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise UserError(f"--sizes is empty; expected {SYNTAX}")
    sizes: set[int] = set()
    for item in items:
        if not item:
            raise UserError(f"--sizes '{text}' has an empty item; expected {SYNTAX}")
        sizes.update(_range(item) if ":" in item else [parse_size(item)])
        if len(sizes) > MAX_SIZES:
            raise UserError(f"--sizes '{text}' names more than {MAX_SIZES} sizes; take a larger step")
    return sorted(sizes)


def sizes_to_counts(sizes: Iterable[int], dtype: str) -> list[int]:
    """Elements per rank of ``dtype`` for each size in bytes, rounded down to whole elements as
    nccl-tests does (``count = size / sizeof(type)``: 10 bytes of fp32 is 2 elements, 8 bytes);
    sizes that round to the same count run once. Ascending.

    UserError for a dtype hwbench does not know and for a size below one element (nccl-tests
    would run it as an empty message; an hwbench case has at least one element).
    """
    if dtype not in DTYPE_BYTES:
        raise UserError(f"--sizes: unknown dtype '{dtype}'; known: {', '.join(DTYPE_BYTES)}")
    width = DTYPE_BYTES[dtype]
    counts: set[int] = set()
    for size in sizes:
        if size < width:
            raise UserError(
                f"--sizes: {size} B is less than one {dtype} element ({width} B); start the sweep at {width} or more"
            )
        counts.add(size // width)
    return sorted(counts)
