"""What every long command prints when a signal stops it: which signal, and how to go on.

Sweeps, tunes and single runs all save as they go, so an interrupt is never a loss; the message
says so in one place, with the shell's status for a process stopped by that signal (128 + n).
"""

from __future__ import annotations

import signal
import sys


def interrupted(exc: KeyboardInterrupt, then: str) -> int:
    """Print the interrupt's line ending in ``then`` (how to resume); return the exit status."""
    signum = getattr(exc, "signum", signal.SIGINT)
    print(f"\nflops-fit: interrupted by {signal.Signals(signum).name}; {then}", file=sys.stderr)
    return 128 + signum
