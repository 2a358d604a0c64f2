"""PyFlink's ``pyflink.datastream.formats``: the ``json``, ``csv`` and ``avro`` row formats of message-based
connectors, and Avro in Confluent's schema-registry wire format (``avro_confluent``)."""

__all__: list[str] = []
