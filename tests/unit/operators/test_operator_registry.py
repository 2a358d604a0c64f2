"""The operator registry: every kind an ``OperatorSpec`` accepts has exactly one operator class."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.operators.operator_registry import OPERATOR_CLASSES, create_operator
from flinklike_spark._runtime.operators.operator_spec import OPERATOR_KINDS, OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import MapOperator


def test_the_registry_covers_exactly_the_kinds_a_spec_accepts():
    assert set(OPERATOR_CLASSES) == OPERATOR_KINDS


def test_a_spec_of_an_unknown_kind_is_refused_with_the_valid_kinds():
    with pytest.raises(ValueError, match=r"unknown operator kind 'mapp'; valid kinds: \[.*'map'"):
        OperatorSpec(uid="m", name="m", kind="mapp")


def test_create_operator_instantiates_the_registered_class():
    spec = OperatorSpec(uid="m", name="m", kind="map", function=lambda r: r)
    operator = create_operator(spec)
    assert type(operator) is MapOperator and operator.spec is spec
