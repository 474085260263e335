"""``flops-fit compare SWEEP_A SWEEP_B``: recipe B's effective compute multiplier over recipe A."""

from __future__ import annotations

import argparse
from pathlib import Path

import flops_fit
from flops_fit.cli.fit import tracker_options, where_of


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("compare", help="compare two recipes: B's effective compute multiplier over A, "
                              "with intervals")
    p.add_argument("a", metavar="SWEEP_A", help="recipe A: a sweep folder (runs.sqlite) or a CSV")
    p.add_argument("b", metavar="SWEEP_B", help="recipe B: a sweep folder (runs.sqlite) or a CSV")
    p.add_argument("--method", default="parametric", metavar="METHOD",
                   help="the approach both recipes are fitted with (default parametric; see `flops-fit fit`)")
    p.add_argument("--target", type=float, metavar="C",
                   help="the budget to answer at besides the swept ones (default 10x the largest swept)")
    p.add_argument("--budgets", type=float, nargs="+", metavar="C",
                   help="budgets to compare at (default: every budget either sweep swept)")
    p.add_argument("--scale", default="params", metavar="params|non_embedding_params|flops_per_token",
                   help="what N is (default params)")
    p.add_argument("--metric", default="loss", metavar="loss|bpb|error",
                   help="what the laws fit: loss (default), bpb (bits per byte: across tokenizers) or error "
                        "(image classifiers' held-out top-1 error)")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed of A (B's is seed + 1; default 0)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--out", metavar="DIR", help="write compare.html and the plot (PNG, SVG) into DIR")
    p.add_argument("--json", action="store_true", help="print JSON")
    for name in ("params", "tokens", "flops", "budget"):
        p.add_argument(f"--{name}-col", default=name, metavar="COLUMN", help=f"column holding {name} (default {name!r})")
    p.add_argument("--loss-col", metavar="COLUMN", help="column holding the metric (default: 'loss')")
    tracker_options(p)
    for side in "ab":
        p.add_argument(f"--where-{side}", nargs="+", metavar="COLUMN=VALUE",
                       help=f"besides --where, keep only these runs for recipe {side.upper()}: two recipes logged in "
                       "one table (flops-fit compare runs.csv runs.csv --where-a recipe=base --where-b recipe=new)")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    result = flops_fit.compare(args.a, args.b, args.method, target=args.target, budgets=args.budgets,
                               bootstrap=args.bootstrap, seed=args.seed, level=args.level, scale=args.scale,
                               metric=args.metric, params_col=args.params_col, tokens_col=args.tokens_col,
                               flops_col=args.flops_col, budget_col=args.budget_col, loss_col=args.loss_col,
                               curve_metric=args.curve_metric, experiment=args.experiment, where=where_of(args),
                               where_a=where_of(args, "where_a"), where_b=where_of(args, "where_b"))
    print(result.to_json() if args.json else result.summary())
    if args.out:
        path = flops_fit.write_comparison(result, Path(args.out))
        if not args.json:
            print(f"report written to {path}")
    return 0
