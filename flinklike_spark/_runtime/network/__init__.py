"""Runtime internals: network."""
