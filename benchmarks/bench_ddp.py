"""Two DDP ranks against one process on the same cores: training tokens/s at the same global batch.

One GPT run is trained in turn on one process (torch threads = the cores, then 1 thread) and
on ``processes_per_run = 2`` gloo ranks (threads = the cores / 2 each), ``--repeats`` times
each, alternating, so all see the same machine. Tokens/s counts training only (``train_s``:
start-up, the held-out loss and, for the ranks, process launch are left out; the launch is
shown apart as the wall time). The held-out losses must agree (relative 1e-5).

    python benchmarks/bench_ddp.py                # width 128, batch 16 x 128 tokens
    python benchmarks/bench_ddp.py --parallel fsdp
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    args = parser.parse_args()

    import torch

    import flops_fit
    from flops_fit.training.loop import train
    from flops_fit.training.task import train_item

    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)
    tokens = args.steps * args.batch * args.seq
    flops = tokens * 6 * 4e6  # a budget near what the width's runs need; the run is trimmed below
    plan = flops_fit.plan(model="gpt", budgets=[flops], sizes=[args.width // 2, args.width, args.width * 2],
                          batch_size=args.batch, seq_len=args.seq, min_steps=1, device="cpu", eval_tokens=4096,
                          model_config={"block_size": args.seq})
    spec = next(r for r in plan.runs if r.size == args.width)
    spec = dataclasses.replace(spec, tokens=tokens, steps=args.steps, budget=tokens * spec.flops_per_unit, run_id="")
    ranks = dataclasses.replace(spec, processes_per_run=2, parallel=args.parallel)
    print(f"gpt width {args.width} ({spec.params:,} parameters), global batch {args.batch} x {args.seq} tokens, "
          f"{args.steps} steps, {cores} cores, {args.parallel}")
    one = f"one process, {cores} threads"
    contenders = {one: (cores, lambda: train(spec)), "one process, 1 thread": (1, lambda: train(spec)),
                  f"2 ranks, {max(1, cores // 2)} thread(s) each": (cores, lambda: train_item(ranks))}
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    walls: dict[str, list[float]] = {name: [] for name in contenders}
    losses = {}
    for _ in range(args.repeats):
        for name, (threads, run) in contenders.items():
            torch.set_num_threads(threads)  # the ranks get this process's threads / 2
            start = time.perf_counter()
            result = run()
            walls[name].append(time.perf_counter() - start)
            rates[name].append(result.tokens / result.timings["train_s"])
            losses[name] = result.loss
    for name in rates:
        print(f"{name:>28}: {statistics.median(rates[name]):9.0f} tokens/s (training), "
              f"{statistics.median(walls[name]):6.1f} s wall, held-out loss {losses[name]:.6f}")
    two = list(contenders)[-1]
    for name in list(contenders)[:2]:
        print(f"2 ranks / {name}: {statistics.median(rates[two]) / statistics.median(rates[name]):.2f}x tokens/s")
    print(f"held-out losses agree to {abs(losses[two] / losses[one] - 1):.1e} (relative)")
    print(f"load: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
