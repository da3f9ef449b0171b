"""Objects named by ``module:attribute`` strings, the entry-point groups and environment
variables that name them, and the TOML parser of this Python (``tomllib``, or ``tomli`` before 3.11)."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from hwbench.core.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["NAME", "from_environment", "group", "load", "load_callable", "tomllib"]


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


#: What a backend's or kernel's name may be: it is typed on the command line (``--device NAME:INDEX``).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def from_environment(variable: str, what: str, example: str) -> dict[str, str]:
    """The ``name=module:attribute`` entries of the environment ``variable`` (comma-separated):
    name -> target; UserError naming the entry, the ``what`` it registers and ``example`` on a
    malformed one (no name, a name :data:`NAME` refuses, no module or attribute)."""
    found: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in os.environ.get(variable, "").split(","))):
        name, eq, target = (part.strip() for part in item.partition("="))
        module, colon, attr = target.partition(":")
        if not eq or not colon or not module.strip() or not attr.strip():
            raise UserError(f"{variable} entry '{item}' is not NAME=module:attribute (e.g. {example})")
        if not NAME.fullmatch(name):
            named = f"has no {what} name" if not name else f"names the {what} '{name}'"
            raise UserError(
                f"{variable} entry '{item}' {named}: write NAME=module:attribute with NAME of letters, digits, "
                f"'_', '.' or '-' (e.g. {example})"
            )
        found[name] = target
    return found
