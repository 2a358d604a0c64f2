"""The task's mailbox: control actions ("mails") run on the task thread between records.

Any thread may ``put`` a mail or ``wake`` the loop (data arrived, output
capacity freed). Only the task thread runs mails (``run_pending``), so operator
state is touched by one thread only; a :class:`MailTimer` runs its callback as a
mail, so timers too run on the task thread.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

__all__ = ["MailTimer", "Mailbox"]


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


class MailTimer:
    """A cancellable one-shot timer that runs its callback as a mail of the task."""

    def __init__(self, mailbox: Mailbox, delay: float, callback: Callable[[], None]) -> None:
        self._cancelled = threading.Event()
        self._callback = callback
        self._mailbox = mailbox
        self._timer = threading.Timer(delay, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self._mailbox.put("timer", self._run)

    def _run(self) -> None:
        if not self._cancelled.is_set():
            self._callback()

    def cancel(self) -> None:
        self._cancelled.set()
        self._timer.cancel()
