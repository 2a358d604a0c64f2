"""PyFlink's ``pyflink.common.serialization``: :class:`Encoder` for row-format file sinks."""

from __future__ import annotations

import dataclasses

from flinklike_spark.errors import ConfigurationError

__all__ = ["Encoder"]


@dataclasses.dataclass(frozen=True)
class Encoder:
    """How a row-format :class:`~flinklike_spark.datastream.connectors.file_system.FileSink` writes a record."""

    charset_name: str = "UTF-8"

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        """Each record's string form, one per line (Flink's ``SimpleStringEncoder``).

        Raises:
            ConfigurationError: a charset other than UTF-8 (the only one written here).
        """
        if charset_name.replace("-", "").upper() != "UTF8":
            raise ConfigurationError(f"Encoder.simple_string_encoder: charset {charset_name!r} is not supported; use 'UTF-8'")
        return Encoder(charset_name)
