"""Fixtures for checkpoint storage tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def base(tmp_path):
    """A checkpoint base URL (a local directory that does not exist yet)."""
    return str(tmp_path / "ckpt")
