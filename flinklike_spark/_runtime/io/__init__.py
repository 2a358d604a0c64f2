"""A task's input side of a checkpoint (Flink's ``streaming.runtime.io.checkpointing``).

Barrier alignment (aligned, unaligned, aligned with a timeout) and the
in-flight channel state that unaligned checkpoints record.
"""
