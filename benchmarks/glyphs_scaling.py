"""Does the glyphs corpus scale? Held-out loss against model size and against samples seen.

Trains the ViT demo's model (the `vit` of `flops-fit demo --model vit`: its depth, heads,
patch and the glyphs options of DEMOS["vit"]) at a few widths, each once with a
warmup-stable-decay schedule at the demo's learning-rate rule, and branches a cooldown at
each sample count (as the demo's sweep does): the held-out loss after each cooldown is that
(width, samples) point. Writes a JSON of the grid and a two-panel plot: loss against
parameters at each sample count, and loss against samples at each width.

    python benchmarks/glyphs_scaling.py [--widths 8,14,20,28] [--samples 25000,50000,100000,200000]
        [--out docs/glyphs_scaling.png]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import flops_fit
from flops_fit.sweeps.demo import DEMOS

COOLDOWN = 0.2  # the cooldown's share of each branch's samples, as the demo's WSD runs


def learning_rate(width: int, hparams: dict) -> float:
    return hparams["base_lr"] * hparams["base_width"] / width


def train_width(width: int, samples: list[int], batch: int, model_config: dict, dataset_config: dict,
                hparams: dict, eval_samples: int) -> dict[int, float]:
    """Held-out loss after a cooldown branched at each sample count of ``samples`` (ascending)."""
    torch.manual_seed(0)
    model = flops_fit.create_model("vit", width, **model_config)
    train = flops_fit.create_dataset("glyphs", "train", **dataset_config)
    held = flops_fit.create_dataset("glyphs", "validation", **dataset_config).get_batch(np.arange(eval_samples))
    peak = learning_rate(width, hparams)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                  lr=peak, betas=(0.9, hparams.get("beta2", 0.95)))
    steps = [max(1, n // batch) for n in samples]
    warmup = max(1, int(0.05 * steps[0]))
    order = np.random.default_rng(0).permutation(len(train))

    def step(model, optimizer, k: int, lr: float) -> None:
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch_data = train.get_batch(order[k * batch:(k + 1) * batch])
        loss = F.cross_entropy(model(batch_data["images"]), batch_data["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    losses, done = {}, 0
    for n, total in zip(samples, steps):
        start = total - int(COOLDOWN * total)
        for k in range(done, start):  # the shared stable phase, continued
            step(model, optimizer, k, peak * min(1.0, (k + 1) / warmup))
        done = start
        branch, branch_opt = copy.deepcopy(model), None
        branch_opt = torch.optim.AdamW(
            [{"params": [p for p in branch.parameters() if p.ndim >= 2], "weight_decay": 0.1},
             {"params": [p for p in branch.parameters() if p.ndim < 2], "weight_decay": 0.0}],
            lr=peak, betas=(0.9, hparams.get("beta2", 0.95)))
        branch_opt.load_state_dict(optimizer.state_dict())
        for k in range(start, total):  # the (1 - sqrt) cooldown of this branch
            step(branch, branch_opt, k, peak * (1 - math.sqrt((k - start + 1) / (total - start))))
        with torch.no_grad():
            branch.eval()
            losses[n] = float(F.cross_entropy(branch(held["images"]), held["labels"]))
        print(f"width {width}: {n:,} samples -> held-out loss {losses[n]:.4f}", flush=True)
    return losses


def plot(grid: dict, params: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = sorted(grid)
    samples = sorted(next(iter(grid.values())))
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    colours = plt.cm.viridis(np.linspace(0, 0.9, max(len(samples), len(widths))))
    for i, n in enumerate(samples):
        left.plot([params[w] for w in widths], [grid[w][n] for w in widths], "o-", color=colours[i],
                  label=f"{n / 1000:g}k samples")
    for i, w in enumerate(widths):
        right.plot(samples, [grid[w][n] for n in samples], "o-", color=colours[i], label=f"{params[w] / 1000:.0f}k params")
    for ax, xlabel in ((left, "parameters"), (right, "training samples")):
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    left.set_ylabel("held-out loss")
    left.set_title("glyphs: loss vs model size", fontsize=9)
    right.set_title("glyphs: loss vs data", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="8,14,20,28")
    parser.add_argument("--samples", default="25000,50000,100000,200000")
    parser.add_argument("--eval-samples", type=int, default=4096)
    parser.add_argument("--out", default="docs/glyphs_scaling.png")
    args = parser.parse_args()
    torch.set_num_threads(1)
    demo = DEMOS["vit"]
    model_config = {k: v for k, v in demo["model"].items()}
    dataset_config = dict(demo.get("dataset", {}))
    info = flops_fit.dataset_info("glyphs").defaults
    for key in ("image_size", "in_chans", "num_classes", "patch_size"):
        model_config.setdefault(key, dataset_config.get(key, info[key]))
    widths = [int(w) for w in args.widths.split(",")]
    samples = sorted(int(n) for n in args.samples.split(","))
    grid, params, t0 = {}, {}, time.perf_counter()
    for width in widths:
        params[width] = flops_fit.model_info("vit").params(width, **model_config)
        grid[width] = train_width(width, samples, demo["sweep"]["batch_size"], model_config, dataset_config,
                                  demo["hparams"], args.eval_samples)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(
        {"model_config": model_config, "dataset_config": dataset_config, "hparams": demo["hparams"],
         "params": params, "held_out_loss": {w: {n: round(v, 4) for n, v in grid[w].items()} for w in grid},
         "seconds": round(time.perf_counter() - t0, 1)}, indent=1))
    plot(grid, params, out)
    print(f"wrote {out} and {out.with_suffix('.json')} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
