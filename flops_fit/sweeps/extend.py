"""A stored sweep against the plan it is run with again: the same runs, more runs, or another sweep.

A lab that swept 4 budgets adds a 5th to its sweep file and resumes into the same folder: every
stored run is in the new plan unchanged (matched by ``RunSpec.compute_id``), so the plan only
grows, and the new runs join the store while the stored ones keep their results and ids. A plan
that changes a stored run (a setting differs) or drops one is refused, naming which runs and why:
a WSD family shares one stable phase, so a new branch may move what the family's branches share
(its warmup: a share of its shortest branch's steps; its rate under a tuned law with tokens: the
law's at the geometric mean of its branches' tokens), and the stored branches trained at the old
values. The store keeps the plan's history (``HISTORY_META``): how many runs each step added.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from flops_fit._version import __version__
from flops_fit.errors import FlopsFitError, StoreError
from flops_fit.store.run_store import RunStore
from flops_fit.store.runs import RunSpec

HISTORY_META = "plan_history"  # the store's meta: one entry per plan recorded (the first, then each growth)
WSD_SHARED = {"lr", "lr_source", "warmup_steps"}  # what a WSD family's branches share that a new branch may move


def cells(runs: Iterable[RunSpec], limit: int = 4) -> str:
    """The runs' (budget, size) cells, by budget: "budget 8e+07 (sizes 4, 8, 16)"."""
    by: dict[float, list[int]] = {}
    for r in runs:
        by.setdefault(r.budget, []).append(r.size)
    parts = [f"budget {b:.3g} ({'size' if len(s) == 1 else 'sizes'} {', '.join(map(str, sorted(set(s))))})"
             for b, s in sorted(by.items())]
    return ", ".join(parts[:limit]) + (f", and {len(parts) - limit} more budgets" if len(parts) > limit else "")


def differences(stored: Any, planned: Any) -> list[str]:
    """The settings that differ between a stored run and a planned one (their specs' fields, and the
    keys of the model and dataset tables)."""
    a, b = stored.to_dict(), planned.to_dict()
    names = []
    for key in sorted(set(a) | set(b)):
        if key in ("run_id", "family") or a.get(key) == b.get(key):
            continue
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            names += [f"{key}.{k}" for k in sorted(set(a[key]) | set(b[key])) if a[key].get(k) != b[key].get(k)]
        else:
            names.append(key)
    return names


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _wsd_reason(changed: list[tuple[RunSpec, RunSpec]], stored: dict[str, RunSpec], planned: dict[str, RunSpec],
                replan: Callable[[list[float]], Any] | None) -> str | None:
    """Why added budgets changed stored WSD runs, and the fix, when that is all that changed them:
    ``replan(budgets)`` (the plan with only these budgets) plans every stored run as it was."""
    added = sorted({r.budget for r in planned.values()} - {r.budget for r in stored.values()})
    moved = [set(differences(s, p)) for s, p in changed]
    if not added or replan is None or not all(s.schedule == "wsd" == p.schedule for s, p in changed) or \
            not all(m and m <= WSD_SHARED for m in moved):
        return None
    try:
        without = {r.compute_id() for r in replan(sorted({r.budget for r in stored.values()})).runs}
    except FlopsFitError:  # the stored budgets alone no longer plan: something else changed too
        return None
    if not set(stored) <= without:
        return None
    n = len({s.family for s, _ in changed})
    families = f"{n} stored WSD {'family' if n == 1 else 'families'}"
    budgets = ", ".join(f"{b:.3g}" for b in added)
    what = f"adding budget{'s' if len(added) > 1 else ''} {budgets} changes "
    if any("lr" in m for m in moved):
        return (what + f"the learning rate of {families} (a family shares one rate, its tuned law's at "
                "the geometric mean of its branches' tokens, so a new branch moves it; the stored runs have the old "
                "rate): sweep the grown plan into another --out folder; a sweep planned with a rate that no budget "
                "moves (a fixed [hparams] lr, a rule, a law without tokens, or schedule = "
                "\"cosine\": each run's rate at its own tokens) takes added budgets")
    largest = max(r.budget for r in stored.values())
    return (what + f"the warmup of {families} (a family warms up over warmup_fraction of its shortest "
            "branch's steps, so a shorter branch shortens it; the stored runs have the old warmup): add budgets "
            f"above {largest:.3g} (the largest stored; they leave every family's warmup as it is), or sweep the grown "
            "plan into another --out folder")


def refusal(stored: dict[str, RunSpec], planned: dict[str, RunSpec], out_dir: Path,
            replan: Callable[[list[float]], Any] | None = None) -> str:
    """Why ``planned`` cannot resume the sweep ``stored`` (ids -> specs): which stored runs it changes (a
    planned run in the same cell, a setting that differs) or drops, and the fix. ``replan(budgets)``: the
    plan at these budgets only (what tells that added budgets alone moved stored WSD runs)."""
    old, new = set(stored) - set(planned), set(planned) - set(stored)
    cell = {(planned[k].budget, planned[k].size): planned[k] for k in sorted(new)}
    changed = [(stored[k], cell[(stored[k].budget, stored[k].size)]) for k in sorted(old)
               if (stored[k].budget, stored[k].size) in cell]  # the same cell, planned then and now
    dropped = [stored[k] for k in sorted(old) if (stored[k].budget, stored[k].size) not in cell]
    names = sorted({n for pair in changed for n in differences(*pair)})
    head = (f"{out_dir} holds a different sweep ({len(old)} of its runs are not in this plan, {len(new)} planned runs "
            f"are new{f'; settings that differ: {_shown(names)}' if names else ''})")
    if names == ["version"]:  # the same sweep, planned by another release
        was, now = changed[0][0].version, changed[0][1].version
        return (f"{head}: it was planned by flops-fit {was} (this is {now}): resume it with that release (pip install "
                f"flops-fit=={was}), or choose another --out folder")
    parts = []
    if changed:
        parts.append(f"this plan changes {len(changed)} stored run{'s' if len(changed) > 1 else ''} "
                     f"({cells(s for s, _ in changed)})")
    if dropped:
        parts.append(f"it drops {len(dropped)} stored run{'s' if len(dropped) > 1 else ''} ({cells(dropped)}); a "
                     "sweep resumed into its folder may add runs, not leave stored ones out")
    reason = _wsd_reason(changed, stored, planned, replan) if changed and not dropped else None
    fix = reason or ("keep the stored runs' settings as they were and only add budgets or sizes, or choose another "
                     "--out folder")
    return f"{head}: {'; '.join(parts)}: {fix}" if parts else f"{head}: choose another --out folder"


def check_store(store: RunStore, plan: Any, out_dir: Path, resume: bool,
                replan: Callable[[list[float]], Any] | None = None) -> tuple[bool, Any, list[RunSpec]]:
    """Refuse a folder that holds another sweep, or this one without ``resume``; (True, plan, []) for a
    folder that holds no plan yet, else (False, the plan with the stored specs of its runs, the runs it adds).

    Runs are matched by their rounded id (``RunSpec.compute_id``), so a store whose ids an earlier release
    hashed from every bit (``legacy_id``) is the same sweep; its stored specs, ids and all, are the ones
    trained, so results and checkpoints keep their names."""
    stored = {r.compute_id(): r for r in store.planned_runs()}
    planned = {r.compute_id(): r for r in plan.runs}
    if not stored:
        return True, plan, []
    if set(stored) - set(planned):
        raise StoreError(refusal(stored, planned, out_dir, replan))
    added = [planned[k] for k in planned if k not in stored]
    if added and store.get_meta("adaptive") is not None:
        raise StoreError(f"{out_dir} holds an adaptive sweep, whose rounds are replayed from the plan they were chosen "
                         f"in: this plan adds {len(added)} runs ({cells(added)}), which would choose them anew; sweep "
                         "the larger pool into another --out folder")
    if not resume:
        more = f" and add this plan's {len(added)} new runs ({cells(added)})" if added else ""
        raise StoreError(f"{out_dir} already holds this sweep: pass resume=True (--resume) to continue it{more}")
    runs = [stored.get(key, run) for key, run in planned.items()]
    memory = {s.run_id: plan.memory.get(r.run_id) for r, s in zip(plan.runs, runs, strict=True)}
    return False, dataclasses.replace(plan, runs=runs, memory=memory), added


def history_entry(plan: Any, added: list[RunSpec], at: float | None = None) -> dict[str, Any]:
    """One step of the plan's history: when, the runs it has then, the runs that step added (their budgets
    and sizes), and the release that recorded it."""
    return {"at": time.time() if at is None else at, "runs": len(plan.runs), "added": len(added),
            "budgets": sorted({r.budget for r in added}), "sizes": sorted({r.size for r in added}),
            "flops-fit": __version__}


def record_growth(store: RunStore, plan: Any, added: list[RunSpec]) -> str:
    """Record the grown ``plan`` (its new runs pending) and its history; returns the line that says what
    was added. A store recorded before the history was kept starts it with its first plan."""
    history = store.get_meta(HISTORY_META) or [
        {"at": store.get_meta("created"), "runs": len(plan.runs) - len(added), "added": len(plan.runs) - len(added)}]
    store.add_plan(plan, spec=plan.settings, **{HISTORY_META: [*history, history_entry(plan, added)]})
    return (f"flops-fit: added {len(added)} run{'s' if len(added) != 1 else ''} to the sweep in {store.dir} "
            f"({cells(added)}); its {len(plan.runs) - len(added)} stored runs keep their results")
