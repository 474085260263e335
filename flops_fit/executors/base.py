"""The executor protocol: what the sweep driver needs from any executor.

An executor is built by its entry's builder with the sweep's options plus ``on_progress``
and used as a context manager::

    with create_executor("local", workers=2, on_progress=sink) as executor:
        for item, outcome in executor.map(fn, items):
            ...

``map(fn, items)`` calls ``fn(item, progress)`` for each item, wherever the executor runs
it, and yields ``(item, result_or_exception)`` as runs finish, in any order; a run that
raised (or whose worker died) yields the exception. ``progress(run_id, done, total,
train_loss)`` is a callable the executor provides that carries reports back to the
driver's ``on_progress``. ``close()`` releases whatever the executor started (worker
processes, a local Ray, queued SLURM jobs), also after an interrupted ``map``. An executor
that keeps files of its own may define ``use_sweep_folder(out_dir)``: the driver calls it
with the sweep's output folder before ``map``.
"""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from flops_fit.errors import OptionError

# (run_id, units trained so far, units planned, mean training loss since the last report)
ProgressSink = Callable[[str, int, int, float], None]
Task = Callable[[Any, ProgressSink], Any]


class Executor(Protocol):
    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...


def check_options(cls: type, options: dict[str, Any], executor: str) -> dict[str, Any]:
    """``options`` unchanged if ``cls`` accepts every one of them; else OptionError listing
    the ones it knows (the sweep file's ``[executor]`` table lands here)."""
    known = [n for n in inspect.signature(cls).parameters if n != "on_progress"]
    unknown = sorted(set(options) - set(known) - {"on_progress"})
    if unknown:
        raise OptionError(f"unknown option(s) {unknown} for executor {executor!r}; its options: {known}")
    return options


def transportable(value: Any) -> Any:
    """``value``, or if it cannot be pickled and read back (an exception with a custom
    constructor, a lock in a result), a RuntimeError saying what it was: what every executor
    sends back from where a run trained, so that the driver always hears of its outcome."""
    try:
        pickle.loads(pickle.dumps(value))
    except Exception as exc:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(value).__name__}: {value} (could not be sent back: {exc})")
    return value


def ignore_progress(run_id: str, done: int, total: int, loss: float) -> None:
    """The sink used when nobody listens."""


class ClosingExecutor:
    """Context-manager plumbing shared by the built-in executors: ``with`` calls ``close``."""

    def close(self) -> None:
        """Release what the executor started; the default has nothing to release."""

    def __enter__(self) -> ClosingExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
