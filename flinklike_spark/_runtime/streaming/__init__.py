"""Runtime internals: streaming."""
