"""The shared Parquet input: the workloads' records as files, written once per harness run and read by
every engine that reads files (Spark's file stream, flinklike-spark's ``parquet`` source).

Row ``i`` is ``key = i % keys``, ``seq = i // keys``, ``ts = seq`` ms (the same records the
in-process generators make). File ``n`` holds rows ``[n * rows_per_file, (n + 1) * rows_per_file)``,
so the first ``records // rows_per_file`` files are exactly a run of ``records`` records: one set of
files serves every workload and size. Standard library, numpy and pyarrow only (every venv has them).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["ensure_input", "input_files"]

_MANIFEST = "manifest.json"


def ensure_input(directory: str, records: int, keys: int, rows_per_file: int) -> float:
    """Write the files for ``records`` rows under ``directory`` unless they are there; seconds spent."""
    import time

    started = time.perf_counter()
    if records % rows_per_file:
        raise ValueError(f"records ({records}) must be a multiple of rows_per_file ({rows_per_file})")
    os.makedirs(directory, exist_ok=True)
    manifest = os.path.join(directory, _MANIFEST)
    want = {"keys": keys, "rows_per_file": rows_per_file}
    done = json.load(open(manifest)) if os.path.exists(manifest) else {}
    have = done.get("files", 0) if {k: done.get(k) for k in want} == want else 0
    for n in range(have, records // rows_per_file):
        i = np.arange(n * rows_per_file, (n + 1) * rows_per_file, dtype=np.int64)
        seq = i // keys
        table = pa.table({"key": i % keys, "seq": seq, "ts": pa.array(seq, pa.timestamp("ms"))})
        pq.write_table(table, os.path.join(directory, f"part-{n:05d}.parquet"), row_group_size=rows_per_file)
    with open(manifest, "w") as f:
        json.dump({**want, "files": max(have, records // rows_per_file)}, f)
    return time.perf_counter() - started


def input_files(directory: str, records: int, keys: int) -> list[str]:
    """The files holding exactly the first ``records`` rows; ValueError if the directory does not have them."""
    with open(os.path.join(directory, _MANIFEST)) as f:
        manifest = json.load(f)
    rows_per_file = manifest["rows_per_file"]
    if manifest["keys"] != keys or records % rows_per_file or records // rows_per_file > manifest["files"]:
        raise ValueError(f"{directory} holds {manifest['files']} files of {rows_per_file} rows over "
                         f"{manifest['keys']} keys: not the first {records} records over {keys} keys")  # fmt: skip
    return [os.path.join(directory, f"part-{n:05d}.parquet") for n in range(records // rows_per_file)]
