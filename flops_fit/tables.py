"""Plain-text tables and durations for the CLI and for printing plans, sweeps and fits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """Left-aligned columns separated by two spaces, with a dashed rule under the header."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def duration(seconds: float) -> str:
    """Seconds as a person reads them: ``42.0s``, ``3.5min``, ``1.2h``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"
