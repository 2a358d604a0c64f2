"""Picking a loopback port for a server that another process will bind (a Kafka broker, a Spark master, moto).

Between the pick and the server's bind the port is free for anyone. A port
from ``bind(("127.0.0.1", 0))`` lies in the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default), the
range every outgoing connection takes its source port from: on a machine
running a test suite the next client connection can take it, and the server
fails with "Address already in use" (a Kafka broker did, in CI). So
:func:`free_port` picks below that range, where the kernel never assigns a
port by itself, and checks that the port is free now.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_LOWEST = 10000  # above the registered ports most local services use (Kafka's 9092, Spark's 7077 and 8080)
_ATTEMPTS = 200
_MIN_ROOM = 1000  # a range narrower than this is not worth drawing from


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):  # not Linux: IANA's dynamic range, the default of macOS and Windows
        return 49152, 65535


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback TCP port that is free now and that the kernel does not hand out as a source port.

    Picked at random (parallel test workers rarely meet) outside the ephemeral
    range; when that range leaves no room below or above it, a port the kernel
    picks.
    """
    low, high = _ephemeral_range()
    candidates = [r for r in ((_LOWEST, low - 1), (high + 1, 65535)) if r[1] - r[0] >= _MIN_ROOM]
    rng = random.SystemRandom()
    for _ in range(_ATTEMPTS if candidates else 0):
        first, last = rng.choice(candidates)
        port = rng.randint(first, last)
        if _bindable(port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
