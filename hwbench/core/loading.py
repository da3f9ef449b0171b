"""Objects named by ``module:attribute`` strings, the entry-point groups that name them, and
the TOML parser of this Python (``tomllib``, or ``tomli`` before 3.11)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["group", "load", "load_callable", "tomllib"]


def load(target: str) -> object:
    """The object ``target`` names: ``package.module:attribute.path`` (or a module, without ``:``)."""
    module, _, attr = target.partition(":")
    obj: object = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def load_callable(target: str) -> Callable[..., Any]:
    """The function ``target`` names; TypeError when it names something else."""
    found = load(target)
    if not callable(found):
        raise TypeError(f"{target} is not callable")
    return found


def group(name: str) -> dict[str, str]:
    """Entry points of the group ``name``: entry name -> ``module:attribute``."""
    return {ep.name: ep.value for ep in entry_points(group=name)}
