"""Stop requests: Ctrl-C and SIGTERM become a flag that training loops read between steps.

Clusters (SLURM, Kubernetes) send SIGTERM some seconds before SIGKILL. A signal handler
must not checkpoint (it runs between any two bytecodes, possibly mid-step), so the handler
only records the request; the trainer reads ``stop_requested()`` after each optimizer step,
checkpoints and raises ``Interrupted``. A second signal of the same kind while a stop is
pending interrupts at once (the user insists).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flops_fit.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_requested: int | None = None


def request_stop(signum: int = signal.SIGTERM) -> None:
    """Ask every training loop in this process to checkpoint and stop."""
    global _requested
    if _requested is None:
        _requested = signum


def stop_requested() -> int | None:
    """The signal number of a pending stop request, or None."""
    return _requested


def clear_stop() -> None:
    global _requested
    _requested = None


def raise_if_stopped() -> None:
    """Raise ``Interrupted`` if a stop was requested (for loops between runs)."""
    if _requested is not None:
        raise Interrupted(_requested, f"stopped by signal {_requested}")


def _handler(signum: int, frame: Any) -> None:
    if _requested is not None:
        raise Interrupted(signum, f"stopped at once by a second signal {signum}")
    request_stop(signum)


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within the block, ``signals`` request a stop instead of killing the process.

    Only the main thread can install handlers; elsewhere the block changes nothing.
    The previous handlers and a clear flag are restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in signals}
    clear_stop()
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        clear_stop()
