"""Exactly-once resume with checkpoints, channel state and a DeltaSink all on an object store.

A keyed job (SequenceSource -> key_by -> slow pass-through -> DeltaSink) whose
checkpoint directory and Delta table are on the S3 server (or Azurite) is
cancelled after two completed checkpoints and resumed from the directory. The
table, read in commit order from the store, must hold per key every ``seq``
exactly once and in order: a lost channel-state buffer, a replayed commit or a
commit lost to a concurrent writer fails it.
"""

from __future__ import annotations

import pytest

from tests.support.objectstore_jobs import (
    MODES,
    stop_and_resume,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.mark.parametrize("mode", MODES)
def test_exactly_once_across_stop_and_resume(store, mode):
    stop_and_resume(store, mode)
