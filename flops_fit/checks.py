"""Value checks shared by every boundary (options, contracts, model configurations).

One function per rule, so a bad value reads the same wherever it is caught; the caller
names the exception class its boundary raises.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from flops_fit.errors import OptionError


def positive_int(value: Any, what: str, error: type[Exception] = OptionError) -> int:
    """``value`` if it is an int (not a bool) above zero; else ``error`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise error(f"{what} must be a positive integer, got {value!r}")
    return value


def positive_number(value: Any, what: str, error: type[Exception] = OptionError) -> float:
    """``value`` if it is a finite real number above zero; else ``error`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise error(f"{what} must be a positive number, got {value!r}")
    return value


def non_negative_number(value: Any, what: str, error: type[Exception] = OptionError) -> float:
    """``value`` if it is a finite real number >= 0; else ``error`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise error(f"{what} must be a number >= 0, got {value!r}")
    return value


def held_out_share(value: Any, name: str, error: type[Exception] = OptionError, *, data: str = "text",
                   example: str = "0.05") -> float:
    """A dataset's ``validation_fraction``, strictly between 0 and 1: 0 left the held-out split empty, 1.5 or -1
    cut the data at a negative position (one split empty, or each what the other should be), "0.1" raised a
    TypeError. ``name`` is the dataset, ``data`` what it holds out."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise error(f"{name}: validation_fraction is the share of the {data} held out, between 0 and 1 "
                    f"(e.g. {example}), got {value!r}")
    return value


def one_of(value: Any, choices: Iterable[Any], what: str, error: type[Exception] = OptionError) -> Any:
    """``value`` if it is one of ``choices``; else ``error`` listing them."""
    choices = tuple(choices)
    if value not in choices:
        raise error(f"{what} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value
