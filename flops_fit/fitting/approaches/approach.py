"""The interface every fitting approach implements, and what they share.

An approach is configured once (bootstrap resamples, seed, interval level and its own
options) and then fits any runs: ``Approach.fit(runs) -> FitResult``. The held-out check
refits the same configured approach on a subset of the runs. New methods subclass
``Approach`` and join ``flops_fit.fitting.APPROACHES``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from flops_fit.fitting.approaches.result import FitResult
from flops_fit.fitting.inputs import Runs


class Approach:
    """A way to fit a compute-optimal scaling law to runs, with bootstrap intervals."""

    name: ClassVar[str]
    title: ClassVar[str]
    # Keyword options of ``fit()`` this approach takes besides bootstrap, seed and level.
    options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, bootstrap: int = 1000, seed: int | None = 0, level: float = 0.95) -> None:
        self.bootstrap, self.seed, self.level = bootstrap, seed, level

    @classmethod
    def configured(cls, *, bootstrap: int, seed: int | None, level: float, **options: Any) -> Approach:
        """An instance with the shared settings and those of ``options`` this approach takes."""
        return cls(bootstrap=bootstrap, seed=seed, level=level, **{k: options[k] for k in cls.options if k in options})

    def fit(self, runs: Runs) -> FitResult:
        raise NotImplementedError

    def result(self, cls: type[FitResult], **fields: Any) -> FitResult:
        """A result of type ``cls`` carrying this approach's name, title and settings."""
        return cls(method=self.name, title=self.title, level=self.level, seed=self.seed, **fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bootstrap={self.bootstrap}, seed={self.seed}, level={self.level})"
