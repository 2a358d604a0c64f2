"""Side outputs: ``OutputTag`` names a secondary output of an operator (PyFlink's ``OutputTag``).

A process function emits to it with ``ctx.output(tag, value)`` (or, as in
PyFlink, by yielding ``(tag, value)``); ``stream.get_side_output(tag)`` is the
stream of those values. A window's ``side_output_late_data(tag)`` sends late
elements there. Tags are equal when their ids are equal.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from flinklike_spark.errors import ConfigurationError

__all__ = ["OutputTag"]


class OutputTag:
    """A named side output.

    Args:
        tag_id: the tag's name; unique per operator.
        type_info: optional declared type of the side output: PyFlink's ``TypeInformation``
            (``Types.ROW([...])``...) or a ``pyarrow.Schema``;
            without it the schema is inferred from the first values.
    """

    __slots__ = ("tag_id", "type_info")

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ConfigurationError(f"OutputTag needs a non-empty string id, got {tag_id!r}")
        if type_info is not None and not isinstance(type_info, pa.Schema):
            from flinklike_spark.common.typeinfo import TypeInformation, to_arrow_schema

            if not isinstance(type_info, TypeInformation):
                raise ConfigurationError(
                    f"OutputTag {tag_id!r}: type_info must be a TypeInformation (Types.ROW([...]), "
                    f"Types.STRING(), ...), a pyarrow.Schema, or None to infer it; got {type_info!r}"
                )
            type_info = to_arrow_schema(type_info)  # PyFlink's form: OutputTag("late", Types.ROW([...]))
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"

    def __getstate__(self):
        return (self.tag_id, self.type_info)

    def __setstate__(self, state) -> None:
        self.tag_id, self.type_info = state
