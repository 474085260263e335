"""Runs trained together (``training.stacked``) against one and two at a time, on the GPT demo tune's grid.

For each width of the demo's tune (10, 26, 58: the demo's model, batch 32 x 64 tokens), one
tune cell: the same run at 4 of the tune's rate multipliers at its smallest budget, cut to
``--steps`` optimizer steps (the cell's shapes and rates unchanged, the cooldown at the same
share). Five arms, one after another, each timed from the first run's setup to the last run's
held-out loss (fixed costs included), ``--repeats`` rounds with the order reversed every other
round, the fastest of each arm kept:

* ``one_at_a_time``: ``training.task.train_family`` per multiplier in this process on one
  thread: what ``flops_fit.tune`` does by default (one worker; the demo pins one thread a run).
* ``two_at_a_time``: the same on 2 worker processes at once, one thread each (what
  ``flops-fit tune --demo`` does: ``--workers 2``); the workers are started and warm before
  the clock starts.
* ``together``: the 4 runs in one program (``train_stacked_families``) with 2 threads: each run
  steps on one of them (what a stack gets on 2 free cores).
* ``together_one_thread``: the same program on one thread (the same cores as one at a time).
* ``together_two_workers``: two programs of 2 runs each, one on each of 2 worker processes, one
  thread each (``flops-fit tune --workers 2 --stack-runs 2``): the runs together, and no two
  threads of one process competing for Python's lock.

Reported per width: each arm's seconds (and CPU seconds: on a busy machine the wall
times say how much of the cores the arm got, the CPU seconds what it computed), the speed-ups of ``together`` over the two baselines and
of ``together_one_thread`` over one at a time, and how far each run's curve and held-out loss
in every arm lie from the same run one at a time (0: bit for bit). Run it on a machine whose
2 cores are otherwise idle (here: holding both CPU slots), so that two threads have two cores:

    python benchmarks/bench_stacked.py [--sizes 10,26,58] [--steps 60] [--repeats 2] \\
        [--out benchmarks/results/stacked.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import platform
import time
from pathlib import Path

import torch

from flops_fit.plugin import api
from flops_fit.sweeps.demo import demo_tune_spec
from flops_fit.training.stacked import StackedFamilies, train_stacked_families
from flops_fit.training.task import train_family
from flops_fit.training.wsd import families
from flops_fit.tuning.grid import check_grid, tune_plan
from flops_fit.tuning.tune import _config

RUNS = 4


def cell(size: int, steps: int) -> list:
    """The tune's runs of ``size`` at its smallest budget, the first ``RUNS`` multipliers, cut to
    ``steps`` steps (the cooldown at the same share of the run)."""
    config, settings = demo_tune_spec("gpt")
    options = _config(config).options.replace(device="cpu", precision="fp32")
    grid = check_grid(options, settings["budgets"], settings["sizes"], settings["multipliers"], None, None)
    runs = [r for r in tune_plan(options, grid).runs if r.size == size]
    lowest = min(r.budget for r in runs)
    runs = [r for r in runs if r.budget == lowest][:RUNS]
    if not runs:
        raise SystemExit(f"size {size} is not planned at the tune's smallest budget")
    return [dataclasses.replace(r, steps=steps, tokens=steps * r.batch_size * r.seq_len,
                                cooldown_start=round(r.cooldown_start / r.steps * steps),
                                warmup_steps=min(r.warmup_steps, steps // 4), run_id="")
            for r in runs]


def _warm(spec) -> None:
    """Build the datasets once, so that no arm pays for the corpus's first read."""
    for split in ("train", spec.eval_split):
        api.create_dataset(spec.dataset, split, **spec.dataset_config)


def _worker_start() -> None:
    torch.set_num_threads(1)


def _warm_worker(spec) -> int:
    _warm(spec)
    time.sleep(1.0)  # both workers take one
    return os.getpid()


def _family_in_worker(family) -> tuple[list, float]:
    """A family trained alone in a worker, with the CPU seconds it took there."""
    c0 = time.process_time()
    outcomes = train_family(family)
    return outcomes, time.process_time() - c0


def _two_at_a_time(pool, group) -> tuple[list, float]:
    done = pool.map(_family_in_worker, group.families, chunksize=1)
    return [o for outcomes, _ in done for o in outcomes], sum(cpu for _, cpu in done)


def _stack_in_worker(group) -> tuple[list, float]:
    """Runs trained together in a worker, with the CPU seconds they took there."""
    c0 = time.process_time()
    outcomes = train_stacked_families(group)
    return outcomes, time.process_time() - c0


def _stacks_on_two_workers(pool, group) -> tuple[list, float]:
    half = len(group.families) // 2
    parts = [StackedFamilies(group.families[:half]), StackedFamilies(group.families[half:])]
    done = pool.map(_stack_in_worker, parts, chunksize=1)
    return [o for outcomes, _ in done for o in outcomes], sum(cpu for _, cpu in done)


def _timed(fn, threads: int) -> tuple[float, float, list]:
    """Wall seconds, CPU seconds (this process's threads, or what ``fn`` reports from its
    workers) and the outcomes of ``fn`` run on ``threads`` torch threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        outcomes = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if isinstance(outcomes, tuple):  # from the workers: (outcomes, their CPU seconds)
            outcomes, cpu = outcomes
        return wall, cpu, outcomes
    finally:
        torch.set_num_threads(previous)


def _gaps(reference: list, other: list) -> dict:
    curve = max(abs(a[1] - b[1]) for x, y in zip(reference, other, strict=True)
                for a, b in zip(x.curve, y.curve, strict=True))
    loss = max(abs(x.loss - y.loss) for x, y in zip(reference, other, strict=True))
    return {"max_curve_gap": curve, "max_loss_gap": loss}


def _arms(pool, group) -> dict:
    return {
        "one_at_a_time": (lambda: [o for f in group.families for o in train_family(f)], 1),
        "two_at_a_time": (lambda: _two_at_a_time(pool, group), 1),
        "together": (lambda: train_stacked_families(group), 2),
        "together_one_thread": (lambda: train_stacked_families(group), 1),
        "together_two_workers": (lambda: _stacks_on_two_workers(pool, group), 1),
    }


def measure(size: int, steps: int, pool, repeats: int) -> dict:
    """Each arm ``repeats`` times, the order reversed every other round (its fastest kept),
    after an untimed round of every arm on a 4-step cell (first calls, caches, workers)."""
    runs = cell(size, steps)
    _warm(runs[0])
    pids = pool.map(_warm_worker, [runs[0]] * 2, chunksize=1)
    for fn, threads in _arms(pool, StackedFamilies(tuple(families(cell(size, 4))))).values():
        _timed(fn, threads)
    arms_of = _arms(pool, StackedFamilies(tuple(families(runs))))
    arms: dict = {}
    for round_ in range(repeats):
        for name in (list(arms_of) if round_ % 2 == 0 else list(arms_of)[::-1]):
            timed = _timed(*arms_of[name])
            if name not in arms or timed[0] < arms[name][0]:
                arms[name] = timed
    arms = {name: arms[name] for name in arms_of}
    reference = arms["one_at_a_time"][2]
    seconds = {name: s for name, (s, _, _) in arms.items()}
    cpu = {name: c for name, (_, c, _) in arms.items()}
    return {"size": size, "params": runs[0].params, "runs": len(runs), "steps": steps, "repeats": repeats,
            "batch_size": runs[0].batch_size, "seq_len": runs[0].seq_len, "lrs": [r.lr for r in runs],
            "seconds": seconds, "cpu_seconds": cpu,
            "speedup_vs_one_at_a_time": seconds["one_at_a_time"] / seconds["together"],
            "speedup_vs_two_at_a_time": seconds["two_at_a_time"] / seconds["together"],
            "speedup_one_thread": seconds["one_at_a_time"] / seconds["together_one_thread"],
            "speedup_two_workers": seconds["one_at_a_time"] / seconds["together_two_workers"],
            "speedup_two_workers_vs_two_at_a_time": seconds["two_at_a_time"] / seconds["together_two_workers"],
            "gaps": {name: _gaps(reference, outcomes) for name, (_, _, outcomes) in arms.items()
                     if name != "one_at_a_time"},
            "all_done": all(r.status == "done" for _, _, outcomes in arms.values() for r in outcomes),
            "two_workers": len(set(pids)) == 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,26,58")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the 5 arms (the fastest of each kept)")
    parser.add_argument("--out", default="benchmarks/results/stacked.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows, load = [], [os.getloadavg()[0]]
    with multiprocessing.get_context("spawn").Pool(2, initializer=_worker_start) as pool:
        for size in [int(s) for s in args.sizes.split(",")]:
            row = measure(size, args.steps, pool, args.repeats)
            rows.append(row)
            load.append(os.getloadavg()[0])
            s = row["seconds"]
            print(f"width {size:3d} ({row['params']:,} params, {row['steps']} steps of {row['batch_size']}x"
                  f"{row['seq_len']}): one at a time {s['one_at_a_time']:.1f}s, two at a time "
                  f"{s['two_at_a_time']:.1f}s, together {s['together']:.1f}s (one thread {s['together_one_thread']:.1f}s): "
                  f"x{row['speedup_vs_one_at_a_time']:.2f} / x{row['speedup_vs_two_at_a_time']:.2f} "
                  f"(one thread x{row['speedup_one_thread']:.2f}); on 2 workers {s['together_two_workers']:.1f}s: "
                  f"x{row['speedup_two_workers']:.2f} / x{row['speedup_two_workers_vs_two_at_a_time']:.2f}; gaps "
                  f"{max(g['max_curve_gap'] for g in row['gaps'].values()):.1e}; CPU s "
                  + ", ".join(f"{k} {v:.1f}" for k, v in row["cpu_seconds"].items()), flush=True)
    total = {arm: sum(r["seconds"][arm] for r in rows) for arm in rows[0]["seconds"]}
    cpu = {arm: sum(r["cpu_seconds"][arm] for r in rows) for arm in rows[0]["cpu_seconds"]}
    summary = {"speedup_vs_one_at_a_time": total["one_at_a_time"] / total["together"],
               "speedup_vs_two_at_a_time": total["two_at_a_time"] / total["together"],
               "speedup_one_thread": total["one_at_a_time"] / total["together_one_thread"],
               "speedup_two_workers": total["one_at_a_time"] / total["together_two_workers"],
               "speedup_two_workers_vs_two_at_a_time": total["two_at_a_time"] / total["together_two_workers"]}
    print("all widths: " + ", ".join(f"{k} x{v:.2f}" for k, v in summary.items()))
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous[f"steps{args.steps}_repeats{args.repeats}"] = {
        "rows": rows, "seconds": total, "cpu_seconds": cpu, **summary,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "load_1min": load},
        "command": f"python benchmarks/bench_stacked.py --sizes {args.sizes} --steps {args.steps} "
                   f"--repeats {args.repeats}"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(previous, indent=2) + "\n")


if __name__ == "__main__":
    main()
