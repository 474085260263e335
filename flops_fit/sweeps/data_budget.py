"""A sweep's data budget: its dataset's unique training tokens, and the runs that repeat them.

Text datasets report ``unique_tokens`` (the plugin contract); a sweep may state it instead
(``SweepOptions.unique_tokens``). A run that trains on more tokens than that sees some of
them again: up to about 4 epochs that costs little, by about 16 repeats stop helping
(Muennighoff et al. 2023), and Chinchilla's law, which counts every token as new, then
over-promises. ``flops-fit plan`` says so before anything trains. An image dataset held in
memory reports ``unique_samples`` (samples: the unit its runs count), read here for that warning
alone: runs do not record it, so a fit of an image sweep reads every sample as new unless
``unique_tokens`` is given, as before.
"""

from __future__ import annotations

from typing import Any

from flops_fit.errors import FlopsFitError
from flops_fit.plugin import api
from flops_fit.store.runs import RunSpec
from flops_fit.sweeps.options import SweepOptions

FREE_EPOCHS = 4.0  # repeats up to this many epochs are worth almost as much as new data (Muennighoff et al.)


def unique_tokens(options: SweepOptions, host: Any = None) -> int | None:
    """The sweep's stated unique tokens, else what its dataset's training split reports (an image dataset's
    unique samples; None: it does not, or it does not open; the preflight then says why, naming the
    dataset and the fix)."""
    return options.unique_tokens if options.unique_tokens is not None else data_budget(options, host)[0]


def data_budget(options: SweepOptions, host: Any = None) -> tuple[int | None, str | None]:
    """``unique_tokens`` with the training split opened, and why it does not open (None where it
    does), so that a plan can say it before a sweep refuses. A sweep trained by its ``[train]`` command
    opens no data here (its script reads its own), so nothing is opened and nothing refused."""
    if options.trainer is not None:
        return options.unique_tokens, None
    try:
        data = api.create_dataset(options.dataset, "train", host=host, **options.dataset_config)
    except FlopsFitError as exc:
        return options.unique_tokens, f"dataset {options.dataset!r} does not open here: {exc}"
    except Exception as exc:  # noqa: BLE001 - a plugin's own exception (a missing file): named, as the preflight does
        return options.unique_tokens, f"dataset {options.dataset!r} does not open here: {type(exc).__name__}: {exc}"
    if options.unique_tokens is not None:
        return options.unique_tokens, None
    value = getattr(data, "unique_tokens", None) or getattr(data, "unique_samples", None)
    return (int(value) if value else None), None


def repeats(runs: list[RunSpec], unique: int | None) -> list[tuple[RunSpec, float]]:
    """(run, epochs) for every run that trains on more than ``unique`` tokens."""
    if not unique:
        return []
    return [(r, r.tokens / unique) for r in runs if r.tokens > unique]


def repeat_warning(runs: list[RunSpec], unique: int | None, unit: str = "token") -> str | None:
    """One line when runs repeat their data (None when none does or the budget is unknown); ``unit``
    is what the runs count (the plan's: "token" or "sample")."""
    repeated = repeats(runs, unique)
    if not repeated:
        return None
    worst, epochs = max(repeated, key=lambda item: item[1])
    beyond = sum(e > FREE_EPOCHS for _, e in repeated)
    fit = ("unique_tokens (the sweep records it)" if unit == "token" else
           f"unique_tokens={unique} (--unique-tokens {unique}, in {unit}s)")
    return (f"warning: {len(repeated)} of {len(runs)} runs repeat their data, up to {epochs:.1f} epochs of "
            f"{unique:,} unique {unit}s (run {worst.run_id}, size {worst.size}); {beyond} beyond {FREE_EPOCHS:g} "
            f"epochs, where repeats are worth much less than new data. Fit with {fit} for the data-constrained "
            "law, or use a larger dataset")
