"""The ``[train]`` table: a user's own training script as the trainer of every planned run.

``command`` is the script's argument list (or one string, split like a shell would); it
trains the one run whose spec flops-fit hands it (``training.external``). ``time_limit``
bounds one attempt in seconds (a script still running then is a hang: killed, recorded as
failed); ``token_tolerance`` is how far, as a fraction of the plan, the tokens the script
reports may be off (0: exactly the planned tokens); ``env`` adds environment variables;
``workdir`` is the folder it runs in (default: the sweep file's folder, else the driver's).
The script starts with this Python's environment on PATH (``script_path``). No torch here: the
sweep options import it.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from flops_fit.errors import OptionError


@dataclass(frozen=True)
class TrainCommand:
    """What runs each planned run (see the module's docstring); plain values, so it travels
    to worker processes, Ray tasks and SLURM jobs. ``logs_dir`` is set by the driver: the
    script's output goes to ``<logs_dir>/<run_id>.log``."""

    command: tuple[str, ...]
    time_limit: float | None = None
    token_tolerance: float = 0.0
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    logs_dir: str | None = None

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "logs_dir"]

    def to_dict(self) -> dict[str, Any]:
        out = {**asdict(self), "command": list(self.command), "env": dict(self.env)}
        out.pop("logs_dir")
        return out

    def resolved(self, out_dir: str | Path) -> TrainCommand:
        """Absolute folders for a sweep in ``out_dir``, so that every worker finds them."""
        workdir = str(Path(self.workdir or ".").resolve())
        return replace(self, workdir=workdir, logs_dir=str((Path(out_dir) / "trainer-logs").resolve()))


def script_path(path: str | None = None) -> str:
    """The PATH a script starts with: ``path`` (default: this process's), with this Python's folder
    first when it is a virtual environment that is not on it, as activating the environment would.
    ``.venv/bin/flops-fit sweep ...`` (the README's way) then runs ``command = ["python", "train.py"]``
    on this environment's Python and packages, not on the first Python of PATH (the system's,
    without torch: every run crashed on ``import torch``)."""
    path = os.environ.get("PATH", "") if path is None else path
    if sys.prefix == sys.base_prefix:  # not a virtual environment: nothing to activate
        return path
    here = os.path.dirname(sys.executable)
    parts = [p for p in path.split(os.pathsep) if p]
    return path if here in parts else os.pathsep.join([here, *parts])


def parse_train(value: Any, what: str = "train", error: type[Exception] = OptionError) -> TrainCommand | None:
    """A ``TrainCommand`` from the ``[train]`` table (None or an empty table: flops-fit's own loop)."""
    if value is None or isinstance(value, TrainCommand):
        return value
    if not isinstance(value, Mapping):
        raise error(f"{what} must be a table with command = [...], got {value!r}")
    if not value:
        return None
    unknown = sorted(set(value) - set(TrainCommand.keys()))
    if unknown:
        raise error(f"[{what}]: unknown key(s) {unknown}; the keys are {TrainCommand.keys()}")
    command = value.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    if (not isinstance(command, Sequence) or not command
            or not all(isinstance(a, str) and a for a in command)):
        raise error(f'[{what}] command must list the script and its arguments, e.g. ["python", "train.py"]; '
                    f"got {command!r}")
    limit = value.get("time_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                              or not math.isfinite(limit) or limit <= 0):
        raise error(f"[{what}] time_limit must be a finite positive number of seconds per run, got {limit!r}")
    tolerance = value.get("token_tolerance", 0.0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise error(f"[{what}] token_tolerance must be a fraction in [0, 1) of the planned tokens, got {tolerance!r}")
    env = value.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise error(f'[{what}] env must map names to strings, e.g. {{OMP_NUM_THREADS = "1"}}; got {env!r}')
    workdir = value.get("workdir")
    if workdir is not None and (not isinstance(workdir, str) or not workdir):
        raise error(f"[{what}] workdir must be a folder, got {workdir!r}")
    return TrainCommand(tuple(command), None if limit is None else float(limit), float(tolerance), dict(env), workdir)
