"""The ``hwbench`` command: one module per subcommand, each of one shape (``HELP``,
``add_arguments(parser)``, ``main(args) -> int``), assembled and run by :mod:`.main`,
which maps errors to exit codes. Option checks that several commands share are in
:mod:`.options`.

May import: every other hwbench package.
"""

from hwbench.cli.main import main

__all__ = ["main"]
