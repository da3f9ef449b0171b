"""BabelStream's memory-bandwidth operations: copy, mul, add, triad, dot."""
