"""Runtime internals: graph."""
