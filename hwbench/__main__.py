"""``python -m hwbench``: the same as the ``hwbench`` command."""

import sys

from .cli import main

sys.exit(main())
