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
    executor, so that one worker trains the stable phase once. ``device``, ``params`` and
    ``processes_per_run`` are the runs' own, for executors that size resources from them."""

    runs: tuple[RunSpec, ...]

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


def families(runs: Iterable[RunSpec]) -> list[Family]:
    """Group WSD runs by family, each family's branches in token order, the families in
    order of first appearance."""
    groups: dict[str, list[RunSpec]] = {}
    for run in runs:
        if run.schedule != "wsd":
            raise ValueError(f"run {run.run_id} has schedule {run.schedule!r}, not 'wsd': it has no family")
        groups.setdefault(run.family, []).append(run)
    return [Family(tuple(sorted(group, key=lambda r: (r.cooldown_start, r.steps, r.tokens))))
            for group in groups.values()]


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
    """FLOPs each run adds when trained in the order given, each family going on from the stable
    state its latest branch left (what a sweep trained in batches keeps: an adaptive sweep's
    rounds): a branch whose cooldown starts at or after that state trains only the stretch beyond
    it, one that starts before trains its stable phase from scratch (``executed_flops``: the
    families in token order)."""
    out: dict[str, float] = {}
    reached: dict[str, int] = {}  # family -> stable units of its latest branch
    for run in runs:
        if run.schedule != "wsd":
            out[run.run_id] = run.flops
            continue
        stable, before = stable_tokens(run), reached.get(run.family, 0)
        out[run.run_id] = (stable - (before if stable >= before else 0) + run.tokens - stable) * run.flops_per_unit
        reached[run.family] = stable
    return out
