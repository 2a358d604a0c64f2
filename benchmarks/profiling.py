"""Sampling profiles of running processes with py-spy, summarized as text (the ``bench`` extra installs it).

    profile = SampledProfile(pids, seconds=6, out=Path("profiles")).start()
    ...  # what to profile happens now, in those processes
    profile.wait()
    print(profile.summary())

Each pid gets one ``py-spy record`` (``--format raw``: one line per distinct
stack with its sample count) for ``seconds``; py-spy samples only threads that
are running (a thread waiting on a lock or a socket is not sampled, one in
native code, e.g. Arrow reading a file, is). The summary lists per process the
functions with the most samples *inclusive* (the function or anything it called
was on the stack) and *exclusive* (it was the innermost frame).
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SampledProfile"]


class SampledProfile:
    """py-spy on ``pids`` for ``seconds`` from :meth:`start`; :meth:`wait` waits for the samplers to finish."""

    def __init__(
        self, pids: Iterable[int], *, seconds: float, out: Path, rate: int = 100, subprocesses: bool = False
    ) -> None:
        if shutil.which("py-spy") is None:
            raise SystemExit("profiling needs py-spy: pip install -e '.[bench]'")
        self.pids = sorted(set(pids))
        self.seconds = seconds
        self.rate = rate
        self.subprocesses = subprocesses  # each pid's descendants too (one profile per pid, stacks merged)
        self.out = out
        self._samplers: list[subprocess.Popen] = []

    def path(self, pid: int) -> Path:
        return self.out / f"py-spy-{pid}.txt"

    def start(self) -> SampledProfile:
        self.out.mkdir(parents=True, exist_ok=True)
        for pid in self.pids:
            self._samplers.append(subprocess.Popen(
                ["py-spy", "record", "--pid", str(pid), "--rate", str(self.rate), "--duration",
                 str(max(1, round(self.seconds))), "--format", "raw", "--output", str(self.path(pid)), "--nonblocking",
                 *(["--subprocesses"] if self.subprocesses else [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            ))  # fmt: skip
        time.sleep(0.3)  # py-spy attaches before the profiled event starts
        return self

    def wait(self) -> None:
        for sampler in self._samplers:
            try:
                sampler.wait(timeout=self.seconds + 30)
            except subprocess.TimeoutExpired:
                sampler.kill()

    def summary(self, top: int = 12) -> str:
        """Per process: its samples, and the functions with the most samples inclusive and exclusive."""
        lines = []
        for pid in self.pids:
            path = self.path(pid)
            if not path.exists():
                lines.append(f"pid {pid}: no profile (the process ended before py-spy attached?)")
                continue
            inclusive: collections.Counter[str] = collections.Counter()
            exclusive: collections.Counter[str] = collections.Counter()
            total = 0
            for line in path.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if not stack or not count.isdigit():
                    continue
                frames = [_frame(f) for f in stack.split(";")]
                total += int(count)
                for frame in set(frames):
                    inclusive[frame] += int(count)
                if frames:
                    exclusive[frames[-1]] += int(count)
            lines.append(f"pid {pid}: {total} samples ({total / self.rate:.2f} s of running threads)")
            for title, counter in (("inclusive", inclusive), ("exclusive", exclusive)):
                lines.append(f"  {title}:")
                lines += [f"    {n / max(total, 1):6.1%}  {frame}" for frame, n in counter.most_common(top)]
        return "\n".join(lines)


def _frame(entry: str) -> str:
    """``function (path/to/module.py:line)`` -> ``function (module.py)``: lines would split one function."""
    name, _, where = entry.partition(" (")
    module = where.rstrip(")").rpartition(":")[0].rsplit("/", 1)[-1]
    return f"{name} ({module})" if module else name
