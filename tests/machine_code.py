"""Reading compiled loops: a module's machine code for a target, its basic blocks, the hot loop and
its stack traffic (a spill is a load or store relative to the stack or frame pointer)."""

from __future__ import annotations

import re
from typing import Any

#: Vector multiply-adds (x86 FMA3, SSE's multiplies and adds, AArch64 NEON/SVE).
MULTIPLY_ADD = re.compile(r"^\s*(vfmadd|vfnmadd|fmla|fmad|mulps|mulpd|addps|addpd)")
STACK = re.compile(r"\((%rsp|%rbp)[),]|\[(sp|x29)\b")
_LABEL = re.compile(r"^\S[^\s]*:\s*(#.*|//.*)?$")
_BRANCH = re.compile(r"^\s*(j[a-z]+|b\.[a-z]+|b|cbn?z|tbn?z|ret)\s")


def assembly(module: Any, triple: str, cpu: str, features: str) -> str:
    """``module`` (llvmlite IR) optimised as the JIT does and emitted as assembly for the target."""
    from hwbench.kernels.llvmir.jit import assembly as jit_assembly  # needs llvmlite: callers skip without it

    module.triple = triple
    return jit_assembly(module, cpu, features)


def blocks(asm: str) -> list[list[str]]:
    """The instructions of each basic block: from a label to the first branch."""
    out: list[list[str]] = [[]]
    ended = False
    for line in asm.splitlines():
        text = line.strip()
        if _LABEL.match(line):
            out.append([])
            ended = False
        elif text and not text.startswith((".", "#", "//")) and not ended:
            out[-1].append(line)
            ended = bool(_BRANCH.match(line))
    return out


def hot_loop(asm: str) -> list[str]:
    """The block with the most vector multiply-adds: a kernel's innermost loop."""
    return max(blocks(asm), key=lambda block: sum(1 for line in block if MULTIPLY_ADD.match(line)))


def multiply_adds(block: list[str]) -> int:
    """Vector multiply-add instructions in ``block``."""
    return sum(1 for line in block if MULTIPLY_ADD.match(line))


def stack_traffic(block: list[str]) -> list[str]:
    """The instructions of ``block`` that load or store through the stack or frame pointer."""
    return [line.strip() for line in block if STACK.search(line)]
