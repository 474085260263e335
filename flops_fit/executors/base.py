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

from flops_fit.errors import ExecutorError, FlopsFitError, OptionError

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


# what an executor that broke off leaves: the driver stored each outcome as it came
KEPT = "; the runs it returned are stored, and the sweep with --resume trains the rest"


def checked_map(executor: Executor, fn: Task, items: list[Any], where: str) -> Iterator[tuple[Any, Any]]:
    """``executor.map(fn, items)``, held to the protocol: a plugin's executor that raised inside ``map``,
    yielded something other than an ``(item, outcome)`` pair of an item it was given, or ended before every
    item had its outcome, ended the sweep in a traceback (a driver's unpacking) or, for the last, with the
    rest of the runs silently untrained. Each is an ``ExecutorError`` naming the executor (``where``); the
    outcomes yielded before it have been taken by the caller."""
    remaining = {id(item): item for item in items}  # by identity: an executor yields the items it was given
    stream = iter(executor.map(fn, items))
    while True:
        try:
            pair = next(stream)
        except StopIteration:
            break
        except FlopsFitError:  # the executor's own message (a worker lost too often)
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's executor failing inside map
            raise ExecutorError(f"{where} failed while running the sweep: {type(exc).__name__}: {exc}{KEPT}") from exc
        given = isinstance(pair, tuple) and len(pair) == 2 and (id(pair[0]) in remaining or pair[0] in items)
        if not given:
            raise ExecutorError(f"{where} yielded {type(pair).__name__}, not an (item, result) pair of an item it was "
                                f"given: its map(fn, items) must yield (item, fn(item, progress)) for each item{KEPT}")
        if remaining.pop(id(pair[0]), None) is None:  # an equal copy (one that came back through pickle)
            remaining = {key: item for key, item in remaining.items() if item != pair[0]}
        yield pair
    if remaining:
        raise ExecutorError(f"{where} ended with {len(remaining)} of {len(items)} work items without a result: its "
                            f"map(fn, items) must yield one (item, result) pair for every item{KEPT}")


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
