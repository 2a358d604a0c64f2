"""Runtime internals: jobmaster."""
