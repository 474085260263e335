"""Warmup-stable-decay sweeps: families of runs that share one stable phase.

Every WSD run of one size (the same spec but for its length) is a branch of one family
(``RunSpec.family``): the family trains its stable phase once, in token order, and each
branch adds only its own cooldown. This module groups runs into families and does the
FLOPs accounting: what a family executes against what the same runs cost as separate
cosine runs. (Hägele et al. 2024; the arithmetic is in the design note scaling-laws.md:
one size serving token counts D_1 < ... < D_k with cooldown fraction f costs
(1 - f) D_k + f sum(D_i) instead of sum(D_i).)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flops_fit.store.runs import RunSpec


@dataclass(frozen=True)
class Family:
    """The branches of one stable phase, shortest first: the unit a WSD sweep hands to an
    executor, so that one worker trains the stable phase once. ``waypoints`` are the stable
    steps (cooldown starts) of the family's planned branches that a later batch trains (an
    adaptive sweep's): the stable phase is saved there as it passes, so such a branch trains only
    its cooldown. ``device``, ``params`` and ``processes_per_run`` are the runs' own, for
    executors that size resources from them."""

    runs: tuple[RunSpec, ...]
    waypoints: tuple[int, ...] = ()

    @property
    def run_id(self) -> str:
        return self.runs[0].family

    @property
    def device(self) -> str:
        return self.runs[0].device

    @property
    def params(self) -> int:
        return self.runs[0].params

    @property
    def processes_per_run(self) -> int:
        return self.runs[0].processes_per_run


def families(runs: Iterable[RunSpec], later: Iterable[RunSpec] = ()) -> list[Family]:
    """Group WSD runs by family, each family's branches in token order, the families in
    order of first appearance; ``later``: planned runs a later batch trains, whose cooldown
    starts within the family's stable phase become its waypoints."""
    groups: dict[str, list[RunSpec]] = {}
    for run in runs:
        if run.schedule != "wsd":
            raise ValueError(f"run {run.run_id} has schedule {run.schedule!r}, not 'wsd': it has no family")
        groups.setdefault(run.family, []).append(run)
    points: dict[str, set[int]] = {}
    for run in later:
        if run.schedule == "wsd" and run.family in groups:
            points.setdefault(run.family, set()).add(run.cooldown_start)
    return [Family(tuple(sorted(group, key=lambda r: (r.cooldown_start, r.steps, r.tokens))),
                   tuple(sorted(p for p in points.get(family, ()) if p < max(r.cooldown_start for r in group))))
            for family, group in groups.items()]


def stable_tokens(run: RunSpec) -> int:
    """Units trained before the run's cooldown starts (whole steps: only the last step of a
    run is trimmed, and it lies in the cooldown)."""
    return run.cooldown_start * run.batch_size * run.seq_len


def executed_flops(runs: Iterable[RunSpec]) -> dict[str, float]:
    """FLOPs each run adds when its family trains in token order: its stretch of the stable
    phase beyond the previous branch's cooldown start, plus its own cooldown. Cosine runs
    cost their full FLOPs."""
    runs = list(runs)
    wsd = [run for family in families(r for r in runs if r.schedule == "wsd") for run in family.runs]
    return executed_in_order([r for r in runs if r.schedule != "wsd"] + wsd)


def executed_in_order(runs: Iterable[RunSpec]) -> dict[str, float]:
    """FLOPs each run adds when trained in the order given, as a sweep trained in batches does
    (an adaptive sweep's rounds, every run of them planned from the start): each family goes on
    from the furthest stable state it reached, and keeps its state at every planned branch point
    it passes (``Family.waypoints``), so a branch whose cooldown starts at or before the state
    reached trains only its cooldown, one that starts beyond it the stretch of stable phase up
    to its cooldown start too (``executed_flops``: the families in token order)."""
    out: dict[str, float] = {}
    reached: dict[str, int] = {}  # family -> the furthest stable units trained
    for run in runs:
        if run.schedule != "wsd":
            out[run.run_id] = run.flops
            continue
        stable, before = stable_tokens(run), reached.get(run.family, 0)
        out[run.run_id] = (max(stable - before, 0) + run.tokens - stable) * run.flops_per_unit
        reached[run.family] = max(stable, before)
    return out
