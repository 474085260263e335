"""The SLURM executor's options in sbatch's own forms: a time limit ("4:00:00",
"1-12:00:00") and memory ("64G", "500M"), each checked with one line naming the value."""

from __future__ import annotations

import math
import re
from typing import Any

from flops_fit.errors import OptionError


def minutes(value: Any) -> int:
    """A time limit in minutes, from minutes or sbatch's ``--time`` forms ("90", "1:30:00",
    "2-00:00:00", "1-12"); seconds round up to a whole minute."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return math.ceil(value)
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", value.strip()) if isinstance(value, str) else None
    if match is None:  # a bool too (time = true), named as itself
        raise OptionError(f"time must be minutes or sbatch's form like '4:00:00' or '1-12:00:00', got {value!r}")
    days, first, second, third = (int(x) if x is not None else None for x in match.groups())
    if days is not None:  # days-hours[:minutes[:seconds]]
        hours, mins, secs = first, second or 0, third or 0
    elif third is not None:  # hours:minutes:seconds
        hours, mins, secs = first, second, third
    else:  # minutes[:seconds]
        hours, mins, secs = 0, first, second or 0
    total = (days or 0) * 1440 + hours * 60 + mins + math.ceil(secs / 60)
    if total <= 0:
        raise OptionError(f"time must be positive, got {value!r}")
    return total


def gigabytes(value: Any) -> float:
    """Memory per node in GB, from a number of GB or sbatch's ``--mem`` form ("64G", "500M", "1T")."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT])B?", str(value).strip(), re.IGNORECASE) \
        if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise OptionError(f"mem must be GB or sbatch's form like '64G' or '500M', got {value!r}")
    scale = {"K": 2**-20, "M": 2**-10, "G": 1, "T": 2**10}[match.group(2).upper()]
    return float(match.group(1)) * scale


def optional_name(value: Any, what: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise OptionError(f"{what} must be a name (a string), got {value!r}")
    return value


def slurm_name(value: Any, what: str) -> str | None:
    """A partition, account or QOS: SLURM's names hold no spaces (a list is comma-separated, "gpu,cpu"),
    and the job's ``#SBATCH --partition=gpu a100`` line read differently from the ``--test-only``
    check's single argument."""
    name = optional_name(value, what)
    if name is not None and re.search(r"\s", name):
        raise OptionError(f"{what} must be a SLURM name without spaces (several: comma-separated, like "
                          f"'gpu,cpu'), got {value!r}")
    return name
