"""Internals of the engine. Nothing here is public API; it may change without notice."""
