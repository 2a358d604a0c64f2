"""The task loop (Flink's ``streaming.runtime.tasks``).

The stream task and its mailbox, the operator chain and its outputs, and the
subtask's checkpoint coordinator.
"""
