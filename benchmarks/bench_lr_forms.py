"""Refit a tune's stored cells with every form of the learning-rate law (issue 28 item 1).

Reads a tune's hparams.json (its cells' rates and losses), fits each cell's optimum again,
then every form of the law (``flops_fit.tuning.forms``) with 95% bootstrap intervals and the
held-out score, and prints which exponents the grid identifies. No training: it shows what a
finished tune's grid can and cannot tell, e.g. the GPT demo's shipped tune (2 budgets 2x apart):

    python benchmarks/bench_lr_forms.py flops_fit/sweeps/demo_hparams/gpt.json
"""

from __future__ import annotations

import argparse
import json

from flops_fit.tables import format_table
from flops_fit.tuning.cells import fit_cell
from flops_fit.tuning.forms import Point, choose, fit_forms, form_rows
from flops_fit.tuning.law import fit_law


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hparams", help="a tune's hparams.json")
    parser.add_argument("--bootstrap", type=int, default=400)
    args = parser.parse_args()
    data = json.loads(open(args.hparams).read())
    scale = data["law"]["scale"]
    points = []
    for c in data["cells"]:
        fit = fit_cell(c["rates"], c["losses"], bootstrap=args.bootstrap)
        if not (c.get("in_law", True) and fit.ok):
            continue
        values = {"tokens": float(c["tokens"]), "params": float(c["params"]), "flops": float(c["flops"]),
                  "nonembedding": float(c.get("nonembedding", c["params"])), "batch": float(c["batch_size"]),
                  scale: float(c["scale"])}
        points.append(Point(values, fit.lr_opt, fit.samples, float(c["flops"]), fit.loss_at, fit.loss_opt))
    budgets = sorted({round(p.budget, -8) for p in points})

    def marin(subset, bootstrap=0):
        return fit_law([p.values[scale] for p in subset], [p.values["tokens"] for p in subset],
                       [p.values["batch"] for p in subset], [p.lr_opt for p in subset], [p.samples for p in subset],
                       scale=scale, bootstrap=bootstrap)[0]

    forms = fit_forms(points, marin(points, args.bootstrap), marin, batch_swept=False, bootstrap=args.bootstrap)
    print(f"{len(points)} cells at budgets {', '.join(f'{b:.3g}' for b in budgets)} "
          f"(span x{budgets[-1] / budgets[0]:.2f})")
    print(format_table(form_rows(forms), ["form", "exponent of", "estimate [95%]", "identified", "held out"]))
    print("chosen:", choose(forms)[1])


if __name__ == "__main__":
    main()
