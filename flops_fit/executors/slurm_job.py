"""What runs inside a SLURM job, and how its progress reaches the driver.

``RunJob`` is the call submitit pickles and runs in each task of a job: it exports the
``torch.distributed`` variables for a run on k processes, checkpoints on SLURM's signals and
asks submitit to requeue itself. submitit cannot call back into the driver, so rank 0
appends its progress reports to a file in the job folder, which the driver's ``Relay``
reads every poll.
"""

from __future__ import annotations

import json
import pickle
import signal
import sys
from pathlib import Path
from typing import Any

from flops_fit.errors import FlopsFitError, Interrupted
from flops_fit.executors.base import ProgressSink, Task, ignore_progress
from flops_fit.executors.stopping import stop_on_signals


def import_submitit():
    try:
        import submitit
    except ImportError:
        raise FlopsFitError(
            "the 'slurm' executor needs submitit, which is not installed: pip install 'flops-fit[slurm]'"
        ) from None
    return submitit


class Relay:
    """The driver's end of a job's progress file: passes on each complete new line."""

    def __init__(self, path: Path, sink: ProgressSink) -> None:
        self.path, self.sink, self.offset = path, sink, 0

    def relay(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.splitlines():
            run_id, done, total, loss = json.loads(line)
            self.sink(run_id, done, total, loss)


class RunJob:
    """What one job runs (in each of its tasks): the executor's task on one item.

    submitit pickles this call, runs it on the node, and on USR2 calls ``checkpoint`` to get
    the call to requeue: the same one, since the run itself resumes from its checkpoint.
    """

    def __init__(self, fn: Task, item: Any, progress_path: str) -> None:
        self.fn, self.item, self.progress_path = fn, item, progress_path

    def checkpoint(self) -> Any:
        """The call submitit requeues after a preemption or a time limit: this one, unchanged."""
        return import_submitit().helpers.DelayedSubmission(self)

    def __call__(self) -> Any:
        submitit = import_submitit()
        environment = submitit.JobEnvironment()
        if environment.num_tasks > 1:  # a run on k processes: torchrun's variables for torch.distributed
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        preempt = getattr(signal, "SIG" + submitit.JobEnvironment.USR_SIG)
        requeue = signal.getsignal(preempt)  # submitit's: calls checkpoint(), requeues, exits
        progress = self._report if environment.global_rank == 0 else ignore_progress
        with stop_on_signals((preempt, signal.SIGTERM, signal.SIGINT)):  # SIGINT: a local job cancelled
            try:
                return _transportable(self.fn(self.item, progress))
            except Interrupted as exc:  # the run checkpointed at its next step
                signum = exc.signum
            except Exception as exc:  # noqa: BLE001 - the run's failure is its outcome
                return _transportable(exc)
        if signum == preempt and callable(requeue):
            requeue(signum, None)  # rank 0 requeues the job and exits; other ranks return here
        sys.exit(128 + signum)  # no result: the requeued job (or a resumed sweep) goes on

    def _report(self, run_id: str, done: int, total: int, loss: float) -> None:
        with open(self.progress_path, "a", encoding="utf-8") as f:
            f.write(json.dumps([run_id, done, total, loss]) + "\n")


def _transportable(outcome: Any) -> Any:
    """``outcome``, or for an exception that cannot be pickled back, a RuntimeError saying what it was."""
    if isinstance(outcome, BaseException):
        try:
            pickle.loads(pickle.dumps(outcome))
        except Exception as exc:  # noqa: BLE001 - any pickling failure
            return RuntimeError(f"{type(outcome).__name__}: {outcome} (could not be sent back: {exc})")
    return outcome
