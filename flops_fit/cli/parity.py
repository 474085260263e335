"""``flops-fit parity``: run registered parity cases and print a table of verdicts.

Imports nothing heavy at module level; torch and the references load when the command runs.
"""

from __future__ import annotations

import argparse
import json

from flops_fit.errors import FlopsFitError
from flops_fit.plugin import api
from flops_fit.sweeps.gate import run_case
from flops_fit.tables import format_table


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("parity", help="run parity cases against timm / Hugging Face / torch references")
    p.add_argument("--model", help="only this model's cases (e.g. vit, gpt, attention)")
    p.add_argument("--case", help="only cases matching this fnmatch pattern (e.g. 'hf-*')")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--quick", action="store_true", help="only the quick cases (the sweep gate)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_parity)


def _cmd_parity(args: argparse.Namespace) -> int:
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise FlopsFitError("--device cuda: no CUDA device is available here; use --device cpu")
    names = api.list_parity_cases(args.case, model=args.model, qualified=True)
    if not names:
        raise FlopsFitError(
            f"no parity case matches (model={args.model!r}, case={args.case!r}); "
            f"registered: {', '.join(api.list_parity_cases()) or 'none'}"
        )
    outcomes = []
    for name in names:
        entry = api.parity_case_info(name)
        if args.quick and not entry.quick:
            continue
        if args.device not in entry.devices or args.dtype not in entry.dtypes:
            continue
        outcomes.append((name, entry, run_case(entry, args.device, args.dtype)))
    if args.json:
        print(json.dumps([{"id": n, "model": e.model, **o.to_dict()} for n, e, o in outcomes], indent=2, default=str))
    else:
        rows = []
        for name, entry, o in outcomes:
            r = o.report
            bad = r.first_failure if r is not None else None
            rows.append([
                name, entry.model, entry.reference, f"{r.max_abs:.2e}" if r is not None else "",
                f"{r.worst_ratio:.2f}" if r is not None else "", bad.name if bad else "",
                f"{r.seconds:.2f}" if r is not None else "", o.status.upper(),
            ])
        headers = ["case", "model", "reference", "max abs", "error/limit", "first failure", "seconds", "verdict"]
        print(format_table(rows, headers))
        for name, _, o in outcomes:
            if o.status in ("failed", "error"):
                print(f"{name}: {o.detail}")
        for name, _, o in outcomes:
            for option, note in (o.report.assumptions if o.report is not None else {}).items():
                print(f"{name}: {option} = {note}")
    return 0 if all(o.status in ("passed", "skipped") for _, _, o in outcomes) else 1
