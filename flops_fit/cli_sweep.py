"""Sweep commands: ``plan``, ``sweep``, ``status`` and ``demo`` (nothing heavy at import)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flops_fit.errors import FlopsFitError


def _budgets(text: str) -> list[float]:
    try:
        return [float(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets must be comma-separated numbers such as 1e12,3e12, got {text!r}") from None


def _plan_from_args(args: argparse.Namespace):
    from flops_fit.planner import plan
    from flops_fit.sweep_config import ConfigError, load_config

    options: dict[str, Any] = load_config(args.config).plan_options if args.config else {}
    for name in ("model", "dataset", "budgets", "sizes_per_budget", "span", "batch_size", "seq_len",
                 "flops_accounting", "tokens_per_param", "min_steps"):
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    if "model" not in options or "budgets" not in options:
        raise ConfigError("flops-fit plan needs --model and --budgets (or a CONFIG.toml that sets them)")
    return plan(**options)


def _cmd_plan(args: argparse.Namespace) -> int:
    print(_plan_from_args(args))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from flops_fit.planner import plan
    from flops_fit.sweep_config import load_config
    from flops_fit.sweeps import run_plan

    config = load_config(args.config)
    the_plan = plan(**config.plan_options)
    print(the_plan, file=sys.stderr)
    options = dict(config.executor_options)
    executor = args.executor or config.executor
    if args.workers is not None:
        options["workers"] = args.workers
    if args.address:
        if executor != "ray":
            raise FlopsFitError(f"--address is for the ray executor (this sweep uses {executor!r}): add --executor ray")
        options["address"] = args.address
    workers = options.pop("workers", 1)
    try:
        result = run_plan(
            the_plan, args.out or config.out, resume=args.resume, executor=executor, workers=workers,
            executor_options=options, skip_parity=args.skip_parity, retry_failed=args.retry_failed,
        )
    except KeyboardInterrupt:
        return 130
    return _print_status(result.out_dir)


def _print_status(out_dir) -> int:
    from flops_fit._table import format_table
    from flops_fit.store import RunStore

    with RunStore(out_dir) as store:
        counts = store.counts()
        parity = store.get_meta("parity") or {"status": "not run"}
        frame = store.runs_frame()
        total = sum(counts.values())
    print(f"{out_dir}: {total} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    print(f"parity gate: {parity['status']}" + (f" ({parity['reason'].splitlines()[0]})" if parity.get("reason") else ""))
    rows = [
        [f"{r.budget:.2e}", r.size, f"{r.params:,}", f"{r.tokens:,}", r.status,
         "" if r.status != "done" else f"{r.loss:.4f}", f"{r.timings.get('total_s', 0):.1f}s", r.error or ""]
        for r in frame.itertuples()
    ]
    if rows:
        print(format_table(rows, ["budget", "size", "params", "tokens", "status", "loss", "time", "error"]))
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    return _print_status(args.out_dir)


def _cmd_demo(args: argparse.Namespace) -> int:
    from flops_fit.demo import run_demo

    try:
        run_demo(args.model, args.out or f"demo-out/{args.model}", workers=args.workers)
    except KeyboardInterrupt:
        return 130
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("plan", help="print the runs a sweep would train (no training)")
    p.add_argument("config", nargs="?", help="a sweep CONFIG.toml (flags override it)")
    p.add_argument("--model")
    p.add_argument("--dataset")
    p.add_argument("--budgets", type=_budgets, help="comma-separated FLOPs, e.g. 1e12,3e12,1e13")
    p.add_argument("--sizes-per-budget", type=int)
    p.add_argument("--span", type=float, help="factor in parameters spanned around the prior optimum")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--tokens-per-param", type=float)
    p.add_argument("--min-steps", type=int)
    p.add_argument("--flops-accounting", choices=("model", "6nd"))
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("sweep", help="run a sweep from CONFIG.toml into an output folder")
    p.add_argument("config", help="sweep configuration (see examples/sweep.toml)")
    p.add_argument("--out", help="output folder (default: [sweep] out, or flops-fit-out)")
    p.add_argument("--resume", action="store_true", help="continue the sweep stored in the output folder")
    p.add_argument("--workers", type=int, help="runs trained at once (worker processes)")
    p.add_argument("--executor", help="run on this executor instead of the config's (e.g. local, ray)")
    p.add_argument("--address", help="Ray cluster to join, e.g. ray://head:10001 (default RAY_ADDRESS)")
    p.add_argument("--skip-parity", action="store_true", help="train even if the model fails its parity gate")
    p.add_argument("--retry-failed", action="store_true", help="train failed runs again")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("status", help="show a sweep's runs and their state")
    p.add_argument("out_dir", help="the sweep's output folder")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("demo", help="run the CPU demo sweep end to end (a few minutes)")
    p.add_argument("--model", choices=("gpt", "vit"), default="gpt")
    p.add_argument("--out", help="output folder (default demo-out/MODEL)")
    p.add_argument("--workers", type=int, default=2, help="runs trained at once (worker processes; default 2)")
    p.set_defaults(func=_cmd_demo)
