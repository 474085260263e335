"""The Ray executor: each run is a Ray task on an existing cluster (or a local one).

flops-fit grows no scheduler of its own: Ray places the tasks, retries a task whose worker
died (process killed, node lost) up to ``max_retries`` times, and hands results back as
they finish. The sweep driver consuming ``map`` stays the only writer of the run store, so
a run is recorded once, whatever happened to its workers. Exceptions raised by the training
code itself are not retried: a diverged run is a result, not a fault.

A run of ``processes_per_run = k`` is one task that reserves k processes' CPUs, GPUs and
memory on one node and launches its k ranks there (``training.launch``, case (b)):
Ray places the gang as one unit, and a rank that dies restarts the gang from the run's
checkpoint inside the task. A task whose node is preempted gets SIGTERM: its run checkpoints (into a folder all nodes
see, ``checkpoint_dir``) and its worker exits, so Ray retries the task and the run
continues from that checkpoint. A stop request on the driver (Ctrl-C, SIGTERM) cancels
the tasks; each run later resumes from its newest checkpoint.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterable, Iterator
from typing import Any

from flops_fit.checks import non_negative_number, positive_int, positive_number
from flops_fit.errors import FlopsFitError, Interrupted, OptionError, RunLost
from flops_fit.executors.base import (
    ClosingExecutor,
    ProgressSink,
    Task,
    check_options,
    ignore_progress,
)
from flops_fit.executors.stopping import raise_if_stopped, stop_on_signals
from flops_fit.plugin.contracts import ExecutorEntry
from flops_fit.plugin.hookspecs import hookimpl

# Bytes per parameter a training run holds: fp32 weights, gradients and two AdamW moments.
_TRAIN_BYTES_PER_PARAM = 16
_MEMORY_FLOOR = 512 * 2**20  # interpreter, torch and a data batch
_ANSWER_TIMEOUT_S = 10  # how long a cluster's address may take to accept a connection


def check_address_answers(address: str) -> None:
    """OptionError unless something accepts a connection at a ``host:port`` (or ``ray://host:port``)
    address: ``ray.init`` retries one that does not answer for ever, after the plan is recorded.
    ``auto`` and ``local`` are Ray's to resolve; any other form is refused here (Ray refused it only
    once the plan was recorded)."""
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise OptionError(f"the Ray address must be HOST:PORT (as `ray start --head` prints it), "
                          f"ray://HOST:PORT, 'auto' or 'local', got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_ANSWER_TIMEOUT_S).close()
    except OSError as error:
        why = error.strerror or str(error) or type(error).__name__
        raise OptionError(
            f"the Ray address {address} does not answer ({why}): start the cluster's head there "
            f"(`ray start --head --port {port}` on {host}), or give its address (--address, RAY_ADDRESS)"
        ) from None


def _import_ray():
    try:
        import ray
    except ImportError:
        raise FlopsFitError(
            "the 'ray' executor needs Ray, which is not installed: pip install 'flops-fit[ray]'"
        ) from None
    return ray


class RayExecutor(ClosingExecutor):
    """Map runs onto Ray tasks.

    ``address``: a cluster to join (default ``RAY_ADDRESS``; neither starts a local Ray
    with ``num_cpus`` CPUs). ``cpus_per_run`` / ``gpus_per_run``: resources per task
    (``gpus_per_run`` defaults to 1 for runs whose device is CUDA, else 0). Task memory is
    requested from the run's parameter count. ``max_retries``: re-executions after a worker
    dies mid-run before the run is recorded as failed.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        max_retries: int = 2,
        cpus_per_run: float = 1,
        gpus_per_run: float | None = None,
        num_cpus: int | None = None,
        workers: int | None = None,
        on_progress: ProgressSink | None = None,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise OptionError(f"max_retries must be a non-negative integer, got {max_retries!r}")
        positive_number(cpus_per_run, "cpus_per_run")
        # checked here, where a bad value is one line before the plan: Ray refused a negative one only
        # after the plan was recorded (num_cpus, gpus_per_run) or failed on it unnamed (init_options)
        for value, what in ((num_cpus, "num_cpus"), (workers, "workers")):
            if value is not None:
                positive_int(value, what)
        if gpus_per_run is not None:
            non_negative_number(gpus_per_run, "gpus_per_run")
        if init_options is not None and not isinstance(init_options, dict):
            raise OptionError(f"init_options must be a table of ray.init() arguments, got {init_options!r}")
        if address is not None and not isinstance(address, str):
            raise OptionError(f"address must be a string like '10.0.0.1:6379', got {address!r}")
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        if self.address:
            check_address_answers(self.address)
        self.max_retries = max_retries
        self.cpus_per_run = cpus_per_run
        self.gpus_per_run = gpus_per_run
        # `workers` (the local executor's option) caps concurrency on a Ray started here.
        self.num_cpus = num_cpus if num_cpus is not None else (workers * cpus_per_run if workers else None)
        self.on_progress = on_progress or ignore_progress
        self.init_options = dict(init_options or {})
        self._started_here = False

    # ------------------------------------------------------------------ cluster
    def connect(self):
        """Join the cluster (or start a local Ray) unless this process already has."""
        ray = _import_ray()
        if not ray.is_initialized():
            options = {"log_to_driver": False, "include_dashboard": False, **self.init_options}
            if self.address:
                try:
                    ray.init(address=self.address, **{k: v for k, v in options.items() if k != "include_dashboard"})
                except (ConnectionError, RuntimeError) as error:  # something answers there, but not a Ray head
                    raise FlopsFitError(
                        f"could not join the Ray cluster at {self.address} ({str(error).splitlines()[0]}): is it "
                        "a Ray head's GCS address (host:port, as `ray start --head` prints it)? A cluster with "
                        "token authentication (Ray's default for the clusters it starts) is joined with "
                        "RAY_AUTH_MODE=token set and its token in ~/.ray/auth_token") from None
            else:
                ray.init(num_cpus=self.num_cpus, **options)
                self._started_here = True
        return ray

    def check_submission(self, items: Iterable[Any]) -> None:
        """Join the cluster at ``address`` before the sweep's folder is written (the driver asks this
        first): an address that answers but is no Ray head was refused only after the plan was
        recorded, so the corrected rerun needed --resume. A local Ray is started when the runs start."""
        if self.address:
            self.connect()

    def close(self) -> None:
        """Stop the local Ray this executor started (a joined cluster is left running)."""
        if self._started_here:
            _import_ray().shutdown()
            self._started_here = False

    def resources(self, spec: Any) -> dict[str, Any]:
        """Ray resource requests for one run, from its device, parameter count and processes:
        a run of ``processes_per_run = k`` reserves k times one process's CPUs, GPUs and memory
        in one task, which launches its k ranks on that node."""
        device = str(getattr(spec, "device", "cpu"))
        k = int(getattr(spec, "processes_per_run", 1) or 1)
        gpus = self.gpus_per_run if self.gpus_per_run is not None else (1 if device.startswith("cuda") else 0)
        params = int(getattr(spec, "params", 0) or 0)
        memory = _MEMORY_FLOOR + _TRAIN_BYTES_PER_PARAM * params
        return {"num_cpus": self.cpus_per_run * k, "num_gpus": gpus * k, "memory": memory * k}

    # ---------------------------------------------------------------------- map
    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        """Submit every item at once; yield ``(item, result_or_exception)`` as each finishes."""
        items = list(items)
        if not items:
            return
        ray = self.connect()
        from ray.util.queue import Queue

        reports = Queue(actor_options={"num_cpus": 0})
        task = ray.remote(_run_with_progress)
        pending = {
            task.options(max_retries=self.max_retries, retry_exceptions=False, **self.resources(item))
            .remote(fn, item, reports): item
            for item in items
        }
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                self._drain(reports)
                raise_if_stopped()
                for ref in ready:
                    item = pending.pop(ref)
                    yield item, self._outcome(ray, ref)
            self._drain(reports)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        finally:
            reports.shutdown()

    def _outcome(self, ray, ref) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the run raised: not retried
            cause = getattr(exc, "cause", None)
            return cause if isinstance(cause, Exception) else RuntimeError(str(exc))
        except ray.exceptions.RayError as exc:  # worker or node lost after every retry
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return RunLost(
                f"the worker running it died {self.max_retries + 1} time(s) "
                f"(max_retries={self.max_retries}); last error: {type(exc).__name__}: {first}"
            )

    def _drain(self, reports) -> None:
        while not reports.empty():
            try:
                message = reports.get_nowait()
            except Exception:  # noqa: BLE001 - the queue emptied between the checks
                return
            self.on_progress(*message)


def _run_with_progress(fn: Task, item: Any, reports: Any) -> Any:
    """Body of a Ray task: run the item with a progress sink that reports to the driver.

    SIGTERM (a preempted node) makes the run checkpoint; the worker then exits as if it
    died, which Ray retries, so the run continues from its checkpoint on another worker.
    """
    with stop_on_signals((signal.SIGTERM,)):
        try:
            return fn(item, lambda *message: reports.put_nowait(message))
        except Interrupted:
            os._exit(128 + signal.SIGTERM)


def build(**options: Any) -> RayExecutor:
    return RayExecutor(**check_options(RayExecutor, options, "ray"))


@hookimpl
def register_executors(register):
    register(ExecutorEntry(
        "ray",
        description="A Ray cluster (RAY_ADDRESS or --address) or a local Ray: one task per run, "
        "worker deaths retried; needs pip install 'flops-fit[ray]'",
        builder="flops_fit.executors.ray:build",
    ))
