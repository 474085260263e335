"""The sweep's progress display: two bars on stderr, redrawn in place on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from flops_fit.tables import duration

PACE_AFTER = (0.05, 10.0)  # the time left is shown once this share of the FLOPs and these seconds have passed


def _bar(done: float, total: float, width: int = 24) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


class SweepDisplay:
    """Two progress bars on stderr (the sweep's runs and the current run), redrawn in place
    on a terminal; plain lines, at most one per ``interval`` seconds per run, otherwise."""

    def __init__(self, total_runs: int, done_runs: int = 0, stream: TextIO | None = None,
                 enabled: bool = True, interval: float = 10.0, flops: float = 0.0) -> None:
        self.total, self.done, self.failed = total_runs, done_runs, 0
        self.flops, self.flops_done = flops, 0.0  # FLOPs this sweep trains here, and those trained so far
        self._start = time.monotonic()
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.interval = interval
        self._last_line = 0.0
        self._current = ""

    def _emit(self, text: str, final: bool = False) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _sweep_part(self) -> str:
        failed = f", {self.failed} failed" if self.failed else ""
        left = self.seconds_left() if self.done < self.total else None
        pace = "" if left is None else f", about {duration(left)} left"
        return f"sweep {_bar(self.done, self.total, 16)} {self.done}/{self.total} runs{failed}{pace}"

    def trained(self, flops: float) -> None:
        """``flops`` more of the sweep's FLOPs trained (any run, any worker)."""
        self.flops_done += flops

    def seconds_left(self) -> float | None:
        """The time left at the pace measured so far (FLOPs trained per second since the display
        started, every worker together), or None before the pace means anything."""
        elapsed = time.monotonic() - self._start
        share = self.flops_done / self.flops if self.flops else 0.0
        if share < PACE_AFTER[0] or elapsed < PACE_AFTER[1]:
            return None
        return max(0.0, elapsed * (1.0 - share) / share)

    def run_progress(self, run_id: str, done: int, total: int, loss: float) -> None:
        now = time.monotonic()
        if not self.tty and now - self._last_line < self.interval and done < total:
            return
        self._last_line = now
        self._current = f"run {run_id[:8]} {_bar(done, total)} {done / total:5.1%} loss {loss:.4f}"
        self._emit(f"{self._sweep_part()} | {self._current}")

    def note(self, line: str) -> None:
        """A line of its own above the bars (the parity gate's outcome, say)."""
        self._emit(line, final=True)

    def run_finished(self, line: str, failed: bool = False) -> None:
        self.done += 1
        self.failed += failed
        self._emit(f"{self._sweep_part()} | {line}", final=True)
