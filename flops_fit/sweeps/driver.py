"""The sweep driver: parity gate -> executor.map(train) -> RunStore, resumable.

WSD runs go to the executor as families (``branches``): one task trains a size's stable
phase once and every cooldown branched from it; each branch is recorded as its own run.
A run that finished in a task that died before returning (a family's earlier branch) left
its result beside its checkpoints: the driver stores it on resume instead of training it.

The driver is the store's only writer and holds its lease (``store.lease``): a second
driver on the same folder is refused. Each finished run is committed on its own, and runs
in flight checkpoint every ``checkpoint_seconds`` (``training.checkpoint``), so a crash loses
at most one checkpoint interval per run; Ctrl-C or SIGTERM makes them checkpoint first.
``resume=True`` trains exactly the runs of the plan that have no final result, each from
its newest checkpoint; a plan that adds runs to the stored ones (a budget or size more) grows
the store first (``sweeps.extend``). The store counts every optimizer step trained, lost ones included.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import platform
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flops_fit._version import __version__
from flops_fit.checks import positive_int
from flops_fit.errors import OptionError, ParityGateError, StoreError
from flops_fit.executors.base import checked_map
from flops_fit.executors.stopping import request_stop, stop_on_signals
from flops_fit.executors.supervisor import check_main_guard
from flops_fit.fitting import fit
from flops_fit.plugin import api
from flops_fit.store.lease import Lease, holder
from flops_fit.store.outside import mark_training
from flops_fit.store.run_store import RunStore, planned_run
from flops_fit.store.runs import RunResult, RunSpec
from flops_fit.sweeps.extend import HISTORY_META, check_store, history_entry, record_growth
from flops_fit.sweeps.gate import case_timeout, check, gate_line
from flops_fit.sweeps.options import SweepOptions
from flops_fit.sweeps.planner import plan
from flops_fit.sweeps.preflight import EXTERNAL_CHECKS, preflight, writable_checkpoints
from flops_fit.sweeps.progress import SESSION_META, SweepDisplay, work_of
from flops_fit.tracking.base import SweepTracker, sweep_destination
from flops_fit.tracking.options import Destination, destination
from flops_fit.training.checkpoint import (
    CheckpointPolicy,
    list_checkpoints,
    load_result,
    remove_checkpoints,
)
from flops_fit.training.launch import launched_for
from flops_fit.training.task import (
    item_outcomes,
    recover_results,
    stable_folders,
    train_item,
    work_items,
)


@dataclass
class SweepResult:
    """A sweep's output folder: its runs as a table, and the way into fitting."""

    out_dir: Path

    @property
    def store(self) -> RunStore:
        return RunStore(self.out_dir)

    @property
    def runs(self):
        """One row per finished run (see ``RunStore.runs_frame``)."""
        with RunStore(self.out_dir, reading=True) as store:
            return store.runs_frame()

    def fit(self, *args: Any, **kwargs: Any):
        """Fit scaling laws to this sweep's runs with ``flops_fit.fit``: its arguments after the source, the
        method among them (``result.fit("vpnls")`` was a TypeError)."""
        return fit(str(self.out_dir), *args, **kwargs)


def versions(host: Any = None) -> dict[str, Any]:
    """flops-fit, torch, Python and every plugin's version, for the store."""
    import torch

    return {
        "flops-fit": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "plugins": [
            {"name": p.name, "distribution": p.distribution, "version": p.version, "status": p.status}
            for p in api.list_plugins(host=host)
        ],
    }


def parity_gate(model: str, *, skip: bool = False, host: Any = None) -> dict[str, Any]:
    """Run the model's quick parity cases before any compute is spent.

    Returns ``{"status": ..., "reason": ...}``: "passed", "unverified" (no case could run,
    none failed), "failed" or "overridden" (``skip_parity=True``); "not applicable" for a model
    family that says why no case applies (``ModelEntry.no_parity``), and for a sweep whose [train]
    command trains the runs.
    """
    if skip:
        return {"status": "overridden", "reason": "skip_parity=True: the gate was not run"}
    exempt = api.model_info(model, host=host).no_parity
    if exempt is not None:
        return {"status": "not applicable", "reason": exempt}
    report = check(model, host=host)
    return {"status": report.status, "reason": report.summary()[:4000]}


DATA_META = "data"  # each dataset configuration's training-split fingerprint, as the folder's runs read it


def _check_data(store: RunStore, found: dict[str, str], out_dir: Path) -> None:
    """Refuse to go on when a dataset's training split (``found``: its fingerprint per configuration,
    from the preflight) differs from the one this folder's runs trained on: a corpus edited to the same
    length resumed silently, the runs after it trained on other text than those before. A folder where
    no run has started yet takes the data as it now is."""
    recorded = store.get_meta(DATA_META) or {}
    changed = [key for key, value in found.items() if recorded.get(key, value) != value]
    if not changed or set(store.counts()) <= {"pending"}:
        return
    dataset, config, _ = json.loads(changed[0])
    raise StoreError(f"the training data of dataset {dataset!r} ({config}) changed since {out_dir}'s runs trained on "
                     "it (its content differs): restore it as it was, or sweep the changed data into another --out "
                     "folder")


def _check_trainer(store: RunStore, plan: Any) -> None:
    """Refuse to go on with another trainer than the one the stored runs were trained by."""
    stored = (store.get_meta("plan") or {}).get("options", {})
    if "trainer" not in stored:  # a new folder, or a store written before [train] existed
        if stored and plan.options.trainer is not None:
            raise StoreError("this folder's runs were trained by flops-fit's loop: sweep the [train] command into "
                             "another --out folder")
        return
    ours = None if plan.options.trainer is None else list(plan.options.trainer.command)
    if (stored["trainer"] and stored["trainer"]["command"]) != ours:
        theirs = "flops-fit's loop" if stored["trainer"] is None else f"the command {stored['trainer']['command']}"
        raise StoreError(f"this folder's runs are trained by {theirs}, not by this sweep's trainer: keep its [train] "
                         "table as it was, or choose another --out folder")


def checkpoint_policy(options: SweepOptions, out_dir: Path, checkpoint_dir: str | Path | None) -> CheckpointPolicy | None:
    """Where the plan's runs checkpoint (None when ``checkpoint_seconds`` is 0). Absolute paths,
    so that worker processes and Ray tasks find them wherever they run."""
    if options.checkpoint_seconds == 0:
        return None
    folder = Path(checkpoint_dir) if checkpoint_dir is not None else out_dir / "checkpoints"
    weights = str((out_dir / "weights").resolve()) if options.keep_weights else None
    return CheckpointPolicy(str(folder.resolve()), options.checkpoint_seconds, weights_dir=weights)


class _Accounting:
    """Turns progress reports into the store's per-run accounting: a report with a NaN loss
    opens an attempt at the units it starts from; later reports add the steps trained."""

    def __init__(self, store: RunStore, runs: list[RunSpec]) -> None:
        self.store = store
        self.units_per_step = {r.run_id: r.batch_size * r.seq_len for r in runs}
        self.at: dict[str, int] = {}  # run_id -> steps done at its last report

    def heard(self, run_id: str, done: int, loss: float) -> int:
        """Account for a report; returns the steps it adds."""
        steps = -(-done // self.units_per_step[run_id])
        added = 0
        if math.isnan(loss):
            self.store.mark_running(run_id)
        elif steps > self.at.get(run_id, steps):
            added = steps - self.at[run_id]
            self.store.add_steps_trained(run_id, added)
        self.at[run_id] = steps
        return added


def run_plan(
    plan: Any,
    out_dir: str | Path,
    *,
    resume: bool = False,
    executor: str = "local",
    workers: int = 1,
    executor_options: dict[str, Any] | None = None,
    skip_parity: bool = False,
    skip_preflight: bool = False,
    retry_failed: bool = False,
    show_progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    record_only: bool = False,
    only: Collection[str] | None = None,
    host: Any = None,
) -> SweepResult:
    """Run ``plan`` (a ``Plan``) into ``out_dir``, resuming a store of the same plan if ``resume``.

    ``executor`` names a registered executor, built with ``workers`` and ``executor_options``.
    Runs checkpoint into ``checkpoint_dir`` (default ``out_dir/checkpoints``; on a cluster, a
    folder every node sees). Ctrl-C or SIGTERM makes the runs in flight checkpoint, then
    ``Interrupted`` (a ``KeyboardInterrupt``) propagates with the store consistent. Raises
    ``StoreBusy`` while another live driver holds the folder. With ``tracking`` among the
    plan's options, the sweep's own tracker run logs the plan and how the runs ended, and
    each run logs to its own (``flops_fit.tracking``).

    Before the parity gate and the first run, the preflight (``sweeps.preflight``) checks the
    runs to train once per distinct configuration and raises ``PreflightError`` for a sweep
    that cannot work; the plan is then not recorded, so the folder takes the corrected sweep.
    ``skip_preflight=True`` skips it (a driver that cannot see what the workers see).
    ``record_only=True`` records the plan and trains nothing: its runs are then trained one by
    one with ``train_run`` (``flops-fit train-run``), e.g. under an outside launcher.
    ``only`` (run ids) trains just those of the plan's runs (an adaptive sweep's chosen budgets,
    ``sweeps.adaptive``); the whole plan is recorded either way.
    """
    workers = _check_arguments(out_dir, checkpoint_dir, workers, resume=resume, skip_parity=skip_parity,
                               skip_preflight=skip_preflight, retry_failed=retry_failed, show_progress=show_progress,
                               record_only=record_only)
    out_dir = Path(out_dir)
    _check_executor(plan, executor, workers, executor_options, host)
    if not skip_parity and plan.options.trainer is None:
        case_timeout()  # a bad $FLOPS_FIT_PARITY_TIMEOUT refused before the folder is touched, not at the gate
    store = RunStore(out_dir, create=True)
    try:
        with Lease(store.path, on_lost=lambda message: request_stop()), stop_on_signals():
            new, plan, added = check_store(store, plan, out_dir, resume, replan=functools.partial(
                _replanned, plan.options, host=host))
            policy = checkpoint_policy(plan.options, out_dir, checkpoint_dir)
            _check_trainer(store, plan)
            found: dict[str, str] = {}
            if not skip_preflight:
                status = store.statuses()
                todo = [r for r in plan.runs if status.get(r.run_id) != "done"] if retry_failed else \
                    store.unfinished(plan)
                todo = [r for r in todo if only is None or r.run_id in only]
                checks = EXTERNAL_CHECKS if plan.options.trainer is not None else None
                tracked = plan.options.tracking
                found = preflight(plan, todo, checkpoints=policy, concurrent=workers, host=host, checks=checks,
                                  tracking=tracked and destination(tracked, out_dir, "")).fingerprints
                _check_data(store, found, out_dir)
            if new:
                created = time.time()
                store.add_plan(plan, spec=plan.settings, versions=versions(host), created=created,
                               **{HISTORY_META: [history_entry(plan, plan.runs, created)]})
            elif added:  # the stored runs keep their results; the new ones are pending
                line = record_growth(store, plan, added)
                if show_progress:
                    print(line, file=sys.stderr)
            if found:  # what the runs about to train read: the next resume compares with it
                store.set_meta(**{DATA_META: {**(store.get_meta(DATA_META) or {}), **found}})
            if record_only:
                return SweepResult(out_dir)
            if live := holder(store.path):  # this driver's session is its own, however soon it followed another
                store.set_meta(**{SESSION_META: live.started})
            tracking = sweep_destination({"created": store.get_meta("created")}, out_dir, plan.options.tracking)
            with SweepTracker(tracking, plan, new=new, counts=store.counts()) as tracker:
                _train_unfinished(plan, store, out_dir, executor=executor, workers=workers,
                                  executor_options=executor_options, skip_parity=skip_parity,
                                  retry_failed=retry_failed, show_progress=show_progress, host=host,
                                  policy=policy, only=only,
                                  tracking=tracker.runs_destination)
                tracker.finished(store.counts())
    finally:
        store.close()
    return SweepResult(out_dir)


def _replanned(options: SweepOptions, budgets: list[float], host: Any = None) -> Any:
    """The plan of ``options`` at ``budgets`` only: what tells a refused extension whether the budgets it
    adds alone moved the stored runs (``extend.refusal``)."""
    return plan(options.replace(budgets=budgets), host=host)


def _check_arguments(out_dir: Any, checkpoint_dir: Any, workers: Any, **flags: Any) -> int:
    """``run_plan``'s own arguments, each refused in one line naming it (``workers`` returned as an int):
    skip_parity="no" is truthy and skipped the gate, workers=0 was refused as a script without its main
    guard, out_dir=3 raised pathlib's TypeError."""
    folders = {"out_dir": out_dir, **({} if checkpoint_dir is None else {"checkpoint_dir": checkpoint_dir})}
    for name, folder in folders.items():
        if not isinstance(folder, (str, os.PathLike)) or not str(folder):
            raise OptionError(f"{name} must be a folder (a str or pathlib.Path), got {folder!r}")
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise OptionError(f"{name} must be True or False, got {value!r}")
    return positive_int(workers, "workers", OptionError)


def _check_executor(plan: Any, executor: str, workers: int, executor_options: dict[str, Any] | None,
                    host: Any) -> None:
    """``run_plan``'s refusals before the folder is touched (a refused call leaves no store behind): the local
    executor's workers, or a run's ranks, would run an unguarded script again; a custom host runs in-process
    only; an unknown executor or a bad option of one is one line."""
    check_main_guard(spawning=executor == "local" and (workers != 1 or plan.options.processes_per_run > 1))
    if host is not None and (workers != 1 or executor != "local"):
        raise OptionError("a custom host= works only in-process (executor 'local', workers=1)")
    with api.create_executor(executor, host=host, workers=workers, **(executor_options or {})) as runner:
        if hasattr(runner, "check_submission"):  # a scheduler that can say now whether it takes the jobs (SLURM)
            runner.check_submission(plan.runs)


def check_run_options(plan: Any, caller: str, **run: Any) -> None:
    """``run``, options a caller passes on to ``run_plan`` for ``plan`` (an adaptive sweep's), refused as
    ``run_plan`` would refuse them, before the caller makes its store: an unknown option (a TypeError in the
    first round), the executor's checks (``_check_executor``). ``caller`` names the function in the line."""
    options = [p for p in inspect.signature(run_plan).parameters if p not in ("plan", "out_dir", "resume", "only")]
    unknown = sorted(set(run) - set(options))
    if unknown:
        raise OptionError(f"{caller} got unknown option(s) {', '.join(map(repr, unknown))}; it passes these on to "
                          f"run_plan: {', '.join(options)}")
    given = {**{k: p.default for k, p in inspect.signature(run_plan).parameters.items() if k in options}, **run}
    _check_executor(plan, given["executor"], given["workers"], given["executor_options"], given["host"])


def sweep(options: SweepOptions | None = None, /, *, out_dir: str | Path = "flops-fit-out", resume: bool = False,
          executor: str = "local", workers: int = 1, executor_options: dict[str, Any] | None = None,
          skip_parity: bool = False, skip_preflight: bool = False, retry_failed: bool = False,
          show_progress: bool = True, checkpoint_dir: str | Path | None = None, host: Any = None,
          **values: Any) -> SweepResult:
    """Plan (``values`` are ``SweepOptions`` fields) and run an IsoFLOP sweep into ``out_dir``;
    the other keywords are ``run_plan``'s."""
    return run_plan(
        plan(options, host=host, **values), out_dir, resume=resume, executor=executor, workers=workers,
        executor_options=executor_options, skip_parity=skip_parity, skip_preflight=skip_preflight,
        retry_failed=retry_failed, show_progress=show_progress, checkpoint_dir=checkpoint_dir, host=host,
    )


def _train_unfinished(plan: Any, store: RunStore, out_dir: Path, *, executor: str, workers: int,
                      executor_options: dict[str, Any] | None, skip_parity: bool, retry_failed: bool,
                      show_progress: bool, host: Any, policy: CheckpointPolicy | None,
                      tracking: Destination | None = None, only: Collection[str] | None = None) -> None:
    if retry_failed:
        store.reset([rid for rid, s in store.statuses().items() if s == "failed"])
    for result in recover_results(store.unfinished(plan), policy):
        store.record(result)
        remove_checkpoints(policy.run_dir(result.run_id))
    unfinished = store.unfinished(plan)
    todo = [r for r in unfinished if only is None or r.run_id in only]
    model = plan.runs[0].model
    trainer = plan.options.trainer and plan.options.trainer.resolved(out_dir)
    finished = len(plan.runs) - len(unfinished)  # with ``only``, runs not chosen are not counted as done
    work, group = work_of(counted_after(plan.runs, todo, policy), todo)
    display = SweepDisplay(finished + len(todo), finished, enabled=show_progress, work=work, group=group,
                           scope="" if only is None else " in this batch")  # an adaptive sweep's batch, not its end
    if todo:
        if trainer is None and not skip_parity:  # what `flops-fit status` says while the gate's cases run (seconds)
            store.set_meta(parity={"status": "running", "pid": os.getpid(), "reason": f"parity gate for {model!r}: "
                                   "running now, before the first run"})
        gate = ({"status": "not applicable", "reason": "the [train] command trains the runs, not flops-fit's model: "
                 "no parity case applies"} if trainer is not None else parity_gate(model, skip=skip_parity, host=host))
        store.set_meta(parity=gate)
        if gate["status"] == "failed":
            raise ParityGateError(
                f"model {model!r} failed its parity gate, so no run was trained:\n"
                f"{gate['reason']}\nfix the model, or pass skip_parity=True (--skip-parity) to override"
            )
        display.note(gate_line(gate))  # what was proven before the compute is spent, or why nothing was
    accounting = _Accounting(store, plan.runs)
    stored: set[str] = set()  # runs stored before their item returned (a family's earlier branches)

    def store_run(spec: RunSpec, result: RunResult, crashed: bool = False) -> None:
        store.record(result)
        stored.add(spec.run_id)
        if policy is not None and not crashed:
            remove_checkpoints(policy.run_dir(spec.run_id))
        display.run_finished(_summary(spec, result), failed=result.status != "done", run_id=spec.run_id,
                             seconds=result.timings.get("total_s"))

    branches: dict[str, list[RunSpec]] = {}  # WSD family -> its runs to train
    for r in todo:
        if r.schedule == "wsd":
            branches.setdefault(r.family, []).append(r)
    family_of = {r.run_id: family for family, runs in branches.items() for r in runs}

    def store_finished_branches(run_id: str) -> None:
        """A branch starting: its family's branches that saved a result have ended, so store them now
        (status showed them running until the family's last branch ended)."""
        for spec in branches.get(family_of.get(run_id, ""), []) if policy is not None else []:
            if spec.run_id not in stored and spec.run_id != run_id and \
                    (result := load_result(policy.run_dir(spec.run_id), spec.run_id)):
                store_run(spec, result)

    def on_progress(run_id: str, done: int, total: int, loss: float) -> None:
        if math.isnan(loss):
            store_finished_branches(run_id)
        display.pace.add(run_id, accounting.heard(run_id, done, loss))
        if done and not math.isnan(loss):
            display.run_progress(run_id, done, total, loss)

    options = {"workers": workers, **(executor_options or {}), "on_progress": on_progress}
    task = functools.partial(train_item, host=host, checkpoints=policy, tracking=tracking, trainer=trainer)
    with api.create_executor(executor, host=host, **options) as runner:
        if hasattr(runner, "use_sweep_folder"):  # an executor that keeps files (SLURM's job logs)
            runner.use_sweep_folder(out_dir)
        chosen = {r.run_id for r in todo}
        later = [r for r in unfinished if r.run_id not in chosen]  # a later batch's (``only``): waypoints
        items = work_items(todo, stack=plan.options.stack_runs, later=later)
        for item, item_outcome in checked_map(runner, task, items, api.entry_label("executor", executor, host=host)):
            crashed = False
            for spec, outcome in item_outcomes(item, item_outcome):
                if spec.run_id in stored:  # a branch stored as it ended; a later branch's crash is not its own
                    continue
                result = outcome if isinstance(outcome, RunResult) else RunResult(
                    run_id=spec.run_id, status="failed", error=f"{type(outcome).__name__}: {outcome}",
                )
                # once committed, its checkpoints are no longer needed, unless the run crashed (its
                # worker killed, out of memory): --retry-failed then goes on from them
                crashed = crashed or not isinstance(outcome, RunResult)
                store_run(spec, result, crashed=not isinstance(outcome, RunResult))
            # every branch of the item is stored; a family with branches still to train (a later batch
            # of an adaptive sweep, ``only``) keeps its stable state, so that batch goes on from it
            folders = stable_folders(item) if policy is not None else []
            pending = {r.family for r in store.unfinished(plan)} if folders and only is not None else set()
            for family in folders:
                if family not in pending and not crashed:
                    remove_checkpoints(policy.run_dir(family))


def counted_after(runs: list[RunSpec], todo: list[RunSpec], policy: CheckpointPolicy | None) -> list[RunSpec]:
    """The plan's ``runs`` whose work the runs ``todo`` go on from, for their pace (``work_of``): a WSD family
    goes on from its stable state only where that is kept (its checkpoints); one whose stored branches ended
    and whose state was removed (a sweep extended with a longer branch, ``sweeps.extend``) trains its stable
    phase again from the start, which counting its stored branches left out."""
    chosen = {r.run_id for r in todo}
    kept = {r.family for r in todo if r.schedule == "wsd" and policy is not None and
            list_checkpoints(policy.run_dir(r.family))}
    return [r for r in runs if r.run_id in chosen or r.schedule != "wsd" or r.family in kept]


def train_run(out_dir: str | Path, run_id: str, *, checkpoint_dir: str | Path | None = None,
              retry_failed: bool = False) -> RunResult | None:
    """Train one planned run of the sweep stored in ``out_dir`` and record its result there:
    the way to train a run under an outside launcher (``torchrun``, ``srun``; every rank calls
    it, ``training.launch`` case (c)), or alone (its k ranks launched here, case (b)).

    Rank 0 holds the store's lease while the run trains, so no sweep driver trains the same
    folder meanwhile (``StoreBusy`` names the one that does); it counts the steps, records the
    result once and removes the checkpoints; the other ranks only train and return None. A
    run that already has a final result is refused (``StoreError``); ``retry_failed`` trains a
    failed one again, its failure replaced only by the new attempt's result (an interrupted
    retry leaves the failure stored, as ``record``'s retry does). The run checkpoints into
    ``checkpoint_dir`` (default OUT/checkpoints), so a relaunch continues it; SIGTERM
    checkpoints and raises ``Interrupted``. Runs are not tracked here (``[tracking]``)."""
    out_dir = Path(out_dir)
    with RunStore(out_dir) as store:
        stored = store.get_meta("plan")
        statuses = store.statuses()
        runs = store.planned_runs()  # a plan this release cannot read: one line naming the release that wrote it
    if stored is None:
        raise StoreError(f"{out_dir} holds no plan: record one with `flops-fit sweep CONFIG --out {out_dir} "
                         "--record-only`")
    spec = planned_run(runs, run_id, out_dir)  # or a unique prefix of its id, as status and summaries print it
    run_id = spec.run_id
    status = statuses.get(run_id)
    if status == "done" or (status == "failed" and not retry_failed):
        again = ("; to train it again here, add --retry-failed (API: retry_failed=True): its failure stays stored "
                 "until the new attempt ends" if status == "failed" else "; a finished run is not trained again")
        raise StoreError(f"run {run_id} already has a result in {out_dir} ({status}){again}")
    launched_for(spec.processes_per_run)  # every rank refuses a group of another size, before training
    options = SweepOptions.from_dict(stored["options"])
    policy = checkpoint_policy(options, out_dir, checkpoint_dir)
    if policy is not None:
        writable_checkpoints(policy, [spec])  # refused before training: a run failed on it could not be trained again here
    trainer = options.trainer and options.trainer.resolved(out_dir)
    task = functools.partial(train_item, checkpoints=policy, trainer=trainer)
    if int(os.environ.get("RANK", "0")) != 0:
        with stop_on_signals():
            return task(spec)
    store = RunStore(out_dir)
    try:
        with Lease(store.path, on_lost=lambda message: request_stop()), stop_on_signals():
            mark_training(store, run_id)  # record may store the other runs meanwhile
            accounting = _Accounting(store, runs)
            try:
                outcome = task(spec, lambda rid, done, total, loss: accounting.heard(rid, done, loss))
            except Exception as exc:  # noqa: BLE001 - the run's failure is its result
                outcome = exc
            result = outcome if isinstance(outcome, RunResult) else RunResult(
                run_id=run_id, status="failed", error=f"{type(outcome).__name__}: {outcome}")
            store.record(result)
            if policy is not None:
                remove_checkpoints(policy.run_dir(run_id))
    finally:
        store.close()
    return result


def _summary(spec: RunSpec, result: RunResult) -> str:
    head = f"run {spec.run_id[:8]} size {spec.size} budget {spec.budget:.2e}"
    if result.status == "done":
        return f"{head}: loss {result.loss:.4f} in {result.timings.get('total_s', 0):.1f}s"
    return f"{head}: FAILED ({result.error})"
