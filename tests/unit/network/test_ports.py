"""``free_port``: servers that tests start bind ports the kernel never hands out as a connection's source port."""

from __future__ import annotations

import socket

import pytest

from flinklike_spark._runtime.network import ports
from flinklike_spark._runtime.network.ports import free_port


@pytest.mark.timeout(30)
def test_a_free_port_lies_outside_the_ephemeral_range_and_binds():
    low, high = ports._ephemeral_range()
    picked = {free_port() for _ in range(50)}
    assert all(not low <= port <= high and 1024 < port <= 65535 for port in picked), (picked, low, high)
    assert len(picked) > 1  # random: parallel test workers do not all pick the same one
    with socket.socket() as s:
        s.bind(("127.0.0.1", picked.pop()))


@pytest.mark.timeout(30)
def test_a_port_in_use_is_not_picked(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(ports, "_ephemeral_range", lambda: (port + 1, 65535))
        monkeypatch.setattr(ports, "_LOWEST", port)  # the one port to draw from is the taken one
        monkeypatch.setattr(ports, "_MIN_ROOM", 0)
        assert free_port() != port  # after the draws, the kernel's pick


@pytest.mark.timeout(30)
def test_without_room_outside_the_ephemeral_range_the_kernel_picks(monkeypatch):
    monkeypatch.setattr(ports, "_ephemeral_range", lambda: (1024, 65535))
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
