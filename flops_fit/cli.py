"""The ``flops-fit`` command line.

Listing commands (``plugins``, ``models``, ``datasets``, ``losses``, ``executors``) import
neither torch nor any model: they read registry metadata only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from flops_fit._table import format_table


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def _cmd_plugins(args: argparse.Namespace) -> int:
    from flops_fit.api import list_plugins

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
    from flops_fit.host import get_host

    registry = get_host().registry(kind)
    names = registry.names(args.pattern, qualified=args.qualified)
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


# Modules that add sub-commands: each defines ``add_commands(subparsers)`` and imports
# nothing heavy at module level (``flops-fit --help`` must not import torch).
COMMAND_MODULES: tuple[str, ...] = ("flops_fit.parity.cli_parity", "flops_fit.cli_fit", "flops_fit.cli_sweep")


def build_parser() -> argparse.ArgumentParser:
    from flops_fit import __version__

    parser = argparse.ArgumentParser(
        prog="flops-fit",
        description="Plan, verify and fit compute-optimal (IsoFLOP) scaling-law sweeps.",
    )
    parser.add_argument("--version", action="version", version=f"flops-fit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("plugins", help="list plugins: version, status, hooks, contributions, errors")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_plugins)

    for command, (kind, help_text, columns) in _LISTINGS.items():
        p = sub.add_parser(command, help=help_text)
        p.add_argument("pattern", nargs="?", help="fnmatch pattern, e.g. 'vit*'")
        p.add_argument("--qualified", action="store_true", help="show qualified ids (plugin/name)")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=lambda a, k=kind, c=columns: _list_entries(k, a, c))

    import importlib

    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from flops_fit.errors import FlopsFitError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except FlopsFitError as exc:
        print(f"flops-fit: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
