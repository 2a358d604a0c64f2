"""Tests that need something of the machine the README's test command does not install.

Outside CI such a test skips with the reason (a new user's ``python3 -m pytest`` stays green and says
what it left out); under ``CI=true`` (.ci/run installs every such thing) it fails, so a CI that lost an
install step does not pass by skipping.
"""

from __future__ import annotations

import os

import pytest

__all__ = ["require_environment"]


def require_environment(available: bool, reason: str) -> None:
    """Skip (outside CI) or fail (``CI=true``) with ``reason`` unless ``available``."""
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: .ci/run must provide it)")
    pytest.skip(reason)
