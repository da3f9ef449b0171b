"""Shared probing for backends whose kernels are not built yet: say what is here and what is missing."""

from __future__ import annotations

import importlib.util


def missing_modules(*modules: str) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (checked without importing them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]
