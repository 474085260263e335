"""``flops-fit``: the parser, the dispatch, and the boundary where errors become one line.

Any ``FlopsFitError`` is printed as ``flops-fit: error: ...`` with exit status 2 (argparse's
own usage errors exit 2 too); flops-fit's warnings (a skipped plugin, a tracking backend
switched off, a damaged checkpoint skipped) are one line each, in its worker processes too;
output piped into a reader that stops early (``| head``) ends quietly; SIGTERM before a
command's own handling begins is one line, as Ctrl-C is.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import warnings
from collections.abc import Sequence

from flops_fit._version import __version__
from flops_fit.cli import compare, fit, listings, parity, sweep, tune
from flops_fit.cli.interrupts import interrupted, terminate_as_interrupt
from flops_fit.errors import FlopsFitError, show_warning

COMMAND_MODULES = (listings, sweep, tune, fit, compare, parity)


class Parser(argparse.ArgumentParser):
    """argparse with its errors in one line (no usage block above them), naming the command and
    where its options are listed; every command's parser is one (``add_subparsers`` keeps the class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; `{self.prog} --help` lists its options\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="flops-fit",
        description="Plan, verify and fit compute-optimal (IsoFLOP) scaling-law sweeps.",
    )
    parser.add_argument("--version", action="version", version=f"flops-fit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_commands(sub)
    parser.set_defaults(commands=sub.choices)  # each command's own parser, for its own usage line
    return parser


def _unknown(command: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """Unrecognised arguments, said by the command they were given to, with the nearest option of its
    own for each mistyped one (``--bootsrap``: ``--bootstrap``)."""
    options = [o for action in command._actions for o in action.option_strings]
    hints = [near[0] for e in extras if e.startswith("--")
             and (near := difflib.get_close_matches(e.split("=")[0], options, n=1, cutoff=0.75))]
    return f"unrecognized arguments: {' '.join(extras)}" + (f" (did you mean {', '.join(hints)}?)" if hints else "")


def _dash_value(argv: Sequence[str]) -> str | None:
    """A value argparse would take for an unknown option: one that starts with a minus sign but is
    not a plain negative number (``--at -1:1e9``, ``--predict -1e21``), said with the way to pass it."""
    for i, token in enumerate(argv):
        if re.match(r"-\.?\d", token) and not re.fullmatch(r"-\d+|-\d*\.\d+", token):
            option = next((t.split("=")[0] for t in reversed(argv[:i]) if t.startswith("--")), "--OPTION")
            return f"{token!r} starts with a minus sign, so it reads as an option; to pass it, write {option}={token}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    dash = _dash_value(argv)
    if dash is not None:
        print(f"flops-fit: error: {dash}", file=sys.stderr)
        return 2
    args, extras = parser.parse_known_args(argv)
    if extras:  # one line, said by the command they were given to
        command = args.commands.get(args.command) or parser
        try:
            command.error(_unknown(command, extras))
        except SystemExit as exc:
            return int(exc.code)
    args.argv = argv  # the command line as given: a report's provenance records it
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    with warnings.catch_warnings(), terminate_as_interrupt():
        warnings.showwarning = show_warning
        try:
            code = int(args.func(args) or 0)
            sys.stdout.flush()  # a reader gone early shows here, inside the handler, not at exit
            return code
        except FlopsFitError as exc:
            print(f"flops-fit: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:  # before a command's own handling begins (planning, imports)
            return interrupted(exc, "what was saved stays; run the command again")
        except BrokenPipeError:  # `flops-fit status DIR | head`: the reader left, which is not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            return 0


if __name__ == "__main__":
    sys.exit(main())
