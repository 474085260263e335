"""The demo's training CPU seconds, this checkout against another, and whether every number stayed the same.

Issue 39: ``flops-fit demo`` is bound by its training's CPU seconds (2 workers on 2 cores), so a
change to the training loop is measured on the demo's own runs: the demo's plan (the same specs,
learning rates and run ids), its runs of the ``--budgets`` smallest budgets trained through the
product's own path (``run_plan(..., only=...)``: the local executor, 2 workers, one thread each,
WSD families, checkpoints, the store), the parity gate skipped. Each arm is a fresh process
(``--child``) with the arm's checkout on ``FLOPS_FIT_ROOT`` (how this repository's helpers run two
checkouts with one environment, through the shim on ``PYTHONPATH``); the arms alternate, the order
swapped each round. Reported per arm: the CPU seconds of the whole process tree (driver and
workers; import and plan included), the driver's alone, the wall seconds; the ratios new / base of
each arm's best round; and whether every run's held-out loss, bits per byte and loss curve are the
same to the bit as the base's.

``--breakdown`` instead measures where a demo step's CPU goes, in this process on one thread: per
width, one demo run (its smallest budget, cut to ``--steps`` steps, the cooldown at the same share)
through ``training.loop.train`` (setup and held-out loss included), against the bare step on one
fixed batch (forward, loss, backward, clipping, AdamW: the loop's own calls), and the forward and
backward alone; best of ``--repeats`` rounds, the arms alternating.

Timings on a shared machine go under its lock (``flock /tmp/flops-bench.lock``):

    flock /tmp/flops-bench.lock nice -n 5 python benchmarks/bench_demo_training.py \\
        --base /work/wt-speed-base [--budgets 3] [--repeats 2] [--out benchmarks/results/demo_training.json]
    flock /tmp/flops-bench.lock nice -n 5 python benchmarks/bench_demo_training.py --breakdown 6,10,26 \\
        [--steps 300] [--repeats 3] [--out benchmarks/results/demo_step_breakdown.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def child(budgets: int, out: str) -> dict:
    """Train the demo's runs of its ``budgets`` smallest budgets into ``out``; CPU, wall and results."""
    t0 = time.perf_counter()
    import flops_fit
    from flops_fit.sweeps.demo import DEMOS, demo_plan

    plan, config = demo_plan("gpt")
    chosen = sorted({r.budget for r in plan.runs})[:budgets]
    only = [r.run_id for r in plan.runs if r.budget in chosen]
    t_train = time.perf_counter()
    flops_fit.run_plan(plan, out, workers=2, executor=config.executor, executor_options=config.executor_options,
                       skip_parity=True, show_progress=False, only=only)
    wall_train = time.perf_counter() - t_train
    frame = flops_fit.RunStore(out).runs_frame()
    frame = frame[frame.run_id.isin(only)]
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "file": flops_fit.__file__, "executor_options": DEMOS["gpt"]["executor"], "budgets": chosen,
        "runs": {r.run_id: {"status": r.status, "loss": float(r.loss).hex(), "bpb": float(r.bpb).hex(),
                            "curve": [[float(t).hex(), float(v).hex()] for t, v in r.curve], "steps": int(r.steps)}
                 for r in frame.itertuples()},
        "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        "driver_cpu_s": me.ru_utime + me.ru_stime, "wall_s": time.perf_counter() - t0, "train_wall_s": wall_train,
    }


def breakdown(widths: list[int], steps: int, repeats: int) -> dict:
    """CPU milliseconds a step: the loop's, the bare step's, the forward and backward's (see the docstring)."""
    import torch

    from flops_fit.sweeps.demo import demo_plan

    torch.set_num_threads(1)
    plan, _ = demo_plan("gpt")
    rows = []
    for width in widths:
        rows.append(_width_row(min((r for r in plan.runs if r.size == width), key=lambda r: r.budget), steps, repeats))
        print(rows[-1], flush=True)
    return {"steps": steps, "repeats": repeats, "rows": rows}


def _width_row(spec, steps: int, repeats: int) -> dict:
    """One width's row of ``breakdown``: ``spec`` cut to ``steps`` steps, the three arms."""
    import dataclasses

    import numpy as np
    import torch

    from flops_fit.plugin import api
    from flops_fit.training.loop import built, train
    from flops_fit.training.steps import make_optimizer

    spec = dataclasses.replace(spec, steps=steps, tokens=steps * spec.batch_size * spec.seq_len,
                               cooldown_start=round(spec.cooldown_start / spec.steps * steps),
                               warmup_steps=min(spec.warmup_steps, steps // 4))
    torch.manual_seed(spec.seed)
    model, loss_fn = built(spec), api.get_loss(spec.loss)
    optimizer = make_optimizer(model, spec, torch.device("cpu"))
    batch = api.create_dataset(spec.dataset, "train", **spec.dataset_config).get_batch(np.arange(spec.batch_size))
    params = [p for p in model.parameters() if p.requires_grad]

    def bare(update: bool) -> None:
        for _ in range(steps):
            loss_fn(model(batch["tokens"]), batch).backward()
            if update:
                torch.nn.utils.clip_grad_norm_(params, spec.grad_clip)
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    arms = {"loop": lambda: train(spec), "bare_step": lambda: bare(True), "forward_backward": lambda: bare(False)}
    for run in arms.values():  # warm: the first call pays for imports and the corpus's first read
        run()
    best = {name: float("inf") for name in arms}
    for i in range(repeats):
        for name in (list(arms) if i % 2 == 0 else list(arms)[::-1]):
            t = time.process_time()
            arms[name]()
            best[name] = min(best[name], 1000 * (time.process_time() - t) / steps)
    return {"width": spec.size, "params": spec.params, **{f"{k}_ms": round(v, 2) for k, v in best.items()},
            "loop_over_bare": round(best["loop"] / best["bare_step"], 3),
            "clip_and_adamw_share_of_bare": round(1 - best["forward_backward"] / best["bare_step"], 3)}


def arm(root: str, budgets: int) -> dict:
    """One round of one arm: a fresh process with ``root`` as the flops-fit it imports."""
    with tempfile.TemporaryDirectory(prefix="bench-demo-training-") as folder:
        env = {**os.environ, "FLOPS_FIT_ROOT": root, "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, __file__, "--child", "--budgets", str(budgets),
                              "--out-dir", str(Path(folder) / "sweep")],
                             env=env, capture_output=True, text=True, check=False)
        if out.returncode:
            raise SystemExit(f"the arm at {root} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=False, help="the checkout to compare against (its FLOPS_FIT_ROOT)")
    parser.add_argument("--new", default=str(HERE), help="this checkout (default: the one holding this file)")
    parser.add_argument("--budgets", type=int, default=3, help="the demo's smallest budgets to train (default 3)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", help="write the result JSON here")
    parser.add_argument("--breakdown", help="widths (e.g. 6,10,26): where a step's CPU goes, in this process")
    parser.add_argument("--steps", type=int, default=300, help="steps per arm of --breakdown")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.budgets, args.out_dir)))
        return
    if args.breakdown:
        result = {"command": " ".join(["python benchmarks/bench_demo_training.py", *sys.argv[1:]]),
                  "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                              "load_1min": os.getloadavg()[0]},
                  **breakdown([int(w) for w in args.breakdown.split(",")], args.steps, args.repeats)}
        print(json.dumps(result, indent=1))
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        return
    if not args.base:
        parser.error("--base is required (or --breakdown)")
    rounds: dict[str, list[dict]] = {"base": [], "new": []}
    for i in range(args.repeats):
        order = ("base", "new") if i % 2 == 0 else ("new", "base")
        for name in order:
            rounds[name].append(arm(args.base if name == "base" else args.new, args.budgets))
            r = rounds[name][-1]
            print(f"round {i + 1} {name}: {r['cpu_s']:.1f} CPU-s ({r['driver_cpu_s']:.1f} driver), "
                  f"{r['wall_s']:.1f} s wall", flush=True)
    reference = rounds["base"][0]["runs"]
    same = all(r["runs"] == reference for rs in rounds.values() for r in rs)
    best = {name: min(rs, key=lambda r: r["cpu_s"]) for name, rs in rounds.items()}
    result = {
        "command": " ".join(["python benchmarks/bench_demo_training.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_1min": os.getloadavg()[0]},
        "budgets": best["new"]["budgets"], "runs": len(reference),
        "steps": sum(r["steps"] for r in reference.values()),
        "rounds": {name: [{k: round(r[k], 2) for k in ("cpu_s", "driver_cpu_s", "wall_s", "train_wall_s")}
                          for r in rs] for name, rs in rounds.items()},
        "cpu_ratio_new_over_base": round(best["new"]["cpu_s"] / best["base"]["cpu_s"], 3),
        "wall_ratio_new_over_base": round(best["new"]["wall_s"] / best["base"]["wall_s"], 3),
        "bit_identical": same,
        "all_done": all(v["status"] == "done" for v in reference.values()),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
