"""Does the best learning rate stay put across widths under muP? (issue 19 item 5)

Trains the demo's GPT (2 layers, 2 heads, exact GELU, byte-level Python standard library
source) at a narrow and a wide width (8x apart) over a factor-2 grid of learning rates, under
the standard parametrization and under muP with ``base_width`` = the narrow width, every run
the same number of steps on the same data (warmup then cosine, AdamW, the trainer's own
``train``). Prints the held-out loss of every cell, each row's best rate (the grid's lowest
loss, and the vertex of a parabola in log2(rate) through it and its two neighbours), and how
many grid steps the best rate moves from the narrow width to the wide one: the goal is at
most one step under muP, against the standard parametrization's shift.

At the base width muP is the standard model bit for bit (tests/test_mup.py), so the narrow
row is trained once and serves both.

    python benchmarks/bench_mup_lr.py [--widths 16 128] [--steps 400] [--batch 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import numpy as np
import torch

import flops_fit
from flops_fit.training.loop import train

MODEL = {"n_layer": 2, "n_head": 2, "gelu": "exact"}  # the GPT demo's model (flops_fit.sweeps.demo)
SCALED = ("mup", "per-layer")  # the parametrizations that transfer the base width's rate


def base_specs(widths: list[int], config: dict, args) -> dict[int, object]:
    """One planned RunSpec per width (the planner fills in the size-dependent fields); the
    benchmark then fixes the steps, tokens and rate of each run."""
    sizes = sorted({*widths, widths[0] * 2})  # the planner wants 3 sizes per budget
    plan = flops_fit.plan(
        model="gpt", dataset="python-stdlib", sizes=sizes, budgets=[1e13], batch_size=args.batch,
        seq_len=args.seq_len, model_config=config, hparams={"lr_rule": "constant"},
        eval_tokens=args.eval_tokens, min_steps=1, device="cpu",
    )
    return {r.size: r for r in plan.runs if r.size in widths}


def held_out_loss(spec, lr: float, args) -> float:
    run = dataclasses.replace(spec, lr=lr, steps=args.steps, tokens=args.steps * args.batch * args.seq_len,
                              warmup_steps=max(1, args.steps // 20), run_id="")
    result = train(run)
    return result.loss if result.status == "done" else math.inf


def best_rate(log2_rates: list[int], losses: list[float]) -> tuple[int, float]:
    """The grid's best log2(rate), and the vertex of the parabola through it and its neighbours
    (the grid point itself at an edge of the grid)."""
    i = int(np.argmin(losses))
    if 0 < i < len(losses) - 1 and all(math.isfinite(v) for v in losses[i - 1:i + 2]):
        a, b, _ = np.polyfit(log2_rates[i - 1:i + 2], losses[i - 1:i + 2], 2)
        if a > 0:
            return log2_rates[i], -b / (2 * a)
    return log2_rates[i], float(log2_rates[i])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs=2, default=[16, 128])
    parser.add_argument("--log2-rates", type=int, nargs=2, default=[-11, -3], help="grid 2^lo .. 2^hi")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--eval-tokens", type=int, default=16384)
    args = parser.parse_args()
    torch.set_num_threads(1)
    narrow, wide = args.widths
    log2_rates = list(range(args.log2_rates[0], args.log2_rates[1] + 1))
    specs = {"standard": base_specs(args.widths, MODEL, args)}
    for name in SCALED:
        specs[name] = base_specs(args.widths, {**MODEL, "parametrization": name, "base_width": narrow}, args)
    t0 = time.process_time()
    rows = {}
    for name, width in (("standard", narrow), ("standard", wide), *((name, wide) for name in SCALED)):
        rows[name, width] = []
        for k in log2_rates:
            rows[name, width].append(held_out_loss(specs[name][width], 2.0**k, args))
            print(f"{name:8s} width {width:4d} lr 2^{k:<3d} held-out loss {rows[name, width][-1]:.4f}", flush=True)
    for name in SCALED:
        rows[name, narrow] = rows["standard", narrow]  # at its base width each is the standard model
    print(f"\n{args.steps} steps x {args.batch} x {args.seq_len} tokens per run; CPU time "
          f"{time.process_time() - t0:.0f} s\n")
    print("| parametrization | width | " + " | ".join(f"2^{k}" for k in log2_rates) + " | best (grid) | best (parabola) |")
    print("|---|---|" + "---|" * len(log2_rates) + "---|---|")
    best = {}
    for (name, width), losses in sorted(rows.items(), key=lambda kv: (kv[0][0] != "standard", kv[0][1])):
        best[name, width] = best_rate(log2_rates, losses)
        cells = " | ".join("diverged" if not math.isfinite(v) else f"{v:.3f}" for v in losses)
        grid, vertex = best[name, width]
        print(f"| {name} | {width} | {cells} | 2^{grid} | 2^{vertex:.2f} |")
    print()
    for name in ("standard", *SCALED):
        (g0, v0), (g1, v1) = best[name, narrow], best[name, wide]
        gap = min(rows[name, wide]) / min(rows["standard", wide]) - 1
        print(f"{name}: best rate moves {g1 - g0:+d} grid steps (parabola {v1 - v0:+.2f}) from width {narrow} "
              f"to {wide}; best loss at {wide} {100 * gap:+.1f}% against the standard parametrization's best there")


if __name__ == "__main__":
    main()
