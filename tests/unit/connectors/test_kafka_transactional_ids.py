"""The KafkaSink's transactional ids and marker groups: names per lineage, and which subtask owns an id."""

from __future__ import annotations

import pytest

from connectors.kafka.transactional_ids import TransactionalIds

pytestmark = pytest.mark.timeout(30)

LINEAGE = "flinklike/0123abcd/kafka"


def test_without_a_user_prefix_the_lineage_prefix_is_the_base():
    ids = TransactionalIds.of(None, LINEAGE)
    assert ids.transactional_id(3, 1) == f"{LINEAGE}-3-1"
    assert ids.marker_group(3) == f"{LINEAGE}-3"
    assert ids.owner(f"{LINEAGE}-3-1") == 3
    assert ids.owner("flinklike/other/kafka-3-1") is None, "another lineage's ids are not this sink's"
    assert ids.owner(f"{LINEAGE}-3") is None


def test_a_user_prefix_keeps_leading_and_each_lineage_gets_its_own_ids():
    first, second = TransactionalIds.of("orders", LINEAGE), TransactionalIds.of("orders", "flinklike/9f/kafka")
    assert first.base.startswith("orders-") and len(first.base) == len("orders-") + 8
    assert first.base != second.base, "a new lineage (duplicates accepted) must not reuse an id"
    assert first == TransactionalIds.of("orders", LINEAGE), "stable across resumes of one lineage"
    # A writer takes over the lingering transactions of every lineage under the user's prefix, and only those.
    assert first.owner(second.transactional_id(5, 0)) == 5
    assert first.owner("orders-extra-5-0") is None
    assert first.owner("ordersx-0123abcd-5-0") is None
