"""Numbers as people read them: a few significant figures, counts with SI suffixes.

Used by the plain-text summaries, the HTML report and the plot labels, so a value reads
the same everywhere.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def sig(value: Any, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures ("nan" for a missing or infinite value)."""
    return f"{float(value):.{digits}g}" if _finite(value) else "nan"


def loss(value: Any) -> str:
    """A loss (or the metric a law fitted) to 4 significant figures, as every table prints one."""
    return sig(value, 4)


def count(value: Any, digits: int = 3) -> str:
    """A parameter or token count: 1.23M, 45.6B, 2.1T (below 1000: plain; from 1000T: 1e+15). The
    suffix is chosen after rounding: 999,700 is 1M and 999.7B is 1T (not "1e+03k", "1e+03B"), and 1e18
    tokens not "1e+06T"."""
    if not _finite(value):
        return "nan"
    v = float(f"{float(value):.{digits}g}")
    if abs(v) >= 1e3 * _SUFFIXES[0][0]:
        return f"{v:.{digits}g}"
    for scale, suffix in _SUFFIXES:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}g}{suffix}"
    return f"{v:.{digits}g}"


def flops(value: Any) -> str:
    """A compute budget: 1e+21, 2.5e+11."""
    return f"{float(value):.2g}" if _finite(value) else "nan"


def with_interval(value: Any, lo: Any, hi: Any, fmt=sig) -> str:
    """"value [lo, hi]", or just the value when there is no interval; "value (outside [lo, hi])" where the
    value lies ``outside`` its interval, so the brackets never read as holding a point they do not."""
    if not (_finite(lo) and _finite(hi)):
        return fmt(value)
    if still(value, lo, hi):
        return f"{fmt(value)} {STILL}"
    if outside(value, lo, hi, fmt):
        return f"{fmt(value)} (outside [{fmt(lo)}, {fmt(hi)}])"
    return f"{fmt(value)} [{fmt(lo)}, {fmt(hi)}]"


STILL_REASON = "resamples all equal"  # why an interval that is the point itself is withheld
STILL = f"[withheld: {STILL_REASON}]"


def still(value: Any, lo: Any, hi: Any) -> bool:
    """Whether an interval is the point itself, ``lo == hi == value`` (not 0, a fixed term): resamples that all
    repeat the fit (isoflop on 3 sizes a budget keeps only those that draw every size) measure no spread, and
    "2.52k [2.52k, 2.52k]" would read as certainty."""
    return _finite(value) and float(value) != 0 and float(lo) == float(hi) == float(value)


def outside(value: Any, lo: Any, hi: Any, fmt=sig) -> bool:
    """Whether a point lies visibly outside its interval: beyond a bound, and printed unlike it. A percentile
    interval can miss the fit's own point (isoflop's exponent a read 0.497 [0.0596, 0.486]); the fit is kept,
    the reader told."""
    if not (_finite(value) and _finite(lo) and _finite(hi)):
        return False
    v, low, high = float(value), min(float(lo), float(hi)), max(float(lo), float(hi))
    return (v < low and fmt(v) != fmt(low)) or (v > high and fmt(v) != fmt(high))


# The widest interval of a positive scale (parameters, tokens, their ratio), hi / lo, that is printed:
# a bootstrap whose resamples run off (a weak sweep, far beyond it) reads N_opt as [19.1, 1.88B] or
# tokens per parameter as [1.03, 1e16], ends that mean nothing.
SPAN_LIMIT = 1e3


def too_wide(lo: Any, hi: Any) -> bool:
    """Whether a positive scale's finite interval spans over ``SPAN_LIMIT`` or reaches 0: one that
    judges nothing, withheld wherever it is printed or compared."""
    return _finite(lo) and _finite(hi) and not (float(lo) > 0 and float(hi) / float(lo) <= SPAN_LIMIT)


def signed_span(value: Any, lo: Any, hi: Any) -> str | None:
    """Why a signed coefficient's finite interval judges nothing (None if it judges): on one side of 0, its
    ends over ``SPAN_LIMIT`` apart in size, as a scale's (the curve law's F read [5.871e+14, 6.77e+21]);
    across 0, wider than ``SPAN_LIMIT`` times the estimate's size. One across 0 and narrower says F's
    sign is unknown, which is worth reading."""
    if not (_finite(lo) and _finite(hi)):
        return None
    low, high = sorted((float(lo), float(hi)))
    if low > 0 or high < 0:
        small, large = sorted((abs(low), abs(high)))
        return f"spans over {SPAN_LIMIT:g}x" if too_wide(small, large) else None
    if _finite(value) and high - low > SPAN_LIMIT * abs(float(value)):
        return f"across 0, over {SPAN_LIMIT:g}x the estimate wide"
    return None


def scale_interval(value: Any, lo: Any, hi: Any, fmt=count) -> str:
    """``with_interval`` for a positive scale: an interval ``too_wide`` withheld, the value kept."""
    if too_wide(lo, hi):
        return f"{fmt(value)} [withheld: spans over {SPAN_LIMIT:g}x]"
    return with_interval(value, lo, hi, fmt)


# How far a loss (or its interval's upper end) may lie from the runs' own losses before it is withheld: isoflop
# held out at 6e10 FLOPs on 20 resamples read 2.216 [2.19, 974.4] nats beside runs that ended at 1.6-2.8, and
# at 1e30 FLOPs envelope and interaction read losses of 0.009 and 0.001 nats.
LOSS_LIMIT = 10.0


def loss_beyond(hi: Any, runs_loss: Any) -> str | None:
    """Why a loss interval whose upper end ``hi`` reaches over ``LOSS_LIMIT`` times the runs' own loss
    ``runs_loss`` (the highest they ended at, or the held-out budget's) judges nothing; None if it judges."""
    if _finite(hi) and _finite(runs_loss) and float(runs_loss) > 0 and float(hi) > LOSS_LIMIT * float(runs_loss):
        return f"reaches over {LOSS_LIMIT:g}x the runs' own losses"
    return None


def loss_under(value: Any, lowest: Any) -> str | None:
    """Why a predicted loss under 1/``LOSS_LIMIT`` of the runs' ``lowest`` is no forecast (None if it may be): a
    power law carried far past the runs, not a loss any model was seen to approach."""
    if _finite(value) and _finite(lowest) and float(value) < float(lowest) / LOSS_LIMIT:
        return f"under 1/{LOSS_LIMIT:g} of the runs' lowest loss, {sig(lowest)}"
    return None


def loss_over(value: Any, highest: Any) -> str | None:
    """Why a predicted loss over ``LOSS_LIMIT`` times the runs' ``highest`` is no forecast (None if it may be): a
    law carried far below the runs, where its power terms grow without bound while a real model's loss levels
    off (--at 10:100 on Gadre's runs, which ended at 1.18-9.05 nats, read 326.9)."""
    if _finite(value) and _finite(highest) and float(highest) > 0 and float(value) > LOSS_LIMIT * float(highest):
        return f"over {LOSS_LIMIT:g}x the runs' highest loss, {sig(highest)}"
    return None


def loss_point(value: Any, lowest: Any, highest: Any) -> str | None:
    """Why a predicted loss itself is withheld (None if it may be printed): far under the runs' ``lowest``
    (``loss_under``) or far over their ``highest`` (``loss_over``)."""
    return loss_under(value, lowest) or loss_over(value, highest)


def loss_bounds(lo: Any, hi: Any, lowest: Any, highest: Any) -> str | None:
    """Why a loss interval judges nothing (None if it may): its upper end far past the runs' ``highest``
    (``loss_beyond``), or its lower end far under their ``lowest`` (``loss_under``): every method's table
    read 0.6133 [-0.3087, 1.528] nats at 1e21 FLOPs beside runs that ended at 1.9-2.9."""
    under = loss_under(lo, lowest)
    return loss_beyond(hi, highest) or (under and f"reaches {under}")


def percent(value: Any) -> str:
    """A relative error as a signed percentage: +3.1%."""
    return f"{100 * float(value):+.1f}%" if _finite(value) else "nan"


def r2(value: Any) -> str:
    """A fit's R^2, or why there is none: with every fitted value equal there is no variance to explain."""
    return f"{float(value):.4f}" if _finite(value) else "undefined: the fitted values do not vary"


def json_safe(value: Any) -> Any:
    """numpy scalars, arrays, tuples and non-finite floats as plain JSON values (NaN -> None)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def json_default(value: Any) -> Any:
    """numpy scalars and arrays (in exclusions, metadata) as plain JSON values."""
    if isinstance(value, (np.generic, np.ndarray)):
        return json_safe(value)
    return str(value)
