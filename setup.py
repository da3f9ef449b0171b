"""Package discovery: every folder of ``hwbench/``, ``kernels/`` and ``backends/`` that holds an
``__init__.py`` is installed, ``kernels/`` as ``hwbench.kernels`` and ``backends/`` as
``hwbench.backends``. Everything else about the distribution is in ``pyproject.toml``.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Installed package name of each top-level folder.
ROOTS = {"hwbench": "hwbench", "hwbench.kernels": "kernels", "hwbench.backends": "backends"}


def discover(root: Path = HERE) -> dict[str, Path]:
    """Installed package name -> folder, for every package folder under the three roots."""
    found: dict[str, Path] = {}
    for package, folder in ROOTS.items():
        base = root / folder
        for init in sorted(base.rglob("__init__.py")):
            rel = init.parent.relative_to(base)
            if "__pycache__" in rel.parts:
                continue
            found[".".join((package, *rel.parts))] = init.parent
    return found


if __name__ == "__main__":
    from setuptools import setup

    setup(packages=sorted(discover()), package_dir=dict(ROOTS))
