"""Every exception and warning flops-fit raises on purpose, in one place.

Each message names the problem and the fix. The CLI prints any ``FlopsFitError`` as one
line and exits 2; ``ValueError``/``KeyError`` bases let generic callers catch them too.
"""

from __future__ import annotations

import sys
import warnings


class FlopsFitError(Exception):
    """Base class for every error flops-fit raises on purpose."""


class OptionError(FlopsFitError, ValueError):
    """A value given to flops-fit has the wrong type or is out of range."""


# ------------------------------------------------------------------ plugins
class EntryError(FlopsFitError, ValueError):
    """A registered entry (model, dataset, loss, executor, parity case) breaks its contract."""


class PluginError(FlopsFitError):
    """A plugin could not be loaded; raised only in strict mode (FLOPS_FIT_STRICT_PLUGINS=1)."""


class PluginWarning(UserWarning):
    """A plugin was skipped because it failed to load; the message says which and how to silence it."""


class UnknownEntryError(FlopsFitError, KeyError):
    """No entry of that kind has that name (or the bare name is ambiguous)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# ------------------------------------------------------------------- sweeps
class PlanError(OptionError):
    """A budget or option the planner cannot turn into a sensible sweep."""


class ConfigError(OptionError):
    """A sweep configuration file that cannot be used as written."""


class StoreError(FlopsFitError):
    """The output folder's store is missing, or holds a different sweep."""


class ExecutorError(FlopsFitError):
    """An executor (a plugin's, most often) did not start, failed inside ``map``, or broke its protocol;
    the runs it returned before are stored."""


class ParityGateError(FlopsFitError):
    """The model failed its parity cases, so no compute is spent on it."""


class PreflightError(FlopsFitError, ValueError):
    """A sweep that cannot work (a dataset that does not open, a model that does not build,
    no room for checkpoints), refused by the preflight before its first run."""


class DataError(FlopsFitError, ValueError):
    """A dataset cannot be loaded as configured."""


class RunLost(FlopsFitError):
    """A run's worker died more often than the retry limit allows."""


class CheckpointError(FlopsFitError, ValueError):
    """A checkpoint file that does not validate (partial, corrupt, or of another run), or one that could not
    be written (a full disk), named with its folder and the fix."""


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped (it did not validate); the run falls back to an earlier one."""


class TrackingWarning(UserWarning):
    """An experiment-tracking backend failed to import or to write; it is switched off for the
    rest of the sweep (warned once per backend) and flops-fit goes on without it (a sweep, a fit)."""


class StoreBusy(StoreError):
    """Another live driver holds the store's lease: two drivers would train the same runs."""


class Interrupted(KeyboardInterrupt):
    """A sweep stopped on Ctrl-C or SIGTERM after its in-flight runs checkpointed.

    A ``KeyboardInterrupt`` so that nothing on the way catches it as a run's failure;
    ``signum`` is the signal that asked for the stop (the CLI exits with 128 + signum).
    """

    def __init__(self, signum: int = 2, message: str = "interrupted") -> None:
        super().__init__(message)
        self.signum = signum


# ------------------------------------------------------------------ fitting
class FitInputError(FlopsFitError, ValueError):
    """The runs given to a fit are missing columns, hold bad values or are too few."""


class NoFitError(FitInputError):
    """No method gives a usable answer on these runs (each one's reason in the message)."""


class NoRunsError(NoFitError):
    """Runs were read, and none of them finished with a loss (failed, diverged, or not trained yet): nothing to fit."""


# ------------------------------------------------------------------- parity
class ParityError(FlopsFitError):
    """Base class for parity-suite errors."""


class WeightFileError(ParityError, ValueError):
    """A weight file or folder is missing, truncated, corrupt or in a format we refuse (pickle)."""


class ConversionError(ParityError, ValueError):
    """Reference weights do not fit the target: missing, unexpected, mis-shaped or zeroed keys."""


class ConversionAssumptionWarning(UserWarning):
    """A converter assumed what the weights it read cannot tell (an activation, a norm eps, the
    pooling); the message lists each assumption and the argument that sets it."""


# Warnings whose message says all a reader needs (what happened, what flops-fit did instead): printed
# as one line, without the source line Python adds, by the CLI and by the worker processes it starts.
ONE_LINE_WARNINGS = (PluginWarning, CheckpointWarning, TrackingWarning)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for flops-fit's processes: its one-line warnings as ``flops-fit: ...``."""
    if issubclass(category, ONE_LINE_WARNINGS):
        print(f"flops-fit: {message}", file=file or sys.stderr)
    else:
        print(warnings.formatwarning(message, category, filename, lineno, line), end="", file=file or sys.stderr)
