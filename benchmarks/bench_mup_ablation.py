"""Which part of muP costs loss at width 128? (issue 28 item 5): one muP change undone at a time.

Trains the demo's GPT at ``width`` in muP (base width 16) exactly as ``bench_mup_lr.py`` does
(400 steps of 8 x 64 tokens, the trainer's own ``train``) at the rates 2^k given, with one of:

- ``shipped``: the recipe as it is;
- ``attn_sp``: the standard attention scale 1/sqrt(d) instead of sqrt(d0)/d;
- ``init_sp``: the standard init of the hidden weights (no x (base/width)^1/2);
- ``wd_dec``: the hidden weights' weight decay not scaled up with their lower rate;
- ``emb_lr``: the embeddings' rate divided by width/base too (as the standard parametrization's best has it);
- ``tied_readout``: the tied embedding/readout matrix takes the readout's rule of Tensor Programs V's
  Table 3 (rate / m) and no output multiplier, so the logits still move at the base's speed
  while the input embedding learns no faster than the standard parametrization's best lets it;
- ``embeddings``: ``tied_readout`` with the position embedding at rate / m too;
- ``vectors``: ``embeddings`` with every bias and norm gain at rate / m too (every parameter at
  rate / m: the standard parametrization under the inverse-width rule, with muP's hidden
  initialisation and attention scale).

    python benchmarks/bench_mup_ablation.py VARIANT [--width 128] [--log2-rates -6]
"""

from __future__ import annotations

import argparse
import time

import bench_mup_lr as bench
import torch
from flops_fit.plugins.models import parametrization

from flops_fit.training import loop as trainer

VARIANTS = ("shipped", "attn_sp", "init_sp", "wd_dec", "emb_lr", "tied_readout", "embeddings", "vectors")


def undo(variant: str) -> None:
    """Patch the one muP change ``variant`` names back to the standard parametrization's."""
    if variant == "attn_sp":
        parametrization.MuP.attention_scale = property(lambda self: self.head_size ** -0.5)
    if variant == "init_sp":
        parametrization.MuP.hidden_init = property(lambda self: 1.0)
    if variant in ("tied_readout", "embeddings", "vectors"):
        parametrization.MuP.readout = property(lambda self: 1.0)
    if variant in ("wd_dec", "emb_lr", "tied_readout", "embeddings", "vectors"):
        make = trainer.make_optimizer

        def make_optimizer(model, spec, device):
            opt = make(model, spec, device)
            if variant == "wd_dec":
                for group in opt.param_groups:
                    if group.get("lr_scale", 1.0) != 1.0 and group["weight_decay"]:
                        group["weight_decay"] = spec.weight_decay
            elif variant == "vectors":
                ratio = model.config.mup.ratio
                for group in opt.param_groups:
                    if group.get("lr_scale", 1.0) == 1.0:
                        group.update(lr=spec.lr / ratio, lr_scale=1 / ratio, weight_decay=group["weight_decay"] * ratio)
            else:
                ratio = model.config.mup.ratio
                embeddings = [model.wte.weight] if variant == "tied_readout" else [model.wte.weight, model.wpe.weight]
                for group in opt.param_groups:
                    group["params"] = [p for p in group["params"] if all(p is not e for e in embeddings)]
                opt.add_param_group({"params": embeddings, "lr": spec.lr / ratio, "lr_scale": 1 / ratio,
                                     "weight_decay": spec.weight_decay * ratio})
            return opt

        trainer.make_optimizer = make_optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", help=f"one of {', '.join(VARIANTS)}, several joined by '+' (applied together), "
                        "or 'standard' (the standard parametrization, the reference)")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--log2-rates", type=int, nargs="+", default=[-6])
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = [] if args.variant == "standard" else args.variant.split("+")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}: choose from {', '.join(VARIANTS)} or 'standard'")
    for variant in variants:
        undo(variant)
    run = argparse.Namespace(batch=8, seq_len=64, eval_tokens=16384, steps=400)
    config = bench.MODEL if args.variant == "standard" else {**bench.MODEL, "parametrization": "mup", "base_width": 16}
    spec = bench.base_specs([16, args.width], config, run)[args.width]
    for k in args.log2_rates:
        start = time.process_time()
        loss = bench.held_out_loss(spec, 2.0 ** k, run)
        print(f"{'' if args.variant == 'standard' else 'muP '}{args.variant} width {args.width} lr 2^{k}: held-out loss {loss:.4f} "
              f"({time.process_time() - start:.0f} CPU-s)", flush=True)


if __name__ == "__main__":
    main()
