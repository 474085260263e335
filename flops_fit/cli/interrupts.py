"""What every long command prints when a signal stops it: which signal, and how to go on.

Sweeps, tunes and single runs all save as they go, so an interrupt is never a loss; the message
says so in one place, with the shell's status for a process stopped by that signal (128 + n).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from flops_fit.errors import Interrupted


def interrupted(exc: KeyboardInterrupt, then: str) -> int:
    """Print the interrupt's line ending in ``then`` (how to resume); return the exit status."""
    signum = getattr(exc, "signum", signal.SIGINT)
    print(f"\nflops-fit: interrupted by {signal.Signals(signum).name}; {then}", file=sys.stderr)
    return 128 + signum


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises ``Interrupted`` as Ctrl-C raises KeyboardInterrupt, so a command
    stopped before its own handling begins (planning, the gate, a fit) says so in one line; it exited
    143 with no word. Training installs its own handler (``executors.stopping``) and restores this one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signum, "terminated")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
