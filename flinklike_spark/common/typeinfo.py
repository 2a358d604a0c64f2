"""PyFlink's pyflink.common.typeinfo.
"""

from flinklike_spark.typeinfo import TypeInformation, Types

__all__ = [
    "TypeInformation",
    "Types",
]
