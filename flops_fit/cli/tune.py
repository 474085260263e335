"""``flops-fit tune SPEC --out DIR``: the learning-rate law of a sweep, before the sweep.

Goes through the lazy public API (``flops_fit.tune``), so ``flops-fit --help`` imports no torch.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import flops_fit
from flops_fit.cli.fit import tracker_options, where_of
from flops_fit.cli.interrupts import interrupted
from flops_fit.errors import OptionError
from flops_fit.store.run_store import check_folder
from flops_fit.sweeps.config import load_config, parse_config
from flops_fit.sweeps.options import parse_floats, parse_ints

# The run files --from reads (fitting.inputs.TABLES, a W&B run file; folders besides), never a sweep file; kept
# here so that `flops-fit --help` imports no fitting
RUN_FILES = (".csv", ".txt", ".tsv", ".jsonl", ".ndjson", ".json", ".parquet", ".wandb")


def _budgets(text: str) -> int | list[float]:
    """``2`` (the sweep's 2 smallest budgets) or ``1e11,2e11`` (these budgets); none given: ``tuning.grid``'s
    default (``DEFAULT_BUDGETS`` spanning ``SPAN``)."""
    return int(text) if text.isdigit() else parse_floats(text)


def _cmd_from_runs(args: argparse.Namespace) -> int:
    """The law of runs the lab swept over rates itself: no training, hparams.json in --out."""
    if args.spec is not None or args.demo is not None:
        raise OptionError("flops-fit tune --from RUNS fits runs already trained: give no SPEC or --demo with it")
    out = check_folder(Path(args.out))
    columns = {f"{n}_col": getattr(args, f"{n}_col") for n in ("params", "tokens", "flops", "budget", "run_id")}
    result = flops_fit.fit_rates(args.from_runs, lr_col=args.lr_col, batch_col=args.batch_col,
                                 nonembedding_col=args.nonembedding_col, model=args.model, bootstrap=args.bootstrap,
                                 metric=args.metric, loss_col=args.loss_col, curve_metric=args.curve_metric,
                                 experiment=args.experiment, where=where_of(args), **columns)
    written = result.write(out)  # first: a refusal to replace another law is the one line printed
    print(result)
    print(f"wrote {written}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    if args.from_runs is not None:
        return _cmd_from_runs(args)
    if (args.spec is None) == (args.demo is None):
        raise OptionError("flops-fit tune needs a sweep file SPEC, --demo MODEL or --from RUNS (one of them)")
    if args.spec is not None and (Path(args.spec).is_dir() or Path(args.spec).suffix.lower() in RUN_FILES):
        raise OptionError(f"{args.spec} holds runs, not a sweep file to train from: to fit the law of runs already "
                          f"trained at several rates, pass --from {args.spec}")
    if args.demo:
        spec, settings = flops_fit.demo_tune_spec(args.demo)
    else:
        spec, settings = args.spec, {}
    if args.tracking is not None:  # as `flops-fit sweep --tracking`: in place of the sweep file's [tracking] table
        config = load_config(spec) if isinstance(spec, (str, Path)) else parse_config(spec, "demo tune")
        spec = dataclasses.replace(config, options=config.options.replace(
            tracking=None if args.tracking == "off" else args.tracking))
    for name in ("budgets", "sizes", "multipliers", "batch_sizes", "beta2s", "stack_runs"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    if args.address and args.executor not in (None, "ray"):
        raise OptionError(f"--address is for the ray executor (this tune uses {args.executor!r}): use --executor ray")
    executor = "ray" if args.address else args.executor
    out = check_folder(Path(args.out))
    try:
        result = flops_fit.tune(spec, out, holdout=args.holdout, bootstrap=args.bootstrap, resume=args.resume,
                                workers=args.workers if args.workers is not None else (2 if args.demo else None), skip_parity=args.skip_parity,
                                skip_preflight=args.skip_preflight, executor=executor,
                                executor_options={"address": args.address} if args.address else None, **settings)
    except KeyboardInterrupt as exc:
        return interrupted(exc, "run the same command with --resume to continue")
    print(result)
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("tune", help="find the learning-rate law of a sweep: its smallest budgets at several rates")
    p.add_argument("spec", nargs="?", help="the sweep file to tune (e.g. examples/sweep.toml in the flops-fit "
                   "repository)")
    p.add_argument("--demo", choices=("gpt", "vit"), help="tune the demo's own setup instead of a sweep file")
    p.add_argument("--out", required=True, help="output folder: its runs, hparams.json and report.html")
    p.add_argument("--budgets", type=_budgets, metavar="K|C1,C2",
                   help="the sweep's K smallest budgets, or these budgets (default: 3 budgets spanning 8x from the "
                   "sweep's smallest, so the tokens' exponent can be told from zero)")
    p.add_argument("--sizes", type=parse_ints, metavar="S1,S2", help="only these of the planned sizes")
    p.add_argument("--multipliers", type=parse_floats, metavar="M1,M2,...",
                   help="multipliers of the sweep's own rate (default 0.25,0.5,1,2,4)")
    p.add_argument("--batch-sizes", type=parse_ints, metavar="B1,B2", help="also sweep these batch sizes")
    p.add_argument("--beta2s", type=parse_floats, metavar="B1,B2", help="also sweep these AdamW beta2 values")
    p.add_argument("--holdout", choices=("largest", "beyond"),
                   help="largest: fit the law without the largest cell and check its prediction there (one more "
                        "run); beyond: train a cell 4x further in tokens than the grid at x0.25-x4 the law's rate")
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples for the intervals (default 200)")
    p.add_argument("--workers", type=int, help="runs trained at once (worker processes; --demo: default 2)")
    p.add_argument("--stack-runs", type=int, metavar="N",
                   help="train up to N of a cell's rates in one program, each still its own run (default: the "
                        "sweep file's stack_runs, 1)")
    p.add_argument("--resume", action="store_true", help="continue the tune stored in the output folder")
    p.add_argument("--executor", help="run on this executor instead of the sweep file's (e.g. local, ray, slurm)")
    p.add_argument("--address", help="Ray cluster to join, e.g. ray://head:10001 (implies --executor ray)")
    p.add_argument("--skip-parity", action="store_true", help="train even if the model fails its parity gate")
    p.add_argument("--tracking", metavar="B1,B2|off", help="log to these tracking backends (tensorboard, mlflow, "
                   "wandb) instead of the sweep file's [tracking] table; off: none")
    p.add_argument("--skip-preflight", action="store_true",
                   help="start the runs without checking the datasets, models, memory and checkpoint folder first")
    own = p.add_argument_group("the law of runs already trained at several rates (--from)")
    own.add_argument("--from", dest="from_runs", metavar="RUNS",
                     help="fit the law of these runs (a CSV, sweep folder or tracker's runs) instead of training: "
                     "each (params, tokens[, batch]) cell's best rate, every form, hparams.json in --out")
    for name in ("params", "tokens", "flops", "budget", "run_id"):
        own.add_argument(f"--{name.replace('_', '-')}-col", default=name, metavar="COLUMN",
                         help=f"column holding {name} (default {name!r})")
    own.add_argument("--loss-col", metavar="COLUMN", help="column holding the held-out metric (default 'loss')")
    own.add_argument("--metric", default="loss", metavar="loss|bpb|error", help="what the runs are compared by")
    own.add_argument("--lr-col", default="lr", metavar="COLUMN", help="column holding each run's peak rate")
    own.add_argument("--batch-col", metavar="COLUMN", help="column holding the batch size, where batches were swept")
    own.add_argument("--nonembedding-col", metavar="COLUMN",
                     help="column holding the non-embedding parameters (Step Law's form)")
    own.add_argument("--model", help="the flops-fit model the law plans for (hparams.json records it; default: any)")
    tracker_options(own)
    p.set_defaults(func=_cmd_tune)
