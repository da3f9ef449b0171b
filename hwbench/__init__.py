"""hwbench: portable kernels beside vendor libraries, on every backend a node has.

Importing this package loads no device SDK; backends import theirs when probed.
"""

__version__ = "0.1.0"
