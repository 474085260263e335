"""Sweep engine overheads, measured side by side in one process.

1. Framework overhead: a small GPT sweep's wall time against the sum of its runs' pure
   training-loop times (goal: overhead under 5%).
2. Trainer speed: ``flops_fit.train`` tokens per second against a plain hand-written
   loop (same model, batch, optimizer, clipping, data) alternated A/B to share the
   machine's noise (goal: ratio at least 0.97).
3. Data loading: time spent fetching batches as a share of the training loop (goal < 5%).

    python benchmarks/bench_sweep.py [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time

import numpy as np
import torch

import flops_fit
from flops_fit.sweeps.driver import run_plan
from flops_fit.sweeps.planner import plan
from flops_fit.training.loop import train
from flops_fit.training.steps import make_optimizer

MODEL = {"n_layer": 2, "head_dim": 8}


def small_plan(budgets):
    return plan(model="gpt", dataset="python-stdlib", budgets=budgets, sizes_per_budget=3, span=4.0,
                tokens_per_param=100.0, batch_size=32, seq_len=64, model_config=MODEL, eval_tokens=8192)


def sweep_overhead() -> dict:
    the_plan = small_plan([8e10, 1.6e11])
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        frame = run_plan(the_plan, out, show_progress=False).runs
        wall = time.perf_counter() - t0
    train_s = sum(t["train_s"] for t in frame.timings)
    eval_s = sum(t["eval_s"] for t in frame.timings)
    setup_s = sum(t["setup_s"] for t in frame.timings)
    data_s = sum(t["data_s"] for t in frame.timings)
    return {"runs": len(frame), "wall_s": wall, "train_s": train_s, "eval_s": eval_s, "setup_s": setup_s,
            "overhead": (wall - train_s) / wall, "overhead_excl_eval": (wall - train_s - eval_s) / wall,
            "data_share": data_s / train_s}


def plain_loop(spec) -> float:
    """The reference: a hand-written loop over the same model, data and optimizer recipe
    (AdamW without decay on 1-D parameters, clipping); tokens/s. What differs is only the
    trainer's own work: schedule, curve, divergence checks, token accounting, progress."""
    torch.manual_seed(spec.seed)
    model = flops_fit.create_model(spec.model, spec.size, **spec.model_config)
    loss_fn = flops_fit.get_loss(spec.loss)
    data = flops_fit.create_dataset(spec.dataset, "train", **spec.dataset_config)
    opt = make_optimizer(model, spec, torch.device("cpu"))
    rng = np.random.default_rng(spec.seed)
    t0 = time.perf_counter()
    for _ in range(spec.steps):
        batch = data.get_batch(rng.integers(0, len(data), spec.batch_size))
        loss = loss_fn(model(batch["tokens"]), batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)  # as the trainer
        opt.step()
        opt.zero_grad(set_to_none=True)
    return spec.steps * spec.batch_size * spec.seq_len / (time.perf_counter() - t0)


def trainer_speed(repeats: int) -> dict:
    spec = small_plan([1.6e11]).runs[1]  # the middle size (width 16 or so)
    spec = dataclasses.replace(spec, tokens=200 * 32 * 64, steps=200, warmup_steps=10, run_id="")
    train(dataclasses.replace(spec, steps=5, tokens=5 * 32 * 64, run_id=""))  # warm up both paths
    plain_loop(dataclasses.replace(spec, steps=5))
    ours, plain, data_share = [], [], []
    for _ in range(repeats):
        result = train(spec)
        ours.append(result.tokens / result.timings["train_s"])
        data_share.append(result.timings["data_s"] / result.timings["train_s"])
        plain.append(plain_loop(spec))
    return {"size": spec.size, "steps": spec.steps, "trainer_tok_s": statistics.median(ours),
            "plain_tok_s": statistics.median(plain),
            "ratio": statistics.median(o / p for o, p in zip(ours, plain, strict=True)),
            "data_share": statistics.median(data_share)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    speed = trainer_speed(args.repeats)
    print(f"trainer: {speed['trainer_tok_s']:.0f} tok/s, plain loop: {speed['plain_tok_s']:.0f} tok/s, "
          f"ratio {speed['ratio']:.3f} (goal >= 0.97); width {speed['size']}, {speed['steps']} steps; "
          f"data loading {speed['data_share']:.2%} of the loop (goal < 5%)")
    sweep = sweep_overhead()
    print(f"sweep: {sweep['runs']} runs, wall {sweep['wall_s']:.1f}s, training loops {sweep['train_s']:.1f}s, "
          f"eval {sweep['eval_s']:.1f}s, setup {sweep['setup_s']:.1f}s; overhead {sweep['overhead']:.1%} "
          f"(excluding the held-out evaluation: {sweep['overhead_excl_eval']:.1%}; goal < 5%); "
          f"data loading {sweep['data_share']:.2%} of training")


if __name__ == "__main__":
    main()
