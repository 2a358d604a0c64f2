"""PyFlink's ``pyflink.datastream.connectors.base``: what connectors share (:class:`DeliveryGuarantee`)."""

from __future__ import annotations

from enum import Enum

__all__ = ["DeliveryGuarantee"]


class DeliveryGuarantee(Enum):
    """What a sink promises about its output when the job fails over (Flink's ``DeliveryGuarantee``).

    * ``EXACTLY_ONCE``: each record's output is visible exactly once, also across
      failures (the sink's writes are transactional and committed when a
      checkpoint completes; consumers must read committed data only).
    * ``AT_LEAST_ONCE``: nothing is lost; after a failure output written since the
      last checkpoint may be written again.
    * ``NONE``: best effort; records may be lost or duplicated.
    """

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
    NONE = 2
