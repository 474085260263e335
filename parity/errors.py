"""Errors of the parity suite; each message names the problem and the fix."""

from __future__ import annotations

from flops_fit.errors import FlopsFitError


class ParityError(FlopsFitError):
    """Base class for parity-suite errors."""


class WeightFileError(ParityError, ValueError):
    """A weight file or folder is missing, truncated, corrupt or in a format we refuse (pickle)."""


class ConversionError(ParityError, ValueError):
    """Reference weights do not fit the target: missing, unexpected, mis-shaped or zeroed keys."""
