"""RunSpec and RunResult: the plain values that travel from the planner to the trainer to the store.

A run's id is a hash of every field that decides its result (plus the flops-fit version),
so a changed spec never reuses an old result. Floats are hashed rounded to ``DIGITS``
significant digits, so a rate that moves in its last bit (another numpy, another order of
operations) keeps its run's id; ids of the releases that hashed every bit still read
(``legacy_id``), and a resumed sweep keeps the ids its store holds. ``device``, ``compile`` and how the batch is
spread (``micro_batch_size``, ``processes_per_run``, ``parallel``) are left out: they change
where and how fast a run goes, not what it computes; so are the counts derived from the
model (``embedding_params``, ``non_embedding_flops_per_unit``). The schedule's fields enter the
id only when they differ from their defaults, so cosine runs keep the ids they always had.

Runs with the ``"wsd"`` schedule that differ only in length (budget, tokens, steps and
cooldown start) share their stable prefix: ``family`` names it, and a branch may resume
from any of its family's stable checkpoints at or before its own cooldown start.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Fields that do not decide a run's result, so they do not enter its id.
_NOT_IN_ID = frozenset({"run_id", "device", "compile", "micro_batch_size", "processes_per_run", "parallel",
                        "embedding_params", "non_embedding_flops_per_unit", "lr_source", "unique_tokens"})
# The key of a run's model_config naming the folder its relative paths are read from (a sweep file's
# own): where the file sits decides no result (a config file's content is in the id: config_sha256),
# so it is not hashed, and the ids follow the path as written in the file, from whatever folder.
PATHS_FROM = "paths_from"
# Fields added after the first release: hashed only when set, so older ids stay valid.
_IN_ID_WHEN_SET = {"schedule": "cosine", "cooldown_start": 0, "cooldown_shape": "1-sqrt"}
# Fields that set a run's length; the rest of the identity is its stable prefix (WSD family).
_LENGTH_FIELDS = frozenset({"budget", "tokens", "steps", "cooldown_start"})


def tuned_law_paths(sources: Iterable[str]) -> set[str]:
    """The hparams.json paths of the tuned laws that ``lr_source`` values name ("tuned:<path>",
    maybe followed by " (<note>)"): what the planner's header and the report's notes read."""
    return {s.partition(":")[2].partition(" (")[0] for s in sources if s.startswith("tuned:")}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


_UNSET = object()


DIGITS = 12  # significant digits of a float in a run's id: far above any meaningful difference


def _rounded(value: Any) -> Any:
    """``value`` with every float rounded to ``DIGITS`` significant digits (nested dicts and lists too)."""
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _hash(value: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(_rounded(value)).encode()).hexdigest()[:16]


def _legacy_hash(value: dict[str, Any]) -> str:
    """The id as releases before rounding computed it (every bit of every float)."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunSpec:
    """One training run: a model size trained on exactly ``tokens`` units of one dataset.

    ``tokens`` counts training tokens (language models) or samples seen (image models),
    always a multiple of ``seq_len`` (1 for samples). ``steps`` optimizer steps of
    ``batch_size`` sequences; the last step is trimmed so the total is exactly ``tokens``.
    """

    model: str
    size: int
    model_config: dict[str, Any]
    dataset: str
    dataset_config: dict[str, Any]
    loss: str
    budget: float
    tokens: int
    batch_size: int
    seq_len: int
    steps: int
    params: int
    flops_per_unit: float
    flops_accounting: str
    lr: float
    warmup_steps: int
    min_lr_ratio: float
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    grad_clip: float
    seed: int
    eval_split: str
    eval_tokens: int
    curve_points: int
    divergence_factor: float
    precision: str  # "fp32" or "bf16" (autocast on CUDA)
    version: str
    device: str = "auto"
    compile: bool = False
    schedule: str = "cosine"  # "cosine" or "wsd" (flops_fit.training.schedules)
    cooldown_start: int = 0  # wsd: the step whose learning rate starts the cooldown
    cooldown_shape: str = "1-sqrt"  # wsd: "1-sqrt" or "linear"
    micro_batch_size: int | str | None = None  # per forward pass; None: the whole batch, "auto": probed on CUDA
    processes_per_run: int = 1  # data-parallel processes of this one run
    parallel: str = "ddp"  # "ddp" or "fsdp" across those processes
    # the other scales a law can be fitted on (derived from the model; None: the model does not say)
    embedding_params: int | None = None  # parameters looked up, not multiplied
    non_embedding_flops_per_unit: float | None = None  # training FLOPs per unit without embedding and head
    # where ``lr`` came from: "lr" (given), a rule ("marin", ...), "tuned:<hparams.json>" (a tuned law),
    # "tune:x<multiplier> <source>" (a run of `flops-fit tune`); "" in stores written before it
    lr_source: str = ""
    # the dataset's unique training tokens when the sweep states them (``SweepOptions.unique_tokens``); None:
    # the dataset reports them itself. Only the run's recorded epochs depend on it, so not its id.
    unique_tokens: int | None = None
    run_id: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.run_id:
            object.__setattr__(self, "run_id", self.compute_id())

    def identity(self) -> dict[str, Any]:
        """The fields hashed into the run id."""
        identity = {
            f.name: getattr(self, f.name) for f in fields(self)
            if f.name not in _NOT_IN_ID and _IN_ID_WHEN_SET.get(f.name, _UNSET) != getattr(self, f.name)
        }
        if isinstance(identity.get("model_config"), dict) and PATHS_FROM in identity["model_config"]:
            identity["model_config"] = {k: v for k, v in identity["model_config"].items() if k != PATHS_FROM}
        return identity

    def compute_id(self) -> str:
        return _hash(self.identity())

    def legacy_id(self) -> str:
        """The id a release before the rounding gave this spec (what its stores hold)."""
        return _legacy_hash(self.identity())

    @property
    def family(self) -> str:
        """Id of the stable prefix this run shares with every run that differs only in length
        (meaningful for the ``"wsd"`` schedule, whose prefix does not depend on the length)."""
        return _hash({k: v for k, v in self.identity().items() if k not in _LENGTH_FIELDS})

    @property
    def flops(self) -> float:
        """Training FLOPs this run will execute under its FLOPs accounting."""
        return self.tokens * self.flops_per_unit

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        spec = cls(**data)
        if data.get("run_id") and data["run_id"] not in (spec.compute_id(), spec.legacy_id()):
            raise ValueError(f"run {data['run_id']}: stored spec does not hash to its id (edited by hand?)")
        return spec


@dataclass
class RunResult:
    """What a finished (or failed) run produced. ``loss`` is the held-out loss at the end (per
    token or sample); ``bpb`` the same held-out windows' loss in bits per byte of their text
    (text datasets that count their bytes; NaN otherwise), comparable across tokenizers."""

    run_id: str
    status: str  # "done" | "failed"
    loss: float = math.nan
    tokens: int = 0  # units actually trained
    flops: float = 0.0  # tokens actually trained x the model's FLOPs per unit
    steps: int = 0
    curve: list[list[float]] = field(default_factory=list)  # [tokens_seen, train_loss] pairs
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    device: str = ""
    bpb: float = math.nan
    top1_error: float = math.nan  # held-out top-1 error (image classification; NaN otherwise)
    unique_tokens: int | None = None  # the training split's unique tokens (or samples), when known
    epochs: float = math.nan  # tokens trained / unique_tokens: above 1, the run saw its data again

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
