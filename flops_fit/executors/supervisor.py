"""Child processes that each talk to this one over a pipe: one supervisor for the local
executor's workers and for a run's ranks (``training.launch``).

Children are spawned (no state forked from a process that may hold threads or a CUDA
context). ``events`` multiplexes the pipes and the processes' sentinels with
``multiprocessing.connection.wait``, so a child that dies (killed, out of memory) is noticed at
once: it comes as an ``"exit"`` event, once, after every message it sent before. ``close``
ends every child still running. On the child's side, ``send`` carries a value back, or for
one that cannot be pickled a ``RuntimeError`` saying what it was (``executors.base.transportable``).
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from flops_fit.errors import OptionError, show_warning
from flops_fit.executors.base import transportable
from flops_fit.executors.stopping import request_stop, stop_on_signals
from flops_fit.machine import can_start_workers

_GUARD_FIX = 'put the code that runs it under `if __name__ == "__main__":`'


def check_main_guard(spawning: bool = True) -> None:
    """Refuse to start workers that would run the caller's script again: a spawned worker begins by
    running the ``__main__`` script's top level (Python's spawn start method), so a sweep started
    there by a script without an ``if __name__ == "__main__":`` guard starts again in every worker.
    Raised in a worker reaching such a call, and (``spawning``: workers are about to start) in a
    script without the guard (``machine.can_start_workers``, as the fit's workers check)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        script = getattr(sys.modules.get("__mp_main__"), "__file__", None)  # what the worker is running again
        raise OptionError(f"a flops-fit worker process, importing {script or 'the main script'}, reached a call "
                          "that starts a sweep: each worker runs the script's top level again (Python's spawn "
                          f"start method); {_GUARD_FIX}")
    if spawning and not can_start_workers():
        script = getattr(sys.modules.get("__main__"), "__file__", "the main script")
        raise OptionError(f"{script} starts flops-fit's worker processes, and each would run the script's top level "
                          "again (Python's spawn start method), starting the sweep again in every worker: "
                          f"{_GUARD_FIX}, or pass workers=1")


@dataclass(eq=False)
class Child:
    """A started child: its process, this side's end of its pipe, and what it serves (``tag``)."""

    process: Any
    conn: Any
    tag: Any = None


class Supervisor:
    """Start children, hear their messages and exits as they come, end them all on ``close``."""

    def __init__(self) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.children: list[Child] = []
        self.live: dict[Any, Child] = {}  # pipe end -> a child not yet seen to exit

    def start(self, target: Callable[..., None], *args: Any, tag: Any = None, daemon: bool = True) -> Child:
        """Spawn ``target(*args, conn)``, ``conn`` being the child's end of its pipe."""
        check_main_guard()
        ours, theirs = self.context.Pipe()
        process = self.context.Process(target=target, args=(*args, theirs), daemon=daemon)
        process.start()
        theirs.close()
        child = Child(process, ours, tag)
        self.children.append(child)
        self.live[ours] = child
        return child

    def events(self, timeout: float = 0.2) -> Iterator[tuple[Child, str, Any]]:
        """``(child, kind, payload)`` for each message that arrived within ``timeout``, and
        ``(child, "exit", None)`` for each child that ended (its process joined)."""
        sentinels = {child.process.sentinel: child for child in self.live.values()}
        for ready in wait([*self.live, *sentinels], timeout=timeout):
            child = sentinels.get(ready) or self.live.get(ready)
            if child is None or child.conn not in self.live:
                continue  # already seen to exit, through its other handle
            if ready is not child.conn and child.conn.poll():
                continue  # its last messages come first
            try:
                kind, payload = child.conn.recv() if ready is child.conn else ("exit", None)
            except (EOFError, ConnectionResetError):  # ended, or died before it could speak (bootstrapping)
                kind, payload = "exit", None
            if kind == "exit":
                del self.live[child.conn]
                child.process.join()
            yield child, kind, payload

    def close(self) -> None:
        """Kill every child still running and wait for all of them."""
        for child in self.children:
            if child.process.is_alive():
                child.process.kill()
        for child in self.children:
            child.process.join()
            child.conn.close()
        self.children.clear()
        self.live.clear()


@contextmanager
def child_signals() -> Iterator[None]:
    """A child's signals: Ctrl-C is left to its supervisor (which stops the children); SIGTERM
    is a stop request (``executors.stopping``), so the work in hand checkpoints first. Its
    flops-fit warnings print as the CLI prints them: one line (``errors.show_warning``). A child
    whose supervisor dies (kill -9) is asked to stop as SIGTERM would, so it does not train on
    beside the driver that resumes the sweep, its steps uncounted."""
    warnings.showwarning = show_warning
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with stop_on_signals((signal.SIGTERM,)):
        _stop_when_orphaned()
        yield


def _stop_when_orphaned() -> None:
    """Request a stop in this child once its parent process has ended (a watcher thread)."""
    parent = multiprocessing.parent_process()
    if parent is None or getattr(parent, "sentinel", None) is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        request_stop(signal.SIGTERM)

    threading.Thread(target=watch, name="flops-fit-orphan-watch", daemon=True).start()


def send(conn: Any, kind: str, value: Any) -> None:
    """``(kind, value)`` to the supervisor; a value that cannot be pickled goes as a RuntimeError."""
    conn.send((kind, transportable(value)))


def progress_over(conn: Any) -> Callable[..., None]:
    """A progress sink that forwards each report to the supervisor."""
    def progress(*message: Any) -> None:
        conn.send(("progress", message))

    return progress
