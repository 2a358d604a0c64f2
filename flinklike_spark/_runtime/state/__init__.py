"""Keyed state.

The backend seam with its heap and RocksDB backends, TTL and change
tracking, state keys, incremental snapshots, and key-group math.
"""
