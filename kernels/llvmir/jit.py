"""JIT compilation of kernel modules for the host CPU, with an in-process cache."""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from hwbench.core import binary_cache
from hwbench.core.binary_cache import binary_key

_init_lock = threading.Lock()
_initialized = False


def ensure_llvm_initialized() -> None:
    """Initialise LLVM's native target once (``llvm.initialize()`` is gone in llvmlite 0.50)."""
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


@dataclass
class CompiledModule:
    """A module JIT-compiled into this process; keeps the engine (and code) alive."""

    engine: llvm.ExecutionEngine
    compile_s: float
    llvm_module: llvm.ModuleRef
    target_machine: llvm.TargetMachine
    _addresses: dict[str, int] = field(default_factory=dict)
    #: Whether the machine code came from the binary cache (``llvm_module`` is then optimised
    #: only when :meth:`assembly` asks for it).
    cached: bool = False
    opt: int = 3
    _optimised: bool = True

    def function_address(self, name: str) -> int:
        """Address of a compiled function."""
        if name not in self._addresses:
            addr = self.engine.get_function_address(name)
            if not addr:
                raise KeyError(f"function {name!r} not found in compiled module")
            self._addresses[name] = addr
        return self._addresses[name]

    def global_i64(self, name: str) -> int:
        """Value of an exported ``i64`` global constant."""
        import ctypes

        addr = self.engine.get_global_value_address(name)
        if not addr:
            raise KeyError(f"global {name!r} not found in compiled module")
        return ctypes.c_int64.from_address(addr).value

    def assembly(self) -> str:
        """Optimised machine code as assembly text (for inspection)."""
        if not self._optimised:  # the code was loaded, not compiled: optimise the IR now, as it was then
            optimise(self.llvm_module, self.target_machine, self.opt)
            self._optimised = True
        return self.target_machine.emit_assembly(self.llvm_module)


def compile_module(
    module: ir.Module, cpu_name: str | None = None, features: str | None = None, opt: int = 3
) -> CompiledModule:
    """Verify, optimise (new pass manager, O3) and JIT ``module`` for the host; the machine code
    of the same IR for the same CPU, features and LLVM comes from the binary cache when there."""
    ensure_llvm_initialized()
    t0 = time.perf_counter()
    cpu_name = cpu_name or llvm.get_host_cpu_name()
    features = features if features is not None else llvm.get_host_cpu_features().flatten()
    triple = module.triple or llvm.get_process_triple()
    tm = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu_name, features=features, opt=opt, codemodel="jitdefault"
    )
    text = str(module)
    key = binary_key("llvmlite-mcjit", llvmlite.__version__, llvm.llvm_version_info, triple, cpu_name, features)
    key = binary_key(key, opt, _pipeline_source(), text)  # a changed pipeline is a new key
    cached = binary_cache.load("cpu", key)
    mod = llvm.parse_assembly(text)
    mod.verify()
    if cached is None:
        optimise(mod, tm, opt)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.set_object_cache(
        notify_func=None if cached is not None else lambda _, obj: binary_cache.store("cpu", key, bytes(obj)),
        getbuffer_func=lambda _: cached,
    )
    engine.finalize_object()
    return CompiledModule(
        engine=engine,
        compile_s=time.perf_counter() - t0,
        llvm_module=mod,
        target_machine=tm,
        cached=cached is not None,
        opt=opt,
        _optimised=cached is None,
    )


@functools.cache
def _pipeline_source() -> str:
    """The source of :func:`optimise`, part of every cache key (read once per process)."""
    return inspect.getsource(optimise)


def optimise(mod: llvm.ModuleRef, tm: llvm.TargetMachine, opt: int) -> None:
    """The O``opt`` pipeline with loop and SLP vectorisation and loop unrolling."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def assembly(module: ir.Module | str, cpu_name: str, features: str, opt: int = 3) -> str:
    """``module``'s machine code as assembly text after the pipeline :func:`compile_module` runs, for
    the module's own triple (another architecture's too: cross-compiled code to inspect, never run;
    inline assembly only for the host's, whose parser alone llvmlite has)."""
    ensure_llvm_initialized()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_asmparser()
    mod = llvm.parse_assembly(str(module))
    mod.verify()
    triple = mod.triple or llvm.get_process_triple()
    machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu_name, features=features, opt=opt)
    optimise(mod, machine, opt)
    return str(machine.emit_assembly(mod))


#: Compiled modules of this process, by key (machine code lives as long as its engine).
_cache: dict[tuple[str, ...], CompiledModule] = {}
_cache_lock = threading.Lock()


def get_or_compile(
    key: tuple[str, ...], build: Callable[[], ir.Module], cpu_name: str | None = None, features: str | None = None
) -> tuple[CompiledModule, bool]:
    """Compiled module for ``key``, building it on first use.

    Returns ``(compiled, compiled_now)``; the cache lives for the process.
    """
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            return hit, False
        compiled = compile_module(build(), cpu_name=cpu_name, features=features)
        _cache[key] = compiled
        return compiled, True


def cache_size() -> int:
    """Number of compiled modules held by the process-wide cache."""
    return len(_cache)
