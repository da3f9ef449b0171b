"""``python -m hwbench``: the same as the ``hwbench`` command."""

import sys

from hwbench.cli.main import main

sys.exit(main())
