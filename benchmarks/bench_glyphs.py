"""How much of a ViT demo step is spent drawing its glyphs?

Times, in CPU time on one thread and side by side in one process, drawing a batch of the
ViT demo's glyphs (DEMOS["vit"]'s dataset options) and one training step (forward, backward,
clipping, AdamW) of the demo's ViT on that batch at a few widths; prints the data's share of
each step. Also the cost per sample with every option of the corpus on at 32 x 32.

    python benchmarks/bench_glyphs.py [--batches 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

import flops_fit
from flops_fit.sweeps.demo import DEMOS


def cpu_seconds(fn, repeats: int) -> float:
    fn()
    start = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    demo = DEMOS["vit"]
    batch = demo["sweep"]["batch_size"]
    data = flops_fit.create_dataset("glyphs", "train", **demo["dataset"])
    full = flops_fit.create_dataset("glyphs", "train")
    counter = iter(range(10**9))

    def draw(dataset=data):
        k = next(counter)
        return dataset.get_batch(np.arange(k * batch, (k + 1) * batch))

    drawing = cpu_seconds(draw, args.batches)
    print(f"glyphs, the demo's options: {drawing / batch * 1e6:.1f} us of CPU per sample "
          f"({drawing * 1e3:.2f} ms per batch of {batch})")
    full_cost = cpu_seconds(lambda: draw(full), max(2, args.batches // 4))
    print(f"glyphs, every option at 32 x 32: {full_cost / batch * 1e6:.1f} us of CPU per sample")
    sample = draw()
    model_config = {**demo["model"], "image_size": demo["dataset"]["image_size"],
                    "num_classes": demo["dataset"]["num_classes"]}
    for width in (4, 10, 16, 36):
        model = flops_fit.create_model("vit", width, **model_config)
        optimizer = torch.optim.AdamW(model.parameters(), 1e-3, foreach=True)

        def step(model=model, optimizer=optimizer):
            loss = F.cross_entropy(model(sample["images"]), sample["labels"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

        training = cpu_seconds(step, args.batches)
        print(f"width {width:3d}: step {training * 1e3:.2f} ms, drawing its batch {drawing * 1e3:.2f} ms: "
              f"data {drawing / (drawing + training):.0%} of the step")


if __name__ == "__main__":
    main()
