"""The local executor: runs one after another in this process, or several at once on
worker processes (CPU threads split between them, or one process per GPU).

Each worker process has its own pipe to the driver (``executors.supervisor``, which
multiplexes the pipes and the processes' sentinels): a worker that dies mid-run
(killed, out of memory) is noticed at once, its run is reported failed and a fresh worker
takes the remaining runs. Progress reports come back over the same pipes; the driver stays
the only writer of the store.

A stop request (Ctrl-C or SIGTERM on the driver, ``executors.stopping``) hands out no new
run, sends SIGTERM to the busy workers (whose runs checkpoint and report "interrupted"),
passes on the runs that finish meanwhile, and then raises ``Interrupted``. A worker that gets
SIGTERM directly (a cluster stopping every process) does the same and stops the driver too.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from flops_fit.checks import positive_int
from flops_fit.errors import Interrupted, OptionError, RunLost
from flops_fit.executors.base import (
    ClosingExecutor,
    ProgressSink,
    Task,
    check_options,
    ignore_progress,
)
from flops_fit.executors.stopping import raise_if_stopped, request_stop, stop_requested
from flops_fit.executors.supervisor import Child, Supervisor, child_signals, progress_over, send
from flops_fit.executors.threads import default_threads, item_threads
from flops_fit.plugin.contracts import ExecutorEntry
from flops_fit.plugin.hookspecs import hookimpl


class LocalExecutor(ClosingExecutor):
    """``workers`` processes (1: in this process); ``devices`` like ``["cuda:0", "cuda:1"]``
    gives one worker per GPU (a GPU named twice: two workers share it), and ``"cuda:0,1"``
    gives a worker two GPUs, as a run of ``processes_per_run = 2`` needs (one per rank);
    ``threads`` torch threads per worker (default: what the runs' step size can use, within
    each worker's share of the cores the machine has free: ``executors.threads``; a program of
    runs trained together gets that for each run, within the same share). A run of
    ``processes_per_run = k`` launches its k ranks from its worker, each with the worker's
    threads / k: ``workers`` runs at once are ``workers x k`` processes."""

    def __init__(self, workers: int = 1, devices: list[str] | None = None, threads: int | None = None,
                 on_progress: ProgressSink | None = None) -> None:
        if devices is not None and (isinstance(devices, str) or not isinstance(devices, (list, tuple))):
            raise OptionError(f"devices must be a list like ['cuda:0', 'cuda:1'], got {devices!r}")
        if devices:
            bad = [d for d in devices if not re.fullmatch(r"cuda:\d+(,\d+)*", str(d))]
            if bad:
                raise OptionError(f"devices must look like 'cuda:0' (or 'cuda:0,1': a worker's GPUs), got {bad}")
            workers = len(devices)
        self.workers = positive_int(workers, "workers")
        self.devices = list(devices or [])
        self.threads = None if threads is None else positive_int(threads, "threads")
        self.on_progress = on_progress or ignore_progress
        self._supervisor: Supervisor | None = None

    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        items = list(items)
        if self.workers == 1 and not self.devices:
            yield from self._serial(fn, items)
        else:
            yield from self._parallel(fn, items)

    def close(self) -> None:
        """Kill any worker processes still running (after an abandoned ``map`` or a second
        Ctrl-C; a first stop request lets them checkpoint inside ``map``)."""
        if self._supervisor is not None:
            self._supervisor.close()
            self._supervisor = None

    def _serial(self, fn: Task, items: list[Any]) -> Iterator[tuple[Any, Any]]:
        import torch

        previous = torch.get_num_threads()
        per_run = self.threads or default_threads(items, 1)
        try:
            for item in items:
                raise_if_stopped()
                torch.set_num_threads(item_threads(item, per_run, 1))
                try:
                    outcome = fn(item, self.on_progress)
                except Exception as exc:  # noqa: BLE001 - a failed run is a result; the sweep goes on
                    outcome = exc
                yield item, outcome
        finally:
            torch.set_num_threads(previous)

    def _parallel(self, fn: Task, items: list[Any]) -> Iterator[tuple[Any, Any]]:
        if not items:
            return
        k = max(int(getattr(item, "processes_per_run", 1) or 1) for item in items)
        short = [d for d in self.devices if len(d.split(":", 1)[1].split(",")) < k]
        if short:
            raise OptionError(f"runs of {k} processes need {k} GPUs per worker, one per rank, but devices "
                              f"{short} name fewer: list each worker's GPUs, e.g. devices = "
                              f"{_grouped(self.devices, k)!r}")
        slots = self.devices or [None] * min(self.workers, len(items))
        threads = self.threads or (max(1, (os.cpu_count() or 1) // len(slots)) if self.devices
                                   else default_threads(items, len(slots)))
        if not self.devices:  # runs trained together step on threads of their own
            threads = max(item_threads(item, threads, len(slots)) for item in items)
        # a run of k processes launches its ranks from the worker (which then splits its threads
        # among them), and a daemonic process may not start processes: such workers are not
        # daemonic (close() ends them all the same, and their ranks end with them)
        daemon = k == 1
        todo = list(range(len(items)))[::-1]  # popped from the end: plan order
        busy: dict[Child, int] = {}  # worker -> index of the item it runs
        stopping: list[int] = []  # the signal of a stop in progress
        self._supervisor = supervisor = Supervisor()

        def start(device: str | None) -> None:
            hand_out(supervisor.start(_worker, fn, device, threads, tag=device, daemon=daemon))

        def hand_out(worker: Child) -> None:
            if todo:
                busy[worker] = todo.pop()
                worker.conn.send(("run", items[busy[worker]]))
            else:
                worker.conn.send(("stop", None))

        def stop(signum: int) -> None:
            stopping.append(signum)
            todo.clear()
            for worker in busy:
                worker.process.terminate()  # SIGTERM: its run checkpoints and stops

        try:
            for device in slots:
                start(device)
            while busy:
                if not stopping and stop_requested() is not None:
                    stop(stop_requested())
                for worker, kind, payload in supervisor.events():
                    if kind == "exit":  # fine when idle; when busy, its run is lost and a new worker takes the rest
                        index = busy.pop(worker, None)
                        if index is not None and not stopping:  # a run stopped on the way out stays unfinished
                            if todo:
                                start(worker.tag)
                            yield items[index], RunLost(f"its worker process died (exit code "
                                                        f"{worker.process.exitcode}) mid-run")
                    elif kind == "progress":
                        self.on_progress(*payload)
                    elif kind == "interrupted":  # the run checkpointed and its worker stops
                        busy.pop(worker)
                        if not stopping:  # SIGTERM reached the worker first: the driver stops too
                            request_stop(payload)
                            stop(payload)
                    else:  # "done": the item's outcome
                        index = busy.pop(worker)
                        yield items[index], payload
                        hand_out(worker)
            if stopping:
                raise Interrupted(stopping[0], f"stopped by signal {stopping[0]}; in-flight runs checkpointed")
        finally:
            self.close()


def _grouped(devices: list[str], k: int) -> list[str]:
    """``devices``' GPUs, k to a worker (the suggestion in a refusal)."""
    gpus = list(dict.fromkeys(g for d in devices for g in d.split(":", 1)[1].split(",")))
    groups = [gpus[i:i + k] for i in range(0, len(gpus) - k + 1, k)] or [[str(i) for i in range(k)]]
    return ["cuda:" + ",".join(g) for g in groups]


def _worker(fn: Task, device: str | None, threads: int, conn: Any) -> None:
    """Worker loop: pin a GPU, size the thread pool, run items until told to stop (Ctrl-C is the
    driver's; SIGTERM a stop request: ``executors.supervisor.child_signals``).

    ``fn``'s module was imported when this process unpickled it: torch is already loaded if
    the task uses it at module level, and a later import reads the environment.
    """
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    with child_signals():
        try:
            _serve(fn, conn, progress_over(conn))
        except (BrokenPipeError, ConnectionResetError, EOFError):  # the driver is gone: nobody to tell
            pass


def _serve(fn: Task, conn: Any, progress: Any) -> None:
    while True:
        while not conn.poll(0.2):
            if stop_requested() is not None:  # idle: nothing to checkpoint
                return
        kind, item = conn.recv()
        if kind == "stop":
            return
        try:
            outcome = fn(item, progress)
        except Interrupted as exc:  # the run checkpointed on SIGTERM
            conn.send(("interrupted", exc.signum))
            return
        except Exception as exc:  # noqa: BLE001 - the run's failure travels back as its outcome
            outcome = exc
        send(conn, "done", outcome)


def build(**options: Any) -> LocalExecutor:
    return LocalExecutor(**check_options(LocalExecutor, options, "local"))


@hookimpl
def register_executors(register):
    register(ExecutorEntry(
        "local",
        description="This machine: runs in sequence, or on several worker processes / one per GPU",
        builder="flops_fit.executors.local:build",
    ))
