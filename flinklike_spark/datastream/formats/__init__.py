"""PyFlink's ``pyflink.datastream.formats``: the ``json`` and ``csv`` row formats of message-based connectors."""

__all__: list[str] = []
