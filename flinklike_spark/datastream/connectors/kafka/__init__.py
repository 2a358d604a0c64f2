"""PyFlink's ``pyflink.datastream.connectors.kafka``: a face of :mod:`connectors.kafka`, where the Kafka
connector lives (on librdkafka, ``pip install flinklike-spark[kafka]``; see docs/kafka.md).

:class:`LocalKafkaBroker` (a real single-node broker for tests and examples) is
also named here, as earlier versions did; its home is :mod:`connectors.kafka.testing`.
"""

from connectors import kafka as _connector
from connectors.kafka import *  # noqa: F403 - a face: the connector's public names, as its __all__ lists them
from connectors.kafka.testing import LocalKafkaBroker, LocalKafkaBrokerConfig

__all__ = [*_connector.__all__, "LocalKafkaBroker", "LocalKafkaBrokerConfig"]
