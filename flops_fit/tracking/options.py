"""What to track and where: the ``[tracking]`` table of a sweep file, ``tracking=`` in the API.

``TrackingOptions`` is what the user writes (backends and where their logs go); a
``Destination`` is the same resolved for one sweep (absolute folder, the sweep's id and
name), a plain picklable value that travels to worker processes and Ray tasks, where each
run opens its own tracker run.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from flops_fit.checks import one_of
from flops_fit.errors import OptionError

BACKENDS = ("tensorboard", "mlflow", "wandb")
WANDB_MODES = ("offline", "online", "disabled")
DEFAULT_DIR = "tracking"


@dataclass(frozen=True)
class TrackingOptions:
    """The ``[tracking]`` table: which backends log the sweep, and where.

    ``dir`` (relative to the sweep folder unless absolute) holds TensorBoard's event files,
    MLflow's file store and W&B's offline runs; ``experiment`` names the MLflow experiment and
    the W&B project (default: the sweep folder's name); ``wandb_mode`` defaults to
    ``WANDB_MODE``, else offline; ``mlflow_uri`` to ``MLFLOW_TRACKING_URI``, else the file
    store ``DIR/mlruns``.
    """

    backends: tuple[str, ...]
    dir: str = DEFAULT_DIR
    experiment: str | None = None
    wandb_mode: str | None = None
    mlflow_uri: str | None = None

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "backends": list(self.backends)}


def _text(value: Any, what: str, error: type[Exception]) -> str:
    if not isinstance(value, str) or not value.strip():
        raise error(f"{what} must be a non-empty string, got {value!r}")
    return value


def _backends(value: Any, what: str, error: type[Exception]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [b.strip() for b in value.split(",") if b.strip()]
    if not isinstance(value, Sequence) or not value:
        raise error(f"{what} must list one or more of {', '.join(BACKENDS)}, e.g. [\"tensorboard\"]; "
                    f"got {value!r}")
    for backend in value:
        if backend not in BACKENDS:
            raise error(f"{what}: unknown backend {backend!r}; the backends are {', '.join(BACKENDS)}")
    if len(set(value)) != len(value):
        raise error(f"{what} names a backend twice: {list(value)}")
    return tuple(value)


def parse_tracking(value: Any, what: str = "tracking", error: type[Exception] = OptionError) -> TrackingOptions | None:
    """``TrackingOptions`` from what a user may write: None or an empty table (no tracking),
    a backend name or list of names, a mapping of the table's keys, or TrackingOptions.
    Anything else raises ``error`` with one line that names the key and the fix."""
    if value is None or isinstance(value, TrackingOptions):
        return value
    if isinstance(value, (str, list, tuple)):
        value = {"backends": value}
    if not isinstance(value, Mapping):
        raise error(f"{what} must be a table like {{backends = [\"tensorboard\", \"mlflow\"]}}, got {value!r}")
    if not value:
        return None
    unknown = sorted(set(value) - set(TrackingOptions.keys()))
    if unknown:
        raise error(f"{what}: unknown key(s) {unknown}; the keys are {TrackingOptions.keys()}")
    if "backends" not in value:
        raise error(f"{what} needs backends = [...], some of {', '.join(BACKENDS)}")
    out = {"backends": _backends(value["backends"], f"{what}.backends", error)}
    for key in ("dir", "experiment", "mlflow_uri"):
        if value.get(key) is not None:
            out[key] = _text(value[key], f"{what}.{key}", error)
    if value.get("wandb_mode") is not None:
        out["wandb_mode"] = one_of(value["wandb_mode"], WANDB_MODES, f"{what}.wandb_mode", error)
    if "wandb" in out["backends"] and "experiment" in out:
        check_wandb_project(out["experiment"], f"{what}.experiment", error)
    return TrackingOptions(**out)


# W&B refuses a project name with these characters, or longer than 128 (its settings' validator)
WANDB_PROJECT_CHARACTERS = "/\\#?%:"


def check_wandb_project(name: str, what: str, error: type[Exception], where: str = "") -> None:
    """Refuse here a name W&B would refuse when each run opens (a warning per process, the sweep untracked);
    ``where`` says where else the name may be given."""
    found = "".join(c for c in WANDB_PROJECT_CHARACTERS if c in name)
    if found or len(name) > 128:
        why = f"holds {found!r}" if found else f"has {len(name)} characters"
        raise error(f"{what} {name!r} names the W&B project, and W&B refuses a name that {why}; use at most 128 "
                    f"characters without any of {WANDB_PROJECT_CHARACTERS!r}{where}")


@dataclass(frozen=True)
class Destination:
    """A sweep's tracking, resolved: its backends, an absolute folder, the sweep's id (what
    reopens the same tracker runs on resume) and its name."""

    options: TrackingOptions
    dir: str
    sweep_id: str
    sweep_name: str

    @property
    def backends(self) -> tuple[str, ...]:
        return self.options.backends

    @property
    def experiment(self) -> str:
        """The MLflow experiment and W&B project."""
        return self.options.experiment or self.sweep_name

    def without(self, backends: Sequence[str]) -> Destination:
        """The same destination minus ``backends`` (those that failed in the driver)."""
        kept = tuple(b for b in self.backends if b not in backends)
        return Destination(TrackingOptions(**{**asdict(self.options), "backends": kept}), self.dir,
                           self.sweep_id, self.sweep_name)

    @property
    def mlflow_uri(self) -> str:
        return self.options.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or \
            Path(self.dir, "mlruns").resolve().as_uri()

    @property
    def wandb_mode(self) -> str:
        return self.options.wandb_mode or os.environ.get("WANDB_MODE") or "offline"


@dataclass(frozen=True)
class TrackedRun:
    """One run as the backends see it: ``key`` is unique in its sweep (a run id, or
    ``"sweep"`` for the sweep's own run), ``name`` is what a person reads."""

    key: str
    name: str
    kind: str  # "run" or "sweep"
    tags: Mapping[str, str] = field(default_factory=dict)


SWEEP_KEY = "sweep"


def destination(options: TrackingOptions, folder: str | Path, identity: str, name: str | None = None) -> Destination:
    """Resolve ``options`` for the sweep (or fitted file) at ``folder``: ``identity`` makes
    its id (a sweep: when its plan was created), ``name`` defaults to the folder's name."""
    folder = Path(folder).resolve()
    sweep_id = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return Destination(options, str(folder / options.dir), sweep_id, name or folder.name)
