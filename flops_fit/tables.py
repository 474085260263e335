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


def counted(n: int, noun: str) -> str:
    """``n`` and its noun, plural but after 1: "1 cell", "2 cells" (the tune said "1 cells")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def duration(seconds: float) -> str:
    """Seconds as a person reads them: ``42.0s``, ``3.5min``, ``1.2h``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def shortest(value: float) -> str:
    """``value`` in the shortest ``g`` text that reads back as it (1e+19, 1.2345e+19, 100): for a number
    printed into a command to paste, where 3 significant digits would change it."""
    exact = [t for t in (f"{value:.{p}g}" for p in range(1, 18)) if float(t) == value]
    return min(exact, key=len)  # 100, not 1e+02; 3.2e+11, not 320000000000


def per_param(ratio: float) -> str:
    """Tokens per parameter as a plan's table shows it: one decimal from 1 up (20.0), two significant
    digits below, where one decimal read 0.0 for a size given 0.023 tokens per parameter."""
    return f"{ratio:.1f}" if ratio >= 1 else f"{ratio:.2g}"
