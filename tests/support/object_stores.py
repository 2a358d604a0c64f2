"""The object-store servers' well-known settings and :class:`Store`, what the ``store`` fixtures give a test.

The servers themselves are started by tests/objectstore/conftest.py.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_DIR",
    "AZURITE_KEY",
    "AZURITE_NODE",
    "AZURITE_VERSION",
    "REPO",
    "S3_ACCESS_KEY",
    "S3_BUCKET",
    "S3_SECRET_KEY",
    "Store",
]

REPO = Path(__file__).resolve().parents[2]
AZURITE_VERSION = "3.37.0"  # the first that honours List Blobs' startFrom (see tests/objectstore/conftest.py)
AZURITE_NODE = "22"  # the Node.js major Azurite 3.37 supports (package.json engines: >=22)
AZURITE_DIR = REPO / ".cache" / f"azurite-{AZURITE_VERSION}"
AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public, in Azurite's documentation).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
S3_BUCKET = "flinklike-test"
S3_ACCESS_KEY = "flinklike-access"
S3_SECRET_KEY = "flinklike-s3-SECRET-do-not-log-7f3a"


@dataclasses.dataclass(frozen=True)
class Store:
    """One running server: ``config`` holds the Flink keys that reach it, ``url()`` a fresh location."""

    name: str
    root: str
    config: dict[str, str]

    def url(self, what: str) -> str:
        return f"{self.root}/{what}-{uuid.uuid4().hex[:8]}"

    @property
    def storage(self):
        from flinklike_spark.config import Configuration

        return Configuration(self.config).storage

    def layout(self, url: str):
        from checkpointing import CheckpointLayout

        return CheckpointLayout(base_url=url, storage=self.storage)

    def filesystem(self, url: str):
        import fsspec

        fs, root = fsspec.core.url_to_fs(url, **self.storage.options(url).fsspec)
        # fsspec shares one instance per set of options, with the runtime in this process too, and object-store
        # clients cache listings: a test that lists what the job wrote must not read a listing cached before
        fs.invalidate_cache()
        return fs, root
