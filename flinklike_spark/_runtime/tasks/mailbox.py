"""The task's mailbox: control actions ("mails") run on the task thread between records.

Any thread may ``put`` a mail or ``wake`` the loop (data arrived, output
capacity freed). Only the task thread runs mails (``run_pending``), so operator
state is touched by one thread only.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

__all__ = ["Mailbox"]


class Mailbox:
    def __init__(self) -> None:
        self._mails: collections.deque[tuple[str, Callable[[], None]]] = collections.deque()
        self._wakeup = threading.Event()

    def put(self, description: str, action: Callable[[], None]) -> None:
        """Enqueue ``action``; it runs on the task thread in FIFO order."""
        self._mails.append((description, action))
        self._wakeup.set()

    def wake(self) -> None:
        self._wakeup.set()

    def prepare_wait(self) -> None:
        """Clear the wake-up flag; call before re-checking for work, then ``wait``."""
        self._wakeup.clear()

    def wait(self, timeout: float | None) -> None:
        self._wakeup.wait(timeout)

    def run_pending(self) -> int:
        """Run every mail queued now; return how many ran."""
        ran = 0
        mails = self._mails
        while mails:
            _, action = mails.popleft()
            action()
            ran += 1
        return ran

    def __len__(self) -> int:
        return len(self._mails)
