"""Sweep configuration files (TOML), documented in docs/guide/sweeps.md.

Tables: ``[sweep]`` holds ``SweepOptions`` fields (model, budgets, ...) and ``out``;
``[model]`` and ``[dataset]`` the model and dataset configuration; ``[hparams]`` the
optimizer hyper-parameters (``[sweep] hparams = "DIR"`` takes the learning rates from the
law a ``flops-fit tune`` wrote in DIR, the table the rest); ``[tracking]`` experiment tracking (``tracking.options``);
``[executor]`` the executor's ``name`` and its options; ``[train]`` a training script of the user's own
(``training.command``; its ``workdir`` defaults to the sweep file's folder).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flops_fit.errors import ConfigError, PlanError
from flops_fit.store.runs import PATHS_FROM
from flops_fit.sweeps.options import SweepOptions

TABLES = ("sweep", "model", "dataset", "hparams", "tracking", "train", "executor")
# SweepOptions fields that come from their own table rather than from [sweep]
TABLE_OPTIONS = {"model": "model_config", "dataset": "dataset_config", "hparams": "hparams", "tracking": "tracking",
                 "train": "trainer"}
DEFAULT_OUT = "flops-fit-out"
# [sweep] keys that say where a sweep is written rather than what it trains
FOLDER_KEYS = ("out", "checkpoint_dir")


@dataclass
class SweepConfig:
    """A parsed configuration: the plan's options, where it goes, and how it runs."""

    options: SweepOptions
    out: str = DEFAULT_OUT
    checkpoint_dir: str | None = None
    executor: str = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)

    def options_for(self, executor: str | None) -> tuple[dict[str, Any], list[str]]:
        """The [executor] table's options for ``executor`` (None: the file's own) and the ones left out:
        a table written for one executor (``threads`` for local) says nothing to another (``--executor
        ray``), so only ``workers`` carries over."""
        if executor in (None, self.executor):
            return dict(self.executor_options), []
        kept = {k: v for k, v in self.executor_options.items() if k == "workers"}
        return kept, sorted(set(self.executor_options) - set(kept))


def sweep_keys() -> list[str]:
    """The keys a ``[sweep]`` table accepts."""
    return sorted(set(SweepOptions.names()) - set(TABLE_OPTIONS.values())) + ["hparams", *FOLDER_KEYS]


def parse_config(data: dict[str, Any], source: str = "config", base: str | Path | None = None) -> SweepConfig:
    """Validate a configuration mapping (the TOML document) and build its SweepOptions;
    ``base`` is the folder relative ``[train]`` paths (and a tune's, where found there) start
    from (the sweep file's)."""
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise ConfigError(f"{source}: unknown table(s) {unknown}; the tables are {list(TABLES)}")
    for table in TABLES:
        if not isinstance(data.get(table, {}), dict):
            raise ConfigError(f"{source}: [{table}] must be a table")
    values = dict(data.get("sweep", {}))
    out = values.pop("out", DEFAULT_OUT)
    checkpoint_dir = values.pop("checkpoint_dir", None)
    bad = sorted(set(values) - set(sweep_keys()))
    if bad:
        raise ConfigError(f"{source}: unknown [sweep] key(s) {bad}; known keys: {sweep_keys()}")
    if "model" not in values:
        raise ConfigError(f'{source}: [sweep] needs model = "..." (see `flops-fit models`)')
    if "budgets" not in values:
        raise ConfigError(f"{source}: [sweep] needs budgets = [...] (FLOPs, e.g. [1e12, 3e12, 1e13])")
    if not isinstance(out, str) or not out:
        raise ConfigError(f"{source}: [sweep] out must be a folder name, got {out!r}")
    if checkpoint_dir is not None and (not isinstance(checkpoint_dir, str) or not checkpoint_dir):
        raise ConfigError(f"{source}: [sweep] checkpoint_dir must be a folder name, got {checkpoint_dir!r}")
    tuned = values.pop("hparams", None)  # [sweep] hparams = "DIR": the rates from a tune, [hparams] the rest
    if tuned is not None and (not isinstance(tuned, str) or not tuned):
        raise ConfigError(f"{source}: [sweep] hparams must name a `flops-fit tune` output folder, got {tuned!r}")
    for table, name in TABLE_OPTIONS.items():
        values[name] = dict(data.get(table, {}))
    if base is not None:  # a model whose entry declares paths_from reads its table's relative paths from the file's
        # folder, as [train]'s are (its config = "qwen2" was read from the current folder); not in the run id
        values["model_config"].setdefault(PATHS_FROM, str(Path(base).resolve()))
    workdir = values["trainer"].get("workdir", ".")
    if values["trainer"] and base is not None and isinstance(workdir, str) and workdir:
        values["trainer"]["workdir"] = str(Path(base, workdir).resolve())  # the command's paths are the file's
    if tuned is not None:
        values["hparams"].update(tuned=tuned, lr_rule="tuned")
    if base is not None and isinstance(values["hparams"].get("tuned"), str):
        values["hparams"]["tuned"] = _from_file(base, values["hparams"]["tuned"])
    try:
        options = SweepOptions.build(**values)
    except PlanError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    executor = dict(data.get("executor", {}))
    name = executor.pop("name", "local")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{source}: [executor] name must be an executor's name (see `flops-fit executors`), "
                          f"got {name!r}")
    return SweepConfig(options, out, checkpoint_dir, name, executor)


def _from_file(base: str | Path, path: str) -> str:
    """A relative path in a sweep file, read from the file's folder where it is there (a sweep
    file runs from any folder), else as written (from the current folder, as before)."""
    beside = Path(base, path)
    return str(beside.resolve()) if path and not Path(path).is_absolute() and beside.exists() else path


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# examples/ is in the repository, not in a pip install: say so where a message points to it.
EXAMPLE_HINT = "a commented example: examples/sweep.toml in the flops-fit repository, which a pip install does not include"


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep configuration file."""
    path = Path(path)
    if path.is_dir():  # said "does not exist" of a folder that does
        raise ConfigError(f"{path} is a folder, not a sweep configuration: give its CONFIG.toml ({EXAMPLE_HINT})")
    if not path.is_file():
        if _is_number(str(path)):  # `--budgets 1e14 1e15`: the second value lands where the sweep file goes
            raise ConfigError(f"{str(path)!r} is no sweep configuration: a list option takes its values joined by "
                              f"commas (e.g. --budgets 1e14,1e15, --sizes 64,128)")
        raise ConfigError(f"sweep configuration {str(path)!r} does not exist: give a sweep file's path "
                          f"(format: docs/guide/sweeps.md; {EXAMPLE_HINT})")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:  # a binary file (a checkpoint, a parquet) given as the sweep file: a traceback
        raise ConfigError(f"{path}: not a text file, so no TOML sweep configuration ({EXAMPLE_HINT})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the sweep configuration ({exc.strerror or exc})") from None
    return parse_config(data, str(path), base=path.parent)
