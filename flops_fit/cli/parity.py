"""``flops-fit parity``: run registered parity cases and print a table of verdicts.

Imports nothing heavy at module level; torch and the references load when the command runs.
"""

from __future__ import annotations

import argparse
import json

from flops_fit.errors import FlopsFitError
from flops_fit.plugin import api
from flops_fit.sweeps.gate import (
    CASE_TIMEOUT_S,
    HOW_TO_VERIFY,
    TIMEOUT_VARIABLE,
    case_timeout,
    family_cases,
    run_case,
)
from flops_fit.tables import format_table


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("parity", help="run parity cases against timm / Hugging Face / torch references")
    p.add_argument("--model", help="only this model's cases (e.g. vit, gpt, attention)")
    p.add_argument("--case", help="only cases matching this fnmatch pattern (e.g. 'hf-*')")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--quick", action="store_true", help="only the quick cases (the sweep gate)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help=f"each case's time limit, after which it is an error and the next runs (default: "
                        f"${TIMEOUT_VARIABLE}, else {CASE_TIMEOUT_S:g})")
    p.set_defaults(func=_cmd_parity)


def _cmd_parity(args: argparse.Namespace) -> int:
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise FlopsFitError("--device cuda: no CUDA device is available here; use --device cpu")
    limit = case_timeout(args.timeout)
    names = api.list_parity_cases(args.case, model=args.model, qualified=True)
    via = ""
    if not names and args.model and not args.case and args.model in api.list_models() and \
            api.model_info(args.model).no_parity is None:  # a preset: its family's cases
        names, via = family_cases(args.model)
    if not names:
        raise FlopsFitError((args.model and not args.case and _caseless_model(args.model)) or (
            f"no parity case matches (model={args.model!r}, case={args.case!r}); "
            f"registered: {', '.join(api.list_parity_cases()) or 'none'}"
        ))
    entries = {name: api.parity_case_info(name) for name in names}
    slow = [n for n, e in entries.items() if args.quick and not e.quick]
    elsewhere = [n for n, e in entries.items() if n not in slow and (args.device not in e.devices or
                                                                     args.dtype not in e.dtypes)]
    if len(slow) + len(elsewhere) == len(names):  # an empty table, exit 0, read as nothing wrong
        raise FlopsFitError(f"none of the {len(names)} matching parity case(s) runs here: " + "; ".join(
            ([f"{len(slow)} not quick (drop --quick)"] if slow else []) +
            ([f"{len(elsewhere)} not for {args.device}, {args.dtype} (see each case's devices and dtypes)"]
             if elsewhere else [])))
    outcomes = [(name, entry, run_case(entry, args.device, args.dtype, timeout_s=limit))
                for name, entry in entries.items() if name not in slow and name not in elsewhere]
    if args.json:
        print(json.dumps([{"id": n, "model": e.model, **o.to_dict()} for n, e, o in outcomes], indent=2, default=str))
    else:
        rows = [[name, entry.model, entry.reference, *_measures(o.report), o.status.upper()]
                for name, entry, o in outcomes]
        headers = ["case", "model", "reference", "max abs", "error/limit", "first failure", "seconds", "verdict"]
        print(format_table(rows, headers))
        if via:
            print(f"{args.model}: {via}")
        for name, _, o in outcomes:
            if o.detail:
                print(f"{name}: {o.detail}")
        for name, _, o in outcomes:
            for option, note in (getattr(o.report, "assumptions", None) or {}).items():
                print(f"{name}: {option} = {note}")
    return 0 if all(o.status in ("passed", "skipped") for _, _, o in outcomes) else 1


def _caseless_model(model: str) -> str:
    """Why a registered model has no case and what to do; "" for a name that is no model."""
    try:
        exempt = api.model_info(model).no_parity
    except FlopsFitError:
        return ""
    if exempt is not None:
        return f"model {model!r} has no parity case, by design: {exempt}"
    return f"model {model!r} has no parity case registered, so a sweep's gate calls it unverified; {HOW_TO_VERIFY}"


def _measures(report: object) -> list[str]:
    """A report's max abs error, error/limit, first failing tensor and seconds; blank where it has
    none (a plugin's report need only have ``passed``)."""
    def number(name: str, form: str) -> str:
        value = getattr(report, name, None)
        return format(value, form) if isinstance(value, (int, float)) else ""

    bad = getattr(report, "first_failure", None)
    return [number("max_abs", ".2e"), number("worst_ratio", ".2f"), getattr(bad, "name", ""), number("seconds", ".2f")]
