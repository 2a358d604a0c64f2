"""PyFlink's ``pyflink.datastream.formats``: the ``json``, ``csv`` and ``avro`` row formats of message-based
connectors, and Avro and JSON Schema in Confluent's schema-registry wire format (``avro_confluent``,
``json_confluent``)."""

__all__: list[str] = []
