"""Telling Spark Connect client sessions from classic ones."""

from __future__ import annotations

__all__ = ["is_connect_session"]


def is_connect_session(spark) -> bool:
    """True for a Spark Connect client session (``SparkSession.builder.remote(...)``), which has no SparkContext."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # the Connect client's dependencies (pyspark[connect]) are not installed
        return False
    return isinstance(spark, ConnectSession)
