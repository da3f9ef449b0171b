"""AllReduce: sum across ranks."""
