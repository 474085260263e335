"""Listing commands: ``plugins``, ``models``, ``datasets``, ``losses``, ``executors``.

They read registry metadata only: no torch, no model is built.
"""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Sequence
from typing import Any

from flops_fit.plugin.api import list_plugins
from flops_fit.plugin.host import get_host
from flops_fit.tables import format_table


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def _cmd_plugins(args: argparse.Namespace) -> int:
    plugins = list_plugins()
    if args.json:
        _print_json([p.to_dict() for p in plugins])
        return 0
    rows = []
    for p in plugins:
        contributed = ", ".join(f"{k}: {len(v)}" for k, v in sorted(p.contributed.items()))
        rows.append([
            p.name, p.version or "", "yes" if p.builtin else "no", p.status,
            ", ".join(h.removeprefix("register_") for h in p.hooks), contributed,
        ])
    print(format_table(rows, ["plugin", "version", "built-in", "status", "hooks", "contributed"]))
    for p in plugins:
        if p.error:
            print(f"{p.name}: {p.status}{' at ' + p.stage if p.stage else ''}: {p.error}")
    return 0


def _list_entries(kind: str, args: argparse.Namespace, columns: Sequence[tuple[str, str]]) -> int:
    registry = get_host().registry(kind)
    pattern = args.pattern
    if pattern and not any(c in pattern for c in "*?["):  # part of a name: `flops-fit models vit_`
        pattern = f"*{pattern}*"
    names = registry.names(pattern, qualified=args.qualified)
    if args.pattern and not names and not args.json:  # a typo, most often: the nearest names said
        close = difflib.get_close_matches(args.pattern, registry.names(), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        print(f"no {kind} matches {args.pattern!r}{hint}; `flops-fit {kind}s` lists them all")
        return 0
    items = [(n, registry.lookup(n)) for n in names]
    if args.json:
        _print_json([
            {"name": n, "id": r.qualified_id, "plugin": r.plugin.name, **r.entry.to_dict()} for n, r in items
        ])
        return 0
    rows = [[n, r.plugin.name] + [_show(getattr(r.entry, attr)) for _, attr in columns] for n, r in items]
    print(format_table(rows, ["name", "plugin"] + [title for title, _ in columns]))
    return 0


def _show(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    return "" if value is None else str(value)


_LISTINGS: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    "models": ("model", "list model families and presets", [
        ("task", "task"), ("size", "size_param"), ("default size", "default_size"),
        ("FLOPs per", "flops_unit"), ("loss", "default_loss"), ("datasets", "default_datasets"),
    ]),
    "datasets": ("dataset", "list datasets", [
        ("modality", "modality"), ("splits", "splits"), ("batch", "batch_format"),
    ]),
    "losses": ("loss", "list losses", [("task", "task"), ("description", "description")]),
    "executors": ("executor", "list sweep executors", [("description", "description")]),
}



def add_commands(sub) -> None:
    p = sub.add_parser("plugins", help="list plugins: version, status, hooks, contributions, errors")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_plugins)

    for command, (kind, help_text, columns) in _LISTINGS.items():
        p = sub.add_parser(command, help=help_text)
        p.add_argument("pattern", nargs="?", help="a name or part of one (vit_), or an fnmatch pattern ('vit*')")
        p.add_argument("--qualified", action="store_true", help="show qualified ids (plugin/name)")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=lambda a, k=kind, c=columns: _list_entries(k, a, c))
