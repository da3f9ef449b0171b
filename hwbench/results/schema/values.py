"""Plain values as the validity rule reads them: numbers, finite as doubles wherever they are,
RFC 3339 date-times, and how a value is shown in a message.

JSON has no NaN or infinity, though Python's parser reads them, and an integer beyond a
double's range (about 1.8e308) is read exactly but breaks every figure computed from it
(``float()`` of it overflows); neither is a number a results file may hold.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Iterator
from typing import Any

#: A problem: where in the document (keys and indexes) and what is wrong there.
Problem = tuple[tuple[str | int, ...], str]

#: The smallest integer a double cannot hold (``float()`` of it overflows): every valid integer is below it.
BEYOND_DOUBLE = 2**1024 - 2**970


def is_number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(value: int | float) -> bool:
    """Whether the number ``value`` is finite as a double (an integer: within a double's range)."""
    if isinstance(value, int):
        return -BEYOND_DOUBLE < value < BEYOND_DOUBLE
    return math.isfinite(value)


def show(value: Any) -> str:
    """``value`` as a message shows it: its repr, cut at 60 characters."""
    text = repr(float(value) if isinstance(value, float) else value)  # a NumPy float as the number it is
    return text if len(text) <= 60 else text[:57] + "..."


def not_finite(value: int | float) -> str:
    """What is wrong with a number that is not finite as a double."""
    if isinstance(value, float):
        return f"{show(value)} is not a finite number"
    return (
        f"an integer of {len(str(abs(value)))} digits is not a finite number (beyond a double's range, about 1.8e308)"
    )


def free_numbers(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[Problem]:
    """Every number of ``value``, at any depth of its lists and objects, that is not finite, in document order."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [(path, value)]  # not recursion: JSON may nest deeper
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            stack += [((*where, k), v) for k, v in reversed(item.items())]
        elif isinstance(item, list):
            stack += [((*where, i), v) for i, v in reversed(list(enumerate(item)))]
        elif is_number(item) and not finite(item):
            yield where, not_finite(item)


def all_finite(value: Any) -> bool:
    """Whether every number in ``value``, in its lists and objects too, is finite as a double."""
    return next(free_numbers(value), None) is None


_DATE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)", re.IGNORECASE
)


def is_date_time(text: str) -> bool:
    """Whether ``text`` is an RFC 3339 date-time (``2026-01-02T03:04:05+00:00``), calendar included."""
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        return False
    year, month, day = (int(match.group(i)) for i in (1, 2, 3))
    return 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]
