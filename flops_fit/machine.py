"""What this machine and this process can give parallel work: the cores not already busy, and
whether worker processes may start from here at all.

Worker processes (spawned, or forked from a fork server) import the caller's main script again. A
script that calls the fit at its top level, with no ``if __name__ == "__main__":`` guard, would run
again in every worker, which multiprocessing refuses. So work that chooses its own number of
processes (``workers=None``) takes the free cores only where that cannot happen: a REPL or notebook
(no main script), ``python -m`` or a console script such as ``flops-fit`` (guarded), or a script with
the guard; anywhere else it stays in this process.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from typing import Any

from flops_fit.checks import positive_int


def free_cores() -> int:
    """Cores not already busy (at least 1): the cores less the load, the 1-minute load average or the
    tasks running now besides this one, whichever is less. The average alone still counts a job that
    ended seconds ago (a fit run twice in a row would find its own first run's load); the count alone
    misses a job that is between two bursts."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        load = 0.0
    now = running_elsewhere()
    if now is not None:
        load = min(load, now)
    return max(1, min(cores, round(cores - load)))


def running_elsewhere() -> int | None:
    """Tasks running or ready to run on this machine now, this one left out (Linux: /proc/loadavg's
    fourth field); None where the platform does not say."""
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            running = int(handle.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None
    return max(0, running - 1)


def can_start_workers() -> bool:
    """Whether worker processes can start without running the main script's top level again."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None:  # a REPL, a notebook, python -c: nothing to import again
        return True
    return guarded(os.path.abspath(path))


@functools.lru_cache(maxsize=8)
def guarded(path: str) -> bool:
    """Whether the script at ``path`` has a top-level ``if __name__ == "__main__":`` block (unreadable: no)."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.If) and _is_main_test(node.test) for node in tree.body)


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    values = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(values) == 1


def resolve_workers(workers: Any, what: str, error: type[Exception]) -> int:
    """``workers`` processes as given (a positive integer), or for None the free cores where worker
    processes can start from here (``can_start_workers``), else 1."""
    if workers is None:
        return free_cores() if can_start_workers() else 1
    return positive_int(workers, what, error)


__all__ = ["can_start_workers", "free_cores", "guarded", "resolve_workers", "running_elsewhere"]
