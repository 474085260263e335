"""MLflow: one experiment per sweep, one MLflow run per flops-fit run (nested under the
sweep's own run, which holds the plan and the fits).

The default store is a file store in ``DIR/mlruns`` (no server; MLflow 3 asks for an explicit
opt-in, ``MLFLOW_ALLOW_FILE_STORE``, which is set for it); ``mlflow_uri`` or
``MLFLOW_TRACKING_URI`` pick another. An attempt that continues a run after a kill logs into
the same MLflow run and skips the steps the earlier attempt already logged: runs are found
again through ``DIR/mlflow-run-ids`` (a file per run naming its MLflow run; on a file store
searching the runs' ``flops_fit.key`` tags reads every run of the experiment), and on a
tracking server, whose search is indexed, by that tag.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flops_fit.tracking.options import SWEEP_KEY, Destination, TrackedRun

STATUS = {"done": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
PROBE_SECONDS = 5.0  # how long a tracking server's address may take to accept a connection
PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def check_server(uri: str) -> None:
    """Refuse in seconds a tracking server that accepts no connection: MLflow's client retried its first
    request for about four minutes (seven retries, backing off) before it failed, holding the sweep's start.
    Not probed through a proxy, which alone may reach the server."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https") or any(os.environ.get(name) for name in PROXIES):
        return
    try:
        socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)),
                                 timeout=PROBE_SECONDS).close()
    except OSError as exc:
        raise ConnectionError(f"the MLflow tracking server {uri} does not answer ({exc.strerror or exc}); start "
                              "it, or set [tracking] mlflow_uri (or MLFLOW_TRACKING_URI) to one that does") from None
MAX_PARAM_LENGTH = 6000  # MLflow refuses longer parameter values


def experiment_id(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # another process created it meanwhile
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def run_key(destination: Destination, run_key: str) -> str:
    return f"{destination.sweep_id}/{run_key}"


def id_file(destination: Destination, run_key: str) -> Path:
    """The file naming the MLflow run of flops-fit run ``run_key``."""
    return Path(destination.dir, "mlflow-run-ids", f"{destination.sweep_id}-{run_key}")


def find_run(client: Any, destination: Destination, experiment: str, key: str) -> Any:
    """The MLflow run of flops-fit run ``key`` (or the sweep's), or None."""
    from mlflow.exceptions import MlflowException

    known = id_file(destination, key)
    if known.is_file():
        try:
            return client.get_run(known.read_text().strip())
        except MlflowException:  # deleted from the store (or a torn id file): start a new run
            return None
    if destination.mlflow_uri.startswith("file:"):  # the id files live beside the store: none, no run
        return None
    found = client.search_runs([experiment], f"tags.`flops_fit.key` = '{run_key(destination, key)}'", max_results=1)
    return found[0] if found else None


class MlflowTracker:
    name = "mlflow"

    def __init__(self, destination: Destination, run: TrackedRun, restart_at: int | None) -> None:
        uri = destination.mlflow_uri
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            from mlflow.store.tracking.file_store import FileStore

            # MLflow keeps one store per URI for the process: if the folder was deleted since
            # (a sweep folder removed and run again), only a new FileStore makes it again.
            FileStore(uri)
        check_server(uri)
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        experiment = experiment_id(self.client, destination.experiment)
        existing = find_run(self.client, destination, experiment, run.key)
        self.logged_until = -1  # steps at or below this were logged by an earlier attempt
        if existing is not None:
            self.run_id = existing.info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            if restart_at is not None:  # an attempt that continues a run: skip what is logged
                self.logged_until = max((m.step for name in existing.data.metrics
                                         for m in self.client.get_metric_history(self.run_id, name)), default=-1)
        else:
            tags = {"flops_fit.key": run_key(destination, run.key), "flops_fit.kind": run.kind, **run.tags}
            if run.kind == "run":
                parent = find_run(self.client, destination, experiment, SWEEP_KEY)
                if parent is not None:
                    tags["mlflow.parentRunId"] = parent.info.run_id
            self.run_id = self.client.create_run(experiment, run_name=run.name, tags=tags).info.run_id
            known = id_file(destination, run.key)
            known.parent.mkdir(parents=True, exist_ok=True)
            known.write_text(self.run_id)

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        self.client.log_batch(self.run_id, params=[Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in params.items()])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        if step <= self.logged_until:
            return
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def log_text(self, name: str, text: str, step: int = 0) -> None:
        self.client.log_text(self.run_id, text, name)

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=STATUS.get(status, "FAILED"))
