"""Sweep configuration files (TOML), documented in docs/sweeps.md.

Tables: ``[sweep]`` holds the planner's options (model, dataset, budgets, ...) and ``out``;
``[model]`` and ``[dataset]`` the model and dataset configuration; ``[hparams]`` the
optimizer hyper-parameters; ``[executor]`` the executor's ``name`` and its options.
"""

from __future__ import annotations

import inspect
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flops_fit.errors import FlopsFitError

TABLES = ("sweep", "model", "dataset", "hparams", "executor")


class ConfigError(FlopsFitError):
    """A sweep configuration file that cannot be used as written."""


@dataclass
class SweepConfig:
    """A parsed configuration: ``plan_options`` go to ``flops_fit.plan``."""

    plan_options: dict[str, Any]
    out: str = "flops-fit-out"
    executor: str = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)


def _plan_parameters() -> set[str]:
    from flops_fit.planner import plan

    return {n for n in inspect.signature(plan).parameters if n not in ("host", "model_config", "dataset_config", "hparams")}


def parse_config(data: dict[str, Any], source: str = "config") -> SweepConfig:
    """Validate a configuration mapping (the TOML document) and split it by purpose."""
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise ConfigError(f"{source}: unknown table(s) {unknown}; the tables are {list(TABLES)}")
    for table in TABLES:
        if not isinstance(data.get(table, {}), dict):
            raise ConfigError(f"{source}: [{table}] must be a table")
    options = dict(data.get("sweep", {}))
    out = options.pop("out", "flops-fit-out")
    allowed = _plan_parameters()
    bad = sorted(set(options) - allowed)
    if bad:
        raise ConfigError(f"{source}: unknown [sweep] key(s) {bad}; known keys: {sorted(allowed | {'out'})}")
    if "model" not in options:
        raise ConfigError(f'{source}: [sweep] needs model = "..." (see `flops-fit models`)')
    if "budgets" not in options:
        raise ConfigError(f"{source}: [sweep] needs budgets = [...] (FLOPs, e.g. [1e12, 3e12, 1e13])")
    options["model_config"] = dict(data.get("model", {}))
    options["dataset_config"] = dict(data.get("dataset", {}))
    options["hparams"] = dict(data.get("hparams", {}))
    executor = dict(data.get("executor", {}))
    name = executor.pop("name", "local")
    return SweepConfig(options, str(out), name, executor)


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep configuration file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sweep configuration {str(path)!r} does not exist (see examples/sweep.toml)")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, str(path))
