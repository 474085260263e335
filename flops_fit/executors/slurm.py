"""The SLURM executor: each run is one element of a SLURM job array, submitted through
submitit from the login node (no sbatch script to write).

Arrays, not one job per run: one ``sbatch`` call submits the whole sweep, the scheduler
holds it as one pending entry (sites cap the jobs a user may queue, and count an array as
one submission), and ``array_parallelism`` throttles how many runs train at once with
SLURM's own ``%N``. Runs that need different resources (processes or GPUs per run) go into
one array each.

A run on k processes (``processes_per_run``) is one job with k tasks on one node; each task
exports the ``torch.distributed`` variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT, as torchrun does) before the run starts, and the driver keeps rank 0's outcome.

Preemption and time limits: SLURM signals the job (submitit's USR2, ``signal_delay_s``
before the limit, and on preemption where the cluster sends user signals); the run
checkpoints at its next optimizer step, then submitit requeues the same call, which resumes
from that checkpoint. SIGTERM (``scancel``, a cluster that preempts with SIGTERM and
requeues by itself) also checkpoints, then the job ends without a result. The driver, which
consumes ``map``, stays the only writer of the run store, so a requeued run is recorded once.

Progress: submitit cannot call back into the driver, so each job appends its reports to a
file in the job folder, and the driver relays new lines every ``poll_seconds``. What runs in
a job, and that file, are ``executors.slurm_job``; the sbatch forms of the options
(``time``, ``mem``) are read by ``executors.slurm_options``.

Jobs outlive a driver killed outright (``kill -9``, a lost login session). The driver keeps
the ids of its unfinished jobs in ``jobs.json``; the next driver on the folder cancels the
ones left for runs it is about to submit again, so no run trains in two jobs at once.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any

from flops_fit.checks import positive_int, positive_number
from flops_fit.errors import OptionError, RunLost
from flops_fit.executors.base import (
    ClosingExecutor,
    ProgressSink,
    Task,
    check_options,
    ignore_progress,
)
from flops_fit.executors.slurm_job import Relay, RunJob, import_submitit
from flops_fit.executors.slurm_options import gigabytes, minutes, optional_name, slurm_name
from flops_fit.executors.stopping import raise_if_stopped
from flops_fit.files import write_atomically
from flops_fit.plugin.contracts import ExecutorEntry
from flops_fit.plugin.hookspecs import hookimpl

CLUSTERS = ("slurm", "local")
JOB_FOLDER = "slurm"  # under the sweep's output folder
_LOG = logging.getLogger(__name__)


def refused(stderr: str) -> str:
    """The line for jobs sbatch refused: its own last line of reason, and the options to check."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    return (f"sbatch refused the sweep's jobs ({said[-1] if said else 'no reason given'}): check the [executor] "
            "options (partition, account, qos, time, mem, slurm_params)")


class SlurmExecutor(ClosingExecutor):
    """Map runs onto SLURM jobs through submitit.

    ``cluster``: "slurm" (submit with sbatch; run the sweep on a login node) or "local"
    (submitit runs each job as a process here: try a sweep file before queueing it).
    Resources per run: ``partition``, ``time`` (minutes or "HH:MM:SS"), ``gpus_per_node``
    (default: one per process for CUDA runs, else none), ``cpus_per_task``, ``mem`` ("64G"),
    ``account``, ``qos``, ``slurm_params`` (any other sbatch option, e.g.
    ``{constraint = "a100"}``), ``setup`` (shell lines the job runs first, e.g. module loads),
    ``python`` (the interpreter jobs run; default the driver's, so on storage every node
    sees). ``array_parallelism``: runs in flight at once (``workers`` above 1 lowers it; with
    cluster "local", ``workers`` alone sets it). ``max_timeouts``: requeues after hitting
    ``time`` before the run fails; ``signal_delay_s``: how long before ``time`` SLURM
    signals the job (time for a step and a checkpoint). ``show_jobs``: a line on stderr
    whenever the count of jobs per state changes (a queued sweep is not a hung one).
    ``folder``: job logs, submissions and progress (default: ``slurm/`` in the sweep's
    output folder; a folder every node sees).
    """

    def __init__(
        self,
        folder: str | Path | None = None,
        *,
        cluster: str = "slurm",
        partition: str | None = None,
        time: int | str = 240,
        gpus_per_node: int | None = None,
        cpus_per_task: int | None = None,
        mem: str | float | None = None,
        account: str | None = None,
        qos: str | None = None,
        slurm_params: dict[str, Any] | None = None,
        setup: list[str] | None = None,
        python: str | None = None,
        array_parallelism: int = 256,
        max_timeouts: int = 3,
        signal_delay_s: int = 90,
        poll_seconds: float = 5.0,
        show_jobs: bool = True,
        workers: int = 1,
        on_progress: ProgressSink | None = None,
    ) -> None:
        if cluster not in CLUSTERS:
            raise OptionError(f"cluster must be one of {list(CLUSTERS)}, got {cluster!r}")
        self.cluster = cluster
        if folder is not None and (not isinstance(folder, (str, os.PathLike)) or not str(folder)):
            raise OptionError(f"folder must be a folder every node sees (a string), got {folder!r}")
        self.folder = None if folder is None else Path(folder)
        self.partition = slurm_name(partition, "partition")
        self.account = slurm_name(account, "account")
        self.qos = slurm_name(qos, "qos")
        self.time_min = minutes(time)
        if gpus_per_node is not None and (isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int)
                                          or gpus_per_node < 0):
            raise OptionError(f"gpus_per_node must be a non-negative integer, got {gpus_per_node!r}")
        self.gpus_per_node = gpus_per_node
        self.cpus_per_task = None if cpus_per_task is None else positive_int(cpus_per_task, "cpus_per_task")
        self.mem_gb = None if mem is None else gigabytes(mem)
        if slurm_params is not None and (not isinstance(slurm_params, dict)
                                         or not all(isinstance(k, str) for k in slurm_params)):
            raise OptionError(f"slurm_params must be a table of sbatch options like {{constraint = 'a100'}}, "
                              f"got {slurm_params!r}")
        self.slurm_params = dict(slurm_params or {})
        if setup is not None and (isinstance(setup, str) or not all(isinstance(s, str) for s in setup)):
            raise OptionError(f"setup must be a list of shell lines like ['source ~/venv/bin/activate'], got {setup!r}")
        self.setup = list(setup or [])
        self.python = optional_name(python, "python")
        self.array_parallelism = positive_int(array_parallelism, "array_parallelism")
        if isinstance(max_timeouts, bool) or not isinstance(max_timeouts, int) or max_timeouts < 0:
            raise OptionError(f"max_timeouts must be a non-negative integer, got {max_timeouts!r}")
        self.max_timeouts = max_timeouts
        self.signal_delay_s = positive_int(signal_delay_s, "signal_delay_s")
        self.poll_seconds = positive_number(poll_seconds, "poll_seconds")
        if not isinstance(show_jobs, bool):
            raise OptionError(f"show_jobs must be true or false, got {show_jobs!r}")
        self.show_jobs = show_jobs
        self.workers = positive_int(workers, "workers")
        self.on_progress = on_progress or ignore_progress
        self.submitit = import_submitit()
        if cluster == "slurm" and shutil.which("sbatch") is None:
            raise OptionError("the slurm executor submits with sbatch, which is not on PATH: run the sweep on a "
                              "SLURM login node (or set cluster = 'local' to try it on this machine)")
        self._jobs: dict[Any, int] = {}  # jobs in flight -> index of their item

    def use_sweep_folder(self, out_dir: str | Path) -> None:
        """Keep the jobs' files in the sweep's output folder unless ``folder`` was given."""
        if self.folder is None:
            self.folder = Path(out_dir) / JOB_FOLDER

    # --------------------------------------------------------------- resources
    def resources(self, item: Any) -> dict[str, Any]:
        """submitit parameters for one item's job: k tasks on one node for a run on k processes."""
        spec = item.runs[0] if hasattr(item, "runs") else item
        processes = int(getattr(spec, "processes_per_run", 1) or 1)
        cuda = str(getattr(spec, "device", "cpu")).startswith("cuda")
        gpus = self.gpus_per_node if self.gpus_per_node is not None else (processes if cuda else 0)
        return {"nodes": 1, "tasks_per_node": processes, "gpus_per_node": gpus}

    def check_submission(self, items: Iterable[Any]) -> None:
        """Ask sbatch (``--test-only``) whether it takes each set of resources the items' jobs will ask
        for, before the sweep's folder is written: a partition sbatch refuses was refused only at
        submission, with the plan already stored (a rerun needed --resume). An sbatch that does not
        answer in time is not taken for a refusal: the submission says what it says."""
        if self.cluster != "slurm":
            return
        for resources in {tuple(sorted(self.resources(item).items())) for item in items}:
            command = ["sbatch", "--test-only", *self._flags(dict(resources)), "--wrap", "true"]
            try:
                answer = subprocess.run(command, capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                return
            if answer.returncode:
                raise OptionError(refused(answer.stderr))

    def _flags(self, resources: dict[str, Any]) -> list[str]:
        """sbatch's flags for a job of ``resources`` under these options, as the submission's script sets them."""
        named = {"job_name": "flops-fit", "nodes": resources["nodes"], "ntasks_per_node": resources["tasks_per_node"],
                 "gpus_per_node": resources["gpus_per_node"] or None, "time": self.time_min,
                 "cpus_per_task": self.cpus_per_task, "mem": None if self.mem_gb is None else f"{self.mem_gb:g}GB",
                 "partition": self.partition, "account": self.account, "qos": self.qos, **self.slurm_params}
        return [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}"
                for k, v in named.items() if v is not None and v is not False]

    def _submitter(self, folder: Path) -> Any:
        # A folder per job on SLURM. submitit's local cluster makes a job's folder only after it has
        # started the job's controller (the job id is the controller's pid), and a controller that
        # opens its log first fails (FileNotFoundError: seen once, under load): there the jobs' files
        # (named by job id) share the folder.
        executor = self.submitit.AutoExecutor(
            folder=folder / "%j" if self.cluster == "slurm" else folder, cluster=self.cluster,
            slurm_max_num_timeout=self.max_timeouts, local_max_num_timeout=self.max_timeouts,
            **({"slurm_python": self.python, "local_python": self.python} if self.python else {}),
        )
        in_flight = self.array_parallelism if self.workers == 1 else min(self.array_parallelism, self.workers)
        parameters: dict[str, Any] = {"name": "flops-fit", "timeout_min": self.time_min,
                                      "slurm_array_parallelism": in_flight,
                                      "slurm_signal_delay_s": self.signal_delay_s}
        optional = {"cpus_per_task": self.cpus_per_task, "mem_gb": self.mem_gb,
                    "slurm_partition": self.partition, "slurm_account": self.account, "slurm_qos": self.qos,
                    "slurm_additional_parameters": self.slurm_params or None, "slurm_setup": self.setup or None}
        parameters.update({k: v for k, v in optional.items() if v is not None})
        executor.update_parameters(**parameters)
        return executor

    # --------------------------------------------------------------------- map
    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        """Submit the items (arrays on SLURM; at most ``workers`` at once locally); yield
        ``(item, result_or_exception)`` as each job ends."""
        items = list(items)
        if not items:
            return
        if self.folder is None:
            raise OptionError("the slurm executor needs folder= (a folder every node sees) outside a sweep")
        folder = self.folder.resolve()
        progress_dir = folder / "progress"
        progress_dir.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex[:8]  # this map's progress files (a resumed sweep maps again)
        submitter = self._submitter(folder)
        relays = [Relay(progress_dir / f"{token}-{i}.jsonl", self.on_progress) for i in range(len(items))]
        calls = [RunJob(fn, item, str(relays[i].path)) for i, item in enumerate(items)]
        waiting = list(range(len(items)))[::-1]  # popped from the end: plan order
        states: dict[Any, str] = {}
        summary = ""
        if self.gpus_per_node is None and any(str(getattr(i, "device", "")) == "auto" for i in items):
            _LOG.warning("runs with device 'auto' get no GPU (a job gets GPUs only by asking; auto is resolved "
                         "in the job): set device = 'cuda' in [sweep], or gpus_per_node in [executor]")
        ledger = _Ledger(folder / "jobs.json" if self.cluster == "slurm" else None)
        _cancel_orphans(ledger, items)
        try:
            if self.cluster == "slurm":
                self._submit_arrays(submitter, items, calls, waiting)
                ledger.add({_run_id(items[i]): job.job_id for job, i in self._jobs.items()})
            while self._jobs or waiting:
                while waiting and len(self._jobs) < self.workers:  # local: a window of `workers` jobs
                    index = waiting.pop()
                    submitter.update_parameters(**self.resources(items[index]))
                    with _cancellable_by_sigint():
                        job = submitter.submit(calls[index])
                    self._jobs[job] = index
                    ledger.add({_run_id(items[index]): job.job_id})
                for job, index in list(self._jobs.items()):
                    relays[index].relay()
                    if job.done():
                        del self._jobs[job]
                        relays[index].relay()
                        relays[index].path.unlink(missing_ok=True)
                        outcome = self._outcome(job)
                        ledger.remove([job.job_id])
                        yield items[index], outcome
                    elif states.get(job) != (state := job.state):
                        states[job] = state
                        _LOG.info("job %s (run %s): %s", job.job_id, _label(items[index]), state)
                now = _summary(states.get(job, "SUBMITTED") for job in self._jobs)
                if self.show_jobs and now and now != summary:
                    print(f"slurm jobs: {now}", file=sys.stderr, flush=True)
                summary = now
                raise_if_stopped()
                if self._jobs:
                    time.sleep(self.poll_seconds)
        except BaseException:
            jobs = [job.job_id for job in self._jobs]
            self.close()
            ledger.remove(jobs)
            raise

    def _submit_arrays(self, submitter: Any, items: list[Any], calls: list[Any], waiting: list[int]) -> None:
        """One array per set of resources, submitted with one sbatch call each."""
        groups: dict[tuple[tuple[str, Any], ...], list[int]] = {}
        for index in waiting[::-1]:
            groups.setdefault(tuple(sorted(self.resources(items[index]).items())), []).append(index)
        for resources, indices in groups.items():
            submitter.update_parameters(**dict(resources))
            try:  # submitit prints sbatch's refusal on stderr before raising it: said once, in the line below
                with redirect_stderr(io.StringIO()), submitter.batch():
                    jobs = [submitter.submit(calls[i]) for i in indices]
            except self.submitit.core.utils.FailedJobError as exc:  # sbatch said no, on its stderr
                raise OptionError(refused(str(exc)) + "; the plan is recorded in the sweep's folder: once they are "
                                  "fixed, continue it with --resume (resume=True)") from None
            self._jobs.update(zip(jobs, indices))
        waiting.clear()

    def _outcome(self, job: Any) -> Any:
        """Rank 0's return value (the run's result, or the exception the run raised); a job
        that ended without one (killed, out of memory, timed out too often) is a lost run."""
        task = job.task(0)
        if self.cluster == "local" and not task.paths.result_pickle.exists():  # no shared filesystem to wait on
            return RunLost(f"its job {job.job_id} ended without a result (killed, or out of memory); "
                           f"log: {task.paths.stderr}")
        try:
            return task.result()
        except Exception as exc:  # noqa: BLE001 - submitit's Uncompleted/FailedJobError: the job, not the run
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            cause = next((line for line in reversed(lines) if re.match(r"^\w+(\.\w+)*(Error|Exception):", line)),
                         lines[0] if lines else type(exc).__name__)
            return RunLost(f"its SLURM job {job.job_id} ended without a result ({cause[:300]}); "
                           f"log: {task.paths.stderr}")

    def close(self) -> None:
        """Cancel the jobs still in flight (their runs checkpoint on SLURM's SIGTERM, and a
        resumed sweep continues them); a local job's processes are waited for."""
        jobs, self._jobs = list(self._jobs), {}
        for job in jobs:
            try:
                job.cancel(check=False)
            except Exception as exc:  # noqa: BLE001 - scancel missing or refused: say so, go on
                _LOG.warning("could not cancel job %s: %s", job.job_id, exc)
        if self.cluster == "local":  # the controller ends its tasks (SIGINT, then SIGKILL a second later)
            deadline = time.monotonic() + 60
            for job in jobs:
                while not job.done() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not job.done():
                    _LOG.warning("local job %s (process %s) did not end after its cancel", job.job_id, job.job_id)


@contextmanager
def _cancellable_by_sigint() -> Iterator[None]:
    """submitit cancels a local job with SIGINT, and a job's controller started while SIGINT is
    ignored (a sweep launched in the background by a shell without job control inherits that)
    never ends: start it with SIGINT's default disposition (the main thread only can set it)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _summary(states: Iterable[str]) -> str:
    """"2 RUNNING, 1 PENDING": jobs in flight per state, the most common first."""
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _run_id(item: Any) -> str:
    return str(getattr(item, "run_id", item))


def _label(item: Any) -> str:
    return _run_id(item)[:8]


class _Ledger:
    """``jobs.json``: run id -> id of the job training it, for the jobs a driver has not seen end
    (SLURM's only: a local job's id is a process id, not something to cancel later)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def read(self) -> dict[str, str]:
        if self.path is None:
            return {}
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def add(self, jobs: dict[str, str]) -> None:
        self._write({**self.read(), **jobs})

    def remove(self, job_ids: list[str]) -> None:
        gone = set(job_ids)
        self._write({run: job for run, job in self.read().items() if job not in gone})

    def _write(self, jobs: dict[str, str]) -> None:
        if self.path is None:
            return
        if jobs:
            write_atomically(self.path, lambda p: p.write_text(json.dumps(jobs, indent=1)))
        else:
            self.path.unlink(missing_ok=True)


def _cancel_orphans(ledger: _Ledger, items: list[Any]) -> None:
    """Cancel the jobs a killed driver left for runs about to be submitted again (they
    checkpoint on SLURM's SIGTERM; the new jobs resume from there)."""
    wanted = {_run_id(item) for item in items}
    left = {run: job for run, job in ledger.read().items() if run in wanted}
    if not left:
        return
    _LOG.warning("cancelling %d job(s) an earlier driver left running: %s", len(left), " ".join(left.values()))
    try:  # a job that already ended is not an error worth stopping for
        subprocess.run(["scancel", *left.values()], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _LOG.warning("scancel failed (%s): cancel %s yourself", exc, " ".join(left.values()))
    ledger.remove(list(left.values()))


def build(**options: Any) -> SlurmExecutor:
    return SlurmExecutor(**check_options(SlurmExecutor, options, "slurm"))


@hookimpl
def register_executors(register):
    register(ExecutorEntry(
        "slurm",
        description="A SLURM cluster through submitit: one job-array element per run, requeued from its "
        "checkpoint on preemption; needs pip install 'flops-fit[slurm]'",
        builder="flops_fit.executors.slurm:build",
    ))
