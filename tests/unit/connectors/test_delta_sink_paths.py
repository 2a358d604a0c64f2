"""DeltaSink explains a path that cannot hold a table (issue 9 item 8)."""

from __future__ import annotations

import pytest

from connectors.delta import DeltaSink
from flinklike_spark.connector_api import SinkWriterContext
from flinklike_spark.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)


def test_a_regular_file_is_reported_as_a_file_not_as_missing(tmp_path):
    path = tmp_path / "report.csv"
    path.write_text("not a table\n")
    sink = DeltaSink(path)
    writer = sink.create_writer(SinkWriterContext(subtask_index=0, parallelism=1, job_id="job", operator_uid="s"))
    with pytest.raises(ConfigurationError) as info:
        writer.open()
    message = str(info.value)
    assert str(path) in message and "is a regular file, not a directory" in message
    assert "does not exist" not in message
    assert path.read_text() == "not a table\n", "the file is left alone"
