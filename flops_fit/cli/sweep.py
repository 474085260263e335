"""Sweep commands: ``plan``, ``sweep``, ``status`` and ``demo``.

Planning and training go through the lazy public API (``flops_fit.plan``,
``flops_fit.run_demo``), so ``flops-fit --help`` imports no torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

import flops_fit
from flops_fit.cli.fit import stages
from flops_fit.cli.interrupts import interrupted
from flops_fit.errors import ConfigError, FlopsFitError, OptionError, StoreError
from flops_fit.store.lease import holder
from flops_fit.store.outside import read_result
from flops_fit.store.run_store import FINAL, STORE_NAME, RunStore, check_folder, chosen_runs
from flops_fit.sweeps.config import load_config
from flops_fit.sweeps.data_budget import data_budget, repeat_warning, unique_tokens
from flops_fit.sweeps.export import plan_csv, plan_json
from flops_fit.sweeps.gate import gate_line
from flops_fit.sweeps.options import SweepOptions
from flops_fit.sweeps.progress import CHAIN_GAP, SESSION_META, session_start, stored_pace
from flops_fit.sweeps.tuned import HPARAMS_FILE, grid_flags, stored_grid
from flops_fit.tables import counted, duration, format_table, shortest

DEFAULT_UNTIL = "n_opt<=2x"  # sweeps.adaptive.DEFAULT_RULE, named here so that --help imports no numpy


def _option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per SweepOptions field that has a command-line form, with its help text."""
    for f in dataclasses.fields(SweepOptions):
        parse = f.metadata["cli"]
        if parse is not None:
            parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=parse,
                                metavar=f.metadata["metavar"], help=f.metadata["help"])


def _options_from_args(args: argparse.Namespace) -> SweepOptions:
    values: dict[str, Any] = load_config(args.config).options.to_dict() if args.config else {}
    values.update({f.name: getattr(args, f.name) for f in dataclasses.fields(SweepOptions)
                   if getattr(args, f.name, None) is not None and f.name != "hparams"})
    if args.hparams is not None:  # --hparams DIR: the rates from a tune, the rest from the config's [hparams]
        values["hparams"] = _with_tuned(values.get("hparams"), args.hparams)
    if "model" not in values or "budgets" not in values:
        raise ConfigError("flops-fit plan needs --model and --budgets (or a CONFIG.toml that sets them)")
    return SweepOptions.build(**values)


def _with_tuned(hparams: Any, tuned: str) -> dict[str, Any]:
    """The ``[hparams]`` table (a mapping or HyperParams) with its rates from the tune in ``tuned``."""
    table = hparams.to_dict() if hasattr(hparams, "to_dict") else dict(hparams or {})
    return {**table, "lr": None, "lr_rule": "tuned", "tuned": tuned}


def _cmd_plan(args: argparse.Namespace) -> int:
    rule = _adaptive_rule(args)  # a bad rule: one line, no plan first
    plan = flops_fit.plan(_options_from_args(args))
    executor: dict[str, Any] = {}
    if args.config:  # an [executor] table `flops-fit sweep` refuses is refused here too, not planned as fine
        config = load_config(args.config)
        executor = dict(config.executor_options)
        # the other executors' checks need their cluster, which the machine that plans may not reach
        _check_executor(args.config, config.executor, executor.pop("workers", 1), dict(executor),
                        build=config.executor == "local")
    if args.probe:  # the config's [executor] threads, if it sets them: the probe times what the sweep runs
        plan.calibrate(threads=executor.get("threads"))
    if args.json or args.csv:  # for a scheduler: the runs alone, machine-readable
        print(plan_json(plan) if args.json else plan_csv(plan), end="")
        return 0
    # a design the plan cannot start (too few budgets): its one line, not after the table
    start = None if rule is None else flops_fit.describe_adaptive_start(plan, rule, **_design(args))
    print(plan)
    if start is not None:
        print(start)
    unique, problem = data_budget(plan.options)
    for warning in (repeat_warning(plan.runs, unique, plan.unit),
                    problem and f"warning: {problem}; `flops-fit sweep` refuses until it opens"):
        if warning:
            print(warning)
    return 0


def _check_executor(config: str, executor: str, workers: Any, options: dict[str, Any], *, build: bool = True) -> None:
    """Bad [executor] options (or their flags): one line before the plan, naming where they came from;
    ``build=False`` checks the executor's name alone (ray's and slurm's checks need their cluster)."""
    try:
        if build:
            flops_fit.create_executor(executor, workers=workers, **options).close()
        else:
            flops_fit.executor_info(executor)
    except FlopsFitError as exc:
        raise OptionError(f"{config} [executor] (or its command-line options): {exc}") from None


def _cmd_sweep(args: argparse.Namespace) -> int:
    _adaptive_rule(args)  # a bad rule, or the design's flags without --adaptive: one line before the plan
    if args.record_only and args.adaptive:  # refused after the plan's headline was printed
        raise OptionError("--record-only records a fixed plan; an adaptive sweep chooses its runs as it trains")
    config = load_config(args.config)
    out = check_folder(Path(args.out or config.out))  # a damaged store: one line before the plan
    sweep_options = config.options if args.tracking is None else config.options.replace(
        tracking=None if args.tracking == "off" else args.tracking)
    if args.hparams is not None:
        sweep_options = sweep_options.replace(hparams=_with_tuned(sweep_options.hparams, args.hparams))
    plan = flops_fit.plan(sweep_options)
    executor = args.executor or config.executor
    options, dropped = config.options_for(executor)
    if dropped:
        print(f"note: the sweep file's [executor] option(s) {', '.join(dropped)} are for {config.executor!r}; "
              f"--executor {executor} runs without them", file=sys.stderr)
    if args.workers is not None:
        options["workers"] = args.workers
    if args.address:
        if executor != "ray":
            raise OptionError(f"--address is for the ray executor (this sweep uses {executor!r}): add --executor ray")
        options["address"] = args.address
    workers = options.pop("workers", 1)
    _check_executor(args.config, executor, workers, options)
    print(plan if args.verbose else plan.headline(), file=sys.stderr)
    warning = repeat_warning(plan.runs, unique_tokens(plan.options), plan.unit)
    if warning:
        print(warning, file=sys.stderr)
    checkpoint_dir = args.checkpoint_dir or config.checkpoint_dir
    if args.adaptive:
        return _adaptive(args, plan, out, executor=executor, workers=workers, executor_options=options,
                         checkpoint_dir=checkpoint_dir)
    try:
        plan.run(out, resume=args.resume, executor=executor, workers=workers, executor_options=options,
                 skip_parity=args.skip_parity, skip_preflight=args.skip_preflight,
                 retry_failed=args.retry_failed, checkpoint_dir=checkpoint_dir, record_only=args.record_only)
    except KeyboardInterrupt as exc:
        resume = f"flops-fit sweep {args.config} --out {out} --resume"
        if args.checkpoint_dir:
            resume += f" --checkpoint-dir {args.checkpoint_dir}"
        return interrupted(exc, f"finished runs are saved in {out / STORE_NAME}, runs in flight continue "
                                f"from their checkpoints. Resume with: {resume}")
    if args.record_only:
        print(f"flops-fit: the plan is recorded in {out / STORE_NAME}; train each run with "
              f"`flops-fit train-run {out} RUN_ID` (run ids: `flops-fit status {out}`)", file=sys.stderr)
        return 0
    done = _print_status(out, table=args.verbose)
    if done and not args.verbose:
        print(f"the answer: `flops-fit report {out}` (fit, forecast and the HTML report); each run: "
              f"`flops-fit status {out}`")
    return _print_failures(out)


def _cmd_record(args: argparse.Namespace) -> int:
    """A result trained outside flops-fit, stored with the store's checks."""
    result = flops_fit.record_result(args.out_dir, args.run_id, read_result(args.result), retry_failed=args.retry_failed)
    what = (f"done, held-out loss {result.loss:.4f} after {result.tokens:,} tokens" if result.status == "done"
            else f"failed ({result.error or 'no error given'})")  # a failed run has no loss to print
    print(f"run {result.run_id}: {what}, recorded in {Path(args.out_dir) / STORE_NAME}")
    return 0


def _adaptive(args: argparse.Namespace, plan: Any, out: Path, **run: Any) -> int:
    """``sweep --adaptive``: the design trains the budgets it chooses (``sweeps.adaptive``)."""
    rule = _adaptive_rule(args)
    if (note := rule.unreachable()) is not None:
        print(f"warning: {note}", file=sys.stderr)
    printed = [0]  # rounds whose forecast is printed

    def show_round(design: Any) -> None:
        """Each round as its fit ends (a round's forecast is read once the next one is chosen or it stopped)."""
        ended = len(design.rounds) - (0 if design.stopped else 1)
        if printed[0] == 0 and ended > 0:
            print(f"adaptive design, target {design.target:.3g} FLOPs, rule {design.rule}:")
        for n in range(printed[0] + 1, ended + 1):
            print("\n".join(design.round_lines(n)), flush=True)
        printed[0] = max(printed[0], ended)

    try:
        design = flops_fit.adaptive_sweep(plan, out, rule, **_design(args), resume=args.resume, on_round=show_round,
                                          skip_parity=args.skip_parity, skip_preflight=args.skip_preflight,
                                          retry_failed=args.retry_failed, **run)
    except KeyboardInterrupt as exc:
        return interrupted(exc, f"resume with: flops-fit sweep {args.config} --out {out} --adaptive "
                                f"--until '{rule}'{_design_flags(_design(args))} --resume")
    print(f"stopped: {design.stopped}")
    # the rule read the forecast at the design's target; report's default is 10x the largest budget trained
    print(f"the forecast it read: `flops-fit report {out} --target {shortest(design.target)}`")
    return _print_failures(out)


def _design_flags(design: dict[str, Any]) -> str:
    """The design's options as the flags that give them again: a resume without them replays
    another design (another first batch, target or sizes)."""
    flags = {"target": "--target", "start": "--start", "sizes": "--adaptive-sizes"}
    return "".join(f" {flags[name]} {shortest(value)}" if name == "target" else f" {flags[name]} {value}"
                   for name, value in design.items() if name in flags)


def _adaptive_rule(args: argparse.Namespace) -> Any:
    """The ``--until`` rule with ``--adaptive`` (None without); the design's flags without ``--adaptive``
    are refused: the sweep would train the whole grid, ignoring them."""
    if args.adaptive:
        return flops_fit.StopRule.parse(DEFAULT_UNTIL if args.until is None else args.until)
    given = [flag for flag, value in (("--until", args.until), ("--target", args.target), ("--start", args.start),
                                      ("--adaptive-sizes", args.adaptive_sizes)) if value is not None]
    if given:
        raise OptionError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only with --adaptive (a "
                          "design that chooses its runs): add --adaptive, or leave "
                          f"{'it' if len(given) == 1 else 'them'} out to train the whole grid")
    return None


def _design(args: argparse.Namespace) -> dict[str, Any]:
    """The design's options given on the command line (the others keep ``adaptive_sweep``'s defaults)."""
    return {name: value for name, value in (("target", args.target), ("start", args.start),
                                            ("sizes", args.adaptive_sizes)) if value is not None}


def _adaptive_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adaptive", action="store_true",
                        help="design the sweep as it trains: the smallest budgets first, then the budget (and "
                             "sizes) expected to shrink the forecast's interval of N_opt at the target most per "
                             "FLOP, until --until holds")
    parser.add_argument("--until", metavar="RULE",
                        help="with --adaptive: n_opt<=2x (the forecast's interval of N_opt at the target within "
                             "2x of its estimate) and/or flops<=1e19 (a FLOPs cap), comma-separated "
                             "(default n_opt<=2x)")
    parser.add_argument("--target", type=float, metavar="FLOPS",
                        help="with --adaptive: the budget the forecast aims at (default 10x the largest budget)")
    parser.add_argument("--start", type=int, metavar="K",
                        help="with --adaptive: how many of the smallest budgets the first batch trains, all their "
                             "sizes (default 4: the fewest a forward-chained forecast answers from)")
    parser.add_argument("--adaptive-sizes", type=int, metavar="K",
                        help="with --adaptive: sizes trained at each budget the design adds, those nearest the "
                             "fitted N_opt there (default 5)")


def _cmd_train_run(args: argparse.Namespace) -> int:
    """One planned run, alone or as one rank under torchrun / srun; rank 0 records it."""
    try:
        result = flops_fit.train_run(args.out_dir, args.run_id, checkpoint_dir=args.checkpoint_dir,
                                     retry_failed=args.retry_failed)
    except KeyboardInterrupt as exc:
        return interrupted(exc, f"run {args.run_id} continues from its checkpoint when launched again")
    if result is None:  # a rank other than 0: rank 0 reports
        return 0
    if result.status != "done":
        print(f"flops-fit: run {result.run_id} failed: {result.error}", file=sys.stderr)
        return 1
    print(f"run {result.run_id}: held-out loss {result.loss:.4f} after {result.tokens:,} tokens "
          f"({result.timings.get('total_s', 0):.1f}s), recorded in {Path(args.out_dir) / STORE_NAME}")
    return 0


def _text(value: Any) -> str:
    """A store frame's text cell: pandas reads a run without one as NaN, which is no text to print."""
    return value if isinstance(value, str) else ""


def failure_reasons(frame) -> list[tuple[str, list[str]]]:
    """The failed runs' errors grouped by reason (numbers and the run's own id aside, so "diverged at
    step 12" and "at step 40", or two runs' log files, are one reason), most frequent first: (the
    first run's error, run ids)."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for r in frame[frame.status == "failed"].itertuples():
        error = _text(r.error) or "no error recorded"
        own = error.replace(r.run_id, "RUN").replace(r.run_id[:8], "RUN")  # its log's name, its checkpoint folder
        groups.setdefault(re.sub(r"\d[\d.,]*(e[+-]?\d+)?", "#", own), (error, []))[1].append(r.run_id)
    return sorted(groups.values(), key=lambda group: -len(group[1]))


def _print_failures(out_dir: str | Path) -> int:
    """Exit status 1 after a summary of the distinct failure reasons if any run failed; else 0."""
    with RunStore(out_dir, reading=True) as store:
        frame = store.runs_frame()
    groups = failure_reasons(frame)
    if not groups:
        return 0
    failed = sum(len(ids) for _, ids in groups)
    print(f"flops-fit: {failed} of {len(frame)} runs failed, for {len(groups)} distinct reason(s); "
          f"fix the cause, then train them again with --resume --retry-failed:", file=sys.stderr)
    for error, ids in groups:
        print(f"  {len(ids)} run(s) ({', '.join(i[:8] for i in ids)}): {error}", file=sys.stderr)
    return 1


def _driver(store: RunStore, counts: dict[str, int], runs: list[Any], design: dict[str, Any] | None) -> dict[str, Any]:
    """Who is training the sweep now, and the time it has left (``progress.stored_pace``), or that
    the runs marked running were interrupted: a killed driver leaves them so. ``runs``: the plan's;
    ``design``: an adaptive sweep's, as stored."""
    now = time.time()
    live = holder(store.path, now)
    if design:  # an adaptive sweep's plan is its pool: only the runs chosen so far are to train
        chosen = chosen_runs(design)
        runs = [r for r in runs if r.run_id in chosen]
    if live is None:  # a driver killed before its first run started leaves them all pending
        statuses = store.statuses()
        waiting = sum(statuses.get(r.run_id) == "pending" for r in runs)
        state = {"driver": None, "interrupted": counts.get("running", 0), "waiting": waiting,
                 "resume": _resume(store.dir, runs, design)}
        # runs trained one by one, each by a `flops-fit train-run` of its own, leave the store without a
        # holder for the seconds between one's result and the next's start: that is no stopped sweep
        last = max((row["finished"] for row in store.timeline() if row["finished"]), default=None)
        if waiting and not state["interrupted"] and last is not None and now - last <= CHAIN_GAP:
            state["between_runs_s"] = round(now - last, 1)
        return state
    driver = {**live._asdict(), "heartbeat_age_s": round(now - live.heartbeat, 1)}
    statuses = store.statuses()
    if design and all(statuses.get(r.run_id) in FINAL for r in runs):  # its batch trained: the design fits
        return {"driver": driver, "seconds_left": None, "scope": "choosing the next batch"}
    timeline = store.timeline()
    since = session_start(timeline, live.started, own=store.get_meta(SESSION_META) == live.started)
    left = stored_pace(runs, timeline, since, now).seconds_left()
    return {"driver": driver, "seconds_left": left, "scope": "runs chosen so far" if design else "all runs"}


def _gate(parity: dict[str, Any], driver: dict[str, Any] | None) -> dict[str, Any]:
    """The stored gate as status tells it: one a driver was running when it stopped was interrupted (a
    later driver, such as a train-run's, runs no gate)."""
    live = (driver or {}).get("driver")
    if parity.get("status") == "running" and not (live and live.get("pid") == parity.get("pid")):
        return {"status": "interrupted", "reason": "parity gate: interrupted before it finished; the sweep's next "
                "start runs it again"}
    return parity


def _resume(out_dir: Path, runs: list[Any], design: dict[str, Any] | None) -> str:
    """The command that continues what trained into ``out_dir``: a tune (its runs' rates say so), an
    adaptive sweep (its design in the store) or a sweep."""
    if any(str(r.lr_source or "").startswith("tune:") for r in runs):  # with its grid: without it, another tune
        grid = stored_grid(runs)
        return f"flops-fit tune SPEC --out {out_dir}{' ' + grid_flags(grid) if grid else ''} --resume"
    if design:  # with the design's own target, first batch and sizes: the same design replays
        return (f"flops-fit sweep CONFIG --out {out_dir} --adaptive --until '{design.get('rule', 'RULE')}'"
                f"{_design_flags({k: design[k] for k in ('target', 'start', 'sizes') if design.get(k) is not None})}"
                " --resume")
    return f"flops-fit sweep CONFIG --out {out_dir} --resume"


def _driver_line(state: dict[str, Any]) -> str | None:
    """The line under the counts: the live driver and the time left, or the runs a killed one left."""
    live = state["driver"]
    if live is None:
        n = state["interrupted"]
        waiting = state["waiting"]
        if not n and not waiting:
            return None
        if not n and "between_runs_s" in state:
            return (f"between runs: nothing holds it this moment, but its last result was stored "
                    f"{state['between_runs_s']:.0f}s ago (runs trained one by one by `flops-fit train-run`, or "
                    f"recorded by `flops-fit record`, leave it unheld between them); "
                    f"{counted(waiting, 'run')} not started yet")
        if not n:
            return (f"nothing is training it now: {counted(waiting, 'run')} not started yet; "
                    f"`{state['resume']}` trains {'them' if waiting != 1 else 'it'}")
        them = "them" if n != 1 else "it"
        return (f"nothing is training it now: {counted(n, 'run')} marked running {'were' if n != 1 else 'was'} "
                f"interrupted; `{state['resume']}` continues {them} from {'their' if n != 1 else 'its'} newest "
                "checkpoint (or the start, where none was saved)")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(live["started"]))
    left = state["seconds_left"]
    scope = " for the runs chosen so far" if state["scope"] != "all runs" else ""
    when = ("every run chosen so far is trained: the design fits them to choose its next batch (or stop)"
            if state["scope"] == "choosing the next batch" else f"about {duration(left)} left{scope}"
            if left is not None else "the time left is measured once 3 runs have finished and 10 s have passed")
    age = live["heartbeat_age_s"]  # below 0: the holder's clock runs ahead of this machine's (another host)
    beat = f"heartbeat {age:.0f}s ago" if age >= -1 else f"heartbeat stamped {-age:.0f}s ahead of this machine's clock"
    return f"training now: pid {live['pid']} on {live['host']} since {since} ({beat}); {when}"


def _prefix(run_ids: list[str], shortest: int = 8) -> int:
    """How many leading characters tell these runs apart, at least ``shortest`` (the prefix train-run
    and record accept): the status table's run column."""
    ids = set(run_ids)
    length = shortest
    while len({i[:length] for i in ids}) < len(ids):
        length += 1
    return length


def _result_row(r: Any, short: int) -> list[Any]:
    """A run with a result, as the status table shows it (its id's first ``short`` characters, tokens
    trained, its rate, its loss or error, its time): a tune's runs differ only in their rate. A failure
    that holds no tokens or time (its worker died, a checkpoint write raised) shows the planned tokens, as
    a run still to train does, and no time: not 0 and 0.0s, which read as a run that trained nothing in no
    time."""
    tokens = r.tokens if r.tokens or r.status == "done" else r.tokens_planned
    total = r.timings.get("total_s") if isinstance(r.timings, dict) else None
    return [r.run_id[:short], f"{r.budget:.2e}", r.size, f"{r.params:,}", f"{int(tokens):,}", r.status, f"{r.lr:.3g}",
            "" if r.status != "done" else f"{r.loss:.4f}", "" if total is None else f"{total:.1f}s", _text(r.error)]


def _design_lines(design: dict[str, Any], unchosen: int) -> list[str]:
    """An adaptive sweep's stored design as ``sweep --adaptive`` printed it (``Design.round_lines``):
    each round's FLOPs and forecast, why its runs were chosen, and why it stopped; the store is the
    only record of it once that output is gone."""
    lines = [f"adaptive design, target {design.get('target', math.nan):.3g} FLOPs, rule {design.get('rule', '?')}:"]
    for n, r in enumerate(design.get("rounds", []), 1):
        factor = r.get("factor", math.inf)
        fitted = (f"forecast N_opt {r['n_opt']:.3g} [{r['n_opt_lo']:.3g}, {r['n_opt_hi']:.3g}] (x{factor:.2f})"
                  if isinstance(factor, (int, float)) and math.isfinite(factor)
                  else (r.get("note") or "no interval yet (its batch is training or was interrupted)"))
        lines += [f"  round {n}: {r.get('spent', math.nan):.3g} FLOPs spent; {fitted}",
                  *(f"    {c.get('reason', '')}" for c in r.get("choices", []))]
    lines.append(f"stopped: {design['stopped']}" if design.get("stopped") else
                 "not stopped: the design chooses its next runs after each batch (`--resume` goes on)")
    if unchosen:
        lines.append(f"{unchosen} planned run(s) not chosen by the design: they train only if a round chooses them")
    return lines


def _print_status(out_dir: str | Path, table: bool = True) -> int:
    """The sweep's counts, who is training it and the time it has left, its parity gate and
    (``table``) each run, those still to train too; returns how many runs are done."""
    with RunStore(out_dir, reading=True) as store:
        counts = store.counts()
        parity = store.get_meta("parity") or {"status": "not run"}
        plan = store.get_meta("plan") or {}
        frame = store.runs_frame()
        planned, states = store.planned_runs(), store.statuses()
        design = store.get_meta("adaptive")
        driver = _driver(store, counts, planned, design) if counts else None
        starting = None if counts else holder(store.path)  # a live driver's preflight comes before its plan
    total = sum(counts.values())
    if not total and starting is not None:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(starting.started))
        print(f"{out_dir}: a sweep is starting: pid {starting.pid} on {starting.host} since {since} checks its plan "
              "(the preflight) before it records the plan here")
        return 0
    if not total:  # a store opened by a sweep that refused before it recorded its plan
        print(f"{out_dir}: no plan recorded (a sweep into it stopped before its first run); "
              f"`flops-fit sweep CONFIG --out {out_dir}` starts one")
        return 0
    print(f"{out_dir}: {total} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    line = _driver_line(driver)
    if line:
        print(line)
    print(gate_line(_gate(parity, driver)))
    tune = _tune_line(Path(out_dir), planned)
    if tune:
        print(tune)
    finished = {r.run_id: r for r in frame.itertuples()}
    if design:  # an adaptive sweep: why each batch was chosen; the plan's runs it has not chosen (and none trained)
        chosen = chosen_runs(design)
        for spec in planned:
            if spec.run_id not in chosen and spec.run_id not in finished and states.get(spec.run_id) == "pending":
                states[spec.run_id] = "not chosen"
        print("\n".join(_design_lines(design, sum(s == "not chosen" for s in states.values()))))
    short = _prefix([*(spec.run_id for spec in planned), *finished])
    rows = [_result_row(finished.pop(spec.run_id), short) if spec.run_id in finished else  # every run, in plan order
            [spec.run_id[:short], f"{spec.budget:.2e}", spec.size, f"{spec.params:,}", f"{spec.tokens:,}",
             states.get(spec.run_id, "pending"), f"{spec.lr:.3g}", "", "", ""] for spec in planned]
    rows += [_result_row(r, short) for r in finished.values()]
    if rows and table:
        unit = f"{plan.get('unit', 'token')}s" if isinstance(plan, dict) else "tokens"
        print(format_table(rows, ["run", "budget", "size", "params", unit, "status", "lr", "loss", "time", "error"]))
    return counts.get("done", 0)


def _tune_line(out_dir: Path, runs: list[Any]) -> str | None:
    """A tune's folder says it is one and where its law is (status showed it as any sweep's, neither its
    hparams.json nor how a sweep uses it); a tune with no law yet, the command that fits one or says why not."""
    law = out_dir / HPARAMS_FILE
    if law.is_file():
        return (f"a learning-rate tune: its law is {law}; a sweep plans its rates from it with `--hparams {out_dir}` "
                f"(in a sweep file: [sweep] hparams = \"{out_dir.resolve()}\")")
    if stored_grid(runs) is not None:
        return (f"a learning-rate tune with no law yet (no {law}): `{_resume(out_dir, runs, None)}` fits it "
                "once its runs are done, or says why it found none")
    return None


def _law_only(out_dir: str | Path) -> None:
    """StoreError for a folder that holds a learning-rate law and no sweep (what `tune --from` writes):
    status said "run a sweep with --out FOLDER first", as if nothing were there."""
    folder = Path(out_dir)
    if not (folder / STORE_NAME).exists() and (folder / HPARAMS_FILE).is_file():
        raise StoreError(f"{folder} holds a learning-rate law ({HPARAMS_FILE}, as `flops-fit tune --from` writes it) "
                         f"and no sweep, so there is no status to show: a sweep uses the law with "
                         f"`flops-fit sweep SPEC --hparams {folder}`")


def _cmd_status(args: argparse.Namespace) -> int:
    _law_only(args.out_dir)
    if args.json:
        return _print_status_json(args.out_dir)
    _print_status(args.out_dir)
    return 0


def _shared_steps(planned: list[Any], timeline: list[dict[str, Any]]) -> dict[str, int]:
    """Per WSD branch done, the stable steps it took over from its family's branches done
    before it (``wsd.executed_in_order``, in steps): trained once and counted by those runs, so
    never by it."""
    spec = {r.run_id: r for r in planned}
    done = sorted((row for row in timeline if row["status"] == "done" and row["finished"] is not None
                   and row["run_id"] in spec), key=lambda row: row["finished"])  # a failed branch shared nothing
    reached: dict[str, int] = {}  # family -> the furthest cooldown start of its branches finished so far
    out = {}
    for row in done:
        run = spec[row["run_id"]]
        if run.schedule == "wsd":
            before = reached.get(run.family, 0)
            out[run.run_id] = min(run.cooldown_start, before)
            reached[run.family] = max(run.cooldown_start, before)
    return out


def _print_status_json(out_dir: str | Path) -> int:
    """Per run and in total: status, loss, steps of the result, steps trained over all
    attempts (lost ones included) and attempts, so the cost of interruptions shows."""
    with RunStore(out_dir, reading=True) as store:
        runs = store.accounting()
        counts = store.counts()
        parity = store.get_meta("parity") or {"status": "not run"}
        planned = store.planned_runs()
        design = store.get_meta("adaptive")
        driver = _driver(store, counts, planned, design)
        shared = _shared_steps(planned, store.timeline())
    finished = [r for r in runs if r["steps"] is not None]
    # a run's own steps: its result's less the stable steps a WSD branch took over, from the order the
    # branches finished (steps_reused is 0 for a branch resumed from its own checkpoint)
    own = [r["steps"] - shared.get(r["run_id"], r["steps_reused"]) for r in finished]
    # steps its result holds that no progress report counted: a worker that trained (and checkpointed) on
    # after the driver's last report, the driver killed; trained all the same
    unreported = [max(n - r["steps_trained"], 0) for r, n in zip(finished, own, strict=True)]
    lost = [r["steps_trained"] + u - n for r, u, n in zip(finished, unreported, own, strict=True)]
    for r in runs:  # each run's share of the totals' steps_unreported, which its steps_trained (heard) leaves out
        r["steps_unreported"] = 0
    for r, u in zip(finished, unreported, strict=True):
        r["steps_unreported"] = u
    totals = {
        "runs": len(runs), "counts": counts,
        "steps": sum(r["steps"] for r in finished),
        "steps_planned": sum(r["steps_planned"] for r in runs),
        "steps_trained": sum(r["steps_trained"] for r in runs) + sum(unreported),
        "steps_unreported": sum(unreported),
        "steps_shared": sum(shared.values()),
        "steps_lost": sum(lost),
        "attempts": sum(r["attempts"] for r in runs),
    }
    extra = {}
    if design:  # an adaptive sweep: its design as stored (why each batch, why it stopped), and the runs not chosen
        chosen = chosen_runs(design)
        finite = json.loads(json.dumps(design), parse_constant=lambda _: None)  # a round not fitted yet: inf -> null
        extra["adaptive"] = {**finite, "not_chosen": [r["run_id"] for r in runs if r["run_id"] not in chosen
                                                                 and r["status"] == "pending"]}
    if (tune := _tune_line(Path(out_dir), planned)) is not None:  # as the text says it: a tune, and where its law is
        law = Path(out_dir) / HPARAMS_FILE
        extra["tune"] = {"law": str(law) if law.is_file() else None, "said": tune}
    print(json.dumps({"out_dir": str(out_dir), "parity": _gate(parity, driver)["status"], **driver, "totals": totals, "runs": runs,
                      **extra}, indent=2, sort_keys=True))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out or f"demo-out/{args.model}")
    if args.workers < 1:  # refused by the executor once the plan was printed
        raise OptionError(f"workers must be a positive integer, got {args.workers}")
    try:
        outcome = flops_fit.run_demo(args.model, out, workers=args.workers, progress=stages(sys.stderr),
                                     on_plan=print if args.verbose else lambda plan: print(plan.headline()))
    except KeyboardInterrupt as exc:
        return interrupted(exc, f"run `flops-fit demo --model {args.model}` again to resume")
    if args.verbose:
        print(outcome.table)
    if outcome.refused:
        print(f"flops-fit: the fit was refused: {outcome.refused}")
    else:
        print(outcome.fit.summary(verbose=args.verbose))
        print(f"\n{outcome.interior} of {len(outcome.plan.budgets)} IsoFLOP curves have an interior minimum "
              f"(the table: {out / 'isoflop.txt'})")
        print(f"report (with its plots): {outcome.report}")
    return _print_failures(out)


def add_commands(sub) -> None:
    p = sub.add_parser("plan", help="print the runs a sweep would train (no training)")
    p.add_argument("config", nargs="?", help="a sweep CONFIG.toml (flags override it)")
    p.add_argument("--probe", action="store_true",
                   help="time a few steps of the smallest, middle and largest size here (seconds) so that the time "
                        "estimates are measured, not FLOPs at a guessed throughput")
    _option_flags(p)
    export = p.add_mutually_exclusive_group()
    export.add_argument("--json", action="store_true", help="print the planned runs as JSON (for a scheduler)")
    export.add_argument("--csv", action="store_true", help="print the planned runs as CSV, one row per run")
    _adaptive_flags(p)
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("sweep", help="run a sweep from CONFIG.toml into an output folder")
    p.add_argument("config", help="sweep configuration (e.g. examples/sweep.toml in the flops-fit repository)")
    p.add_argument("--out", help="output folder (default: [sweep] out, or flops-fit-out)")
    p.add_argument("--resume", action="store_true", help="continue the sweep stored in the output folder")
    p.add_argument("--workers", type=int, help="runs trained at once (worker processes)")
    p.add_argument("--executor", help="run on this executor instead of the config's (e.g. local, ray, slurm)")
    p.add_argument("--address", help="Ray cluster to join, e.g. ray://head:10001 (default RAY_ADDRESS)")
    p.add_argument("--skip-parity", action="store_true", help="train even if the model fails its parity gate")
    p.add_argument("--skip-preflight", action="store_true",
                   help="start the runs without first checking datasets, models and the checkpoint folder")
    p.add_argument("--retry-failed", action="store_true", help="train failed runs again")
    p.add_argument("--checkpoint-dir", help="folder for the runs' checkpoints (default OUT/checkpoints; "
                   "on a cluster, one every node sees)")
    p.add_argument("--hparams", metavar="DIR", help="plan each run's learning rate from the law of the tune "
                   "in DIR (`flops-fit tune`) instead of the config's rule")
    p.add_argument("--tracking", metavar="B1,B2|off", help="log to these tracking backends (tensorboard, mlflow, "
                   "wandb) instead of the config's [tracking] table; off: none")
    p.add_argument("-v", "--verbose", action="store_true", help="print the plan's table and every run's row")
    p.add_argument("--record-only", action="store_true",
                   help="record the plan in the output folder and train nothing (then: flops-fit train-run)")
    _adaptive_flags(p)
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("train-run", help="train one planned run and record its result (alone, or as one rank "
                       "under torchrun / srun)")
    p.add_argument("out_dir", help="the sweep's output folder (its plan recorded, e.g. with sweep --record-only)")
    p.add_argument("run_id", help="the run to train, its id or a unique prefix of 8 or more characters "
                   "(`flops-fit status OUT --json` lists them)")
    p.add_argument("--checkpoint-dir", help="folder for the run's checkpoints (default OUT/checkpoints; "
                   "on a cluster, one every node sees)")
    p.add_argument("--retry-failed", action="store_true",
                   help="train a failed run again; its failure is replaced only when the new attempt ends")
    p.set_defaults(func=_cmd_train_run)

    p = sub.add_parser("record", help="store the result of a planned run trained outside flops-fit")
    p.add_argument("out_dir", help="the sweep's output folder (its plan recorded, e.g. with sweep --record-only)")
    p.add_argument("run_id", help="the planned run, its id or a unique prefix of 8 or more characters "
                   "(`flops-fit plan CONFIG --json` or `flops-fit status OUT --json`)")
    p.add_argument("--result", required=True, metavar="RESULT.json",
                   help='the run\'s result: {"loss": held-out loss, "tokens": units trained, optional "steps", '
                   '"curve", "bpb", "status": "failed" with "error"}')
    p.add_argument("--retry-failed", action="store_true",
                   help="record this result in place of the run's failed one (a retry trained outside flops-fit)")
    p.set_defaults(func=_cmd_record)

    p = sub.add_parser("status", help="show a sweep's runs and their state")
    p.add_argument("out_dir", help="the sweep's output folder")
    p.add_argument("--json", action="store_true",
                   help="print JSON: per run and in total, steps, steps trained (lost ones included), attempts")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("demo", help="run the CPU demo sweep end to end (a few minutes)")
    p.add_argument("--model", choices=("gpt", "vit"), default="gpt")
    p.add_argument("--out", help="output folder (default demo-out/MODEL)")
    p.add_argument("--workers", type=int, default=2, help="runs trained at once (worker processes; default 2)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the plan's table, the IsoFLOP table and every method's details")
    p.set_defaults(func=_cmd_demo)
