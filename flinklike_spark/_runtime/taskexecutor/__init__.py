"""Runtime internals: taskexecutor."""
