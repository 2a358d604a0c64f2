"""Which operator of a savepoint: Flink's ``OperatorIdentifier``."""

from __future__ import annotations

import dataclasses

from flinklike_spark.errors import StateProcessorError

__all__ = ["OperatorIdentifier", "as_identifier"]


@dataclasses.dataclass(frozen=True)
class OperatorIdentifier:
    """An operator, named by the uid set with ``.uid(...)`` in the job (the ``operator_uid`` column).

    Build it with :meth:`for_uid` (Flink's ``OperatorIdentifier.forUid``).
    """

    uid: str

    def __post_init__(self) -> None:
        if not isinstance(self.uid, str) or not self.uid:
            raise StateProcessorError(f"an operator uid must be a non-empty string, got {self.uid!r}")

    @classmethod
    def for_uid(cls, uid: str) -> OperatorIdentifier:
        """The operator whose ``.uid(...)`` is ``uid``."""
        return cls(uid)

    def __str__(self) -> str:
        return self.uid


def as_identifier(operator: OperatorIdentifier | str) -> OperatorIdentifier:
    """``operator`` as an identifier (a plain string is taken as the uid)."""
    if isinstance(operator, OperatorIdentifier):
        return operator
    if isinstance(operator, str):
        return OperatorIdentifier.for_uid(operator)
    raise StateProcessorError(f"an operator is an OperatorIdentifier or a uid string, got {operator!r}")
