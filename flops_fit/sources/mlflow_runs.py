"""MLflow runs, read with MLflow's own client: a tracking store folder (``mlruns``, MLflow's file
store), a database file (``mlflow.db``) or any tracking URI (``sqlite:///...``, ``http://...``).

A run's parameters and final metrics come from ``search_runs``, its curves from
``get_metric_history``; MLflow's status FINISHED is a finished run, any other (FAILED,
KILLED, RUNNING) leaves it out of the fit with its status said.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from flops_fit.errors import FitInputError
from flops_fit.sources.base import TrackedRun, unique_names

RETRIES_VAR, RETRIES = "MLFLOW_HTTP_REQUEST_MAX_RETRIES", 1
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy stores


def is_store(folder: Path) -> bool:
    """Whether ``folder`` is an MLflow file store (experiments hold ``meta.yaml``) or holds one."""
    return any(folder.glob("*/meta.yaml")) or (folder / "mlruns").is_dir() or (folder / "mlflow.db").is_file()


def uri_of(source: Any) -> str:
    if isinstance(source, str) and "://" in source:
        return source
    path = Path(source).resolve()
    if path.is_file():
        return f"sqlite:///{path}"
    if (path / "mlflow.db").is_file():
        return f"sqlite:///{path / 'mlflow.db'}"
    return (path / "mlruns" if (path / "mlruns").is_dir() else path).as_uri()


def _number(text: Any) -> Any:
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


@contextlib.contextmanager
def _few_retries() -> Iterator[None]:
    """MLflow's HTTP retries cut to ``RETRIES`` while reading (unless the user set them): its default (7,
    doubling waits) kept a mistyped or stopped server's refusal back for four minutes."""
    if os.environ.get(RETRIES_VAR) is not None:
        yield
        return
    os.environ[RETRIES_VAR] = str(RETRIES)
    try:
        yield
    finally:
        os.environ.pop(RETRIES_VAR, None)


def read_store(source: Any, *, experiment: str | None = None) -> list[TrackedRun]:
    """Every run of the store (or of ``experiment``, by name) as a ``TrackedRun``; a store MLflow cannot
    read (a server that does not answer, a database without the full ``mlflow``) is one line."""
    uri = uri_of(source)
    if uri.startswith("file:"):  # MLflow 3 keeps its file store readable behind this switch
        folder = Path(url2pathname(urlparse(uri).path))
        if not folder.is_dir():  # MLflow would create it, with a Default experiment: a typo left a store behind
            raise FitInputError(f"{source}: no such MLflow store folder ({folder}); give the folder that holds the "
                                "experiments (mlruns)")
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.exceptions import MlflowException

    try:
        with _few_retries():
            return _read_runs(uri, source, experiment)
    except (MlflowException, ImportError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        database = uri.split(":", 1)[0] in DATABASES
        first = first if len(first) <= 160 else first[:157] + "..."
        raise FitInputError(f"{source}: MLflow cannot read this store ({first}); "
                            + ("a database store needs the full MLflow (pip install mlflow; mlflow-skinny reads file "
                               "stores and servers)" if database else "check the URI, or that its server is running")
                            ) from None


def _read_runs(uri: str, source: Any, experiment: str | None) -> list[TrackedRun]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments()
    if experiment is not None:
        experiments = [e for e in experiments if e.name == experiment]
        if not experiments:
            names = ", ".join(repr(e.name) for e in client.search_experiments())
            raise FitInputError(f"{source}: no MLflow experiment {experiment!r}; the store has {names}. "
                                f"Name one with experiment= (CLI: --experiment)")
    runs, names = [], []
    # runs of several experiments read together: each run's experiment a column, so the fit's caution on settings
    # that split the runs (``fitting.inputs``) names them, as it would a table's
    named = {e.experiment_id: e.name for e in experiments}
    found = client.search_runs([e.experiment_id for e in experiments], max_results=50000)
    several = len({run.info.experiment_id for run in found}) > 1  # an empty Default experiment is none
    for run in found:
        info, data = run.info, run.data
        series = {key: [(float(m.step), float(m.value)) for m in client.get_metric_history(info.run_id, key)]
                  for key in data.metrics}
        status = "finished" if info.status == "FINISHED" else info.status.lower()
        params = {k: _number(v) for k, v in data.params.items()}
        if several:
            params.setdefault("experiment", named.get(info.experiment_id, info.experiment_id))
        runs.append(TrackedRun(info.run_id, status, params, dict(data.metrics), series))
        names.append(info.run_name or info.run_id)
    for run, name in zip(runs, unique_names(names, [r.run_id[:8] for r in runs]), strict=True):
        run.run_id = name
    return runs
