"""The ``hwbench`` command: one parser assembled from the command modules, and exit codes.

Each subcommand is a module with a docstring, ``HELP``, ``add_arguments(parser)`` and
``main(args) -> int``. Bad input is one line on stderr and a non-zero exit; a traceback
means a bug in hwbench.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

from hwbench import __version__
from hwbench.core.backend import present
from hwbench.core.errors import UserError
from hwbench.core.text import printable
from hwbench.kernels.llvmir import cpu_model
from hwbench.run.signals import Stopped, exit_status

#: Exit status when cases failed (compile_error, runtime_error, parity_failed, implausible, timeout,
#: crashed) or none ran.
EXIT_FAILED_CASES = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: The subcommands in the order ``hwbench --help`` lists them, and the module of each.
COMMANDS: dict[str, str] = {
    "list": "hwbench.cli.list",
    "run": "hwbench.cli.run",
    "tune": "hwbench.cli.tune",
    "burn": "hwbench.cli.burn",
    "show": "hwbench.cli.show",
    "validate": "hwbench.cli.validate",
    "report": "hwbench.cli.report",
    "compile": "hwbench.cli.compile",
    "score": "hwbench.cli.score",
    "compare": "hwbench.cli.compare",
    "check": "hwbench.cli.check",
    "fleet": "hwbench.cli.fleet",
    "pp": "hwbench.cli.pp",
    "probe": "hwbench.cli.probe",
    "tco": "hwbench.cli.tco",
    "train": "hwbench.cli.train",
    "drill": "hwbench.cli.drill",
}
#: Subcommands whose ``--help`` does not show their module's docstring (it never has).
PLAIN_HELP = frozenset({"list", "run", "show", "validate"})


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``only`` the parser of that one command: each command module is
    imported only when its parser is built (importing all of them costs most of a second)."""
    parser = argparse.ArgumentParser(
        prog="hwbench",
        description=(
            "Run portable GEMM, attention and AllReduce kernels beside each backend's native library, "
            "check them against float64 and write one versioned JSON results file."
        ),
    )
    parser.add_argument("--version", action="version", version=f"hwbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            continue
        command = importlib.import_module(module)
        command.add_arguments(
            sub.add_parser(
                name,
                help=command.HELP,
                description=None if name in PLAIN_HELP else command.__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    return parser


def check_environment() -> None:
    """Settings from the environment that every command obeys, checked before it starts:
    ``HWBENCH_CPU_ISA`` must name an ISA level this CPU runs (UserError, exit 2, otherwise)."""
    level = cpu_model.isa_level_from_env()
    if level is None:
        return
    features = None
    if present("llvmlite"):
        import llvmlite.binding as llvm  # optional SDK: without it the level's name alone is checked

        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # LLVM cannot read this host's features: the level's name alone is checked
            features = None
    cpu_model.check_level(level, features)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hwbench`` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        check_environment()
        return int(importlib.import_module(COMMANDS[args.command]).main(args))
    except UserError as exc:
        print(f"hwbench: error: {printable(exc)}", file=sys.stderr)
        return exc.exit_code
    except Stopped as stop:
        print(f"hwbench: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return exit_status(stop.signum)
    except KeyboardInterrupt:
        print("hwbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
