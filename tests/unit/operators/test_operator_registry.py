"""The operator registry: every kind an ``OperatorSpec`` accepts has exactly one operator class."""

from __future__ import annotations

import pytest

from flinklike_spark._runtime.operators.operator_registry import OPERATOR_CLASSES, create_operator
from flinklike_spark._runtime.operators.operator_spec import OperatorKind, OperatorSpec
from flinklike_spark._runtime.operators.stream_operator import MapOperator


def test_the_registry_covers_exactly_the_kinds_a_spec_accepts():
    assert set(OPERATOR_CLASSES) == set(OperatorKind)


def test_the_kinds_keep_the_strings_job_graphs_plans_and_uids_are_written_with():
    assert {kind.value for kind in OperatorKind} == {
        "async_wait", "co_process", "filter", "flat_map", "keyed_co_process", "keyed_filter", "keyed_flat_map",
        "keyed_map", "keyed_process", "keyed_reduce", "map", "map_batches", "process", "side_output", "sink",
        "source", "timestamps_watermarks", "window",
    }  # fmt: skip
    assert OperatorKind.FLAT_MAP == "flat_map" and f"{OperatorKind.FLAT_MAP}" == "flat_map"


def test_a_spec_given_a_kind_as_its_string_holds_the_enum():
    assert OperatorSpec(uid="m", name="m", kind="keyed_map").kind is OperatorKind.KEYED_MAP


def test_a_spec_of_an_unknown_kind_is_refused_with_the_valid_kinds():
    with pytest.raises(ValueError, match=r"unknown operator kind 'mapp'; valid kinds: \[.*'map'"):
        OperatorSpec(uid="m", name="m", kind="mapp")


def test_create_operator_instantiates_the_registered_class():
    spec = OperatorSpec(uid="m", name="m", kind="map", function=lambda r: r)
    operator = create_operator(spec)
    assert type(operator) is MapOperator and operator.spec is spec
