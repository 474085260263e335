"""The local executor: runs one after another in this process, or several at once on
separate worker processes (CPU threads split between them, or one process per GPU).

Contract (any executor): ``map(fn, items)`` yields ``(item, result_or_exception)`` as runs
finish, in any order. Progress reports from workers come back over a queue and go to
``on_progress``; the caller (the sweep driver) stays the only writer of the store.
Ctrl-C stops the workers and propagates ``KeyboardInterrupt`` to the caller.
"""

from __future__ import annotations

import os
import queue as queue_module
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from flops_fit import progress
from flops_fit.errors import FlopsFitError


class LocalExecutor:
    """``workers`` processes (1: in this process); ``devices`` like ``["cuda:0", "cuda:1"]``
    gives one worker per GPU; ``threads`` torch threads per worker (default: CPUs / workers
    for worker processes, torch's own setting in this process). On a small or shared CPU
    ``threads=1`` is often fastest for small models: idle threads spin and contend."""

    def __init__(self, workers: int = 1, devices: list[str] | None = None, threads: int | None = None,
                 on_progress: progress.Sink | None = None) -> None:
        if devices:
            bad = [d for d in devices if not str(d).startswith("cuda:")]
            if bad:
                raise FlopsFitError(f"devices must look like 'cuda:0', got {bad}")
            workers = len(devices)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise FlopsFitError(f"workers must be a positive integer, got {workers!r}")
        self.workers, self.devices = workers, list(devices or [])
        self.threads = threads
        self.on_progress = on_progress

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        items = list(items)
        if self.workers == 1 and not self.devices:
            yield from self._serial(fn, items)
        else:
            yield from self._parallel(fn, items)

    def _serial(self, fn, items):
        previous = progress.set_sink(self.on_progress)
        if self.threads:
            import torch

            threads, _ = torch.get_num_threads(), torch.set_num_threads(self.threads)
        try:
            for item in items:
                try:
                    result = fn(item)
                except Exception as exc:  # noqa: BLE001 - a failed run is a result; the sweep goes on
                    result = exc
                yield item, result
        finally:
            progress.set_sink(previous)
            if self.threads:
                torch.set_num_threads(threads)

    def _parallel(self, fn, items):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        reports = context.Queue()
        device_ids = context.Queue()
        for d in self.devices:
            device_ids.put(d.split(":", 1)[1])
        pool = ProcessPoolExecutor(
            max_workers=min(self.workers, max(1, len(items))), mp_context=context,
            initializer=_init_worker,
            initargs=(reports, device_ids if self.devices else None,
                      self.threads or max(1, (os.cpu_count() or 1) // self.workers)),
        )
        futures: dict[Future, Any] = {pool.submit(fn, item): item for item in items}
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                self._drain(reports)
                for future in done:
                    exc = future.exception()
                    yield futures[future], exc if exc is not None else future.result()
            pool.shutdown(wait=True)
        except BaseException:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
            raise

    def _drain(self, reports) -> None:
        while True:
            try:
                message = reports.get_nowait()
            except queue_module.Empty:
                return
            if self.on_progress is not None:
                self.on_progress(*message)


def _init_worker(reports, device_ids, threads: int) -> None:
    """Worker set-up: leave Ctrl-C to the driver, pin a GPU, size the thread pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if device_ids is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device_ids.get()
    import torch

    torch.set_num_threads(threads)
    progress.set_sink(lambda *message: reports.put(message))


def build(**options: Any) -> LocalExecutor:
    return LocalExecutor(**options)
