"""PyFlink's ``pyflink.datastream.connectors.kafka``, and a local broker for tests and examples."""

from flinklike_spark.datastream.connectors.kafka.local_broker import LocalKafkaBroker, LocalKafkaBrokerConfig

__all__ = ["LocalKafkaBroker", "LocalKafkaBrokerConfig"]
